"""`kubectl triton bench`: closed-loop load on a served model at each concurrency level, with Triton's
own queue/compute split. The work is in `kubectl_triton.perf`; this module parses and prints."""

from __future__ import annotations

import sys

import click

from kubectl_triton.cli.options import (
    MEASURE_FORMATS,
    IntList,
    cell,
    cluster_args,
    load_options,
    output_format,
    target_options,
    warmup_for,
)
from kubectl_triton.output.document import dumps
from kubectl_triton.output.table import table

COLUMNS = ("CONCURRENCY", "THROUGHPUT/S", "P50_MS", "P90_MS", "P99_MS", "QUEUE_US", "COMPUTE_US", "BATCH")


def to_text(results: list) -> str:
    return table(COLUMNS, [[str(r.concurrency), cell(r.throughput), cell(r.p50_ms), cell(r.p90_ms), cell(r.p99_ms),
                            cell(r.queue_us, 0), cell(r.compute_us, 0), cell(r.batch)] for r in results])


def document(model: str, results: list) -> dict:
    return {"model": model, "results": [r.to_dict() for r in results]}


@click.command("bench")
@click.argument("model")
@target_options
@click.option("--concurrency", type=IntList(), default="1,2,4,8,16,32", show_default=True,
              help="Concurrency levels.")
@load_options("10s")
@click.pass_context
def command(ctx: click.Context, model: str, url: str | None, kubeconfig: str | None, kube_context: str | None,
            namespace: str | None, pod: str | None, protocol: str, input_data: str | None, output: str | None,
            concurrency: list[int], duration: float, warmup: float | None) -> None:
    """Measure MODEL on a running Triton: throughput and latency at each concurrency level.

    \b
    Closed loop (each of N clients sends its next request when the last is answered), inputs generated
    from the model's config (strings from a small corpus) or --input-data. QUEUE_US and COMPUTE_US are
    Triton's own per-inference split from its statistics extension; BATCH is inferences per execution.
    JSON/YAML (-o json|yaml): {"model", "results": [{"concurrency", "throughput", "p50_ms", "p90_ms",
    "p99_ms", "queue_us", "compute_us", "batch", "requests", "noise"}]}
    """
    from kubectl_triton.perf import inputs, loadgen
    from kubectl_triton.perf.connect import open_target

    fmt = output_format(ctx, output, MEASURE_FORMATS)
    cluster = cluster_args(ctx, kubeconfig, kube_context, namespace)
    warmup_s = warmup_for(duration, warmup)
    progress = sys.stderr.isatty()
    with open_target(model, protocol, url, kubeconfig=cluster.kubeconfig, context=cluster.context,
                     namespace=cluster.namespace, pod=pod) as where:
        requests = inputs.for_target(where.target, input_data)
        if progress:
            click.echo(f"bench {model} at {where.description}: {len(concurrency)} levels x {duration:g}s", err=True)

        def show(r: loadgen.LevelResult) -> None:
            if progress:
                click.echo(f"  concurrency {r.concurrency}: {r.throughput:.1f} infer/s, p99 {r.p99_ms:.1f} ms",
                           err=True)

        results = loadgen.bench(where.target, requests, concurrency, duration, warmup_s, on_level=show)
    click.echo(to_text(results) if fmt == "text" else dumps(document(model, results), fmt))
