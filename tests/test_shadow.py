"""Shadow repositories: configs rewritten through Triton's schema, stubs that the real server serves."""

from __future__ import annotations

import json
import textwrap
import urllib.request
from pathlib import Path

import pytest

from kubectl_triton.adapters.shadow import build_shadow, shadow_config, stub_path
from kubectl_triton.errors import ToolMissing
from kubectl_triton.formats import pbtxt

ONNX = textwrap.dedent("""\
    name: "classifier"
    platform: "onnxruntime_onnx"
    default_model_filename: "model.onnx"
    max_batch_size: 32
    input [ { name: "image" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, -1, -1 ] } ]
    output [ { name: "probs" data_type: TYPE_INT64 dims: [ 1000 ] label_filename: "labels.txt" },
             { name: "label" data_type: TYPE_STRING dims: [ 1 ] } ]
    dynamic_batching { preferred_batch_size: [ 8, 16, 32 ] max_queue_delay_microseconds: 200 }
    instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] }, { kind: KIND_CPU count: 1 } ]
    parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }
    parameters { key: "intra_op_thread_count" value: { string_value: "4" } }
    model_repository_agents { agents [ { name: "checksum" } ] }
    """)

TRTLLM = textwrap.dedent("""\
    name: "tensorrt_llm"
    backend: "tensorrtllm"
    max_batch_size: 8
    model_transaction_policy { decoupled: true }
    input [ { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] allow_ragged_batch: true },
            { name: "input_lengths" data_type: TYPE_INT32 dims: [ 1 ] reshape: { shape: [ ] } },
            { name: "request_output_len" data_type: TYPE_INT32 dims: [ 1 ] reshape: { shape: [ ] } },
            { name: "streaming" data_type: TYPE_BOOL dims: [ 1 ] reshape: { shape: [ ] } optional: true } ]
    output [ { name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] },
             { name: "sequence_length" data_type: TYPE_INT32 dims: [ -1 ] },
             { name: "cum_log_probs" data_type: TYPE_FP32 dims: [ -1 ] } ]
    instance_group [ { count: 1 kind: KIND_CPU } ]
    parameters { key: "gpt_model_path" value: { string_value: "/engines/llama3" } }
    parameters { key: "batching_strategy" value: { string_value: "inflight_fused_batching" } }
    """)

ENSEMBLE = textwrap.dedent("""\
    name: "pipeline"
    platform: "ensemble"
    max_batch_size: 32
    input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] } ]
    output [ { name: "LABEL" data_type: TYPE_STRING dims: [ 1 ] } ]
    ensemble_scheduling { step [ {
      model_name: "classifier" model_version: -1
      input_map { key: "image" value: "IMAGE" }
      output_map { key: "label" value: "LABEL" }
    } ] }
    """)

TOKENIZER = textwrap.dedent("""\
    name: "tokenizer"
    backend: "python"
    max_batch_size: 0
    input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
    output [ { name: "LEN" data_type: TYPE_INT32 dims: [ 1 ] } ]
    instance_group [ { kind: KIND_GPU } ]
    """)
TOKENIZER_PY = textwrap.dedent("""\
    import numpy as np
    import triton_python_backend_utils as pb_utils
    from helper import length

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for r in requests:
                text = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy()[0]
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("LEN", np.array([length(text)], np.int32))]))
            return out
    """)  # noqa: E501

DECOUPLED = textwrap.dedent("""\
    name: "streamer"
    backend: "vllm"
    max_batch_size: 0
    model_transaction_policy { decoupled: true }
    input [ { name: "prompt" data_type: TYPE_STRING dims: [ 1 ] } ]
    output [ { name: "text" data_type: TYPE_STRING dims: [ -1 ] } ]
    """)


