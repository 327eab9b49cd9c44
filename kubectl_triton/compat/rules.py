"""The compatibility rules: one engine against one deployment target, as coded reasons.

Each rule is a pure function (engine, target, gpu) -> reasons; `evaluate` runs them all for every
GPU model the target admits and turns the reasons into a verdict (True, False, or None = unknown).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from kubectl_triton.checks.findings import Severity
from kubectl_triton.compat.catalog import GPU, by_smi_name, cc_tuple
from kubectl_triton.compat.data import load
from kubectl_triton.compat.engine import EngineInfo

ERROR: Final = "error"
WARNING: Final = "warning"

# Every code this module can emit (stable: documented, used by tests and `validate`).
CODES = ("ArchMismatch", "PrecisionUnsupported", "GPUCountMismatch", "VersionMismatch",
         "InsufficientMemory", "BatchSizeExceedsEngine", "SeqLenExceedsEngine", "AmbiguousTarget",
         "UnknownBuildGPU", "UnknownGPU", "DeviceModelDiffers", "UnknownImage", "EngineNotRecorded")
MIB = 1024 * 1024


@dataclass(frozen=True)
class Reason:
    code: str
    severity: Severity
    message: str

    def as_dict(self) -> dict:
        return {"code": self.code, "severity": self.severity, "message": self.message}


@dataclass(frozen=True)
class Target:
    """Where an engine would run: the GPU models a pod may land on and what the pod gives it."""

    name: str                                   # how the user named it (key, label, overlay)
    gpus: tuple[GPU, ...] = ()                  # catalog entries the node selection admits
    unknown_labels: tuple[str, ...] = ()        # selected product labels not in the catalog
    unselected: bool = False                    # no nvidia.com/gpu.product selection at all
    image: str | None = None
    gpus_per_pod: int | None = None
    triton_max_batch_size: int | None = None
    max_input_len: int | None = None            # what the model asks for (model.yaml engine)
    max_seq_len: int | None = None              # model.yaml engine or max_attention_window_size
    kv_cache_free_gpu_mem_fraction: float | None = None
    max_tokens_in_paged_kv_cache: int | None = None
    memory_mib: int | None = None               # override (MIG slice)
    group_size: int = 1                         # pods of a LeaderWorkerSet group (multi-node), 1 for a Deployment


@dataclass
class Result:
    """One (model, GPU) pair's verdict; `as_dict` is the documented JSON shape."""

    model: str | None
    gpu: str
    compatible: bool | None
    reasons: list[Reason] = field(default_factory=list)
    overlay: str | None = None

    def as_dict(self) -> dict:
        return {"model": self.model, "gpu": self.gpu, "compatible": self.compatible,
                "reasons": [r.as_dict() for r in self.reasons]}

    @property
    def first_reason(self) -> Reason | None:
        return self.reasons[0] if self.reasons else None


def release_of(image: str) -> tuple[str | None, str]:
    """(Triton release "YY.MM" or None, tag) of an image reference."""
    ref = image.split("@", 1)[0]
    tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else ""
    m = re.match(r"^(\d{2}\.\d{2})(?:-|$)", tag)
    return (m.group(1) if m else None), tag


def image_versions(image: str) -> dict[str, str] | None:
    """TensorRT-LLM and TensorRT versions of a Triton trtllm image, from data/triton_images.yaml."""
    release, _ = release_of(image)
    return load("triton_images.yaml")["releases"].get(release) if release else None


def version_key(version: str | None) -> tuple[int, ...] | None:
    """Release part of a version (first three numbers): 0.17.0.post1 -> (0, 17, 0)."""
    if not version:
        return None
    nums = re.findall(r"\d+", version.split("+")[0])
    return tuple(int(n) for n in nums[:3]) if nums else None


def _cc(gpu: GPU) -> str:
    return gpu.compute_capability


# ---- rules -------------------------------------------------------------------------------------

def check_arch(engine: EngineInfo, target: Target, gpu: GPU) -> list[Reason]:
    """ArchMismatch / UnknownBuildGPU / DeviceModelDiffers from build-info.json."""
    bi = engine.build_info
    if bi is None:
        hint = f" (hint: build_config.auto_parallel_config.cluster_key is {engine.cluster_key!r}, " \
               "which is not evidence of the build GPU)" if engine.cluster_key else ""
        return [Reason("UnknownBuildGPU", WARNING,
                       f"no build-info.json: the GPU the engine was built on is unknown, so its "
                       f"compute capability cannot be compared with {gpu.key} ({_cc(gpu)}){hint}")]
    out = []
    built = by_smi_name(bi.gpu_name)
    if built is None:
        out.append(Reason("UnknownBuildGPU", WARNING,
                          f"build GPU {bi.gpu_name!r} is not in the GPU catalog; comparing its recorded "
                          f"compute capability {bi.compute_capability}"))
    if cc_tuple(bi.compute_capability) != cc_tuple(_cc(gpu)):
        out.append(Reason("ArchMismatch", ERROR,
                          f"engine built on {bi.gpu_name} (compute capability {bi.compute_capability}) "
                          f"cannot load on {gpu.key} (compute capability {_cc(gpu)}); "
                          f"rebuild it on {gpu.key}"))
    elif built is not None and built.key != gpu.key:
        out.append(Reason("DeviceModelDiffers", WARNING,
                          f"engine built on {bi.gpu_name}, deployed on {gpu.key}: same compute capability "
                          f"{_cc(gpu)}, so it loads, but TensorRT warns that performance may differ"))
    return out


