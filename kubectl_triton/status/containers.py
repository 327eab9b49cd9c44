"""A container's own reasons: its state (waiting, crashed, OOM-killed, pulling), its events and its log.

Image pulls, by the cause (read in the waiting message, where kubelet 1.31 on appends the last pull error to
"Back-off pulling image", and in the kubelet's latest `Failed` event, "Failed to pull image ...: <error>"; quoted
image references and URLs left out, so a tag like `build-500` says nothing):
- one no retry cures (the image or tag does not exist, the registry refuses the credentials, an invalid reference):
  Failed at once;
- one a later attempt may not meet (a registry's rate limit or outage, a network failure; the kubelet retries with a
  back-off of up to 5 min): Progressing until the pull has failed for longer than the rollout can wait — the
  Deployment's progressDeadlineSeconds, or PULL_RETRY_S for a workload without one (none set, MaxInt32, a
  LeaderWorkerSet) — then Failed;
- an unknown one: Progressing on the first attempt (ErrImagePull), Failed once the kubelet backs off
  (ImagePullBackOff: most such pulls never succeed), but `--wait` gives up only past the same deadline.
A failed pull is dated by the kubelet's first Failed event, else by when the container could start pulling (its
init containers' end, else the pod's start), never by the pod's creation (it may have waited for a node).
"""

from __future__ import annotations

import re
from datetime import datetime

from kubectl_triton.status import signatures
from kubectl_triton.status.model import (
    SEV_FAILED,
    SEV_PROGRESSING,
    SEV_WARNING,
    LogRequest,
    Reason,
    Snapshot,
    parse_time,
)
from kubectl_triton.status.objects import events_of, meta, ns_name, spec_container
from kubectl_triton.status.reasons import FIXES, reason
from kubectl_triton.status.scheduling import event_time

CRASHES_BEFORE_GIVING_UP = 3  # a crash loop without a known signature is terminal after this many restarts
_IMAGE_PULL = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"}
_IMAGE_PULL_HOPELESS = re.compile(r"manifest unknown|manifest for \S+ not found|failed to resolve reference.*not found|"
                                  r"repository \S*\s*(?:does not exist|not found)|pull access denied|unauthorized|"
                                  r"denied|invalid reference|no match for platform", re.I)
# a registry's rate limit or outage, a network failure: containerd's, Go's and the registries' own words (real
# kubelet events: tests/fixtures/status_corpus/pulls.yaml)
_IMAGE_PULL_TRANSIENT = re.compile(r"toomanyrequests|\b429 Too Many Requests|status(?: code)?:?\s*50[0234]\b|"
                                   r"\b50[0234] (?:Internal|Bad|Service|Gateway)|bad gateway|service unavailable|"
                                   r"gateway time-?out|i/o timeout|tls handshake timeout|timeout exceeded|"
                                   r"deadline exceeded|context canceled|connection (?:refused|reset|timed out)|"
                                   r"no route to host|network is unreachable|server misbehaving|"
                                   r"temporary failure in name resolution|unexpected EOF|: EOF\b|GOAWAY|"
                                   r"use of closed network connection|broken pipe|pull QPS exceeded", re.I)
_QUOTED_OR_URL = re.compile(r'"[^"]*"|https?://\S+')
_COMBINED = "(combined from similar events): "  # client-go's event aggregator's prefix
PULL_RETRY_S = 600.0  # a Deployment's default progressDeadlineSeconds
_CONFIG_ERRORS = {"CreateContainerConfigError", "CreateContainerError"}
CRASH_WAITING = {"CrashLoopBackOff", "RunContainerError", "Error"}
_LIVENESS_KILL = re.compile(r"failed liveness probe", re.I)


def unhealthy_count(pod: dict, events: list[dict]) -> int:
    return sum(int(e.get("count") or 1) for e in events_of(pod, events) if e.get("reason") == "Unhealthy")


