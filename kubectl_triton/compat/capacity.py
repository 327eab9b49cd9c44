"""KV-cache capacity and memory fit before anything is deployed: a pure estimator (no I/O).

From a model's Architecture (compat/hfconfig.py), the precision of its weights and of its KV cache, tp x pp and
one GPU's memory, `estimate` gives a CapacityPlan: weights per GPU, the runtime reserve, KV-cache bytes per token,
the tokens the KV cache holds at the backend's memory fraction and the concurrent sequences of a given length.

The two backends size the KV cache differently (docs/capacity.md has the formulas and the real-log comparison):

- TensorRT-LLM: `kv_cache_free_gpu_mem_fraction` (default 0.9) of the memory FREE once the engine's weights and
  runtime buffers are loaded: kv = fraction x (usable - weights - reserve).
- vLLM: `gpu_memory_utilization` (default 0.9) of the TOTAL memory, minus weights and the profiled peak
  (activations, non-torch memory, CUDA graphs): kv = fraction x usable - weights - reserve.

`usable` is the catalog's memory (nvidia-smi memory.total) less what the driver keeps out of cudaMemGetInfo's
total. The reserves are one documented constant per backend, never fitted per model."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from kubectl_triton.compat.data import load
from kubectl_triton.compat.hfconfig import Architecture
from kubectl_triton.errors import InputError

MIB = 2**20
GIB = 2**30

# nvidia-smi's memory.total minus cudaMemGetInfo's total (what the driver keeps): H100 SXM 81,559 MiB vs 79.18 GiB,
# RTX 3090 24,576 MiB vs 23.58 GiB (the logs of tests/fixtures/kv_capacity_cases.yaml): about 480 MiB.
DRIVER_RESERVED_MIB = 480
# vLLM's profiled peak besides weights and KV cache: PyTorch activation peak + non-torch memory (CUDA context, NCCL)
# + CUDA graphs. The ten logs of tests/fixtures/kv_capacity_cases.yaml that let it be read off give 0.44-8.1 GiB,
# median 4.875 GiB: that median, one value for every model (docs/capacity.md: in-sample for this one number).
VLLM_RESERVE_MIB = 4992

# Bytes per weight of the linear layers by precision (int4: a 16-bit scale per group of 128 weights on top;
# NVFP4: an FP8 scale per 16). Embeddings and the LM head stay in the activation dtype.
WEIGHT_BYTES: dict[str, float] = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "fp8": 1.0, "int8": 1.0,
                                  "int4": 0.5 + 2 / 128, "nvfp4": 0.5 + 1 / 16}
# Bytes per KV-cache element.
KV_BYTES: dict[str, float] = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "fp8": 1.0, "int8": 1.0,
                              "nvfp4": 0.5 + 1 / 16}
# Spellings users and config files write for these precisions (model.yaml engine.quantization included).
_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
            "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "e4m3": "fp8", "w8a8": "int8", "w8a16": "int8",
            "int8_sq": "int8", "w4a16": "int4", "int4_awq": "int4", "awq": "int4", "gptq": "int4", "w4a8": "int4",
            "fp4": "nvfp4", "mxfp4": "nvfp4"}
_ACTIVATION = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Backend:
    """How one serving backend sizes its KV cache."""

    name: str
    memory_fraction: float  # the default of its memory knob
    fraction_of: str  # "free": of the memory left after loading (TensorRT-LLM); "total": of all memory (vLLM)
    reserve_mib: int  # activations, runtime buffers and CUDA context besides weights and KV cache
    block_tokens: int  # tokens per KV-cache block (the cache holds whole blocks)
    parallel_embedding: bool  # the embedding table is split across tp ranks (the LM head always is)
    knob: str  # the parameter users set


def backends() -> dict[str, Backend]:
    """The two backends; TensorRT-LLM's reserve and default fraction come from data/precisions.yaml (`memory:`,
    shared with validate's MemoryFit)."""
    memory = load("precisions.yaml")["memory"]
    return {
        "tensorrtllm": Backend("tensorrtllm", float(memory["default_kv_cache_free_gpu_mem_fraction"]), "free",
                               int(memory["runtime_reserve_mib"]), 32, False, "kv_cache_free_gpu_mem_fraction"),
        "vllm": Backend("vllm", 0.9, "total", VLLM_RESERVE_MIB, 16, True, "gpu_memory_utilization"),
    }