def _support(table: dict, name: str | None, gpu: GPU, what: str) -> Reason | None:
    if not name:
        return None
    entry = table.get(name) or table.get(name.upper()) or table.get(name.lower())
    if entry is None:
        return None
    have = cc_tuple(_cc(gpu)) or (0, 0)
    label = entry.get("label", name)
    if "min" in entry and have < (cc_tuple(str(entry["min"])) or (0, 0)):
        return Reason("PrecisionUnsupported", ERROR,
                      f"{what} {label} needs compute capability >= {entry['min']}; "
                      f"{gpu.key} has {_cc(gpu)}")
    if "below" in entry and have >= (cc_tuple(str(entry["below"])) or (99, 0)):
        return Reason("PrecisionUnsupported", ERROR,
                      f"{what} {label} is not supported on compute capability >= {entry['below']}; "
                      f"{gpu.key} has {_cc(gpu)}")
    return None


def check_precision(engine: EngineInfo, target: Target, gpu: GPU) -> list[Reason]:
    """PrecisionUnsupported: dtype, quantization and KV-cache quantization by architecture."""
    p = load("precisions.yaml")
    found = [_support(p["dtypes"], engine.dtype, gpu, "dtype"),
             _support(p["quant_algos"], engine.quant_algo, gpu, "quantization"),
             _support(p["kv_cache"], engine.kv_cache_quant_algo, gpu, "KV cache")]
    return [r for r in found if r]


def check_gpu_count(engine: EngineInfo, target: Target, gpu: GPU) -> list[Reason]:
    """GPUCountMismatch: tp x pp must equal the pod's nvidia.com/gpu. A multi-node group's world (pods x GPUs) is
    checked against the engine by checks/manifests/multinode.py (WorldSizeMismatch), with the group's own terms."""
    want = engine.world_size
    if target.group_size > 1:
        return []
    if target.gpus_per_pod is None:
        return [Reason("GPUCountMismatch", ERROR,
                       f"engine needs {want} GPU(s) per pod (tp {engine.tp} x pp {engine.pp}); "
                       "the pod requests no nvidia.com/gpu")]
    if target.gpus_per_pod != want:
        return [Reason("GPUCountMismatch", ERROR,
                       f"engine needs {want} GPU(s) per pod (tp {engine.tp} x pp {engine.pp}); "
                       f"the pod gets nvidia.com/gpu: {target.gpus_per_pod}")]
    return []


def check_version(engine: EngineInfo, target: Target, gpu: GPU) -> list[Reason]:
    """VersionMismatch: the engine's TensorRT-LLM version against the image tag's."""
    if not target.image:
        return []
    _, tag = release_of(target.image)
    if tag and "trtllm" not in tag:
        return [Reason("VersionMismatch", ERROR,
                       f"image {target.image} is not a -trtllm- Triton image: "
                       "it has no TensorRT-LLM backend")]
    versions = image_versions(target.image)
    if versions is None:
        return [Reason("UnknownImage", WARNING,
                       f"image {target.image}: release not in the TensorRT-LLM version table; "
                       "engine version not checked")]
    have = versions["tensorrt_llm"]
    if engine.format == "legacy":
        return [Reason("VersionMismatch", ERROR,
                       f"pre-0.8 engine (config.json has no version) cannot be loaded by TensorRT-LLM "
                       f"{have} in {target.image}; rebuild it with that image")]
    if version_key(engine.version) != version_key(have):
        return [Reason("VersionMismatch", ERROR,
                       f"engine built with TensorRT-LLM {engine.version or 'unknown'}, image {target.image} "
                       f"runs TensorRT-LLM {have} (TensorRT {versions['tensorrt']}); rebuild the engine "
                       "with the serving image")]
    return []


def kv_bytes_per_token(engine: EngineInfo) -> float | None:
    """KV-cache bytes per token on one GPU: 2 (K and V) x layers/pp x kv heads/tp x head size x dtype."""
    if not (engine.num_layers and engine.num_kv_heads and engine.head_size):
        return None
    p = load("precisions.yaml")
    if engine.kv_cache_quant_algo:
        elem = (p["kv_cache"].get(engine.kv_cache_quant_algo) or {}).get("bytes")
    else:
        elem = p["dtype_bytes"].get(engine.dtype or "", None)
    if elem is None:
        return None
    layers = math.ceil(engine.num_layers / engine.pp)
    heads = math.ceil(engine.num_kv_heads / engine.tp)
    return 2.0 * layers * heads * engine.head_size * float(elem)


