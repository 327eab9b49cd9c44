#!/usr/bin/env python3
"""Record where a TensorRT-LLM engine was built: writes <engine_dir>/build-info.json and prints it
as one log line (`kubectl triton record-engine --from-job` reads that line back).

Runs inside the serving image right after trtllm-build, standard library only:
    python3 build-info.py --engine-dir /engines/llama3-8b/h100-80gb
GPU fields come from `nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader`,
versions from the installed tensorrt_llm and tensorrt packages (null when not installed), the
image from $TRITON_IMAGE (or --image).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

MARKER = "KUBECTL_TRITON_BUILD_INFO "
# Also logged, so `record-engine --from-job` can record the engine without reaching its volume.
CONFIG_MARKER = "KUBECTL_TRITON_ENGINE_CONFIG "
FILES_MARKER = "KUBECTL_TRITON_ENGINE_FILES "
SMI_QUERY = ["--query-gpu=name,compute_cap,memory.total", "--format=csv,noheader"]
DISTRIBUTIONS = {
    "tensorrt_llm_version": ("tensorrt_llm", "tensorrt-llm"),
    "tensorrt_version": ("tensorrt", "tensorrt-cu12", "tensorrt_cu12", "tensorrt-cu13", "tensorrt_cu12_libs"),
}


class BuildInfoError(Exception):
    """nvidia-smi missing, failing or printing something unexpected."""


def parse_smi(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader`:
    `NVIDIA H200, 9.0, 143771 MiB` -> {"gpu_name": "NVIDIA H200", "compute_capability": "9.0",
    "gpu_memory_mib": 143771}."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.rsplit(",", 2)]
        if len(parts) != 3:
            raise BuildInfoError(f"nvidia-smi line {number}: expected 3 fields: {line!r}")
        name, cc, memory = parts
        if not re.fullmatch(r"\d+\.\d+", cc):
            raise BuildInfoError(f"nvidia-smi line {number}: compute capability {cc!r} is not M.m")
        m = re.fullmatch(r"(\d+)\s*MiB", memory, re.IGNORECASE)
        if not m:
            raise BuildInfoError(f"nvidia-smi line {number}: memory {memory!r} is not '<n> MiB'")
        rows.append({"gpu_name": name, "compute_capability": cc, "gpu_memory_mib": int(m.group(1))})
    if not rows:
        raise BuildInfoError("nvidia-smi listed no GPU")
    return rows


def pick_gpu(rows: list[dict]) -> dict:
    """The build GPU: all GPUs of the pod must be the same model (an engine is built for one)."""
    kinds = {(r["gpu_name"], r["compute_capability"]) for r in rows}
    if len(kinds) > 1:
        raise BuildInfoError("GPUs of different models in one build pod: "
                             + "; ".join(f"{n} ({c})" for n, c in sorted(kinds)))
    return rows[0]


def package_version(names: tuple[str, ...]) -> str | None:
    """Version of the first installed distribution among `names`, else None."""
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def build_info(gpu: dict, versions: dict, image: str | None, now: datetime) -> dict:
    """build-info.json's document, keys in the documented order."""
    return {
        "gpu_name": gpu["gpu_name"],
        "compute_capability": gpu["compute_capability"],
        "gpu_memory_mib": gpu["gpu_memory_mib"],
        "tensorrt_llm_version": versions.get("tensorrt_llm_version"),
        "tensorrt_version": versions.get("tensorrt_version"),
        "image": image or None,
        "built_at": now.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }


def run_smi(executable: str) -> str:
    try:
        proc = subprocess.run([executable, *SMI_QUERY], capture_output=True, text=True, check=False,
                              timeout=60)
    except FileNotFoundError:
        raise BuildInfoError(f"{executable}: not found (is this pod running on a GPU node?)") from None
    except subprocess.TimeoutExpired:
        raise BuildInfoError(f"{executable}: timed out") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise BuildInfoError(f"{executable} exited {proc.returncode}: {detail[-1] if detail else ''}")
    return proc.stdout


def engine_files(engine_dir: str) -> dict:
    """Sizes of the rank engine files (rank0.engine, or pre-0.8 <model>_<dtype>_tp<N>_rank0.engine)."""
    out = {}
    for name in sorted(os.listdir(engine_dir)):
        if re.search(r"(?:^|_)rank\d+\.engine$", name) and os.path.isfile(os.path.join(engine_dir, name)):
            out[name] = os.path.getsize(os.path.join(engine_dir, name))
    return out


def write_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".build-info.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-dir", default=os.environ.get("ENGINE_DIR"),
                        help="engine directory to write build-info.json into (default $ENGINE_DIR)")
    parser.add_argument("--image", default=os.environ.get("TRITON_IMAGE"),
                        help="serving image the engine was built in (default $TRITON_IMAGE)")
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi executable")
    args = parser.parse_args(argv)
    if not args.engine_dir:
        parser.error("--engine-dir (or $ENGINE_DIR) is required")
    try:
        gpu = pick_gpu(parse_smi(run_smi(args.nvidia_smi)))
    except BuildInfoError as err:
        print(f"build-info: error: {err}", file=sys.stderr)
        return 1
    versions = {key: package_version(names) for key, names in DISTRIBUTIONS.items()}
    doc = build_info(gpu, versions, args.image, datetime.now(timezone.utc))
    write_atomic(os.path.join(args.engine_dir, "build-info.json"), json.dumps(doc, indent=2) + "\n")
    print(MARKER + json.dumps(doc, separators=(",", ":")), flush=True)
    config = os.path.join(args.engine_dir, "config.json")
    if os.path.isfile(config):
        with open(config, encoding="utf-8") as fh:
            print(CONFIG_MARKER + json.dumps(json.load(fh), separators=(",", ":")), flush=True)
    files = engine_files(args.engine_dir)
    if files:
        print(FILES_MARKER + json.dumps(files, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
