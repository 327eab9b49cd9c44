"""Held-out models for tune's search (issue 27): generated cost shapes, their exhaustive truth, and the search
scored against it.

A hundred and eighteen python-backend models (bench/tune_models.py's template: sleeps, a device lock the instances
share) drawn from seven cost shapes with a fixed seed: the development set (the first draw of six shapes: the search
was tuned on it), then held-out sets of every shape drawn one after another, each scored before the next change of
the search (`specs` says which set saw which search; the seventh shape exists only in the held-out sets).

    sweep     (the models without a truth file, or --models) every setting of the default space (63 at
              max_batch_size >= 16) measured once on a real tritonserver, then the settings within 15% of
              the best (and the best few within each latency bound) twice more, alternately: the truth,
              cached as JSON under --truth
    replay    the search run on the cached truth (a measurement returns the setting's recorded windows in turn),
              every model, throughput and two latency bounds: what a change to the search does, in seconds
              (--exhaustive: `tune --exhaustive` instead: the whole space, the winner measured again)
    live      `kubectl triton tune` as a user runs it (subprocess, -o json) on the held-out models, scored
              against the cached truth

Run:
    .venv/bin/python bench/tune_heldout.py sweep [--models NAME,...]
    .venv/bin/python bench/tune_heldout.py replay [--set dev|heldout|heldout2..heldout16|all] [--seeds N]
        [--measurements EXTRA | --exhaustive [once]]
    .venv/bin/python bench/tune_heldout.py live [--set ...] [--json FILE] [--paired N]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tune_models import write_model  # noqa: E402

from kubectl_triton.perf import PerfError, inputs, search  # noqa: E402
from kubectl_triton.perf.loadgen import LevelResult  # noqa: E402
from kubectl_triton.perf.target import HttpTarget  # noqa: E402

TRUTH = ROOT / "bench" / "results" / "tune-heldout"
CONCURRENCY = 16
SEED = 27
MS = 0.001


@dataclass(frozen=True)
class Spec:
    name: str
    shape: str
    part: str  # dev | heldout
    doc: str
    costs: dict
    max_batch_size: int


def _u(rng: random.Random, lo: float, hi: float) -> float:
    return round(rng.uniform(lo, hi), 5)


def _draw(shape: str, rng: random.Random) -> tuple[str, dict, int]:
    """One model of `shape`: its description, cost parameters (seconds) and max_batch_size."""
    if shape == "amortized":  # batching pays, instances do not
        c = {"fixed": _u(rng, 10, 30) * MS, "item": _u(rng, 0.2, 1.0) * MS}
        return f"batching pays: {c['fixed'] / MS:.1f} ms + {c['item'] / MS:.2f} ms/item on the device", c, 32
    if shape == "host":  # instances pay, batching a little
        c = {"host_item": _u(rng, 2, 5) * MS, "item": _u(rng, 1, 3) * MS, "fixed": _u(rng, 0, 2) * MS}
        return (f"instances pay: {c['host_item'] / MS:.1f} ms/item on the host, {c['fixed'] / MS:.1f} ms + "
                f"{c['item'] / MS:.1f} ms/item on the device"), c, 16
    if shape == "explode":  # large batches cost more per item than small ones
        above = rng.choice([4, 8])
        c = {"fixed": _u(rng, 4, 12) * MS, "item": _u(rng, 0.5, 1.5) * MS, "explode_above": above,
             "explode": _u(rng, 0.15, 0.4)}
        return (f"large batches explode: {c['fixed'] / MS:.1f} ms + {c['item'] / MS:.2f} ms/item, each item above "
                f"{above} makes every item {c['explode']:.0%} dearer"), c, 32
    if shape == "hostfixed":  # a per-execution host cost: batching and instances both pay
        c = {"host_fixed": _u(rng, 10, 25) * MS, "fixed": _u(rng, 2, 6) * MS, "item": _u(rng, 0.2, 0.6) * MS}
        return (f"batching and instances pay: {c['host_fixed'] / MS:.1f} ms on the host per execution, "
                f"{c['fixed'] / MS:.1f} ms + {c['item'] / MS:.2f} ms/item on the device"), c, 32
    if shape == "tail":  # large batches stall now and then
        above = rng.choice([4, 8])
        c = {"fixed": _u(rng, 6, 14) * MS, "item": _u(rng, 0.2, 0.5) * MS, "stall_above": above,
             "stall_every": rng.choice([8, 16]), "stall": _u(rng, 80, 160) * MS}
        return (f"large batches stall: {c['fixed'] / MS:.1f} ms + {c['item'] / MS:.2f} ms/item; every "
                f"{c['stall_every']}th batch above {above} stalls {c['stall'] / MS:.0f} ms"), c, 32
    if shape == "small":  # a small max_batch_size: preferred sizes above it are left out
        c = {"fixed": _u(rng, 8, 20) * MS, "item": _u(rng, 0.5, 1.5) * MS, "host_item": _u(rng, 0.5, 2) * MS}
        return (f"max batch 8: {c['host_item'] / MS:.1f} ms/item host, {c['fixed'] / MS:.1f} ms + "
                f"{c['item'] / MS:.2f} ms/item device"), c, 8
    if shape == "mixed":  # held out only: a bit of everything
        c = {"host_fixed": _u(rng, 3, 8) * MS, "host_item": _u(rng, 0.5, 1.5) * MS, "fixed": _u(rng, 5, 12) * MS,
             "item": _u(rng, 0.3, 0.8) * MS, "explode_above": 8, "explode": _u(rng, 0.1, 0.2)}
        return (f"mixed: {c['host_fixed'] / MS:.1f} ms + {c['host_item'] / MS:.1f} ms/item host, "
                f"{c['fixed'] / MS:.1f} ms + {c['item'] / MS:.2f} ms/item device, dearer above 8"), c, 16
    raise ValueError(shape)


SHAPES = ("amortized", "host", "explode", "hostfixed", "tail", "small")


def specs() -> list[Spec]:
    """Set A: `dev` (the first draw of each shape) and `heldout` (the second, and mixed2). Set B, `heldout2` (the
    third draw of each shape, and mixed3), was drawn after the search had been changed in view of set A's
    held-out figures, and never looked at before the final figures. Set C, `heldout3` (the fourth draw), was drawn and
