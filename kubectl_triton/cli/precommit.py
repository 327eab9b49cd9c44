"""pre-commit entry point: static checks of the model repositories that hold the changed config.pbtxt files."""

from __future__ import annotations

import sys
from pathlib import Path

from kubectl_triton.checks.findings import has_errors
from kubectl_triton.errors import TritonCtlError
from kubectl_triton.output.findings import emit


def main(argv: list[str] | None = None) -> int:
    """`triton-check-changed-models FILE...`: exit 0 clean, 1 findings, 2 unreadable input."""
    from kubectl_triton.checks.model.modelrepo import check_repository

    files = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    repositories = sorted({f.resolve().parent.parent for f in files if f.name == "config.pbtxt"})
    findings = []
    try:
        for repository in repositories:
            display = Path.cwd()
            findings += check_repository(repository, display_root=display if display in repository.parents
                                         else repository)
    except TritonCtlError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return err.exit_code
    if findings:
        emit(findings, "text", print)
    return 1 if has_errors(findings) else 0


def entry() -> None:
    sys.exit(main())
