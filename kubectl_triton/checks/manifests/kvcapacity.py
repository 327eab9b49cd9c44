"""KV-cache capacity per serving overlay: does the model fit its GPU type, and how many sequences does a replica
hold? From the model's Sizing (compat/sizing.py: its Hugging Face config.json, precision, tp x pp, memory fraction)
and the overlay's GPU type, through compat/capacity.py. Pure over a Sizing and a GPU; gpufacts calls it per
serving workload.

The weights and the KV bytes per token are exact (docs/capacity.md: the bytes per token reproduce every logged
token count); the runtime reserve is not (activations, CUDA graphs and sampler buffers vary with the backend's
version and batch settings). An error is therefore said only where the model cannot fit even with the smallest
reserve seen in real logs (LOWEST_RESERVE_MIB); where only the documented reserve makes it miss, a warning."""

from __future__ import annotations

from collections.abc import Iterator

from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.registry import register
from kubectl_triton.compat.capacity import GIB, CapacityPlan
from kubectl_triton.compat.catalog import GPU
from kubectl_triton.compat.sizing import Sizing

# The smallest runtime reserve of the real logs of tests/fixtures/kv_capacity_cases.yaml: vLLM's profile of
# vllm-project/vllm#13061 (0.25 GiB non-torch + 0.19 GiB activation peak).
LOWEST_RESERVE_MIB = 450

KV_CACHE_DOES_NOT_FIT = register(
    "KvCacheDoesNotFit", "error", "overlay",
    "The model cannot serve on its GPU type even with the smallest runtime reserve seen in real logs: the weights "
    "per GPU fill its memory, or (vLLM) the KV cache left holds less than one sequence of max_model_len, and vLLM "
    "refuses to start (\"The model's max seq len is larger than the maximum number of tokens that can be stored "
    "in KV cache\"). Estimated from the Hugging Face config.json named by model.yaml capacity.hf_config "
    "(docs/capacity.md).",
    "Raise tp (or pp), quantize the weights or the KV cache, lower the maximum sequence length, or choose a GPU "
    "type with more memory: `kubectl triton plan MODEL` shows which GPU types fit.")
KV_CACHE_LOW = register(
    "KvCacheLowConcurrency", "warning", "overlay",
    "By the estimate with the backend's documented runtime reserve, a replica's KV cache holds less than one "
    "sequence of the maximum length, or fewer concurrent sequences of model.yaml capacity.sequence_len than "
    "capacity.min_concurrent_sequences: the server may not start, or requests queue instead of running together.",
    "Raise the memory fraction, quantize the KV cache (fp8), raise tp, or choose a GPU type with more memory; "
    "`kubectl triton plan MODEL` prints the capacity of every GPU type.")


def _gib(value: int) -> str:
    return f"{value / GIB:,.1f} GiB"


def check(sizing: Sizing, gpu: GPU, where: str, path: str, object_id: str) -> Iterator[Finding]:
    """The capacity findings of one serving workload of `sizing`'s model on `gpu` (overlay `where`)."""
    at_max = sizing.plan(gpu, sizing.max_seq_len)
    best = sizing.plan(gpu, sizing.max_seq_len, reserve_mib=LOWEST_RESERVE_MIB)
    shape = f"{sizing.model} ({sizing.backend}, tp {sizing.tp} x pp {sizing.pp}, {at_max.weights} weights)"
    if best.status == "no-memory":
        yield KV_CACHE_DOES_NOT_FIT.finding(
            f"{shape} on {gpu.key}: {_gib(best.weights_bytes)} of weights per GPU leave no KV cache in "
            f"{gpu.memory_mib:,} MiB at {best.memory_fraction:g} of its memory, even with a "
            f"{LOWEST_RESERVE_MIB} MiB runtime reserve: the server does not start on {where}", path=path,
            model=sizing.model, object=object_id)
        return
    if best.status == "short" and sizing.backend == "vllm":
        yield KV_CACHE_DOES_NOT_FIT.finding(
            f"{shape} on {gpu.key}: even with a {LOWEST_RESERVE_MIB} MiB runtime reserve the KV cache holds at most "
            f"{best.kv_tokens:,} tokens, less than one sequence of max_model_len {sizing.max_seq_len:,}: vLLM "
            f"refuses to start on {where}", path=path, model=sizing.model,
            object=object_id)
        return
    if at_max.status != "fits":
        effect = ("vLLM may refuse to start" if sizing.backend == "vllm" else
                  "TensorRT-LLM caps the attention window to what fits, so longer sequences lose their beginning"
                  if at_max.status == "short" else "the engine may not load")
        yield KV_CACHE_LOW.finding(
            f"{shape} on {gpu.key}: with the {at_max.reserve_bytes // 2**20:,} MiB runtime reserve the KV cache "
            f"holds about {at_max.kv_tokens:,} tokens, less than one sequence of {sizing.max_seq_len:,} "
            f"(an estimate): {effect} on {where}", path=path, model=sizing.model,
            object=object_id)
        return
    minimum = sizing.min_concurrent_sequences
    if minimum is None:
        return
    plan: CapacityPlan = sizing.plan(gpu) if sizing.sequence_len != sizing.max_seq_len else at_max
    if plan.concurrent_sequences < minimum:
        yield KV_CACHE_LOW.finding(
            f"{shape} on {gpu.key}: the KV cache holds about {plan.kv_tokens:,} tokens, "
            f"{plan.concurrent_sequences} sequence(s) of {plan.sequence_len:,} at once, fewer than "
            f"min_concurrent_sequences {minimum} on {where}", path=path, model=sizing.model,
            object=object_id)
