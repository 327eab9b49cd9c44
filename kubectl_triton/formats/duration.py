"""Durations as kubectl and Flux write them: `90s`, `500ms`, `5m`, `1h30m`, or plain seconds."""

from __future__ import annotations

import re

_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def parse_duration(text: str, *, bare_seconds: bool = True) -> float | None:
    """Seconds, or None when `text` is no duration. Plain numbers are seconds when `bare_seconds`
    (kubectl's `--timeout 30`); Go-style durations (Flux's `interval: 10m`) must carry units."""
    text = str(text).strip()
    if bare_seconds and re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    # in integers, divided once: `26ms` is 0.026, not 0.026000000000000002
    digits = max(len(n.partition(".")[2]) for n, _ in parts)
    total = sum(int(n.replace(".", "")) * 10 ** (digits - len(n.partition(".")[2])) * _MS[u] for n, u in parts)
    return total / (1000 * 10 ** digits)


def milliseconds(seconds: float) -> float:
    """`seconds` in milliseconds, to the nanosecond: a target given as `1001ms` reads 1001, not 1000.9999999999999."""
    return round(seconds * 1e3, 6)
