"""`kubectl triton gpus`: GPU types in the cluster (GPU Feature Discovery labels) and, for each overlay in
the repository, whether any node can run it."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from kubectl_triton.gitops import repo


@click.command("gpus")
@click.option("--repo", "repo_dir", type=click.Path(path_type=Path), default=None,
              help="GitOps repository whose overlays to place (default: the nearest one; none: GPUs only).")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default=None, help="Output format.")
@click.pass_context
def command(ctx: click.Context, repo_dir: Path | None, output: str | None) -> None:
    """GPU products with node counts, allocatable, requested and free GPUs; overlays that fit."""
    from kubectl_triton.adapters import kube
    from kubectl_triton.compat.inventory import format_inventory, inventory
    from kubectl_triton.compat.repo_check import render_placements
    from kubectl_triton.errors import InputError

    opts = ctx.obj or {}
    output = output or opts.get("output") or "text"
    if output not in ("text", "json"):
        raise click.UsageError(f"-o {output} is not supported by gpus (text, json)")
    placements = []
    try:
        root = repo.find_root(repo_dir)
    except InputError:
        if repo_dir is not None:
            raise
        root = None
    if root is not None:
        placements, _failures = render_placements(root)
    client = kube.connect(opts.get("kubeconfig"), opts.get("context"), opts.get("namespace"))
    nodes, _ = client.list("nodes")
    pods, _ = client.list("pods", kube.ALL_NAMESPACES,
                          field_selector="status.phase!=Succeeded,status.phase!=Failed")
    rows, fits = inventory(nodes, pods, placements)
    if output == "json":
        click.echo(json.dumps({"gpus": [asdict(r) for r in rows], "overlays": [asdict(f) for f in fits]},
                              indent=2))
    else:
        click.echo(format_inventory(rows, fits))