swept before the search was changed in view of set B's figures, and scored only once that change was done (it
was worse there, and changed again in view of all three sets); set D, `heldout4` (the fifth draw), was drawn and
swept then, and scored only once that second change was done; set E, `heldout5` (the sixth draw), was drawn and swept
a session later, with that search unchanged, and scored once; set F, `heldout6` (the seventh draw), likewise two
sessions later, scored once with `live --paired` (the search still unchanged); set G, `heldout7` (the eighth draw),
was drawn and swept a session later, before the search was changed in view of sets E and F, and scored only once
that change was done; set H, `heldout8` (the ninth draw), was drawn and swept after that, with the search unchanged,
and scored once; set I, `heldout9` (the tenth draw), a session later, with the search still unchanged, and scored
once; set J, `heldout10` (the eleventh draw), was drawn and swept a session later, before the search was changed in
view of sets A to I, and scored only once that change was done; set K, `heldout11` (the twelfth draw), was drawn and
swept a session later, before the search was changed in view of sets A to J, and scored only once that change was
done; set L, `heldout12` (the thirteenth draw), was drawn and swept the same session after that change, with the
search unchanged, and scored once; set M, `heldout13` (the fourteenth draw), was drawn and swept a session later,
before the search was changed in view of sets A to L, and scored only once that change was done; set N, `heldout14`
(the fifteenth draw), was drawn and swept the same session after that change, with the search unchanged, and scored
once; set O, `heldout15` (the sixteenth draw), was drawn and swept before the search was changed for set N's defect,
and scored only once that change was done; set P, `heldout16` (the seventeenth draw), was drawn and swept after that,
with the search unchanged, and scored once a session later."""
    rng = random.Random(SEED)
    out = []
    for k, part in enumerate(("dev", "heldout")):
        for shape in SHAPES:
            doc, costs, mbs = _draw(shape, rng)
            out.append(Spec(f"{shape}{k + 1}", shape, part, doc, costs, mbs))
    doc, costs, mbs = _draw("mixed", rng)
    out.append(Spec("mixed2", "mixed", "heldout", doc, costs, mbs))
    for k in range(3, 18):  # set B, `heldout2` (the third draw), to set P, `heldout16` (the seventeenth)
        part = f"heldout{k - 1}"
        for shape in (*SHAPES, "mixed"):
            doc, costs, mbs = _draw(shape, rng)
            out.append(Spec(f"{shape}{k}", shape, part, doc, costs, mbs))
    return out


def make_repo(root: Path, chosen: list[Spec]) -> Path:
    for s in chosen:
        write_model(root, s.name, s.doc, s.costs, s.max_batch_size)
    return root


def bounds(truth: dict) -> dict[str, float]:
    """Two latency bounds per model, from its truth: the median p99 of the space (the fastest settings tend to miss
    it), and a tight one that about a fifth of the space meets."""
    p99s = sorted(w["p99_ms"] for row in truth["settings"] for w in row["windows"][:1])
    return {"median": round(statistics.median(p99s), 1), "tight": round(p99s[len(p99s) // 5], 1)}


# -- sweep -------------------------------------------------------------------------------------------------

def sweep(names: list[str], duration_s: float, warmup_s: float, out: Path) -> None:
    from kubectl_triton.adapters.tritonserver import TritonServer
    from kubectl_triton.perf import tunerun  # here: `replay` also runs over commits before ba90f5a, which lack it

    out.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in specs() if (s.name in names if names else not (out / f"{s.name}.json").exists())]
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp) / "models", chosen)
        with TritonServer(repo, model_control_mode="explicit",
                          extra_args=[f"--load-model={s.name}" for s in chosen]) as server:
            server.wait_ready(120)
            for s in chosen:
                t0 = time.monotonic()
                target = HttpTarget(server.http_url, s.name)
                original = target.config()
                reqs = inputs.generate(inputs.input_specs(original))
                space = search.Space.for_config(original)
                found = tunerun.tune(target, reqs, CONCURRENCY, duration_s, space, search.Objective(),
                                    search.Budget(), warmup_s=warmup_s, original=original, exhaustive=True)
                # one window each, as every set's truth since dev has (the sweep's winner measured again aside)
                windows = {c: list(f.results[:1]) for c, f in found.figures.items() if f.results}
                again = _second_look(windows)
                with tunerun.guard() as g:
                    run = tunerun.TuneRun(target, reqs, CONCURRENCY, duration_s, warmup_s, original, g)
                    try:
                        for _ in range(2):
                            for c in again:
                                windows[c].append(run.measure(c))
                    finally:
                        run.restore()
                doc = {"model": s.name, "shape": s.shape, "part": s.part, "doc": s.doc, "costs": s.costs,
                       "max_batch_size": s.max_batch_size, "concurrency": CONCURRENCY, "duration_s": duration_s,
                       "warmup_s": warmup_s, "space": len(space), "seconds": round(time.monotonic() - t0, 1),
                       "settings": [{"config": c.to_dict(), "windows": [r.to_dict() for r in ws]}
                                    for c, ws in windows.items()]}
                (out / f"{s.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
                best = max(windows.items(), key=lambda cw: statistics.mean(r.throughput for r in cw[1]))
                print(f"{s.name}: {len(windows)} settings, {len(again)} measured twice more, best "
                      f"{best[0].describe()} {statistics.mean(r.throughput for r in best[1]):.0f}/s "
                      f"({doc['seconds']} s)", flush=True)


def _second_look(windows: dict[search.Candidate, list[LevelResult]]) -> list[search.Candidate]:
    """The settings whose ranking matters: within 15% of the best throughput, and the three fastest within each
    latency bound that `bounds` will derive."""
    first = {c: ws[0] for c, ws in windows.items()}
    top = max(r.throughput for r in first.values())
    chosen = {c for c, r in first.items() if r.throughput >= 0.85 * top}
    p99s = sorted(r.p99_ms for r in first.values())
    for bound in (statistics.median(p99s), p99s[len(p99s) // 5]):
        ok = sorted((c for c, r in first.items() if r.p99_ms <= bound), key=lambda c: -first[c].throughput)
        chosen.update(ok[:3])
    return sorted(chosen, key=lambda c: c.describe())


# -- truth and scoring --------------------------------------------------------------------------------------

def load_truth(root: Path, part: str) -> list[dict]:
    names = [s.name for s in specs() if part == "all" or s.part == part]
    return [json.loads((root / f"{n}.json").read_text()) for n in names if (root / f"{n}.json").exists()]


def _candidate(cfg: dict) -> search.Candidate:
    return search.Candidate(cfg["instance_count"], cfg["dynamic_batching"], cfg.get("max_batch_size"))


def _level(w: dict) -> LevelResult:
    return LevelResult(**w)


class Truth:
    """A model's settings with every window measured; the true value of a setting is the mean of its windows,
    and it meets a bound when its windows' mean p99 does."""

    def __init__(self, doc: dict) -> None:
        self.doc = doc
        self.windows: dict[search.Candidate, list[LevelResult]] = {}
        for row in doc["settings"]:  # a sweep before the space knew Triton's default preferred size has both
            self.windows.setdefault(self.canonical(_candidate(row["config"])), []).extend(
                _level(w) for w in row["windows"])

    def canonical(self, c: search.Candidate) -> search.Candidate:
        """The setting as Triton serves it: a preferred size equal to the max batch size is none. (Here, not
        Space.canonical: this script also replays the search of commits whose space lacks it.)"""
        db = c.dynamic_batching
        mbs = c.max_batch_size or self.doc["max_batch_size"]
        if db is None or tuple(db.get("preferred_batch_size") or ()) != (mbs,):
            return c
        return search.Candidate(c.instance_count, search.batching(db.get("max_queue_delay_microseconds") or 0),
                                c.max_batch_size)

    def throughput(self, c: search.Candidate) -> float:
        return statistics.mean(r.throughput for r in self.windows[c])

    def p99(self, c: search.Candidate) -> float:
        return statistics.mean(r.p99_ms for r in self.windows[c])

    def best(self, bound: float | None) -> tuple[search.Candidate | None, float]:
        ok = [c for c in self.windows if bound is None or self.p99(c) <= bound]
        if not ok:
            return None, 0.0
        c = max(ok, key=self.throughput)
        return c, self.throughput(c)

    def score(self, chosen: search.Candidate | None, bound: float | None) -> float:
        """The chosen setting's true throughput over the true best's (0 when it breaks the bound or is none)."""
        _, top = self.best(bound)
        chosen = None if chosen is None else self.canonical(chosen)
        if chosen is None or top == 0:
            return 0.0 if top else 1.0
        if bound is not None and self.p99(chosen) > bound:
            return 0.0
        return self.throughput(chosen) / top

    def se(self, c: search.Candidate) -> float:
        """Standard error of a setting's true throughput: its windows' spread, or with one window that window's
        own (its fifths')."""
        ws = self.windows[c]
        if len(ws) > 1:
            return statistics.stdev(r.throughput for r in ws) / math.sqrt(len(ws))
        return (ws[0].noise or 0.0) * ws[0].throughput

    def tie(self, chosen: search.Candidate | None, bound: float | None) -> bool:
        """Whether the chosen setting's throughput is within two standard errors of the best's: the truth
        itself cannot tell them apart (False when it breaks the bound or is none)."""
        best, top = self.best(bound)
        chosen = None if chosen is None else self.canonical(chosen)
        if chosen is None or best is None or (bound is not None and self.p99(chosen) > bound):
            return best is None
        return top - self.throughput(chosen) <= 2 * math.hypot(self.se(best), self.se(chosen))

    def space(self) -> search.Space:
        return search.Space.for_config({"max_batch_size": self.doc["max_batch_size"]})


