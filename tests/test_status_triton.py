"""`kubectl triton status` probing a real tritonserver through the API server's pod proxy (GET only):
Healthy when Triton and its model are ready; TritonNotReady + ModelNotReady (with Triton's own reason)
and ModelLoadFailed (Triton's real log line) when a model fails to load."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kubectl_triton.adapters.tritonserver import TritonServer
from tests.apiserver import (
    NAMESPACE,
    api,  # noqa: F401 - fixture
    deployment,
    event,
    healthy_model,
    hpa,
    kustomization,
    pod,
)

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
"""
GOOD = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(
            r, "INPUT0").as_numpy())]) for r in requests]
"""
BROKEN = "raise FileNotFoundError('tokenizer.json not found in /models/broken/1')\n"


def _model(repo: Path, name: str, code: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
    (repo / name / "1" / "model.py").write_text(code)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Two real tritonservers: one serving `resnet50`, one whose model `broken` fails to load."""
    good, bad = tmp_path_factory.mktemp("good"), tmp_path_factory.mktemp("bad")
    _model(good, "resnet50", GOOD)
    _model(bad, "broken", BROKEN)
    with TritonServer(good) as ok, TritonServer(bad) as failing:
        ok.wait_ready(60)
        yield ok, failing


def test_healthy_model_probed_through_the_proxy(run_cli, api, servers):  # noqa: F811
    ok, _ = servers
    p = healthy_model(api.cluster, "resnet50")
    api.cluster.apply(kustomization("apps", [(NAMESPACE, "resnet50")]))
    api.cluster.proxy_targets[(NAMESPACE, p["metadata"]["name"], 8000)] = ok.http_url
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "-o", "json")
    doc = json.loads(res.stdout)
    assert res.exit_code == 0, res.stdout
    assert doc["models"][0]["phase"] == "Healthy" and doc["models"][0]["reasons"] == []
    proxied = [r.path.split("/proxy", 1)[1] for r in api.cluster.requests if r.verb == "proxy"]
    assert proxied == ["/v2/health/ready", "/v2/models/resnet50/ready"]


def test_model_that_failed_to_load(run_cli, api, servers):  # noqa: F811
    _, failing = servers
    p = pod("broken", ready=False, started=True)
    api.cluster.apply(deployment("broken", ready=0), p, hpa("broken"),
                      event(p, "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 400", count=9))
    name = p["metadata"]["name"]
    api.cluster.proxy_targets[(NAMESPACE, name, 8000)] = failing.http_url
    api.cluster.logs[(NAMESPACE, name, "tritonserver", False)] = lambda: failing.log  # the server's real log
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "-o", "json", "broken")
    doc = json.loads(res.stdout)
    m = doc["models"][0]
    codes = [r["code"] for r in m["reasons"]]
    assert res.exit_code == 1 and m["phase"] == "Failed"
    assert codes == ["ModelLoadFailed", "ModelNotReady", "TritonNotReady"]
    by_code = {r["code"]: r["message"] for r in m["reasons"]}
    assert "failed to load 'broken' version 1" in by_code["ModelLoadFailed"]
    assert "tokenizer.json not found" in by_code["ModelLoadFailed"]
    assert "has no available versions" in by_code["ModelNotReady"]  # Triton's own words, via the proxy
    assert "HTTP 400" in by_code["TritonNotReady"]


def test_wait_turns_healthy_when_triton_is_ready(run_cli, api, servers):  # noqa: F811
    """--wait with probing: the pod turns ready, the probe confirms it through the proxy, exit 0."""
    ok, _ = servers
    starting = pod("resnet50", ready=False, started=False)
    api.cluster.apply(deployment("resnet50", ready=0), starting, hpa("resnet50"))
    api.cluster.proxy_targets[(NAMESPACE, starting["metadata"]["name"], 8000)] = ok.http_url

    def ready() -> None:
        time.sleep(0.5)
        api.cluster.apply(pod("resnet50"), deployment("resnet50"))

    threading.Thread(target=ready, daemon=True).start()
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--wait", "--timeout", "30s", "-o", "json")
    assert res.exit_code == 0, res.stdout
    assert json.loads(res.stdout)["healthy"] is True


def test_wait_asks_triton_again_until_it_answers(run_cli, api, servers, monkeypatch):  # noqa: F811
    """A pod reported ready before the proxy can reach Triton is probed again, not judged once."""
    from kubectl_triton.status import collect as status_cmd

    monkeypatch.setattr(status_cmd, "REPROBE_S", 0.5)
    ok, _ = servers
    p = healthy_model(api.cluster, "resnet50")
    target = (NAMESPACE, p["metadata"]["name"], 8000)

    def reachable() -> None:
        time.sleep(1.0)
        api.cluster.proxy_targets[target] = ok.http_url

    threading.Thread(target=reachable, daemon=True).start()
    t = time.monotonic()
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--wait", "--timeout", "60s", "-o", "json")
    assert res.exit_code == 0, res.stdout
    assert time.monotonic() - t < 30  # re-probed after REPROBE_S, not at the 60 s timeout
    assert api.cluster.count("list") == 7  # re-probing needs no new lists
