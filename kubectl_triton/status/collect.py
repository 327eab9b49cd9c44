"""Reading a cluster for `status`: one (paged) list per resource, logs of failing containers and Triton's health
through the pod proxy as enrichments, and `--wait`'s informers (watch with backoff after 410 Gone). Read-only.

The verdict comes from the pure `kubectl_triton.status.diagnose`; this module only gathers its inputs."""

from __future__ import annotations

import json
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Protocol, overload
from urllib.parse import quote

from kubectl_triton.adapters.kube import ALL_NAMESPACES, RESOURCES, ProxyResponse
from kubectl_triton.errors import EXIT_FINDINGS, EXIT_OK, EXIT_TIMEOUT, ClusterError
from kubectl_triton.status import FAILED, HEALTHY, UNKNOWN, ModelProbe, ModelStatus, Probe, Snapshot
from kubectl_triton.status import diagnose as diag

LOG_TAIL_LINES = 60
WATCH_TIMEOUT_S = 300
TICK_S = 1.0  # re-evaluate time-based graces this often while waiting (no API request involved)
WATCH_BACKOFF_S, WATCH_BACKOFF_MAX_S = 0.5, 30.0
REPROBE_S = 5.0  # while waiting, a pod whose Triton was not (yet) ready is asked again after this long

# Snapshot field -> (resource, label selector?, field selector, namespaced-in-scope?)
SOURCES: dict[str, tuple[str, str | None, str | None, bool]] = {
    "deployments": ("deployments", "models", None, True),
    "jobs": ("jobs", "engine-build", None, True),
    "pods": ("pods", "triton", None, True),
    "events": ("events", None, "involvedObject.kind=Pod", True),
    "hpas": ("horizontalpodautoscalers", None, None, True),
    "kustomizations": ("kustomizations", None, None, False),
    "lws": ("leaderworkersets", "models", None, True),  # multi-node groups (kubernetes-sigs/lws)
    "lws_events": ("events", None, "involvedObject.kind=LeaderWorkerSet", True),  # RecreateGroup, read with groups
}
# Custom resources whose API a cluster may not serve (the CRD is not installed): a 404 means none of them.
CUSTOM = {"lws"}
# Lists the diagnosis can do without: a 403 on one is named in a note, and the rest goes on.
OPTIONAL = {
    "jobs": "engine-build Jobs are not shown",
    "events": "scheduling, probe and kill events are not used",
    "hpas": "autoscaler conditions are not checked",
    "lws": "multi-node groups (LeaderWorkerSets) are not shown",
    "lws_events": "group recreations (the lws controller's RecreateGroup events) are not counted",
}
# What each enrichment adds, for the note that says it was skipped.
PROBE_ADDS = "Triton's own per-model readiness and load errors"
LOG_ADDS = "the cause quoted from the container log"



class ClusterReader(Protocol):
    """What `status` needs of a cluster client (kubectl_triton.adapters.kube.Kube is one): read-only calls."""

    namespace: str

    @overload
    def list(self, resource: str, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, page_size: int | None = None) -> tuple[list[dict], str]: ...

    @overload
    def list(self, resource: str, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, tolerate: tuple[int, ...],
             page_size: int | None = None) -> tuple[list[dict], str] | None: ...

    def watch(self, resource: str, namespace: str | None = None, *, resource_version: str = "",
              label_selector: str | None = None, field_selector: str | None = None,
              timeout_seconds: int = 300) -> Iterator[dict]: ...

    def log(self, namespace: str, pod: str, container: str, *, previous: bool = False,
            tail_lines: int = 60) -> str: ...

    def proxy_get(self, namespace: str, pod: str, port: int, path: str, timeout: float = 5.0) -> ProxyResponse: ...

