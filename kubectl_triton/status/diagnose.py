"""Pure diagnosis: API objects in (a Snapshot), one ModelStatus per Triton model out.

Nothing here does I/O. The collector asks `log_requests` which logs to read and `probe_targets` which pods
to probe, puts what it got into the Snapshot, and calls `diagnose`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime, timezone

from kubectl_triton.status.containers import container_reasons, log_request
from kubectl_triton.status.flux import flux_reasons, kustomizations_of
from kubectl_triton.status.model import (
    FAILED,
    HEALTHY,
    PROGRESSING,
    SEV_FAILED,
    SEV_PROGRESSING,
    SEV_UNKNOWN,
    SEV_WARNING,
    UNKNOWN,
    LogRequest,
    ModelStatus,
    Probe,
    Reason,
    Snapshot,
    parse_time,
)
from kubectl_triton.status.objects import (
    condition,
    container_statuses,
    events_of,
    first_line,
    meta,
    ns_name,
    spec_container,
)
from kubectl_triton.status.reasons import reason
from kubectl_triton.status.scheduling import UNSCHEDULABLE_GRACE_S, scheduling_reasons

NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
TRITON_NAME = "triton-inference-server"
TRITON_CONTAINER = "tritonserver"
TRITON_SELECTOR = f"{NAME_LABEL}={TRITON_NAME}"
ENGINE_BUILD_NAME = "triton-engine-build"  # base/engine-build's Job and its pods
ENGINE_BUILD_SELECTOR = f"{NAME_LABEL}={ENGINE_BUILD_NAME}"
POD_SELECTOR = f"{NAME_LABEL} in ({TRITON_NAME},{ENGINE_BUILD_NAME})"
DEFAULT_HTTP_PORT = 8000

# spec.progressDeadlineSeconds that means "no deadline" (math.MaxInt32, extensions/v1beta1's default): the
# Deployment controller then keeps no Progressing condition (pkg/controller/deployment/progress.go).
NO_PROGRESS_DEADLINE = 2**31 - 1
_HPA_METRIC_FAILURES = re.compile(r"FailedGet.*Metric|InvalidMetricSourceType|FailedComputeMetricsReplicas")
_HPA_CONDITIONS_ANN = "autoscaling.alpha.kubernetes.io/conditions"  # autoscaling/v1's conditions
_FINISHED = {"Failed", "Succeeded"}

# LeaderWorkerSet (kubernetes-sigs/lws api/leaderworkerset/v1): the labels its controller and pod webhook set on
# a group's pods, the event its pod controller records when RecreateGroupOnPodRestart deletes a group's leader.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_SUFFIX = "-triton-group"  # base/triton-multinode names the set MODEL-triton-group
RECREATE_GROUP_EVENT = "RecreateGroup"
_RECREATED = re.compile(r"pod (?P<pod>\S+) failed, deleted leader pod (?P<leader>\S+) to recreate group "
                        r"(?P<group>\d+)")
GROUP_RECREATES_BEFORE_GIVING_UP = 3  # a group recreated this often without becoming ready is a crash loop


# -- small accessors ------------------------------------------------------------------------------------

def _labels(obj: dict) -> dict:
    return meta(obj).get("labels") or {}


TRACK_LABEL, MODEL_LABEL, VERSION_LABEL = "triton.kubectl.io/track", "triton.kubectl.io/model", \
    "triton.kubectl.io/model-version"
TRITON_MODEL_ANN, STABLE_VERSION_ANN = "triton.kubectl.io/triton-model", "triton.kubectl.io/stable-version"
# The Triton models a Deployment serves (comma-separated), written by each model's overlay Component:
# the instance label names the deployment unit (llama3-8b), not a Triton model (ensemble, tensorrt_llm, ...).
TRITON_MODELS_ANN = "triton.kubectl.io/triton-models"


def model_name(deployment: dict) -> str:
    """The model a Deployment or LeaderWorkerSet serves: its instance label (a canary's model label)."""
    if _labels(deployment).get(TRACK_LABEL) and _labels(deployment).get(MODEL_LABEL):
        return _labels(deployment)[MODEL_LABEL]  # a canary Deployment: the model it is a track of
    name = meta(deployment).get("name", "")
    return _labels(deployment).get(INSTANCE_LABEL) or name.removesuffix(LWS_GROUP_SUFFIX).removesuffix("-triton")


def pods_of(deployment: dict, pods: Iterable[dict]) -> list[dict]:
    """Pods the Deployment's selector matches in its namespace, skipping ones being deleted and the pods of a
    LeaderWorkerSet group (they carry the same model labels, but their owner is the group)."""
    ns = meta(deployment).get("namespace")
    selector = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return sorted((p for p in pods if meta(p).get("namespace") == ns and not meta(p).get("deletionTimestamp")
                   and LWS_NAME_LABEL not in _labels(p)
                   and selector and all(_labels(p).get(k) == v for k, v in selector.items())),
                  key=lambda p: meta(p).get("name", ""))


def group_pods(lws: dict, pods: Iterable[dict], *, crashed_deleting: bool = False) -> dict[int, list[dict]]:
    """A LeaderWorkerSet's pods by group index (leader first, then workers by index): the pods labelled with the
    set's name in its namespace, skipping ones being deleted. `crashed_deleting`: keep a pod being deleted whose
    container restarted: the instance that made the lws controller recreate the group (its log is readable until
    the foreground deletion of the group ends)."""
    ns, name = ns_name(lws)
    out: dict[int, list[dict]] = {}
    for p in pods:
        lab = _labels(p)
        if meta(p).get("namespace") != ns or lab.get(LWS_NAME_LABEL) != name:
            continue
        if meta(p).get("deletionTimestamp") and not (crashed_deleting and _restarted(p)):
            continue
        group = _int(lab.get(LWS_GROUP_LABEL))
        if group is not None:
            out.setdefault(group, []).append(p)
    for members in out.values():
        members.sort(key=lambda p: (_int(_labels(p).get(LWS_WORKER_LABEL)) or 0, meta(p).get("name", "")))
    return out


def _restarted(pod: dict) -> bool:
    return any(int(c.get("restartCount") or 0) > 0 for c, _ in container_statuses(pod))


def _worker_index(pod: dict) -> int:
    return _int(_labels(pod).get(LWS_WORKER_LABEL)) or 0


def _group_template(lws: dict) -> dict:
    """The leader's pod template of a LeaderWorkerSet (the worker's when no leader template is given)."""
    lwt = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    return lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}


