"""Accessors for Kubernetes objects as the API returns them (dicts), shared by status's diagnosis modules."""

from __future__ import annotations

import re
from collections.abc import Iterable


def meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def ns_name(obj: dict) -> tuple[str, str]:
    return meta(obj).get("namespace", ""), meta(obj).get("name", "")


def condition(obj: dict, type_: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def short_revision(rev: str | None) -> str | None:
    """`main@sha1:4f2a9c1e…` -> `main@sha1:4f2a9c1`, as Flux's CLI shortens it."""
    if not rev:
        return rev
    m = re.match(r"^(.*?[:@])([0-9a-f]{12,})$", rev)
    return m.group(1) + m.group(2)[:7] if m else rev


def first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def core_event(e: dict) -> dict:
    """An Event in core v1's shape (involvedObject, message, count), whether it was read as v1 or as
    events.k8s.io/v1 (regarding, note, deprecatedCount or series.count)."""
    if "involvedObject" in e or "regarding" not in e:
        return e
    count = (e.get("series") or {}).get("count") or e.get("deprecatedCount") or 1
    return {**e, "involvedObject": e.get("regarding") or {}, "message": e.get("note", ""), "count": count,
            "source": {"component": e.get("reportingController", "")}}


def events_of(obj: dict, events: Iterable[dict]) -> list[dict]:
    """The events about `obj` (either Event API's shape), in core v1's shape. An event about an earlier object of
    the same name (a group's pods and a recreated set keep their names) is not about this one: their uids differ,
    as `kubectl describe` tells them apart."""
    ns, name = ns_name(obj)
    kind, uid = obj.get("kind"), meta(obj).get("uid")
    out = []
    for e in map(core_event, events):
        inv = e.get("involvedObject") or {}
        if inv.get("name") == name and inv.get("kind") == kind and (meta(e).get("namespace") == ns
                                                                     or inv.get("namespace") == ns) \
                and not (uid and inv.get("uid") and inv.get("uid") != uid):
            out.append(e)
    return out


def container_statuses(pod: dict) -> list[tuple[dict, bool]]:
    status = pod.get("status") or {}
    return ([(c, True) for c in status.get("initContainerStatuses") or []]
            + [(c, False) for c in status.get("containerStatuses") or []])


def spec_container(pod: dict, name: str) -> dict:
    spec = pod.get("spec") or {}
    return next((c for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
                 if c.get("name") == name), {})
