"""Printing a capacity plan: one row per GPU type (kubectl table), or the stable `-o json|yaml` document."""

from __future__ import annotations

from typing import Any

from kubectl_triton.compat.capacity import GIB, CapacityPlan
from kubectl_triton.compat.sizing import Sizing
from kubectl_triton.output.color import current
from kubectl_triton.output.table import table

HEADERS = ("GPU", "MEMORY", "TP×PP", "WEIGHTS/GPU", "KV CACHE/GPU", "KV TOKENS", "MAX LEN", "SEQUENCES", "STATUS")


def _gib(value: int) -> str:
    return f"{value / GIB:.1f}Gi"


def _painter():
    st = current()
    if not st.on:
        return None
    verdict = {"fits": True, "short": None, "no-memory": False}

    def paint(i: int, j: int, text: str) -> str:
        if i == 0:
            return st.bold(text)
        word = text.strip()
        return st.verdict(text, verdict[word]) if j == len(HEADERS) - 1 and word in verdict else text

    return paint


def format_plans(sizing: Sizing, rows: list[tuple[CapacityPlan, CapacityPlan]]) -> str:
    """The table: per GPU type, weights and KV cache per GPU, the tokens the cache holds, whether one sequence of
    the maximum length fits (STATUS) and how many of the typical length run at once (SEQUENCES)."""
    body = []
    for at_max, typical in rows:
        body.append((at_max.gpu, f"{at_max.gpu_memory_mib / 1024:.0f}Gi", f"{at_max.tp}×{at_max.pp}",
                     _gib(at_max.weights_bytes), _gib(at_max.kv_cache_bytes), f"{at_max.kv_tokens:,}",
                     f"{at_max.sequence_len:,}", str(typical.concurrent_sequences) if at_max.fits else "0",
                     at_max.status))
    head = (f"# {sizing.model or sizing.hf_config}: {sizing.backend}, {sizing.arch.attention_kind} "
            f"{sizing.arch.parameters / 1e9:.1f}B parameters, weights {rows[0][0].weights if rows else ''}, "
            f"KV cache {rows[0][0].kv_cache_dtype if rows else ''}; SEQUENCES of {sizing.sequence_len:,} tokens")
    return head + "\n" + table(HEADERS, body, _painter())


def plans_document(sizing: Sizing, rows: list[tuple[CapacityPlan, CapacityPlan]]) -> dict[str, Any]:
    """`-o json|yaml` (docs/capacity.md documents the keys)."""
    arch = sizing.arch
    return {
        "model": sizing.model, "hf_config": sizing.hf_config, "backend": sizing.backend,
        "architecture": {"model_type": arch.model_type, "parameters": arch.parameters, "layers": arch.num_layers,
                         "attention": arch.attention_kind, "kv_heads": arch.num_kv_heads, "head_dim": arch.head_dim},
        "max_seq_len": sizing.max_seq_len, "sequence_len": sizing.sequence_len,
        "min_concurrent_sequences": sizing.min_concurrent_sequences,
        "gpus": [{**at_max.as_dict(), "concurrent_sequences_at_sequence_len": typical.concurrent_sequences
                  if at_max.fits else 0} for at_max, typical in rows],
    }
