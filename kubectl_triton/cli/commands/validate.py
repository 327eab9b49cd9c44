"""`kubectl triton validate`: the pull-request gate."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from kubectl_triton.checks.findings import has_errors
from kubectl_triton.cli.options import output_format, output_option
from kubectl_triton.errors import InputError
from kubectl_triton.formats import schemas
from kubectl_triton.gitops.model import Repository

FORMATS = ("text", "json", "yaml", "github")
LIST_FORMATS = ("text", "json", "yaml", "markdown")


@click.command("validate")
@click.argument("repo_dir", required=False, type=click.Path(path_type=Path))
@click.option("--triton", "with_triton", is_flag=True,
              help="Also load every model repository in the real tritonserver (python-backend shadows).")
@output_option(FORMATS + ("markdown",), "text (default), json, yaml, or github (workflow commands + step summary); "
               "with --list-checks also markdown.")
@click.option("--kubernetes-version", default=None,
              help="Kubernetes version whose schemas built-in objects must satisfy (default: each cluster's, from "
                   f"kubectl-triton.yaml `kubernetes:`, else {schemas.DEFAULT_KUBERNETES_VERSION}).")
@click.option("--no-compat", is_flag=True, help="Skip engine-to-GPU compatibility checks.")
@click.option("--changed-from", "changed_from", metavar="REF", default=None,
              help="Check per-overlay rules only where the change since git REF can reach (cluster-wide checks "
                   "still see every cluster whole).")
@click.option("--no-cache", is_flag=True,
              help="Render every folder anew (default: reuse renders whose input files are unchanged).")
@click.option("--server", "with_server", is_flag=True,
              help="Also apply every cluster folder to a real API server in Flux's order (server-side dry run): "
                   "the cluster of --context/--kubeconfig, else an ephemeral etcd + kube-apiserver "
                   "(KUBEBUILDER_ASSETS or the `make controlplane` cache).")
@click.option("--kubeconfig", default=None, help="With --server: the kubeconfig of the cluster to dry-run against.")
@click.option("--context", "kube_context", default=None, help="With --server: the kubeconfig context to use.")
@click.option("--crds", "crd_dir", type=click.Path(path_type=Path), envvar="KUBECTL_TRITON_CRDS", default=None,
              help="With --server on an ephemeral API server: a folder of CRD manifests (searched recursively, "
                   "other kinds ignored) to install for the charts and add-ons; default: the crds/ of the "
                   "`make controlplane` cache or beside KUBEBUILDER_ASSETS.  [env: KUBECTL_TRITON_CRDS]")
@click.option("--list-checks", is_flag=True, help="List every check (code, severity, scope, description) and exit.")
@click.pass_context
def command(ctx: click.Context, repo_dir: Path | None, with_triton: bool, output: str | None,
            kubernetes_version: str | None, no_compat: bool, changed_from: str | None, no_cache: bool,
            with_server: bool, kubeconfig: str | None, kube_context: str | None, crd_dir: Path | None,
            list_checks: bool) -> None:
    """Render every overlay and Flux path, check schemas, model configurations (ensembles included),
    engine/GPU compatibility and the deployment guides' practices. Exit 0: no errors; 1: errors; 2: bad input."""
    from kubectl_triton.checks.gate import Options, validate_repo
    from kubectl_triton.output.findings import emit

    if list_checks:
        from kubectl_triton.output.checks import print_checks

        click.echo(print_checks(output_format(ctx, output, LIST_FORMATS)))
        return
    output = output_format(ctx, output, FORMATS)
    if repo_dir is not None and not repo_dir.exists():
        raise InputError(f"{repo_dir}: no such directory")
    if kubernetes_version is not None and not schemas.supported_version(kubernetes_version):
        raise InputError(f"--kubernetes-version {kubernetes_version}: no bundled schemas for that version")
    repository = Repository.find(repo_dir, tolerant=True)  # malformed files are findings, not exit 2
    root = repository.root
    if with_triton and not _triton_available():
        click.echo("warning: --triton needs the tritonserver of nvidia-pytriton "
                   "(pip install 'kubectl-triton[triton]'); static checks only", err=True)
        with_triton = False
    progress = None
    if output == "text" and sys.stderr.isatty():
        def progress(msg: str) -> None:
            click.echo(f"… {msg}", err=True)
    if (kubeconfig or kube_context) and not with_server:
        raise InputError("--kubeconfig and --context only apply with --server")
    if crd_dir is not None and with_server:
        if kubeconfig or kube_context:
            raise InputError("--crds applies to the ephemeral API server only: a cluster context has its own CRDs")
        if not crd_dir.is_dir():
            raise InputError(f"--crds {crd_dir}: no such directory")
    server = _server_target(kubeconfig, kube_context, crd_dir) if with_server else None
    findings = validate_repo(root, Options(kubernetes_version, with_triton, not no_compat, not no_cache, changed_from,
                                           server), progress)
    if not repository.overlays:  # asked after the run, whose parse memo it reuses
        click.echo(f"note: no model overlay under {repository.layout.overlays}/ yet: only the bases and Flux objects "
                   "are checked (kubectl triton add-model NAME --backend BACKEND --gpu GPU adds one)", err=True)
    emit(findings, output, click.echo)
    if has_errors(findings):
        raise click.exceptions.Exit(1)


def _server_target(kubeconfig: str | None, kube_context: str | None, crd_dir: Path | None) -> Any:
    """The API server --server applies to: the named cluster (dry run only), else an ephemeral one."""
    from kubectl_triton.adapters import controlplane, kube
    from kubectl_triton.checks import server

    if kubeconfig or kube_context:
        return server.Target(kube=kube.connect(kubeconfig, kube_context))
    assets = controlplane.find_assets()
    crds = crd_dir or assets.crds
    if crds is None:
        click.echo(f"note: {assets.source} has no CRD manifests (give a folder of them with --crds): custom "
                   "resources of charts and add-ons are not put to the API server (ServerNotChecked)", err=True)
    return server.Target(ephemeral=lambda: server.ephemeral_cluster(assets), crds=server.load_crds(crds))


def _triton_available() -> bool:
    """Is a tritonserver at hand (nvidia-pytriton in this environment, or one on PATH)?"""
    from kubectl_triton.adapters.tritonserver import find_install
    from kubectl_triton.errors import ToolMissing

    try:
        find_install()
    except ToolMissing:
        return False
    return True
