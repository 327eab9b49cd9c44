"""`kubectl triton tune`: bench a small search of dynamic_batching settings and instance counts, loaded one
by one through Triton's model-control API on a server the user points at, and recommend (or --write into
the model's config.pbtxt) the best throughput within a latency budget. The search is in
`kubectl_triton.perf.search`; the original configuration is always loaded again at the end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kubectl_triton.cli.commands.bench import _fmt, load_requests, table, target_options
from kubectl_triton.errors import InputError

COLUMNS = ("INSTANCES", "BATCHING", "PREFERRED", "DELAY_US", "THROUGHPUT/S", "P99_MS", "BATCH", "NOTE")


def _row(trial, best) -> list[str]:
    c, r = trial.candidate, trial.result
    db = c.dynamic_batching
    note = "baseline" if trial.baseline else ""
    if trial is best:
        note = (note + ", best").lstrip(", ")
    if trial.error:
        note = f"failed: {trial.error}"[:70]
    return [str(c.instance_count), "off" if db is None else "dynamic",
            "-" if db is None else (",".join(map(str, db.get("preferred_batch_size") or [])) or "-"),
            "-" if db is None else str(db.get("max_queue_delay_microseconds", 0)),
            _fmt(r.throughput if r else None), _fmt(r.p99_ms if r else None), _fmt(r.batch if r else None), note]


def summary(model: str, concurrency: int, trials: list, best, budget_ms: float | None,
            written: str | None) -> dict:
    """The JSON document (documented in docs/bench-tune.md)."""
    base = trials[0]
    return {
        "model": model, "concurrency": concurrency, "latency_budget_ms": budget_ms,
        "baseline": {"config": base.candidate.to_dict(), "throughput": round(base.result.throughput, 1),
                     "p99_ms": round(base.result.p99_ms, 3)},
        "best": {"config": best.candidate.to_dict(), "throughput": round(best.result.throughput, 1),
                 "p99_ms": round(best.result.p99_ms, 3)},
        "gain": round(best.result.throughput / base.result.throughput, 3) if base.result.throughput else None,
        "candidates": [{"config": t.candidate.to_dict(), "baseline": t.baseline,
                        **(t.result.to_dict() if t.result else {}), "error": t.error} for t in trials],
        "written": written,
    }


def write_config(model: str, repo_root: str | None, repo_model: str | None, best) -> Path | None:
    """Put the best setting into models/<repo-model>/<model>/config.pbtxt; None when nothing changed."""
    from kubectl_triton.formats import pbtxt
    from kubectl_triton.gitops import repo
    from kubectl_triton.perf import configedit

    root = Path(repo_root).resolve() if repo_root else repo.find_root()
    found = sorted(root.glob(f"models/*/{model}/config.pbtxt"))
    if repo_model:
        found = [p for p in found if p.parent.parent.name == repo_model]
    if not found:
        raise InputError(f"{root}: no models/{repo_model or '*'}/{model}/config.pbtxt to write",
                         hint="pass --repo PATH (the GitOps repository) or --repo-model")
    if len(found) > 1:
        raise InputError(f"{model} is in several models/ folders: "
                         f"{', '.join(p.parent.parent.name for p in found)}", hint="pass --repo-model NAME")
    path = found[0]
    text = path.read_text(encoding="utf-8")
    new = configedit.edit(text, str(path), best.candidate.instance_count, best.candidate.dynamic_batching)
    if new == text:
        return None
    pbtxt.write_atomic(path, new)
    return path


@click.command("tune")
@click.argument("model")
@target_options
@click.option("--allow-production", is_flag=True,
              help="Allow tuning on a pod of the model's Deployment (-n): its model is reloaded per candidate.")
@click.option("--latency-budget-ms", type=float, default=None, help="Only settings whose p99 stays within this.")
@click.option("--concurrency", type=click.IntRange(1, 4096), default=16, show_default=True,
              help="Concurrency every candidate is measured at.")
@click.option("--duration", default="10s", show_default=True, help="Measurement window per candidate.")
@click.option("--warmup", default=None, help="Unmeasured load first (default: 20% of --duration, at most 2s).")
@click.option("--instances", default="1,2", show_default=True, help="Instance counts (per instance group).")
@click.option("--max-queue-delay-us", "delays", default="0,500,2000", show_default=True,
              help="max_queue_delay_microseconds values.")
@click.option("--preferred-batch-sizes", "preferred", multiple=True, default=("none", "auto"), show_default=True,
              help="Preferred batch size sets to try: none, auto (largest power of 2 <= min(max batch, "
                   "concurrency)) or a list like 8,16. Repeatable.")
@click.option("--write", is_flag=True, help="Write the best setting into models/*/MODEL/config.pbtxt.")
@click.option("--repo", "repo_root", type=click.Path(file_okay=False), default=None,
              help="The GitOps repository for --write (default: the one around the current directory).")
@click.option("--repo-model", default=None, help="The models/<NAME>/ folder holding MODEL, when several do.")
@click.pass_context
def command(ctx: click.Context, model: str, url: str | None, namespace: str | None, pod: str | None,
            kubeconfig: str | None, kube_context: str | None, protocol: str, input_data: str | None,
            output_format: str | None, allow_production: bool, latency_budget_ms: float | None,
            concurrency: int, duration: str, warmup: str | None, instances: str, delays: str,
            preferred: tuple[str, ...], write: bool, repo_root: str | None, repo_model: str | None) -> None:
    """Find MODEL's best dynamic batching and instance count on a Triton you point it at, and --write it.

    \b
    Each candidate is loaded with Triton's model-control API (POST /v2/repository/models/MODEL/load with a
    config override), so the server must run with --model-control-mode=explicit. The original configuration
    is loaded again at the end, also after a failure or Ctrl-C. Use --url for a test server; -n (a pod of
    the production Deployment) is refused without --allow-production.
    JSON (-o json): {"model", "concurrency", "baseline": {"throughput", "p99_ms"}, "best": {"config":
    {"dynamic_batching", "instance_count"}, "throughput", "p99_ms"}, "gain", "candidates", "written"}
    """
    from kubectl_triton.perf import search
    from kubectl_triton.perf.connect import open_target, parse_duration, parse_ints

    obj = ctx.obj or {}
    output_format = output_format or obj.get("output") or "text"
    if output_format not in ("text", "json"):
        raise InputError(f"tune supports -o text or -o json, not {output_format}")
    if not url and not allow_production:
        raise InputError(f"tune reloads {model} once per candidate; without --url it would do so on a pod of the "
                         "production Deployment",
                         hint="pass --url to a test server (tritonserver --model-control-mode=explicit), "
                              "or --allow-production")
    if latency_budget_ms is not None and latency_budget_ms <= 0:
        raise click.BadParameter("must be positive", param_hint="--latency-budget-ms")
    duration_s = parse_duration(duration, "--duration")
    warmup_s = parse_duration(warmup, "--warmup") if warmup else min(2.0, duration_s * 0.2)
    counts = parse_ints(instances, "--instances", maximum=64)
    delay_list = parse_ints(delays, "--max-queue-delay-us", minimum=0, maximum=10_000_000)
    pref_sets: list[list[int] | None] = []
    for p in preferred:
        if p == "auto":
            pref_sets.append(None)
        elif p == "none":
            pref_sets.append([])
        else:
            pref_sets.append(parse_ints(p, "--preferred-batch-sizes", maximum=1 << 20))
    progress = sys.stderr.isatty()

    with open_target(model, protocol, url, kubeconfig=kubeconfig or obj.get("kubeconfig"),
                     context=kube_context or obj.get("context"), namespace=namespace or obj.get("namespace"),
                     pod=pod) as where:
        original = where.target.config()
        requests = load_requests(where.target, input_data)
        candidates = search.grid(original, concurrency, counts, delay_list, pref_sets)
        if progress:
            click.echo(f"tune {model} at {where.description}: baseline + {len(candidates)} candidates x "
                       f"{duration_s:g}s at concurrency {concurrency}", err=True)

        def show(t: search.Trial) -> None:
            if progress:
                what = (f"{t.result.throughput:.1f} infer/s, p99 {t.result.p99_ms:.1f} ms" if t.result
                        else f"failed: {t.error}")
                click.echo(f"  {'baseline: ' if t.baseline else ''}{t.candidate.describe()}: {what}", err=True)

        trials = search.tune(where.target, requests, concurrency, duration_s, candidates, warmup_s=warmup_s,
                             original=original, on_trial=show)
    best = search.choose(trials, latency_budget_ms)
    written = None
    if write:
        path = write_config(model, repo_root, repo_model, best)
        written = str(path) if path else None
    doc = summary(model, concurrency, trials, best, latency_budget_ms, written)
    if output_format == "json":
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(table([_row(t, best) for t in trials], COLUMNS))
    click.echo()
    gain = doc["gain"]
    click.echo(f"best: {best.candidate.describe()}: {best.result.throughput:.1f} infer/s, p99 "
               f"{best.result.p99_ms:.1f} ms" + (f" ({gain:.1f}x the current setting)" if gain else ""))
    if write:
        click.echo(f"wrote {written}" if written else "config.pbtxt already has this setting; nothing written")