class Collector:
    """Reads the cluster into a Snapshot: five lists, then logs of failing containers and Triton probes.
    Logs and probes are cached by the state they were read for, so `--wait` re-reads only on change."""

    def __init__(self, kube: ClusterReader, namespace: str, models: tuple[str, ...], probe: bool) -> None:
        self.kube = kube
        self.namespace = namespace  # a namespace or kube.ALL_NAMESPACES
        self.models = models
        self.probe = probe
        self.flux_namespace: str | None = None  # None: all namespaces
        self._logs: dict[tuple, str] = {}
        self._probes: dict[tuple, tuple[Probe, float]] = {}
        self.notes: dict[str, str] = {}  # key -> one line: what was not read and why (said once)
        self.watch_source: dict[str, tuple[str, str | None]] = {}  # field -> (resource, field selector) if not SOURCES'
        self._probe_skipped = False
        self._log_failed: set[tuple] = set()

    @property
    def scope_name(self) -> str:
        """The namespace in scope, "" for all namespaces."""
        return "" if self.namespace == "*" else self.namespace

    def note(self, key: str, text: str) -> None:
        self.notes.setdefault(key, text)

    def selector(self, which: str | None) -> str | None:
        if which == "triton":
            return diag.POD_SELECTOR
        if which == "engine-build":
            if not self.models:
                return diag.ENGINE_BUILD_SELECTOR
            return f"{diag.ENGINE_BUILD_SELECTOR},{diag.INSTANCE_LABEL} in ({','.join(self.models)})"
        if which == "models":
            if not self.models:
                return diag.TRITON_SELECTOR
            return f"{diag.TRITON_SELECTOR},{diag.INSTANCE_LABEL} in ({','.join(self.models)})"
        return None

    def list_source(self, field: str) -> tuple[list[dict], str]:
        resource, label_which, field_selector, namespaced = SOURCES[field]
        if field == "kustomizations":
            return self._list_kustomizations()
        ns = self.namespace if namespaced else None
        if field not in OPTIONAL:
            return self.kube.list(resource, ns, label_selector=self.selector(label_which),
                                  field_selector=field_selector)
        if field in CUSTOM:
            got = self._custom(resource, ns, label_which)
        else:
            got = self.kube.list(resource, ns, label_selector=self.selector(label_which),
                                 field_selector=field_selector, tolerate=(403,))
        if got is None and resource == "events":  # RBAC may grant the newer Event API only
            newer = (field_selector or "").replace("involvedObject.", "regarding.")
            got = self.kube.list("events.k8s.io", ns, field_selector=newer, tolerate=(403, 404))
            if got is not None:
                self.watch_source[field] = ("events.k8s.io", newer)
        if got is None:
            self.note(f"list-{field}", f"not read: {RESOURCES[resource].display} (list is forbidden); "
                                       f"{OPTIONAL[field]}")
            return [], ""
        return got

    def _custom(self, resource: str, ns: str | None, label_which: str | None) -> tuple[list[dict], str] | None:
        """A custom resource's list: ([], "") when its API is not served (no CRD: nothing to show, nothing to
        note), None when the list is forbidden."""
        try:
            got = self.kube.list(resource, ns, label_selector=self.selector(label_which), tolerate=(404,))
        except ClusterError as err:
            if err.message.startswith("forbidden"):
                return None
            raise
        return got or ([], "")

    def _list_kustomizations(self) -> tuple[list[dict], str]:
        """Flux Kustomizations in any namespace; with only namespaced rights, those of flux-system.
        A cluster without Flux (API not served) has none."""
        got = self.kube.list("kustomizations", self.flux_namespace or ALL_NAMESPACES, tolerate=(403, 404))
        if got is None and self.flux_namespace is None:
            self.flux_namespace = "flux-system"
            return self._list_kustomizations()
        if got is None:  # forbidden in flux-system too: say so
            return self.kube.list("kustomizations", self.flux_namespace, tolerate=(404,)) or ([], "")
        return got

    def routes(self, deployments: list[dict]) -> list[dict]:
        """HTTPRoutes in scope, read only when a canary Deployment is (a cluster without the Gateway API, or
        without the right to list routes, shows the tracks without weights)."""

        if not diag.canaries(deployments):
            return []
        got = self.kube.list("httproutes", self.namespace, tolerate=(403, 404))
        return got[0] if got else []

    def snapshot(self) -> Snapshot:
        deployments, _ = self.list_source("deployments")
        jobs, _ = self.list_source("jobs")
        groups, _ = self.list_source("lws")
        snap = Snapshot(deployments=deployments, jobs=jobs, lws=groups, probing=self.probe)
        if deployments or jobs or groups:  # nothing else matters without a Triton Deployment, group or engine build
            for field in ("pods", "events", "hpas", "kustomizations"):
                setattr(snap, field, self.list_source(field)[0])
            snap.routes = self.routes(deployments)
        if groups:
            snap.lws_events = self.list_source("lws_events")[0]
        return snap

    def _read_log(self, req) -> str | None:
        """A failing container's log; None (and a note) when RBAC or the node's kubelet refuses it."""
        try:
            return self.kube.log(req.namespace, req.pod, req.container, previous=req.previous,
                                 tail_lines=LOG_TAIL_LINES)
        except ClusterError as err:
            forbidden = err.message.startswith("forbidden")
            key = "log-forbidden" if forbidden else f"log-{req.namespace}/{req.pod}"
            why = "get pods/log is forbidden" if forbidden else err.message
            self.note(key, f"not read: the log of {req.namespace}/{req.pod} ({why}); {LOG_ADDS} is missing, the "
                           "diagnosis uses pod state and events")
            return None

    def _probe(self, ns: str, name: str, port: int, models: list[str], ready: bool) -> Probe | None:
        """Triton's view through the pod proxy, or None once a probe was refused (RBAC) or a ready pod could not
        be reached (a NetworkPolicy, a CNI dropping the API server's traffic): then the remaining pods are not
        tried. A pod not ready yet that does not answer is still loading: no note, asked again later."""
        if self._probe_skipped:
            return None
        try:
            probe = probe_triton(self.kube, ns, name, port, models)
        except ClusterError as err:
            self._probe_skipped = True
            why = f"get pods/proxy is forbidden in namespace {ns!r}" if err.message.startswith("forbidden") \
                else err.message
            self.note("probe", f"skipped: the Triton probe ({why}); it would add {PROBE_ADDS}")
            return None
        if probe.error and not ready:
            return probe
        if probe.error:
            self._probe_skipped = True
            self.note("probe", f"skipped: the Triton probe (the API server could not reach pod {ns}/{name}:{port}: "
                               f"{probe.error}; a NetworkPolicy must admit the API server); it would add {PROBE_ADDS}")
            return None
        return probe

    def enrich(self, snap: Snapshot) -> Snapshot:
        """Add logs of failing containers and Triton probes (cached per container/pod state)."""
        snap.now = datetime.now(timezone.utc)
        for req in diag.log_requests(snap):
            if req.key in self._log_failed:  # refused for this container instance: not asked again each tick
                continue
            if req.key not in self._logs:
                text = self._read_log(req)
                if text is None:
                    self._log_failed.add(req.key)
                    continue
                self._logs[req.key] = text
            snap.logs[req.target] = self._logs[req.key]
        if self.probe:
            by_name = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in snap.pods}
            for ns, name, port, models in diag.probe_targets(snap):
                key = _probe_key(by_name[(ns, name)])
                cached = self._probes.get(key)
                if cached is None or (not _probe_ok(cached[0]) and time.monotonic() - cached[1] >= REPROBE_S):
                    pod = by_name[(ns, name)]
                    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                                for c in (pod.get("status") or {}).get("conditions") or [])
                    probe = self._probe(ns, name, port, models, ready)
                    if probe is None:
                        continue
                    self._probes[key] = cached = (probe, time.monotonic())
                snap.probes[(ns, name)] = cached[0]
        snap.notes = list(self.notes.values())
        return snap