def log_request(pod: dict, cs: dict, events: list[dict]) -> LogRequest | None:
    """The log to read for a failing container, or None when the container is not failing."""
    if cs.get("ready"):
        return None
    ns, name = ns_name(pod)
    state, last = cs.get("state") or {}, cs.get("lastState") or {}
    restarts = int(cs.get("restartCount") or 0)
    terminated = state.get("terminated")
    if terminated and terminated.get("reason") != "Completed":
        return LogRequest(ns, name, cs["name"], False, (meta(pod).get("uid"), cs["name"], restarts, "terminated"))
    waiting = (state.get("waiting") or {}).get("reason")
    if waiting in CRASH_WAITING and last.get("terminated"):
        return LogRequest(ns, name, cs["name"], True, (meta(pod).get("uid"), cs["name"], restarts, "previous"))
    last_term = last.get("terminated") or {}
    if state.get("running") and restarts and last_term and last_term.get("reason") != "Completed":
        # restarted after a crash and not ready (yet): the cause is in the instance that died
        return LogRequest(ns, name, cs["name"], True, (meta(pod).get("uid"), cs["name"], restarts, "previous"))
    if state.get("running"):
        unhealthy = unhealthy_count(pod, events)
        if unhealthy:  # probes fail: Triton may have logged why (e.g. a model that failed to load)
            return LogRequest(ns, name, cs["name"], False,
                              (meta(pod).get("uid"), cs["name"], restarts, "running", unhealthy))
    return None


