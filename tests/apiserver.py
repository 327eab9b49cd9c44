"""A small, real HTTP server that speaks the Kubernetes API's REST paths and JSON shapes, for tests and
benchmarks of the cluster commands with the real `kubernetes` client.

It serves lists (with resourceVersion), single objects, `?watch=true` streams (chunked, one JSON event per
line, 410 Gone for expired versions), `pods/NAME/log`, `pods/NAME:PORT/proxy/...` (forwarded to a real
server on loopback, e.g. tritonserver), `pods/NAME/portforward?ports=P` (a websocket speaking
v4.channel.k8s.io, bridged to the same `proxy_targets`), and custom objects (Flux). It counts every request and records
any mutating verb (POST/PUT/PATCH/DELETE) as a violation, answering 405. Also: objects shaped like a real
cluster's (Deployments, Pods, Events, HPAs, Flux Kustomizations), to build scenarios from.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import json
import re
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

TOKEN = "test-token"

# plural -> (group, version, kind, namespaced)
KINDS: dict[str, tuple[str, str, str, bool]] = {
    "pods": ("", "v1", "Pod", True),
    "events": ("", "v1", "Event", True),
    "namespaces": ("", "v1", "Namespace", False),
    "nodes": ("", "v1", "Node", False),
    "deployments": ("apps", "v1", "Deployment", True),
    "replicasets": ("apps", "v1", "ReplicaSet", True),
    "jobs": ("batch", "v1", "Job", True),
    "horizontalpodautoscalers": ("autoscaling", "v2", "HorizontalPodAutoscaler", True),
    "kustomizations": ("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", True),
    "leaderworkersets": ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", True),
}
KIND_TO_PLURAL = {kind: plural for plural, (_, _, kind, _) in KINDS.items()}
# The same stored objects served by a second API in its own shape (as the real server does for Events).
VIEWS: dict[tuple[str, str, str], str] = {("events.k8s.io", "v1", "events"): "events"}

# Field labels the real API server accepts per resource (anything else: 400 "field label not supported").
_META_FIELDS = {"metadata.name", "metadata.namespace"}
FIELD_LABELS: dict[str, set[str]] = {
    "pods": _META_FIELDS | {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                            "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
                            "status.nominatedNodeName"},
    "events": _META_FIELDS | {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                              "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                              "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"},
    "events.k8s.io": _META_FIELDS | {"regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                                     "regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath",
                                     "reason", "reportingController", "type"},
    "jobs": _META_FIELDS | {"status.successful"},
    "nodes": _META_FIELDS | {"spec.unschedulable"},
}


def events_v1(core: dict) -> dict:
    """A core v1 Event as events.k8s.io/v1 serves it (the API server converts between the two)."""
    out = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": core.get("metadata", {}),
           "regarding": core.get("involvedObject", {}), "note": core.get("message", ""),
           "reason": core.get("reason", ""), "type": core.get("type", ""),
           "reportingController": core.get("reportingComponent") or (core.get("source") or {}).get("component", ""),
           "reportingInstance": core.get("reportingInstance", ""), "action": core.get("action", ""),
           "deprecatedCount": core.get("count", 1), "deprecatedFirstTimestamp": core.get("firstTimestamp"),
           "deprecatedLastTimestamp": core.get("lastTimestamp"), "eventTime": core.get("eventTime")}
    if core.get("series"):
        out["series"] = core["series"]
    if core.get("related"):
        out["related"] = core["related"]
    return out


def core_event(ev: dict) -> dict:
    """An events.k8s.io/v1 Event as core v1 stores and serves it."""
    if ev.get("apiVersion") != "events.k8s.io/v1":
        return ev
    count = (ev.get("series") or {}).get("count") or ev.get("deprecatedCount") or 1
    return {"apiVersion": "v1", "kind": "Event", "metadata": ev.get("metadata", {}),
            "involvedObject": ev.get("regarding", {}), "message": ev.get("note", ""), "reason": ev.get("reason", ""),
            "type": ev.get("type", ""), "count": count, "reportingComponent": ev.get("reportingController", ""),
            "source": {"component": ev.get("reportingController", "")}, "eventTime": ev.get("eventTime"),
            "firstTimestamp": ev.get("deprecatedFirstTimestamp"), "lastTimestamp": ev.get("deprecatedLastTimestamp"),
            "action": ev.get("action", ""), "reportingInstance": ev.get("reportingInstance", ""),
            **({"series": ev["series"]} if ev.get("series") else {}),
            **({"related": ev["related"]} if ev.get("related") else {})}


@dataclass
class Request:
    """One request as the API server's audit log would see it."""

    method: str
    verb: str  # get, list, watch, log, proxy, or the mutating verb
    resource: str
    namespace: str | None
    name: str | None
    path: str
    group: str = ""


@dataclass
class _Watcher:
    plural: str
    namespace: str | None
    label_selector: str | None
    field_selector: str | None