def _as_workload(lws: dict) -> dict:
    """A LeaderWorkerSet seen as a Deployment-like object (metadata + spec.template: the leader's), for the
    helpers that read a pod template."""
    return {"metadata": meta(lws), "spec": {"template": _group_template(lws)}}


def hpa_of(deployment: dict, hpas: Iterable[dict]) -> dict | None:
    """The HPA whose scaleTargetRef is this Deployment (or LeaderWorkerSet)."""
    ns, name = ns_name(deployment)
    kind = deployment.get("kind") or "Deployment"
    return next((h for h in hpas if meta(h).get("namespace") == ns
                 and ((h.get("spec") or {}).get("scaleTargetRef") or {}).get("kind") == kind
                 and ((h.get("spec") or {}).get("scaleTargetRef") or {}).get("name") == name), None)


def _http_port(pod: dict) -> int:
    ports = spec_container(pod, TRITON_CONTAINER).get("ports") or []
    return next((p["containerPort"] for p in ports if p.get("name") == "http"), DEFAULT_HTTP_PORT)


def expected_models(deployment_or_pod: dict) -> list[str]:
    """Models Triton in this pod must serve: the Deployment's triton-models annotation, plus any
    --load-model=NAME. Without either only the server's readiness is probed."""
    spec = (deployment_or_pod.get("spec") or {})
    spec = (spec.get("template") or {}).get("spec") or spec
    container: dict = next((c for c in spec.get("containers") or [] if c.get("name") == TRITON_CONTAINER), {})
    labels, ann = _labels(deployment_or_pod), meta(deployment_or_pod).get("annotations") or {}
    names = [n.strip() for n in str(ann.get(TRITON_MODELS_ANN, "")).split(",")]
    if labels.get(TRACK_LABEL) and ann.get(TRITON_MODEL_ANN):  # a canary: the version it must serve
        names = [f"{ann[TRITON_MODEL_ANN]}/versions/{labels.get(VERSION_LABEL)}" if labels.get(VERSION_LABEL)
                 else ann[TRITON_MODEL_ANN]]
    for arg in (container.get("command") or []) + (container.get("args") or []):
        if arg.startswith("--load-model="):
            names.append(arg.split("=", 1)[1])
    return list(dict.fromkeys(n for n in names if n and n != "*"))


# -- what the collector must fetch -----------------------------------------------------------------------


def log_requests(snapshot: Snapshot) -> list[LogRequest]:
    """One log read per failing container of a Triton pod or an engine-build pod."""
    out = []
    pods = [p for dep in snapshot.deployments for p in pods_of(dep, snapshot.pods)
            if (p.get("status") or {}).get("phase") not in _FINISHED]
    pods += [p for job in snapshot.jobs for p in job_pods(job, snapshot.pods)]
    pods += [p for lws in snapshot.lws for members in group_pods(lws, snapshot.pods, crashed_deleting=True).values()
             for p in members if (p.get("status") or {}).get("phase") not in _FINISHED]
    for pod in pods:
        for cs, _ in container_statuses(pod):
            req = log_request(pod, cs, snapshot.events)
            if req:
                out.append(req)
    return out


def probe_targets(snapshot: Snapshot) -> list[tuple[str, str, int, list[str]]]:
    """(namespace, pod, http port, models) of every pod whose tritonserver container is running (of a group: the
    leader, where rank 0 serves)."""
    out = []
    workloads = [(dep, pods_of(dep, snapshot.pods)) for dep in snapshot.deployments]
    workloads += [(_as_workload(lws), [p for members in group_pods(lws, snapshot.pods).values() for p in members
                                       if _worker_index(p) == 0]) for lws in snapshot.lws]
    for dep, pods in workloads:
        models = expected_models(dep)
        for pod in pods:
            cs = next((c for c, init in container_statuses(pod) if not init and c.get("name") == TRITON_CONTAINER),
                      None)
            if cs and (cs.get("state") or {}).get("running"):
                out.append((*ns_name(pod), _http_port(pod), models))
    return out


# -- diagnosis -------------------------------------------------------------------------------------------

