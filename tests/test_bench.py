"""`kubectl triton bench` against a real tritonserver on loopback. The python-backend models sleep 20 ms
per execute whatever the batch size, so batching pays off: `batched` (dynamic batching) must scale with
concurrency, `fixedcost` (no batching, one instance) must stay near 50 infer/s with latency growing."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import struct
import threading
from pathlib import Path

import pytest

from kubectl_triton.adapters.tritonserver import TritonServer
from kubectl_triton.errors import InputError
from kubectl_triton.perf import inputs, loadgen
from kubectl_triton.perf.target import HttpTarget, Split, split, totals

CONFIG = """# a model whose execute costs 20 ms whatever the batch size
name: "{name}"
backend: "python"
max_batch_size: 32
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }}
]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}"""
MODEL_PY = """import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.02)  # fixed cost per execute, whatever the batch size
        {fail}
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(
            r, "INPUT0").as_numpy())]) for r in requests]
"""
MODELS = {"fixedcost": ("", ""), "batched": ("dynamic_batching { }\n", ""),
          "failing": ("", "raise pb_utils.TritonModelException('tokenizer is missing')")}
FAST = ("--duration", "1s", "--warmup", "0.2s")


def config_text(name: str) -> str:
    return CONFIG.format(name=name, extra=MODELS[name][0])


def make_repo(root: Path, names: tuple[str, ...] = tuple(MODELS)) -> Path:
    """A model repository with the fixed-cost python models."""
    for name in names:
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config_text(name))
        (root / name / "1" / "model.py").write_text(MODEL_PY.format(fail=MODELS[name][1] or "pass"))
    return root


def explicit_server(root: Path, names: tuple[str, ...] = tuple(MODELS)) -> TritonServer:
    """tritonserver in explicit model-control mode with `names` loaded (what tune needs)."""
    return TritonServer(make_repo(root, names), model_control_mode="explicit",
                        extra_args=[f"--load-model={n}" for n in names])


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    with explicit_server(tmp_path_factory.mktemp("models")) as server:
        server.wait_ready(60)
        yield server


def _bench(run_cli, server, model: str, levels: str, *extra: str) -> dict:
    res = run_cli("bench", model, "--url", server.http_url, "--concurrency", levels, *FAST, "-o", "json", *extra)
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def test_batching_model_scales_with_concurrency(run_cli, triton):
    doc = _bench(run_cli, triton, "batched", "1,4,16")
    assert doc["model"] == "batched"
    rows = doc["results"]
    assert [r["concurrency"] for r in rows] == [1, 4, 16]
    for r in rows:
        assert set(r) >= {"concurrency", "throughput", "p50_ms", "p90_ms", "p99_ms", "queue_us", "compute_us"}
        assert 20 <= r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"] < 1000
        assert r["compute_us"] >= 19_000 and r["queue_us"] is not None and r["queue_us"] >= 0
    tput = [r["throughput"] for r in rows]
    assert 25 <= tput[0] <= 52  # one request per 20 ms execute
    assert tput[1] > 1.5 * tput[0] and tput[2] > 1.5 * tput[1], tput  # batches grow with concurrency
    assert rows[0]["batch"] == pytest.approx(1.0) and rows[2]["batch"] > 4


def test_no_batching_saturates_and_latency_grows(run_cli, triton):
    rows = _bench(run_cli, triton, "fixedcost", "1,4")["results"]
    assert all(25 <= r["throughput"] <= 52 for r in rows), rows  # at most one execute per 20 ms
    assert rows[1]["p50_ms"] > 3 * rows[0]["p50_ms"]  # four clients share one 20 ms slot
    assert rows[1]["queue_us"] > 40_000 > rows[0]["queue_us"]  # the wait is Triton's queue, not compute
    assert rows[1]["batch"] == pytest.approx(1.0)


def test_text_table_and_grpc(run_cli, triton):
    res = run_cli("bench", "batched", "--url", f"127.0.0.1:{triton.grpc_port}", "--protocol", "grpc",
                  "--concurrency", "8", *FAST)
    assert res.exit_code == 0, res.stderr
    header, row = res.stdout.strip().splitlines()
    assert header.split() == ["CONCURRENCY", "THROUGHPUT/S", "P50_MS", "P90_MS", "P99_MS", "QUEUE_US",
                              "COMPUTE_US", "BATCH"]
    assert row.split()[0] == "8" and float(row.split()[1]) > 100


def test_input_data_file(run_cli, triton, tmp_path):
    data = tmp_path / "inputs.json"
    data.write_text(json.dumps({"data": [{"INPUT0": [1, 2, 3, 4], "TEXT": ["hello"]},
                                         {"INPUT0": {"content": [5, 6, 7, 8], "shape": [1, 4]}, "TEXT": ["x"]}]}))
    doc = _bench(run_cli, triton, "fixedcost", "1", "--input-data", str(data))
    assert doc["results"][0]["requests"] > 10
    data.write_text(json.dumps({"INPUT0": [1, 2, 3, 4]}))
    res = run_cli("bench", "fixedcost", "--url", triton.http_url, "--input-data", str(data), *FAST)
    assert res.exit_code == 2 and res.stderr.strip() == f"error: {data}: entry 0: input 'TEXT' is missing"


def test_failures_are_one_line(run_cli, triton):
    res = run_cli("bench", "failing", "--url", triton.http_url, "--concurrency", "1", *FAST)
    assert res.exit_code == 1 and "tokenizer is missing" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("bench", "nosuch", "--url", triton.http_url)
    assert res.exit_code == 2 and res.stderr.startswith("error: model 'nosuch' at http://127.0.0.1:")
    res = run_cli("bench", "fixedcost", "--url", "http://127.0.0.1:9", *FAST)
    assert res.exit_code == 2 and "cannot reach Triton at http://127.0.0.1:9" in res.stderr
    res = run_cli("bench", "fixedcost", "--url", triton.http_url, "--concurrency", "0")
    assert res.exit_code == 2 and "--concurrency" in res.stderr


# -- pure parts ------------------------------------------------------------------------------------------

def test_inputs_from_config():
    cfg = {"name": "m", "max_batch_size": "8", "input": [
        {"name": "ids", "data_type": "TYPE_INT64", "dims": ["-1"]},
        {"name": "text", "data_type": "TYPE_STRING", "dims": [2]},
        {"name": "mask", "data_type": "TYPE_BOOL", "dims": [3], "optional": True}]}
    specs = inputs.input_specs(cfg)
    assert [(s["name"], s["datatype"], s["shape"]) for s in specs] == [("ids", "INT64", (1, 1)),
                                                                       ("text", "BYTES", (1, 2))]
    req = inputs.generate(specs, variants=2)
    assert len(req) == 2 and len(req[0][0].data) == 8
    text = req[0][1].data
    n = int.from_bytes(text[:4], "little")
    assert text[4:4 + n].decode() in inputs.CORPUS


def test_input_file_with_perf_analyzers_b64(tmp_path):
    specs = inputs.input_specs({"name": "m", "max_batch_size": 0, "input": [
        {"name": "x", "data_type": "TYPE_FP32", "dims": [2]}, {"name": "s", "data_type": "TYPE_STRING", "dims": [1]}]})
    x = struct.pack("<2f", 1.5, -2.0)
    s = (3).to_bytes(4, "little") + b"abc"
    data = tmp_path / "in.json"
    data.write_text(json.dumps({"data": [{"x": {"b64": base64.b64encode(x).decode()},
                                          "s": {"b64": base64.b64encode(s).decode()}}]}))
    (req,) = inputs.from_file(data, specs)
    assert [(t.name, t.shape, t.data) for t in req] == [("x", (2,), x), ("s", (1,), s)]  # the bytes as given
    for bad, words in ((x[:4], "b64 holds 4 bytes, shape [2] of FP32 needs 8"), (b"\x00", None)):
        data.write_text(json.dumps({"data": [{"x": {"b64": base64.b64encode(bad).decode()}, "s": ["a"]}]}))
        with pytest.raises(InputError) as err:
            inputs.from_file(data, specs)
        assert err.value.message.startswith(f"{data}: entry 0: input 'x': ") and (words or "b64") in err.value.message
    data.write_text(json.dumps({"data": [{"x": {"content": [1, 2], "shape": "x"}, "s": ["a"]}]}))
    with pytest.raises(InputError, match="entry 0: input 'x'"):
        inputs.from_file(data, specs)


def test_an_endpoint_that_is_not_tritons_http_is_one_line():
    """The gRPC port answers HTTP/1.1 with an HTTP/2 frame: http.client fails to parse it."""
    srv = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        with contextlib.suppress(OSError):
            conn, _ = srv.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(bytes.fromhex("000006040000000000000500004000"))
    t = threading.Thread(target=answer, daemon=True)
    t.start()
    try:
        with pytest.raises(InputError) as err:
            HttpTarget(f"http://127.0.0.1:{srv.getsockname()[1]}", "m").config()
        assert "does not answer as Triton's HTTP endpoint" in err.value.message and "--protocol grpc" in err.value.hint
    finally:
        srv.close()
        t.join(5)
    with pytest.raises(InputError, match="the port must be a number from 1 to 65535"):
        HttpTarget("http://127.0.0.1:99999", "m")


def test_percentiles_and_split():
    assert loadgen.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5 and loadgen.percentile([], 99) == 0.0
    res = loadgen.summarize(4, [0.01] * 50 + [0.03] * 50, 2.0, Split(100, 5.0, 20.0, 4.0))
    assert res.throughput == 50 and res.p50_ms == pytest.approx(20) and res.p99_ms == pytest.approx(30)
    doc = {"model_stats": [{"execution_count": 10, "inference_count": 40, "inference_stats": {
        "success": {"count": "40", "ns": 0}, "queue": {"count": 40, "ns": 4_000_000},
        "compute_input": {"ns": 0}, "compute_infer": {"ns": 800_000_000}, "compute_output": {"ns": 0}}}]}
    zero = totals({"model_stats": []})
    sp = split(zero, totals(doc))
    assert (sp.count, sp.queue_us, sp.compute_us, sp.batch) == (40, 100.0, 20_000.0, 4.0)
    assert split(None, totals(doc)).queue_us is None
    # a snapshot taken between an execution's count and its inferences': a batch is never below one inference
    torn = dict(totals(doc) or {}, executions=41)
    assert split(zero, torn).batch == 1.0 and split(zero, dict(torn, executions=9)).batch == pytest.approx(40 / 9)