@dataclass
class FakeCluster:
    """The server's state. Change it from tests with `apply`/`delete`; watches see every change."""

    objects: dict[str, dict[tuple[str, str], dict]] = field(default_factory=lambda: {p: {} for p in KINDS})
    history: list[tuple[int, str, str, dict]] = field(default_factory=list)  # (rv, plural, type, obj)
    rv: int = 1000
    history_floor: int = 1000  # watches from an older resourceVersion get 410 Gone
    logs: dict[tuple[str, str, str, bool], str | Callable[[], str]] = field(default_factory=dict)
    proxy_targets: dict[tuple[str, str, int], str] = field(default_factory=dict)
    forbidden: set[tuple] = field(default_factory=set)  # (verb, resource[, group]) refused with 403
    forbidden_cluster_wide: set[tuple[str, str]] = field(default_factory=set)  # refused across namespaces only
    faults: list[tuple[str, int]] = field(default_factory=list)  # (path regex, status) served once each
    delays: list[tuple[str, float]] = field(default_factory=list)  # (path regex, seconds) before answering, once
    token: str | None = TOKEN
    # RBAC as a real cluster applies it: when set, only requests some rule allows pass (rules in a ClusterRole's
    # shape: apiGroups, resources incl. subresources like pods/log, verbs); the rest get an RBAC-worded 403.
    rbac_rules: list[dict] | None = None
    user: str = "alice"
    broken_kubelets: set[str] = field(default_factory=set)  # node names whose kubelet answers logs/proxy with 500
    dropped_proxies: set[tuple[str, str]] = field(default_factory=set)  # (ns, pod): a NetworkPolicy drops the dial
    expire_watches: bool = False  # every watch from a resourceVersion gets 410 Gone (a compacting etcd)
    bookmark_interval: float = 1.0  # seconds between BOOKMARK events on a quiet watch that asked for them
    watch_errors: list[tuple[str, dict]] = field(default_factory=list)  # (plural, Status): sent once as ERROR
    unserved: set[str] = field(default_factory=set)  # plurals whose API is not served (CRD not installed): 404
    requests: list[Request] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    lock: threading.Condition = field(default_factory=threading.Condition)

    # -- mutation (by the test, never by the client) --------------------------------------------------
    def apply(self, *objs: dict) -> None:
        """Create or replace objects (kind decides the collection); bumps resourceVersion, notifies."""
        with self.lock:
            for obj in objs:
                obj = core_event(copy.deepcopy(obj)) if obj.get("kind") == "Event" else copy.deepcopy(obj)
                plural = KIND_TO_PLURAL[obj["kind"]]
                meta = obj.setdefault("metadata", {})
                key = (meta.get("namespace", ""), meta["name"])
                self.rv += 1
                meta["resourceVersion"] = str(self.rv)
                meta.setdefault("uid", f"uid-{plural}-{key[0]}-{key[1]}")
                event = "MODIFIED" if key in self.objects[plural] else "ADDED"
                self.objects[plural][key] = obj
                self.history.append((self.rv, plural, event, obj))
            self.lock.notify_all()

    def delete(self, kind: str, namespace: str, name: str) -> None:
        with self.lock:
            plural = KIND_TO_PLURAL[kind]
            obj = self.objects[plural].pop((namespace, name))
            self.rv += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.history.append((self.rv, plural, "DELETED", obj))
            self.lock.notify_all()

    def compact(self) -> None:
        """Forget the watch history, as etcd compaction does: older resourceVersions get 410."""
        with self.lock:
            self.history.clear()
            self.history_floor = self.rv + 1

    def allows(self, verb: str, group: str, resource: str) -> bool:
        """Whether `rbac_rules` (if set) grant `verb` on `resource` (plural or plural/subresource) in `group`."""
        if self.rbac_rules is None:
            return True
        return any(verb in r.get("verbs", []) and group in r.get("apiGroups", [])
                   and resource in r.get("resources", []) for r in self.rbac_rules)

    def count(self, verb: str | None = None, resource: str | None = None) -> int:
        return sum(1 for r in self.requests if (verb is None or r.verb == verb)
                   and (resource is None or r.resource == resource))


# -- selectors ----------------------------------------------------------------------------------------

_SET_RE = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(selector: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in [*parts, cur] if p.strip()]


def label_match(selector: str | None, labels: dict) -> bool:
    """Kubernetes label selector semantics: =, ==, !=, in, notin, exists, !exists."""
    for term in _split_selector(selector or ""):
        m = _SET_RE.match(term)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if (op == "in") != (labels.get(key) in values):
                return False
            continue
        term = term.strip()
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


_KEY = r"(?:[a-zA-Z0-9][-a-zA-Z0-9_.]*/)?[a-zA-Z0-9](?:[-a-zA-Z0-9_.]*[a-zA-Z0-9])?"
_VALUE = r"(?:[a-zA-Z0-9](?:[-a-zA-Z0-9_.]*[a-zA-Z0-9])?)?"
_LABEL_TERM = re.compile(rf"^\s*(?:!?{_KEY}|{_KEY}\s*(?:==|!=|=)\s*{_VALUE}|"
                         rf"{_KEY}\s+(?:in|notin)\s+\(\s*{_VALUE}(?:\s*,\s*{_VALUE})*\s*\))\s*$")


def selector_error(plural: str, label_selector: str | None, field_selector: str | None) -> str | None:
    """The API server's 400 message for a selector it cannot parse or a field label it does not index."""
    for term in _split_selector(label_selector or ""):
        if not _LABEL_TERM.match(term):
            return f"unable to parse requirement: found '{term.strip()}', expected a valid label selector term"
    for term in _split_selector(field_selector or ""):
        m = re.match(r"^\s*([\w.]+)\s*(==|!=|=)", term)
        if not m:
            return f"invalid selector: '{field_selector}'; can't understand '{term}'"
        if m.group(1) not in FIELD_LABELS.get(plural, _META_FIELDS):
            return f'field label not supported: {m.group(1)}'
    return None


def field_match(selector: str | None, obj: dict) -> bool:
    for term in _split_selector(selector or ""):
        negate = "!=" in term
        key, value = term.replace("!=", "=").replace("==", "=").split("=", 1)
        cur: object = obj
        for part in key.strip().split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if (str(cur if cur is not None else "") == value.strip()) == negate:
            return False
    return True


# -- the HTTP server ---------------------------------------------------------------------------------

_PATH_RE = re.compile(
    r"^/(?:api/(?P<cv>v1)|apis/(?P<group>[^/]+)/(?P<gv>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>.*))?$")


