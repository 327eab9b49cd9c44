"""Check compat/capacity.py's weight and KV-cache estimates against real model architectures built with torch.

Runs on a GPU machine whose python3 has torch and transformers (not this project's dependencies); imports only
kubectl_triton.compat.capacity / hfconfig (standard library, PyYAML optional), so run it with PYTHONPATH set to the
repository root:

    export PYTHONPATH=$PWD; python3 bench/gpu_weights_check.py --out $OUT/gpu_weights_check.json

For each architecture (a config.json dict with the published numbers, no weights downloaded) the model is built on
the meta device in bf16 and materialised on the GPU with `to_empty` (memory allocated, nothing initialised), then:
torch.cuda.memory_allocated() before/after, the bytes of its parameters and buffers, the parameter count, against
`stage_weight_bytes(arch, tp=1, pp=1, weight_bytes=2, activation_bytes=2, parallel_embedding=False)` and
`arch.parameters`. A KV-cache tensor [layers, 2, N, kv_heads, head_dim] bf16 is allocated and compared with
N * kv_bytes_per_token(arch, tp=1, pp=1, kv_bytes=2); a short forward pass with use_cache also measures the bytes of
transformers' own cache. Finally nvidia-smi's memory.total against cudaMemGetInfo's total (the estimator's
DRIVER_RESERVED_MIB). Without a GPU, `--device cpu --tiny` (2-layer variants) or `--device meta` (full size, no
memory) run the same logic: parameter counts, bytes and KV shapes are exact; memory_allocated is not measured."""

from __future__ import annotations

import argparse
import gc
import json
import platform
import subprocess
import sys
import time
from typing import Any

import torch

from kubectl_triton.compat.capacity import DRIVER_RESERVED_MIB, kv_bytes_per_token, stage_weight_bytes
from kubectl_triton.compat.hfconfig import architecture

MIB = 2**20

# Published config.json numbers (the architecture fields only; rope scaling and the like left out: they change no
# tensor's size).
MODELS: dict[str, dict[str, Any]] = {
    "Llama-3.1-8B": {
        "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False,
        "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-5},
    "Mistral-7B-v0.3": {
        "model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32768, "tie_word_embeddings": False,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": None},
    "Qwen2.5-7B": {
        "model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
        "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False,
        "max_position_embeddings": 131072, "rope_theta": 1000000.0},
    "Qwen3-8B": {
        "model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
        "tie_word_embeddings": False, "max_position_embeddings": 40960, "rope_theta": 1000000.0},
    "Gemma-2-9B": {
        "model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
        "tie_word_embeddings": True, "max_position_embeddings": 8192, "sliding_window": 4096},
    "Phi-3-mini-4k": {
        "model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072, "num_attention_heads": 32,
        "num_key_value_heads": 32, "intermediate_size": 8192, "vocab_size": 32064, "tie_word_embeddings": False,
        "max_position_embeddings": 4096, "pad_token_id": 32000},
    "Qwen3-0.6B": {
        "model_type": "qwen3", "num_hidden_layers": 28, "hidden_size": 1024, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936,
        "tie_word_embeddings": True, "max_position_embeddings": 40960, "rope_theta": 1000000.0},
    "Mixtral-8x7B": {
        "model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "tie_word_embeddings": False,
        "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2,
        "rope_theta": 1000000.0},
    "Qwen3-30B-A3B": {
        "model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 40960,
        "rope_theta": 1000000.0},
}

# A tiny variant of every architecture (the same model_type and structure, 2 layers, small sizes) for --tiny.
_TINY = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
         "vocab_size": 512, "max_position_embeddings": 256}


def tiny(doc: dict[str, Any]) -> dict[str, Any]:
    out = {**doc, **_TINY}
    out["num_key_value_heads"] = 2 if doc["num_key_value_heads"] < doc["num_attention_heads"] else 4
    if "head_dim" in doc:
        out["head_dim"] = 32  # deliberately != hidden / heads, as Qwen3 and Gemma 2 have
    if "moe_intermediate_size" in doc:
        out["moe_intermediate_size"] = 32
    if "num_local_experts" in doc:
        out["num_local_experts"] = 4
    if "num_experts" in doc:
        out["num_experts"], out["num_experts_per_tok"] = 8, 2
    if doc.get("sliding_window"):
        out["sliding_window"] = 128
    if "pad_token_id" in doc:
        out["pad_token_id"] = 0
    return out


def pct(measured: float, estimate: float) -> float | None:
    """Error of the estimate relative to the measurement, in percent (positive: the estimate is high)."""
    return None if not measured else round(100.0 * (estimate - measured) / measured, 4)