def replay(truth: Truth, bound: float | None, served: search.Candidate, seed: int | None = None,
           measurements: int | None = None, exhaustive: str | None = None) -> search.Search:
    """The search (`exhaustive` "confirmed": `tune --exhaustive`'s sweep, every setting once and the winner again;
    "once": as it was before d3b321e, without the winner again) on the recorded windows: each measurement of a
    setting returns its next window, in recorded order (seed None) or in an order shuffled with `seed` (a live run
    draws any of them first)."""
    seen: dict[search.Candidate, int] = {}
    order: dict[search.Candidate, list[LevelResult]] = {}
    rng = random.Random(seed)

    def measure(c: search.Candidate) -> LevelResult:
        c = truth.canonical(c)
        ws = truth.windows.get(c)
        if not ws:
            raise PerfError(f"{c.describe()} is not in the truth")
        if c not in order:
            order[c] = list(ws) if seed is None else rng.sample(ws, len(ws))
        i = seen.get(c, 0)
        seen[c] = i + 1
        return order[c][i % len(ws)]

    space = truth.space()
    budget = search.Budget() if exhaustive else \
        search.share_budget(len(space)) if measurements is None else search.Budget(max_trials=measurements)
    s = search.Search(space, search.Objective(bound), measure, budget)
    if exhaustive == "once":
        s._run(served, "served setting", baseline=True)
        for c in space.all():
            if c not in s.figures:
                s._run(c, "exhaustive")
    elif exhaustive:
        s.sweep(served)
    else:
        s.run(served)
    return s


