"""`kubectl triton gpus`, the pure part: GPU types present in a cluster (from Node objects' GFD
labels and nvidia.com/gpu allocatable, minus what pods request) and which overlays can run there."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubectl_triton.compat.catalog import by_gfd_label
from kubectl_triton.compat.repo_check import GPU_RESOURCE, PRODUCT_LABEL, Placement

DONE_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class NodeGPUs:
    name: str
    product: str | None          # GFD product label
    key: str | None              # catalog key, when known
    allocatable: int
    requested: int
    schedulable: bool

    @property
    def free(self) -> int:
        return max(0, self.allocatable - self.requested)


@dataclass(frozen=True)
class GPUType:
    """One row of the inventory: a GPU product and its totals over schedulable nodes."""

    product: str
    key: str | None
    nodes: int
    allocatable: int
    requested: int
    free: int


@dataclass(frozen=True)
class OverlayFit:
    """Whether an overlay's pods can land anywhere: a node it selects with enough GPUs."""

    overlay: str
    model: str
    gpus_per_pod: int | None
    nodes_that_fit: int          # schedulable nodes it selects with allocatable >= gpus per pod
    nodes_free_now: int          # ... that have that many GPUs free now
    reason: str
    group_size: int = 1          # pods of a LeaderWorkerSet group, each on its own node
    groups_free_now: int | None = None   # a group: whole groups that could start now (nodes free now // size)
    groups_that_fit: int | None = None   # a group: whole groups the selected nodes could host when empty

    @property
    def can_run(self) -> str:
        """yes: it can start now; later: once GPUs are freed; no: no node (or not enough nodes) ever fits."""
        if self.groups_free_now is not None:
            return "yes" if self.groups_free_now else ("later" if self.groups_that_fit else "no")
        return "yes" if self.nodes_free_now else ("later" if self.nodes_that_fit else "no")


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def pod_gpu_request(pod: dict) -> int:
    """nvidia.com/gpu a pod holds: its containers' requests (limits imply requests for GPUs)."""
    spec = pod.get("spec") or {}
    total = 0
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        total += _count((res.get("requests") or {}).get(GPU_RESOURCE, (res.get("limits") or {}).get(GPU_RESOURCE)))
    init = [_count(((c.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE))
            for c in spec.get("initContainers") or []]
    return max([total, *init])


def node_gpus(nodes: Iterable[dict], pods: Iterable[dict]) -> list[NodeGPUs]:
    """Per-node GPU product, allocatable and requested nvidia.com/gpu (nodes without GPUs left out)."""
    used: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in DONE_PHASES:
            used[node] = used.get(node, 0) + pod_gpu_request(pod)
    out = []
    for node in nodes:
        meta, status = node.get("metadata") or {}, node.get("status") or {}
        alloc = (status.get("allocatable") or {}).get(GPU_RESOURCE, (status.get("capacity") or {}).get(GPU_RESOURCE))
        product = (meta.get("labels") or {}).get(PRODUCT_LABEL)
        if alloc is None and product is None:
            continue
        gpu = by_gfd_label(product) if product else None
        out.append(NodeGPUs(name=str(meta.get("name", "")), product=product, key=gpu.key if gpu else None,
                            allocatable=_count(alloc), requested=used.get(str(meta.get("name", "")), 0),
                            schedulable=not (node.get("spec") or {}).get("unschedulable", False)))
    return out


def inventory(nodes: Iterable[dict], pods: Iterable[dict], overlays: Iterable[Placement]
              ) -> tuple[list[GPUType], list[OverlayFit]]:
    """GPU types present (schedulable nodes only) and, for each overlay placement, where it fits."""
    per_node = node_gpus(nodes, pods)
    types: dict[str, list[NodeGPUs]] = {}
    for n in per_node:
        if n.schedulable:
            types.setdefault(n.product or "(no GFD label)", []).append(n)
    rows = [GPUType(product=p, key=ns[0].key, nodes=len(ns), allocatable=sum(n.allocatable for n in ns),
                    requested=sum(n.requested for n in ns), free=sum(n.free for n in ns))
            for p, ns in sorted(types.items())]
    fits = []
    for o in overlays:
        need = o.gpus_per_pod or 0
        selected = [n for n in per_node if n.schedulable and _selects(o.labels, n.product)]
        fit = [n for n in selected if n.allocatable >= max(need, 1)]
        free = [n for n in fit if n.free >= need]
        size = o.group_size
        if not selected:
            reason = "no schedulable node with " + (", ".join(sorted(o.labels)) if o.labels else "a GPU")
        elif size > 1 and fit:
            # A LeaderWorkerSet group: all its pods run at once, one per node (each asks for a node's GPUs).
            reason = (f"group of {size} pods x {need} GPU(s): {len(fit)} node(s) can host a pod, "
                      f"{len(free)} with {need} free now; " +
                      ((f"{len(free) // size} whole groups fit now" if len(free) >= 2 * size else
                        "the whole group fits now") if len(free) >= size else
                       f"the group needs {size}" if len(fit) >= size else
                       f"the group can never start: it needs {size}"))
        elif not fit:
            reason = f"selected nodes have at most {max(n.allocatable for n in selected)} GPU(s); pod needs {need}"
        elif not free:
            reason = f"{len(fit)} node(s) fit, none has {need} GPU(s) free now"
        else:
            reason = f"{len(free)} node(s) have {need} GPU(s) free"
        fits.append(OverlayFit(overlay=o.overlay, model=o.model, gpus_per_pod=o.gpus_per_pod,
                               nodes_that_fit=len(fit), nodes_free_now=len(free), reason=reason, group_size=size,
                               groups_free_now=len(free) // size if size > 1 else None,
                               groups_that_fit=len(fit) // size if size > 1 else None))
    return rows, fits


def _selects(labels: frozenset[str] | None, product: str | None) -> bool:
    if labels is None:
        return product is not None
    return product is not None and product in labels

