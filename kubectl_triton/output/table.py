"""The one kubectl-style table printer: upper-case headers, columns padded to the widest cell plus 3 spaces."""

from __future__ import annotations

from collections.abc import Callable, Sequence

Painter = Callable[[int, int, str], str]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], paint: Painter | None = None) -> str:
    """Render `headers` and `rows` like `kubectl get`. `paint(row, col, padded_cell)` may colour a cell after
    padding (row 0 is the header), so colour codes never shift the columns."""
    lines = [[str(c) for c in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in lines) for i in range(len(headers))]

    def line(i: int, cells: list[str]) -> str:
        padded = [c.ljust(w) for c, w in zip(cells, widths, strict=True)]
        padded[-1] = padded[-1].rstrip()
        return "   ".join(paint(i, j, c) if paint else c for j, c in enumerate(padded)).rstrip()

    return "\n".join(line(i, r) for i, r in enumerate(lines))
