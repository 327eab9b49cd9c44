"""`kubectl triton check-models`: check one Triton model repository folder, statically and (with
--triton) with the real server."""

from __future__ import annotations

from pathlib import Path

import click

from kubectl_triton.checks.findings import Finding, has_errors
from kubectl_triton.cli.options import output_format, output_option
from kubectl_triton.errors import InputError, ToolMissing
from kubectl_triton.output.findings import FORMATS, emit


def _with_triton(repo_dir: Path) -> list[Finding]:
    """Load the repository in a real tritonserver; a one-line warning (and no findings) without one."""
    try:
        from kubectl_triton.checks.model.triton import check_repository_with_triton
    except ImportError as err:
        click.echo(f"warning: --triton is not available ({err}); static checks only", err=True)
        return []
    try:
        return list(check_repository_with_triton(repo_dir, display_root=repo_dir))
    except ToolMissing as err:
        click.echo(f"warning: {err.message}; static checks only", err=True)
        return []


@click.command("check-models")
@click.argument("model_repository", metavar="MODEL_REPOSITORY_DIR", type=click.Path(path_type=Path))
@click.option("--triton", "use_triton", is_flag=True,
              help="Also load the repository in a real tritonserver (python-backend shadows of each model).")
@click.option("--disable-auto-complete-config", "strict", is_flag=True,
              help="Judge the repository as tritonserver started with this flag does (as the base Deployment is): "
                   "every model folder needs its config.pbtxt. Default: Triton's own default, auto-complete on.")
@output_option(FORMATS)
@click.pass_context
def command(ctx: click.Context, model_repository: Path, use_triton: bool, strict: bool, output: str | None) -> None:
    """Check MODEL_REPOSITORY_DIR: every sub-folder holding a config.pbtxt is a model named after it.

    Runs the rules Triton applies when it loads a model (names, data types, dims and reshape,
    batching, instance groups, sequence batching, ensembles' wiring, tensorrtllm parameters).
    Exit 0: no error findings; 1: error findings; 2: the folder cannot be used.
    """
    from kubectl_triton.checks.model.modelrepo import CONFIG, check_repository, model_dirs, unconfigured_dirs

    if not model_repository.exists():
        raise InputError(f"{model_repository}: no such directory")
    if not model_dirs(model_repository) and not unconfigured_dirs(model_repository):
        hint = ("this folder is one model; pass the folder that holds it"
                if (model_repository / CONFIG).is_file() else None)
        raise InputError(f"{model_repository}: no model folders", hint=hint)
    findings = check_repository(model_repository, strict=strict)
    if use_triton:
        findings += _with_triton(model_repository)
    emit(findings, output_format(ctx, output, FORMATS), click.echo)
    if has_errors(findings):
        raise click.exceptions.Exit(1)