def run_replay(part: str, root: Path, seeds: int = 0, extra: int | None = None,
               exhaustive: str | None = None) -> list[dict]:
    """One row per model and objective: the recorded order's run, and with `seeds`, that many shuffled orders
    besides (`score` is then their mean, `worst` the lowest; `chosen` is the recorded order's); `exhaustive`: of
    `tune --exhaustive` (see `replay`)."""
    rows = []
    for doc in load_truth(root, part):
        truth = Truth(doc)
        served = search.Candidate(1, None)
        # d534acf's budget spelled out, not search.share_budget: its search.py, replayed under this file, has none
        cap = None if extra is None else max(5, int(0.15 * len(truth.space()))) + extra
        for label, bound in [("throughput", None), *bounds(doc).items()]:
            runs = [replay(truth, bound, served, seed, cap, exhaustive) for seed in [None, *range(seeds)]]
            scores = [truth.score(s.best(), bound) for s in runs]
            ties = [truth.tie(s.best(), bound) for s in runs]
            chosen = runs[0].best()
            _, top = truth.best(bound)
            rows.append({"model": doc["model"], "part": doc["part"], "objective": label, "bound_ms": bound,
                         "measured": max(len(s.figures) for s in runs),
                         "trials": max(s.budget.used for s in runs), "space": len(truth.windows),
                         "score": round(statistics.mean(scores), 3), "worst": round(min(scores), 3),
                         "tie": round(statistics.mean(ties), 3),
                         "exists": top > 0, "chosen": chosen.describe() if chosen else None,
                         "best": truth.best(bound)[0].describe() if top else None})  # type: ignore[union-attr]
    return rows


