"""`kubectl triton diff`: what this change does to each cluster (the review comment a pull request deserves)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from kubectl_triton.cli.options import output_format, output_option
from kubectl_triton.errors import InputError

FORMATS = ("text", "json", "yaml", "markdown")


@click.command("diff")
@click.argument("repo_dir", required=False, type=click.Path(path_type=Path))
@click.option("--base", "base_ref", default=None,
              help="Git ref to compare with (default: origin/$GITHUB_BASE_REF in a pull-request workflow, "
                   "else HEAD). The merge base of REF and HEAD is rendered, as a pull request's diff is.")
@output_option(FORMATS, "text (default), json, yaml, or markdown (a PR comment or step summary).")
@click.option("--exit-code", is_flag=True, help="Exit 1 when anything changes (as `git diff --exit-code`).")
@click.pass_context
def command(ctx: click.Context, repo_dir: Path | None, base_ref: str | None, output: str | None,
            exit_code: bool) -> None:
    """Render every overlay and Flux path at the base ref (in a temporary git worktree) and in the working
    tree, and list per cluster the objects added, removed and changed, and the Deployments that will roll.

    Exit 0 (1 with --exit-code when something changed); 2 on bad input, or when a folder did not render."""
    from kubectl_triton.gitops.diff import compare, to_dict, to_markdown, to_text
    from kubectl_triton.gitops.model import Repository
    from kubectl_triton.output.color import current
    from kubectl_triton.output.document import dumps

    output = output_format(ctx, output, FORMATS)
    if repo_dir is not None and not repo_dir.is_dir():
        raise InputError(f"{repo_dir}: no such directory")
    # tolerant: a malformed layout file is reported by compare, naming the side (working tree or base) it is on
    root = Repository.find(repo_dir, tolerant=True).root
    ref = base_ref or (f"origin/{os.environ['GITHUB_BASE_REF']}" if os.environ.get("GITHUB_BASE_REF") else "HEAD")
    report = compare(root, ref)
    if output in ("json", "yaml"):
        click.echo(dumps(to_dict(report), output))
    elif output == "markdown":
        click.echo(to_markdown(report), nl=False)
    else:
        style = current()
        click.echo(to_text(report, style), color=True if style.on else None)
    if exit_code and not report.empty:
        raise click.exceptions.Exit(1)