def _status(code: int, reason: str, message: str, kind: str | None = None) -> dict:
    doc = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
           "reason": reason, "code": code}
    if kind:
        doc["details"] = {"kind": kind}
    return doc


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes; no 40 ms delayed-ACK stalls
    server: _Server

    def log_message(self, *args: object) -> None:  # quiet
        pass

    # mutating verbs: record and refuse
    def _mutating(self) -> None:
        cluster = self.server.cluster
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[self.command]
        with cluster.lock:
            cluster.violations.append(f"{self.command} {self.path}")
            cluster.requests.append(Request(self.command, verb, "", None, None, self.path))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._send_json(405, _status(405, "MethodNotAllowed", f"{verb} is not allowed by this test server"))

    do_POST = do_PUT = do_PATCH = do_DELETE = _mutating

    def _send_json(self, code: int, doc: object, headers: dict | None = None) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _send_text(self, code: int, text: str, ctype: str = "text/plain") -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: C901 - a router
        cluster = self.server.cluster
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if cluster.token and (scheme.lower() != "bearer" or token != cluster.token):  # scheme is case-insensitive
            self._send_json(401, _status(401, "Unauthorized", "Unauthorized"))
            return
        if url.path == "/version":
            self._send_json(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0"})
            return
        m = _PATH_RE.match(url.path)
        if m and m.group("plural") in cluster.unserved:  # a CRD not installed: the request is made, and 404
            with cluster.lock:
                cluster.requests.append(Request("GET", "watch" if query.get("watch") in ("true", "1") else "list"
                                                if not m.group("name") else "get", m.group("plural"), m.group("ns"),
                                                m.group("name"), self.path, m.group("group") or ""))
        if not m or m.group("plural") not in KINDS or m.group("plural") in cluster.unserved:
            self._send_json(404, _status(404, "NotFound", "the server could not find the requested resource"))
            return
        plural, ns, name, sub = m.group("plural"), m.group("ns"), m.group("name"), m.group("sub")
        group = m.group("group") or ""
        version = m.group("cv") or m.group("gv")
        kgroup, kversion, kind, _ = KINDS[plural]
        view = (group, version, plural) in VIEWS
        if (group, version) != (kgroup, kversion) and not view:
            self._send_json(404, _status(404, "NotFound", "the server could not find the requested resource"))
            return
        name = unquote(name) if name else None
        if sub and sub.startswith("proxy"):
            verb = "proxy"
        elif sub == "portforward":
            verb = "portforward"
        elif sub == "log":
            verb = "log"
        elif name:
            verb = "get"
        else:
            verb = "watch" if query.get("watch") in ("true", "1") else "list"
        with cluster.lock:
            cluster.requests.append(Request("GET", verb, plural, ns, name, self.path, group))
            fault = next(((rx, code) for rx, code in cluster.faults if re.search(rx, self.path)), None)
            if fault:
                cluster.faults.remove(fault)
            delay = next(((rx, s) for rx, s in cluster.delays if re.search(rx, self.path)), None)
            if delay:
                cluster.delays.remove(delay)
        if delay:
            time.sleep(delay[1])
        if fault:
            self._send_json(fault[1], _status(fault[1], "TooManyRequests" if fault[1] == 429 else
                                              "InternalError", f"injected fault {fault[1]}"),
                            {"Retry-After": "0"} if fault[1] == 429 else None)
            return
        rbac_verb = {"proxy": "get", "log": "get", "portforward": "create"}.get(verb, verb)
        rbac_res = f"{plural}/{verb}" if verb in ("proxy", "log", "portforward") else plural
        if (rbac_verb, rbac_res) in cluster.forbidden or (rbac_verb, rbac_res, group) in cluster.forbidden or (
                ns is None and (rbac_verb, rbac_res) in cluster.forbidden_cluster_wide) or \
                not cluster.allows(rbac_verb, group, rbac_res):
            # the real API server's wording: `pods "NAME" is forbidden: User "U" cannot get resource "pods/log"
            # in API group "" in the namespace "NS"` (no name for list/watch), details {name, kind: plural}
            where = f'in the namespace "{ns}"' if ns else "at the cluster scope"
            # (a resource of a named group is qualified: `leaderworkersets.leaderworkerset.x-k8s.io is forbidden`)
            qualified = f"{plural}.{group}" if group else plural
            target = f'{qualified} "{name.split(":")[0]}"' if name else qualified
            doc = _status(403, "Forbidden", f'{target} is forbidden: User "{cluster.user}" cannot {rbac_verb} '
                          f'resource "{rbac_res}" in API group "{group}" {where}', plural)
            if name:
                doc["details"]["name"] = name.split(":")[0]
            if group:
                doc["details"]["group"] = group
            self._send_json(403, doc)
            return
        if verb in ("list", "watch"):
            error = selector_error("events.k8s.io" if view and plural == "events" else plural,
                                   query.get("labelSelector"), query.get("fieldSelector"))
            if error:
                self._send_json(400, _status(400, "BadRequest", error))
                return
        if verb == "proxy":
            self._proxy(ns, name, sub[len("proxy"):], url.query)
        elif verb == "portforward":
            self._portforward(ns, name, query)
        elif verb == "log":
            self._log(ns, name, query)
        elif verb == "get":
            with cluster.lock:
                obj = cluster.objects[plural].get((ns or "", name))
            if obj is None:
                self._send_json(404, _status(404, "NotFound", f'{plural} "{name}" not found', plural))
            else:
                self._send_json(200, obj)
        elif verb == "list":
            self._list(plural, kind, group, version, ns, query, view)
        elif view:
            self._watch(plural, ns, query, view=True)
        else:
            self._watch(plural, ns, query)

    def _list(self, plural: str, kind: str, group: str, version: str, ns: str | None, query: dict,
              view: bool) -> None:
        """A list, paged when `limit` is set: `continue` carries (resourceVersion, offset); a token older than
        the compaction floor is 410 Expired, as etcd's compaction makes it."""
        cluster = self.server.cluster
        start, rv = 0, None
        if query.get("continue"):
            try:
                token = json.loads(base64.urlsafe_b64decode(query["continue"].encode()))
                start, rv = int(token["start"]), int(token["rv"])
            except (ValueError, KeyError, TypeError):
                self._send_json(400, _status(400, "BadRequest", "continue key is not valid"))
                return
            if rv < cluster.history_floor:
                self._send_json(410, _status(410, "Expired", "The provided continue parameter is too old to "
                                             "display a consistent list result. You can start a new list without "
                                             "the continue parameter."))
                return
        with cluster.lock:
            items = [copy.deepcopy(o) for o in self._select(plural, ns, query, view)]
            rv = rv or cluster.rv
        limit = int(query.get("limit") or 0)
        meta: dict = {"resourceVersion": str(rv)}
        if limit and start + limit < len(items):
            meta["continue"] = base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": start + limit}).encode()
                                                        ).decode()
            meta["remainingItemCount"] = len(items) - start - limit
        items = items[start:start + limit] if limit else items[start:]
        for o in items:  # real lists carry kind/apiVersion on the list, not on items
            o.pop("kind", None)
            o.pop("apiVersion", None)
        self._send_json(200, {"kind": f"{kind}List", "apiVersion": f"{group}/{version}".lstrip("/"),
                              "metadata": meta, "items": items})

    def _select(self, plural: str, ns: str | None, query: dict, view: bool = False) -> list[dict]:
        cluster = self.server.cluster
        shape = events_v1 if view else (lambda o: o)
        return [shape(o) for (ons, _), o in sorted(cluster.objects[plural].items())
                if (ns is None or ons == ns)
                and label_match(query.get("labelSelector"), o["metadata"].get("labels") or {})
                and field_match(query.get("fieldSelector"), shape(o))]

    def _watch(self, plural: str, ns: str | None, query: dict, view: bool = False) -> None:
        cluster = self.server.cluster
        shape = events_v1 if view else (lambda o: o)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(doc: dict) -> None:
            data = json.dumps(doc).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def matches(obj: dict) -> bool:
            return ((ns is None or obj["metadata"].get("namespace") == ns)
                    and label_match(query.get("labelSelector"), obj["metadata"].get("labels") or {})
                    and field_match(query.get("fieldSelector"), shape(obj)))

        def bookmark(rv: int) -> None:  # a BOOKMARK carries only the kind and the resourceVersion
            kind = "Event" if view else KINDS[plural][2]
            api_version = "events.k8s.io/v1" if view else "/".join(x for x in KINDS[plural][:2] if x)
            send({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                                                 "metadata": {"resourceVersion": str(rv)}}})

        try:
            with cluster.lock:
                since = query.get("resourceVersion")
                if since and (int(since) < cluster.history_floor or cluster.expire_watches):
                    send({"type": "ERROR", "object": _status(410, "Expired",
                                                             f"too old resource version: {since} ({cluster.rv})")})
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if not since:  # no version: the current state as ADDED events first
                    for o in self._select(plural, ns, query, view):
                        send({"type": "ADDED", "object": o})
                    since = str(cluster.rv)
                seen = int(since)
                quiet_since = time.monotonic()
                while not self.server.stopping:
                    for rv, p, typ, obj in cluster.history:
                        if rv > seen and p == plural and matches(obj):
                            send({"type": typ, "object": shape(obj)})
                            quiet_since = time.monotonic()
                    seen = max(seen, cluster.rv)
                    error = next((e for e in cluster.watch_errors if e[0] == plural), None)
                    if error:  # an ERROR event ends the stream, as the real server does
                        cluster.watch_errors.remove(error)
                        send({"type": "ERROR", "object": error[1]})
                        break
                    if bookmarks and time.monotonic() - quiet_since >= cluster.bookmark_interval:
                        bookmark(seen)
                        quiet_since = time.monotonic()
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    cluster.lock.wait(min(left, 0.5, cluster.bookmark_interval))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _log(self, ns: str, name: str, query: dict) -> None:
        cluster = self.server.cluster
        with cluster.lock:
            pod = cluster.objects["pods"].get((ns, name))
        if pod is None:
            self._send_json(404, _status(404, "NotFound", f'pods "{name}" not found', "pods"))
            return
        # The kubelet's rules: the current instance of a running or terminated container; `previous` only
        # when an earlier instance terminated; a container in back-off shows its last instance; one that never
        # started has no log (400, the kubelet's words). A node whose kubelet fails answers 500.
        container = query.get("container") or pod["spec"]["containers"][0]["name"]
        previous = query.get("previous") in ("true", "1")
        spec = pod.get("spec") or {}
        if container not in [c.get("name") for c in (spec.get("containers") or []) + (spec.get("initContainers")
                                                                                      or [])]:
            self._send_json(400, _status(400, "BadRequest", f"container {container} is not valid for pod {name}"))
            return
        node = spec.get("nodeName")
        if node in cluster.broken_kubelets:
            host = (pod.get("status") or {}).get("hostIP", node)
            self._send_json(500, _status(500, "InternalError", f'Get "https://{host}:10250/containerLogs/{ns}/{name}/'
                                         f'{container}": remote error: tls: internal error'))
            return
        statuses = ((pod.get("status") or {}).get("containerStatuses") or []) + \
            ((pod.get("status") or {}).get("initContainerStatuses") or [])
        cs = next((c for c in statuses if c.get("name") == container), {})
        state, last = cs.get("state") or {}, cs.get("lastState") or {}
        if previous and not last.get("terminated"):
            self._send_json(400, _status(400, "BadRequest", f'previous terminated container "{container}" in pod '
                                         f'"{name}" not found'))
            return
        if not previous and not state.get("running") and not state.get("terminated"):
            if not last.get("terminated"):
                why = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
                self._send_json(400, _status(400, "BadRequest", f'container "{container}" in pod "{name}" is '
                                             f'waiting to start: {why}'))
                return
            previous = True  # in back-off: the kubelet shows the instance that terminated last
        text = cluster.logs.get((ns, name, container, previous), "")
        text = text() if callable(text) else text
        tail = query.get("tailLines")
        if tail:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail):])
        self._send_text(200, text)

    def _proxy(self, ns: str, name_port: str, path: str, raw_query: str) -> None:
        cluster = self.server.cluster
        name, _, port = name_port.partition(":")
        if (ns, name) in cluster.dropped_proxies:  # the dial hangs until the API server gives up
            until = time.monotonic() + 3.0
            while time.monotonic() < until and not self.server.stopping:
                time.sleep(0.05)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up first
                self._send_json(503, _status(503, "ServiceUnavailable", "error trying to reach service: dial tcp "
                                             f"10.244.1.7:{port}: i/o timeout"))
            return
        target = cluster.proxy_targets.get((ns, name, int(port or 80)))
        if target is None:
            self._send_json(503, _status(503, "ServiceUnavailable", "error trying to reach service: dial tcp "
                                         f"10.244.1.7:{port}: connect: connection refused"))
            return
        url = target.rstrip("/") + path + (f"?{raw_query}" if raw_query else "")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                self._send_text(resp.status, resp.read().decode(), resp.headers.get("Content-Type", "text/plain"))
        except urllib.error.HTTPError as err:
            self._send_text(err.code, err.read().decode(), err.headers.get("Content-Type", "text/plain"))
        except OSError as err:
            self._send_json(503, _status(503, "ServiceUnavailable", f"error trying to reach service: {err}"))


    # -- pods/portforward: a websocket with channels 0 (data) and 1 (error) for the one port ------------
    def _portforward(self, ns: str, name: str, query: dict) -> None:
        cluster = self.server.cluster
        protocols = [p.strip() for p in (self.headers.get("Sec-WebSocket-Protocol") or "").split(",")]
        if (self.headers.get("Upgrade") or "").lower() != "websocket" or "v4.channel.k8s.io" not in protocols:
            self._send_json(400, _status(400, "BadRequest", "Upgrade request required"))
            return
        with cluster.lock:
            known = (ns, name) in cluster.objects["pods"]
        if not known:
            self._send_json(404, _status(404, "NotFound", f'pods "{name}" not found', "pods"))
            return
        try:
            port = int(query.get("ports", ""))
        except ValueError:
            self._send_json(400, _status(400, "BadRequest", "query parameter ports is required"))
            return
        key = self.headers["Sec-WebSocket-Key"].strip()
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        sock, wlock = self.connection, threading.Lock()

        def send(opcode: int, payload: bytes) -> None:
            n = len(payload)
            head = bytes([0x80 | opcode]) + (bytes([n]) if n < 126 else struct.pack("!BH", 126, n)
                                             if n < 65536 else struct.pack("!BQ", 127, n))
            with wlock:
                sock.sendall(head + payload)

        port_bytes = struct.pack("<H", port)
        send(2, b"\x00" + port_bytes)
        send(2, b"\x01" + port_bytes)
        target = cluster.proxy_targets.get((ns, name, port))
        upstream = None
        if target is not None:
            with contextlib.suppress(OSError):
                parts = urlsplit(target)
                upstream = socket.create_connection((parts.hostname, parts.port), timeout=5)
        if upstream is None:
            send(2, b"\x01" + f"error forwarding port {port} to pod {name}: connection refused".encode())
            send(8, struct.pack("!H", 1000))
            return
        upstream.settimeout(None)

        def pump_up() -> None:  # pod -> client
            try:
                while True:
                    data = upstream.recv(65536)
                    if not data:
                        break
                    send(2, b"\x00" + data)
            except OSError:
                pass
            with contextlib.suppress(OSError):
                send(8, struct.pack("!H", 1000))
                sock.shutdown(socket.SHUT_WR)

        threading.Thread(target=pump_up, daemon=True).start()
        sock.settimeout(0.5)
        buf = b""

        def read(n: int) -> bytes:
            nonlocal buf
            while len(buf) < n:
                if self.server.stopping:
                    raise OSError("server stopping")
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    raise OSError("client closed")
                buf += chunk
            out, buf = buf[:n], buf[n:]
            return out

        try:
            while True:
                b0, b1 = read(2)
                opcode, n = b0 & 0x0F, b1 & 0x7F
                if n == 126:
                    n = struct.unpack("!H", read(2))[0]
                elif n == 127:
                    n = struct.unpack("!Q", read(8))[0]
                mask = read(4) if b1 & 0x80 else b"\0\0\0\0"
                data = read(n)
                if b1 & 0x80 and n:
                    key = (mask * (n // 4 + 1))[:n]
                    data = (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")
                payload = data
                if opcode == 8:
                    break
                if opcode == 9:
                    send(10, payload)
                elif opcode in (0, 2) and payload[:1] == b"\x00" and len(payload) > 1:
                    upstream.sendall(payload[1:])
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_RDWR)
            upstream.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.cluster = cluster
        self.stopping = False

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-answer (a dropped proxy, a timed-out request) is what some tests make
        happen; a real API server logs it, it prints no traceback into the plugin's captured stderr."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, OSError)):
            return
        super().handle_error(request, client_address)


class APIServer:
    """`with APIServer() as api:` — a running server; `api.url`, `api.cluster`, `api.kubeconfig(dir)`."""

    def __init__(self, cluster: FakeCluster | None = None, *, tls: tuple[Path, Path] | None = None) -> None:
        """`tls`: (certificate, key) files to serve HTTPS, as a real API server does."""
        self.cluster = cluster or FakeCluster()
        self._server = _Server(self.cluster)
        self.scheme = "http"
        if tls:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(tls[0]), str(tls[1]))
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def __enter__(self) -> APIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.stopping = True
        with self.cluster.lock:
            self.cluster.lock.notify_all()
        if self._thread.is_alive():
            # shutdown() waits for serve_forever(); never let a wedged accept hang the whole suite.
            stopper = threading.Thread(target=self._server.shutdown, daemon=True)
            stopper.start()
            stopper.join(timeout=5)
        self._server.server_close()

    def kubeconfig(self, directory: Path, namespace: str | None = "triton", token: str = TOKEN,
                   context: str = "test") -> Path:
        """A kubeconfig file whose current context points at this server."""
        return write_kubeconfig(directory, self.url, namespace=namespace, token=token, context=context)


def write_kubeconfig(directory: Path, url: str, *, namespace: str | None = "triton", token: str = TOKEN,
                     context: str = "test") -> Path:
    """A kubeconfig with contexts `context` (current; namespace `namespace`) and `other` (namespace other)."""
    ctx: dict = {"cluster": "test", "user": "alice"}
    if namespace:
        ctx["namespace"] = namespace
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": context,
           "clusters": [{"name": "test", "cluster": {"server": url}}],
           "users": [{"name": "alice", "user": {"token": token}}],
           "contexts": [{"name": context, "context": ctx},
                        {"name": "other", "context": {"cluster": "test", "user": "alice", "namespace": "other"}}]}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"kubeconfig-{abs(hash((url, namespace, token, context))) % 10**8}"
    path.write_text(json.dumps(doc))
    return path


