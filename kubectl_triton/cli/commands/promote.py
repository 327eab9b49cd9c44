"""`kubectl triton promote`: the canary's version becomes the stable one."""

from __future__ import annotations

from pathlib import Path

import click

from kubectl_triton.cli.commands._plan import apply_plan
from kubectl_triton.gitops import adaptercanary, repo
from kubectl_triton.gitops.canary import plan_promote, read_facts


@click.command("promote")
@click.argument("model")
@click.option("--adapter", metavar="NAME", help="End the canary of LoRA adapter NAME (canary --adapter) instead.")
@click.option("--cluster", help="Folder under clusters/ (default: the only one).")
@click.option("--dry-run", is_flag=True, help="Print the files it would write; write nothing.")
@click.option("--repo", "repo_dir", type=click.Path(path_type=Path), default=None,
              help="Repository root (default: the nearest parent holding overlays/).")
def command(model: str, adapter: str | None, cluster: str | None, dry_run: bool, repo_dir: Path | None) -> None:
    """Make MODEL's canary version the stable one: config.pbtxt pins version N (and the model Component
    lists N's committed files), the canary overlay and its Flux Kustomization are removed, the HTTPRoute
    sends all traffic to the stable Service. With --adapter NAME: every request naming adapter NAME goes to
    the canary adapter (the InferenceModelRewrite keeps that one target). Exit 2, nothing written, when no
    canary is in progress."""
    root = repo.find_root(repo_dir)
    if adapter is not None:
        if cluster is not None:
            raise click.UsageError("--cluster: not for an adapter canary (--adapter)")
        todo, split = adaptercanary.plan_promote(adaptercanary.read_facts(root, model), adapter)
        apply_plan(root, todo, dry_run)
        if not dry_run:
            click.echo(f"promoted {model}'s adapter {adapter}: the requests naming it ({split.client}) go to "
                       f"adapter {split.stable}", err=True)
        return
    facts = read_facts(root, model, cluster)
    todo, ro = plan_promote(facts)
    apply_plan(root, todo, dry_run)
    if not dry_run:
        click.echo(f"promoted {model}: {ro.triton_model} version {ro.canary} is stable (was {ro.stable})", err=True)
