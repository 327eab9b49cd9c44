"""Held-out LLMs for `tune --objective goodput` (issue 27): generated decoder cost shapes, their exhaustive truth
per request, and the goodput search scored against it at targets drawn from that truth.

Twenty-eight decoupled in-flight batching models (bench/llm_models.py's CPU engine: sleeps under a lock the instances
share) drawn from seven cost shapes with a fixed seed, in four sets (`specs`). The goodput search was built on the
tests' model and on the GPU runs (bench/results/h100-gpt2-goodput-*); the first set was scored against it and then
changed it (the screen of docs/bench-tune.md, "Held-out LLMs"); the second set, drawn and swept before that change,
was scored once after it; the third, drawn and swept after the first two chose the screen's admitting sequences,
was scored once after that; the fourth, drawn and swept (with count windows) before the search was changed in view of
the third set's count-window figures, was scored once after that change.

    sweep     (the models without a truth file, or --models) every setting of the space (max_num_seqs 2..32, chunked
              context, scheduler policy, 1 or 2 instances: 40) measured in WINDOWS windows on a real tritonserver,
              each window's requests kept (when it ended, TTFT, TPOT): the truth, cached as JSON under --truth
    replay    the goodput search on the cached truth, every model at two pairs of targets (`targets`): a measurement
              returns the setting's next recorded window, its goodput counted at the run's targets (--exhaustive:
              `tune --exhaustive` instead, every setting once and the winner again)
    cross     the search and `tune --exhaustive` each choose from one recorded window of every setting, and their
              choices are scored on the other window (each window in turn): a choice scored on the windows it was
              made from is as lucky as they were, and so is a best setting read from two windows
    live      `kubectl triton tune --objective goodput` as a user runs it (subprocess, -o json), scored against the
              cached truth

Run:
    .venv/bin/python bench/llm_heldout.py sweep [--models NAME,...] [--min-requests N] [--truth DIR]
    .venv/bin/python bench/llm_heldout.py replay [--set first|second|third|fourth|all] [--seeds N] [--exhaustive]
                                                 [--json FILE] [--truth DIR] [--targets-from DIR]
    .venv/bin/python bench/llm_heldout.py cross [--set ...] [--json FILE] [--truth DIR] [--targets-from DIR]
    .venv/bin/python bench/llm_heldout.py live [--set first|second|third|fourth|all] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from llm_models import write_model  # noqa: E402

from kubectl_triton.perf import PerfError, llmtune, search, streaming  # noqa: E402

TRUTH = ROOT / "bench" / "results" / "llm-heldout"
CONCURRENCY = 16
DURATION_S = 2.0
WARMUP_S = 0.5
WINDOWS = 2
SEED = 2027
# the knobs searched, as `tune --param ... --instances 1,2` gives them (the served values, 4 and the engine
# defaults, are among them)
PARAMS = {"max_num_seqs": ["2", "4", "8", "16", "32"], "enable_chunked_context": ["false", "true"],
          "batch_scheduler_policy": ["guaranteed_no_evict", "max_utilization"]}
INSTANCES = [1, 2]


@dataclass(frozen=True)
class Spec:
    name: str
    shape: str
    part: str  # the set: `first`, `second`, `third`, `fourth`
    doc: str
    costs: dict
    prompt_tokens: int
    output_tokens: int


def _u(rng: random.Random, lo: float, hi: float) -> float:
    return round(rng.uniform(lo, hi), 4)


def _draw(shape: str, rng: random.Random) -> tuple[dict, int, int]:
    """One model of `shape`: its step costs (ms; bench/llm_models.py's COSTS), prompt and output tokens."""
    base = {"step_ms": _u(rng, 2, 4), "prefill_ms": _u(rng, 0.02, 0.05), "decode_ms": _u(rng, 0.3, 0.6),
            "attn_ms": _u(rng, 0.001, 0.003), "kv_tokens": 8192}
    if shape == "step":  # a large fixed cost per step: more sequences at a time pay
        return {**base, "step_ms": _u(rng, 8, 16), "decode_ms": _u(rng, 0.1, 0.3)}, 128, 32
    if shape == "decode":  # each decoding sequence is dear: a step slows with every sequence added
        return {**base, "step_ms": _u(rng, 1, 2), "decode_ms": _u(rng, 0.8, 1.4)}, 128, 32
    if shape == "prefill":  # long prompts, dear to prefill: a prefill holds every decoding sequence up
        return {**base, "prefill_ms": _u(rng, 0.06, 0.15)}, 384, 32
    if shape == "attention":  # long outputs attending to a growing cache
        return {**base, "attn_ms": _u(rng, 0.006, 0.012)}, 256, 64
    if shape == "kv":  # a small KV cache: a sequence that cannot fit waits (or is evicted)
        return {**base, "kv_tokens": rng.choice([2048, 3072])}, 192, 64
    if shape == "light":  # cheap steps: the python backend's response path is the cost
        return {**base, "step_ms": _u(rng, 0.5, 1), "decode_ms": _u(rng, 0.05, 0.15),
                "prefill_ms": _u(rng, 0.005, 0.01)}, 64, 48
    if shape == "mixed":  # a bit of everything
        return {"step_ms": _u(rng, 3, 8), "prefill_ms": _u(rng, 0.04, 0.1), "decode_ms": _u(rng, 0.4, 0.9),
                "attn_ms": _u(rng, 0.003, 0.008), "kv_tokens": rng.choice([3072, 4096, 8192])}, 256, 48
    raise ValueError(shape)


SHAPES = ("step", "decode", "prefill", "attention", "kv", "light", "mixed")


def specs() -> list[Spec]:
    """Four held-out sets, one draw of each shape each: `first`; `second`, drawn and swept before the search was
    changed in view of the first set's figures, and scored once after that change; `third`, drawn and swept
    before the search was changed in view of the second set's figures; `fourth`, drawn and swept before the search
    was changed in view of the third set's count-window figures."""
    rng = random.Random(SEED)
    out = []
    for k, part in enumerate(("first", "second", "third", "fourth")):
        for shape in SHAPES:
            costs, prompt, output = _draw(shape, rng)
            doc = (f"{shape}: step {costs['step_ms']:g} ms + {costs['prefill_ms']:g} ms/prompt token + "
                   f"{costs['decode_ms']:g} ms/decoding sequence + {costs['attn_ms']:g} ms/cached token, KV cache "
                   f"{costs['kv_tokens']} tokens; {prompt} prompt / {output} output tokens")
            out.append(Spec(f"llm-{shape}{k + 1}", shape, part, doc, costs, prompt, output))
    return out


def knobs(config: dict) -> list[llmtune.Knob]:
    k = llmtune.knobs_for(config, {n: list(v) for n, v in PARAMS.items()}, INSTANCES)
    return llmtune.with_served(k, llmtune.served_values(config, k, None))


# -- sweep -------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _served(chosen: list[Spec]) -> Iterator:
    """A tritonserver (explicit model control) serving the `chosen` models from a temporary repository."""
    from kubectl_triton.adapters.tritonserver import TritonServer

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        for s in chosen:
            write_model(repo, s.name, costs=s.costs)
        with TritonServer(repo, model_control_mode="explicit",
                          extra_args=[f"--load-model={s.name}" for s in chosen]) as server:
            server.wait_ready(120)
            yield server


def sweep(names: list[str], out: Path, min_requests: int = 0) -> None:
    out.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in specs() if (s.name in names if names else not (out / f"{s.name}.json").exists())]
    with _served(chosen) as server:
        try:
            _sweep_models(server, chosen, out, min_requests)
        except BaseException:
            (out / "tritonserver-failed.log").write_text(server.log)
            raise