# -- objects shaped like a real cluster's --------------------------------------------------------------

NAMESPACE = "triton"
IMAGE = "nvcr.io/nvidia/tritonserver:24.12-py3"
REVISION = "main@sha1:4f2a9c1e0b7d5a3f2e1c9b8a7d6e5f4a3b2c1d0e"


def ts(offset_s: float = 0.0, now: datetime | None = None) -> str:
    """An RFC 3339 timestamp `offset_s` seconds from now (negative: in the past)."""
    when = (now or datetime.now(timezone.utc)) + timedelta(seconds=offset_s)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def labels(model: str) -> dict:
    return {"app.kubernetes.io/name": "triton-inference-server", "app.kubernetes.io/instance": model}


def deployment(model: str, *, ns: str = NAMESPACE, replicas: int = 1, ready: int | None = None,
               updated: int | None = None, generation: int = 2, observed: int | None = None,
               progressing: tuple[str, str] = ("True", "NewReplicaSetAvailable"),
               args: tuple[str, ...] = (), triton_models: tuple[str, ...] | None = None) -> dict:
    """A Deployment as the repository's overlays render it (its Triton models named in the
    `triton.kubectl.io/triton-models` annotation; default: one model named like the instance), with a
    status the controller would write."""
    ready = replicas if ready is None else ready
    updated = replicas if updated is None else updated
    observed = generation if observed is None else observed
    name = f"{model}-triton"
    msg = {"NewReplicaSetAvailable": f'ReplicaSet "{name}-7d9c8b6f5" has successfully progressed.',
           "ReplicaSetUpdated": f'ReplicaSet "{name}-7d9c8b6f5" is progressing.',
           "ProgressDeadlineExceeded": f'ReplicaSet "{name}-7d9c8b6f5" has timed out progressing.'}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "generation": generation, "labels": labels(model),
                     "annotations": {"deployment.kubernetes.io/revision": str(generation),
                                     "triton.kubectl.io/triton-models": ",".join(triton_models or (model,))},
                     "creationTimestamp": ts(-3600)},
        "spec": {
            "replicas": replicas, "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": labels(model)},
            "template": {"metadata": {"labels": labels(model)}, "spec": {
                "initContainers": [{"name": "assemble-model-repository", "image": IMAGE}],
                "containers": [{"name": "tritonserver", "image": IMAGE, "command": ["tritonserver"],
                                "args": ["--model-repository=/models", *args],
                                "ports": [{"name": "http", "containerPort": 8000},
                                          {"name": "grpc", "containerPort": 8001},
                                          {"name": "metrics", "containerPort": 8002}],
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
        },
        "status": {
            "observedGeneration": observed, "replicas": replicas, "updatedReplicas": updated,
            "readyReplicas": ready, "availableReplicas": ready,
            **({"unavailableReplicas": replicas - ready} if replicas > ready else {}),
            "conditions": [
                {"type": "Available", "status": "True" if ready >= replicas else "False",
                 "reason": "MinimumReplicasAvailable" if ready >= replicas else "MinimumReplicasUnavailable",
                 "message": "Deployment has minimum availability." if ready >= replicas
                 else "Deployment does not have minimum availability.",
                 "lastUpdateTime": ts(-600), "lastTransitionTime": ts(-600)},
                {"type": "Progressing", "status": progressing[0], "reason": progressing[1],
                 "message": msg.get(progressing[1], progressing[1]),
                 "lastUpdateTime": ts(-60), "lastTransitionTime": ts(-600)},
            ],
        },
    }


def pod(model: str, suffix: str = "x7k2p", *, ns: str = NAMESPACE, phase: str = "Running",
        ready: bool = True, started: bool | None = None, restarts: int = 0, state: dict | None = None,
        last_state: dict | None = None, scheduled: tuple[str, str, str] | None = None,
        init_state: dict | None = None, node: str = "gpu-node-a100-1") -> dict:
    """A Pod of the Deployment's current ReplicaSet, with the kubelet's container statuses."""
    name = f"{model}-triton-7d9c8b6f5-{suffix}"
    started = ready if started is None else started
    state = state or ({"running": {"startedAt": ts(-120)}} if phase == "Running" else
                      {"waiting": {"reason": "ContainerCreating"}})
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(-180)}]
    if scheduled:
        conditions = [{"type": "PodScheduled", "status": scheduled[0], "reason": scheduled[1],
                       "message": scheduled[2], "lastTransitionTime": ts(-180)}]
    else:
        conditions += [{"type": "Initialized", "status": "True", "lastTransitionTime": ts(-170)},
                       {"type": "ContainersReady", "status": str(ready), "lastTransitionTime": ts(-100)},
                       {"type": "Ready", "status": str(ready), "lastTransitionTime": ts(-100)}]
    status: dict = {"phase": phase, "conditions": conditions, "qosClass": "Burstable"}
    if not scheduled:
        status.update(hostIP="10.0.3.17", podIP="10.244.1.7", startTime=ts(-180))
        cs = {"name": "tritonserver", "image": IMAGE, "imageID": "", "ready": ready, "started": started,
              "restartCount": restarts, "state": state}
        if last_state:
            cs["lastState"] = last_state
        status["containerStatuses"] = [cs]
        status["initContainerStatuses"] = [{
            "name": "assemble-model-repository", "image": IMAGE, "ready": init_state is None,
            "restartCount": 0,
            "state": init_state or {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": ts(-175),
                                                   "finishedAt": ts(-170)}}}]
    lab = {**labels(model), "pod-template-hash": "7d9c8b6f5"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": lab, "uid": f"uid-{name}",
                     "creationTimestamp": ts(-180),
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True,
                                          "name": f"{model}-triton-7d9c8b6f5", "uid": "uid-rs"}]},
        "spec": {"nodeName": None if scheduled else node,
                 "initContainers": [{"name": "assemble-model-repository", "image": IMAGE}],
                 "containers": [{"name": "tritonserver", "image": IMAGE,
                                 "ports": [{"name": "http", "containerPort": 8000}],
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": status,
    }


def crashed(reason: str = "Error", exit_code: int = 1, restarts: int = 1) -> dict:
    """Container state of a crash loop: waiting in back-off, last instance terminated."""
    return {"state": {"waiting": {"reason": "CrashLoopBackOff",
                                  "message": "back-off 10s restarting failed container=tritonserver"}},
            "last_state": {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": ts(-30),
                                          "finishedAt": ts(-20)}},
            "restarts": restarts, "ready": False, "started": False}


def event(obj: dict, reason: str, message: str, *, type_: str = "Warning", count: int = 1,
          source: str = "kubelet", age_s: float = 10) -> dict:
    meta = obj["metadata"]
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{abs(hash((reason, message))) % 10**12:x}",
                         "namespace": meta["namespace"], "creationTimestamp": ts(-age_s)},
            "involvedObject": {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid", "")},
            "reason": reason, "message": message, "type": type_, "count": count,
            "source": {"component": source}, "firstTimestamp": ts(-age_s - 60), "lastTimestamp": ts(-age_s),
            "reportingComponent": source}


