"""`kubectl triton plan`: KV-cache capacity and memory fit of an LLM on every GPU type of the catalog."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import click

from kubectl_triton.cli.options import FiniteRange, output_format, output_option
from kubectl_triton.errors import InputError

FORMATS = ("text", "json", "yaml")


@click.command("plan")
@click.argument("model", required=False)
@click.option("--hf-config", type=click.Path(path_type=Path),
              help="A Hugging Face config.json (instead of MODEL's capacity.hf_config).")
@click.option("--backend", type=click.Choice(["tensorrtllm", "vllm"]),
              help="How the KV cache is sized (default: MODEL's backend, else tensorrtllm).")
@click.option("--gpu", "gpu_keys", multiple=True, help="Only these GPU types (repeatable; default: every one).")
@click.option("--tp", type=click.IntRange(min=1), help="Tensor parallel size.")
@click.option("--pp", type=click.IntRange(min=1), help="Pipeline parallel size.")
@click.option("--dtype", help="Activation dtype: bfloat16, float16, float32.")
@click.option("--weights", help="Precision of the linear weights: fp8, int8, int4, nvfp4, ... (default: dtype).")
@click.option("--kv-cache-dtype", help="Precision of the KV cache: fp8, int8, ... (default: dtype).")
@click.option("--memory-fraction", type=FiniteRange(min=0, max=1, min_open=True),
              help="kv_cache_free_gpu_mem_fraction (TensorRT-LLM) or gpu_memory_utilization (vLLM).")
@click.option("--max-seq-len", type=click.IntRange(min=1),
              help="Longest sequence the server is configured for (one must fit for it to start).")
@click.option("--sequence-len", type=click.IntRange(min=1),
              help="Prompt + output tokens of a typical request (SEQUENCES counts these).")
@output_option(FORMATS)
@click.pass_context
def command(ctx: click.Context, model: str | None, hf_config: Path | None, backend: str | None,
            gpu_keys: tuple[str, ...], tp: int | None, pp: int | None, dtype: str | None, weights: str | None,
            kv_cache_dtype: str | None, memory_fraction: float | None, max_seq_len: int | None,
            sequence_len: int | None, output: str | None) -> None:
    """KV-cache capacity and memory fit of an LLM, per GPU type, before anything is deployed.

    For MODEL (models/MODEL/model.yaml with `capacity:`), its config.json, precision, tp x pp and memory
    fraction as the repository sets them; without MODEL, --hf-config and the options. Per GPU type: the
    weights and the KV cache per GPU, the tokens the cache holds, whether one sequence of the maximum
    length fits (STATUS: fits, short, no-memory) and how many typical requests run at once (SEQUENCES).
    Options override the repository's settings. Exits 0 when at least one listed GPU type fits, 1 when
    none does, 2 on bad input. docs/capacity.md has the formulas and their error on real logs.
    """
    output = output_format(ctx, output, FORMATS)
    from kubectl_triton.compat.capacity import CapacityPlan
    from kubectl_triton.compat.catalog import GPU, gpus, resolve
    from kubectl_triton.compat.hfconfig import load_architecture
    from kubectl_triton.compat.sizing import Sizing, read_sizing
    from kubectl_triton.gitops.model import Repository
    from kubectl_triton.output.document import dumps
    from kubectl_triton.output.plan import format_plans, plans_document

    sizing: Sizing | None = None
    if model is not None:
        repo = Repository.find()
        found = repo.model(model)
        if found is None:
            raise InputError(f"no model {model!r} under {repo.layout.models}/")
        from kubectl_triton.formats.yamlio import load_all_shared

        docs = load_all_shared(found.metadata_file) if found.metadata_file.is_file() else []
        meta = docs[0] if docs and isinstance(docs[0], dict) else {}
        if hf_config is not None:  # another config.json for the model's own settings
            section: dict[str, Any] = meta["capacity"] if isinstance(meta.get("capacity"), dict) else {}
            meta = {**meta, "capacity": {**section, "hf_config": str(hf_config.resolve())}}
        sizing = read_sizing(repo.root, found.path, meta)
        if sizing is None:
            raise InputError(f"{repo.relative(found.metadata_file)}: no `capacity:` naming the model's "
                             "config.json", hint="add capacity.hf_config (docs/capacity.md) or pass --hf-config")
    elif hf_config is None:
        raise click.UsageError("give MODEL or --hf-config")
    else:
        with contextlib.suppress(InputError):
            Repository.find()  # inside a repository, its own GPU types (kubectl-triton.yaml `gpus:`) count too
    if sizing is None:
        assert hf_config is not None
        arch = load_architecture(hf_config)
        longest = max_seq_len or arch.max_position_embeddings
        if not longest:
            raise InputError(f"{hf_config}: no max_position_embeddings; pass --max-seq-len")
        sizing = Sizing(model=model or "", arch=arch, hf_config=str(hf_config), backend=backend or "tensorrtllm",
                        tp=1, pp=1, dtype=arch.torch_dtype if arch.torch_dtype in ("float16", "bfloat16")
                        else "bfloat16", weights=None, kv_cache_dtype=None, memory_fraction=None,
                        max_seq_len=longest, sequence_len=longest, min_concurrent_sequences=None)
    if backend is not None and backend != sizing.backend and memory_fraction is None:
        # the other backend's knob means another thing (of free memory, of all memory): its own default
        sizing = dataclasses.replace(sizing, memory_fraction=None, block_tokens=None)
    overrides: dict[str, Any] = {k: v for k, v in (("backend", backend), ("tp", tp), ("pp", pp), ("dtype", dtype),
                                   ("weights", weights), ("kv_cache_dtype", kv_cache_dtype),
                                   ("memory_fraction", memory_fraction), ("max_seq_len", max_seq_len),
                                   ("sequence_len", sequence_len)) if v is not None}
    if max_seq_len is not None and sequence_len is None and sizing.sequence_len > max_seq_len:
        overrides["sequence_len"] = max_seq_len
    sizing = dataclasses.replace(sizing, **overrides)
    chosen: list[GPU] = []
    for key in gpu_keys:
        gpu = resolve(key)
        if gpu is None:
            raise InputError(f"unknown GPU type {key!r} (known: {', '.join(sorted(gpus()))})")
        chosen.append(gpu)
    rows: list[tuple[CapacityPlan, CapacityPlan]] = []
    for gpu in chosen or list(gpus().values()):
        at_max = sizing.plan(gpu, sizing.max_seq_len)
        rows.append((at_max, sizing.plan(gpu) if sizing.sequence_len != sizing.max_seq_len else at_max))
    click.echo(format_plans(sizing, rows) if output == "text" else dumps(plans_document(sizing, rows), output))
    if not any(at_max.fits for at_max, _ in rows):
        raise click.exceptions.Exit(1)
