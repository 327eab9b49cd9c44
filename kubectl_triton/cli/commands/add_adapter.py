"""`kubectl triton add-adapter`: a LoRA adapter of a vLLM-backend model, reviewed in git (gitops/lora.py)."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import click

from kubectl_triton.cli.commands._plan import apply_plan
from kubectl_triton.errors import InputError


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file ({what})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot be read: {getattr(err, 'strerror', None) or err}") from None


def _in_store(path: str) -> str:
    """--artifact: a folder inside the model's artifact store."""
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts or "://" in path:
        raise InputError(f"--artifact {path!r}: the adapter's folder relative to the model's artifact store "
                         "(e.g. loras/sql), inside it")
    return PurePosixPath(path).as_posix()


@click.command("add-adapter")
@click.argument("model")
@click.argument("name")
@click.option("--adapter-config", type=click.Path(path_type=Path), required=True,
              help="The adapter's PEFT adapter_config.json (rank r, target_modules, base_model_name_or_path).")
@click.option("--artifact", metavar="PATH",
              help="vLLM: the adapter's folder in the model's artifact store (PVC, S3 prefix or OCI image), relative "
                   "to it (default: loras/NAME). TensorRT-LLM adapters live in loras/TASK_ID, where the backend "
                   "prefetches them.")
@click.option("--max-loras", type=int, help="Adapters one batch may mix (vLLM max_loras; default 1; vLLM only).")
@click.option("--dry-run", is_flag=True, help="Print the files it would write; write nothing.")
@click.option("--force", is_flag=True, help="Replace an adapter of that name.")
@click.option("--repo", "repo_dir", type=click.Path(path_type=Path), default=None,
              help="Repository root (default: the nearest parent holding overlays/).")
def command(model: str, name: str, adapter_config: Path, artifact: str | None, max_loras: int | None,
            dry_run: bool, force: bool, repo_dir: Path | None) -> None:
    """Add LoRA adapter NAME to MODEL, reviewed in git as models/MODEL/adapters/NAME/adapter_config.json.

    \b
    vLLM backend: enable_lora and a max_lora_rank that holds every adapter in model.json, the adapter in
    multi_lora.json (and that file in the model's ConfigMap); weights in ARTIFACTS/loras/NAME; clients select it
    with {"lora_name": "NAME"} in sampling_parameters.
    TensorRT-LLM backend: a LoRA task id in models/MODEL/adapters/tasks.json, model.yaml engine.lora (the LoRA
    plugin's max rank and target modules: a change means an engine rebuild), lora_prefetch_dir and the
    lora_task_id input in the tensorrt_llm and ensemble configs; converted weights in ARTIFACTS/loras/TASK_ID;
    clients select it with the lora_task_id input.
    Exit 2 (nothing written) for bad input."""
    from kubectl_triton.formats.yamlio import load_all_shared
    from kubectl_triton.gitops.model import Repository

    repo = Repository.find(repo_dir)
    found = repo.model(model)
    if found is None:
        raise InputError(f"no model {model!r} under {repo.layout.models}/")
    docs = load_all_shared(found.metadata_file) if found.metadata_file.is_file() else []
    meta = docs[0] if docs and isinstance(docs[0], dict) else {}
    text = _read(adapter_config, "a PEFT adapter_config.json")
    backend = meta.get("backend")
    if backend == "vllm":
        _vllm(repo, found, meta, model, name, text, adapter_config, artifact, max_loras, dry_run, force)
    elif backend == "tensorrtllm":
        if artifact is not None:
            raise click.UsageError("--artifact: a TensorRT-LLM adapter lives in loras/TASK_ID of the model's artifact "
                                   "store, the folder the backend prefetches")
        if max_loras is not None:
            raise click.UsageError("--max-loras: for vLLM-backend models only")
        _tensorrtllm(repo, found, meta, model, name, text, adapter_config, dry_run, force)
    else:
        raise InputError(f"{repo.relative(found.metadata_file)}: backend {backend!r}: add-adapter scaffolds "
                         "adapters for Triton's vLLM and TensorRT-LLM backends")


