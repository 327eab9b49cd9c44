"""LoRA adapters of a model on Triton's TensorRT-LLM backend, as git objects.

The engine serves adapters only when trtllm-build ran with the LoRA plugin, a `--max_lora_rank` and the
`--lora_target_modules` they touch (model.yaml `engine.lora`, which the engine-build Job passes on). The backend
loads every adapter under its `lora_prefetch_dir` parameter when the model starts: one folder per LoRA task id,
named by the id's digits, holding hf_lora_convert.py's model.lora_config.npy and model.lora_weights.npy; a request
selects one with the `lora_task_id` input, which the ensemble passes to the tensorrt_llm model. An adapter needs
cache pages of at least its rank (`lora_cache_max_adapter_size`, 64 by default).

Here each adapter is reviewed in git as `models/<model>/adapters/<name>/adapter_config.json` (PEFT's file) and
`models/<model>/adapters/tasks.json` names each adapter's task id; its converted weights stay in the model's
artifact store under `loras/<task id>/`. `plan_adapter` is pure: what `add-adapter` changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kubectl_triton.compat.data import load
from kubectl_triton.errors import InputError
from kubectl_triton.formats import pbtxt
from kubectl_triton.gitops.lora import _NAME, Adapter, adapter_object

TASKS = "tasks.json"
LORA_DIR = "loras"
TASK_INPUT = "lora_task_id"
PREFETCH = "lora_prefetch_dir"
MAX_ADAPTER_SIZE = "lora_cache_max_adapter_size"
QKV = ("attn_q", "attn_k", "attn_v")  # TensorRT-LLM adds the missing ones of these when one is a target
MIN_RANK = 8
MAX_TASK_ID = 2**31 - 1


@cache
def facts() -> dict[str, Any]:
    """kubectl_triton/data/tensorrtllm_lora.yaml."""
    return load("tensorrtllm_lora.yaml")


def hf_modules() -> dict[str, str]:
    """Hugging Face module name -> TensorRT-LLM LoRA module."""
    return {hf: trt for trt, hf in facts()["hf_modules"].items()}


def default_max_adapter_size() -> int:
    return int(facts()["cache"][MAX_ADAPTER_SIZE])


def prefetch_files() -> tuple[str, ...]:
    return tuple(facts()["prefetch_files"])


def trtllm_modules(adapter: Adapter, source: str) -> tuple[str, ...]:
    """The TensorRT-LLM LoRA modules an adapter's target_modules map to (a dotted name by its last part);
    InputError naming `source` for one TensorRT-LLM has no LoRA module for."""
    table = hf_modules()
    out = set()
    for module in adapter.target_modules:
        name = module.rsplit(".", 1)[-1]
        if name not in table:
            raise InputError(f"{source}: target module {module!r} has no TensorRT-LLM LoRA module (known: "
                             f"{', '.join(sorted(table))})")
        out.add(table[name])
    if not out:
        raise InputError(f"{source}: target_modules is empty: the adapter changes no layer")
    return tuple(sorted(out))


def engine_modules(modules: set[str]) -> tuple[str, ...]:
    """`modules` as trtllm-build takes them: q, k and v together when any is a target."""
    return tuple(sorted(modules | set(QKV) if modules & set(QKV) else modules))


def read_tasks(text: str, source: str) -> dict[str, int]:
    """tasks.json: adapter name -> LoRA task id (0 to 2**31-1, each used once)."""
    doc = adapter_object(text, source, "LoRA task id")
    seen: dict[int, str] = {}
    for name, task in doc.items():
        if isinstance(task, bool) or not isinstance(task, int) or not 0 <= task <= MAX_TASK_ID:
            raise InputError(f"{source}: adapter {name!r}: the task id must be an integer from 0 to {MAX_TASK_ID} "
                             f"(the backend reads prefetch folder names with std::stoi), got {task!r}")
        if task in seen:
            raise InputError(f"{source}: task id {task} names two adapters ({seen[task]!r}, {name!r}); the backend "
                             "prefetches one folder per id")
        seen[task] = name
    return doc


@dataclass(frozen=True)
class EngineLora:
    """model.yaml `engine.lora`: what trtllm-build is asked to allow."""

    max_rank: int
    target_modules: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"max_rank": self.max_rank, "target_modules": list(self.target_modules)}


def engine_lora(engine: Any, source: str) -> EngineLora | None:
    """The `lora` entry of model.yaml's `engine:` section; None when absent, InputError when malformed."""
    if not isinstance(engine, dict) or engine.get("lora") is None:
        return None
    lora = engine["lora"]
    rank = lora.get("max_rank") if isinstance(lora, dict) else None
    modules = lora.get("target_modules") if isinstance(lora, dict) else None
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise InputError(f"{source}: engine.lora.max_rank must be a positive integer, got {rank!r}")
    known = set(facts()["hf_modules"])
    if not isinstance(modules, list) or not modules or not all(isinstance(m, str) and m in known for m in modules):
        raise InputError(f"{source}: engine.lora.target_modules must list TensorRT-LLM LoRA modules "
                         f"({', '.join(sorted(known))})")
    return EngineLora(rank, tuple(modules))


