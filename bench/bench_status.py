"""Benchmark for `kubectl triton status` against the local API server of tests/apiserver.py.

1. API cost: requests per status run with 10 and 100 Triton Deployments in scope (lists/gets must stay
   constant, <= 8; log reads = failing containers; probes = running pods).
2. Time to verdict: a scripted rollout whose new pod crashes with the engine-mismatch log at +5 s and keeps
   crashing; `status --wait` (a real subprocess, as a user runs it) must exit 1 with EngineGPUMismatch
   within 10 s of the first crash. Compared with the 600 s progress deadline after which
   `kubectl rollout status` reports the same rollout as failed.

Run: .venv/bin/python bench/bench_status.py [--crash-at 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.apiserver import (  # noqa: E402
    NAMESPACE,
    APIServer,
    crashed,
    deployment,
    healthy_model,
    hpa,
    kustomization,
    pod,
)

PROGRESS_DEADLINE_S = 600
GPU_LOG = ("I1202 11:13:01.104118 1 model_lifecycle.cc:472] \"loading: llama3-8b:1\"\n"
           "[TensorRT-LLM][ERROR] 6: The engine plan file is generated on an incompatible device, expecting "
           "compute 9.0 got compute 8.0, please rebuild.\n"
           "E1202 11:13:06.647394 1 model_lifecycle.cc:642] \"failed to load 'llama3-8b' version 1: Internal: "
           "unexpected error when creating modelInstanceState\"\n")


def cli(*args: str, timeout: float = 120) -> tuple[int, str, float]:
    t = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "kubectl_triton", *args], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT)
    return res.returncode, res.stdout, time.monotonic() - t


def api_cost(n: int, failing: int, tmp: Path) -> dict:
    with APIServer() as api:
        c = api.cluster
        names = [f"model-{i:03d}" for i in range(n)]
        for name in names[failing:]:
            healthy_model(c, name)
        for name in names[:failing]:
            cr = crashed(restarts=4)
            p = pod(name, ready=False, started=False, state=cr["state"], last_state=cr["last_state"], restarts=4)
            c.apply(deployment(name, ready=0), p, hpa(name))
            c.logs[(NAMESPACE, p["metadata"]["name"], "tritonserver", True)] = GPU_LOG
        c.apply(kustomization("apps", [(NAMESPACE, name) for name in names]))
        kc = api.kubeconfig(tmp)
        rc, out, wall = cli("status", "--kubeconfig", str(kc), "-o", "json")
        doc = json.loads(out)
        assert c.violations == [], c.violations
        return {"deployments": n, "failing": failing, "exit": rc, "wall_s": round(wall, 2),
                "list_get": c.count("list") + c.count("get"), "log": c.count("log"), "proxy": c.count("proxy"),
                "failed_models": sum(m["phase"] == "Failed" for m in doc["models"])}


def time_to_verdict(crash_at: float, tmp: Path) -> dict:
    model = "llama3-8b"
    with APIServer() as api:
        c = api.cluster
        # before: the old revision serves
        healthy_model(c, model)
        c.apply(kustomization("apps", [(NAMESPACE, model)]))
        kc = api.kubeconfig(tmp)
        new_rev = "main@sha1:" + "b" * 40
        marks: dict[str, float] = {}
        done = threading.Event()

        def timeline() -> None:
            t0 = time.monotonic()
            marks["rollout"] = t0
            # Flux applies the new revision: Deployment generation 3, a new pod is created (maxSurge 0)
            c.apply(kustomization("apps", [(NAMESPACE, model)], attempted=new_rev,
                                  ready=("Unknown", "Progressing", "Reconciliation in progress")),
                    deployment(model, ready=0, updated=0, generation=3, progressing=("True", "ReplicaSetUpdated")))
            c.delete("Pod", NAMESPACE, pod(model)["metadata"]["name"])
            c.apply(pod(model, "n3wp0", phase="Pending", ready=False))
            time.sleep(1.0)
            c.apply(pod(model, "n3wp0", ready=False, started=False))  # running, loading the engine
            time.sleep(max(0.0, t0 + crash_at - time.monotonic()))
            restarts = 1
            name = pod(model, "n3wp0")["metadata"]["name"]
            while not done.is_set():  # crash, back off, crash again...
                c.logs[(NAMESPACE, name, "tritonserver", False)] = GPU_LOG
                c.logs[(NAMESPACE, name, "tritonserver", True)] = GPU_LOG
                term = {"terminated": {"exitCode": 1, "reason": "Error"}}
                c.apply(pod(model, "n3wp0", ready=False, started=False, state=term, restarts=restarts - 1))
                marks.setdefault("first_crash", time.monotonic())
                cr = crashed(restarts=restarts)
                c.apply(pod(model, "n3wp0", ready=False, started=False, state=cr["state"],
                            last_state=cr["last_state"], restarts=restarts))
                restarts += 1
                done.wait(10.0 * restarts)

        # the user runs `status --wait` right after the merge lands, as Flux starts the rollout
        thread = threading.Thread(target=timeline, daemon=True)
        proc_start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "kubectl_triton", "status", "--kubeconfig", str(kc),
                                 "--wait", "--timeout", "15m", "-o", "json"], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        thread.start()
        out, err = proc.communicate(timeout=120)
        end = time.monotonic()
        done.set()
        doc = json.loads(out)
        first = doc["models"][0]["reasons"][0]["code"] if doc["models"][0]["reasons"] else None
        assert c.violations == [], c.violations
        since_crash = end - marks["first_crash"]
        since_rollout = end - marks["rollout"]
        return {"exit": proc.returncode, "reason": first,
                "crash_at_s": round(marks["first_crash"] - marks["rollout"], 2),
                "verdict_after_crash_s": round(since_crash, 2), "verdict_after_rollout_s": round(since_rollout, 2),
                "process_wall_s": round(end - proc_start, 2),
                "requests": {"list": c.count("list"), "watch": c.count("watch"), "log": c.count("log"),
                             "proxy": c.count("proxy")},
                "rollout_status_s": PROGRESS_DEADLINE_S,
                "speedup": round(PROGRESS_DEADLINE_S / since_rollout, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--crash-at", type=float, default=5.0, help="seconds after the rollout starts")
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        print("API cost per `kubectl triton status` run (probes on; 10% of models crash-looping):")
        print(f"{'DEPLOYMENTS':<14}{'LIST+GET':<11}{'LOG':<6}{'PROXY':<8}{'FAILED':<9}{'WALL':<8}EXIT")
        for n in (10, 100):
            r = api_cost(n, n // 10, Path(tmp))
            print(f"{r['deployments']:<14}{r['list_get']:<11}{r['log']:<6}{r['proxy']:<8}"
                  f"{r['failed_models']:<9}{str(r['wall_s']) + 's':<8}{r['exit']}")
            ok &= r["list_get"] <= 8 and r["log"] == r["failing"]
        print()
        r = time_to_verdict(args.crash_at, Path(tmp))
        print("Time to verdict, `status --wait` on a rollout that crashes with the engine-mismatch log:")
        print(json.dumps(r, indent=2))
        print(f"verdict {r['reason']} (exit {r['exit']}) {r['verdict_after_crash_s']} s after the first crash, "
              f"{r['verdict_after_rollout_s']} s after the rollout started; `kubectl rollout status` reports "
              f"failure after the {PROGRESS_DEADLINE_S} s progress deadline: {r['speedup']}x sooner")
        ok &= r["exit"] == 1 and r["reason"] == "EngineGPUMismatch" and r["verdict_after_crash_s"] <= 10
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
