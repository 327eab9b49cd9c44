"""LoRA adapters of TensorRT-LLM models (gitops/lora_trtllm.py): what the engine, the backend's LoRA cache and the
ensemble make of models/<model>/adapters/ (each adapter_config.json and tasks.json), model.yaml `engine.lora`,
the recorded engines and the tensorrt_llm and ensemble configurations. Pure over the repository's files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.manifests.gpufacts import read_models
from kubectl_triton.checks.registry import register
from kubectl_triton.compat.engine import CONFIG, read_engine_dir
from kubectl_triton.errors import InputError
from kubectl_triton.formats import pbtxt
from kubectl_triton.gitops import lora, lora_trtllm

INVALID = register(
    "TrtllmLoraInvalid", "error", "model",
    "A TensorRT-LLM model's adapters cannot be served as configured: an adapter's rank above the engine's "
    "max_lora_rank or the LoRA cache's page size (lora_cache_max_adapter_size, 64 by default), a target module the "
    "engine was not built for or TensorRT-LLM has no LoRA module for, an engine built without the LoRA plugin "
    "(model.yaml engine.lora absent, or a recorded engine's lora_plugin null), tasks.json naming a task id twice "
    "or not a positive integer, or an adapter_config.json that does not parse. The backend refuses the adapter "
    "when it prefetches it, and the model does not load.",
    "`kubectl triton add-adapter MODEL NAME --adapter-config FILE` keeps model.yaml engine.lora, tasks.json and "
    "the configs consistent; after engine.lora changes, let the engine-build Job rebuild and record the engine "
    "again (kubectl triton record-engine).")
NOT_WIRED = register(
    "TrtllmLoraNotWired", "error", "model",
    "A TensorRT-LLM model has adapters, and a client cannot select them: the tensorrt_llm model lacks the "
    "`lora_task_id` input or the `lora_prefetch_dir` parameter (without it a request naming a task id is refused: "
    "\"LoRA task not found in cache\"), or the ensemble clients call does not take `lora_task_id` and pass it to "
    "the tensorrt_llm step (its /generate endpoint then takes the key as a request parameter: the base model "
    "answers, silently).",
    "Run add-adapter again with --force, or add the input, the parameter and the ensemble's input_map by hand.")
UNREVIEWED = register(
    "TrtllmLoraUnreviewed", "warning", "model",
    "tasks.json serves an adapter without its adapter_config.json in git (its rank and modules are not checked), "
    "an adapter reviewed in git has no task id (it is not served), or an adapter was trained on another base "
    "model than model.yaml `base_model` names.",
    "Commit models/<model>/adapters/<name>/adapter_config.json (add-adapter copies it), or remove the stale one.")


def check(root: Path, targets: list[Any]) -> list[Finding]:
    """validate's hook: every TensorRT-LLM model with adapters (the rendered targets are not needed)."""
    out: list[Finding] = []
    for name, model in read_models(root).items():
        if model.meta.get("backend") == "tensorrtllm":
            out.extend(check_model(root, root / Path(model.path).parent, model.path, model.meta, name))
    return out


def _adapters(root: Path, model_dir: Path, model: str) -> Iterator[tuple[str, lora.Adapter | Finding]]:
    for path in sorted((model_dir / lora.ADAPTERS_DIR).glob(f"*/{lora.ADAPTER_CONFIG}")):
        rel = path.relative_to(root).as_posix()
        try:
            yield path.parent.name, lora.parse_adapter_config(path.read_text(encoding="utf-8"), rel)
        except (InputError, OSError, UnicodeDecodeError) as err:
            yield path.parent.name, INVALID.finding(getattr(err, "message", str(err)), path=rel, model=model)


def check_model(root: Path, model_dir: Path, meta_rel: str, meta: dict[str, Any], model: str) -> Iterator[Finding]:
    """The LoRA findings of one TensorRT-LLM model folder."""
    tasks_path = model_dir / lora.ADAPTERS_DIR / lora_trtllm.TASKS
    tasks_rel = tasks_path.relative_to(root).as_posix()
    reviewed: dict[str, lora.Adapter] = {}
    for name, parsed in _adapters(root, model_dir, model):
        if isinstance(parsed, Finding):
            yield parsed
        else:
            reviewed[name] = parsed
    tasks: dict[str, int] = {}
    if tasks_path.is_file():
        try:
            tasks = lora_trtllm.read_tasks(tasks_path.read_text(encoding="utf-8"), tasks_rel)
        except (InputError, OSError, UnicodeDecodeError) as err:
            yield INVALID.finding(getattr(err, "message", str(err)), path=tasks_rel, model=model)
            return
    if not tasks:
        for name in sorted(reviewed):
            yield UNREVIEWED.finding(f"adapter {name!r} is reviewed in git but has no task id in {tasks_rel}: it "
                                     "is not served", path=tasks_rel, model=model)
        return
    served = {n: a for n, a in reviewed.items() if n in tasks}
    for name in sorted(set(tasks) - set(reviewed)):
        yield UNREVIEWED.finding(f"adapter {name!r} (task {tasks[name]}) is served without "
                                 f"{lora.ADAPTERS_DIR}/{name}/{lora.ADAPTER_CONFIG} in git: its rank and modules are "
                                 "not checked", path=tasks_rel, model=model)
    for name in sorted(set(reviewed) - set(tasks)):
        yield UNREVIEWED.finding(f"adapter {name!r} is reviewed in git but has no task id in {tasks_rel}: it is not "
                                 "served", path=tasks_rel, model=model)
    base = meta.get("base_model")
    modules: dict[str, tuple[str, ...]] = {}
    for name, adapter in served.items():
        rel = f"{model_dir.relative_to(root).as_posix()}/{lora.ADAPTERS_DIR}/{name}/{lora.ADAPTER_CONFIG}"
        try:
            modules[name] = lora_trtllm.trtllm_modules(adapter, rel)
        except InputError as err:
            yield INVALID.finding(err.message, path=rel, model=model)
        if isinstance(base, str) and adapter.base_model and adapter.base_model != base:
            yield UNREVIEWED.finding(f"adapter {name!r} was trained on {adapter.base_model}, not on {base} "
                                     "(model.yaml base_model)", path=rel, model=model)
    yield from _engine(root, model_dir, meta_rel, meta, model, served, modules)
    yield from _configs(root, model_dir, model, served)


