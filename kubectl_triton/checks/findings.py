"""Findings: what every check returns, and the three ways `validate`-like commands print them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One problem found. `path` is relative to the directory the user named."""

    severity: str
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


def to_json(findings: list[Finding]) -> str:
    """The documented JSON document: {"ok": bool, "findings": [...]}."""
    return json.dumps({"ok": not has_errors(findings), "findings": [f.as_dict() for f in findings]},
                      indent=2)


def to_text(findings: list[Finding], color: bool = False) -> str:
    """One line per finding, compiler style: `path:line: severity [code] model: message` (severity and the
    summary coloured when `color`; without it the text carries no escape codes)."""
    from kubectl_triton.output.color import Style

    st = Style(color)
    lines = []
    for f in findings:
        where = f.path or "-"
        if f.line:
            where += f":{f.line}"
        subject = f.model or f.object
        lines.append(f"{st.bold(where)}: {st.severity(f.severity)} [{f.code}] " + (f"{subject}: " if subject else "")
                     + f.message)
    errors = sum(f.severity == ERROR for f in findings)
    warnings = len(findings) - errors
    summary = f"{errors} error(s), {warnings} warning(s)"
    lines.append(st.red(summary) if errors else st.yellow(summary) if warnings else st.green(summary))
    return "\n".join(lines)


def _gh_escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def to_github(findings: list[Finding]) -> str:
    """GitHub Actions workflow commands, one per finding."""
    out = []
    for f in findings:
        props = []
        if f.path:
            props.append(f"file={_gh_escape(f.path, True)}")
        if f.line:
            props.append(f"line={f.line}")
        props.append(f"title={_gh_escape(f.code, True)}")
        subject = f.model or f.object
        msg = (f"{subject}: " if subject else "") + f.message
        out.append(f"::{f.severity} {','.join(props)}::{_gh_escape(msg)}")
    return "\n".join(out)


def github_summary(findings: list[Finding], title: str = "kubectl triton validate") -> str:
    """A Markdown table for $GITHUB_STEP_SUMMARY."""
    errors = sum(f.severity == ERROR for f in findings)
    verdict = "passed" if not errors else "failed"
    rows = [f"## {title}: {verdict}", "",
            f"{errors} error(s), {len(findings) - errors} warning(s)", ""]
    if findings:
        rows += ["| severity | code | file | model/object | message |", "|---|---|---|---|---|"]
        for f in findings:
            where = (f.path or "") + (f":{f.line}" if f.line else "")
            cell = (f.message).replace("|", "\\|").replace("\n", " ")
            rows.append(f"| {f.severity} | {f.code} | {where} | {f.model or f.object or ''} | {cell} |")
    return "\n".join(rows) + "\n"


def emit(findings: list[Finding], output: str, echo) -> None:
    """Print findings in `output` format (text, json, github) through `echo`."""
    findings = sorted(findings, key=sort_key)
    if output == "json":
        echo(to_json(findings))
    elif output == "github":
        if findings:
            echo(to_github(findings))
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(github_summary(findings))
    else:
        import click

        from kubectl_triton.output.color import enabled

        if echo is click.echo and enabled():  # click.echo strips escape codes off a pipe unless told otherwise
            echo(to_text(findings, color=True), color=True)
        else:
            echo(to_text(findings))