def hpa(model: str, *, ns: str = NAMESPACE, metric_ok: bool = True) -> dict:
    name = f"{model}-triton"
    active = ({"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound",
               "message": "the HPA was able to successfully calculate a replica count from pods metric "
                          "avg_time_queue_us"} if metric_ok else
              {"type": "ScalingActive", "status": "False", "reason": "FailedGetPodsMetric",
               "message": "the HPA was unable to compute the replica count: unable to get metric "
                          "avg_time_queue_us: unable to fetch metrics from custom metrics API: the server "
                          "could not find the metric avg_time_queue_us for pods"})
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": ns, "labels": labels(model)},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "minReplicas": 1, "maxReplicas": 4,
                     "metrics": [{"type": "Pods", "pods": {"metric": {"name": "avg_time_queue_us"},
                                                            "target": {"type": "AverageValue",
                                                                       "averageValue": "50"}}}]},
            "status": {"currentReplicas": 1, "desiredReplicas": 1,
                       "conditions": [{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"},
                                      active]}}


def kustomization(name: str, models: list[tuple[str, str]], *, ready: tuple[str, str, str] | None = None,
                  applied: str = REVISION, attempted: str | None = None, suspend: bool = False) -> dict:
    """A Flux Kustomization in flux-system whose inventory holds the models' Deployments (ns, model)."""
    ready = ready or ("True", "ReconciliationSucceeded", f"Applied revision: {applied}")
    entries = []
    for ns, model in models:
        for kind, group in (("Service", ""), ("Deployment", "apps"),
                            ("HorizontalPodAutoscaler", "autoscaling")):
            entries.append({"id": f"{ns}_{model}-triton_{group}_{kind}", "v": "v2" if group == "autoscaling"
                            else "v1"})
    return {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": "flux-system", "generation": 1},
            "spec": {"interval": "10m", "path": f"./overlays/{name}", "prune": True, "wait": True,
                     "timeout": "15m", "suspend": suspend,
                     "sourceRef": {"kind": "GitRepository", "name": "flux-system"}},
            "status": {"observedGeneration": 1, "lastAppliedRevision": applied,
                       "lastAttemptedRevision": attempted or applied,
                       "conditions": [{"type": "Ready", "status": ready[0], "reason": ready[1],
                                       "message": ready[2], "lastTransitionTime": ts(-30),
                                       "observedGeneration": 1}],
                       "inventory": {"entries": entries}}}