def report(rows: list[dict]) -> None:
    print(f"{'model':12}{'part':>8}{'objective':>12}{'bound':>8}{'measured':>10}{'score':>7}{'worst':>7}  "
          "chosen / best")
    for r in rows:
        b = "-" if r["bound_ms"] is None else f"{r['bound_ms']:g}"
        sc = f"{r['score']:.0%}" if r["exists"] else "none"
        worst = f"{r['worst']:.0%}" if r.get("worst") is not None and r["exists"] else "-"
        print(f"{r['model']:12}{r['part']:>8}{r['objective']:>12}{b:>8}{r['measured']:>5}/{r['space']:<4}{sc:>7}"
              f"{worst:>7}  {r['chosen']} / {r['best']}")
    side = [r for r in rows if r["exists"] and r.get("paired")]
    if side:
        ratios = [r["paired"]["ratio"] for r in side]
        print(f"paired re-measurement (chosen / best, side by side, ABBA): {len(side)} runs, min "
              f"{min(ratios):.1%}, mean {statistics.mean(ratios):.1%}"
              f", below 95%: {sum(r['paired']['ratio'] < 0.95 for r in side)}, of which more than two standard errors "
              f"below: {sum(r['paired']['ratio'] + 2 * r['paired']['se'] < 0.95 for r in side)}")
        for r in side:
            if r["paired"]["ratio"] < 1.0:
                print(f"  {r['model']:12}{r['objective']:>12}  {r['paired']['ratio']:.1%} ± {r['paired']['se']:.1%}"
                      f"  (sweep: {r['score']:.1%})")
    scores = [r["score"] for r in rows if r["exists"]]
    if scores:
        below = [r for r in rows if r["exists"] and r["score"] < 0.95]
        print(f"{len(scores)} runs: min {min(scores):.1%}, mean {statistics.mean(scores):.1%}, "
              f"below 95%: {len(below)}, of which {sum(r['tie'] for r in below):.1f} (mean over the window orders) "
              f"chose a setting the truth cannot tell from the best (within two standard errors), "
              f"most measured {max(r['measured'] for r in rows)} settings"
              + (f" ({max(r.get('trials', 0) for r in rows)} measurements)" if any('trials' in r for r in rows)
                 else ""))


