"""Findings: what every check returns (printed by kubectl_triton.output.findings)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Final, Literal

Severity = Literal["error", "warning", "info"]
ERROR: Final = "error"
WARNING: Final = "warning"
INFO: Final = "info"


@dataclass(frozen=True)
class Finding:
    """One problem found. `path` is relative to the directory the user named."""

    severity: Severity
    code: str
    message: str
    path: str | None = None
    line: int | None = None
    model: str | None = None
    object: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == ERROR for f in findings)


def sort_key(f: Finding) -> tuple:
    return (f.path or "", f.line or 0, f.model or "", f.object or "", f.code, f.message)