def diagnose(snapshot: Snapshot, models: Iterable[str] = (), *, namespace: str = "",
             unschedulable_grace_s: float = UNSCHEDULABLE_GRACE_S) -> list[ModelStatus]:
    """A verdict per Triton Deployment in the snapshot (only `models` when given; a named model without
    a Deployment is Unknown, reported in `namespace`)."""
    now = snapshot.now or datetime.now(timezone.utc)
    wanted = list(dict.fromkeys(models))
    results: list[ModelStatus] = []
    pairs: list[tuple[dict, ModelStatus]] = []
    seen = set()
    for dep in sorted(snapshot.deployments, key=lambda d: (ns_name(d)[0], model_name(d))):
        name, instance = model_name(dep), _labels(dep).get(INSTANCE_LABEL)
        if wanted and name not in wanted and instance not in wanted:
            continue
        seen.update({name, instance})  # a canary is named by its model or by its instance (MODEL-canary)
        results.append(diagnose_model(dep, snapshot, now, unschedulable_grace_s))
        pairs.append((dep, results[-1]))
    _tracks(snapshot, pairs)
    for lws in sorted(snapshot.lws, key=lambda d: (ns_name(d)[0], model_name(d))):
        name = model_name(lws)
        if wanted and name not in wanted:
            continue
        seen.add(name)
        results.append(diagnose_group(lws, snapshot, now, unschedulable_grace_s))
    for job in sorted(snapshot.jobs, key=lambda j: ns_name(j)):
        instance = _labels(job).get(INSTANCE_LABEL)
        if wanted and instance not in wanted:
            continue  # a Job alone (an engine build done) is no serving workload: the model is not found yet
        results.append(diagnose_job(job, snapshot, now, unschedulable_grace_s))
    for name in wanted:
        if name not in seen:
            results.append(ModelStatus(name, namespace, UNKNOWN, "-", None, [reason(
                "DeploymentNotFound", f"no Triton Deployment or LeaderWorkerSet for model {name!r} in "
                + (f"namespace {namespace}" if namespace else "any namespace"), SEV_UNKNOWN)]))
    return results


def canaries(deployments: Iterable[dict]) -> list[dict]:
    """Deployments that are the canary track of a model (written by `kubectl triton canary`)."""
    return [d for d in deployments if _labels(d).get(TRACK_LABEL) == "canary" and _labels(d).get(MODEL_LABEL)]


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _tracks(snap: Snapshot, pairs: list[tuple[dict, ModelStatus]]) -> None:
    """Mark the stable and canary rows of each model with a canary in progress: version and route weight.
    The stable track is the model's Deployment without a track label in the canary's namespace."""
    for can in canaries(snap.deployments):
        ns, model = ns_name(can)[0], model_name(can)
        ann = meta(can).get("annotations") or {}
        stable = next((d for d in snap.deployments if ns_name(d)[0] == ns and model_name(d) == model
                       and not _labels(d).get(TRACK_LABEL)), None)
        weights = _route_weights(snap.routes, ns, can, stable)
        for dep, status in pairs:
            if dep is can:
                status.track, status.version = "canary", _int(_labels(can).get(VERSION_LABEL))
            elif dep is stable:
                status.track, status.version = "stable", _int(ann.get(STABLE_VERSION_ANN))
            else:
                continue
            status.weight = weights.get(status.track)


def _route_weights(routes: list[dict], ns: str, canary: dict, stable: dict | None) -> dict[str, int]:
    """Weights (percent) of the stable and canary Services in the route that splits between them."""
    names = {"canary": ns_name(canary)[1]}
    if stable is not None:
        names["stable"] = ns_name(stable)[1]
    for route in routes:
        if meta(route).get("namespace") != ns:
            continue
        for rule in (route.get("spec") or {}).get("rules") or []:
            refs = {b.get("name"): b for b in rule.get("backendRefs") or [] if isinstance(b, dict)}
            if names["canary"] in refs:
                total = sum(int(b.get("weight", 1)) for b in refs.values()) or 1
                return {t: round(100 * int(refs[n].get("weight", 1)) / total) for t, n in names.items() if n in refs}
    return {}


def diagnose_model(dep: dict, snap: Snapshot, now: datetime, grace: float) -> ModelStatus:
    ns, _ = ns_name(dep)
    spec, status = dep.get("spec") or {}, dep.get("status") or {}
    replicas = int(spec.get("replicas", 1))
    ready = f"{int(status.get('readyReplicas') or 0)}/{replicas}"
    all_pods = pods_of(dep, snap.pods)
    # Pods the kubelet finished (evicted, rejected at admission) are history the ReplicaSet replaced: they
    # weigh only while the Deployment is short of ready replicas, and never as a crash in progress.
    pods = [p for p in all_pods if (p.get("status") or {}).get("phase") not in _FINISHED]
    short = int(status.get("readyReplicas") or 0) < replicas
    pod_reasons: list[Reason] = []
    deadline = progress_deadline_s(dep)
    for pod in pods:
        pod_reasons += _pod_reasons(pod, snap, now, grace, deadline)
    for pod in all_pods:
        if pod not in pods:
            pod_reasons += _finished_pod_reasons(pod, short=short, now=now, history_s=deadline or 600.0)
    if snap.probing:
        for pod in pods:
            probe = snap.probes.get(ns_name(pod))
            if probe is not None:
                pod_reasons += _probe_reasons(pod, probe)
    reasons = _dedupe(pod_reasons)
    reasons += _deployment_reasons(dep, has_pod_reasons=any(r.severity not in (SEV_WARNING, SEV_UNKNOWN)
                                                            for r in reasons))
    ks = kustomizations_of(dep, snap.kustomizations)
    settled = None if _unsettled(reasons) else ("Deployment", *ns_name(dep))
    for k in ks:
        reasons += flux_reasons(k, settled)
    h = hpa_of(dep, snap.hpas)
    if h:
        reasons += _hpa_reasons(h)
    reasons.sort(key=lambda r: r.rank)  # stable: within a rank, the most specific (logs) stay first
    revision = next(((k.get("status") or {}).get("lastAppliedRevision") for k in ks), None)
    return ModelStatus(model_name(dep), ns, phase_of(reasons), ready, revision, reasons)


