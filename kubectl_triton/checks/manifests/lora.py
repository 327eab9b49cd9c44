"""LoRA adapters of a vLLM-backend model (gitops/lora.py): what the backend and vLLM make of enable_lora,
max_lora_rank, multi_lora.json and each reviewed adapter_config.json. Pure over parsed files; vllm.check calls it
per version folder of a vLLM model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.registry import register
from kubectl_triton.errors import InputError
from kubectl_triton.gitops import lora

LORA_INVALID = register(
    "VllmLoraInvalid", "error", "overlay",
    "The model's LoRA setup stops it from loading or an adapter from being served: enable_lora without "
    "<version>/multi_lora.json (the backend raises FileNotFoundError), a multi_lora.json that is not a JSON object "
    "of name -> folder (or names an adapter twice), a max_lora_rank the image's vLLM does not accept (ValueError at "
    "start), an adapter whose rank exceeds max_lora_rank (\"LoRA rank R is greater than max_lora_rank M\" at its "
    "first request), or an adapter_config.json that does not parse.",
    "`kubectl triton add-adapter MODEL NAME --adapter-config FILE` writes all of these consistently.")
LORA_NOT_ENABLED = register(
    "VllmLoraNotEnabled", "error", "overlay",
    "multi_lora.json lists adapters but model.json does not set enable_lora: every request naming one is answered "
    "\"LoRA feature is not enabled\".",
    "Set \"enable_lora\": true in model.json (add-adapter does), or remove multi_lora.json.")
LORA_UNREVIEWED = register(
    "VllmLoraUnreviewed", "warning", "overlay",
    "An adapter served without its adapter_config.json in git (its rank and base model cannot be checked), one "
    "reviewed in git that multi_lora.json does not serve, or one trained on another base model than model.yaml "
    "`base_model` names.",
    "Commit models/<model>/adapters/<name>/adapter_config.json (add-adapter copies it), or remove the stale one.")


def check(root: Path, model_dir: Path, folder: Path, args: dict[str, Any], meta: dict[str, Any],
          limits: dict[str, Any] | None, where: str, object_id: str, model: str) -> Iterator[Finding]:
    """The LoRA findings of one version folder `folder` of a vLLM model (engine arguments `args`)."""
    multi_path = folder / lora.MULTI_LORA
    multi_rel = multi_path.relative_to(root).as_posix()
    args_rel = (folder / "model.json").relative_to(root).as_posix()
    enabled = str(args.get("enable_lora")).lower() == "true"
    served: dict[str, str] = {}
    if multi_path.is_file():
        try:
            served = lora.read_multi_lora(multi_path.read_text(encoding="utf-8"), multi_rel)
        except (InputError, OSError, UnicodeDecodeError) as err:
            yield LORA_INVALID.finding(getattr(err, "message", str(err)), path=multi_rel, model=model,
                                       object=object_id)
            return
    elif enabled:
        yield LORA_INVALID.finding(f"enable_lora without {lora.MULTI_LORA} in {folder.name}/: the backend raises "
                                   f"FileNotFoundError and the model does not load on {where}", path=args_rel,
                                   model=model, object=object_id)
        return
    if served and not enabled:
        yield LORA_NOT_ENABLED.finding(
            f"{lora.MULTI_LORA} serves {', '.join(sorted(served))} but model.json does not set enable_lora: requests "
            f"naming them fail on {where} (\"LoRA feature is not enabled\")", path=args_rel, model=model,
                object=object_id)
    if not enabled:
        return
    rank = args.get("max_lora_rank", lora.DEFAULT_MAX_RANK)
    ranks = list((limits or {}).get("max_lora_ranks") or [])
    if ranks and rank not in ranks:
        yield LORA_INVALID.finding(f"max_lora_rank {rank} is not one this vLLM accepts ({', '.join(map(str, ranks))})"
                                   f": the engine does not start on {where}", path=args_rel, model=model,
                object=object_id)
    reviewed: dict[str, lora.Adapter] = {}
    for path in sorted((model_dir / lora.ADAPTERS_DIR).glob(f"*/{lora.ADAPTER_CONFIG}")):
        rel = path.relative_to(root).as_posix()
        try:
            reviewed[path.parent.name] = lora.parse_adapter_config(path.read_text(encoding="utf-8"), rel)
        except (InputError, OSError, UnicodeDecodeError) as err:
            yield LORA_INVALID.finding(getattr(err, "message", str(err)), path=rel, model=model,
                                       object=object_id)
    base = meta.get("base_model")
    for name in served:
        adapter = reviewed.get(name)
        if adapter is None:
            yield LORA_UNREVIEWED.finding(f"adapter {name!r} is served without models/.../{lora.ADAPTERS_DIR}/{name}/"
                                          f"{lora.ADAPTER_CONFIG} in git: its rank is not checked", path=multi_rel,
                                          model=model, object=object_id)
            continue
        if isinstance(rank, int) and adapter.rank > rank:
            yield LORA_INVALID.finding(
                f"adapter {name!r} has rank {adapter.rank}, above max_lora_rank {rank}: vLLM refuses it at its first "
                f"request on {where} (\"LoRA rank {adapter.rank} is greater than max_lora_rank {rank}\")",
                path=args_rel, model=model,
                object=object_id)
        if isinstance(base, str) and adapter.base_model and adapter.base_model != base:
            yield LORA_UNREVIEWED.finding(
                f"adapter {name!r} was trained on {adapter.base_model}, not on {base} (model.yaml base_model)",
                path=multi_rel, model=model,
                object=object_id)
    for name in sorted(set(reviewed) - set(served)):
        yield LORA_UNREVIEWED.finding(f"adapter {name!r} is reviewed in git but {lora.MULTI_LORA} does not serve it",
                                      path=multi_rel if served else args_rel, model=model,
                object=object_id)
