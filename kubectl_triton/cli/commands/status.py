"""`kubectl triton status`: is my model serving, and if not, why, and what do I change?

Reads (never writes) the cluster through `kubectl_triton.status.collect`; the verdict comes from the pure
`kubectl_triton.status` package and is printed by `kubectl_triton.output.status`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from kubectl_triton.cli.options import DURATION, GRACE, cluster_args, cluster_options, output_format, output_option
from kubectl_triton.errors import EXIT_TIMEOUT

FORMATS = ("text", "json", "yaml")


@click.command("status")
@click.argument("models", nargs=-1)
@cluster_options(all_namespaces=True)
@click.option("--wait", is_flag=True, help="Watch until Healthy, or until a failure waiting cannot cure.")
@click.option("--timeout", type=DURATION, default="10m", show_default=True,
              help="How long --wait waits (30s, 5m, 1h).")
@click.option("--no-probe", is_flag=True, help="Do not ask Triton itself (through the pod proxy).")
@click.option("--request-timeout", type=DURATION, default="30s", show_default=True,
              help="How long one API request may take before the cluster counts as unreachable.")
@click.option("--unschedulable-grace", type=GRACE, default="60s", show_default=True,
              help="How long a pod may stay unschedulable before it counts as failed.")
@output_option(FORMATS, "Output format: a table with fixes (text), json or yaml.")
@click.pass_context
def command(ctx: click.Context, models: tuple[str, ...], namespace: str | None, all_namespaces: bool,
            kubeconfig: str | None, kube_context: str | None, wait: bool, timeout: float, no_probe: bool,
            request_timeout: float, unschedulable_grace: float, output: str | None) -> None:
    """Rollout health of Triton MODELs (default: every Triton Deployment in scope), with cause and fix.

    \b
    Phases: Healthy, Progressing, Failed, Unknown. Exit codes: 0 all Healthy; 1 any Failed or Unknown;
    3 still Progressing when --wait timed out; 2 usage errors, unreachable cluster, Deployments or Pods
    forbidden. Logs, events and the Triton probe are read when allowed; what was not is named in notes.
    JSON/YAML (-o json|yaml): {"healthy": bool, "models": [{"model", "namespace", "phase", "ready", "revision",
    "reasons": [{"code", "message", "fix"}]}], "notes": [str] (only when something was not read)}
    """
    from kubectl_triton.adapters import kube as kube_mod
    from kubectl_triton.output import status as printer
    from kubectl_triton.output.document import dumps
    from kubectl_triton.status import diagnose as diag
    from kubectl_triton.status.collect import Collector, exit_code, wait_for

    fmt = output_format(ctx, output, FORMATS)
    where = cluster_args(ctx, kubeconfig, kube_context, namespace, all_namespaces)
    all_namespaces = where.all_namespaces
    if all_namespaces and namespace is not None:
        raise click.UsageError("pass either -n NAMESPACE or -A, not both")
    kube = kube_mod.connect(where.kubeconfig, where.context, where.namespace, request_timeout=request_timeout)
    scope = kube_mod.ALL_NAMESPACES if all_namespaces else kube.namespace
    collector = Collector(kube, scope, tuple(dict.fromkeys(models)), probe=not no_probe)

    if wait:
        line = _ProgressLine(printer.progress_line) if sys.stderr.isatty() and fmt == "text" else None
        try:
            statuses, timed_out = wait_for(collector, timeout, grace_s=unschedulable_grace,
                                           on_progress=line.show if line else None)
        finally:
            if line:
                line.clear()
    else:
        statuses = diag.diagnose(collector.enrich(collector.snapshot()), collector.models,
                                 namespace=collector.scope_name, unschedulable_grace_s=unschedulable_grace)
        timed_out = False

    if not statuses and fmt == "text":
        scope_text = "any namespace" if all_namespaces else f"namespace {kube.namespace}"
        click.echo(f"No Triton deployments found in {scope_text}.", err=True)
    else:
        notes = list(collector.notes.values())
        click.echo(printer.to_text(statuses, notes) if fmt == "text"
                   else dumps(printer.document(statuses, notes), fmt))
    code = exit_code(statuses, timed_out)
    if timed_out and code == EXIT_TIMEOUT:
        click.echo(f"error: timed out after {ctx.params.get('timeout'):g}s waiting for the rollout", err=True)
    if code:
        raise click.exceptions.Exit(code)


class _ProgressLine:
    """A live line on stderr (TTY only), overwritten in place."""

    def __init__(self, render: Callable[[list[Any], float], str]) -> None:
        self.width = 0
        self.render = render

    def show(self, statuses: list[Any], elapsed: float) -> None:
        text = self.render(statuses, elapsed)[:160]
        sys.stderr.write("\r" + text.ljust(self.width))
        sys.stderr.flush()
        self.width = len(text)

    def clear(self) -> None:
        sys.stderr.write("\r" + " " * self.width + "\r")
        sys.stderr.flush()