def precision(value: str | None, table: dict[str, float], what: str) -> str | None:
    """The canonical name of a precision (None for none/auto/empty); an unknown one is an InputError."""
    if value is None:
        return None
    text = str(value).strip().lower().replace("-", "_")
    if text in ("", "none", "auto"):
        return None
    name = _ALIASES.get(text, text)
    if name not in table:
        known = ", ".join(sorted(table))
        raise InputError(f"unknown {what} {value!r} (known: {known})")
    return name


@dataclass(frozen=True)
class CapacityPlan:
    """What one (model, GPU type, tp x pp, precisions, memory fraction, backend) leaves for the KV cache."""

    model: str
    gpu: str
    gpu_memory_mib: int
    backend: str
    tp: int
    pp: int
    dtype: str
    weights: str  # precision of the linear weights
    kv_cache_dtype: str
    memory_fraction: float
    weights_bytes: int  # per GPU (the heaviest pipeline stage)
    reserve_bytes: int
    kv_cache_bytes: int  # per GPU; 0 when nothing is left
    kv_bytes_per_token: int  # per GPU
    block_tokens: int
    kv_tokens: int  # tokens the KV cache holds (whole blocks)
    sequence_len: int
    max_concurrency: float  # kv_tokens / sequence_len, as vLLM logs "Maximum concurrency"
    concurrent_sequences: int  # whole sequences of sequence_len that fit at once
    status: str  # fits | no-memory (weights and reserve exceed the GPU) | short (not one full sequence)

    @property
    def fits(self) -> bool:
        return self.status == "fits"

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def as_dict(self) -> dict[str, Any]:
        """The stable `-o json|yaml` record (docs/capacity.md lists the keys)."""
        out = asdict(self)
        out["gpus"] = self.gpus
        out["weights_gib"] = round(self.weights_bytes / GIB, 2)
        out["kv_cache_gib"] = round(self.kv_cache_bytes / GIB, 2)
        out["max_concurrency"] = round(self.max_concurrency, 2)
        return out


def stage_weight_bytes(arch: Architecture, *, tp: int, pp: int, weight_bytes: float, activation_bytes: float,
                       parallel_embedding: bool) -> int:
    """Weights one GPU holds: its pipeline stage's layers (linear weights at `weight_bytes`, split over tp), plus
    the embedding table on the first stage and the LM head on the last (at `activation_bytes`; a tied LM head
    reuses the table when one stage holds both, else the last stage keeps a copy). The heaviest stage counts."""
    per_stage = math.ceil(arch.num_layers / pp)
    embed = arch.embedding_params * activation_bytes / (tp if parallel_embedding else 1)
    head = arch.vocab_size * arch.hidden_size * activation_bytes / tp
    worst = 0.0
    for stage in range(pp):
        layers = range(stage * per_stage, min(arch.num_layers, (stage + 1) * per_stage))
        total = sum(arch.layer_params(i) for i in layers) * weight_bytes / tp
        first, last = stage == 0, stage == pp - 1
        if first:
            total += embed
        if last and (not arch.tie_word_embeddings or not first):
            total += head
        worst = max(worst, total)
    return int(worst)


def kv_bytes_per_token(arch: Architecture, *, tp: int, pp: int, kv_bytes: float) -> int:
    """KV-cache bytes one token takes on one GPU: its stage's layers x (K and V of its share of the KV heads; MLA:
    the compressed latent, which every tp rank keeps whole) x bytes per element. With fewer KV heads than tp
    ranks each rank keeps one (the heads are replicated)."""
    layers = math.ceil(arch.num_layers / pp)
    elements = arch.kv_elements_per_token_layer if arch.mla else 2 * math.ceil(arch.num_kv_heads / tp) * arch.head_dim
    return math.ceil(layers * elements * kv_bytes)