@pytest.fixture
def api(tmp_path: Path):
    """A running API server with a kubeconfig (`api.kubeconfig_path`, context namespace `triton`); the
    test fails if the client sent any mutating request."""
    with APIServer() as server:
        server.kubeconfig_path = server.kubeconfig(tmp_path)
        yield server
        assert server.cluster.violations == [], f"mutating requests sent: {server.cluster.violations}"


LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
IMAGE_TRTLLM = "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3"


def leaderworkerset(model: str, *, ns: str = NAMESPACE, replicas: int = 1, size: int = 2, ready: int | None = None,
                    updated: int | None = None, total: int | None = None, generation: int = 1,
                    observed: int | None = None, conditions: list[tuple[str, str]] | None = None,
                    rollout: dict | None = None, gpus: int = 8) -> dict:
    """A LeaderWorkerSet as base/triton-multinode renders it (name MODEL-triton-group, the model's labels, leader
    and worker templates), with a status the lws controller writes (pkg/controllers/leaderworkerset_controller.go:
    replicas, readyReplicas, updatedReplicas, observedGeneration and the mutually exclusive Available / Progressing
    conditions, UpdateInProgress during a rolling update). `conditions`: (type, status) pairs; default Available
    when every group is ready, else Progressing."""
    ready = replicas if ready is None else ready
    updated = replicas if updated is None else updated
    observed = generation if observed is None else observed
    name = f"{model}-triton-group"
    words = {"Available": ("AllGroupsReady", "All replicas are ready"),
             "Progressing": ("GroupsProgressing", "Replicas are progressing"),
             "UpdateInProgress": ("GroupsUpdating", "Rolling Upgrade is in progress")}
    if conditions is None:
        conditions = [("Available", "True")] if ready >= replicas and updated >= replicas else \
            [("Available", "False"), ("Progressing", "True")]
    conds = [{"type": t, "status": st, "reason": words[t][0], "message": words[t][1], "observedGeneration": observed,
              "lastTransitionTime": ts(-300)} for t, st in conditions]

    def template(role: str, command: list[str]) -> dict:
        return {"metadata": {"labels": {**labels(model), "triton.kubectl.io/role": role}},
                "spec": {"containers": [{"name": "tritonserver", "image": IMAGE_TRTLLM, "command": command,
                                         "ports": [{"name": "http", "containerPort": 8000}],
                                         "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": ns, "generation": generation, "labels": labels(model),
                     "creationTimestamp": ts(-3600)},
        "spec": {"replicas": replicas, "startupPolicy": "LeaderCreated",
                 "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {
                     "partition": 0, "maxUnavailable": 1, "maxSurge": 0, **(rollout or {})}},
                 "leaderWorkerTemplate": {"size": size, "restartPolicy": "RecreateGroupOnPodRestart",
                                          "leaderTemplate": template("leader", ["sh", "/multinode/leader.sh"]),
                                          "workerTemplate": template("worker", ["sh", "/multinode/worker.sh"])},
                 "networkConfig": {"subdomainPolicy": "Shared"}},
        "status": {"observedGeneration": observed, "replicas": replicas if total is None else total,
                   "readyReplicas": ready, "updatedReplicas": updated, "conditions": conds,
                   "hpaPodSelector": f"{LWS_NAME}={name},{LWS_WORKER}=0"},
    }


