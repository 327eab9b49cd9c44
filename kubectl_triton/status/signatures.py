"""Container-log signatures (kept as data in data/log_signatures.yaml) matched against log text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kubectl_triton.formats import yamlio
from kubectl_triton.status.model import SEV_FAILED, Reason

SIGNATURES_FILE = Path(__file__).resolve().parent.parent / "data" / "log_signatures.yaml"
MAX_QUOTE = 240


@dataclass(frozen=True)
class Signature:
    code: str
    patterns: tuple[re.Pattern, ...]
    message: str
    fix: str
    terminal: bool
    fallback: bool


@lru_cache(maxsize=4)
def load(path: Path = SIGNATURES_FILE) -> tuple[Signature, ...]:
    """The signature table, compiled."""
    doc = yamlio.load_all(path)[0]
    return tuple(Signature(code=s["code"], patterns=tuple(re.compile(p, re.IGNORECASE) for p in s["patterns"]),
                           message=s["message"], fix=" ".join(s["fix"].split()),
                           terminal=bool(s.get("terminal", True)), fallback=bool(s.get("fallback", False)))
                 for s in doc["signatures"])


def quote_line(line: str) -> str:
    """A log line as quoted in a message: Triton's glog prefix and escaped tracebacks removed, trimmed."""
    line = line.strip()
    line = re.sub(r"^[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] ", "", line)  # glog prefix
    line = line.strip('"').split("\\n")[0].strip()
    return line if len(line) <= MAX_QUOTE else line[:MAX_QUOTE - 1] + "…"


def match(text: str, *, container: str = "", pod: str = "",
          table: tuple[Signature, ...] | None = None) -> list[Reason]:
    """Reasons for every signature found in `text` (last matching line quoted); fallback signatures
    only when nothing more specific matched."""
    table = load() if table is None else table
    lines = text.splitlines()
    hits: list[Reason] = []
    for fallback in (False, True):
        if fallback and hits:
            break
        for sig in table:
            if sig.fallback != fallback:
                continue
            # patterns in order of preference; for each, the last line it matches
            line = next((ln for p in sig.patterns for ln in reversed(lines) if p.search(ln)), None)
            if line is None:
                continue
            hits.append(Reason(sig.code, sig.message.format(line=quote_line(line), container=container, pod=pod),
                               sig.fix, SEV_FAILED, sig.terminal))
    return hits