def _vllm(repo: Any, found: Any, meta: dict[str, Any], model: str, name: str, text: str, adapter_config: Path,
          artifact: str | None, max_loras: int | None, dry_run: bool, force: bool) -> None:
    """The vLLM backend's adapter (gitops/lora.py)."""
    from kubectl_triton.checks.manifests.gpufacts import release
    from kubectl_triton.checks.manifests.vllm import vllm_models, vllm_version
    from kubectl_triton.compat.data import load
    from kubectl_triton.formats.yamledit import add_generator_file
    from kubectl_triton.gitops import lora
    from kubectl_triton.gitops.adaptercanary import how_clients_select
    from kubectl_triton.gitops.artifacts import from_metadata
    from kubectl_triton.gitops.model import MODEL_COMPONENT, Layout
    from kubectl_triton.gitops.scaffold import Plan

    served = vllm_models(found.path)
    if not served:
        raise InputError(f"{repo.relative(found.path)}: no Triton model with backend \"vllm\"")
    triton, versions, _ = served[0]
    version = versions[-1]
    folder = found.path / triton / version
    args_rel = repo.relative(folder / "model.json")
    try:
        engine_args = json.loads(_read(folder / "model.json", "the vLLM engine arguments"))
    except json.JSONDecodeError as err:
        raise InputError(f"{args_rel}:{err.lineno}: not valid JSON: {err.msg}") from None
    if not isinstance(engine_args, dict):
        raise InputError(f"{args_rel}: vLLM engine arguments are a JSON object")
    multi_path = folder / lora.MULTI_LORA
    multi = lora.read_multi_lora(_read(multi_path, "the backend's adapters"), repo.relative(multi_path)) \
        if multi_path.is_file() else {}
    adapter = lora.parse_adapter_config(text, str(adapter_config))
    others = {}
    for path in sorted((found.path / lora.ADAPTERS_DIR).glob(f"*/{lora.ADAPTER_CONFIG}")):
        others[path.parent.name] = lora.parse_adapter_config(_read(path, "a reviewed adapter"), repo.relative(path))
    vllm = vllm_version(release(meta.get("image")))
    limits = ((load("vllm_engine_args.yaml").get("versions") or {}).get(vllm) or {}).get("lora") if vllm else None
    if not limits:
        raise InputError(f"{repo.relative(found.metadata_file)}: the image {meta.get('image')} carries vLLM "
                         f"{vllm or 'of an unknown version'}, whose accepted LoRA ranks are not bundled")
    source = from_metadata(meta, model)
    new_args, new_multi = lora.plan_adapter(
        name=name, adapter=adapter, engine_args=engine_args, multi_lora=multi, others=others,
        pod_dir=f"{source.pod_dir}/{_in_store(artifact or f'loras/{name}')}", ranks=list(limits["max_lora_ranks"]),
        max_loras=max_loras, force=force)
    layout: Layout = repo.layout
    component = layout.overlay_dir(model, MODEL_COMPONENT)
    kfile = f"{component}/kustomization.yaml"
    ref = Layout.reference(component, repo.relative(multi_path))
    files = {
        repo.relative(found.path / lora.ADAPTERS_DIR / name / lora.ADAPTER_CONFIG): text,
        args_rel: json.dumps(new_args, indent=2) + "\n",
        repo.relative(multi_path): json.dumps(new_multi, indent=2) + "\n",
        kfile: add_generator_file(_read(repo.path(kfile), "the model's Component"),
                                  "model-config", f"{triton}__{version}__{lora.MULTI_LORA}={ref}", kfile),
    }
    apply_plan(repo.root, Plan(files), dry_run)
    if not dry_run:
        where = "the model's OCI image (kubectl triton package-model)" if source.source == "oci" \
            else "the artifact store"
        how = how_clients_select(repo.root, model, triton, name)
        click.echo(f"next: put the adapter's weights in {new_multi[name]} ({where}) and open a pull request; {how}",
                   err=True)


