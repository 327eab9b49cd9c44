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


def test_group_overlays_count_whole_groups(run_cli, api):  # noqa: F811
    """A LeaderWorkerSet group (overlays/llama3-70b: 2 pods x 8 GPUs) needs 2 nodes with 8 free H100s at once:
    5 nodes of which one is busy host 2 whole groups now; the table and JSON say so."""
    h100 = "NVIDIA-H100-80GB-HBM3"
    api.cluster.apply(*(node(f"h100-{i}", h100, 8) for i in range(5)), gpu_pod("busy", "h100-0", 1))
    res = run_cli("--kubeconfig", str(api.kubeconfig_path), "gpus", "--repo", str(REPO), "-o", "json")
    assert res.exit_code == 0, res.stderr
    fit = {f["overlay"]: f for f in json.loads(res.stdout)["overlays"]}["overlays/llama3-70b/h100-80gb"]
    assert (fit["group_size"], fit["nodes_that_fit"], fit["nodes_free_now"]) == (2, 5, 4)
    assert (fit["groups_free_now"], fit["groups_that_fit"], fit["can_run"]) == (2, 2, "yes")
    assert fit["reason"].endswith("2 whole groups fit now")
    single = {f["overlay"]: f for f in json.loads(res.stdout)["overlays"]}["overlays/llama3-8b/h100-80gb"]
    assert (single["groups_free_now"], single["can_run"]) == (None, "yes")
    text = run_cli("--kubeconfig", str(api.kubeconfig_path), "gpus", "--repo", str(REPO)).stdout.splitlines()
    header = next(line for line in text if line.startswith("OVERLAY"))
    assert header.split()[:8] == ["OVERLAY", "MODEL", "GPUS/POD", "PODS/GROUP", "GROUPS", "NOW", "CAN", "RUN"]
    row = next(line for line in text if line.startswith("overlays/llama3-70b/h100-80gb")).split()
    assert row[2:6] == ["8", "2", "2", "yes"]


def test_a_group_that_cannot_start_now_or_ever(run_cli, api):  # noqa: F811
    h100 = "NVIDIA-H100-80GB-HBM3"

    def fit() -> dict:
        res = run_cli("--kubeconfig", str(api.kubeconfig_path), "gpus", "--repo", str(REPO), "-o", "yaml")
        assert res.exit_code == 0, res.stderr
        from ruamel.yaml import YAML  # YAML 1.2, as the plugin writes it (`no` is a string there)

        doc = YAML(typ="safe", pure=True).load(res.stdout)
        return {f["overlay"]: f for f in doc["overlays"]}["overlays/llama3-70b/h100-80gb"]

    api.cluster.apply(node("h100-a", h100, 8), node("h100-b", h100, 8), gpu_pod("llm", "h100-a", 2))
    got = fit()  # two nodes host a pod each, but only one has 8 free: later, not now
    assert (got["groups_free_now"], got["groups_that_fit"], got["can_run"]) == (0, 1, "later")
    api.cluster.delete("Node", "", "h100-b")
    got = fit()  # one node can never host a 2-pod group, even when free
    assert (got["groups_that_fit"], got["can_run"]) == (0, "no")
    assert got["reason"].endswith("the group can never start: it needs 2")