def _probe_key(pod: dict) -> tuple:
    """A pod's probe is redone when its readiness or container state changes."""
    status = pod.get("status") or {}
    cs = [(c.get("name"), c.get("ready"), c.get("started"), c.get("restartCount")) for c in
          status.get("containerStatuses") or []]
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return (pod["metadata"].get("uid"), pod["metadata"]["name"], ready, tuple(cs))


def _probe_ok(probe: Probe) -> bool:
    return probe.error is None and probe.server_ready is True and all(m.ready for m in probe.models)


def _triton_error(body: str) -> str | None:
    try:
        return json.loads(body).get("error")
    except (ValueError, AttributeError):
        return body.strip()[:200] or None


def probe_triton(kube: ClusterReader, namespace: str, pod: str, port: int, models: list[str]) -> Probe:
    """Triton's own view through the API server's pod proxy (GET only): server readiness, then each
    expected model's readiness and, for a model that is not ready, Triton's error for it."""
    health = kube.proxy_get(namespace, pod, port, "/v2/health/ready")
    if health.error:
        return Probe(None, error=health.error)
    states = []
    for model in models:
        path = f"/v2/models/{quote(model, safe='/')}"  # NAME or NAME/versions/N
        ready = kube.proxy_get(namespace, pod, port, f"{path}/ready")
        if ready.error:
            return Probe(None, error=ready.error)
        if ready.status == 200:
            states.append(ModelProbe(model, True))
            continue
        meta = kube.proxy_get(namespace, pod, port, path)
        states.append(ModelProbe(model, False, _triton_error(meta.body) or _triton_error(ready.body)))
    return Probe(health.status == 200, tuple(states), detail=f"HTTP {health.status}")


