"""Printing findings: compiler-style text, the documented JSON/YAML document, GitHub workflow commands and the
step summary. One printer per format, shared by validate and check-models."""

from __future__ import annotations

import os
from collections.abc import Callable

from kubectl_triton.checks.findings import ERROR, Finding, has_errors, sort_key
from kubectl_triton.output.color import Style, enabled
from kubectl_triton.output.document import dumps

FORMATS = ("text", "json", "yaml", "github")


def document(findings: list[Finding]) -> dict:
    """{"ok": bool, "findings": [...]}: the -o json / -o yaml document."""
    return {"ok": not has_errors(findings), "findings": [f.as_dict() for f in findings]}


def to_json(findings: list[Finding]) -> str:
    """The documented JSON document: {"ok": bool, "findings": [...]}."""
    return dumps(document(findings), "json")


def to_text(findings: list[Finding], color: bool = False) -> str:
    """One line per finding, compiler style: `path:line: severity [code] model: message` (severity and the
    summary coloured when `color`; without it the text carries no escape codes)."""
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
    infos = sum(f.severity == "info" for f in findings)
    warnings = len(findings) - errors - infos
    summary = f"{errors} error(s), {warnings} warning(s)" + (f", {infos} info" if infos else "")
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
        level = "notice" if f.severity == "info" else f.severity  # GitHub's levels: error, warning, notice
        out.append(f"::{level} {','.join(props)}::{_gh_escape(msg)}")
    return "\n".join(out)


def github_summary(findings: list[Finding], title: str = "kubectl triton validate") -> str:
    """A Markdown table for $GITHUB_STEP_SUMMARY."""
    errors = sum(f.severity == ERROR for f in findings)
    verdict = "passed" if not errors else "failed"
    infos = sum(f.severity == "info" for f in findings)
    rows = [f"## {title}: {verdict}", "", f"{errors} error(s), {len(findings) - errors - infos} warning(s)"
            + (f", {infos} info" if infos else ""), ""]
    if findings:
        rows += ["| severity | code | file | model/object | message |", "|---|---|---|---|---|"]
        for f in findings:
            where = (f.path or "") + (f":{f.line}" if f.line else "")
            cell = (f.message).replace("|", "\\|").replace("\n", " ")
            rows.append(f"| {f.severity} | {f.code} | {where} | {f.model or f.object or ''} | {cell} |")
    return "\n".join(rows) + "\n"


def emit(findings: list[Finding], output: str, echo: Callable[..., None]) -> None:
    """Print findings in `output` format (text, json, yaml, github) through `echo`."""
    findings = sorted(findings, key=sort_key)
    if output in ("json", "yaml"):
        echo(dumps(document(findings), output))
    elif output == "github":
        if findings:
            echo(to_github(findings))
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(github_summary(findings))
    else:
        import click

        if echo is click.echo and enabled():  # click.echo strips escape codes off a pipe unless told otherwise
            echo(to_text(findings, color=True), color=True)
        else:
            echo(to_text(findings))