def _fits(what: str, rank: int | None, engine_modules: tuple[str, ...], served: dict[str, lora.Adapter],
          modules: dict[str, tuple[str, ...]]) -> Iterator[str]:
    """Why the adapters do not fit an engine allowing `rank` and `engine_modules` (`what` names it)."""
    for name, adapter in sorted(served.items()):
        if rank is not None and adapter.rank > rank:
            yield f"adapter {name!r} has rank {adapter.rank}, above {what}'s max_lora_rank {rank}"
        missing = sorted(set(modules.get(name, ())) - set(engine_modules))
        if missing and engine_modules:
            yield (f"adapter {name!r} targets {', '.join(missing)}, which {what} was not built for "
                   f"(lora_target_modules: {', '.join(engine_modules)})")


def _engine(root: Path, model_dir: Path, meta_rel: str, meta: dict[str, Any], model: str,
            served: dict[str, lora.Adapter], modules: dict[str, tuple[str, ...]]) -> Iterator[Finding]:
    try:
        wanted = lora_trtllm.engine_lora(meta.get("engine"), meta_rel)
    except InputError as err:
        yield INVALID.finding(err.message, path=meta_rel, model=model)
        return
    if wanted is None:
        yield INVALID.finding(f"adapters are served, and {meta_rel} has no engine.lora: the engine-build Job builds "
                              "the engine without the LoRA plugin, and the model does not load its adapters",
                              path=meta_rel, model=model)
    else:
        for why in _fits("model.yaml engine.lora", wanted.max_rank, wanted.target_modules, served, modules):
            yield INVALID.finding(f"{why}: the engine the Job builds refuses it", path=meta_rel, model=model)
    for config in sorted((model_dir / "engines").glob(f"*/{CONFIG}")):
        rel = config.relative_to(root).as_posix()
        try:
            engine = read_engine_dir(config.parent)
        except (InputError, OSError):
            continue  # CompatInputInvalid, from the compat checks
        gpu = config.parent.name
        if engine.format == "current" and engine.lora_plugin is None:
            yield INVALID.finding(f"the engine recorded for {gpu} was built without the LoRA plugin: it cannot serve "
                                  f"{', '.join(sorted(served))}; rebuild it (model.yaml engine.lora) and record it "
                                  "again", path=rel, model=model)
            continue
        for why in _fits(f"the engine recorded for {gpu}", engine.max_lora_rank, engine.lora_target_modules, served,
                         modules):
            yield INVALID.finding(f"{why}: rebuild it and record it again", path=rel, model=model)


def _configs(root: Path, model_dir: Path, model: str, served: dict[str, lora.Adapter]) -> Iterator[Finding]:
    configs = {}
    for path in sorted(model_dir.glob("*/config.pbtxt")):
        try:
            configs[path] = pbtxt.load(path)
        except InputError:
            continue  # reported by the model-config checks
    core_path = next((p for p, c in configs.items() if c.backend == "tensorrtllm"), None)
    if core_path is None:
        return
    core = configs[core_path]
    core_rel = core_path.relative_to(root).as_posix()
    if not any(i.name == lora_trtllm.TASK_INPUT for i in core.input):
        yield NOT_WIRED.finding(f"{core.name or core_path.parent.name} has no {lora_trtllm.TASK_INPUT} input: no "
                                "request can select an adapter", path=core_rel, model=model)
    if lora_trtllm.PREFETCH not in core.parameters:
        yield NOT_WIRED.finding(f"no {lora_trtllm.PREFETCH} parameter: the backend does not load the adapters' "
                                "weights, and a request naming a task id is refused (not in the LoRA cache)",
                                path=core_rel, model=model)
    size = core.parameters[lora_trtllm.MAX_ADAPTER_SIZE].string_value \
        if lora_trtllm.MAX_ADAPTER_SIZE in core.parameters else ""
    limit = int(size) if size.isascii() and size.isdigit() else lora_trtllm.default_max_adapter_size()
    for name, adapter in sorted(served.items()):
        if adapter.rank > limit:
            yield INVALID.finding(f"adapter {name!r} has rank {adapter.rank}, above {lora_trtllm.MAX_ADAPTER_SIZE} "
                                  f"{limit}: it does not fit a LoRA cache page", path=core_rel, model=model)
    core_name = core.name or core_path.parent.name
    for path, config in configs.items():
        if config.platform != "ensemble":
            continue
        step = next((s for s in config.ensemble_scheduling.step if s.model_name == core_name), None)
        if step is None:
            continue
        takes = any(i.name == lora_trtllm.TASK_INPUT for i in config.input)
        if not takes or lora_trtllm.TASK_INPUT not in step.input_map:
            yield NOT_WIRED.finding(f"ensemble {config.name or path.parent.name} does not "
                                    f"{'pass' if takes else 'take'} {lora_trtllm.TASK_INPUT} "
                                    f"{'to its ' + core_name + ' step' if takes else 'as an input'}: its clients "
                                    "cannot select an adapter", path=path.relative_to(root).as_posix(), model=model)
