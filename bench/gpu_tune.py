"""`bench` and `tune` through the plugin itself against a torchvision ResNet-50 (random weights, FP16) served by
Triton's python backend on a GPU: throughput, p99 and GPU utilisation at concurrency 1, 16 and 64, without
batching (the served config) and with the configuration `tune` chose (written into config.pbtxt by --write,
then loaded from that file).

Runs on the GPU machine (see docs/bench-tune.md, "On a GPU"): the tritonserver of the nvidia-pytriton wheel in
a slim form (server, libraries, python backend, the 3.12 stub) and NumPy 1.26 for the stub (built against
NumPy 1.x) are unpacked from --bundle; the plugin runs from this checkout. GPU utilisation is sampled through
NVML (nvidia-ml-py) every 100 ms while each `bench` runs (its warm-up excluded), and Triton's own
`nv_gpu_utilization` metric is read at the same time when the server exports it.

Run: python3 bench/gpu_tune.py --triton DIR --numpy DIR --out DIR [--duration 8s] [--tune-duration 4s]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubectl_triton.adapters.tritonserver import TritonInstall, TritonServer  # noqa: E402

MODEL = "resnet50"
LEVELS = (1, 16, 64)
CONFIG = """# torchvision ResNet-50, random weights, FP16, on the GPU through the python backend
name: "resnet50"
backend: "python"
max_batch_size: 64
input [ { name: "INPUT" data_type: TYPE_FP16 dims: [ 3, 224, 224 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP16 dims: [ 1000 ] } ]
instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]
"""
MODEL_PY = '''import torch
import torchvision
import triton_python_backend_utils as pb_utils
from torch.utils.dlpack import from_dlpack, to_dlpack


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda:" + str(args.get("model_instance_device_id", "0")))
        torch.manual_seed(0)
        self.model = torchvision.models.resnet50(weights=None).eval().half().to(self.device)
        with torch.inference_mode():
            for b in (1, 2, 4, 8, 16, 32, 64):
                self.model(torch.rand(b, 3, 224, 224, dtype=torch.half, device=self.device))
        torch.cuda.synchronize(self.device)
        self.staging = torch.empty(64, 3, 224, 224, dtype=torch.half).pin_memory()  # one copy in, async upload
        self.dlpack = True

    def _input(self, request):
        t = pb_utils.get_input_tensor_by_name(request, "INPUT")
        if self.dlpack:
            try:
                return from_dlpack(t.to_dlpack())
            except Exception:
                self.dlpack = False
        return torch.from_numpy(t.as_numpy())

    def _output(self, y):
        if self.dlpack:
            return pb_utils.Tensor.from_dlpack("OUTPUT", to_dlpack(y))
        return pb_utils.Tensor("OUTPUT", y.numpy())

    def execute(self, requests):
        xs = [self._input(r) for r in requests]
        n = sum(part.shape[0] for part in xs)
        x = torch.cat(xs, out=self.staging[:n]).to(self.device, non_blocking=True)
        with torch.inference_mode():
            y = self.model(x).cpu()
        out, i = [], 0
        for part in xs:
            n = part.shape[0]
            out.append(pb_utils.InferenceResponse([self._output(y[i:i + n].contiguous())]))
            i += n
        return out
'''


IDENTITY = "identity"  # same tensors, no GPU: the ceiling of the host path (client, HTTP, python backend)
IDENTITY_CONFIG = """# returns its input's first 1000 values: the same request and response bytes as resnet50, no model
name: "identity"
backend: "python"
max_batch_size: 64
input [ { name: "INPUT" data_type: TYPE_FP16 dims: [ 3, 224, 224 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP16 dims: [ 1000 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { }
"""
IDENTITY_PY = '''import torch
import triton_python_backend_utils as pb_utils
from torch.utils.dlpack import from_dlpack, to_dlpack


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = from_dlpack(pb_utils.get_input_tensor_by_name(r, "INPUT").to_dlpack())
            y = x.reshape(x.shape[0], -1)[:, :1000].contiguous()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor.from_dlpack("OUTPUT", to_dlpack(y))]))
        return out
'''


class GpuSampler:
    """NVML utilisation.gpu every 100 ms in a thread; `mean(t0, t1)` over a time range."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.name = pynvml.nvmlDeviceGetName(self.handle)
        self.samples: list[tuple[float, int, int]] = []
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            u = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
            self.samples.append((time.monotonic(), u.gpu, u.memory))
            time.sleep(0.1)

    def mean(self, t0: float, t1: float) -> float | None:
        vals = [g for t, g, _ in self.samples if t0 <= t <= t1]
        return round(sum(vals) / len(vals), 1) if vals else None


def triton_gpu_util(metrics_url: str) -> float | None:
    """Triton's nv_gpu_utilization (0..1) from its metrics endpoint, as a percentage; None if absent."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("nv_gpu_utilization{"):
            return round(float(line.rsplit(" ", 1)[1]) * 100, 1)
    return None


def plugin(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.environ.get("PLUGIN_PYTHONPATH", str(ROOT))}
    env.pop("PYTHONHOME", None)
    return subprocess.run([sys.executable, "-m", "kubectl_triton", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env)


def poll_triton(server: TritonServer, warmup_s: float, stop: threading.Event, into: list[float]) -> None:
    """Triton's nv_gpu_utilization once a second after the warm-up, until `stop`."""
    time.sleep(warmup_s)
    while not stop.wait(1.0):
        v = triton_gpu_util(f"http://127.0.0.1:{server.metrics_port}/metrics")
        if v is not None:
            into.append(v)


def bench_levels(server: TritonServer, sampler: GpuSampler, duration: str, warmup_s: float, log: Path,
                 label: str) -> list[dict]:
    """`kubectl triton bench` once per level (so each level's GPU utilisation is its own)."""
    rows = []
    for c in LEVELS:
        t0 = time.monotonic()
        trit: list[float] = []
        stop = threading.Event()

        th = threading.Thread(target=poll_triton, args=(server, warmup_s, stop, trit), daemon=True)
        th.start()
        cmd = ["bench", MODEL, "--url", server.http_url, "--concurrency", str(c), "--duration", duration,
               "--warmup", f"{warmup_s:g}s", "-o", "json"]
        proc = plugin(*cmd)
        t1 = time.monotonic()
        stop.set()
        with log.open("a") as f:
            f.write(f"$ kubectl triton {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
        if proc.returncode != 0:
            raise SystemExit(f"bench failed ({proc.returncode}): {proc.stderr.strip()}")
        r = json.loads(proc.stdout)["results"][0]
        r["gpu_util_nvml"] = sampler.mean(t0 + warmup_s + 1.0, t1 - 0.5)
        r["gpu_util_triton"] = round(sum(trit) / len(trit), 1) if trit else None
        r["config"] = label
        rows.append(r)
        print(f"  {label:9} concurrency {c:3}: {r['throughput']:8.1f}/s  p99 {r['p99_ms']:7.1f} ms  "
              f"batch {r['batch']}  GPU {r['gpu_util_nvml']}% (NVML) {r['gpu_util_triton']}% (Triton)", flush=True)
    return rows


def grpc_level(server: TritonServer, sampler: GpuSampler, duration: str, warmup_s: float, log: Path,
               label: str, concurrency: int, model: str = MODEL, protocol: str = "grpc") -> dict:
    """One more level, over gRPC (is the HTTP client the limit?) or of another model."""
    url = f"127.0.0.1:{server.grpc_port}" if protocol == "grpc" else server.http_url
    cmd = ["bench", model, "--url", url, "--protocol", protocol, "--concurrency",
           str(concurrency), "--duration", duration, "--warmup", f"{warmup_s:g}s", "-o", "json"]
    t0 = time.monotonic()
    proc = plugin(*cmd)
    t1 = time.monotonic()
    with log.open("a") as f:
        f.write(f"$ kubectl triton {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        return {"config": label, "error": proc.stderr.strip()}
    r = json.loads(proc.stdout)["results"][0]
    r.update(config=label, gpu_util_nvml=sampler.mean(t0 + warmup_s + 1.0, t1 - 0.5), gpu_util_triton=None)
    print(f"  {label:9} concurrency {concurrency:3}: {r['throughput']:8.1f}/s  p99 {r['p99_ms']:7.1f} ms  "
          f"batch {r['batch']}  GPU {r['gpu_util_nvml']}% (NVML)", flush=True)
    return r


def gpu_capacity() -> list[dict]:
    """The model alone on the GPU (no server): ms per forward at each batch size, timed with CUDA events."""
    import torch
    import torchvision

    model = torchvision.models.resnet50(weights=None).eval().half().cuda()
    out = []
    with torch.inference_mode():
        for b in (1, 8, 16, 32, 64):
            x = torch.rand(b, 3, 224, 224, dtype=torch.half, device="cuda")
            for _ in range(5):
                model(x)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for _ in range(20):
                start.record()
                model(x)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            ms = sorted(times)[len(times) // 2]
            out.append({"batch": b, "forward_ms": round(ms, 3), "images_per_s": round(b / ms * 1e3, 1)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--triton", required=True, help="the unpacked slim tritonserver (bin/ lib/ backends/ stub/)")
    ap.add_argument("--numpy", required=True, help="a folder holding NumPy 1.26 for the python backend stub")
    ap.add_argument("--out", required=True)
    ap.add_argument("--duration", default="8s")
    ap.add_argument("--tune-duration", default="4s")
    ap.add_argument("--tune-concurrency", default="64")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "commands.log"
    work = Path("/tmp/gpu-tune")
    shutil.rmtree(work, ignore_errors=True)
    repo = work / "models"
    (repo / MODEL / "1").mkdir(parents=True)
    (repo / MODEL / "config.pbtxt").write_text(CONFIG)
    (repo / MODEL / "1" / "model.py").write_text(MODEL_PY)
    (repo / IDENTITY / "1").mkdir(parents=True)
    (repo / IDENTITY / "config.pbtxt").write_text(IDENTITY_CONFIG)
    (repo / IDENTITY / "1" / "model.py").write_text(IDENTITY_PY)
    gitops = work / "gitops"  # a GitOps repository holding the same config, for tune --write
    (gitops / "overlays").mkdir(parents=True)
    (gitops / "models" / "resnet50" / MODEL).mkdir(parents=True)
    (gitops / "models" / "resnet50" / MODEL / "config.pbtxt").write_text(CONFIG)

    # the stub embeds this interpreter's libpython and needs its site-packages (torch) and NumPy 1.26 first
    import torch

    site = str(Path(torch.__file__).resolve().parents[1])
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    init = work / "pyinit"  # the stub's interpreter gets this environment's site-packages (.pth files included)
    init.mkdir()
    (init / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({site!r})\n")
    os.environ["PYTHONPATH"] = os.pathsep.join([args.numpy, str(init)])
    os.environ["PYTHONHOME"] = sys.base_prefix
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    tri = Path(args.triton)
    install = TritonInstall(binary=tri / "bin" / "tritonserver", libs_dir=tri / "lib",
                            backends_dir=tri / "backends", stub=tri / "stub" / "triton_python_backend_stub")
    sampler = GpuSampler()
    env_doc = {"gpu": sampler.name, "python": sys.version.split()[0], "torch": torch.__version__,
               "site": site, "libdir": libdir}
    print(f"GPU {sampler.name}; python {env_doc['python']}; torch {torch.__version__}", flush=True)
    warmup_s = 2.0
    server = TritonServer(repo, model_control_mode="explicit", install=install,
                          extra_args=[f"--load-model={MODEL}", f"--load-model={IDENTITY}",
                                      "--backend-config=python,shm-default-byte-size=67108864",
                                      "--backend-config=python,shm-growth-byte-size=67108864"])
    result: dict = {"env": env_doc, "levels": LEVELS}
    t_start = time.monotonic()
    try:
        server.start(timeout=240)
        server.wait_ready(240)
        print(f"tritonserver ready in {time.monotonic() - t_start:.0f} s", flush=True)
        result["untuned"] = bench_levels(server, sampler, args.duration, warmup_s, log, "untuned")
        result["untuned_grpc"] = grpc_level(server, sampler, args.duration, warmup_s, log, "untuned", 64)
        (out / "gpu-tune.json").write_text(json.dumps(result, indent=2))

        cmd = ["tune", MODEL, "--url", server.http_url, "--concurrency", args.tune_concurrency, "--duration",
               args.tune_duration, "--write", "--repo", str(gitops), "-o", "json"]
        t0 = time.monotonic()
        proc = plugin(*cmd)
        result["tune_wall_s"] = round(time.monotonic() - t0, 1)
        with log.open("a") as f:
            f.write(f"$ kubectl triton {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
        if proc.returncode != 0:
            raise SystemExit(f"tune failed ({proc.returncode}): {proc.stderr.strip()}")
        tuned = json.loads(proc.stdout)
        result["tune"] = tuned
        result["served_config_restored"] = "dynamic_batching" not in server.request(
            "GET", f"/v2/models/{MODEL}/config")
        written = (gitops / "models" / "resnet50" / MODEL / "config.pbtxt").read_text()
        result["written_config"] = written
        print(f"tune: best {json.dumps(tuned['best'])} after {tuned['measurements']} measurements "
              f"({result['tune_wall_s']} s)", flush=True)
        (out / "gpu-tune.json").write_text(json.dumps(result, indent=2))

        # serve what tune wrote: the written config.pbtxt replaces the served one, loaded from disk
        (repo / MODEL / "config.pbtxt").write_text(written)
        server.request("POST", f"/v2/repository/models/{MODEL}/load", {}, timeout=300)
        result["tuned"] = bench_levels(server, sampler, args.duration, warmup_s, log, "tuned")
        result["tuned_grpc"] = grpc_level(server, sampler, args.duration, warmup_s, log, "tuned", 64)
        result["host_ceiling"] = [grpc_level(server, sampler, args.duration, warmup_s, log, f"identity ({proto})", 64,
                                             IDENTITY, proto) for proto in ("http", "grpc")]
    finally:
        result["wall_s"] = round(time.monotonic() - t_start, 1)
        (out / "gpu-tune.json").write_text(json.dumps(result, indent=2))
        (out / "tritonserver.log").write_text(server.log[-200_000:])
        server.stop()
    result["gpu_capacity"] = gpu_capacity()
    print("the model alone on the GPU:", json.dumps(result["gpu_capacity"]), flush=True)
    sampler.stop.set()
    (out / "gpu-tune.json").write_text(json.dumps(result, indent=2))
    print(table(result))
    (out / "gpu-tune.md").write_text(table(result) + "\n")


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value}%"


def table(result: dict) -> str:
    lines = ["| config | concurrency | throughput/s | p50 ms | p99 ms | batch | GPU util (NVML) | GPU util (Triton) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key in ("untuned", "tuned"):
        grpc = result.get(f"{key}_grpc")
        for r in [*(result.get(key) or []), *([grpc] if grpc and "error" not in grpc else [])]:
            if r is grpc:
                key = f"{key} (gRPC)"
            lines.append(f"| {key} | {r['concurrency']} | {r['throughput']:.1f} | {r['p50_ms']:.1f} | "
                         f"{r['p99_ms']:.1f} | {r['batch']} | {pct(r['gpu_util_nvml'])} | "
                         f"{pct(r['gpu_util_triton'])} |")
    for r in result.get("host_ceiling") or []:
        if "error" not in r:
            lines.append(f"| {r['config']}, no GPU work | {r['concurrency']} | {r['throughput']:.1f} | "
                         f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['batch']} | {pct(r['gpu_util_nvml'])} | - |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