# -- --wait: informers over the API's watch ---------------------------------------------------------------

class Informer:
    """Keeps one list current from a watch stream (re-listing on 410 Gone); signals changes on `changes`."""

    def __init__(self, collector: Collector, field: str, items: list[dict], rv: str, changes: queue.Queue,
                 stop: threading.Event) -> None:
        self.collector, self.field, self.rv = collector, field, rv
        self.items = {self._key(o): o for o in items}
        self.changes, self.stop = changes, stop
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"watch-{field}", daemon=True)

    @staticmethod
    def _key(obj: dict) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return meta.get("namespace", ""), meta.get("name", "")

    def current(self) -> list[dict]:
        with self.lock:
            return list(self.items.values())

    def _relist(self) -> None:
        items, self.rv = self.collector.list_source(self.field)
        with self.lock:
            self.items = {self._key(o): o for o in items}

    def _run(self) -> None:
        c = self.collector
        resource, label_which, field_selector, namespaced = SOURCES[self.field]
        resource, field_selector = c.watch_source.get(self.field, (resource, field_selector))
        ns = c.namespace if namespaced else (c.flux_namespace or "*")
        failures = 0  # consecutive watches that ended in 410 or at once: each waits longer before the next
        try:
            while not self.stop.is_set():
                if not self.rv:  # e.g. Flux not installed: nothing to watch
                    return
                expired, delivered, began = False, False, time.monotonic()
                for ev in c.kube.watch(resource, ns, resource_version=self.rv, label_selector=c.selector(label_which),
                                       field_selector=field_selector, timeout_seconds=WATCH_TIMEOUT_S):
                    if self.stop.is_set():
                        return
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            expired = True
                            break
                        raise ClusterError(f"watch {resource}: {obj.get('message', 'error')}")
                    delivered = True
                    self.rv = (obj.get("metadata") or {}).get("resourceVersion", self.rv)
                    if ev.get("type") == "BOOKMARK":
                        continue
                    with self.lock:
                        if ev.get("type") == "DELETED":
                            self.items.pop(self._key(obj), None)
                        else:
                            self.items[self._key(obj)] = obj
                    self.changes.put(self.field)
                quick = not delivered and time.monotonic() - began < 1.0
                failures = failures + 1 if (expired or quick) else 0
                if failures and self.stop.wait(watch_backoff(failures)):
                    return
                if expired:
                    self._relist()
                    self.changes.put(self.field)
        except ClusterError as err:
            if self.field in OPTIONAL and err.message.startswith("forbidden"):
                return  # list allowed, watch not: the list read at the start stays
            self.changes.put(err)