def group_pod(lws: dict, group: int = 0, worker: int = 0, *, phase: str = "Running", ready: bool = True,
              started: bool | None = None, restarts: int = 0, state: dict | None = None,
              last_state: dict | None = None, scheduled: tuple[str, str, str] | None = None,
              node: str | None = None, revision: str = "5d8f7c9b4", age_s: float = 600) -> dict:
    """A pod of a LeaderWorkerSet group as the lws controller and its pod webhook make it: the leader (worker index
    0, named LWS-GROUP, owned by the leader StatefulSet) or worker i (LWS-GROUP-i, owned by the group's worker
    StatefulSet), with the set's name, group index, worker index, group key and revision labels and the size
    annotation, and the kubelet's container status."""
    lname, ns = lws["metadata"]["name"], lws["metadata"]["namespace"]
    role = "leader" if worker == 0 else "worker"
    tmpl = lws["spec"]["leaderWorkerTemplate"][f"{role}Template"]
    name = f"{lname}-{group}" if worker == 0 else f"{lname}-{group}-{worker}"
    owner = lname if worker == 0 else f"{lname}-{group}"
    started = ready if started is None else started
    state = state or ({"running": {"startedAt": ts(-age_s + 30)}} if phase == "Running" else
                      {"waiting": {"reason": "ContainerCreating"}})
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(-age_s)}]
    status: dict = {"phase": phase, "qosClass": "Burstable"}
    if scheduled:
        conditions = [{"type": "PodScheduled", "status": scheduled[0], "reason": scheduled[1],
                       "message": scheduled[2], "lastTransitionTime": ts(-age_s)}]
    else:
        conditions += [{"type": "Initialized", "status": "True", "lastTransitionTime": ts(-age_s + 10)},
                       {"type": "ContainersReady", "status": str(ready), "lastTransitionTime": ts(-age_s + 60)},
                       {"type": "Ready", "status": str(ready), "lastTransitionTime": ts(-age_s + 60)}]
        cs = {"name": "tritonserver", "image": IMAGE_TRTLLM, "imageID": "", "ready": ready, "started": started,
              "restartCount": restarts, "state": state}
        if last_state:
            cs["lastState"] = last_state
        status.update(hostIP=f"10.0.4.{10 + group * 8 + worker}", podIP=f"10.244.{group + 2}.{worker + 5}",
                      startTime=ts(-age_s), containerStatuses=[cs])
    status["conditions"] = conditions
    annotations = {LWS_SIZE: str(lws["spec"]["leaderWorkerTemplate"]["size"])}
    if worker:
        annotations["leaderworkerset.sigs.k8s.io/leader-name"] = f"{lname}-{group}"
    spec = copy.deepcopy(tmpl["spec"])
    default_node = f"gpu-node-h100-{group * 8 + worker + 1}"
    spec.update(hostname=name, subdomain=lname, nodeName=None if scheduled else (node or default_node))
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}-{revision}", "creationTimestamp": ts(-age_s),
                     "labels": {**tmpl["metadata"]["labels"], LWS_NAME: lname, LWS_GROUP: str(group),
                                LWS_WORKER: str(worker),
                                "leaderworkerset.sigs.k8s.io/group-key": f"{lname}-{group}-key",
                                "leaderworkerset.sigs.k8s.io/template-revision-hash": revision},
                     "annotations": annotations,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "controller": True,
                                          "name": owner, "uid": f"uid-sts-{owner}"}]},
        "spec": spec,
        "status": status,
    }


