"""`kubectl triton gpus`: GPU types in the cluster (GPU Feature Discovery labels) and, for each overlay in
the repository, whether any node can run it (for a multi-node LeaderWorkerSet group: how many whole groups, each
needing `size` nodes with GPUs-per-pod free GPUs of its type, fit now)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from kubectl_triton.cli.options import cluster_args, cluster_options, output_format, output_option
from kubectl_triton.gitops import repo

FORMATS = ("text", "json", "yaml")


@click.command("gpus")
@click.option("--repo", "repo_dir", type=click.Path(path_type=Path), default=None,
              help="GitOps repository whose overlays to place (default: the nearest one; none: GPUs only).")
@output_option(FORMATS)
@cluster_options()
@click.pass_context
def command(ctx: click.Context, repo_dir: Path | None, output: str | None, kubeconfig: str | None,
            kube_context: str | None, namespace: str | None) -> None:
    """GPU products with node counts, allocatable, requested and free GPUs; overlays that fit."""
    from kubectl_triton.adapters import kube
    from kubectl_triton.compat.inventory import inventory
    from kubectl_triton.compat.repo_check import render_placements
    from kubectl_triton.errors import InputError
    from kubectl_triton.output.compat import format_inventory
    from kubectl_triton.output.document import dumps

    output = output_format(ctx, output, FORMATS)
    where = cluster_args(ctx, kubeconfig, kube_context, namespace)
    placements: list[Any] = []
    try:
        root = repo.find_root(repo_dir)
    except InputError:
        if repo_dir is not None:
            raise
        root = None
    if root is not None:
        placements, _failures = render_placements(root)
    client = kube.connect(where.kubeconfig, where.context, where.namespace)
    nodes, _ = client.list("nodes")
    pods, _ = client.list("pods", kube.ALL_NAMESPACES,
                          field_selector="status.phase!=Succeeded,status.phase!=Failed")
    rows, fits = inventory(nodes, pods, placements)
    if output != "text":
        click.echo(dumps({"gpus": [asdict(r) for r in rows], "overlays": [{**asdict(f), "can_run": f.can_run}
                                                                         for f in fits]}, output))
    else:
        click.echo(format_inventory(rows, fits))