def container_reasons(pod: dict, cs: dict, init: bool, events: list[dict], snap: Snapshot, now: datetime,
                      deadline_s: float | None = None) -> list[Reason]:
    """`deadline_s`: the workload's progressDeadlineSeconds (None: it has none)."""
    _, pname = ns_name(pod)
    cname = cs.get("name", "")
    where = f"{'init container' if init else 'container'} {cname} of pod {pname}"
    state, last = cs.get("state") or {}, cs.get("lastState") or {}
    waiting = state.get("waiting") or {}
    wreason, wmsg = waiting.get("reason"), (waiting.get("message") or "").strip()
    restarts = int(cs.get("restartCount") or 0)
    out: list[Reason] = []

    log_sigs: list[Reason] = []
    log_text: str | None = None
    req = log_request(pod, cs, snap.events)
    if req is not None and req.target in snap.logs:
        log_text = snap.logs[req.target]
        log_sigs = signatures.match(log_text, container=cname, pod=pname)
        which = "previous instance of " if req.previous else ""
        log_sigs = [Reason(r.code, f"{which}{where}: {r.message}", r.fix, r.severity, r.terminal) for r in log_sigs]
    out += log_sigs

    terminated = state.get("terminated") or {}
    last_term = last.get("terminated") or {}
    # A container running and ready now: its lastState is history (an old OOM kill, a probe restart).
    healed = bool(state.get("running")) and bool(cs.get("ready"))
    running_again = bool(state.get("running")) and not cs.get("ready") and restarts > 0 and bool(last_term) \
        and last_term.get("reason") != "Completed"
    if "OOMKilled" in (terminated.get("reason"), last_term.get("reason")):
        limit = ((spec_container(pod, cname).get("resources") or {}).get("limits") or {}).get("memory")
        if healed:
            out.append(reason("OOMKilled", f"{where} was OOM-killed earlier (at {last_term.get('finishedAt', '?')}"
                              f", restarts: {restarts}); it is running and ready since "
                              f"{(state.get('running') or {}).get('startedAt', '?')}", SEV_WARNING))
        else:
            out.append(reason("OOMKilled", f"{where} was killed for exceeding its memory limit"
                              + (f" ({limit})" if limit else "") + f"; restarts: {restarts}", SEV_FAILED,
                              terminal=True))
    liveness = [e for e in events if e.get("reason") == "Killing" and _LIVENESS_KILL.search(e.get("message") or "")
                and f"Container {cname} " in (e.get("message") or "")]
    if liveness and not healed and not init and last_term.get("reason") != "OOMKilled":
        count = sum(int(e.get("count") or 1) for e in liveness)
        unhealthy = next((e.get("message", "") for e in reversed(events) if e.get("reason") == "Unhealthy"
                          and "liveness" in (e.get("message") or "").lower()), "")
        code = last_term.get("exitCode")
        out.append(reason("LivenessProbeKilled", f"{where} was restarted {count}x by its liveness probe"
                          + (f" (exit code {code})" if code is not None else "") + (f": {unhealthy.strip()}"
                                                                                   if unhealthy else ""),
                          SEV_FAILED, terminal=count >= 2 and not log_sigs))
    if wreason == "CrashLoopBackOff" or running_again:
        code = last_term.get("exitCode")
        detail = f"restarts: {restarts}" + (f", last exit code {code}" if code is not None else "") + \
                 (f" ({last_term.get('reason')})" if last_term.get("reason") else "")
        # a signature that waiting may cure (a lost worker, a worker that came up late) leaves the crash itself
        # non-terminal too, so the signature stays first
        terminal = any(r.terminal for r in log_sigs) or restarts >= CRASHES_BEFORE_GIVING_UP or "OOMKilled" in detail
        if terminal and log_sigs:  # crashing past the limit: the signatures' causes are terminal now too
            out = [Reason(r.code, r.message, r.fix, r.severity, True) if r in log_sigs else r for r in out]
        quoted = signatures.error_lines(log_text) if log_text and not log_sigs else []
        what = "keeps crashing" if wreason == "CrashLoopBackOff" else "crashed and runs again, not ready"
        msg = f"{where} {what} ({detail})" + (": " + " / ".join(f'"{q}"' for q in quoted) if quoted else "")
        sev = SEV_FAILED if wreason == "CrashLoopBackOff" or terminal or log_sigs else SEV_PROGRESSING
        fix = FIXES["CrashLoopBackOff"] if log_sigs else _crash_fix(quoted, log_text)
        out.append(Reason("CrashLoopBackOff", msg, fix, sev, terminal and sev == SEV_FAILED))
    elif wreason in _IMAGE_PULL:
        out.append(_image_pull_reason(pod, cs, init, where, events, now, deadline_s))
    elif wreason in _CONFIG_ERRORS:
        out.append(reason("CreateContainerConfigError", f"{where} cannot be created: {wmsg or wreason}",
                          SEV_FAILED, terminal=True))
    elif terminated and terminated.get("reason") != "Completed" and not log_sigs and "OOMKilled" not in str(terminated):
        quoted = signatures.error_lines(log_text) if log_text else []
        out.append(Reason("CrashLoopBackOff", f"{where} exited with code {terminated.get('exitCode')} "
                          f"({terminated.get('reason', 'Error')})"
                          + (": " + " / ".join(f'"{q}"' for q in quoted) if quoted else ""),
                          _crash_fix(quoted, log_text), SEV_FAILED if restarts >= 2 else SEV_PROGRESSING))
    if state.get("running") and not cs.get("started", cs.get("ready")) and not init:
        out += _startup_reasons(pod, cs, events, where)
    return out


def _crash_fix(quoted: list[str], log_text: str | None) -> str:
    """CrashLoopBackOff's fix: point at the quoted lines when there are some, else say how to read the log."""
    if quoted:
        return FIXES["CrashLoopBackOff"]
    if log_text is None:
        return ("The log was not read here: read it with `kubectl logs --previous POD -c CONTAINER` and fix the "
                "model or server arguments in git.")
    return ("The log's last lines show no error: read more of it (`kubectl logs --previous POD -c CONTAINER`); "
            "exit code 137 without OOMKilled means the container was killed (probe or eviction), 139 a crash.")


def _startup_reasons(pod: dict, cs: dict, events: list[dict], where: str) -> list[Reason]:
    failures = [e for e in events if e.get("reason") == "Unhealthy"
                and "startup probe" in (e.get("message") or "").lower()]
    if not failures:
        return []
    killed = any(e.get("reason") == "Killing" and "startup probe" in (e.get("message") or "").lower()
                 for e in events)
    probe = spec_container(pod, cs.get("name", "")).get("startupProbe") or {}
    budget = ""
    if probe:
        budget = f" (budget {int(probe.get('failureThreshold', 3)) * int(probe.get('periodSeconds', 10))}s)"
    count = sum(int(e.get("count") or 1) for e in failures)
    last = (failures[-1].get("message") or "").strip()
    verdict = "was restarted for failing it" if killed else "still failing"
    return [reason("StartupProbeFailing", f"{where}: startup probe {verdict}{budget}, {count} failures: {last}",
                   SEV_FAILED if killed else SEV_PROGRESSING, terminal=killed)]


