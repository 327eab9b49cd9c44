"""`kubectl triton abort`: remove the canary; the stable version keeps all traffic."""

from __future__ import annotations

from pathlib import Path

import click

from kubectl_triton.cli.commands._plan import apply_plan
from kubectl_triton.gitops import adaptercanary, repo
from kubectl_triton.gitops.canary import plan_abort, read_facts


@click.command("abort")
@click.argument("model")
@click.option("--adapter", metavar="NAME", help="End the canary of LoRA adapter NAME (canary --adapter) instead.")
@click.option("--cluster", help="Folder under clusters/ (default: the only one).")
@click.option("--dry-run", is_flag=True, help="Print the files it would write; write nothing.")
@click.option("--repo", "repo_dir", type=click.Path(path_type=Path), default=None,
              help="Repository root (default: the nearest parent holding overlays/).")
def command(model: str, adapter: str | None, cluster: str | None, dry_run: bool, repo_dir: Path | None) -> None:
    """Remove MODEL's canary: its overlay and Flux Kustomization go, the HTTPRoute sends all traffic to the
    stable Service (which keeps its pinned version). With --adapter NAME: the InferenceModelRewrite sends the
    requests naming adapter NAME back to what served them before (the file goes with its last rule). Exit 2,
    nothing written, when no canary is in progress."""
    root = repo.find_root(repo_dir)
    if adapter is not None:
        if cluster is not None:
            raise click.UsageError("--cluster: not for an adapter canary (--adapter)")
        todo, split = adaptercanary.plan_abort(adaptercanary.read_facts(root, model), adapter)
        apply_plan(root, todo, dry_run)
        if not dry_run:
            click.echo(f"aborted {model}'s canary of adapter {split.canary}: the requests naming {adapter} "
                       f"({split.client}) go to adapter {split.stable}", err=True)
        return
    facts = read_facts(root, model, cluster)
    todo, ro = plan_abort(facts)
    apply_plan(root, todo, dry_run)
    if not dry_run:
        click.echo(f"aborted {model}'s canary of {ro.triton_model} version {ro.canary}; version {ro.stable} "
                   "serves all traffic", err=True)
