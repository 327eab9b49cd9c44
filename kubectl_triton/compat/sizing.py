"""A model's KV-cache sizing, read from its folder, and its CapacityPlan per GPU type.

model.yaml `capacity:` names the Hugging Face config.json (`hf_config`, relative to the model's folder), the
typical request length (`sequence_len`, prompt + output tokens) and the fewest concurrent sequences a replica
must hold (`min_concurrent_sequences`); optional overrides: `weights`, `kv_cache_dtype`, `memory_fraction`.
Precision and parallelism come from where the backend reads them: model.yaml `engine:` and the tensorrt_llm
config.pbtxt's `kv_cache_free_gpu_mem_fraction` for TensorRT-LLM; the vLLM model's `1/model.json` engine
arguments for vLLM. A model without `capacity:` has no sizing (None); a malformed one is an InputError naming the
file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.compat import capacity
from kubectl_triton.compat.catalog import GPU
from kubectl_triton.compat.hfconfig import Architecture, load_architecture
from kubectl_triton.errors import InputError
from kubectl_triton.formats import pbtxt

# vLLM's `quantization` engine argument -> the precision of the linear weights (kubectl_triton.compat.capacity).
VLLM_QUANTIZATION = {"awq": "int4", "awq_marlin": "int4", "gptq": "int4", "gptq_marlin": "int4", "marlin": "int4",
                     "bitsandbytes": "int4", "fp8": "fp8", "fbgemm_fp8": "fp8", "modelopt": "fp8", "ptpc_fp8": "fp8",
                     "modelopt_fp4": "nvfp4", "mxfp4": "nvfp4", "experts_int8": "int8", "smoothquant": "int8"}
MODEL_JSON = "model.json"


@dataclass(frozen=True)
class Sizing:
    """What the estimator needs of one model, and where each part was read."""

    model: str
    arch: Architecture
    hf_config: str  # repository-relative
    backend: str  # tensorrtllm | vllm
    tp: int
    pp: int
    dtype: str
    weights: str | None
    kv_cache_dtype: str | None
    memory_fraction: float | None
    max_seq_len: int  # the longest sequence the server is configured for: it must hold one of them to start
    sequence_len: int  # a typical request (concurrency is counted at this length)
    min_concurrent_sequences: int | None
    block_tokens: int | None = None

    def plan(self, gpu: GPU, sequence_len: int | None = None, reserve_mib: int | None = None) -> capacity.CapacityPlan:
        """The CapacityPlan on one GPU type at the typical length (or `sequence_len`), with the backend's reserve
        (or `reserve_mib`)."""
        return capacity.estimate(
            self.arch, gpu=gpu.key, gpu_memory_mib=gpu.memory_mib, backend=self.backend, tp=self.tp, pp=self.pp,
            dtype=self.dtype, weights=self.weights, kv_cache_dtype=self.kv_cache_dtype,
            memory_fraction=self.memory_fraction, sequence_len=sequence_len or self.sequence_len,
            block_tokens=self.block_tokens, model=self.model, reserve_mib=reserve_mib)


def _positive(value: Any, where: str, kind: type = int) -> Any:
    if value is None:
        return None
    ok = isinstance(value, (int, float)) if kind is float else isinstance(value, int)
    if isinstance(value, bool) or not ok or value <= 0:
        raise InputError(f"{where} must be a positive {'number' if kind is float else 'integer'}, got {value!r}")
    return value


def _required(value: Any, where: str) -> int:
    """A positive integer the backend needs (null included is refused)."""
    if value is None:
        raise InputError(f"{where} must be a positive integer, got null")
    found: int = _positive(value, where)
    return found


def _vllm_args(model_dir: Path, root: Path) -> tuple[dict[str, Any], str] | None:
    """The engine arguments of the model's vLLM Triton model (`<name>/1/model.json`, the first one found)."""
    for path in sorted(model_dir.glob(f"*/1/{MODEL_JSON}")):
        rel = path.relative_to(root).as_posix()
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"{rel}: cannot be read: {err}") from None
        except json.JSONDecodeError as err:
            raise InputError(f"{rel}:{err.lineno}: not valid JSON: {err.msg}") from None
        if not isinstance(doc, dict):
            raise InputError(f"{rel}: vLLM engine arguments are a JSON object")
        return doc, rel
    return None


def _trtllm_fraction(model_dir: Path) -> float | None:
    for path in sorted(model_dir.glob("*/config.pbtxt")):
        try:
            text = path.read_text(encoding="utf-8")
            if "tensorrtllm" not in text:
                continue
            cfg = pbtxt.to_dict(pbtxt.parse(text, str(path)))
        except (OSError, UnicodeDecodeError, InputError):
            continue  # validate reports an unreadable config itself
        if cfg.get("backend") != "tensorrtllm":
            continue
        params = cfg.get("parameters") or {}
        raw = (params.get("kv_cache_free_gpu_mem_fraction") or {}).get("string_value")
        try:
            value = float(raw) if isinstance(raw, str) and raw else None
        except ValueError:
            return None  # a placeholder (${...}): the backend's default
        if value is not None and not 0 < value <= 1:
            raise InputError(f"{path}: kv_cache_free_gpu_mem_fraction {raw} is not in (0, 1]")
        return value
    return None


