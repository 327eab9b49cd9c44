"""`kubectl triton init`: make a folder (empty, or an existing Flux repository) a kubectl-triton repository."""

from __future__ import annotations

from pathlib import Path

import click

from kubectl_triton.cli.commands._plan import apply_plan
from kubectl_triton.gitops.init import InitOptions, plan_init
from kubectl_triton.gitops.model import LAYOUT_FILE
from kubectl_triton.gitops.scaffold import Plan


@click.command("init")
@click.argument("directory", required=False, type=click.Path(path_type=Path), default=Path("."))
@click.option("--gpu", "gpus", multiple=True, metavar="GPU",
              help="GPU type to write a Component for (catalog or kubectl-triton.yaml type); repeatable. "
                   "Default: every catalog type.")
@click.option("--cluster", help="Cluster folder to add the Flux objects to (default: production, or the only one).")
@click.option("--source", metavar="KIND/NAME",
              help="This repository's own Flux source when several are found (GitRepository, OCIRepository, Bucket "
                   "or ExternalArtifact).")
@click.option("--monitoring", type=click.Choice(["install", "existing"]),
              help="install: a kube-prometheus-stack HelmRelease in the new cluster's infrastructure; existing: the "
                   "cluster's own Prometheus (named in kubectl-triton.yaml `monitoring:`). Default: existing when the "
                   "repository already deploys kube-prometheus-stack or a Prometheus (or --prometheus-* is given), "
                   "else install.")
@click.option("--prometheus-url", metavar="URL",
              help="existing mode: the Prometheus HTTP API inside the cluster (default: prometheus-operated in the "
                   "found Prometheus's namespace, else http://prometheus-operated.monitoring.svc:9090).")
@click.option("--prometheus-selector", "prometheus_selectors", multiple=True, metavar="[KIND:]KEY=VALUE",
              help="existing mode: a label its Prometheus selects monitors and rules by; repeatable. KIND "
                   "(serviceMonitor, podMonitor, rule) limits it to one kind, replacing the unprefixed labels there. "
                   "Default: the found Prometheus's selectors, else release=kube-prometheus-stack.")
@click.option("--dry-run", is_flag=True, help="Print every file it would write; write nothing.")
def command(directory: Path, gpus: tuple[str, ...], cluster: str | None, source: str | None, monitoring: str | None,
            prometheus_url: str | None, prometheus_selectors: tuple[str, ...], dry_run: bool) -> None:
    """Write what DIRECTORY (default: here) lacks to be a kubectl-triton repository: the Triton, engine-build,
    platform and monitoring bases, GPU Components, the cluster's Flux objects, a validate CI workflow and
    kubectl-triton.yaml (the layout every command reads). In an existing Flux repository it detects the cluster
    folders, the repository's own source, the infrastructure Kustomizations and a Prometheus already deployed
    (--monitoring existing: monitors and rules get its selector labels, no kube-prometheus-stack is added), never
    rewrites a file and only appends to a cluster's kustomization.yaml. Running it again changes nothing; a failed
    run writes nothing."""
    from kubectl_triton.errors import InputError

    if not directory.is_dir():
        raise InputError(f"{directory}: no such directory")
    had_layout = (directory / LAYOUT_FILE).is_file()
    todo = plan_init(directory, InitOptions(gpus=tuple(dict.fromkeys(gpus)), cluster=cluster, source=source,
                                            monitoring=monitoring, prometheus_url=prometheus_url,
                                            prometheus_selectors=prometheus_selectors))
    root = directory.resolve()
    if todo.files:
        apply_plan(root, Plan(todo.files), dry_run)
    else:
        click.echo("nothing to write: the repository already has everything init writes", err=True)
    for rel in todo.kept:
        click.echo(f"kept {rel} (differs from what init writes; yours is left as it is)")
    if dry_run:
        return
    verb = "updated" if had_layout else "adopted" if todo.adopted else "initialised"
    click.echo(f"{verb} {root} (cluster {todo.cluster}, Flux source "
               f"{todo.layout.source}, models wait for: {', '.join(todo.layout.depends_on) or 'nothing'})", err=True)
    for note in todo.review:
        click.echo(f"review: {note}", err=True)
    if todo.files:
        gpu = next(iter(gpus), "l4")
        click.echo(f"next: kubectl triton validate && kubectl triton add-model NAME --backend onnxruntime --gpu {gpu}",
                   err=True)