def check_memory(engine: EngineInfo, target: Target, gpu: GPU) -> list[Reason]:
    """InsufficientMemory: largest rank + one full-length sequence of KV cache + runtime must fit;
    warning when the KV cache at the configured fraction cannot hold max_batch_size sequences."""
    largest = engine.largest_rank_bytes
    if largest is None:
        return []
    mem = (target.memory_mib or gpu.memory_mib) * MIB
    reserve = load("precisions.yaml")["memory"]["runtime_reserve_mib"] * MIB
    per_token = kv_bytes_per_token(engine)
    seq = engine.max_seq_len or 0
    min_kv = (per_token or 0) * seq
    gib = 1024 ** 3
    if largest + min_kv + reserve > mem:
        return [Reason("InsufficientMemory", ERROR,
                       f"largest rank engine {largest / gib:.1f} GiB + KV cache for one {seq}-token sequence "
                       f"{min_kv / gib:.1f} GiB + runtime {reserve / gib:.1f} GiB exceed {gpu.key}'s "
                       f"{mem / gib:.1f} GiB")]
    if not per_token or not seq:
        return []
    fraction = target.kv_cache_free_gpu_mem_fraction
    if fraction is None:
        fraction = load("precisions.yaml")["memory"]["default_kv_cache_free_gpu_mem_fraction"]
    capacity = (mem - largest - reserve) * fraction / per_token
    if target.max_tokens_in_paged_kv_cache:
        capacity = min(capacity, target.max_tokens_in_paged_kv_cache)
    batch = engine.max_batch_size or 1
    if target.triton_max_batch_size:
        batch = min(batch, target.triton_max_batch_size)
    need = batch * seq
    if capacity < need:
        return [Reason("InsufficientMemory", WARNING,
                       f"KV cache at fraction {fraction:g} holds about {int(capacity)} tokens on {gpu.key}; "
                       f"{batch} full-length sequences need {need}: requests will queue")]
    return []


def check_batch(engine: EngineInfo, target: Target, gpu: GPU) -> list[Reason]:
    """BatchSizeExceedsEngine: Triton's max_batch_size above the engine's."""
    t, e = target.triton_max_batch_size, engine.max_batch_size
    if t and e and t > e:
        return [Reason("BatchSizeExceedsEngine", ERROR,
                       f"tensorrt_llm config.pbtxt max_batch_size {t} exceeds the engine's {e}")]
    return []


def check_seq_len(engine: EngineInfo, target: Target, gpu: GPU) -> list[Reason]:
    """SeqLenExceedsEngine: requested input/sequence lengths above the engine's build limits."""
    out = []
    for what, want, have in (("max_input_len", target.max_input_len, engine.max_input_len),
                             ("max_seq_len", target.max_seq_len, engine.max_seq_len)):
        if want and have and want > have:
            out.append(Reason("SeqLenExceedsEngine", ERROR,
                              f"requested {what} {want} exceeds the engine's {have}"))
    return out


GPU_RULES: tuple[Callable[[EngineInfo, Target, GPU], list[Reason]], ...] = (
    check_arch, check_precision, check_gpu_count, check_version, check_memory, check_batch,
    check_seq_len)


def target_reasons(target: Target) -> list[Reason]:
    """AmbiguousTarget / UnknownGPU: reasons about the node selection itself."""
    out = []
    if target.unselected:
        out.append(Reason("AmbiguousTarget", ERROR,
                          f"{target.name}: no nvidia.com/gpu.product node selection; "
                          "pods may land on any GPU type"))
    ccs = sorted({g.compute_capability for g in target.gpus})
    if len(ccs) > 1:
        names = ", ".join(f"{g.key} ({g.compute_capability})" for g in target.gpus)
        out.append(Reason("AmbiguousTarget", ERROR,
                          f"{target.name}: node selection admits GPUs of different compute "
                          f"capabilities: {names}"))
    for label in target.unknown_labels:
        out.append(Reason("UnknownGPU", ERROR,
                          f"{label!r} is not in the GPU catalog (key, GFD product label or nvidia-smi name)"))
    return out


def evaluate(engine: EngineInfo, target: Target, model: str | None = None) -> Result:
    """All rules for one engine and one target; errors first, duplicates dropped."""
    reasons = target_reasons(target)
    for gpu in target.gpus:
        for rule in GPU_RULES:
            reasons.extend(rule(engine, target, gpu))
    return make_result(model, target.name, reasons, arch_known=engine.build_info is not None)


def make_result(model: str | None, gpu: str, reasons: list[Reason], *, arch_known: bool = True,
                overlay: str | None = None) -> Result:
    """The verdict: False on any definite error, None when unknown (unknown GPU, no build info)."""
    unique = list(dict.fromkeys(reasons))
    unique.sort(key=lambda r: r.severity != ERROR)
    errors = [r for r in unique if r.severity == ERROR]
    if any(r.code not in ("UnknownGPU",) for r in errors):
        verdict: bool | None = False
    elif errors or not arch_known or any(r.code == "EngineNotRecorded" for r in unique):
        verdict = None
    else:
        verdict = True
    return Result(model=model, gpu=gpu, compatible=verdict, reasons=unique, overlay=overlay)
