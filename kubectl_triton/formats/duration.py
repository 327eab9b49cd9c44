"""Durations as kubectl and Flux write them: `90s`, `500ms`, `5m`, `1h30m`, or plain seconds."""

from __future__ import annotations

import re
from decimal import Decimal

_SCALE = {"ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}


def parse_duration(text: str, *, bare_seconds: bool = True) -> float | None:
    """Seconds, or None when `text` is no duration. Plain numbers are seconds when `bare_seconds`
    (kubectl's `--timeout 30`); Go-style durations (Flux's `interval: 10m`) must carry units."""
    text = str(text).strip()
    if bare_seconds and re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return float(sum(Decimal(n) * _SCALE[u] for n, u in parts))  # decimal: `26ms` is 0.026, not 0.026000000000000002


def milliseconds(seconds: float) -> float:
    """`seconds` in milliseconds, to the nanosecond: a target given as `1001ms` reads 1001, not 1000.9999999999999."""
    return round(seconds * 1e3, 6)