def rank_for(needed: int) -> int:
    """The max_lora_rank add-adapter asks for: the smallest power of two holding `needed`, at least 8 (a
    rebuild is costly: leave room for the next adapter)."""
    rank = MIN_RANK
    while rank < needed:
        rank *= 2
    return rank


@dataclass
class AdapterPlan:
    """What add-adapter changes for one TensorRT-LLM adapter."""

    task_id: int
    tasks: dict[str, int]
    lora: EngineLora
    rebuild: bool
    max_adapter_size: int | None = None  # set lora_cache_max_adapter_size to this (None: the default holds)
    notes: list[str] = field(default_factory=list)


def plan_adapter(*, name: str, adapter: Adapter, source: str, engine: Any, tasks: dict[str, int],
                 others: dict[str, Adapter], cache_max: int | None, force: bool,
                 meta_source: str = "model.yaml") -> AdapterPlan:
    """The plan for adapter `name` (its parsed adapter_config.json from `source`). `others`: the adapters already
    reviewed in git, whose ranks and modules the engine must keep holding; `cache_max`: config.pbtxt's
    lora_cache_max_adapter_size (None: the backend's default)."""
    if not _NAME.fullmatch(name):
        raise InputError(f"{name!r}: an adapter name is letters, digits, '.', '_' and '-' (at most 63)")
    if name in tasks and not force:
        raise InputError(f"adapter {name!r} exists already ({TASKS}); pass --force to replace it")
    modules = set(trtllm_modules(adapter, source))
    for other_name, other in others.items():
        if other_name != name:
            modules |= set(trtllm_modules(other, f"adapters/{other_name}"))
    needed = max([adapter.rank, *(a.rank for n, a in others.items() if n != name)])
    current = engine_lora(engine, meta_source)
    wanted = engine_modules(modules)
    if current is not None and current.max_rank >= needed and set(wanted) <= set(current.target_modules):
        lora, rebuild = current, False
    else:
        rank = max(current.max_rank if current else 0, rank_for(needed))
        old = set(current.target_modules) if current else set()
        lora, rebuild = EngineLora(rank, engine_modules(old | modules)), True
    task_id = tasks[name] if name in tasks else max(tasks.values(), default=0) + 1
    limit = cache_max if cache_max is not None else default_max_adapter_size()
    return AdapterPlan(task_id=task_id, tasks={**tasks, name: task_id}, lora=lora, rebuild=rebuild,
                       max_adapter_size=needed if needed > limit else None)


def task_input() -> Any:
    """The optional `lora_task_id` input of the tensorrt_llm model (as the backend's all_models declares it)."""
    s = pbtxt.schema()
    tensor = s.ModelInput(name=TASK_INPUT, data_type=s.TYPE_UINT64, dims=[1], optional=True)
    tensor.reshape.SetInParent()
    return tensor


def wire_core(text: str, config: Any, prefetch_dir: str, max_adapter_size: int | None) -> str:
    """The tensorrt_llm config.pbtxt text with the lora_task_id input and the LoRA parameters the plan needs."""
    if not any(i.name == TASK_INPUT for i in config.input):
        text = pbtxt.add_message(text, "input", pbtxt.one_line(task_input()))
    text = pbtxt.set_parameter(text, PREFETCH, prefetch_dir)
    if max_adapter_size is not None:
        text = pbtxt.set_parameter(text, MAX_ADAPTER_SIZE, str(max_adapter_size))
    return text


def wire_ensemble(text: str, config: Any, core: str) -> str:
    """An ensemble's config.pbtxt text that takes `lora_task_id` and passes it to its step running `core`
    (unchanged where it does both already)."""
    step = next((s for s in config.ensemble_scheduling.step if s.model_name == core), None)
    if step is None:
        return text
    if not any(i.name == TASK_INPUT for i in config.input):
        s = pbtxt.schema()
        text = pbtxt.add_message(text, "input", pbtxt.one_line(
            s.ModelInput(name=TASK_INPUT, data_type=s.TYPE_UINT64, dims=[1], optional=True)))
    if TASK_INPUT not in step.input_map:
        sched = next(n for n in pbtxt.tree(text) if n.name == "ensemble_scheduling")
        node = next(n for n in sched.children if n.name == "step" and n.child_value("model_name") == core)
        text = pbtxt.add_message(text, "input_map", "{ key: \"" + TASK_INPUT + "\" value: \"" + TASK_INPUT + "\" }",
                                 within=node)
    return text
