"""`gpus` pure part: GPU types from Node objects, free GPUs after pod requests, overlay fit."""

from __future__ import annotations

from kubectl_triton.compat.inventory import inventory
from kubectl_triton.compat.repo_check import Placement
from kubectl_triton.output.compat import format_inventory


def node(name: str, product: str | None, gpus: int | None, unschedulable: bool = False) -> dict:
    labels = {"kubernetes.io/hostname": name, **({"nvidia.com/gpu.product": product} if product else {})}
    status = {"allocatable": {"cpu": "32", **({"nvidia.com/gpu": str(gpus)} if gpus is not None else {})}}
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}, "status": status,
            "spec": {"unschedulable": True} if unschedulable else {}}


def pod(node_name: str, gpus: int, phase: str = "Running") -> dict:
    return {"kind": "Pod", "spec": {"nodeName": node_name, "containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}, "status": {"phase": phase}}


NODES = [node("h1", "NVIDIA-H100-80GB-HBM3", 8), node("h2", "NVIDIA-H100-80GB-HBM3", 8),
         node("l1", "NVIDIA-L4", 1), node("cpu", None, None), node("x", "NVIDIA-RTX-9000", 2),
         node("cordoned", "NVIDIA-A100-SXM4-80GB", 8, unschedulable=True)]
PODS = [pod("h1", 4), pod("h1", 4), pod("h2", 2), pod("h2", 8, phase="Succeeded"), pod("l1", 1)]


def placement(overlay: str, labels: set[str] | None, gpus: int) -> Placement:
    return Placement(model=overlay.split("/")[1], deployment="d", overlay=overlay,
                     labels=frozenset(labels) if labels is not None else None, image=None, gpus_per_pod=gpus)


def test_gpu_types_with_free_counts():
    rows, _ = inventory(NODES, PODS, [])
    got = {r.product: (r.key, r.nodes, r.allocatable, r.requested, r.free) for r in rows}
    assert got == {"NVIDIA-H100-80GB-HBM3": ("h100-80gb", 2, 16, 10, 6), "NVIDIA-L4": ("l4", 1, 1, 1, 0),
                   "NVIDIA-RTX-9000": (None, 1, 2, 0, 2)}  # CPU-only and cordoned nodes left out


def test_overlay_fit():
    overlays = [placement("overlays/llama/h100-80gb", {"NVIDIA-H100-80GB-HBM3"}, 4),
                placement("overlays/big/h100-80gb", {"NVIDIA-H100-80GB-HBM3"}, 8),
                placement("overlays/small/l4", {"NVIDIA-L4"}, 1),
                placement("overlays/tp2/l4", {"NVIDIA-L4"}, 2),
                placement("overlays/old/a100-80gb", {"NVIDIA-A100-SXM4-80GB"}, 1)]
    _, fits = inventory(NODES, PODS, overlays)
    got = {f.model: (f.nodes_that_fit, f.nodes_free_now) for f in fits}
    assert got == {"llama": (2, 1), "big": (2, 0), "small": (1, 0), "tp2": (0, 0), "old": (0, 0)}
    text = format_inventory(*inventory(NODES, PODS, overlays))
    assert "OVERLAY" in text and "later" in text and "pod needs 2" in text
