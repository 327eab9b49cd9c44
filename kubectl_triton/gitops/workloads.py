"""The workloads a rendered overlay runs, and their pod templates: every check that reads a pod reads it here, so
a model served by a LeaderWorkerSet group is checked as one served by a Deployment.

A LeaderWorkerSet has two pod templates (`leaderWorkerTemplate.leaderTemplate` and `.workerTemplate`; without a
leader template the leader is made from the worker's); its leader is the pod that serves (rank 0 of the MPI job).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Kinds whose pods run a model's tritonserver in the layouts `add-model` writes (Deployment; LeaderWorkerSet for
# --nodes) or that a hand-written overlay may use instead (StatefulSet).
SERVING_KINDS = ("Deployment", "StatefulSet", "LeaderWorkerSet")
POD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet", "Pod", "CronJob", "LeaderWorkerSet")
SERVER_CONTAINER = "tritonserver"


@dataclass(frozen=True)
class PodTemplate:
    """One pod template of a workload: `role` is "" for a single template, "leader"/"worker" in a group."""

    role: str
    metadata: dict[str, Any]
    spec: dict[str, Any]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def templates(obj: dict) -> list[PodTemplate]:
    """The pod templates of a workload (none for other kinds)."""
    kind, spec = obj.get("kind"), _dict(obj.get("spec"))
    if kind == "Pod":
        return [PodTemplate("", _dict(obj.get("metadata")), spec)]
    if kind == "LeaderWorkerSet":
        lwt = _dict(spec.get("leaderWorkerTemplate"))
        return [PodTemplate(role, _dict(t.get("metadata")), _dict(t.get("spec")))
                for role, t in (("leader", lwt.get("leaderTemplate")), ("worker", lwt.get("workerTemplate")))
                if isinstance(t, dict)]
    if kind == "CronJob":
        spec = _dict(_dict(spec.get("jobTemplate")).get("spec"))
    if kind not in POD_KINDS:
        return []
    template = spec.get("template")
    return [PodTemplate("", _dict(template.get("metadata")), _dict(template.get("spec")))] \
        if isinstance(template, dict) else []


def server_container(pod: dict) -> dict | None:
    """The container named tritonserver of a pod spec."""
    return next((c for c in pod.get("containers") or [] if isinstance(c, dict) and c.get("name") == SERVER_CONTAINER),
                None)


def serving_template(obj: dict) -> PodTemplate | None:
    """The template whose pod serves (a Deployment's; a group's leader, else its worker), if it runs tritonserver."""
    if obj.get("kind") not in SERVING_KINDS:
        return None
    found = templates(obj)
    for template in found:
        if server_container(template.spec) is not None:
            return template
    return None


def serving(objects: Iterable[Any]) -> list[dict]:
    """The workloads among rendered objects whose pods run tritonserver, in order."""
    return [o for o in objects if isinstance(o, dict) and serving_template(o) is not None]


def labels(obj: dict) -> dict[str, str]:
    """A workload's labels and its serving template's (the template's win)."""
    template = serving_template(obj)
    merged = {**_dict(_dict(obj.get("metadata")).get("labels")), **_dict((template.metadata if template else {})
                                                                          .get("labels"))}
    return {str(k): str(v) for k, v in merged.items()}
