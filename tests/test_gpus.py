"""`kubectl triton gpus` against the test API server: GPU inventory from GFD labels, and which of the
repository's overlays can run on the cluster's nodes."""

from __future__ import annotations

import json

from tests.apiserver import api, pod  # noqa: F401 - fixture
from tests.conftest import REPO


def node(name: str, product: str, gpus: int, *, unschedulable: bool = False) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product,
                                                  "nvidia.com/gpu.count": str(gpus)}},
            "spec": {"unschedulable": unschedulable},
            "status": {"capacity": {"nvidia.com/gpu": str(gpus)}, "allocatable": {"nvidia.com/gpu": str(gpus)}}}


def gpu_pod(name: str, node_name: str, gpus: int) -> dict:
    p = pod(name)
    p["spec"]["nodeName"] = node_name
    for c in p["spec"]["containers"]:
        c.setdefault("resources", {})["requests"] = {"nvidia.com/gpu": str(gpus)}
        c["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    return p


def test_inventory_and_overlay_fit(run_cli, api):  # noqa: F811
    api.cluster.apply(node("h100-a", "NVIDIA-H100-80GB-HBM3", 8), node("h100-b", "NVIDIA-H100-80GB-HBM3", 8),
                      node("l4-a", "NVIDIA-L4", 1), gpu_pod("busy", "l4-a", 1), gpu_pod("llm", "h100-a", 2))
    result = run_cli("--kubeconfig", str(api.kubeconfig_path), "gpus", "--repo", str(REPO), "-o", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    gpus = {g["product"]: g for g in doc["gpus"]}
    assert gpus["NVIDIA-H100-80GB-HBM3"] == {"product": "NVIDIA-H100-80GB-HBM3", "key": "h100-80gb",
                                                  "nodes": 2, "allocatable": 16, "requested": 2, "free": 14}
    assert (gpus["NVIDIA-L4"]["free"], gpus["NVIDIA-L4"]["requested"]) == (0, 1)
    fits = {f["overlay"]: f for f in doc["overlays"]}
    assert fits["overlays/llama3-8b/h100-80gb"]["nodes_free_now"] == 2
    assert fits["overlays/image-classifier/l4"]["nodes_that_fit"] == 1
    assert fits["overlays/image-classifier/l4"]["nodes_free_now"] == 0
    assert fits["overlays/text-embedder/a10g"]["nodes_that_fit"] == 0
    assert "NVIDIA-A10G" in fits["overlays/text-embedder/a10g"]["reason"]
    # Read-only: lists only.
    assert {r.verb for r in api.cluster.requests} == {"list"}


def test_table_output_is_kubectl_style(run_cli, api):  # noqa: F811
    api.cluster.apply(node("l4-a", "NVIDIA-L4", 1))
    result = run_cli("--kubeconfig", str(api.kubeconfig_path), "gpus", "--repo", str(REPO))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["PRODUCT", "KEY", "NODES", "ALLOCATABLE", "REQUESTED", "FREE"]
    assert lines[1].split() == ["NVIDIA-L4", "l4", "1", "1", "0", "1"]
    assert any(line.startswith("overlays/image-classifier/l4") and " yes " in line for line in lines)


def test_unreachable_cluster_is_one_line(run_cli, tmp_path):
    from tests.apiserver import write_kubeconfig

    kubeconfig = write_kubeconfig(tmp_path, "http://127.0.0.1:9")
    result = run_cli("--kubeconfig", str(kubeconfig), "gpus", "--repo", str(REPO))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: cannot reach the Kubernetes API")
