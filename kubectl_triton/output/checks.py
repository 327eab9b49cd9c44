"""The check registry as a table, a document, or the Markdown of docs/checks.md."""

from __future__ import annotations

from kubectl_triton.checks.registry import SCOPES, all_checks
from kubectl_triton.output.document import dumps
from kubectl_triton.output.table import table

_HEADER = """# Checks

Every finding code that `kubectl triton validate` and `kubectl triton check-models` report. Generated from the
check registry (`kubectl triton validate --list-checks -o markdown > docs/checks.md`); a test fails when it is stale.
A finding's severity may be lower than the check's for a milder case (the message says why).
"""


def print_checks(fmt: str) -> str:
    """Every registered check in `fmt`: text (kubectl-style table), json, yaml or markdown."""
    checks = all_checks()
    if fmt in ("json", "yaml"):
        return dumps({"checks": [c.as_dict() for c in checks]}, fmt)
    if fmt == "markdown":
        out = [_HEADER]
        for scope in SCOPES:
            scoped = [c for c in checks if c.scope == scope]
            if not scoped:
                continue
            out += [f"## Scope: {scope}", "", "| code | severity | description | remediation |", "|---|---|---|---|"]
            out += [f"| `{c.code}` | {c.severity} | {_cell(c.description)} | {_cell(c.remediation)} |" for c in scoped]
            out.append("")
        return "\n".join(out).rstrip("\n")
    return table(("CODE", "SEVERITY", "SCOPE", "DESCRIPTION"), [(c.code, c.severity, c.scope, c.description)
                                                                 for c in checks])


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
