"""bench (and tune's guard) reaching Triton through the Kubernetes API's pods/portforward websocket, as
`kubectl port-forward` does, against the test API server (which bridges to a real tritonserver)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubectl_triton.adapters.tritonserver import TritonServer
from tests.apiserver import (
    NAMESPACE,
    api,  # noqa: F401 - fixture
    healthy_model,
    pod,
)
from tests.test_bench import make_repo

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    """A server in Triton's default model-control mode (none), as a production pod runs."""
    with TritonServer(make_repo(tmp_path_factory.mktemp("models"), ("batched",))) as server:
        server.wait_ready(60)
        yield server


def _pod(api, server, *, grpc: bool = False) -> str:  # noqa: F811
    p = healthy_model(api.cluster, "batched")
    name = p["metadata"]["name"]
    api.cluster.proxy_targets[(NAMESPACE, name, 8000)] = server.http_url
    api.cluster.proxy_targets[(NAMESPACE, name, 8001)] = f"http://127.0.0.1:{server.grpc_port}"
    return name


def test_bench_through_port_forward(run_cli, api, triton):  # noqa: F811
    name = _pod(api, triton)
    api.cluster.apply(pod("batched", "zz9", ready=False))  # not ready: never chosen
    res = run_cli("bench", "batched", "--kubeconfig", str(api.kubeconfig_path), "--concurrency", "1,4",
                  "--duration", "0.5s", "--warmup", "0.1s", "-o", "json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)["results"]
    assert [r["concurrency"] for r in rows] == [1, 4] and all(r["throughput"] > 10 for r in rows)
    forwards = [r for r in api.cluster.requests if r.verb == "portforward"]
    assert forwards and all(r.name == name and "ports=8000" in r.path for r in forwards)
    assert api.cluster.count("list", "pods") == 1  # one list to choose the pod; no other API traffic


def test_grpc_through_port_forward(api, triton):  # noqa: F811
    """As a user runs it (its own process, to its end): no thread traceback on stderr. The kubernetes client's
    proxy thread used to die with ConnectionResetError when the gRPC channel went away (2 runs in 3)."""
    _pod(api, triton)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "kubectl_triton", "bench", "batched", "--kubeconfig",
                               str(api.kubeconfig_path), "--protocol", "grpc", "--concurrency", "4,8", "--duration",
                               "0.5s", "--warmup", "0.1s", "-o", "json"], capture_output=True, text=True, env=env,
                              timeout=120)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        assert json.loads(proc.stdout)["results"][0]["throughput"] > 10
    assert any("ports=8001" in r.path for r in api.cluster.requests if r.verb == "portforward")


def test_port_forward_errors_are_one_line(run_cli, api, triton):  # noqa: F811
    kc = str(api.kubeconfig_path)
    res = run_cli("bench", "batched", "--kubeconfig", kc)
    assert res.exit_code == 2 and res.stderr.splitlines()[0] == \
        "error: no ready Triton pod of batched in namespace 'triton'"
    _pod(api, triton)
    api.cluster.forbidden.add(("create", "pods/portforward"))
    res = run_cli("bench", "batched", "--kubeconfig", kc)
    assert res.exit_code == 2 and res.stderr.startswith("error: forbidden: port-forward to pod batched-triton-")
    api.cluster.forbidden.clear()
    api.cluster.proxy_targets.clear()  # the pod's port refuses connections
    res = run_cli("bench", "batched", "--kubeconfig", kc, "--duration", "0.5s")
    assert res.exit_code == 2 and "connection refused" in res.stderr and "Traceback" not in res.stderr


def test_tune_never_touches_production_unless_allowed(run_cli, api, triton):  # noqa: F811
    _pod(api, triton)
    res = run_cli("tune", "batched", "--kubeconfig", str(api.kubeconfig_path))
    assert res.exit_code == 2 and "production Deployment" in res.stderr
    assert api.cluster.requests == []  # refused before any API request
    # allowed: it reaches the pod, whose Triton (model control none) refuses the reload; nothing changed. The
    # baseline is measured first: through the port-forward beside three other pytest workers on two cores, a 0.5 s
    # window once completed no request (tune exited 1 before any reload), so 2 s
    res = run_cli("tune", "batched", "--kubeconfig", str(api.kubeconfig_path), "--allow-production",
                  "--duration", "2s", "--warmup", "0.1s", "--instances", "1", "--max-queue-delay-us", "0",
                  "--preferred-batch-sizes", "none")
    assert res.exit_code == 1, res.stderr
    assert "not allowed" in res.stderr and "--model-control-mode=explicit" in res.stderr
