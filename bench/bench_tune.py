"""Benchmark for `kubectl triton tune`: the search against the exhaustive sweep of the same space, in one run.

A real tritonserver (explicit model control) serves the three python models of bench/tune_models.py, whose
cost structures differ (batching pays / a second instance pays / large batches break a latency bound). For
each, `kubectl triton tune` runs as a user runs it (a subprocess, -o json) twice over the default space of
63 settings at concurrency 16: `--exhaustive` (every setting once, the winner again) and the default search (its
default budget: 15% of the space). Then a confirmation run measures the two winners again, alternately
(`--confirm` windows each), because the best of 63 noisy windows is biased upwards (the winner's curse).

Reported per model: measurements (search / sweep), the search's best objective as a fraction of the sweep's
best (as each measured it, and in the confirmation run), whether the search's choice keeps the p99 bound in
the confirmation run, and wall times. Goal (issue 19): >= 95% of the best with <= 15% of the measurements.
Anchor: Triton Model Analyzer's quick search claims >= 95% of the best while measuring < 10% of the space.

Run: .venv/bin/python bench/bench_tune.py [--duration 2s] [--confirm 4] [--models amortized,parallel,tail]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tune_models import MODELS, make_repo  # noqa: E402

from kubectl_triton.adapters.tritonserver import TritonServer  # noqa: E402
from kubectl_triton.perf import inputs, search  # noqa: E402
from kubectl_triton.perf.loadgen import run_level  # noqa: E402
from kubectl_triton.perf.target import HttpTarget  # noqa: E402

OBJECTIVES = {"amortized": [], "parallel": [], "tail": ["--objective", "latency", "--max-p99", "100ms"]}
CONCURRENCY = 16


def plugin() -> list[str]:
    exe = Path(sys.executable).parent / "kubectl-triton"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kubectl_triton"]


def tune(url: str, model: str, duration: str, *extra: str) -> tuple[dict, float, list[str]]:
    cmd = [*plugin(), "tune", model, "--url", url, "--concurrency", str(CONCURRENCY), "--duration", duration,
           *OBJECTIVES[model], "-o", "json", *extra]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():  # 1: nothing met the bound (JSON still printed)
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    doc = json.loads(proc.stdout)
    doc["error"] = proc.stderr.strip() or None
    return doc, time.monotonic() - t0, cmd


def candidate(doc: dict) -> search.Candidate:
    cfg = doc["config"]
    return search.Candidate(cfg["instance_count"], cfg["dynamic_batching"], cfg.get("max_batch_size"))


def sweep_figure(sweep: dict, cand: search.Candidate) -> float | None:
    """The throughput the sweep measured for `cand` (the mean when it measured it twice)."""
    vals = [t["throughput"] for t in sweep["trials"] if t.get("throughput") is not None and candidate(t) == cand]
    return sum(vals) / len(vals) if vals else None


def confirm(url: str, model: str, cands: list[search.Candidate], windows: int, duration_s: float) -> list[dict]:
    """Each candidate measured `windows` times, alternately; the original config loaded again after."""
    target = HttpTarget(url, model)
    original = target.config()
    reqs = inputs.generate(inputs.input_specs(original))
    runs: list[list] = [[] for _ in cands]
    try:
        for _ in range(windows):
            for i, cand in enumerate(cands):
                target.load(search.apply(original, cand))
                runs[i].append(run_level(target, reqs, CONCURRENCY, duration_s, 0.4))
    finally:
        target.load(original)
    return [{"throughput": sum(r.throughput for r in rs) / len(rs), "p99_ms": max(r.p99_ms for r in rs),
             "windows": [round(r.throughput, 1) for r in rs]} for rs in runs]


def compare(url: str, name: str, sweep: dict, found: dict, windows: int, duration_s: float) -> dict:
    """The search against the sweep: measurements, the objective as each measured it, and a confirmation run of
    both winners. A side that found nothing within the bound scores 0."""
    bound = found["max_p99_ms"]
    winners = [candidate(d) for d in (sweep["best"], found["best"]) if d]
    conf = confirm(url, name, winners, windows, duration_s) if winners else []
    by = dict(zip([k for k in ("sweep", "search") if (sweep if k == "sweep" else found)["best"]], conf, strict=True))
    out = {"cost": MODELS[name][0], "objective": found["objective"], "max_p99_ms": bound, "space": sweep["space"],
           "sweep_measurements": sweep["measurements"], "search_measurements": found["measurements"],
           "measurement_fraction": round(found["measurements"] / sweep["space"], 3),
           "sweep_best": sweep["best"], "search_best": found["best"], "search_error": found["error"],
           "confirmation": by}
    if not sweep["best"]:
        return {**out, "fraction_own_windows": None, "fraction_as_swept": None, "fraction_confirmed": None,
                "search_meets_bound_confirmed": None}
    if not found["best"]:
        return {**out, "fraction_own_windows": 0.0, "fraction_as_swept": 0.0, "fraction_confirmed": 0.0,
                "search_meets_bound_confirmed": None}
    as_swept = sweep_figure(sweep, candidate(found["best"]))
    # confirmed: the search's winner's throughput (0 if it broke the bound) over the sweep's winner's
    search_score = 0.0 if bound is not None and by["search"]["p99_ms"] > bound else by["search"]["throughput"]
    return {**out,
            "fraction_own_windows": round(found["best"]["throughput"] / sweep["best"]["throughput"], 3),
            "fraction_as_swept": round(as_swept / sweep["best"]["throughput"], 3) if as_swept else None,
            "fraction_confirmed": round(search_score / by["sweep"]["throughput"], 3),
            "sweep_meets_bound_confirmed": None if bound is None else by["sweep"]["p99_ms"] <= bound,
            "search_meets_bound_confirmed": None if bound is None else by["search"]["p99_ms"] <= bound}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", default="2s")
    ap.add_argument("--confirm", type=int, default=4, help="confirmation windows per winner")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args(argv if argv is not None else sys.argv[1:] if __name__ == "__main__" else [])
    names = tuple(args.models.split(","))
    duration_s = float(args.duration.rstrip("s"))
    report: dict = {"concurrency": CONCURRENCY, "duration": args.duration, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp) / "models", names)
        with TritonServer(repo, model_control_mode="explicit",
                          extra_args=[f"--load-model={n}" for n in names]) as server:
            server.wait_ready(120)
            for name in names:
                before = server.request("GET", f"/v2/models/{name}/config")
                sweep, sweep_wall, sweep_cmd = tune(server.http_url, name, args.duration, "--exhaustive")
                found, search_wall, search_cmd = tune(server.http_url, name, args.duration)
                restored = server.request("GET", f"/v2/models/{name}/config") == before
                report["models"][name] = compare(server.http_url, name, sweep, found, args.confirm, duration_s)
                report["models"][name].update(
                    sweep_wall_s=round(sweep_wall, 1), search_wall_s=round(search_wall, 1),
                    served_config_restored=restored,
                    commands=[" ".join(sweep_cmd[-12:]), " ".join(search_cmd[-10:])])
    print(f"tune: search vs exhaustive sweep of the same space, concurrency {CONCURRENCY}, "
          f"{args.duration} windows, confirmation {args.confirm} windows per winner")
    head = f"{'model':10}{'objective':>16}{'measured':>10}{'share':>7}{'own':>7}{'swept':>7}{'confirmed':>10}  " \
           f"{'p99 ok':>6}  best (search) / best (sweep)"
    print(head)
    for name, m in report["models"].items():
        obj = m["objective"] + (f" <{m['max_p99_ms']:g}ms" if m["max_p99_ms"] else "")
        ok = "-" if m["search_meets_bound_confirmed"] is None else str(m["search_meets_bound_confirmed"])
        print(f"{name:10}{obj:>16}{m['search_measurements']:>4}/{m['space']:<5}"
              f"{m['measurement_fraction']:>7.0%}{pct(m['fraction_own_windows']):>7}"
              f"{pct(m['fraction_as_swept']):>7}{pct(m['fraction_confirmed']):>10}  {ok:>6}  "
              f"{describe(m['search_best'])} / {describe(m['sweep_best'])}")
    for name, m in report["models"].items():
        c = m["confirmation"]
        print(f"  {name}: sweep {m['sweep_wall_s']} s, search {m['search_wall_s']} s; confirmation windows "
              + "; ".join(f"{k} {v['windows']} (p99 {v['p99_ms']:.1f} ms)" for k, v in c.items())
              + f"; restored {m['served_config_restored']}" + (f"; search: {m['search_error']}"
                                                                if m["search_error"] else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return report


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def describe(best: dict | None) -> str:
    if not best:
        return "none within the bound"
    cand = candidate(best)
    return f"{cand.describe()} ({best['throughput']:.0f}/s, p99 {best['p99_ms']:.0f} ms)"


if __name__ == "__main__":
    main()
