"""LoRA adapters of a model on Triton's vLLM backend, as git objects.

The backend (vllm_backend src/model.py, `_setup_lora`) serves adapters when model.json says `enable_lora`: it then
reads `<version>/multi_lora.json`, a JSON object of adapter name -> the adapter's folder in the pod, and a request
selects one with `"lora_name"` in its sampling parameters. vLLM loads an adapter at its first request and refuses
one whose rank exceeds model.json's `max_lora_rank` (which must itself be one of the ranks the version accepts).

Here each adapter is reviewed in git as `models/<model>/adapters/<name>/adapter_config.json` (PEFT's file: rank
`r`, `target_modules`, `base_model_name_or_path`); its weights stay in the model's artifact store under
`loras/<name>/`. `plan_adapter` is pure: the files `add-adapter` writes, from what the repository holds."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kubectl_triton.errors import InputError

MULTI_LORA = "multi_lora.json"
ADAPTERS_DIR = "adapters"
ADAPTER_CONFIG = "adapter_config.json"
DEFAULT_MAX_RANK = 16  # vLLM's max_lora_rank default
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}")


@dataclass(frozen=True)
class Adapter:
    """What an adapter's adapter_config.json says that matters to serving it."""

    rank: int
    base_model: str | None
    target_modules: tuple[str, ...]


def parse_adapter_config(text: str, source: str) -> Adapter:
    """The Adapter of a PEFT adapter_config.json; one-line InputError naming `source` otherwise."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{source}:{err.lineno}: not valid JSON: {err.msg}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{source}: a PEFT adapter_config.json is a JSON object")
    rank = doc.get("r")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise InputError(f"{source}: r (the LoRA rank) must be a positive integer, got {rank!r}")
    base = doc.get("base_model_name_or_path")
    modules = doc.get("target_modules") or []
    if isinstance(modules, str):
        modules = [modules]
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise InputError(f"{source}: target_modules must be a list of module names")
    return Adapter(rank, base if isinstance(base, str) and base else None, tuple(modules))


def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads object hook that refuses a key given twice (json keeps the last one silently)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"adapter {key!r} is named twice")
        seen[key] = value
    return seen


def adapter_object(text: str, source: str, shape: str) -> dict[str, Any]:
    """A JSON object keyed by adapter name (multi_lora.json, tasks.json), no name given twice; one-line InputError
    naming `source` otherwise (`shape` says what the object maps each name to)."""
    try:
        doc = json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as err:
        raise InputError(f"{source}:{err.lineno}: not valid JSON: {err.msg}") from None
    except ValueError as err:
        raise InputError(f"{source}: {err}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{source}: a JSON object of adapter name -> {shape}")
    return doc


def read_multi_lora(text: str, source: str) -> dict[str, str]:
    """multi_lora.json: adapter name -> folder; one-line InputError naming `source` for anything the backend or
    a reviewer could not use."""
    shape = "the adapter's folder in the pod"
    doc = adapter_object(text, source, shape)
    if not all(isinstance(v, str) and v for v in doc.values()):
        raise InputError(f"{source}: a JSON object of adapter name -> {shape}")
    return doc


def rank_for(ranks: list[int], needed: int) -> int | None:
    """The smallest max_lora_rank the vLLM version accepts that holds `needed`, None when none does."""
    fitting = [r for r in sorted(ranks) if r >= needed]
    return fitting[0] if fitting else None


def plan_adapter(*, name: str, adapter: Adapter, engine_args: dict[str, Any],
                 multi_lora: dict[str, str], others: dict[str, Adapter], pod_dir: str, ranks: list[int],
                 max_loras: int | None, force: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """(the new model.json arguments, the new multi_lora.json) for adapter `name`. `others`: the adapters already
    reviewed in git (name -> Adapter), whose ranks max_lora_rank must keep holding; `ranks`: the max_lora_rank
    values the image's vLLM accepts."""
    if not _NAME.fullmatch(name):
        raise InputError(f"{name!r}: an adapter name is letters, digits, '.', '_' and '-' (at most 63)")
    if name in multi_lora and not force:
        raise InputError(f"adapter {name!r} exists already ({MULTI_LORA}); pass --force to replace it")
    if max_loras is not None and max_loras < 1:
        raise InputError(f"--max-loras {max_loras}: must be at least 1")
    needed = max([adapter.rank, *(a.rank for n, a in others.items() if n != name)])
    current = engine_args.get("max_lora_rank", DEFAULT_MAX_RANK)
    current = current if isinstance(current, int) and not isinstance(current, bool) else DEFAULT_MAX_RANK
    rank = current if current >= needed and current in ranks else rank_for(ranks, needed)
    if rank is None:
        raise InputError(f"rank {adapter.rank}: above the largest max_lora_rank this vLLM accepts "
                         f"({max(ranks)}); vLLM cannot serve the adapter")
    args = {**engine_args, "enable_lora": True, "max_lora_rank": rank}
    if max_loras is not None:
        args["max_loras"] = max_loras
    return args, {**multi_lora, name: pod_dir}
