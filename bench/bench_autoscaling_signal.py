"""The autoscaling signal at idle, light load and overload, next to its target, from the end-to-end chain of
tests/test_prometheus_e2e.py (real tritonserver, real Prometheus on loopback, open-loop load).

For each phase: the value prometheus-adapter serves to the HPA (triton_queue_compute_ratio, target 1) and the
replicas the HPA formula asks for from 1 replica; beside it, the k8s-onprem chart query this repository used
before (avg_time_queue_us, target 50 µs) and the replicas it would have asked for. Writes the figures as JSON
to bench/autoscaling_signal.json (the recorded run) unless --no-write.

Run: .venv/bin/python bench/bench_autoscaling_signal.py [--no-write]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubectl_triton.checks.manifests import monitoring  # noqa: E402
from tests import test_prometheus_e2e as e2e  # noqa: E402

OLD_TARGET_US = 50.0


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    with e2e.running_chain() as chain:
        name, target, lo, hi = chain.hpa_metric()
        rows = []
        for phase in chain.phases.values():
            value = phase.adapter[name][chain.pod]
            [old] = phase.old_query.values()
            rows.append({"phase": phase.name, "offered_rps": phase.rps, "capacity_rps": 1 / e2e.SERVICE_S,
                         "answered": phase.answered, "metric": name, "value": round(value, 4), "target": target,
                         "desired_replicas": monitoring.hpa_desired_replicas(1, [value], target, lo, hi),
                         "old_avg_time_queue_us": round(old, 1), "old_target_us": OLD_TARGET_US,
                         "old_desired_replicas": monitoring.hpa_desired_replicas(1, [old], OLD_TARGET_US, lo, hi)})
    print(f"{'phase':9} {'offered':>8} {name:>27} {'target':>6} {'replicas':>8} | "
          f"{'old avg_time_queue_us':>21} {'target':>6} {'replicas':>8}")
    for r in rows:
        print(f"{r['phase']:9} {r['offered_rps']:>6g}/s {r['value']:>27.4f} {r['target']:>6g} "
              f"{r['desired_replicas']:>8} | {r['old_avg_time_queue_us']:>21.1f} {r['old_target_us']:>6g} "
              f"{r['old_desired_replicas']:>8}")
    if "--no-write" not in argv:
        out = Path(__file__).with_name("autoscaling_signal.json")
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"minReplicas": lo, "maxReplicas": hi, "from_replicas": 1, "phases": rows},
                                  indent=2) + "\n", encoding="utf-8")
        tmp.replace(out)
        print(f"recorded: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