# -- live ---------------------------------------------------------------------------------------------------

def paired(target: HttpTarget, reqs: list, original: dict, chosen: search.Candidate, best: search.Candidate,
           rounds: int, duration_s: float) -> dict:
    """The chosen setting against the truth's best, measured side by side on the same server right after the run:
    `rounds` windows each, in ABBA order (a slow drift of the machine cancels), so the ratio has neither the sweep's
    winner's curse (the best of 63 noisy means is biased up) nor the hours between the sweep and the run. Returns the
    ratio of their mean throughputs and its standard error (delta method over the windows' spread)."""
    from kubectl_triton.perf import tunerun

    got: dict[search.Candidate, list[float]] = {chosen: [], best: []}
    with tunerun.guard() as g:
        run = tunerun.TuneRun(target, reqs, CONCURRENCY, duration_s, 0.4, original, g)
        try:
            for k in range(rounds):
                for c in ((best, chosen) if k % 2 == 0 else (chosen, best)):
                    got[c].append(run.measure(c).throughput)
        finally:
            run.restore()
    a, b = statistics.mean(got[chosen]), statistics.mean(got[best])
    rel_se = math.hypot(statistics.stdev(got[chosen]) / a, statistics.stdev(got[best]) / b) / math.sqrt(rounds)
    return {"ratio": round(a / b, 3), "se": round(a / b * rel_se, 3), "chosen_windows": [round(x, 1) for x in
            got[chosen]], "best_windows": [round(x, 1) for x in got[best]]}