def _pull_failures(cs: dict, init: bool, events: list[dict]) -> list[dict]:
    """The kubelet's "Failed to pull image" events about this container (by its fieldPath, else by the image),
    oldest first by when they last happened."""
    path = f"spec.{'initContainers' if init else 'containers'}{{{cs.get('name', '')}}}"
    image = cs.get("image") or ""
    out = []
    for e in events:
        msg = (e.get("message") or "").removeprefix(_COMBINED)
        if e.get("reason") != "Failed" or not msg.startswith("Failed to pull image"):
            continue
        field = (e.get("involvedObject") or {}).get("fieldPath")
        if field == path or (not field and image and f'"{image}"' in msg):
            out.append(e)
    return sorted(out, key=event_time)


def _first_time(e: dict) -> datetime | None:
    return parse_time(e.get("firstTimestamp") or e.get("eventTime") or e.get("lastTimestamp")
                      or meta(e).get("creationTimestamp"))


def _pull_start(pod: dict, init: bool) -> datetime | None:
    """When the container could start pulling: its init containers' end (a main container's), else the pod's start
    (the kubelet's), else its scheduling."""
    status = pod.get("status") or {}
    if not init:
        ends = [parse_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                for c in status.get("initContainerStatuses") or []]
        known = [t for t in ends if t is not None]
        if known:
            return max(known)
    scheduled: dict = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    return parse_time(status.get("startTime")) or parse_time(scheduled.get("lastTransitionTime"))


def _image_pull_reason(pod: dict, cs: dict, init: bool, where: str, events: list[dict], now: datetime,
                       deadline_s: float | None) -> Reason:
    """ImagePullBackOff by its cause (see the module's docstring)."""
    waiting = (cs.get("state") or {}).get("waiting") or {}
    wreason, wmsg = waiting.get("reason", ""), (waiting.get("message") or "").strip()
    image = cs.get("image") or spec_container(pod, cs.get("name", "")).get("image", "")
    failures = _pull_failures(cs, init, events)
    said = (failures[-1].get("message") or "").removeprefix(_COMBINED).strip() if failures else ""
    cause = _QUOTED_OR_URL.sub(" ", f"{wmsg} {said}")
    text = f"{where} cannot pull image {image}: {wreason}" + (f": {wmsg}" if wmsg else "")
    if said and said not in wmsg:
        text += f" (kubelet: {said})"
    if wreason in ("InvalidImageName", "ErrImageNeverPull") or _IMAGE_PULL_HOPELESS.search(cause):
        return reason("ImagePullBackOff", text, SEV_FAILED, terminal=True)
    transient = bool(_IMAGE_PULL_TRANSIENT.search(cause))
    starts = [t for t in map(_first_time, failures) if t is not None]
    since = min(starts) if starts else _pull_start(pod, init)
    waited = 0.0 if since is None else max(0.0, (now - since).total_seconds())
    budget = PULL_RETRY_S if deadline_s is None else deadline_s
    attempts = sum(int(e.get("count") or 1) for e in failures)
    tried = f"{attempts} failed attempt{'s' if attempts != 1 else ''}" if attempts else "failing"
    if waited >= budget:
        return reason("ImagePullBackOff", f"{text}; {tried}, longer than the rollout waits ({int(budget)}s)",
                      SEV_FAILED, terminal=True, situation="pull-transient" if transient else None)
    if transient:
        return reason("ImagePullBackOff", f"{text}; {tried} in {int(waited)}s, a cause a retry may not meet: the "
                      f"kubelet retries", SEV_PROGRESSING, situation="pull-transient")
    return reason("ImagePullBackOff", text, SEV_PROGRESSING if wreason == "ErrImagePull" else SEV_FAILED)
