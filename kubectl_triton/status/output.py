"""Printing verdicts: a kubectl-style table with the fixes below it, or the documented JSON."""

from __future__ import annotations

import json

from kubectl_triton.status.diagnose import short_revision
from kubectl_triton.status.model import HEALTHY, ModelStatus

HEADERS = ("MODEL", "NAMESPACE", "PHASE", "READY", "REVISION", "REASON")


def table(rows: list[tuple[str, ...]], headers: tuple[str, ...] = HEADERS) -> str:
    """Columns padded to their widest cell plus 3 spaces, like `kubectl get`."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["   ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)


def to_text(statuses: list[ModelStatus]) -> str:
    rows = [(_model_cell(s), s.namespace or "-", s.phase, s.ready, short_revision(s.revision) or "-",
             s.reasons[0].code if s.reasons else "-") for s in statuses]
    out = [table(rows)]
    for s in statuses:
        if not s.reasons:
            continue
        out.append("")
        out.append(f"{_model_cell(s)} ({s.phase}):")
        for r in s.reasons:
            out.append(f"  {r.code}: {r.message}")
            out.append(f"    fix: {r.fix}")
    return "\n".join(out)


def _model_cell(s: ModelStatus) -> str:
    """`model`, or during a canary `model [canary v2 10%]`."""
    if not s.track:
        return s.model
    parts = [s.track] + ([f"v{s.version}"] if s.version is not None else []) + \
        ([f"{s.weight}%"] if s.weight is not None else [])
    return f"{s.model} [{' '.join(parts)}]"


def to_json(statuses: list[ModelStatus]) -> str:
    """{"healthy": bool, "models": [{model, namespace, phase, ready, revision, reasons: [...]}]}"""
    return json.dumps({"healthy": all(s.phase == HEALTHY for s in statuses),
                       "models": [s.as_dict() for s in statuses]}, indent=2)


def progress_line(statuses: list[ModelStatus], elapsed: float) -> str:
    """One line for a TTY while --wait follows the rollout."""
    parts = [f"{s.model} {s.phase} {s.ready}" + (f" {s.reasons[0].code}" if s.reasons else "") for s in statuses]
    return f"[{elapsed:5.1f}s] " + "; ".join(parts)
