"""Accessors for Kubernetes objects as the API returns them (dicts), shared by status's diagnosis modules."""

from __future__ import annotations

import re


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