def live(root: Path, duration: str, names: list[str], part: str, rounds: int = 0) -> list[dict]:
    from kubectl_triton.adapters.tritonserver import TritonServer

    docs = [d for d in load_truth(root, part) if not names or d["model"] in names]
    chosen = [s for s in specs() if s.name in {d["model"] for d in docs}]
    exe = Path(sys.executable).parent / "kubectl-triton"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp) / "models", chosen)
        with TritonServer(repo, model_control_mode="explicit",
                          extra_args=[f"--load-model={s.name}" for s in chosen]) as server:
            server.wait_ready(120)
            for doc in docs:
                truth = Truth(doc)
                for label, bound in [("throughput", None), *bounds(doc).items()]:
                    obj = [] if bound is None else ["--objective", "latency", "--max-p99", f"{bound:g}ms"]
                    cmd = [str(exe), "tune", doc["model"], "--url", server.http_url, "--concurrency",
                           str(CONCURRENCY), "--duration", duration, *obj, "-o", "json"]
                    t0 = time.monotonic()
                    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
                    seconds = round(time.monotonic() - t0, 1)  # the run alone, not the paired windows after it
                    found = json.loads(proc.stdout)
                    best = _candidate(found["best"]["config"]) if found["best"] else None
                    _, top = truth.best(bound)
                    top_c = truth.best(bound)[0]
                    side = None
                    if rounds and best is not None and top_c is not None and truth.score(best, bound) > 0:
                        if truth.canonical(best) == top_c:
                            side = {"ratio": 1.0, "se": 0.0}
                        else:
                            target = HttpTarget(server.http_url, doc["model"])
                            original = target.config()
                            side = paired(target, inputs.generate(inputs.input_specs(original)), original,
                                          truth.canonical(best), top_c, rounds, float(duration.rstrip("s")))
                    rows.append({"model": doc["model"], "part": part, "objective": label, "bound_ms": bound,
                                 "measured": found.get("settings", found["measurements"]),
                                 "trials": found["measurements"], "space": found["space"],
                                 "score": round(truth.score(best, bound), 3), "exists": top > 0,
                                 "paired": side,
                                 "tie": float(truth.tie(best, bound)),
                                 "exit": proc.returncode, "stderr": proc.stderr.strip() or None,
                                 "seconds": seconds,
                                 "chosen": best.describe() if best else None,
                                 "best": truth.best(bound)[0].describe() if top else None,  # type: ignore
                                 "command": " ".join(cmd[1:]),
                                 # what the run measured, in order: why, the setting, throughput, p99
                                 "steps": [[t["step"], _candidate(t["config"]).describe(), t.get("throughput"),
                                            t.get("p99_ms")] for t in found["trials"]]})
                    print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("sweep", "replay", "live", "list"))
    ap.add_argument("--models", default="")
    ap.add_argument("--set", default="dev", choices=(*dict.fromkeys(s.part for s in specs()), "all"))
    ap.add_argument("--duration", default="1.5s")
    ap.add_argument("--truth", type=Path, default=TRUTH)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--seeds", type=int, default=0, help="replay: shuffled window orders besides the recorded one")
    ap.add_argument("--measurements", type=int, default=None, metavar="EXTRA",
                    help="replay: a budget of 15%% of the space (at least 5) plus EXTRA in measurements, repeats "
                         "counted, instead of the default (15%% in settings and a third as many repeats besides)")
    ap.add_argument("--exhaustive", nargs="?", const="confirmed", choices=("confirmed", "once"), default=None,
                    help="replay: `tune --exhaustive` (every setting once, the winner again) instead of the search; "
                         "`once`: as it was before d3b321e, without the winner again")
    ap.add_argument("--paired", type=int, default=0,
                    help="live: windows of the chosen and of the truth's best each, measured side by side after a run")
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    if args.what == "list":
        for s in specs():
            print(f"{s.name:12}{s.part:>8}  max_batch_size {s.max_batch_size:<3} {s.doc}")
        return
    if args.what == "sweep":
        sweep(names, float(args.duration.rstrip("s")), 0.4, args.truth)
        return
    if args.exhaustive and args.measurements is not None:
        ap.error("--measurements is the search's budget: --exhaustive measures the whole space")
    if args.what == "replay":
        rows = run_replay(args.set, args.truth, args.seeds, args.measurements, args.exhaustive)
    else:
        rows = live(args.truth, args.duration, names, args.set, args.paired)
    report(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
