"""Printing `status` verdicts: a kubectl-style table with the fixes below it, or the documented document."""

from __future__ import annotations

from kubectl_triton.output.document import dumps
from kubectl_triton.output.table import table
from kubectl_triton.status.model import HEALTHY, ModelStatus
from kubectl_triton.status.objects import short_revision

HEADERS = ("MODEL", "NAMESPACE", "PHASE", "READY", "REVISION", "REASON")


def to_text(statuses: list[ModelStatus], notes: list[str] | None = None) -> str:
    """The table, each model's reasons with their fixes, then what could not be read (notes)."""
    rows = [(_model_cell(s), s.namespace or "-", s.phase, s.ready, short_revision(s.revision) or "-",
             s.reasons[0].code if s.reasons else "-") for s in statuses]
    out = [table(HEADERS, rows)]
    for s in statuses:
        if not s.reasons:
            continue
        out.append("")
        out.append(f"{_model_cell(s)} ({s.phase}):")
        for r in s.reasons:
            out.append(f"  {r.code}: {r.message}")
            out.append(f"    fix: {r.fix}")
        for g in s.groups or []:  # a LeaderWorkerSet's groups
            out.append(f"  group {g['group']}: {g['state']}, {g['ready']} pods ready"
                       + (f" (leader {g['leader']})" if g.get("leader") else ""))
    if notes:
        out += ["", "Not everything was read:"] + [f"  {n}" for n in notes]
    return "\n".join(out)


def _model_cell(s: ModelStatus) -> str:
    """`model`, `model [engine-build]` for its engine-build Job, or during a canary `model [canary v2 10%]`."""
    if s.job:
        return f"{s.model} [engine-build]"
    if not s.track:
        return s.model
    parts = [s.track] + ([f"v{s.version}"] if s.version is not None else []) + \
        ([f"{s.weight}%"] if s.weight is not None else [])
    return f"{s.model} [{' '.join(parts)}]"


def document(statuses: list[ModelStatus], notes: list[str] | None = None) -> dict:
    """{"healthy": bool, "models": [{model, namespace, phase, ready, revision, reasons: [...]}], "notes": [...]}
    (notes only when something could not be read; a LeaderWorkerSet's row adds "groups": [{group, state, ready,
    leader}]): the -o json / -o yaml document."""
    doc: dict = {"healthy": all(s.phase == HEALTHY for s in statuses), "models": [s.as_dict() for s in statuses]}
    if notes:
        doc["notes"] = list(notes)
    return doc


def to_json(statuses: list[ModelStatus], notes: list[str] | None = None) -> str:
    return dumps(document(statuses, notes), "json")


def progress_line(statuses: list[ModelStatus], elapsed: float) -> str:
    """One line for a TTY while --wait follows the rollout."""
    parts = [f"{s.model} {s.phase} {s.ready}" + (f" {s.reasons[0].code}" if s.reasons else "") for s in statuses]
    return f"[{elapsed:5.1f}s] " + "; ".join(parts)
