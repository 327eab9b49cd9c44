"""Values the diagnosis works with: what was read from the cluster, and what it concluded."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

HEALTHY, PROGRESSING, FAILED, UNKNOWN = "Healthy", "Progressing", "Failed", "Unknown"

# How a reason weighs on the phase. `warning` leaves a Healthy model Healthy.
SEV_FAILED, SEV_UNKNOWN, SEV_PROGRESSING, SEV_WARNING = "failed", "unknown", "progressing", "warning"
_SEVERITY_RANK = {SEV_FAILED: 0, SEV_UNKNOWN: 1, SEV_PROGRESSING: 2, SEV_WARNING: 3}


def parse_time(value: str | None) -> datetime | None:
    """An API timestamp (RFC 3339, `Z` or an offset), None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Reason:
    """One cause with its fix. `terminal`: waiting cannot cure it (`--wait` stops at once)."""

    code: str
    message: str
    fix: str
    severity: str = SEV_FAILED
    terminal: bool = False

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "fix": self.fix}

    @property
    def rank(self) -> tuple[int, int]:
        return (_SEVERITY_RANK[self.severity], 0 if self.terminal else 1)


@dataclass(frozen=True)
class ModelProbe:
    """One model's state as Triton reported it through the proxy."""

    name: str
    ready: bool
    reason: str | None = None


@dataclass(frozen=True)
class Probe:
    """What Triton answered in one pod. `error`: the API server could not reach it at all."""

    server_ready: bool | None
    models: tuple[ModelProbe, ...] = ()
    error: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class LogRequest:
    """A failing container whose log the diagnosis wants to read."""

    namespace: str
    pod: str
    container: str
    previous: bool
    key: tuple  # changes when the container restarts, so each crash is read once

    @property
    def target(self) -> tuple[str, str, str]:
        return (self.namespace, self.pod, self.container)


@dataclass
class Snapshot:
    """The world as read: raw API objects (dicts, as `kubectl get -o json` shows them) plus logs of
    failing containers and Triton probes, keyed by (namespace, pod, container) and (namespace, pod)."""

    deployments: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    hpas: list[dict] = field(default_factory=list)
    kustomizations: list[dict] = field(default_factory=list)
    routes: list[dict] = field(default_factory=list)  # HTTPRoutes, read only when a canary is in scope
    jobs: list[dict] = field(default_factory=list)  # engine-build Jobs
    lws: list[dict] = field(default_factory=list)  # LeaderWorkerSets: multi-node groups
    lws_events: list[dict] = field(default_factory=list)  # events about LeaderWorkerSets (RecreateGroup, ...)
    logs: dict[tuple[str, str, str], str] = field(default_factory=dict)
    probes: dict[tuple[str, str], Probe] = field(default_factory=dict)
    now: datetime | None = None
    probing: bool = True
    notes: list[str] = field(default_factory=list)  # what could not be read (RBAC, kubelet), said once each


@dataclass
class ModelStatus:
    """The verdict for one model."""

    model: str
    namespace: str
    phase: str
    ready: str
    revision: str | None
    reasons: list[Reason] = field(default_factory=list)
    track: str | None = None  # "stable" or "canary" while a canary of the model is in progress
    version: int | None = None  # the Triton model version the track serves
    weight: int | None = None  # its share of the route's traffic (percent), when the route was read
    job: str | None = None  # the engine-build Job this row is about (None: the model's Deployment)
    groups: list[dict] | None = None  # a LeaderWorkerSet's groups: index, state, pods ready (None: no LWS)

    @property
    def terminal(self) -> bool:
        return self.phase == FAILED and any(r.terminal for r in self.reasons)

    def as_dict(self) -> dict:
        out: dict[str, object] = {"model": self.model, "namespace": self.namespace, "phase": self.phase,
                                  "ready": self.ready, "revision": self.revision,
                                  "reasons": [r.as_dict() for r in self.reasons]}
        if self.track:
            out.update(track=self.track, version=self.version, weight=self.weight)
        if self.job:
            out["job"] = self.job
        if self.groups is not None:
            out["groups"] = self.groups
        return out
