"""`kubectl triton tune --objective goodput`: an LLM's engine knobs searched for goodput (requests meeting TTFT and
TPOT targets, streamed over gRPC), the winner written into git with its evidence. The search is
`kubectl_triton.perf.llmtune`; the load is `kubectl_triton.perf.streaming`."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import click

from kubectl_triton.cli.commands.tune import model_config_file, read_text
from kubectl_triton.errors import InputError
from kubectl_triton.formats.duration import milliseconds
from kubectl_triton.output.document import dumps
from kubectl_triton.output.table import table
from kubectl_triton.perf import PerfError

EVIDENCE = "# tune goodput:"


def parse_params(values: tuple[str, ...]) -> dict[str, list[str]]:
    """`--param NAME=V1,V2` options as {NAME: [V1, V2]}."""
    out: dict[str, list[str]] = {}
    for raw in values:
        name, sep, vals = raw.partition("=")
        items = [v.strip() for v in vals.split(",") if v.strip()]
        if not sep or not name.strip() or not items:
            raise click.UsageError(f"--param {raw!r}: expected NAME=VALUE[,VALUE...], e.g. max_num_seqs=8,16,32")
        out[name.strip()] = items
    return out


def _model_folder(model: str, repo_root: str | None, repo_model: str | None) -> Path:
    return model_config_file(model, repo_root, repo_model).parent


def read_model_json(folder: Path) -> tuple[Path, dict]:
    path = folder / "1" / "model.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror or err}",
                         hint="the vLLM knobs live in the model's 1/model.json") from None
    except ValueError as err:
        raise InputError(f"{path}: not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected a JSON object of vLLM engine arguments")
    return path, doc


def evidence(doc: dict) -> list[str]:
    """The comment lines the written config.pbtxt carries: what was measured and what the winner gave ("-" for
    a baseline that could not be measured)."""
    b, w, t = doc["baseline"], doc["best"], doc["targets"]
    targets = ", ".join(x for x in (f"TTFT <= {t['max_ttft_ms']:g} ms" if t["max_ttft_ms"] else "",
                                    f"TPOT <= {t['max_itl_ms']:g} ms" if t["max_itl_ms"] else "") if x)

    def pair(key: str, fmt: str) -> str:
        before = format(b[key], fmt) if key in b else "-"
        return f"{before} -> {format(w[key], fmt)}"

    return [f"{EVIDENCE} {datetime.date.today().isoformat()}, {doc['measurements']} of {doc['space']} settings "
            f"measured at concurrency {doc['concurrency']}, {doc['prompt_tokens']} prompt / {doc['output_tokens']} "
            f"output tokens, targets {targets}",
            f"{EVIDENCE} goodput {pair('goodput', '.2f')} req/s, TTFT p99 {pair('ttft_p99_ms', '.0f')} ms, "
            f"TPOT p99 {pair('tpot_p99_ms', '.1f')} ms, {pair('output_tokens_per_s', '.0f')} tokens/s"]


def write_setting(folder: Path, knobs, values: tuple[str, ...], lines: list[str]) -> list[str]:
    """The setting into the model's config.pbtxt (parameters, instance counts, the evidence comment) and
    1/model.json (vLLM knobs); returns the files changed."""
    from kubectl_triton.formats import pbtxt
    from kubectl_triton.perf import configedit, llmtune

    path = folder / "config.pbtxt"
    text = read_text(path)
    new = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(EVIDENCE))
    for k, v in zip(knobs, values, strict=True):
        if k.where == "parameter":
            new = pbtxt.set_parameter(new, k.name, v)
        elif k.where == "instances":
            cfg = pbtxt.parse(new, str(path))
            db = None
            if cfg.HasField("dynamic_batching"):
                db = {"preferred_batch_size": list(cfg.dynamic_batching.preferred_batch_size),
                      "max_queue_delay_microseconds": cfg.dynamic_batching.max_queue_delay_microseconds}
            new = configedit.edit(new, str(path), int(v), db)
    pbtxt.parse(new, str(path))
    written = []
    if any(k.where == "model_json" for k in knobs):
        mpath, doc = read_model_json(folder)
        updated = dict(doc)
        for k, v in zip(knobs, values, strict=True):
            if k.where == "model_json":
                updated[k.name] = llmtune._json_value(v)
        if updated != doc:
            raw = read_text(mpath)
            indent = 4 if '\n    "' in raw else 2
            pbtxt.write_atomic(mpath, json.dumps(updated, indent=indent, ensure_ascii=False) + "\n")
            written.append(str(mpath))
    body = new
    new = "\n".join(lines) + "\n" + body
    if new != text:
        pbtxt.write_atomic(path, new)
        written.append(str(path))
    return written


def run(*, model: str, url: str | None, cluster, pod: str | None, protocol: str, fmt: str, concurrency: int,
        duration: float, min_requests: int, warmup_s: float, max_ttft: float | None, max_itl: float | None,
        prompt_tokens: int,
        output_tokens: int, params: tuple[str, ...], instances: list[int] | None, max_trials: int | None,
        budget: float | None, exhaustive: bool, write: bool, repo_root: str | None, repo_model: str | None) -> None:
    from kubectl_triton.perf import llmtune, streaming
    from kubectl_triton.perf.connect import open_target
    from kubectl_triton.perf.search import Budget, share_budget

    if protocol != "grpc":
        raise click.UsageError("--objective goodput streams tokens over gRPC: pass --protocol grpc (and --url "
                               "HOST:8001)")
    if max_ttft is None and max_itl is None:
        raise click.UsageError("--objective goodput needs --max-ttft and/or --max-itl (e.g. --max-ttft 500ms "
                               "--max-itl 50ms)")
    # milliseconds as given: 0.026 s * 1e3 is 26.000000000000004
    slo = streaming.Slo(None if max_ttft is None else milliseconds(max_ttft),
                        None if max_itl is None else milliseconds(max_itl))
    wanted = parse_params(params)
    folder = _model_folder(model, repo_root, repo_model) if write else None  # a wrong --repo fails before the search
    if folder is not None:
        read_text(folder / "config.pbtxt")
    progress = sys.stderr.isatty()
    with open_target(model, protocol, url, kubeconfig=cluster.kubeconfig, context=cluster.context,
                     namespace=cluster.namespace, pod=pod) as where:
        original = where.target.config()
        streaming.require_decoupled(original)
        knobs = llmtune.knobs_for(original, wanted, instances)
        model_json = None
        if any(k.where == "model_json" for k in knobs):
            model_json = read_model_json(folder or _model_folder(model, repo_root, repo_model))[1]
        knobs = llmtune.with_served(knobs, llmtune.served_values(original, knobs, model_json))
        requests = streaming.llm_requests(original, prompt_tokens, output_tokens)
        size = 1
        for k in knobs:
            size *= len(k.values)
        limit = share_budget(size) if max_trials is None and budget is None and not exhaustive else \
            Budget(max_trials, budget)
        if progress:
            click.echo(f"tune {model} at {where.description}: {size} settings of "
                       f"{', '.join(k.name for k in knobs)}, {duration:g}s each"
                       f"{f' (in steps of it until {min_requests} requests)' if min_requests else ''} at "
                       f"concurrency {concurrency}, objective goodput", err=True)

        def show(t: llmtune.Trial) -> None:
            if progress:
                r = t.result
                fig = (f"goodput {r.goodput:.2f}/s, TTFT p99 {r.ttft_p99_ms:.0f} ms, TPOT p99 {r.tpot_p99_ms:.1f} ms"
                       if r else f"failed: {t.error}")
                click.echo(f"  {llmtune.describe(knobs, t.values)}: {fig}", err=True)

        found = llmtune.tune_goodput(where.target, requests, concurrency, duration, knobs, slo, limit,
                                     warmup_s=warmup_s, original=original, model_json=model_json,
                                     exhaustive=exhaustive, on_trial=show, min_requests=min_requests)
    failure: PerfError | None = None
    try:
        best: tuple[str, ...] | None = llmtune.choose(found, slo)
    except PerfError as err:
        failure, best = err, None
    doc = summary(model, concurrency, prompt_tokens, output_tokens, slo, size, found, best)
    if folder is not None and best is not None and best != found.trials[0].values:
        doc["written"] = write_setting(folder, knobs, best, evidence(doc))
    if fmt != "text":
        click.echo(dumps(doc, fmt))
    else:
        _text(doc, knobs, found, best, write)
    if failure is not None:
        raise failure


def summary(model: str, concurrency: int, prompt_tokens: int, output_tokens: int, slo, size: int, found,
            best: tuple[str, ...] | None) -> dict:
    """The JSON document of a goodput run (documented in docs/bench-tune.md)."""
    knobs = found.knobs
    base = found.trials[0]
    base_fig = found.figures[base.values]
    best_fig = found.figures[best] if best is not None else None

    def setting(values: tuple[str, ...]) -> dict:
        return {k.name: v for k, v in zip(knobs, values, strict=True)}

    return {
        "model": model, "objective": "goodput", "concurrency": concurrency, "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens, "targets": {"max_ttft_ms": slo.max_ttft_ms, "max_itl_ms": slo.max_itl_ms},
        "knobs": [{"name": k.name, "where": k.where, "values": list(k.values)} for k in knobs],
        "space": size, "measurements": len(found.trials),
        "baseline": {"setting": setting(base.values), **(base_fig.summary() if base_fig.results else {})},
        "best": None if best is None or best_fig is None else {"setting": setting(best), **best_fig.summary()},
        "gain": round(best_fig.goodput / base_fig.goodput, 3) if best_fig and base_fig.results and base_fig.goodput
        else None,
        "trials": [{"setting": setting(t.values), "baseline": t.baseline, "step": t.why,
                    **(t.result.to_dict() if t.result else {}), "error": t.error} for t in found.trials],
        "written": [],
    }


def _text(doc: dict, knobs, found, best: tuple[str, ...] | None, write: bool) -> None:
    from kubectl_triton.cli.options import cell

    cols = ("#", *(k.name.upper() for k in knobs), "GOODPUT/S", "GOOD%", "TTFT_P99_MS", "TPOT_P99_MS", "TOKENS/S",
            "NOTE")
    last = max((i for i, t in enumerate(found.trials) if t.values == best), default=-1)
    rows = []
    for i, t in enumerate(found.trials):
        r = t.result
        note = ", ".join(x for x in ("baseline" if t.baseline else "",
                                     "again" if t.why.endswith("measured again") else "", "best" if i == last else "")
                         if x)
        if t.error:
            note = f"failed: {t.error}"[:70]
        rows.append([str(i + 1), *t.values, cell(r.goodput, 2) if r else "-",
                     cell(r.good_fraction * 100 if r else None, 0), cell(r.ttft_p99_ms if r else None),
                     cell(r.tpot_p99_ms if r else None), cell(r.output_tokens_per_s if r else None), note])
    click.echo(table(cols, rows))
    if best is not None:
        w = doc["best"]
        gain = doc["gain"]
        click.echo()
        from kubectl_triton.perf.llmtune import describe

        click.echo(f"best: {describe(knobs, best)}: goodput {w['goodput']:.2f} req/s, TTFT p99 {w['ttft_p99_ms']:.0f} "
                   f"ms, TPOT p99 {w['tpot_p99_ms']:.1f} ms" + (f" ({gain:.1f}x the current setting)" if gain else "")
                   + f"; {doc['measurements']} measurements of a space of {doc['space']}")
        for path in doc["written"]:
            click.echo(f"wrote {path}")
        if write and not doc["written"]:
            click.echo("the served setting is the best; nothing written")