def watch_backoff(failures: int) -> float:
    """Seconds to wait before re-listing/re-watching after `failures` consecutive 410s or empty watches:
    0.5 s doubling to 30 s, with up to 20% jitter so many clients do not relist in step (client-go's
    reflector backs off the same way)."""
    base = min(WATCH_BACKOFF_MAX_S, WATCH_BACKOFF_S * 2 ** (failures - 1))
    return base * (1 + 0.2 * random.random())


SETTLE_S = 0.5  # how long a terminal verdict must hold before --wait stops on it


def wait_for(collector: Collector, timeout_s: float, *, grace_s: float,
             on_progress: Callable[[list[ModelStatus], float], None] | None = None,
             clock: Callable[[], float] = time.monotonic) -> tuple[list[ModelStatus], bool]:
    """Follow the rollout until every model is Healthy, one fails terminally, or `timeout_s` passes.
    Returns the last verdicts and whether the timeout ended the wait."""
    start = clock()
    changes: queue.Queue = queue.Queue()
    stop = threading.Event()
    informers: dict[str, Informer] = {}
    routes: list[dict] | None = None
    settle_until = 0.0  # when a terminal verdict seen since then may end the wait
    for field in SOURCES:
        if field == "lws_events":
            continue  # read once a group is in scope (below)
        items, rv = collector.list_source(field)
        informers[field] = Informer(collector, field, items, rv, changes, stop)
    for inf in informers.values():
        inf.thread.start()
    try:
        while True:
            if "lws_events" not in informers and informers["lws"].current():
                items, rv = collector.list_source("lws_events")
                informers["lws_events"] = Informer(collector, "lws_events", items, rv, changes, stop)
                informers["lws_events"].thread.start()
            snap = Snapshot(probing=collector.probe)
            for f in informers:
                setattr(snap, f, informers[f].current())
            if routes is None and diag.canaries(snap.deployments):
                routes = collector.routes(snap.deployments)  # read once: weights change through git
            snap.routes = routes or []
            statuses = diag.diagnose(collector.enrich(snap), collector.models,
                                    namespace=collector.scope_name, unschedulable_grace_s=grace_s)
            elapsed = clock() - start
            if on_progress:
                on_progress(statuses, elapsed)
            if not statuses and not collector.models:
                return statuses, False  # nothing in scope to wait for
            if statuses and all(s.phase == HEALTHY for s in statuses):
                return statuses, False
            if any(s.terminal for s in statuses):
                # A terminal verdict ends the wait once it has held for SETTLE_S: each watch delivers on its own,
                # and a pod's change can arrive a moment before the event that explains it (a scale-up).
                settle_until = settle_until or clock() + SETTLE_S
                if clock() >= settle_until:
                    return statuses, False
            else:
                settle_until = 0.0
            remaining = timeout_s - elapsed
            if remaining <= 0:
                return statuses, True
            try:
                pause = min(remaining, TICK_S, settle_until - clock()) if settle_until else min(remaining, TICK_S)
                item = changes.get(timeout=max(0.0, pause))
                items = [item]
                while not changes.empty():  # coalesce a burst of events into one evaluation
                    items.append(changes.get_nowait())
            except queue.Empty:
                items = []
            for item in items:
                if isinstance(item, ClusterError):
                    raise item
    finally:
        stop.set()


# -- the command ----------------------------------------------------------------------------------------

def exit_code(statuses: list[ModelStatus], timed_out: bool) -> int:
    """0 all Healthy; 1 any Failed or Unknown; 3 still Progressing when --wait timed out."""
    if any(s.phase in (FAILED, UNKNOWN) for s in statuses):
        return EXIT_FINDINGS
    if all(s.phase == HEALTHY for s in statuses):
        return EXIT_OK
    return EXIT_TIMEOUT if timed_out else EXIT_FINDINGS