def _tensorrtllm(repo: Any, found: Any, meta: dict[str, Any], model: str, name: str, text: str,
                 adapter_config: Path, dry_run: bool, force: bool) -> None:
    """The TensorRT-LLM backend's adapter (gitops/lora_trtllm.py)."""
    from kubectl_triton.formats import pbtxt
    from kubectl_triton.formats.yamledit import set_in
    from kubectl_triton.gitops import lora, lora_trtllm
    from kubectl_triton.gitops.artifacts import from_metadata
    from kubectl_triton.gitops.scaffold import Plan

    meta_rel = repo.relative(found.metadata_file)
    if not isinstance(meta.get("engine"), dict):
        raise InputError(f"{meta_rel}: no engine: section; an engine built elsewhere needs trtllm-build --lora_plugin "
                         "auto --max_lora_rank R --lora_target_modules ... before it can serve adapters")
    configs = {}
    for path in sorted(found.path.glob("*/config.pbtxt")):
        configs[path] = pbtxt.parse(_read(path, "a Triton model configuration"), repo.relative(path))
    core_path = next((p for p, c in configs.items() if c.backend == "tensorrtllm"), None)
    if core_path is None:
        raise InputError(f"{repo.relative(found.path)}: no Triton model with backend \"tensorrtllm\"")
    core = configs[core_path]
    core_name = core.name or core_path.parent.name
    adapter = lora.parse_adapter_config(text, str(adapter_config))
    others = {}
    adapters_dir = found.path / lora.ADAPTERS_DIR
    for path in sorted(adapters_dir.glob(f"*/{lora.ADAPTER_CONFIG}")):
        others[path.parent.name] = lora.parse_adapter_config(_read(path, "a reviewed adapter"), repo.relative(path))
    tasks_path = adapters_dir / lora_trtllm.TASKS
    tasks = lora_trtllm.read_tasks(_read(tasks_path, "the adapters' task ids"), repo.relative(tasks_path)) \
        if tasks_path.is_file() else {}
    cache_max = core.parameters[lora_trtllm.MAX_ADAPTER_SIZE].string_value \
        if lora_trtllm.MAX_ADAPTER_SIZE in core.parameters else None
    if cache_max is not None and not (cache_max.isascii() and cache_max.isdigit()):
        raise InputError(f"{repo.relative(core_path)}: {lora_trtllm.MAX_ADAPTER_SIZE} {cache_max!r} is not a number")
    plan = lora_trtllm.plan_adapter(name=name, adapter=adapter, source=str(adapter_config), engine=meta["engine"],
                                    tasks=tasks, others=others, cache_max=int(cache_max) if cache_max else None,
                                    force=force, meta_source=meta_rel)
    prefetch = f"{from_metadata(meta, model).pod_dir}/{lora_trtllm.LORA_DIR}"
    files = {
        repo.relative(adapters_dir / name / lora.ADAPTER_CONFIG): text,
        repo.relative(tasks_path): json.dumps(plan.tasks, indent=2) + "\n",
        meta_rel: set_in(_read(found.metadata_file, "the model's metadata"), ("engine", "lora"), plan.lora.as_dict(),
                         meta_rel),
    }
    for path, config in configs.items():
        before = _read(path, "a Triton model configuration")
        after = lora_trtllm.wire_core(before, config, prefetch, plan.max_adapter_size) if path == core_path \
            else lora_trtllm.wire_ensemble(before, config, core_name) if config.platform == "ensemble" else before
        if after != before:
            pbtxt.parse(after, repo.relative(path))
            files[repo.relative(path)] = after
    apply_plan(repo.root, Plan(files), dry_run)
    if not dry_run:
        folder, npy = f"{prefetch}/{plan.task_id}", " and ".join(lora_trtllm.prefetch_files())
        click.echo(f"next: convert the adapter (hf_lora_convert.py -i ADAPTER -o OUT --storage-type "
                   f"{meta['engine'].get('dtype', 'float16')}) and put OUT's {npy} in {folder}; clients select it "
                   f"with lora_task_id {plan.task_id}", err=True)
        if plan.rebuild:
            click.echo(f"note: {meta_rel} engine.lora changed (max_rank {plan.lora.max_rank}, "
                       f"{' '.join(plan.lora.target_modules)}): the engine-build Job rebuilds every engine of "
                       f"{model} before the serving pods can load the adapter", err=True)
