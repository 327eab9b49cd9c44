"""Benchmark for `kubectl triton tune`: its gain on a model whose execute costs 20 ms whatever the batch size.

A real tritonserver (explicit model control) serves the python-backend model of tests/test_bench.py with no
batching and one instance (the "before" of the guides' batching comparison). `kubectl triton tune` runs as a
user runs it (a subprocess, -o json) over its default search at concurrency 16 and reports throughput and
p99 before and after, the gain (x), the candidates measured, the wall time, and that the served config was
restored. Anchors: perf_analyzer measures, Model Analyzer searches; neither ends in a git change or runs
without a GPU.

Run: .venv/bin/python bench/bench_tune.py [--duration 3s] [--concurrency 16]
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

from tests.test_bench import config_text, explicit_server  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", default="3s")
    ap.add_argument("--concurrency", default="16")
    args = ap.parse_args(argv if argv is not None else sys.argv[1:] if __name__ == "__main__" else [])
    with tempfile.TemporaryDirectory() as tmp:
        gitops = Path(tmp) / "gitops"
        (gitops / "overlays").mkdir(parents=True)
        cfg = gitops / "models" / "fixed" / "fixedcost" / "config.pbtxt"
        cfg.parent.mkdir(parents=True)
        cfg.write_text(config_text("fixedcost"))
        with explicit_server(Path(tmp) / "models", ("fixedcost",)) as server:
            server.wait_ready(60)
            before = server.request("GET", "/v2/models/fixedcost/config")
            cmd = [str(Path(sys.executable).parent / "kubectl-triton"), "tune", "fixedcost", "--url",
                   server.http_url, "--concurrency", args.concurrency, "--duration", args.duration,
                   "--write", "--repo", str(gitops), "-o", "json"]
            if not Path(cmd[0]).exists():
                cmd[:1] = [sys.executable, "-m", "kubectl_triton"]
            t0 = time.monotonic()
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            wall = time.monotonic() - t0
            restored = server.request("GET", "/v2/models/fixedcost/config") == before
        if proc.returncode != 0:
            raise SystemExit(f"tune failed ({proc.returncode}): {proc.stderr.strip()}")
        doc = json.loads(proc.stdout)
        written = cfg.read_text()
    base, best = doc["baseline"], doc["best"]
    measured = sum(1 for c in doc["candidates"] if not c["error"])
    print(f"model: python backend, 20 ms per execute, max_batch_size 32; concurrency {doc['concurrency']}, "
          f"{args.duration} per candidate")
    print(f"{'':28}{'throughput/s':>14}{'p99 ms':>10}")
    print(f"{'before (current config)':28}{base['throughput']:>14.1f}{base['p99_ms']:>10.1f}")
    print(f"{'after (tune best)':28}{best['throughput']:>14.1f}{best['p99_ms']:>10.1f}")
    print(f"gain: {doc['gain']:.1f}x throughput, p99 {base['p99_ms'] / best['p99_ms']:.1f}x lower")
    print(f"best: {json.dumps(best['config'])}")
    print(f"candidates measured: {measured} of {len(doc['candidates'])}; tune wall time {wall:.1f} s; "
          f"served config restored: {restored}; config.pbtxt written: {'dynamic_batching' in written}")


if __name__ == "__main__":
    main()