def allocated(device: str) -> int | None:
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def build(doc: dict[str, Any], device: str):
    """The model of config dict `doc` in bf16 on `device`, memory allocated, weights uninitialised."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in doc.items() if k != "model_type"}
    config = AutoConfig.for_model(doc["model_type"], **fields)
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        except TypeError:  # transformers 4.x spelling
            model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.to_empty(device=device)  # to_empty unties shared parameters (each module gets its own copy) ...
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()  # ... so tie them again: the LM head's copy is freed
    model.eval()
    return model, config


def categorise(name: str, tensor: torch.Tensor) -> str:
    base = name.rsplit(".", 1)[-1]
    if base == "bias":
        return "bias"
    if "norm" in name.lower():
        return "norm"
    if "embed" in name:
        return "embedding"
    if "lm_head" in name:
        return "lm_head"
    if tensor.dim() == 1:
        return "other_1d"
    return "matrix"


def check_model(name: str, doc: dict[str, Any], device: str, kv_tokens: int, forward_tokens: int) -> dict[str, Any]:
    arch = architecture(doc, name)
    est_params = arch.parameters
    est_bytes = stage_weight_bytes(arch, tp=1, pp=1, weight_bytes=2, activation_bytes=2, parallel_embedding=False)
    est_kv_token = kv_bytes_per_token(arch, tp=1, pp=1, kv_bytes=2)
    row: dict[str, Any] = {"model": name, "config": doc, "model_type": doc["model_type"],
                           "estimate_parameters": est_params, "estimate_weight_bytes": est_bytes,
                           "estimate_kv_bytes_per_token": est_kv_token}
    gc.collect()
    before = allocated(device)
    t0 = time.perf_counter()
    model, config = build(doc, device)
    after = allocated(device)
    row["build_s"] = round(time.perf_counter() - t0, 2)

    params = list(model.named_parameters())  # shared (tied) parameters listed once
    buffers = list(model.named_buffers())
    n_params = sum(p.numel() for _, p in params)
    param_bytes = sum(p.numel() * p.element_size() for _, p in params)
    buffer_bytes = sum(b.numel() * b.element_size() for _, b in buffers)
    by_kind: dict[str, int] = {}
    for pname, p in params:
        kind = categorise(pname, p)
        by_kind[kind] = by_kind.get(kind, 0) + p.numel()
    dtypes = sorted({str(p.dtype) for _, p in params})
    out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
    tied = out_emb is not None and out_emb.weight is in_emb.weight
    row.update({
        "torch_parameters": n_params, "parameter_bytes": param_bytes, "buffer_bytes": buffer_bytes,
        "buffers": [{"name": b, "shape": list(t.shape), "dtype": str(t.dtype)} for b, t in buffers],
        "parameter_dtypes": dtypes, "parameters_by_kind": by_kind, "lm_head_tied": tied,
        "allocated_bytes": None if before is None else after - before,
        "parameters_error_pct": pct(n_params, est_params),
        "parameter_bytes_error_pct": pct(param_bytes, est_bytes),
        "missed_parameters": n_params - est_params,
    })
    if before is not None:
        row["allocated_error_pct"] = pct(after - before, est_bytes)
        row["allocated_minus_estimate_bytes"] = after - before - est_bytes

    # One KV-cache tensor for kv_tokens tokens, shaped from transformers' config (not from the estimator's).
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    shape = (config.num_hidden_layers, 2, kv_tokens, kv_heads, head_dim)
    before_kv = allocated(device)
    cache = torch.empty(shape, dtype=torch.bfloat16, device=device)
    after_kv = allocated(device)
    kv_bytes = cache.numel() * cache.element_size()
    row.update({"kv_tokens": kv_tokens, "kv_shape": list(shape), "kv_tensor_bytes": kv_bytes,
                "kv_allocated_bytes": None if before_kv is None else after_kv - before_kv,
                "kv_estimate_bytes": kv_tokens * est_kv_token,
                "kv_match": kv_bytes == kv_tokens * est_kv_token})
    del cache

    # transformers' own cache after a forward pass of forward_tokens tokens (uninitialised weights: values are
    # garbage, shapes are real).
    try:
        ids = torch.randint(0, min(int(doc["vocab_size"]), 1000), (1, forward_tokens), device=device)
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True)
        pkv = out.past_key_values
        total = 0
        for layer in getattr(pkv, "layers", []) or []:
            for attr in ("keys", "values"):
                t = getattr(layer, attr, None)
                if isinstance(t, torch.Tensor):
                    total += t.numel() * t.element_size()
        if not total and hasattr(pkv, "key_cache"):  # older Cache layout
            total = sum(t.numel() * t.element_size() for t in list(pkv.key_cache) + list(pkv.value_cache))
        row.update({"forward_tokens": forward_tokens, "forward_cache_type": type(pkv).__name__,
                    "forward_cache_bytes": total, "forward_cache_estimate": forward_tokens * est_kv_token,
                    "forward_cache_match": total == forward_tokens * est_kv_token})
        del out, pkv, ids
    except Exception as err:  # noqa: BLE001 - a forward failure must not sink the weight figures
        row["forward_error"] = f"{type(err).__name__}: {err}"[:500]

    del model, params, buffers, out_emb, in_emb
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        row["allocated_after_free_bytes"] = torch.cuda.memory_allocated() - before
    return row


def driver_reserve(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {"estimator_driver_reserved_mib": DRIVER_RESERVED_MIB}
    try:
        from kubectl_triton.compat.data import load

        info["catalog_h200_memory_mib"] = load("gpus.yaml")["gpus"]["h200"]["memory_mib"]
    except Exception as err:  # noqa: BLE001
        info["catalog_error"] = f"{type(err).__name__}: {err}"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.used,driver_version",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=60)
        first = smi.stdout.strip().splitlines()[0].split(", ")
        info.update({"smi_name": first[0], "smi_memory_total_mib": int(first[1]),
                     "smi_memory_used_mib": int(first[2]), "driver_version": first[3]})
    except Exception as err:  # noqa: BLE001
        info["smi_error"] = f"{type(err).__name__}: {err}"
    if device == "cuda":
        free, total = torch.cuda.mem_get_info()
        info.update({"cuda_total_bytes": total, "cuda_total_mib": round(total / MIB, 2),
                     "cuda_free_mib": round(free / MIB, 2), "torch_device_name": torch.cuda.get_device_name(0)})
        if "smi_memory_total_mib" in info:
            info["driver_reserved_mib"] = round(info["smi_memory_total_mib"] - total / MIB, 2)
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_weights_check.json")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="2-layer variants of every architecture (a CPU test)")
    parser.add_argument("--models", nargs="*", help="only these (names of MODELS)")
    parser.add_argument("--kv-tokens", type=int, default=4096)
    parser.add_argument("--forward-tokens", type=int, default=64)
    args = parser.parse_args(argv)

    import transformers

    env = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
           "platform": platform.platform(), "device": args.device}
    if args.device == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the CUDA context first, so it is not counted with the first model
    env["memory"] = driver_reserve(args.device)
    print(json.dumps(env), flush=True)

    rows = []
    names = args.models or list(MODELS)
    print(f"{'model':16} {'params(torch)':>14} {'params(est)':>14} {'err%':>8} {'alloc MiB':>10} {'est MiB':>10} "
          f"{'err%':>8} {'buf B':>8} {'KV/tok':>7} {'KV ok':>5} {'fwd ok':>6}", flush=True)
    for name in names:
        doc = tiny(MODELS[name]) if args.tiny else MODELS[name]
        try:
            row = check_model(name, doc, args.device, args.kv_tokens if not args.tiny else 16, args.forward_tokens
                              if not args.tiny else 8)
        except Exception as err:  # noqa: BLE001 - one architecture failing must not lose the others
            row = {"model": name, "error": f"{type(err).__name__}: {err}"[:800]}
            print(f"{name:16} ERROR {row['error']}", flush=True)
            gc.collect()
            if args.device == "cuda":
                torch.cuda.empty_cache()
            rows.append(row)
            continue
        rows.append(row)
        alloc = row["allocated_bytes"]
        alloc_err = row.get("allocated_error_pct")
        print(f"{name:16} {row['torch_parameters']:>14,} {row['estimate_parameters']:>14,} "
              f"{row['parameters_error_pct']:>8.4f} "
              f"{'-' if alloc is None else f'{alloc / MIB:.1f}':>10} {row['estimate_weight_bytes'] / MIB:>10.1f} "
              f"{'-' if alloc_err is None else f'{alloc_err:.4f}':>8} {row['buffer_bytes']:>8} "
              f"{row['estimate_kv_bytes_per_token']:>7} {str(row['kv_match']):>5} "
              f"{str(row.get('forward_cache_match', row.get('forward_error', '-'))):>6}", flush=True)
        print(f"    missed params {row['missed_parameters']:,} by kind {row['parameters_by_kind']} "
              f"buffers {[(b['name'], b['shape'], b['dtype']) for b in row['buffers']]} tied {row['lm_head_tied']} "
              f"freed-to {row.get('allocated_after_free_bytes')}", flush=True)

    doc = {"env": env, "models": rows}
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    print(f"wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
