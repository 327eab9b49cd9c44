"""Options every command shares, declared once: output format, cluster access, durations.

Cluster flags (`--kubeconfig`, `--context`, `-n/--namespace`, `-A`) and `-o/--output` are accepted before the
sub-command (on the group, as kubectl accepts global flags) and after it; the sub-command's own value wins."""

from __future__ import annotations

import math
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
    """`30s`, `500ms`, `5m`, `1h30m` or plain seconds (not when `unit_required`); positive (or zero, when
    `allow_zero`)."""

    name = "duration"

    def __init__(self, allow_zero: bool = False, unit_required: bool = False) -> None:
        self.allow_zero, self.unit_required = allow_zero, unit_required

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            seconds: float | None = float(value)
        else:
            seconds = parse_duration(str(value), bare_seconds=not self.unit_required)
        if seconds is None:
            example = "50ms, 1s" if self.unit_required else "30s, 500ms, 5m, 1h"
            self.fail(f"{value!r} is not a duration (e.g. {example})", param, ctx)
        if seconds < 0 or (seconds == 0 and not self.allow_zero):
            self.fail("must be positive", param, ctx)
        return seconds


DURATION = Duration()
GRACE = Duration(allow_zero=True)  # a grace period may be zero


class FiniteRange(click.FloatRange):
    """A FloatRange that refuses nan and inf (float() accepts them, and a comparison with nan is always false)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class IntList(click.ParamType):
    """`1,2,4`: distinct integers within [minimum, maximum], in the given order."""

    name = "list"

    def __init__(self, minimum: int = 1, maximum: int = 4096) -> None:
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> list[int]:
        if isinstance(value, list):
            return value
        try:
            values = [int(x) for x in str(value).split(",") if x.strip()]
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of integers", param, ctx)
        if not values or any(v < self.minimum or v > self.maximum for v in values):
            self.fail(f"values must be between {self.minimum} and {self.maximum}", param, ctx)
        return list(dict.fromkeys(values))


# bench and tune: where the model is served, what to send, and for how long
MEASURE_FORMATS = ("text", "json", "yaml")


def target_options(f: F) -> F:
    """--url / cluster flags / --pod / --protocol / --input-data / -o (bench and tune)."""
    for opt in reversed([
        click.option("--url", default=None, help="Triton endpoint (http://HOST:8000, or HOST:8001 with grpc)."),
        cluster_options(),
        click.option("--pod", default=None, help="The pod to port-forward to (default: the first ready one)."),
        click.option("--protocol", type=click.Choice(["http", "grpc"]), default="http", show_default=True),
        click.option("--input-data", type=click.Path(dir_okay=False), default=None,
                     help='JSON inputs: {"INPUT": [...]} or perf_analyzer\'s {"data": [{...}]}.'),
        output_option(MEASURE_FORMATS),
    ]):
        f = opt(f)
    return f


def load_options(default_duration: str) -> Callable[[F], F]:
    """--duration and --warmup (the measurement window and the unmeasured load before it)."""

    def decorate(f: F) -> F:
        f = click.option("--warmup", type=DURATION, default=None,
                         help="Unmeasured load before each window (default: 20% of --duration, at most 2s).")(f)
        return click.option("--duration", type=DURATION, default=default_duration, show_default=True,
                            help="Measurement window.")(f)

    return decorate


def warmup_for(duration_s: float, warmup_s: float | None) -> float:
    return warmup_s if warmup_s is not None else min(2.0, duration_s * 0.2)


def cell(value: float | None, digits: int = 1) -> str:
    """A number for a table cell ('-' for none)."""
    return "-" if value is None else f"{value:.{digits}f}"