def _sweep_models(server, chosen: list[Spec], out: Path, min_requests: int) -> None:
    from kubectl_triton.perf.target import GrpcTarget
    from kubectl_triton.perf.tunerun import guard

    for s in chosen:
        t0 = time.monotonic()
        target = GrpcTarget(f"127.0.0.1:{server.grpc_port}", s.name)
        original = target.config()
        ks = knobs(original)
        reqs = streaming.llm_requests(original, s.prompt_tokens, s.output_tokens)
        space = list(itertools.product(*(k.values for k in ks)))
        windows: dict[tuple[str, ...], list] = {v: [] for v in space}
        with guard() as g:
            run = llmtune.LlmRun(target, reqs, CONCURRENCY, DURATION_S, WARMUP_S, streaming.Slo(),
                                 original, ks, None, g)
            try:
                for _ in range(WINDOWS):  # alternately: a slow drift of the machine spreads evenly
                    for v in space:
                        windows[v].append(_window(run, v, min_requests))
            finally:
                run.restore()
        doc = {"model": s.name, "shape": s.shape, "part": s.part, "doc": s.doc, "costs": s.costs,
               "prompt_tokens": s.prompt_tokens, "output_tokens": s.output_tokens,
               "concurrency": CONCURRENCY, "duration_s": DURATION_S, "min_requests": min_requests,
               "warmup_s": WARMUP_S,
               "knobs": [{"name": k.name, "values": list(k.values)} for k in ks],
               "served": list(llmtune.served_values(original, ks, None)),
               "seconds": round(time.monotonic() - t0, 1),
               "settings": [{"values": list(v), "windows": ws} for v, ws in windows.items()]}
        (out / f"{s.name}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(f"{s.name}: {len(space)} settings x {WINDOWS} windows in {doc['seconds']:.0f} s", flush=True)


def _window(run: llmtune.LlmRun, values: tuple[str, ...], min_requests: int) -> dict:
    """One window of a setting: its length (s) and requests as [ended (s), TTFT (ms), TPOT (ms)], or the load's
    error."""
    try:
        run.load(values)
        with run.guard.interruptible():
            done, seconds = streaming.collect(run.target, run.requests, CONCURRENCY, DURATION_S, WARMUP_S,
                                              min_requests)
    except PerfError as err:
        return {"error": err.message}
    return {"seconds": round(seconds, 4),
            "requests": [[round(c.end_s, 4), round(c.ttft_ms, 2), None if c.tpot_ms is None else round(c.tpot_ms, 3)]
                         for c in done]}


# -- the truth ------------------------------------------------------------------------------------------------

def load_truth(root: Path, part: str = "all") -> list[dict]:
    """The truth files of the set `part` (all: every set) found under `root`; each model's set is its spec's."""
    return [{**json.loads((root / f"{s.name}.json").read_text()), "part": s.part} for s in specs()
            if (part == "all" or s.part == part) and (root / f"{s.name}.json").exists()]


class Truth:
    """A model's settings with every window's requests; a setting's true goodput at some targets is the mean of
    its windows' goodputs there."""

    def __init__(self, doc: dict) -> None:
        self.doc = doc
        self.knobs = [llmtune.Knob(k["name"], "parameter", tuple(k["values"])) for k in doc["knobs"]]
        self.windows = {tuple(row["values"]): row["windows"] for row in doc["settings"]}

    def result(self, window: dict, slo: streaming.Slo) -> streaming.StreamResult:
        """A recorded window as the load generator reports it at `slo` (ITL percentiles: of the TPOTs)."""
        if "error" in window:
            raise PerfError(window["error"])
        done = [streaming.Completed(end, ttft, () if tpot is None else (tpot,)) for end, ttft, tpot in
                window["requests"]]
        # truth swept before count windows: every window was `duration_s` long
        return streaming.summarize(self.doc["concurrency"], done, window.get("seconds", self.doc["duration_s"]), slo)

    def goodputs(self, values: tuple[str, ...], slo: streaming.Slo) -> list[float]:
        return [self.result(w, slo).goodput for w in self.windows[values] if "error" not in w]

    def goodput(self, values: tuple[str, ...], slo: streaming.Slo) -> float:
        gs = self.goodputs(values, slo)
        return statistics.mean(gs) if gs else 0.0

    def best(self, slo: streaming.Slo) -> tuple[tuple[str, ...], float]:
        v = max(self.windows, key=lambda x: self.goodput(x, slo))
        return v, self.goodput(v, slo)

    def score(self, chosen: tuple[str, ...] | None, slo: streaming.Slo) -> float:
        """The chosen setting's true goodput over the true best's (0 when none was chosen but one exists)."""
        _, top = self.best(slo)
        if top == 0:
            return 1.0 if chosen is None else 0.0
        return 0.0 if chosen is None else self.goodput(chosen, slo) / top

    def tie(self, chosen: tuple[str, ...] | None, slo: streaming.Slo) -> bool:
        """Whether the chosen setting's goodput is within two standard errors of the best's (its windows' spread)."""
        best, top = self.best(slo)
        if chosen is None:
            return top == 0

        def se(v: tuple[str, ...]) -> float:
            gs = self.goodputs(v, slo)
            return statistics.stdev(gs) / math.sqrt(len(gs)) if len(gs) > 1 else 0.0
        return top - self.goodput(chosen, slo) <= 2 * math.hypot(se(best), se(chosen))


def targets(doc: dict) -> dict[str, streaming.Slo]:
    """Two pairs of targets per model, from its truth (each setting's first window): `median`, the median over the
    settings of their median TTFT and of their median TPOT, and `loose`, the third quartile of each. More sequences
    at a time shorten the queue for the first token and lengthen every step, so few settings meet both medians;
    more meet the quartiles. (The first quartiles left no setting with a good request on the first model swept.)"""
    ttft, tpot = [], []
    for row in doc["settings"]:
        for w in row["windows"][:1]:
            if "requests" in w:
                ttft.append(statistics.median(r[1] for r in w["requests"]))
                tpot.append(statistics.median(r[2] for r in w["requests"] if r[2] is not None))
    ttft.sort()
    tpot.sort()
    return {"median": streaming.Slo(round(statistics.median(ttft), 1), round(statistics.median(tpot), 2)),
            "loose": streaming.Slo(round(ttft[3 * len(ttft) // 4], 1), round(tpot[3 * len(tpot) // 4], 2))}


# -- replay ---------------------------------------------------------------------------------------------------

def replay(truth: Truth, slo: streaming.Slo, seed: int | None = None,
           exhaustive: bool = False) -> llmtune.GoodputSearch:
    """The goodput search (or `tune --exhaustive`'s sweep) on the recorded windows: each measurement of a setting
    returns its next window, in recorded order (seed None) or shuffled with `seed`."""
    seen: dict[tuple[str, ...], int] = {}
    rng = random.Random(seed)
    order: dict[tuple[str, ...], list] = {}

    def measure(values: tuple[str, ...]) -> streaming.StreamResult:
        ws = truth.windows[values]
        if values not in order:
            order[values] = list(ws) if seed is None else rng.sample(ws, len(ws))
        i = seen[values] = seen.get(values, -1) + 1
        return truth.result(order[values][i % len(ws)], slo)

    return _searched(truth, measure, exhaustive)


def _searched(truth: Truth, measure: Callable[[tuple[str, ...]], streaming.StreamResult],
              exhaustive: bool) -> llmtune.GoodputSearch:
    """The goodput search (or `tune --exhaustive`) from the served setting, with tune's default budget."""
    budget = search.Budget() if exhaustive else search.share_budget(len(truth.windows))
    s = llmtune.GoodputSearch(truth.knobs, measure, budget, concurrency=truth.doc["concurrency"])
    served = tuple(truth.doc["served"])
    s.exhaustive(served) if exhaustive else s.run(served)
    return s


def cross(truth: Truth, slo: streaming.Slo, window: int, exhaustive: bool = False) -> tuple[str, ...] | None:
    """The setting the search (or `tune --exhaustive`) chooses from one recorded window of each setting (`window`; a
    setting measured again returns that window again), to be scored on the other windows: a choice scored on the
    windows it was made from is as lucky as they were. (Two figures of one window look steadier than two windows would:
    a setting measured again settles its tie more readily than live.)"""
    def measure(values: tuple[str, ...]) -> streaming.StreamResult:
        return truth.result(truth.windows[values][window], slo)

    return chosen_of(_searched(truth, measure, exhaustive))


def run_cross(root: Path, part: str = "all", targets_from: Path | None = None) -> list[dict]:
    """One row per model and pair of targets: the search and `tune --exhaustive` choose from one window of each
    setting and are scored on the other (every window in turn); `search`, `exhaustive`: the good requests per second
    their choices served in the windows they did not see, summed over the turns, `best`: the same sum for the best
    setting of each unseen window (its winner's luck included), `ratio`: search over exhaustive (1.0 when neither
    served a good request, None when only the search did). A window that failed to load counts 0 good requests."""
    assert WINDOWS >= 2, "cross needs a window to choose from and one to score on"
    rows = []
    for doc, source in _with_targets(root, part, targets_from):
        truth = Truth(doc)
        for label, slo in targets(source).items():
            seen = {v: [truth.result(w, slo).goodput if "error" not in w else 0.0 for w in ws]
                    for v, ws in truth.windows.items()}
            total = {"search": 0.0, "exhaustive": 0.0, "best": 0.0}
            picks: dict[str, list] = {"search": [], "exhaustive": []}
            for a in range(WINDOWS):
                held = {v: statistics.mean(g for b, g in enumerate(gs) if b != a) for v, gs in seen.items()}
                for how in ("search", "exhaustive"):
                    pick = cross(truth, slo, a, how == "exhaustive")
                    picks[how].append(_describe(truth, pick))
                    total[how] += 0.0 if pick is None else held[pick]
                total["best"] += max(held.values())
            s, e, b = total["search"], total["exhaustive"], total["best"]
            rows.append({"model": doc["model"], "part": doc["part"], "targets": label,
                         "max_ttft_ms": slo.max_ttft_ms, "max_itl_ms": slo.max_itl_ms,
                         "ratio": round(s / e, 3) if e else (1.0 if s == 0 else None),
                         "search_of_best": round(s / b, 3) if b else 1.0,
                         "exhaustive_of_best": round(e / b, 3) if b else 1.0,
                         "search": round(s / WINDOWS, 3), "exhaustive": round(e / WINDOWS, 3),
                         "best": round(b / WINDOWS, 3), "chosen": picks["search"],
                         "exhaustive_chosen": picks["exhaustive"]})
    return rows


def report_cross(rows: list[dict]) -> None:
    print(f"{'model':16}{'targets':>8}{'ttft':>8}{'tpot':>7}{'search/exh':>11}{'search/best':>12}{'exh/best':>9}")
    for r in rows:
        ratio = f"{r['ratio']:.0%}" if r["ratio"] is not None else "only it"
        print(f"{r['model']:16}{r['targets']:>8}{r['max_ttft_ms']:>8g}{r['max_itl_ms']:>7g}{ratio:>11}"
              f"{r['search_of_best']:>12.0%}{r['exhaustive_of_best']:>9.0%}")
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    if not ratios:
        print(f"{len(rows)} runs: none where --exhaustive's choice served a good request")
        return
    below = [x for x in ratios if x < 0.95]
    pooled = sum(r["search"] for r in rows) / max(sum(r["exhaustive"] for r in rows), 1e-9)
    of_best = {k: statistics.mean(r[f"{k}_of_best"] for r in rows) for k in ("search", "exhaustive")}
    print(f"{len(rows)} runs, each choice scored on the window it did not see: the search's choices served "
          f"{pooled:.1%} of the good requests --exhaustive's did (per run: mean {statistics.mean(ratios):.1%}, "
          f"min {min(ratios):.1%}, below 95%: {len(below)}); of the unseen windows' best: search "
          f"{of_best['search']:.1%}, --exhaustive {of_best['exhaustive']:.1%}")


def chosen_of(s: llmtune.GoodputSearch) -> tuple[str, ...] | None:
    best = s.best()
    return best if best is not None and s.figures[best].goodput > 0 else None


def run_replay(root: Path, seeds: int = 0, exhaustive: bool = False, part: str = "all",
               targets_from: Path | None = None) -> list[dict]:
    """One row per model and pair of targets: the recorded order's run and `seeds` shuffled orders besides
    (`score`: their mean, `worst`: the lowest, `chosen`: the recorded order's). `targets_from`: another truth
    folder whose file of the same model gives the targets (two truths of one model compared at the same targets)."""
    rows = []
    for doc, source in _with_targets(root, part, targets_from):
        truth = Truth(doc)
        for label, slo in targets(source).items():
            runs = [replay(truth, slo, seed, exhaustive) for seed in [None, *range(seeds)]]
            picks = [chosen_of(s) for s in runs]
            scores = [truth.score(p, slo) for p in picks]
            best, top = truth.best(slo)
            rows.append({"model": doc["model"], "part": doc["part"], "targets": label,
                         "max_ttft_ms": slo.max_ttft_ms, "max_itl_ms": slo.max_itl_ms, "space": len(truth.windows),
                         "measured": max(len(s.figures) for s in runs), "trials": max(s.budget.used for s in runs),
                         "score": round(statistics.mean(scores), 3), "worst": round(min(scores), 3),
                         "tie": round(statistics.mean(truth.tie(p, slo) for p in picks), 3),
                         "exists": top > 0, "chosen": _describe(truth, picks[0]),
                         "best": _describe(truth, best) if top > 0 else None, "best_goodput": round(top, 2),
                         "best_spread": round(max(abs(g - top) for g in truth.goodputs(best, slo)) / top, 3)
                         if top > 0 else None})
    return rows


def _with_targets(root: Path, part: str, targets_from: Path | None) -> Iterator[tuple[dict, dict]]:
    """Each truth file of `part` with the truth its targets are drawn from: its own, or `targets_from`'s file of the
    same model (a model without one there is left out, and said so on stderr)."""
    for doc in load_truth(root, part):
        if targets_from is None:
            yield doc, doc
        elif (targets_from / f"{doc['model']}.json").exists():
            yield doc, json.loads((targets_from / f"{doc['model']}.json").read_text())
        else:
            print(f"{doc['model']}: no truth in {targets_from} to draw its targets from: left out", file=sys.stderr)


def _describe(truth: Truth, values: tuple[str, ...] | None) -> str | None:
    return None if values is None else llmtune.describe(truth.knobs, values)


def report(rows: list[dict]) -> None:
    print(f"{'model':16}{'targets':>8}{'ttft':>8}{'tpot':>7}{'measured':>10}{'score':>7}{'worst':>7}  chosen / best")
    for r in rows:
        sc = f"{r['score']:.0%}" if r["exists"] else "none"
        worst = f"{r['worst']:.0%}" if r["exists"] and r.get("worst") is not None else "-"
        print(f"{r['model']:16}{r['targets']:>8}{r['max_ttft_ms']:>8g}{r['max_itl_ms']:>7g}"
              f"{r['measured']:>5}/{r['space']:<4}{sc:>7}{worst:>7}  {r['chosen']} / {r['best']}")
    scores = [r["score"] for r in rows if r["exists"]]
    if scores:
        below = [r for r in rows if r["exists"] and r["score"] < 0.95]
        print(f"{len(scores)} runs: min {min(scores):.1%}, mean {statistics.mean(scores):.1%}, below 95%: "
              f"{len(below)}, of which {sum(r['tie'] for r in below):.1f} chose a setting the truth cannot tell from "
              f"the best (within two standard errors), most measured {max(r['measured'] for r in rows)} settings "
              f"({max(r['trials'] for r in rows)} measurements)")
        spread = [r["best_spread"] for r in rows if r.get("best_spread") is not None]
        print(f"the best setting's windows lie a median {statistics.median(spread):.0%} (at most {max(spread):.0%}) "
              "from their mean")


# -- live -----------------------------------------------------------------------------------------------------

def live(root: Path, part: str = "all") -> list[dict]:
    docs = load_truth(root, part)
    chosen = [s for s in specs() if s.name in {d["model"] for d in docs}]
    exe = Path(sys.executable).parent / "kubectl-triton"
    rows = []
    with _served(chosen) as server:
        for doc in docs:
            truth = Truth(doc)
            for label, slo in targets(doc).items():
                params = [x for n, v in PARAMS.items() for x in ("--param", f"{n}={','.join(v)}")]
                cmd = [str(exe), "tune", doc["model"], "--url", f"127.0.0.1:{server.grpc_port}", "--protocol",
                       "grpc", "--objective", "goodput", "--max-ttft", f"{slo.max_ttft_ms:g}ms", "--max-itl",
                       f"{slo.max_itl_ms:g}ms", "--concurrency", str(CONCURRENCY), "--duration",
                       f"{DURATION_S:g}s", "--min-requests", str(doc.get("min_requests", 0)), "--warmup",
                       f"{WARMUP_S:g}s", "--prompt-tokens",
                       str(doc["prompt_tokens"]), "--output-tokens", str(doc["output_tokens"]), *params,
                       "--instances", ",".join(map(str, INSTANCES)), "-o", "json"]
                t0 = time.monotonic()
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
                seconds = round(time.monotonic() - t0, 1)
                found = json.loads(proc.stdout) if proc.stdout.strip() else {}
                names = [k.name for k in truth.knobs]
                pick = tuple(found["best"]["setting"][n] for n in names) if found.get("best") else None
                best, top = truth.best(slo)
                rows.append({"model": doc["model"], "part": doc["part"], "targets": label,
                             "max_ttft_ms": slo.max_ttft_ms,
                             "max_itl_ms": slo.max_itl_ms, "space": len(truth.windows),
                             "measured": len({json.dumps(t["setting"]) for t in found.get("trials", [])}),
                             "trials": found.get("measurements", 0),
                             "score": round(truth.score(pick, slo), 3), "tie": float(truth.tie(pick, slo)),
                             "exists": top > 0, "exit": proc.returncode, "stderr": proc.stderr.strip() or None,
                             "seconds": seconds, "chosen": _describe(truth, pick),
                             "best": _describe(truth, best) if top > 0 else None, "best_goodput": round(top, 2),
                             "command": " ".join(cmd[1:]),
                             "steps": [[t["step"], [t["setting"][n] for n in names], t.get("goodput")]
                                       for t in found.get("trials", [])]})
                print(json.dumps(rows[-1]), flush=True)
                if not server.running:  # the rest would only fail to connect
                    (root / "tritonserver-failed.log").write_text(server.log)
                    raise SystemExit(f"tritonserver died after {doc['model']} {label}: see "
                                     f"{root / 'tritonserver-failed.log'}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("sweep", "replay", "cross", "live", "list"))
    ap.add_argument("--models", default="")
    ap.add_argument("--set", default="all", choices=("first", "second", "third", "fourth", "all"))
    ap.add_argument("--truth", type=Path, default=TRUTH)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--seeds", type=int, default=0, help="replay: shuffled window orders besides the recorded one")
    ap.add_argument("--exhaustive", action="store_true", help="replay `tune --exhaustive` instead of the search")
    ap.add_argument("--targets-from", type=Path, default=None,
                    help="replay: the targets of another truth folder's file of each model")
    ap.add_argument("--min-requests", type=int, default=0,
                    help="sweep: count windows, each at least DURATION_S and until this many requests ended in it")
    a = ap.parse_args()
    if a.what == "list":
        for s in specs():
            print(f"{s.name:16} {s.doc}")
        return
    if a.what == "sweep":
        sweep([n for n in a.models.split(",") if n], a.truth, a.min_requests)
        return
    if a.what == "cross":
        rows = run_cross(a.truth, a.set, a.targets_from)
        report_cross(rows)
    else:
        rows = run_replay(a.truth, a.seeds, a.exhaustive, a.set, a.targets_from) if a.what == "replay" else \
            live(a.truth, a.set)
        report(rows)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
