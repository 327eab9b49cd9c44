"""Printing compat verdicts: the models x GPU types matrix, one engine's verdict, the GPU inventory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kubectl_triton.compat.catalog import gpus
from kubectl_triton.compat.inventory import GPUType, OverlayFit
from kubectl_triton.compat.rules import Result
from kubectl_triton.output.color import current
from kubectl_triton.output.table import table

MARKS = {True: "✓", False: "✗", None: "?"}
ASCII_MARKS = {True: "ok", False: "x", None: "?"}


def _marks() -> dict:
    enc = (getattr(sys.stdout, "encoding", None) or "").lower()
    return MARKS if "utf" in enc else ASCII_MARKS


def _painter(marks: dict):
    """Bold header, cells green/red/yellow by their verdict mark; None when colour is off."""
    st = current()
    if not st.on:
        return None
    verdicts = {marks[k]: k for k in marks}

    def paint(i: int, j: int, text: str) -> str:
        if i == 0:
            return st.bold(text)
        mark = text.split(" ", 1)[0].rstrip(",")
        return st.verdict(text, verdicts[mark]) if j > 0 and mark in verdicts else text

    return paint


def cell(result, marks: dict) -> str:
    mark = marks[result.compatible]
    first = result.first_reason
    return f"{mark} {first.code}" if first else mark


def format_matrix(results: list) -> str:
    """Models as rows, GPU types as columns, each cell ✓/✗/? and its first reason's code; then
    the first reason of every cell that has one."""
    if not results:
        return "No TensorRT-LLM model with GPU overlays found."
    order = list(gpus())
    columns = sorted({r.gpu for r in results}, key=lambda g: (order.index(g) if g in order else 99, g))
    models = sorted({r.model or "-" for r in results})
    marks = _marks()
    by_pair: dict[tuple[str, str], list] = {}
    for r in results:
        by_pair.setdefault((r.model or "-", r.gpu), []).append(r)
    rows: list[list[str]] = []
    for m in models:
        row = [m]
        for c in columns:
            found = by_pair.get((m, c), [])
            row.append(", ".join(cell(r, marks) for r in found) if found else "-")
        rows.append(row)
    notes = [f"{r.model or '-'} on {r.gpu}" + (f" ({r.overlay})" if r.overlay else "")
             + f": {r.first_reason.severity} [{r.first_reason.code}] {r.first_reason.message}"
             for r in results if r.first_reason]
    matrix = table(["MODEL", *[c.upper() for c in columns]], rows, _painter(marks))
    return matrix + ("\n\n" + "\n".join(notes) if notes else "")


def format_single(result, engine_dir: Path) -> str:
    verdict = {True: "compatible", False: "incompatible", None: "unknown"}[result.compatible]
    head = f"{engine_dir} on {result.gpu}: " + current().verdict(f"{_marks()[result.compatible]} {verdict}",
                                                                  result.compatible)
    if not result.reasons:
        return head
    rows = [[r.severity, r.code, r.message] for r in result.reasons]
    return head + "\n\n" + table(["SEVERITY", "CODE", "MESSAGE"], rows, _painter(_marks()))


def results_document(results: list[Result]) -> dict[str, Any]:
    """The documented -o json / -o yaml document of `compat`."""
    return {"results": [r.as_dict() for r in results]}


def format_inventory(rows: list[GPUType], fits: list[OverlayFit]) -> str:
    """kubectl-style tables: GPU types, then overlays."""
    out = [table(["PRODUCT", "KEY", "NODES", "ALLOCATABLE", "REQUESTED", "FREE"],
                 [[r.product, r.key or "?", r.nodes, r.allocatable, r.requested, r.free] for r in rows])
           if rows else "No GPU nodes found."]
    if fits:
        out.append(table(["OVERLAY", "MODEL", "GPUS/POD", "PODS/GROUP", "GROUPS NOW", "CAN RUN", "REASON"],
                         [[f.overlay, f.model, f.gpus_per_pod or 0, f.group_size,
                           "-" if f.groups_free_now is None else f.groups_free_now, f.can_run, f.reason]
                          for f in fits]))
    return "\n\n".join(out)
