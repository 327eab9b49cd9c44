"""`kubectl triton bench`: closed-loop load on a served model at each concurrency level, with Triton's
own queue/compute split. The work is in `kubectl_triton.perf`; this module parses and prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kubectl_triton.errors import InputError

COLUMNS = ("CONCURRENCY", "THROUGHPUT/S", "P50_MS", "P90_MS", "P99_MS", "QUEUE_US", "COMPUTE_US", "BATCH")


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: list[list[str]], columns: tuple[str, ...]) -> str:
    """A kubectl-style table: upper-case headers, columns padded with three spaces."""
    lines = [list(columns), *rows]
    widths = [max(len(str(r[i])) for r in lines) for i in range(len(columns))]
    return "\n".join("   ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in lines)


def to_text(results: list) -> str:
    return table([[str(r.concurrency), _fmt(r.throughput), _fmt(r.p50_ms), _fmt(r.p90_ms), _fmt(r.p99_ms),
                   _fmt(r.queue_us, 0), _fmt(r.compute_us, 0), _fmt(r.batch)] for r in results], COLUMNS)


def to_json(model: str, results: list) -> str:
    return json.dumps({"model": model, "results": [r.to_dict() for r in results]}, indent=2)


def load_requests(target, input_data: str | None) -> list:
    """The requests to send: from --input-data, else generated from the served config."""
    from kubectl_triton.perf import inputs

    specs = inputs.input_specs(target.config())
    return inputs.from_file(Path(input_data), specs) if input_data else inputs.generate(specs)


def target_options(f):
    """--url / -n / --pod / --kubeconfig / --context / --protocol / --input-data / -o, shared with tune."""
    for opt in reversed([
        click.option("--url", default=None, help="Triton endpoint (http://HOST:8000, or HOST:8001 with grpc)."),
        click.option("-n", "--namespace", default=None,
                     help="Without --url: port-forward to a ready pod of MODEL in this namespace."),
        click.option("--pod", default=None, help="The pod to port-forward to (default: the first ready one)."),
        click.option("--kubeconfig", default=None, help="Path to the kubeconfig file."),
        click.option("--context", "kube_context", default=None, help="The kubeconfig context to use."),
        click.option("--protocol", type=click.Choice(["http", "grpc"]), default="http", show_default=True),
        click.option("--input-data", type=click.Path(dir_okay=False), default=None,
                     help='JSON inputs: {"INPUT": [...]} or perf_analyzer\'s {"data": [{...}]}.'),
        click.option("-o", "--output", "output_format", type=click.Choice(["text", "json"]), default=None,
                     help="Output format."),
    ]):
        f = opt(f)
    return f


@click.command("bench")
@click.argument("model")
@target_options
@click.option("--concurrency", default="1,2,4,8,16,32", show_default=True, help="Concurrency levels.")
@click.option("--duration", default="10s", show_default=True, help="Measurement window per level.")
@click.option("--warmup", default=None, help="Unmeasured load before each window (default: 20% of --duration, "
                                             "at most 2s).")
@click.pass_context
def command(ctx: click.Context, model: str, url: str | None, namespace: str | None, pod: str | None,
            kubeconfig: str | None, kube_context: str | None, protocol: str, input_data: str | None,
            output_format: str | None, concurrency: str, duration: str, warmup: str | None) -> None:
    """Measure MODEL on a running Triton: throughput and latency at each concurrency level.

    \b
    Closed loop (each of N clients sends its next request when the last is answered), inputs generated
    from the model's config (strings from a small corpus) or --input-data. QUEUE_US and COMPUTE_US are
    Triton's own per-inference split from its statistics extension; BATCH is inferences per execution.
    JSON (-o json): {"model", "results": [{"concurrency", "throughput", "p50_ms", "p90_ms", "p99_ms",
    "queue_us", "compute_us", "batch", "requests"}]}
    """
    from kubectl_triton.perf import loadgen
    from kubectl_triton.perf.connect import open_target, parse_duration, parse_ints

    obj = ctx.obj or {}
    output_format = output_format or obj.get("output") or "text"
    if output_format not in ("text", "json"):
        raise InputError(f"bench supports -o text or -o json, not {output_format}")
    levels = parse_ints(concurrency, "--concurrency")
    duration_s = parse_duration(duration, "--duration")
    warmup_s = parse_duration(warmup, "--warmup") if warmup else min(2.0, duration_s * 0.2)
    progress = sys.stderr.isatty()
    with open_target(model, protocol, url, kubeconfig=kubeconfig or obj.get("kubeconfig"),
                     context=kube_context or obj.get("context"), namespace=namespace or obj.get("namespace"),
                     pod=pod) as where:
        requests = load_requests(where.target, input_data)
        if progress:
            click.echo(f"bench {model} at {where.description}: {len(levels)} levels x {duration_s:g}s", err=True)

        def show(r: loadgen.LevelResult) -> None:
            if progress:
                click.echo(f"  concurrency {r.concurrency}: {r.throughput:.1f} infer/s, p99 {r.p99_ms:.1f} ms",
                           err=True)

        results = loadgen.bench(where.target, requests, levels, duration_s, warmup_s, on_level=show)
    click.echo(to_json(model, results) if output_format == "json" else to_text(results))
