"""`tune --objective goodput` on a GPU (issue 27): a GPT-2-sized decoder (12 layers, 768 wide, random weights,
FP16, a KV cache slot per sequence) in bench/llm_models.py's in-flight batching engine, served by Triton's
python backend as a decoupled model that streams a response per token, measured and tuned through the plugin
itself over gRPC.

1. every setting of a small space measured once (`tune --objective goodput --exhaustive`);
2. `tune --objective goodput` over the same space as a user runs it, writing the winner into a GitOps copy;
3. the served setting and the written config.pbtxt (loaded from disk) measured alternately, three windows each:
   TTFT, ITL, TPOT, tokens/s and goodput before and after.

Runs on the GPU machine with the folder bench/gpu_prepare.sh builds (see bench/results/README.md):
    python3 bench/gpu_llm.py --triton DIR --numpy DIR --out DIR [--concurrency 64] [--duration 8s]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gpu_tune import GpuSampler, plugin  # noqa: E402
from llm_models import write_model  # noqa: E402

from kubectl_triton.adapters.tritonserver import TritonInstall, TritonServer  # noqa: E402

MODEL = "gpt2"
SERVED = {"max_num_seqs": 4, "max_num_tokens": 512, "kv_fraction": 0.5, "policy": "guaranteed_no_evict",
          "chunked": "false"}


def tune_args(server: TritonServer, a: argparse.Namespace, *extra: str) -> list[str]:
    return ["tune", MODEL, "--url", f"127.0.0.1:{server.grpc_port}", "--protocol", "grpc", "--objective", "goodput",
            "--max-ttft", a.max_ttft, "--max-itl", a.max_itl, "--concurrency", str(a.concurrency), "--duration",
            a.duration, "--warmup", "2s", "--prompt-tokens", str(a.prompt_tokens), "--output-tokens",
            str(a.output_tokens), "--param", a.seqs, "--param", "enable_chunked_context=false,true", "--instances", "1",
            *extra, "-o", "json"]


def run_plugin(cmd: list[str], log: Path) -> tuple[int, dict | None, str]:
    t0 = time.monotonic()
    proc = plugin(*cmd)
    with log.open("a") as f:
        f.write(f"$ kubectl triton {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n"
                f"# exit {proc.returncode} after {time.monotonic() - t0:.0f} s\n")
    try:
        doc = json.loads(proc.stdout) if proc.stdout.strip() else None
    except ValueError:
        doc = None
    return proc.returncode, doc, proc.stderr.strip()


def before_after(server: TritonServer, a: argparse.Namespace, repo: Path, written: str, windows: int) -> dict:
    """The served config and the written one, each loaded from disk, measured alternately."""
    from kubectl_triton.perf import streaming
    from kubectl_triton.perf.target import GrpcTarget

    target = GrpcTarget(f"127.0.0.1:{server.grpc_port}", MODEL)
    served = (repo / MODEL / "config.pbtxt").read_text()
    slo = streaming.Slo(float(a.max_ttft.rstrip("ms")), float(a.max_itl.rstrip("ms")))
    out: dict = {"served": [], "tuned": []}
    duration_s = float(a.duration.rstrip("s"))
    try:
        for _ in range(windows):
            for label, text in (("served", served), ("tuned", written)):
                (repo / MODEL / "config.pbtxt").write_text(text)
                target.load(None)
                reqs = streaming.llm_requests(target.config(), a.prompt_tokens, a.output_tokens)
                r = streaming.run_stream_level(target, reqs, a.concurrency, duration_s, 2.0, slo)
                out[label].append(r.to_dict())
                print(f"  {label}: goodput {r.goodput:.2f}/s TTFT p99 {r.ttft_p99_ms:.0f} ms TPOT p99 "
                      f"{r.tpot_p99_ms:.1f} ms {r.output_tokens_per_s:.0f} tokens/s", flush=True)
    finally:
        (repo / MODEL / "config.pbtxt").write_text(served)
        target.load(None)
        target.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--triton", required=True)
    ap.add_argument("--numpy", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--duration", default="8s")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--max-ttft", default="250ms")
    ap.add_argument("--max-itl", default="25ms")
    ap.add_argument("--loose-ttft", default=None)
    ap.add_argument("--loose-itl", default=None)
    ap.add_argument("--seqs", default="max_num_seqs=4,8,16,32,64")
    ap.add_argument("--max-trials", default=None, help="tune's --max-trials (default: tune's own budget)")
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="first two streamed levels (is the engine sound?)")
    ap.add_argument("--smoke-only", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "commands.log"
    work = Path("/tmp/gpu-llm")
    shutil.rmtree(work, ignore_errors=True)
    repo = work / "models"
    # token ids in and out (the tensorrt_llm model's interface): on the GPU machine tritonserver 2.51's python
    # backend handed a string input to the 3.12 stub unfilled (0xE3E3E3E3 as the first string's length) and the stub
    # died, with KIND_GPU and KIND_CPU alike
    write_model(repo, MODEL, engine="torch", kind="KIND_GPU", interface="ids", **SERVED)
    gitops = work / "gitops"
    (gitops / "overlays").mkdir(parents=True)
    (gitops / "models" / MODEL / MODEL).mkdir(parents=True)
    shutil.copy(repo / MODEL / "config.pbtxt", gitops / "models" / MODEL / MODEL / "config.pbtxt")

    import torch

    site = str(Path(torch.__file__).resolve().parents[1])
    init = work / "pyinit"
    init.mkdir()
    (init / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({site!r})\n")
    os.environ["PYTHONPATH"] = os.pathsep.join([a.numpy, str(init)])
    os.environ["PYTHONHOME"] = sys.base_prefix
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    tri = Path(a.triton)
    install = TritonInstall(binary=tri / "bin" / "tritonserver", libs_dir=tri / "lib",
                            backends_dir=tri / "backends", stub=tri / "stub" / "triton_python_backend_stub")
    sampler = GpuSampler()
    result: dict = {"env": {"gpu": sampler.name, "python": sys.version.split()[0], "torch": torch.__version__},
                    "args": vars(a), "served": SERVED}
    print(f"GPU {sampler.name}; torch {torch.__version__}", flush=True)
    server = TritonServer(repo, model_control_mode="explicit", install=install, extra_args=[f"--load-model={MODEL}"])
    t_start = time.monotonic()
    try:
        server.start(timeout=240)
        server.wait_ready(240)
        print(f"tritonserver ready in {time.monotonic() - t_start:.0f} s", flush=True)
        if a.smoke:
            from kubectl_triton.perf import streaming
            from kubectl_triton.perf.target import GrpcTarget

            t = GrpcTarget(f"127.0.0.1:{server.grpc_port}", MODEL)
            reqs = streaming.llm_requests(t.config(), a.prompt_tokens, a.output_tokens)
            for c in (1, a.concurrency):
                r = streaming.run_stream_level(t, reqs, c, 4.0, 1.0, streaming.Slo(250, 25))
                result.setdefault("smoke", []).append(r.to_dict())
                print(json.dumps(r.to_dict()), flush=True)
            if a.smoke_only:
                return
            server.request("POST", f"/v2/repository/models/{MODEL}/load", {}, timeout=300)
        t0 = time.monotonic()
        rc, sweep, err = run_plugin(tune_args(server, a, "--exhaustive"), log)
        result["sweep"] = {"exit": rc, "stderr": err, "wall_s": round(time.monotonic() - t0, 1), "doc": sweep}
        print(f"sweep: exit {rc}, best {json.dumps((sweep or {}).get('best'))}", flush=True)
        (out / "gpu-llm.json").write_text(json.dumps(result, indent=1))
        budget = ["--max-trials", a.max_trials] if a.max_trials else []
        t0 = time.monotonic()
        rc, found, err = run_plugin(tune_args(server, a, *budget, "--write", "--repo", str(gitops)), log)
        result["tune"] = {"exit": rc, "stderr": err, "wall_s": round(time.monotonic() - t0, 1), "doc": found}
        print(f"tune: exit {rc}, best {json.dumps((found or {}).get('best'))} {err}", flush=True)
        if rc == 1 and a.loose_ttft:  # nothing met the targets: once more with the looser ones
            a.max_ttft, a.max_itl = a.loose_ttft, a.loose_itl
            rc, found, err = run_plugin(tune_args(server, a, *budget, "--write", "--repo", str(gitops)), log)
            result["tune_loose"] = {"exit": rc, "stderr": err, "doc": found}
            print(f"tune (looser targets): exit {rc}, best {json.dumps((found or {}).get('best'))} {err}", flush=True)
        (out / "gpu-llm.json").write_text(json.dumps(result, indent=1))
        if rc == 0:
            written = (gitops / "models" / MODEL / MODEL / "config.pbtxt").read_text()
            result["written_config"] = written
            result["before_after"] = before_after(server, a, repo, written, a.windows)
    finally:
        result["wall_s"] = round(time.monotonic() - t_start, 1)
        (out / "gpu-llm.json").write_text(json.dumps(result, indent=1))
        (out / "tritonserver.log").write_text(server.log[-200_000:])
        server.stop()
        sampler.stop.set()


if __name__ == "__main__":
    main()