def read_sizing(root: Path, model_dir: Path, meta: dict[str, Any]) -> Sizing | None:
    """The Sizing of the model in `model_dir` (metadata `meta`), None without `capacity:`."""
    section = meta.get("capacity")
    name = str(meta.get("name") or model_dir.name)
    meta_file = f"{model_dir.relative_to(root).as_posix()}/model.yaml"
    where = f"{meta_file} capacity"
    if section is None:
        return None
    if not isinstance(section, dict):
        raise InputError(f"{where}: must be a mapping")
    unknown = sorted(set(section) - {"hf_config", "sequence_len", "min_concurrent_sequences", "weights",
                                     "kv_cache_dtype", "memory_fraction"})
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}")
    hf = section.get("hf_config")
    if not isinstance(hf, str) or not hf:
        raise InputError(f"{where}.hf_config: the model's Hugging Face config.json, relative to its folder")
    hf_path = model_dir / hf
    hf_rel = hf_path.relative_to(root).as_posix() if hf_path.is_relative_to(root) else str(hf_path)
    arch = load_architecture(hf_path, hf_rel)
    backend = str(meta.get("backend") or "")
    engine: dict[str, Any] = meta["engine"] if isinstance(meta.get("engine"), dict) else {}
    block = None
    if backend == "vllm":
        found = _vllm_args(model_dir, root)
        args, src = found if found else ({}, f"{where}")
        tp = _required(args.get("tensor_parallel_size", 1), f"{src}: tensor_parallel_size")
        pp = _required(args.get("pipeline_parallel_size", 1), f"{src}: pipeline_parallel_size")
        dtype = str(args.get("dtype") or "auto")
        if dtype in ("auto", "half", "float"):
            dtype = {"half": "float16", "float": "float32"}.get(
                dtype, arch.torch_dtype if arch.torch_dtype in ("float16", "bfloat16") else "bfloat16")
        quant = args.get("quantization")
        # vLLM reads the checkpoint's quantization_config when model.json names none
        weights = VLLM_QUANTIZATION.get(str(quant)) if quant else arch.quantization
        if quant and weights is None:
            weights = arch.quantization
        if quant and weights is None and not section.get("weights"):
            raise InputError(f"{src}: quantization {quant!r}: bytes per weight unknown; set {where}.weights")
        kv = args.get("kv_cache_dtype")
        kv = None if kv in (None, "auto") else ("fp8" if str(kv).startswith("fp8") else str(kv))
        fraction = _positive(args.get("gpu_memory_utilization"), f"{src}: gpu_memory_utilization", float)
        if fraction is not None and fraction > 1:
            raise InputError(f"{src}: gpu_memory_utilization must be at most 1, got {fraction}")
        max_len = _positive(args.get("max_model_len"), f"{src}: max_model_len")
        block = _positive(args.get("block_size"), f"{src}: block_size")
    elif backend == "tensorrtllm":
        tp = _required(engine.get("tp", 1), f"{meta_file} engine.tp")
        pp = _required(engine.get("pp", 1), f"{meta_file} engine.pp")
        dtype, weights, kv = capacity.model_precisions(engine)
        fraction = _trtllm_fraction(model_dir)
        max_len = _positive(engine.get("max_seq_len"), f"{meta_file} engine.max_seq_len")
    else:
        raise InputError(f"{where}: capacity is planned for LLM backends (tensorrtllm, vllm), not {backend!r}")
    weights = section.get("weights") or weights
    kv = section.get("kv_cache_dtype") or kv
    if section.get("memory_fraction") is not None:
        fraction = _positive(section["memory_fraction"], f"{where}.memory_fraction", float)
    if fraction is not None and not 0 < fraction <= 1:
        raise InputError(f"{where}: the memory fraction {fraction} is not in (0, 1]")
    if pp > arch.num_layers:
        raise InputError(f"{where}: pp {pp} exceeds the {arch.num_layers} layers of {hf_rel}")
    max_seq = max_len or arch.max_position_embeddings
    if not max_seq:
        raise InputError(f"{where}: no sequence length: {hf_rel} has no max_position_embeddings and the backend's "
                         "settings none (engine.max_seq_len, max_model_len)")
    typical = _positive(section.get("sequence_len"), f"{where}.sequence_len") or max_seq
    minimum = _positive(section.get("min_concurrent_sequences"), f"{where}.min_concurrent_sequences")
    # the precision names are checked once here, so every later estimate only fails on the GPU
    capacity.precision(weights, capacity.WEIGHT_BYTES, f"weight precision in {where}")
    if capacity.precision(dtype, capacity.WEIGHT_BYTES, f"dtype in {where}") not in ("float32", "float16", "bfloat16"):
        raise InputError(f"{where}: dtype {dtype!r} is no activation dtype (bfloat16, float16, float32)")
    capacity.precision(kv, capacity.KV_BYTES, f"KV-cache dtype in {where}")
    return Sizing(model=name, arch=arch, hf_config=hf_rel, backend=backend, tp=tp, pp=pp, dtype=dtype,
                  weights=weights, kv_cache_dtype=kv, memory_fraction=fraction, max_seq_len=max_seq,
                  sequence_len=typical, min_concurrent_sequences=minimum, block_tokens=block)