def write_repo(root: Path) -> Path:
    """A repository with an ONNX classifier, an ensemble, a python tokenizer (own files), a TRT-LLM
    engine, a decoupled python-based backend, a two-version model and an unparsable config."""
    files = {
        "classifier/config.pbtxt": ONNX,
        "pipeline/config.pbtxt": ENSEMBLE,
        "tokenizer/config.pbtxt": TOKENIZER,
        "tokenizer/1/model.py": TOKENIZER_PY,
        "tokenizer/1/helper.py": "def length(text):\n    return len(text)\n",
        "tensorrt_llm/config.pbtxt": TRTLLM,
        "streamer/config.pbtxt": DECOUPLED,
        "versioned/config.pbtxt": ONNX.replace('"classifier"', '"versioned"'),
        "versioned/1/model.onnx": "weights",
        "versioned/3/model.onnx": "weights",
        "broken/config.pbtxt": 'name: "broken"\nmax_batch_size: eight\n',
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


ECHO_STUBS = {"tensorrtllm": str(stub_path("tensorrtllm_echo"))}


def test_shadow_config_keeps_io_and_runs_on_cpu() -> None:
    original = pbtxt.parse(ONNX)
    shadow = shadow_config(original)
    kinds = pbtxt.schema().ModelInstanceGroup.Kind
    assert (shadow.backend, shadow.platform, shadow.default_model_filename) == ("python", "", "")
    for field in ("input", "output", "max_batch_size", "dynamic_batching", "name"):
        assert getattr(shadow, field) == getattr(original, field), field
    assert [(g.kind, list(g.gpus), g.count) for g in shadow.instance_group] == [
        (kinds.KIND_CPU, [], 2), (kinds.KIND_CPU, [], 1)]
    assert "EXECUTION_ENV_PATH" not in shadow.parameters
    assert shadow.parameters["intra_op_thread_count"].string_value == "4"
    assert not shadow.model_repository_agents.agents
    assert original.platform == "onnxruntime_onnx"  # the input is not modified
    assert [g.count for g in shadow_config(original, max_instances=1).instance_group] == [1, 1]


def test_shadow_keeps_gpu_ids_that_are_invalid_on_every_host() -> None:
    config = pbtxt.parse('name: "m" backend: "onnxruntime" '
                         'instance_group [ { kind: KIND_GPU gpus: [ -1 ] } ]')
    group = shadow_config(config).instance_group[0]
    assert list(group.gpus) == [-1]


def test_build_shadow_layout(tmp_path: Path) -> None:
    src = write_repo(tmp_path / "src")
    dest = tmp_path / "shadow"
    build_shadow(src, dest, stubs=ECHO_STUBS)
    generic = stub_path("generic").read_text()
    assert (dest / "classifier" / "1" / "model.py").read_text() == generic
    assert (dest / "classifier" / "labels.txt").read_text() == ""
    assert sorted(p.name for p in (dest / "versioned").iterdir() if p.is_dir()) == ["1", "3"]
    assert not (dest / "versioned" / "1" / "model.onnx").exists()
    assert (dest / "pipeline" / "config.pbtxt").read_text() == ENSEMBLE
    assert (dest / "pipeline" / "1").is_dir()
    assert (dest / "broken" / "config.pbtxt").read_text() == (src / "broken" / "config.pbtxt").read_text()
    assert (dest / "tensorrt_llm" / "1" / "model.py").read_text() == stub_path("tensorrtllm_echo").read_text()
    assert (dest / "tokenizer" / "1" / "model.py").read_text() == generic  # keep_python=False
    written = pbtxt.load(dest / "classifier" / "config.pbtxt")
    assert written == shadow_config(pbtxt.parse(ONNX))


def test_build_shadow_keeps_unknown_platforms_and_policy_versions(tmp_path: Path) -> None:
    """A platform no backend serves is copied as written (Triton refuses it on every host); a model committed
    without version folders gets those its `specific` policy names, else `1/`."""
    io = ('input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
          'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')
    configs = {"legacy": 'platform: "custom"\n' + io,
               "pinned": 'backend: "python"\nversion_policy { specific { versions: [ 3, 2 ] } }\n' + io,
               "latest": 'backend: "python"\nversion_policy { latest { num_versions: 2 } }\n' + io}
    for name, text in configs.items():
        (tmp_path / "src" / name).mkdir(parents=True)
        (tmp_path / "src" / name / "config.pbtxt").write_text(text)
    build_shadow(tmp_path / "src", tmp_path / "shadow")
    dest = tmp_path / "shadow"
    assert (dest / "legacy" / "config.pbtxt").read_text() == configs["legacy"]
    assert sorted(p.name for p in (dest / "pinned").iterdir() if p.is_dir()) == ["2", "3"]
    assert (dest / "pinned" / "2" / "model.py").read_text() == stub_path("generic").read_text()
    assert sorted(p.name for p in (dest / "latest").iterdir() if p.is_dir()) == ["1"]


def test_build_shadow_keep_python_keeps_the_models_own_files(tmp_path: Path) -> None:
    src = write_repo(tmp_path / "src")
    build_shadow(src, tmp_path / "shadow", keep_python=True)
    assert (tmp_path / "shadow" / "tokenizer" / "1" / "model.py").read_text() == TOKENIZER_PY
    assert (tmp_path / "shadow" / "tokenizer" / "1" / "helper.py").is_file()
    kinds = pbtxt.schema().ModelInstanceGroup.Kind
    tokenizer = pbtxt.load(tmp_path / "shadow" / "tokenizer" / "config.pbtxt")
    assert tokenizer.instance_group[0].kind == kinds.KIND_CPU
    # python-based but not python: generic stub
    streamer = tmp_path / "shadow" / "streamer" / "1" / "model.py"
    assert streamer.read_text() == stub_path("generic").read_text()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    from kubectl_triton.adapters.tritonserver import TritonServer, find_install

    try:
        find_install()
    except ToolMissing as err:
        pytest.skip(err.message)
    root = tmp_path_factory.mktemp("shadow")
    src = write_repo(root / "src")
    (src / "broken").rename(root / "broken")  # judged in tests of the check, not here
    build_shadow(src, root / "shadow", keep_python=True, stubs=ECHO_STUBS)
    with TritonServer(root / "shadow") as server:
        server.wait_ready(timeout=60)
        yield server


def _sse(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        text = resp.read().decode()
    return [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]


def test_every_shadow_model_loads_ready(served) -> None:
    from kubectl_triton.adapters.tritonserver import READY, model_states

    states = model_states(served)
    assert set(states) == {"classifier", "pipeline", "tokenizer", "tensorrt_llm", "streamer", "versioned"}
    assert {s for s, _ in states.values()} == {READY}
    config = served.request("GET", "/v2/models/classifier/config")
    assert config["max_batch_size"] == 32
    assert config["dynamic_batching"]["preferred_batch_size"] == [8, 16, 32]


def test_generic_stub_returns_zeros_of_each_output_type(served) -> None:
    result = served.request("POST", "/v2/models/classifier/infer", {"inputs": [
        {"name": "image", "shape": [2, 3, 2, 2], "datatype": "FP32", "data": [0.5] * 24}]})
    outputs = {o["name"]: o for o in result["outputs"]}
    assert outputs["probs"]["datatype"] == "INT64" and outputs["probs"]["shape"] == [2, 1000]
    assert set(outputs["probs"]["data"]) == {0}
    assert outputs["label"]["datatype"] == "BYTES" and outputs["label"]["data"] == ["", ""]
    via_ensemble = served.request("POST", "/v2/models/pipeline/infer", {"inputs": [
        {"name": "IMAGE", "shape": [1, 3, 1, 1], "datatype": "FP32", "data": [1, 2, 3]}]})
    assert via_ensemble["outputs"][0]["name"] == "LABEL"


def test_kept_python_model_runs_its_own_code(served) -> None:
    result = served.request("POST", "/v2/models/tokenizer/infer", {"inputs": [
        {"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": ["hello"]}]})
    assert result["outputs"][0]["data"] == [5]


def test_decoupled_generic_stub_answers_generate(served) -> None:
    result = served.request("POST", "/v2/models/streamer/generate", {"prompt": "hi"})
    assert result["text"] == ""


def test_tensorrtllm_echo_stub(served) -> None:
    once = served.request("POST", "/v2/models/tensorrt_llm/generate",
                          {"input_ids": [11, 12, 13], "input_lengths": [3], "request_output_len": [8]})
    assert once["output_ids"] == [11, 12, 13] and once["sequence_length"] == 3
    events = _sse(f"{served.http_url}/v2/models/tensorrt_llm/generate_stream",
                  {"input_ids": [7, 8], "input_lengths": [2], "request_output_len": [8], "streaming": True})
    assert [e["output_ids"] for e in events] == [7, 8]
