"""Options every command shares, declared once: output format, cluster access, durations.

Cluster flags (`--kubeconfig`, `--context`, `-n/--namespace`, `-A`) and `-o/--output` are accepted before the
sub-command (on the group, as kubectl accepts global flags) and after it; the sub-command's own value wins."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from kubectl_triton.formats.duration import parse_duration

F = TypeVar("F", bound=Callable[..., Any])

# Every output format some command accepts; the group's -o offers these, each command its own subset.
FORMATS = ("text", "json", "yaml", "github", "markdown")


def output_option(formats: Sequence[str], help_text: str | None = None) -> Callable[[F], F]:
    """`-o/--output` limited to `formats` (the first is the default); resolved by `output_format`."""
    described = help_text or f"Output format: {', '.join(formats)} (default {formats[0]})."
    return click.option("-o", "--output", "output", type=click.Choice(list(formats)), default=None, help=described)


def output_format(ctx: click.Context, local: str | None, formats: Sequence[str]) -> str:
    """The sub-command's -o, else the group's, else the first of `formats`; a group -o the command does not
    accept is a usage error naming the formats it does."""
    chosen = local or _group_value(ctx, "output")
    if chosen is None:
        return formats[0]
    if chosen not in formats:
        raise click.UsageError(f"-o {chosen} is not supported by {ctx.command_path} ({', '.join(formats)})")
    return chosen


@dataclass(frozen=True)
class ClusterArgs:
    """Where a cluster command connects: kubeconfig file, context, namespace (None: the context's)."""

    kubeconfig: str | None
    context: str | None
    namespace: str | None
    all_namespaces: bool = False


def cluster_options(all_namespaces: bool = False) -> Callable[[F], F]:
    """--kubeconfig, --context, -n/--namespace (and -A when the command can span namespaces)."""

    def decorate(fn: F) -> F:
        opts = [click.option("--kubeconfig", "kubeconfig", default=None, help="Path to the kubeconfig file."),
                click.option("--context", "kube_context", default=None, help="The kubeconfig context to use."),
                click.option("-n", "--namespace", "namespace", default=None,
                             help="Namespace (default: the context's, else `default`).")]
        if all_namespaces:
            opts.append(click.option("-A", "--all-namespaces", "all_namespaces", is_flag=True,
                                     help="Every namespace."))
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return decorate


def cluster_args(ctx: click.Context, kubeconfig: str | None, kube_context: str | None, namespace: str | None,
                 all_namespaces: bool = False) -> ClusterArgs:
    """The command's cluster flags, each falling back to the group's (`kubectl triton -n ns status`)."""
    return ClusterArgs(kubeconfig or _group_value(ctx, "kubeconfig"), kube_context or _group_value(ctx, "context"),
                       namespace or _group_value(ctx, "namespace"),
                       all_namespaces or bool(_group_value(ctx, "all_namespaces")))


def _group_value(ctx: click.Context, key: str) -> Any:
    root = ctx.find_root()
    return (root.obj or {}).get(key) if isinstance(root.obj, dict) else None


class Duration(click.ParamType):
    """`30s`, `500ms`, `5m`, `1h30m` or plain seconds; positive (or zero, when `allow_zero`)."""

    name = "duration"

    def __init__(self, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            seconds: float | None = float(value)
        else:
            seconds = parse_duration(str(value))
        if seconds is None:
            self.fail(f"{value!r} is not a duration (e.g. 30s, 500ms, 5m, 1h)", param, ctx)
        if seconds < 0 or (seconds == 0 and not self.allow_zero):
            self.fail("must be positive", param, ctx)
        return seconds


DURATION = Duration()
GRACE = Duration(allow_zero=True)  # a grace period may be zero
