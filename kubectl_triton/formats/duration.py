"""Durations as kubectl and Flux write them: `90s`, `500ms`, `5m`, `1h30m`, or plain seconds."""

from __future__ import annotations

import re

_SCALE = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, *, bare_seconds: bool = True) -> float | None:
    """Seconds, or None when `text` is no duration. Plain numbers are seconds when `bare_seconds`
    (kubectl's `--timeout 30`); Go-style durations (Flux's `interval: 10m`) must carry units."""
    text = str(text).strip()
    if bare_seconds and re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _SCALE[u] for n, u in parts)
