"""`kubectl triton tune`: search a served model's instance count and dynamic batching (and max_batch_size when
allowed) for the best throughput, or the best throughput within a p99 bound, loading each candidate through
Triton's model-control API on a server the user points at; recommend (or --write into the model's
config.pbtxt) the winner. The search is `kubectl_triton.perf.search`; the original configuration is always
loaded again at the end."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kubectl_triton.cli.options import (
    DURATION,
    MEASURE_FORMATS,
    Duration,
    FiniteRange,
    IntList,
    cell,
    cluster_args,
    load_options,
    output_format,
    target_options,
    warmup_for,
)
from kubectl_triton.errors import InputError
from kubectl_triton.formats.duration import milliseconds
from kubectl_triton.output.document import dumps
from kubectl_triton.output.table import table
from kubectl_triton.perf import PerfError

COLUMNS = ("#", "INSTANCES", "BATCHING", "PREFERRED", "DELAY_US", "THROUGHPUT/S", "P50_MS", "P99_MS", "BATCH",
           "NOTE")


def _row(i: int, trial, best, bound: float | None) -> list[str]:
    c, r = trial.candidate, trial.result
    db = c.dynamic_batching
    notes = ["baseline"] if trial.baseline else []
    if trial.why.endswith("measured again"):
        notes.append("again")
    if r is not None and bound is not None and r.p99_ms > bound:
        notes.append("p99 over bound")
    if trial is best:
        notes.append("best")
    note = ", ".join(notes)
    if trial.error:
        note = f"failed: {trial.error}"[:70]
    pref = "-" if db is None else (",".join(map(str, db.get("preferred_batch_size") or [])) or "-")
    batching = "off" if db is None else "dynamic"
    if c.max_batch_size is not None:
        batching += f" (max {c.max_batch_size})"
    return [str(i), str(c.instance_count), batching, pref,
            "-" if db is None else str(db.get("max_queue_delay_microseconds", 0)),
            cell(r.throughput if r else None), cell(r.p50_ms if r else None), cell(r.p99_ms if r else None),
            cell(r.batch if r else None), note]


def _figures(fig) -> dict:
    return {"throughput": round(fig.throughput, 1), "p50_ms": round(fig.p50_ms, 3), "p99_ms": round(fig.p99_ms, 3),
            "measurements": len(fig.results)}


def summary(model: str, concurrency: int, search, best, written: str | None) -> dict:
    """The JSON document (documented in docs/bench-tune.md); `best` None when nothing met the bound."""
    base = search.trials[0]
    bound = search.objective.max_p99_ms
    base_fig = search.figures[base.candidate]
    best_fig = search.figures[best] if best is not None else None
    return {
        "model": model, "concurrency": concurrency, "objective": search.objective.name, "max_p99_ms": bound,
        "space": len(search.space), "settings": len(search.figures), "measurements": len(search.trials),
        "baseline": {"config": base.candidate.to_dict(), **(_figures(base_fig) if base_fig.results else {})},
        "best": None if best is None else {"config": best.to_dict(), **_figures(best_fig)},
        "gain": round(best_fig.throughput / base_fig.throughput, 3) if best_fig and base_fig.throughput else None,
        "trials": [{"config": t.candidate.to_dict(), "baseline": t.baseline, "step": t.why,
                    **(t.result.to_dict() if t.result else {}),
                    "met_bound": None if t.result is None else search.objective.met(t.result.p99_ms),
                    "error": t.error} for t in search.trials],
        "written": written,
    }


def model_config_file(model: str, repo_root: str | None, repo_model: str | None, why: str = "") -> Path:
    """models/<repo-model>/<model>/config.pbtxt of the GitOps repository (--repo, else the one around the current
    directory); `why` ends the message when there is none."""
    from kubectl_triton.gitops.model import Repository

    repository = Repository.at(Path(repo_root)) if repo_root else Repository.find()
    root, models = repository.root, repository.layout.models
    owners = [m for m in repository.owners_of(model) if not repo_model or m.name == repo_model]
    if not owners:
        raise InputError(f"{root}: no {models}/{repo_model or '*'}/{model}/config.pbtxt{why}",
                         hint="pass --repo PATH (the GitOps repository) or --repo-model")
    if len(owners) > 1:
        raise InputError(f"{model} is in several {models}/ folders: {', '.join(m.name for m in owners)}",
                         hint="pass --repo-model NAME")
    return owners[0].config_file(model)


def write_target(model: str, repo_root: str | None, repo_model: str | None) -> Path:
    """The config.pbtxt --write changes: found and read before anything is measured, so a wrong --repo fails at
    once, not after the search."""
    path = model_config_file(model, repo_root, repo_model, " to write")
    read_text(path)
    return path


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None


def write_config(path: Path, best) -> Path | None:
    """Put the best setting into the config.pbtxt `write_target` found (as it is now); None when nothing
    changed."""
    from kubectl_triton.formats import pbtxt
    from kubectl_triton.perf import configedit

    text = read_text(path)
    new = configedit.edit(text, str(path), best.instance_count, best.dynamic_batching,
                          max_batch_size=best.max_batch_size)
    if new == text:
        return None
    pbtxt.write_atomic(path, new)
    return path


def _preferred(values: tuple[str, ...]) -> list[list[int] | None]:
    out: list[list[int] | None] = []
    for p in values:
        if p == "auto":
            out.append(None)
        elif p == "none":
            out.append([])
        else:
            try:
                out.append(IntList(maximum=1 << 20).convert(p, None, None))
            except click.BadParameter as err:
                raise click.BadParameter(err.message, param_hint="'--preferred-batch-sizes'") from None
    return out


@click.command("tune")
@click.argument("model")
@target_options
@click.option("--allow-production", is_flag=True,
              help="Allow tuning on a pod of the model's Deployment (-n): its model is reloaded per candidate.")
@click.option("--objective", type=click.Choice(["throughput", "latency", "goodput"]), default=None,
              help="throughput (default); latency: the best throughput whose p99 stays within --max-p99; goodput "
                   "(LLMs, streamed over gRPC): the most requests per second meeting --max-ttft and --max-itl.")
@click.option("--max-p99", type=Duration(unit_required=True), default=None,
              help="The p99 bound of --objective latency, e.g. 50ms.")
@click.option("--max-ttft", type=Duration(unit_required=True), default=None,
              help="Goodput: a good request's time to first token, e.g. 500ms.")
@click.option("--max-itl", type=Duration(unit_required=True), default=None,
              help="Goodput: a good request's mean inter-token latency (time per output token), e.g. 50ms.")
@click.option("--prompt-tokens", type=click.IntRange(1, 1 << 20), default=128, show_default=True,
              help="Goodput: prompt length of each request, in words (about a token each).")
@click.option("--output-tokens", type=click.IntRange(1, 1 << 20), default=64, show_default=True,
              help="Goodput: tokens each request asks for.")
@click.option("--min-requests", type=click.IntRange(0, 1 << 20), default=0, show_default=True,
              help="Goodput: a window lasts --duration, and grows by steps of --duration until this many requests "
                   "have ended in it (at most 10 steps); 0: --duration alone.")
@click.option("--param", "params", multiple=True, metavar="NAME=V1,V2",
              help="Goodput: a knob to search and its values (a config parameter; a model.json key for vLLM), "
                   "replacing the backend's default values. Repeatable.")
@click.option("--budget", type=DURATION, default=None,
              help="Stop measuring new candidates after this long, e.g. 10m.")
@click.option("--max-trials", type=click.IntRange(1, 10_000), default=None,
              help="At most this many measurements (the baseline and re-measurements count). Default: 15%% of "
                   "the space's settings (at least 5), and a third as many (at least 2) measured again besides, "
                   "unless --budget is given.")
@click.option("--exhaustive", is_flag=True,
              help="Measure every setting of the space instead of searching it, and the winner again (with "
                   "--max-trials or --budget, one measurement is kept for that).")
@click.option("--stability", type=FiniteRange(0, 100), default=10.0, show_default=True,
              help="A window whose fifths' throughputs stray more than this percent from their mean is followed "
                   "by another (at most 3 per measurement, perf_analyzer's criterion); 0: one window each.")
@click.option("--concurrency", type=click.IntRange(1, 4096), default=16, show_default=True,
              help="Concurrency every candidate is measured at.")
@load_options("10s")
@click.option("--max-instances", type=click.IntRange(1, 64), default=3, show_default=True,
              help="Instance counts 1..N are searched.")
@click.option("--instances", type=IntList(maximum=64), default=None,
              help="Instance counts to search instead (per instance group), e.g. 1,2.")
@click.option("--max-queue-delay-us", "delays", type=IntList(minimum=0, maximum=10_000_000),
              default="0,100,500,1000,2000", show_default=True, help="max_queue_delay_microseconds values.")
@click.option("--preferred-batch-sizes", "preferred", multiple=True, default=("none", "4", "8", "16"),
              show_default=True,
              help="Preferred batch size sets: none, auto (largest power of 2 <= min(max batch, concurrency)) or "
                   "a list like 8,16. Repeatable.")
@click.option("--allow-max-batch-size", is_flag=True,
              help="Also search max_batch_size (it changes what clients may send: the model's contract).")
@click.option("--max-batch-sizes", "max_batch_sizes", type=IntList(maximum=1 << 20), default="8,16,32,64,128",
              show_default=True, help="max_batch_size values with --allow-max-batch-size.")
@click.option("--write", is_flag=True, help="Write the best setting into models/*/MODEL/config.pbtxt.")
@click.option("--repo", "repo_root", type=click.Path(file_okay=False), default=None,
              help="The GitOps repository for --write (default: the one around the current directory).")
@click.option("--repo-model", default=None, help="The models/<NAME>/ folder holding MODEL, when several do.")
@click.pass_context
def command(ctx: click.Context, model: str, url: str | None, kubeconfig: str | None, kube_context: str | None,
            namespace: str | None, pod: str | None, protocol: str, input_data: str | None, output: str | None,
            allow_production: bool, objective: str | None, max_p99: float | None, max_ttft: float | None,
            max_itl: float | None, prompt_tokens: int, output_tokens: int, min_requests: int, params: tuple[str, ...],
            budget: float | None, max_trials: int | None, exhaustive: bool, stability: float, concurrency: int,
            duration: float, warmup: float | None, max_instances: int, instances: list[int] | None, delays: list[int],
            preferred: tuple[str, ...], allow_max_batch_size: bool, max_batch_sizes: list[int], write: bool,
            repo_root: str | None, repo_model: str | None) -> None:
    """Search MODEL's best instance count and dynamic batching on a Triton you point it at, and --write it.

    \b
    The default space: 1..--max-instances instances x (no batching, or dynamic batching with a max queue
    delay of 0/100/500/1000/2000 us x preferred batch size none/4/8/16): 63 settings. tune searches it by
    coordinate descent from the served setting (batching, then instances, preferred sizes, delay), moving
    while a step beats the noise and re-measuring steps within noise, so it measures a fraction of it.
    Each candidate is loaded with Triton's model-control API (POST /v2/repository/models/MODEL/load with a
    config override), so the server must run with --model-control-mode=explicit. The original configuration
    is loaded again at the end, also after a failure or Ctrl-C. Use --url for a test server; -n (a pod of
    the production Deployment) is refused without --allow-production.
    JSON/YAML (-o json|yaml): {"model", "concurrency", "objective", "max_p99_ms", "space", "settings", "measurements",
    "baseline",
    "best": {"config", "throughput", "p50_ms", "p99_ms"}, "gain", "trials": [{"config", "throughput",
    "p50_ms", "p99_ms", "met_bound", "error", ...}], "written"}

    \b
    --objective goodput (a decoupled LLM: TensorRT-LLM, vLLM, a streaming python model; --protocol grpc):
    searches the engine's knobs (TensorRT-LLM: KV cache fraction, scheduler policy, chunked context; vLLM:
    max_num_seqs, gpu_memory_utilization, chunked prefill; --param adds or replaces knobs) for the most
    requests per second whose TTFT <= --max-ttft and time per output token <= --max-itl; --write puts the
    winner and its figures (a comment) into config.pbtxt (and 1/model.json for vLLM). docs/bench-tune.md.
    """
    from kubectl_triton.perf import inputs, search, tunerun
    from kubectl_triton.perf.connect import open_target

    fmt = output_format(ctx, output, MEASURE_FORMATS)
    cluster = cluster_args(ctx, kubeconfig, kube_context, namespace)
    if objective != "goodput" and (max_ttft is not None or max_itl is not None or params or min_requests):
        raise click.UsageError("--max-ttft, --max-itl, --min-requests and --param belong to --objective goodput")
    if objective == "latency" and max_p99 is None:
        raise click.UsageError("--objective latency needs --max-p99 (e.g. --max-p99 50ms)")
    if objective == "throughput" and max_p99 is not None:
        raise click.UsageError("--max-p99 is the bound of --objective latency; drop --objective throughput")
    if not url and not allow_production:
        raise InputError(f"tune reloads {model} once per candidate; without --url it would do so on a pod of the "
                         "production Deployment",
                         hint="pass --url to a test server (tritonserver --model-control-mode=explicit), "
                              "or --allow-production")
    warmup_s = warmup_for(duration, warmup)
    pref_sets = _preferred(preferred) if objective != "goodput" else []
    destination = write_target(model, repo_root, repo_model) if write and objective != "goodput" else None
    if objective == "goodput":
        if max_p99 is not None:
            raise click.UsageError("--max-p99 is the bound of --objective latency; goodput takes --max-ttft/--max-itl")
        from kubectl_triton.cli.commands import _tune_goodput

        _tune_goodput.run(model=model, url=url, cluster=cluster, pod=pod, protocol=protocol, fmt=fmt,
                          concurrency=concurrency, duration=duration, min_requests=min_requests, warmup_s=warmup_s,
                          max_ttft=max_ttft,
                          max_itl=max_itl, prompt_tokens=prompt_tokens, output_tokens=output_tokens, params=params,
                          instances=instances, max_trials=max_trials, budget=budget, exhaustive=exhaustive,
                          write=write, repo_root=repo_root, repo_model=repo_model)
        return
    goal = search.Objective(milliseconds(max_p99) if max_p99 is not None else None)
    counts = instances or list(range(1, max_instances + 1))
    progress = sys.stderr.isatty()

    with open_target(model, protocol, url, kubeconfig=cluster.kubeconfig, context=cluster.context,
                     namespace=cluster.namespace, pod=pod) as where:
        original = where.target.config()
        requests = inputs.for_target(where.target, input_data)
        space = search.grid(original, concurrency, counts, delays, pref_sets,
                            max_batch_sizes=max_batch_sizes if allow_max_batch_size else ())
        if max_trials is None and budget is None and not exhaustive:
            limit = search.share_budget(len(space))
            what = f"at most {limit.max_trials} settings and {limit.max_repeats} measured again"
        else:
            limit = search.Budget(max_trials, budget)
            cap = f"at most {max_trials} measurements" if max_trials else f"{budget:g}s" if budget else ""
            what = ", ".join(x for x in ("every setting, then the winner again", cap) if x) if exhaustive else cap
        if progress:
            click.echo(f"tune {model} at {where.description}: {len(space)} settings, {what}, {duration:g}s each at "
                       f"concurrency {concurrency}, objective {goal.name}", err=True)

        def show(t: search.Trial) -> None:
            if progress:
                fig = (f"{t.result.throughput:.1f} infer/s, p99 {t.result.p99_ms:.1f} ms" if t.result
                       else f"failed: {t.error}")
                click.echo(f"  {'baseline: ' if t.baseline else ''}{t.candidate.describe()}: {fig}", err=True)

        found = tunerun.tune(where.target, requests, concurrency, duration, space, goal, limit, warmup_s=warmup_s,
                             original=original, exhaustive=exhaustive, on_trial=show, stability=stability)
    failure: PerfError | None = None
    try:
        best = search.choose(found.figures, goal)
    except PerfError as err:  # nothing met the bound (or nothing could be measured): show what was, then fail
        failure, best = err, None
    written = None
    if destination is not None and best is not None:
        path = write_config(destination, best)
        written = str(path) if path else None
    doc = summary(model, concurrency, found, best, written)
    if fmt != "text":
        click.echo(dumps(doc, fmt))
    else:
        last = max((i for i, t in enumerate(found.trials) if t.candidate == best), default=-1)
        click.echo(table(COLUMNS, [_row(i + 1, t, found.trials[last] if last >= 0 else None, goal.max_p99_ms)
                                   for i, t in enumerate(found.trials)]))
        if best is not None:
            click.echo()
            fig = found.figures[best]
            gain = doc["gain"]
            click.echo(f"best: {best.describe()}: {fig.throughput:.1f} infer/s, p99 {fig.p99_ms:.1f} ms"
                       + (f" ({gain:.1f}x the current setting)" if gain else "")
                       + f"; {len(found.figures)} settings ({len(found.trials)} measurements) of a space of "
                         f"{len(space)}")
            if write:
                click.echo(f"wrote {written}" if written else "config.pbtxt already has this setting; nothing written")
    if failure is not None:
        raise failure