def _unsettled(reasons: list[Reason]) -> bool:
    return any(r.severity in (SEV_FAILED, SEV_PROGRESSING, SEV_UNKNOWN) for r in reasons)


def phase_of(reasons: list[Reason]) -> str:
    severities = {r.severity for r in reasons}
    for sev, phase in ((SEV_FAILED, FAILED), (SEV_UNKNOWN, UNKNOWN), (SEV_PROGRESSING, PROGRESSING)):
        if sev in severities:
            return phase
    return HEALTHY


def _dedupe(reasons: list[Reason]) -> list[Reason]:
    """One reason per code (the first, most severe), noting how many more pods showed it."""
    by_code: dict[str, list[Reason]] = {}
    for r in sorted(reasons, key=lambda r: r.rank):
        by_code.setdefault(r.code, []).append(r)
    out = []
    for code in dict.fromkeys(r.code for r in reasons):
        first, more = by_code[code][0], len(by_code[code]) - 1
        if more:
            first = Reason(first.code, f"{first.message} (and {more} more)", first.fix, first.severity,
                           first.terminal)
        out.append(first)
    return out


def _finished_pod_reasons(pod: dict, *, short: bool, now: datetime, history_s: float) -> list[Reason]:
    """An evicted pod or one the kubelet refused at admission (phase Failed, never a crash in progress). A
    rejection explains a shortage only when it is recent (created within `history_s`, the progress deadline): an
    old one stays until pod garbage collection and says nothing of a later rollout or scale-up."""
    _, name = ns_name(pod)
    status = pod.get("status") or {}
    why, msg = status.get("reason") or "", first_line(status.get("message"))
    if why == "UnexpectedAdmissionError":
        created = parse_time(meta(pod).get("creationTimestamp"))
        recent = created is None or (now - created).total_seconds() <= history_s
        return [reason("UnexpectedAdmissionError", f"the kubelet rejected pod {name}: {msg or why}",
                       SEV_FAILED if short and recent else SEV_WARNING)]
    if why == "Evicted":
        return [reason("PodEvicted", f"pod {name} was evicted: {msg or why}", SEV_WARNING)]
    return []


def _pod_reasons(pod: dict, snap: Snapshot, now: datetime, grace: float,
                 deadline_s: float | None = None) -> list[Reason]:
    """A pod's own reasons: scheduling (`deadline_s`: its Deployment's progress deadline, see scheduling.py),
    then each container's state, events and log."""
    events = events_of(pod, snap.events)
    out = scheduling_reasons(pod, events, now, grace, deadline_s)
    for cs, init in container_statuses(pod):
        out += container_reasons(pod, cs, init, events, snap, now, deadline_s)
    return out


def _probe_reasons(pod: dict, probe: Probe) -> list[Reason]:
    _, pname = ns_name(pod)
    if probe.error:
        return []  # the probe is an enrichment: the collector notes once why it was skipped
    out = []
    if probe.server_ready is False:
        out.append(reason("TritonNotReady", f"Triton in pod {pname} answers /v2/health/ready with "
                          f"{probe.detail or 'not ready'}", SEV_PROGRESSING))
    for m in probe.models:
        if not m.ready:
            # Triton's HTTP endpoint starts after the initial load, so a model not ready now failed to load.
            out.append(reason("ModelNotReady", f"model {m.name} in pod {pname} is not ready"
                              + (f": Triton says {m.reason!r}" if m.reason else ""), SEV_FAILED, terminal=True))
    return out


def progress_deadline_s(dep: dict) -> float | None:
    """The Deployment's spec.progressDeadlineSeconds; None when it has none: absent (a hand-written object; the
    API server defaults apps/v1 to 600) or MaxInt32, which kstatus and the controller read as no deadline."""
    value = _int((dep.get("spec") or {}).get("progressDeadlineSeconds"))
    return None if value is None or value >= NO_PROGRESS_DEADLINE else float(value)


