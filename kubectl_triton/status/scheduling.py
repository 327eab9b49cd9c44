"""Why a pod is not scheduled, and whether waiting can still help.

The scheduler sets `PodScheduled=False, reason=Unschedulable` (its message names what no node has) and keeps the
condition's lastTransitionTime from the first failed attempt on (kube-scheduler's updatePod: the time changes only
when the status does), so the condition dates how long the pod has waited; kstatus (cli-utils
pkg/kstatus/status/core.go podConditions) dates it by the pod's creationTimestamp and calls an Unschedulable pod
Failed after a 15 s window. Here a pod is Failed once it has waited longer than the rollout can wait for it:

- `--unschedulable-grace` (60 s) when nothing will add a node;
- while the cluster autoscaler is adding one (its latest event on the pod is `TriggeredScaleUp`, not
  `NotTriggerScaleUp`): the Deployment's progressDeadlineSeconds (the controller reports ProgressDeadlineExceeded
  then), or, for a workload without one, the autoscaler's own `--max-node-provision-time` (15 min, after which it
  stops waiting for the node: kubernetes/autoscaler cluster-autoscaler/FAQ.md).

A pod whose wait cannot be dated (no lastTransitionTime, no creationTimestamp: a hand-written object) is Failed, as
kstatus reads a missing creationTimestamp.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from kubectl_triton.compat import catalog
from kubectl_triton.status.model import SEV_FAILED, SEV_PROGRESSING, Reason, parse_time
from kubectl_triton.status.reasons import reason

UNSCHEDULABLE_GRACE_S = 60.0
NODE_PROVISION_S = 900.0  # cluster-autoscaler --max-node-provision-time's default (15m0s)
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery's label, which the GPU Components select
SCALE_UP, NO_SCALE_UP = "TriggeredScaleUp", "NotTriggerScaleUp"  # cluster-autoscaler's events on a pending pod

_SELECTOR_MISMATCH = re.compile(r"didn't match (pod's )?node (affinity|selector)|untolerated taint|"
                                r"didn't tolerate|node\(s\) had taint|didn't match pod affinity", re.I)
_AFFINITY_MISMATCH = re.compile(r"didn't match (pod's )?node (affinity|selector)", re.I)
_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


def _condition(obj: dict, type_: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def event_time(e: dict) -> datetime:
    """When an event (core v1 shape) last happened: lastTimestamp, eventTime, the series' last observation or its
    creation."""
    for value in (e.get("lastTimestamp"), e.get("eventTime"), (e.get("series") or {}).get("lastObservedTime"),
                  (e.get("metadata") or {}).get("creationTimestamp")):
        t = parse_time(value)
        if t is not None:
            return t
    return _EPOCH


def unschedulable_for(pod: dict, cond: dict, now: datetime) -> float | None:
    """Seconds the pod has been unschedulable: since the condition's lastTransitionTime, else since the pod was
    created; None when neither is known."""
    since = parse_time(cond.get("lastTransitionTime")) or parse_time((pod.get("metadata") or {})
                                                                     .get("creationTimestamp"))
    return None if since is None else max(0.0, (now - since).total_seconds())


def autoscaler_verdict(events: list[dict]) -> dict | None:
    """The cluster autoscaler's latest word on the pod (a TriggeredScaleUp or NotTriggerScaleUp event), if any."""
    said = [(i, e) for i, e in enumerate(events) if e.get("reason") in (SCALE_UP, NO_SCALE_UP)]
    return max(said, key=lambda ie: (event_time(ie[1]), ie[0]))[1] if said else None


def scheduling_reasons(pod: dict, events: list[dict], now: datetime, grace: float,
                       deadline_s: float | None = None) -> list[Reason]:
    """The reason a pod stays Pending unscheduled (InsufficientGPU, GPUTypeUnavailable, NoMatchingNode,
    Unschedulable), Failed and terminal once it has waited longer than the rollout can wait: `grace`, or while the
    cluster autoscaler adds a node, `deadline_s` (the Deployment's progressDeadlineSeconds; None: the workload has
    none) or the autoscaler's node provision time."""
    cond = _condition(pod, "PodScheduled")
    if not cond or cond.get("status") != "False" or cond.get("reason") != "Unschedulable":
        return []
    name = (pod.get("metadata") or {}).get("name", "")
    message = (cond.get("message") or next((e.get("message", "") for e in reversed(events)
                                            if e.get("reason") == "FailedScheduling"), "")).strip()
    waited = unschedulable_for(pod, cond, now)
    autoscaler = autoscaler_verdict(events)
    said = _first_line(autoscaler) if autoscaler is not None else ""
    scaling = autoscaler is not None and autoscaler.get("reason") == SCALE_UP
    if scaling:
        budget, budget_name = ((max(grace, deadline_s), "the Deployment's progressDeadlineSeconds")
                               if deadline_s is not None else
                               (max(grace, NODE_PROVISION_S), "the cluster autoscaler's --max-node-provision-time"))
    else:
        budget, budget_name = grace, "--unschedulable-grace"
    hopeless = waited is None or waited >= budget
    sev = SEV_FAILED if hopeless else SEV_PROGRESSING
    when = ("unschedulable (since when is unknown: the pod has neither a PodScheduled lastTransitionTime nor a "
            "creationTimestamp)" if waited is None else f"unschedulable for {int(waited)}s")
    if scaling and not hopeless:
        when += " (cluster autoscaler is adding a node)"
    elif scaling and waited is not None:
        when += (f", longer than {budget_name} ({int(budget)}s) although the cluster autoscaler triggered a "
                 f"scale-up ({said})")
    elif autoscaler is not None:
        when += f" (cluster autoscaler: {said})"
    elif hopeless and waited is not None:
        when += f", longer than {budget_name} ({int(budget)}s)"
    scheduler = message or "PodScheduled=False (Unschedulable) without a message"
    products = gpu_products(pod)
    if "nvidia.com/gpu" in message and "Insufficient" in message:
        code = "InsufficientGPU"
    elif products and _AFFINITY_MISMATCH.search(message) and "Insufficient" not in message:
        return [reason("GPUTypeUnavailable", f"pod {name} {when}: no node of GPU type {gpu_names(products)} "
                       f"(the pod's nvidia.com/gpu.product); scheduler: {scheduler}", sev, terminal=hopeless)]
    elif _SELECTOR_MISMATCH.search(message) and "Insufficient" not in message:
        code = "NoMatchingNode"
    else:
        code = "Unschedulable"
    return [reason(code, f"pod {name} {when}: {scheduler}", sev, terminal=hopeless)]


def _first_line(event: dict) -> str:
    text = (event.get("message") or "").strip()
    return text.splitlines()[0] if text else str(event.get("reason", ""))


def gpu_products(pod: dict) -> list[str]:
    """The GPU products (nvidia.com/gpu.product values) a pod's nodeSelector or required node affinity demands."""
    spec = pod.get("spec") or {}
    found = [str(v) for k, v in (spec.get("nodeSelector") or {}).items() if k == GPU_PRODUCT_LABEL]
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for expr in (term or {}).get("matchExpressions") or []:
            if expr.get("key") == GPU_PRODUCT_LABEL and expr.get("operator") == "In":
                found += [str(v) for v in expr.get("values") or []]
    return list(dict.fromkeys(found))


def gpu_names(products: list[str]) -> str:
    """`NVIDIA-L4 (l4)`: each product label with its catalog type where the catalog knows it."""
    named = []
    for product in products:
        gpu = catalog.by_gfd_label(product)
        named.append(f"{product} ({gpu.key})" if gpu is not None else product)
    return " or ".join(named)