def estimate(arch: Architecture, *, gpu: str, gpu_memory_mib: int, backend: str = "tensorrtllm", tp: int = 1,
             pp: int = 1, dtype: str = "bfloat16", weights: str | None = None, kv_cache_dtype: str | None = None,
             memory_fraction: float | None = None, sequence_len: int | None = None, reserve_mib: int | None = None,
             block_tokens: int | None = None, model: str = "") -> CapacityPlan:
    """The CapacityPlan of `arch` on one GPU type. `dtype` is the activation dtype; `weights` the linear layers'
    precision (default `dtype`); `kv_cache_dtype` the cache's (default `dtype`); `sequence_len` the length one
    sequence may reach (default the model's max_position_embeddings). Bad parameters raise InputError."""
    known = backends()
    if backend not in known:
        raise InputError(f"unknown backend {backend!r} (known: {', '.join(sorted(known))})")
    spec = known[backend]
    act = precision(dtype, WEIGHT_BYTES, "dtype") or "bfloat16"
    if act not in _ACTIVATION:
        raise InputError(f"dtype {dtype!r} is no activation dtype (one of {', '.join(_ACTIVATION)})")
    wname = precision(weights, WEIGHT_BYTES, "weight precision") or act
    kvname = precision(kv_cache_dtype, KV_BYTES, "KV-cache dtype") or act
    fraction = spec.memory_fraction if memory_fraction is None else memory_fraction
    if not 0 < fraction <= 1:
        raise InputError(f"{spec.knob} must be in (0, 1], got {fraction}")
    if tp < 1 or pp < 1:
        raise InputError(f"tp and pp must be positive, got tp {tp} pp {pp}")
    if pp > arch.num_layers:
        raise InputError(f"pp {pp} exceeds the model's {arch.num_layers} layers")
    seq = sequence_len or arch.max_position_embeddings or 0
    if seq <= 0:
        raise InputError("no sequence length: the config.json has no max_position_embeddings; give one")
    block = block_tokens or spec.block_tokens
    usable = gpu_memory_mib * MIB - DRIVER_RESERVED_MIB * MIB
    reserve = (spec.reserve_mib if reserve_mib is None else reserve_mib) * MIB
    weight_bytes = stage_weight_bytes(arch, tp=tp, pp=pp, weight_bytes=WEIGHT_BYTES[wname],
                                      activation_bytes=WEIGHT_BYTES[act], parallel_embedding=spec.parallel_embedding)
    per_token = kv_bytes_per_token(arch, tp=tp, pp=pp, kv_bytes=KV_BYTES[kvname])
    if spec.fraction_of == "free":
        kv = fraction * (usable - weight_bytes - reserve)
    else:
        kv = fraction * usable - weight_bytes - reserve
    kv_bytes = max(0, int(kv))
    tokens = (kv_bytes // (per_token * block)) * block
    if usable - weight_bytes - reserve <= 0 or tokens == 0:
        status = "no-memory"
    elif tokens < seq:
        status = "short"
    else:
        status = "fits"
    return CapacityPlan(
        model=model, gpu=gpu, gpu_memory_mib=gpu_memory_mib, backend=backend, tp=tp, pp=pp, dtype=act,
        weights=wname, kv_cache_dtype=kvname, memory_fraction=fraction, weights_bytes=weight_bytes,
        reserve_bytes=reserve, kv_cache_bytes=kv_bytes, kv_bytes_per_token=per_token, block_tokens=block,
        kv_tokens=tokens, sequence_len=seq, max_concurrency=tokens / seq, concurrent_sequences=tokens // seq,
        status=status)


def tokens_from_kv_memory(kv_cache_bytes: float, per_token: int, block_tokens: int) -> int:
    """Tokens a KV cache of `kv_cache_bytes` holds in whole blocks (the arithmetic both backends log)."""
    return int(kv_cache_bytes // (per_token * block_tokens)) * block_tokens


def model_precisions(engine: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """(dtype, weights, kv_cache_dtype) from model.yaml's `engine:` (dtype, quantization, kv_cache_dtype)."""
    dtype = str(engine.get("dtype") or "bfloat16")
    quant = engine.get("quantization")
    kv = engine.get("kv_cache_dtype")
    return dtype, (None if quant in (None, "none") else str(quant)), (None if kv is None else str(kv))