def _deployment_reasons(dep: dict, *, has_pod_reasons: bool) -> list[Reason]:
    """kstatus semantics for Deployments (cli-utils pkg/kstatus/status/core.go): InProgress until the
    generation is observed, replicas created, updated, available and ready, the Progressing condition says
    NewReplicaSetAvailable and Available is True; Failed on ProgressDeadlineExceeded. Also the controller's
    ReplicaFailure (FailedCreate: quota, admission) and spec.paused.

    The conditions confirm the counts where the controller writes them. Without a progress deadline (absent or
    MaxInt32) it keeps no Progressing condition at all (kstatus skips the check then); a status without one, or
    without an Available condition (which availableReplicas == replicas implies), is no evidence against a
    complete rollout, so the counts decide, as in `kubectl rollout status` and Argo CD's Deployment health. A
    condition the controller did write and that disagrees (Progressing not NewReplicaSetAvailable, Available
    False) keeps the rollout InProgress, as kstatus does."""
    _, name = ns_name(dep)
    spec, status = dep.get("spec") or {}, dep.get("status") or {}
    replicas = int(spec.get("replicas", 1))
    generation = int(meta(dep).get("generation") or 0)
    observed = int(status.get("observedGeneration") or 0)
    out: list[Reason] = []
    failure = condition(dep, "ReplicaFailure")
    if failure and failure.get("status") == "True":
        why = first_line(failure.get("message"))
        code = "QuotaExceeded" if re.search(r"(exceeded|failed) quota", why, re.I) else "ReplicaFailure"
        out.append(reason(code, f"Deployment {name} cannot create pods ({failure.get('reason', '')}): {why}",
                          SEV_FAILED, terminal=True))
    progressing = condition(dep, "Progressing") or {}
    if observed >= generation and progressing.get("reason") == "ProgressDeadlineExceeded":
        deadline = spec.get("progressDeadlineSeconds", 600)
        return out + [reason("ProgressDeadlineExceeded", f"Deployment {name} made no progress for {deadline}s: "
                             f"{progressing.get('message', '')}".rstrip(": "), SEV_FAILED, terminal=True)]
    updated = int(status.get("updatedReplicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    ready = int(status.get("readyReplicas") or 0)
    total = int(status.get("replicas") or 0)
    # (a paused Deployment's controller replaces the condition with DeploymentPaused: the counts say the rest)
    new_rs_available = progress_deadline_s(dep) is None or not progressing or \
        progressing.get("reason") == "DeploymentPaused" or (
            progressing.get("status") == "True" and progressing.get("reason") == "NewReplicaSetAvailable")
    available_cond = (condition(dep, "Available") or {"status": "True"}).get("status") == "True"
    msg: str | None = None
    if observed < generation:
        msg = f"Deployment {name} generation {generation} not yet observed by the controller (at {observed})"
    elif replicas > total:
        msg = f"Deployment {name}: {total} of {replicas} replicas created"
    elif updated < replicas:
        msg = f"Deployment {name}: {updated} of {replicas} replicas updated"
    elif total > replicas:
        msg = f"Deployment {name}: {total - replicas} old replicas pending termination"
    elif available < updated:
        msg = f"Deployment {name}: {available} of {updated} updated replicas available"
    elif ready < replicas:
        msg = f"Deployment {name}: {ready} of {replicas} replicas ready"
    elif not new_rs_available:
        msg = f"Deployment {name}: the new ReplicaSet is not available yet (Progressing: " \
              f"{progressing.get('reason') or 'not reported'})"
    elif not available_cond:
        msg = f"Deployment {name} is not Available yet"
    if spec.get("paused"):
        return out + [reason("RolloutPaused", f"Deployment {name} is paused (spec.paused)"
                             + (f" mid-rollout: {msg.split(': ', 1)[-1]}" if msg else
                                ": later changes will not roll out"), SEV_PROGRESSING if msg else SEV_WARNING)]
    if msg is None or has_pod_reasons or out:
        return out  # the pod-level reasons say why the rollout does not progress
    return [reason("RolloutInProgress", msg, SEV_PROGRESSING)]


def _hpa_conditions(h: dict) -> list[dict]:
    """An HPA's conditions: autoscaling/v2's status.conditions, or autoscaling/v1's annotation."""
    conds = (h.get("status") or {}).get("conditions")
    if conds:
        return conds
    raw = (meta(h).get("annotations") or {}).get(_HPA_CONDITIONS_ANN)
    try:
        parsed = json.loads(raw) if raw else []
    except ValueError:
        return []
    return parsed if isinstance(parsed, list) else []


def _hpa_reasons(h: dict) -> list[Reason]:
    """AbleToScale=False (cannot read or update the scale) and ScalingActive=False (no metric, disabled, bad
    selector): warnings, the model serves at its current replica count."""
    _, name = ns_name(h)
    conds = {c.get("type"): c for c in _hpa_conditions(h) if isinstance(c, dict)}
    active, able = conds.get("ScalingActive") or {}, conds.get("AbleToScale") or {}
    if active.get("status") == "False" and _HPA_METRIC_FAILURES.search(active.get("reason", "")):
        return [reason("HPAMetricUnavailable", f"HPA {name} cannot compute a replica count "
                       f"({active.get('reason')}): {first_line(active.get('message'))}", SEV_WARNING)]
    for cond in (able, active):
        if cond.get("status") == "False":
            return [reason("HPAUnableToScale", f"HPA {name} {cond.get('type')}=False ({cond.get('reason')}): "
                           f"{first_line(cond.get('message'))}", SEV_WARNING)]
    return []


# -- multi-node groups (LeaderWorkerSet) ----------------------------------------------------------------

def _ready(pod: dict) -> bool:
    return (condition(pod, "Ready") or {}).get("status") == "True"


def _gpus_per_pod(lws: dict) -> str:
    containers = (_group_template(lws).get("spec") or {}).get("containers") or []
    total = sum(_int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")) or 0 for c in containers)
    return str(total) if total else "?"


def _recreations(lws: dict, events: list[dict]) -> dict[int, tuple[int, str, str]]:
    """Per group index: how often the lws controller recreated the group (RecreateGroup events regarding the
    set: "Worker pod X failed, deleted leader pod Y to recreate group N"), the last message and its time."""
    out: dict[int, tuple[int, str, str]] = {}
    for e in events_of(lws, events):
        m = _RECREATED.search(e.get("message") or "")
        if e.get("reason") != RECREATE_GROUP_EVENT or not m:
            continue
        group = int(m.group("group"))
        count, _, _ = out.get(group, (0, "", ""))
        when = e.get("lastTimestamp") or e.get("eventTime") or meta(e).get("creationTimestamp") or ""
        out[group] = (count + int(e.get("count") or 1), (e.get("message") or "").strip(), when)
    return out


def _age(now: datetime, when: str) -> str:
    t = parse_time(when)
    if t is None:
        return ""
    secs = max(0, int((now - t).total_seconds()))
    return f"{secs // 3600}h{secs % 3600 // 60}m ago" if secs >= 3600 else \
        f"{secs // 60}m{secs % 60}s ago" if secs >= 60 else f"{secs}s ago"


def _group_reasons(lws: dict, group: int, pods: list[dict], pod_reasons: dict[str, list[Reason]],
                   recreated: tuple[int, str, str] | None, now: datetime) -> tuple[str, list[Reason]]:
    """The state of one group and the reasons that concern it as a whole: a leader waiting for its workers
    (with the workers' own cause), a group the lws controller recreated after a pod failed."""
    _, name = ns_name(lws)
    size = int(((lws.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size") or 1)
    leader = next((p for p in pods if _worker_index(p) == 0), None)
    workers = [p for p in pods if _worker_index(p) != 0]
    ready = sum(1 for p in pods if _ready(p))
    complete = ready == size and len(pods) == size
    out: list[Reason] = []
    state = "Ready" if complete else "Starting"
    if leader is not None and size > 1 and not complete:
        lcs = next((c for c, init in container_statuses(leader) if not init and c.get("name") == TRITON_CONTAINER),
                   {})
        lrunning = bool((lcs.get("state") or {}).get("running")) or (leader.get("status") or {}).get("phase") \
            == "Running" and not lcs
        missing = [p for p in workers if not _ready(p)]
        absent = size - 1 - len(workers)
        if lrunning and (missing or absent > 0):
            state = "WaitingForWorkers"
            causes = [r for p in missing for r in pod_reasons.get(ns_name(p)[1], [])
                      if r.severity in (SEV_FAILED, SEV_PROGRESSING, SEV_UNKNOWN)]
            causes.sort(key=lambda r: r.rank)
            parts = []
            for p in missing:
                own = next((r for r in causes if r in pod_reasons.get(ns_name(p)[1], [])), None)
                phase = (p.get("status") or {}).get("phase") or "Pending"
                parts.append(f"{ns_name(p)[1]} is {phase}, not ready" + (f" ({own.code}: {own.message})" if own
                                                                         else ""))
            if absent > 0:
                parts.append(f"{absent} worker pod(s) not created yet")
            who = "is ready but" if _ready(leader) else "waits for its workers:"
            msg = (f"group {group} of LeaderWorkerSet {name}: leader {ns_name(leader)[1]} {who} "
                   f"{len(missing) + max(absent, 0)} of {size - 1} workers not ready: " + "; ".join(parts))
            if causes:
                first = causes[0]
                fix = (f"The workers cannot start, so the group cannot serve (the leader gives up after "
                       f"WORKER_WAIT_SECONDS and the group is recreated): {first.fix}")
                if first.code in ("InsufficientGPU", "Unschedulable"):
                    fix += (f" A group needs {size} nodes with {_gpus_per_pod(lws)} free GPUs each at once: "
                            "`kubectl triton gpus` counts the nodes that can host a whole group.")
                out.append(Reason("LeaderWaitingForWorkers", msg, fix, first.severity,
                                  first.terminal and first.severity == SEV_FAILED))
            else:
                out.append(reason("LeaderWaitingForWorkers", msg, SEV_PROGRESSING))
    if recreated:
        count, message, when = recreated
        age = _age(now, when)
        what = f"group {group} of LeaderWorkerSet {name} was recreated {count}x" + (f" (last {age})" if age else "")
        if complete:
            out.append(reason("GroupRecreated", f"{what}: {message}; all {size} pods are ready now", SEV_WARNING,
                              situation="group-recovered"))
        elif count >= GROUP_RECREATES_BEFORE_GIVING_UP:
            state = "Failed"
            out.append(reason("GroupRecreated", f"{what}, and the new group is not ready: {message}", SEV_FAILED,
                              terminal=True))
        else:
            out.append(reason("GroupRecreated", f"{what}: {message}; the new group is starting", SEV_PROGRESSING,
                              situation="group-restarting"))
    if any(r.severity == SEV_FAILED for p in pods for r in pod_reasons.get(ns_name(p)[1], [])) or \
            any(r.severity == SEV_FAILED for r in out):
        state = "Failed"
    return state, out


def _lws_reasons(lws: dict, *, has_pod_reasons: bool) -> list[Reason]:
    """The set's own progress, as its controller reports it (leaderworkerset_controller.go updateConditions):
    the generation observed, groups created/updated/ready, the mutually exclusive Available / Progressing
    conditions and UpdateInProgress during a rolling update. A partition keeps groups below it on the previous
    revision on purpose (a warning, not progress); surge groups exist until the update completes."""
    _, name = ns_name(lws)
    spec, status = lws.get("spec") or {}, lws.get("status") or {}
    replicas = int(spec.get("replicas", 1))
    rolling = ((spec.get("rolloutStrategy") or {}).get("rollingUpdateConfiguration") or {})
    partition = _int(rolling.get("partition")) or 0
    generation = int(meta(lws).get("generation") or 0)
    observed = int(status.get("observedGeneration") or 0)
    total = int(status.get("replicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    ready = int(status.get("readyReplicas") or 0)
    updating = (condition(lws, "UpdateInProgress") or {}).get("status") == "True"
    available = (condition(lws, "Available") or {}).get("status") == "True"
    ref = f"LeaderWorkerSet {name}"
    msg: str | None = None
    if observed < generation:
        msg = f"{ref} generation {generation} not yet observed by the lws controller (at {observed})"
    elif updating:
        surge = f", {total - replicas} surge group(s)" if total > replicas else ""
        msg = f"{ref}: rolling update in progress: {updated} of {replicas} groups updated, {ready} ready{surge}"
    elif replicas > total:
        msg = f"{ref}: {total} of {replicas} groups created"
    elif ready < replicas:
        msg = f"{ref}: {ready} of {replicas} groups ready"
    elif total > replicas:
        msg = f"{ref}: {total - replicas} surge group(s) being removed"
    elif partition == 0 and updated < replicas:
        msg = f"{ref}: {updated} of {replicas} groups updated"
    elif not available:
        msg = f"{ref} is not Available yet"
    out: list[Reason] = []
    if partition > 0 and updated < replicas and msg is None:
        out.append(reason("RolloutPartitioned", f"{ref}: groups 0-{partition - 1} stay on the previous revision "
                          f"(rollingUpdateConfiguration.partition: {partition}); {updated} of {replicas} groups "
                          "updated", SEV_WARNING))
    if msg is None or has_pod_reasons:
        return out
    return out + [reason("RolloutInProgress", msg, SEV_PROGRESSING)]


def _lws_event_reasons(lws: dict, events: list[dict], *, short: bool) -> list[Reason]:
    """Warnings the lws controller records on the set (FailedCreate / FailedUpdate of its StatefulSets,
    Services): failures while groups are missing, history otherwise."""
    _, name = ns_name(lws)
    out = []
    for e in events_of(lws, events):
        if e.get("type") == "Warning" and e.get("reason") in ("FailedCreate", "FailedUpdate"):
            why = first_line(e.get("message"))
            quota = bool(re.search(r"(exceeded|failed) quota", why, re.I))
            out.append(reason("QuotaExceeded" if quota else "ReplicaFailure",
                              f"LeaderWorkerSet {name}: {e.get('reason')}: {why}", SEV_FAILED if short else SEV_WARNING,
                              situation=None if quota else "lws-create-failed"))
    return out[-1:]


def diagnose_group(lws: dict, snap: Snapshot, now: datetime, grace: float) -> ModelStatus:
    """A model served by a LeaderWorkerSet: each group's pods (leader = worker index 0), the group-level reasons
    (a leader waiting for its workers, a group recreated after a pod failed), the pods' own reasons (scheduling,
    crashes, rank errors from their logs, Triton's probe of the leader), then the set's conditions, Flux and
    the HPA. READY counts groups."""
    ns, _ = ns_name(lws)
    spec, status = lws.get("spec") or {}, lws.get("status") or {}
    replicas = int(spec.get("replicas", 1))
    size = int((spec.get("leaderWorkerTemplate") or {}).get("size") or 1)
    groups = group_pods(lws, snap.pods, crashed_deleting=True)
    events = snap.lws_events + snap.events
    recreated = _recreations(lws, events)
    short = int(status.get("readyReplicas") or 0) < replicas
    reasons: list[Reason] = []
    rows: list[dict] = []
    for index in sorted(set(range(replicas)) | set(groups)):
        members = groups.get(index, [])
        live = [p for p in members if (p.get("status") or {}).get("phase") not in _FINISHED
                and not meta(p).get("deletionTimestamp")]
        dying = [p for p in members if meta(p).get("deletionTimestamp")]
        per_pod: dict[str, list[Reason]] = {}
        for pod in live:
            found = _pod_reasons(pod, snap, now, grace)
            for r in found:
                if r.code == "InsufficientGPU":  # a group's pods each need a node's worth of GPUs at once
                    found[found.index(r)] = Reason(r.code, f"{r.message} (each of the group's {size} pods needs "
                                                   f"{_gpus_per_pod(lws)} GPUs on its own node)", r.fix, r.severity,
                                                   r.terminal)
            if snap.probing and _worker_index(pod) == 0:
                probe = snap.probes.get(ns_name(pod))
                if probe is not None:
                    found += _probe_reasons(pod, probe)
            per_pod[ns_name(pod)[1]] = found
        for pod in dying:  # the crashed instance the group is being recreated for: its log says why
            per_pod[ns_name(pod)[1]] = [r for r in _pod_reasons(pod, snap, now, grace)
                                         if r.code not in ("CrashLoopBackOff", "LivenessProbeKilled")] or \
                [r for r in _pod_reasons(pod, snap, now, grace) if r.code == "CrashLoopBackOff"]
        for pod in members:
            if pod not in live and pod not in dying:
                per_pod.setdefault(ns_name(pod)[1], []).extend(
                    _finished_pod_reasons(pod, short=short, now=now, history_s=600.0))
        state, own = _group_reasons(lws, index, live, per_pod, recreated.get(index), now)
        reasons += own + [r for p in members for r in per_pod.get(ns_name(p)[1], [])]
        leader = next((p for p in live if _worker_index(p) == 0), None)
        rows.append({"group": index, "state": state if members else "Missing",
                     "ready": f"{sum(1 for p in live if _ready(p))}/{size}",
                     "leader": ns_name(leader)[1] if leader else None})
    reasons = _dedupe(reasons)
    reasons += _lws_event_reasons(lws, events, short=short)
    reasons += _lws_reasons(lws, has_pod_reasons=any(r.severity not in (SEV_WARNING, SEV_UNKNOWN) for r in reasons))
    ks = kustomizations_of(lws, snap.kustomizations)
    settled = None if _unsettled(reasons) else ("LeaderWorkerSet", *ns_name(lws))
    for k in ks:
        reasons += flux_reasons(k, settled)
    h = hpa_of(lws, snap.hpas)
    if h:
        reasons += _hpa_reasons(h)
    reasons.sort(key=lambda r: r.rank)
    revision = next(((k.get("status") or {}).get("lastAppliedRevision") for k in ks), None)
    return ModelStatus(model_name(lws), ns, phase_of(reasons), f"{int(status.get('readyReplicas') or 0)}/{replicas}",
                       revision, reasons, groups=rows)


# -- engine-build Jobs ----------------------------------------------------------------------------------

def job_pods(job: dict, pods: Iterable[dict]) -> list[dict]:
    """The Job's pods: its selector's matchLabels (controller-uid / batch.kubernetes.io/controller-uid),
    else the job-name label."""
    ns, name = ns_name(job)
    selector = ((job.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    def mine(p: dict) -> bool:
        if meta(p).get("namespace") != ns:
            return False
        if selector:
            return all(_labels(p).get(k) == v for k, v in selector.items())
        return name in (_labels(p).get("job-name"), _labels(p).get("batch.kubernetes.io/job-name"))
    return sorted((p for p in pods if mine(p)), key=lambda p: meta(p).get("creationTimestamp") or "")


def diagnose_job(job: dict, snap: Snapshot, now: datetime, grace: float) -> ModelStatus:
    """An engine-build Job: Complete is Healthy; Failed says why (deadline, back-off limit with the pod's OOM
    kill or log signature); active is Progressing unless its pod cannot run."""
    ns, name = ns_name(job)
    spec, status = job.get("spec") or {}, job.get("status") or {}
    completions = int(spec.get("completions") or 1)
    ready = f"{int(status.get('succeeded') or 0)}/{completions}"
    model = _labels(job).get(INSTANCE_LABEL) or name
    pods = job_pods(job, snap.pods)
    pod_reasons: list[Reason] = []
    for pod in pods[-2:]:  # the latest attempts
        pod_reasons += _pod_reasons(pod, snap, now, grace)
    pod_reasons = _dedupe(pod_reasons)
    failed = condition(job, "Failed")
    complete = condition(job, "Complete")
    reasons: list[Reason] = []
    if complete and complete.get("status") == "True":
        return ModelStatus(model, ns, HEALTHY, ready, None, [], job=name)
    if failed and failed.get("status") == "True":
        why = failed.get("reason", "")
        causes = [Reason(r.code, r.message, r.fix, SEV_FAILED, True) for r in pod_reasons
                  if r.severity in (SEV_FAILED, SEV_PROGRESSING) and r.code != "CrashLoopBackOff"]
        if why == "DeadlineExceeded":
            reasons.append(reason("JobDeadlineExceeded", f"Job {name} ran longer than activeDeadlineSeconds "
                                  f"({spec.get('activeDeadlineSeconds')}s): {first_line(failed.get('message'))}",
                                  SEV_FAILED, terminal=True))
        reasons = causes + reasons
        if not reasons:
            crash = [r for r in pod_reasons if r.code == "CrashLoopBackOff"]
            reasons.append(reason("JobFailed", f"Job {name} failed ({why}): {first_line(failed.get('message'))}"
                                  + (f"; {crash[0].message}" if crash else ""), SEV_FAILED, terminal=True))
        return ModelStatus(model, ns, FAILED, ready, None, reasons, job=name)
    if spec.get("suspend"):
        reasons.append(reason("JobSuspended", f"Job {name} is suspended", SEV_PROGRESSING))
    blocking = [r for r in pod_reasons if r.severity == SEV_FAILED and r.code != "CrashLoopBackOff"]
    reasons += blocking or [reason("EngineBuildRunning", f"Job {name}: {int(status.get('active') or 0)} pod(s) "
                                   f"running, {int(status.get('failed') or 0)} failed so far", SEV_PROGRESSING)]
    reasons.sort(key=lambda r: r.rank)
    return ModelStatus(model, ns, phase_of(reasons), ready, None, reasons, job=name)