def group_event(lws: dict, reason: str, message: str, *, type_: str = "Normal", count: int = 1,
                age_s: float = 30, related: dict | None = None) -> dict:
    """An event the lws controller records (events.k8s.io recorder: regarding the LeaderWorkerSet, `related` the
    pod it acted on), e.g. RecreateGroup "Worker pod X failed, deleted leader pod Y to recreate group N"."""
    meta = lws["metadata"]
    ev = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
          "metadata": {"name": f"{meta['name']}.{abs(hash((reason, message))) % 10**12:x}",
                       "namespace": meta["namespace"], "creationTimestamp": ts(-age_s)},
          "regarding": {"apiVersion": lws["apiVersion"], "kind": "LeaderWorkerSet", "name": meta["name"],
                        "namespace": meta["namespace"], "uid": meta.get("uid", "")},
          "note": message, "reason": reason, "type": type_, "action": "Delete" if reason == "RecreateGroup" else
          "Update", "reportingController": "lws", "reportingInstance": "lws-controller-manager",
          "eventTime": ts(-age_s), "deprecatedCount": count, "deprecatedFirstTimestamp": ts(-age_s - 60 * count),
          "deprecatedLastTimestamp": ts(-age_s)}
    if related:
        ev["related"] = {"apiVersion": "v1", "kind": "Pod", "name": related["metadata"]["name"],
                         "namespace": meta["namespace"]}
    return ev


def healthy_model(cluster: FakeCluster, model: str, *, ns: str = NAMESPACE) -> dict:
    """Apply a healthy Deployment, its ready Pod and its HPA; return the Pod."""
    p = pod(model, ns=ns)
    cluster.apply(deployment(model, ns=ns), p, hpa(model, ns=ns))
    return p
