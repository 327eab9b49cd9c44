"""Ensemble rules: the wiring Triton checks before it loads an ensemble.

`check_ensemble_scheduling` restates ValidateEnsembleSchedulingConfig (one config on its own: steps
complete, every tensor produced before use, inputs used, outputs written, nothing dangling).
`check_ensembles` restates what the model repository manager and ValidateEnsembleConfig check with
the whole repository at hand: step models exist, no circular dependency, required versions present,
batch sizes, every step input mapped, shapes and data types agree, decoupled branches do not merge.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubectl_triton.checks.findings import WARNING
from kubectl_triton.checks.model.base import (
    ENSEMBLE,
    ENSEMBLE_BATCH,
    ENSEMBLE_CYCLE,
    ENSEMBLE_DECOUPLED,
    ENSEMBLE_MODEL,
    TRTLLM_DECOUPLED,
    WILDCARD,
    Issue,
    ModelFolder,
    is_ensemble,
    pb_schema,
    selected_versions,
)
from kubectl_triton.checks.model.tensorrtllm import streaming_inputs

# --------------------------------------------------------------------------- one config


@dataclass(eq=False)
class _Flow:
    """A tensor of the ensemble's data-flow graph."""

    name: str
    is_output: bool
    ready: bool = False
    prev: list[_Flow] = field(default_factory=list)
    next: list[_Flow] = field(default_factory=list)


def _step_obj(index: int) -> str:
    return f"ensemble_scheduling.step[{index}]"


def check_ensemble_scheduling(config: Any) -> Iterator[Issue]:
    """ValidateEnsembleSchedulingConfig: the ensemble's own config, without looking at its steps."""
    name = config.name
    if config.instance_group:
        yield Issue(ENSEMBLE, f"instance group should not be specified for ensemble '{name}'",
                    "instance_group", "instance_group")
        return
    if config.HasField("optimization"):
        yield Issue(ENSEMBLE, f"optimization should not be specified for ensemble '{name}'",
                    "optimization", "optimization")
        return
    if config.model_warmup:
        yield Issue(ENSEMBLE, f"model_warmup can not be specified for ensemble '{name}'",
                    "model_warmup", "model_warmup")
        return
    steps = config.ensemble_scheduling.step
    if not steps:
        yield Issue(ENSEMBLE, f"must specify 'step' for ensemble '{name}'", "ensemble_scheduling",
                    "ensemble_scheduling")
        return
    tensors: dict[str, _Flow] = {}
    for index, step in enumerate(steps):
        for what in ("model_name", "input_map", "output_map"):
            if not getattr(step, what):
                yield Issue(ENSEMBLE, f"must specify '{what}' in step {index} of ensemble '{name}'",
                            _step_obj(index), step.model_name and f'"{step.model_name}"' or "step")
                return
        produced = []
        for tensor in step.output_map.values():
            node = tensors.get(tensor)
            if node is not None and node.is_output:
                yield Issue(ENSEMBLE, f"ensemble tensor '{tensor}' can appear in an output map only "
                            f"once for ensemble '{name}' step {index}", _step_obj(index), f'"{tensor}"')
                return
            if node is None:
                node = tensors[tensor] = _Flow(tensor, True)
            node.is_output = True
            produced.append(node)
        for tensor in step.input_map.values():
            node = tensors.setdefault(tensor, _Flow(tensor, False))
            for out in produced:
                out.prev.append(node)
                node.next.append(out)

    queue: deque[_Flow] = deque()
    for io in config.input:
        node = tensors.get(io.name)
        if node is None:
            yield Issue(ENSEMBLE, f"ensemble input '{io.name}' for ensemble {name}' is not used",
                        f"input '{io.name}'", f'"{io.name}"')
            return
        node.ready = True
        queue.append(node)
    while queue:
        for nxt in queue.popleft().next:
            if not nxt.ready and all(p.ready for p in nxt.prev):
                nxt.ready = True
                queue.append(nxt)
    outputs: set[str] = set()
    for io in config.output:
        node = tensors.get(io.name)
        if node is None:
            yield Issue(ENSEMBLE, f"ensemble output '{io.name}' for ensemble {name}' is not used",
                        f"output '{io.name}'", f'"{io.name}"')
            return
        if not node.ready:
            yield Issue(ENSEMBLE, _not_written(name, node), f"output '{io.name}'", f'"{io.name}"')
            return
        outputs.add(io.name)
    unused = [t for t, node in tensors.items()
              if t not in outputs and (not node.ready or not node.next)]
    for tensor in unused:
        yield Issue(ENSEMBLE, f"ensemble tensor '{tensor}' is unused in ensemble '{name}'",
                    f"tensor '{tensor}'", f'"{tensor}"')


def _not_written(ensemble: str, node: _Flow) -> str:
    """Triton's message for an output that no step writes, naming the first unconnected source."""
    message = f"output '{node.name}' for ensemble '{ensemble}' is not written"
    last, seen = node, set()
    prev: list[_Flow] | None = node.prev
    while prev:
        following: list[_Flow] | None = None
        for p in prev:
            if not p.ready and p.name not in seen:
                seen.add(p.name)
                last, following = p, p.prev
                break
        prev = following
    if last is not node:
        message += f": at least one of its depending tensors, '{last.name}', is not connected"
    return message


# --------------------------------------------------------------------------- with the repository


@dataclass(eq=False)
class _Tensor:
    """An ensemble tensor with the type and shape some model gives it (Triton's TensorNode)."""

    model: str
    data_type: int = 0
    dims: tuple[int, ...] = ()
    full_dims: tuple[int, ...] = ()
    decoupled: bool = False
    label: int = 0
    visited: bool = False
    prev: list[_Tensor] = field(default_factory=list)
    next: list[_Tensor] = field(default_factory=list)
    sibling: _Tensor | None = None
    producer: str = ""  # "step N (model M)" that writes this tensor


def _tensor(model: str, batching: bool, data_type: int, dims: Any) -> _Tensor:
    dims = tuple(dims)
    return _Tensor(model, data_type, dims, ((WILDCARD,) if batching else ()) + dims)


def _dims_match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or WILDCARD in (x, y) for x, y in zip(a, b, strict=True))


def _fmt(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _consistency(lhs: _Tensor, rhs: _Tensor, prefix: str) -> str | None:
    if lhs.data_type != rhs.data_type:
        name = pb_schema().DataType.Name
        return (f"{prefix}inconsistent data type: {name(lhs.data_type)} is inferred from model {lhs.model} "
                f"while {name(rhs.data_type)} is inferred from model {rhs.model}")
    if not _dims_match(lhs.dims, rhs.dims) and not _dims_match(lhs.full_dims, rhs.full_dims):
        return (f"{prefix}inconsistent shape: {_fmt(lhs.full_dims)} is inferred from model {lhs.model} "
                f"while {_fmt(rhs.full_dims)} is inferred from model {rhs.model}")
    return None


def _map_step(ensemble: str, index: int, step: Any, model: Any,
              tensors: dict[str, _Tensor]) -> Iterator[Issue]:
    """ValidateTensorMapping for one step whose model config is known."""
    step_name = step.model_name
    obj = _step_obj(index)
    batching = model.max_batch_size > 0
    inputs = {io.name: io for io in model.input}
    for key, tensor in step.input_map.items():
        if key not in inputs:
            yield Issue(ENSEMBLE, f"in ensemble {ensemble}, ensemble tensor {tensor} is mapping to "
                        f"non-existing input {key} in model {step_name}", obj, f'"{key}"')
            return
    for io in model.input:
        tensor = step.input_map.get(io.name)
        if tensor is None:
            if not io.optional:
                yield Issue(ENSEMBLE, f"in ensemble {ensemble}, input {io.name} in model "
                            f"{step_name} is not mapped to any ensemble tensors", obj, f'"{step_name}"')
                return
            continue
        issue = _merge(tensors, tensor, _tensor(step_name, batching, io.data_type, io.dims), ensemble, obj)
        if issue:
            yield issue
            return
    outputs = {io.name: io for io in model.output}
    for key, tensor in step.output_map.items():
        if key not in outputs:
            yield Issue(ENSEMBLE, f"in ensemble {ensemble}, ensemble tensor {tensor} is mapped from "
                        f"non-existing output {key} in model {step_name}", obj, f'"{key}"')
            return
    sibling = _Tensor(step_name)
    for key, tensor in step.output_map.items():
        declared = [io for io in model.output if io.name == key]  # a name declared twice maps twice
        for io in declared:
            issue = _merge(tensors, tensor, _tensor(step_name, batching, io.data_type, io.dims), ensemble, obj)
            if issue:
                yield issue
                return
        tensors[tensor].sibling = sibling
        if len(declared) > 1:
            yield Issue(ENSEMBLE, f"in ensemble {ensemble}, multiple outputs in model {step_name} are mapped to "
                        f"the same ensemble tensor {tensor}", obj, f'"{key}"')
            return


def _merge(tensors: dict[str, _Tensor], tensor: str, node: _Tensor, ensemble: str, obj: Any) -> Issue | None:
    """Record `node` as ensemble tensor `tensor`, or the issue when it disagrees with what is recorded."""
    if tensor not in tensors:
        tensors[tensor] = node
        return None
    problem = _consistency(tensors[tensor], node, f"in ensemble {ensemble}, ensemble tensor {tensor}: ")
    return Issue(ENSEMBLE, problem, obj, f'"{tensor}"') if problem else None


def _link_step(index: int, step: Any, decoupled: bool, tensors: dict[str, _Tensor]) -> None:
    for tensor in step.output_map.values():
        node = tensors[tensor]
        node.decoupled = decoupled
        node.producer = f"step {index} (model {step.model_name})"
        for source in step.input_map.values():
            prev = tensors[source]
            node.prev.append(prev)
            prev.next.append(node)


def _decoupled_branching(ensemble: str, config: Any, tensors: dict[str, _Tensor]) -> tuple[str | None, bool]:
    """Walk the graph as Triton does; a message when a step mixes decoupled origins, and whether the
    ensemble as a whole is decoupled."""
    label = 0
    queue: deque[_Tensor] = deque()
    for io in config.input:
        node = tensors[io.name]
        node.visited = True
        queue.append(node)
    while queue:
        current = queue.popleft()
        for nxt in current.next:
            if nxt.visited or not all(p.visited for p in nxt.prev):
                continue
            first = nxt.prev[0].label
            if any(p.label != first for p in nxt.prev):
                where = f": {nxt.producer}" if nxt.producer and nxt.model != nxt.producer else ""
                return (f"in ensemble {ensemble}, step of model '{nxt.model}' receives inputs originated "
                        f"from different decoupled models{where}"), label != 0
            if nxt.sibling is not None:
                if nxt.sibling.visited:
                    nxt.label = nxt.sibling.label
                else:
                    if nxt.decoupled:
                        label += 1
                    nxt.label = label if nxt.decoupled else first
                    nxt.sibling.label = nxt.label
                    nxt.sibling.visited = True
            else:
                if nxt.decoupled:
                    label += 1
                nxt.label = label if nxt.decoupled else first
            nxt.visited = True
            queue.append(nxt)
    return None, label != 0


@dataclass
class _Repo:
    models: Mapping[str, Any]
    folders: Mapping[str, ModelFolder]
    known: set[str]
    decoupled: dict[str, bool] = field(default_factory=dict)
    strict: bool = False  # auto-complete disabled: a model's declared I/O is all it has

    def is_decoupled(self, name: str, stack: tuple[str, ...] = ()) -> bool:
        """Whether model `name` is decoupled; an ensemble is when any of its steps is."""
        if name in self.decoupled:
            return self.decoupled[name]
        config = self.models.get(name)
        if config is None or name in stack:
            return False
        result = config.model_transaction_policy.decoupled
        if is_ensemble(config):
            steps = config.ensemble_scheduling.step
            result = any(self.is_decoupled(s.model_name, (*stack, name)) for s in steps)
        self.decoupled[name] = result
        return result


def _cycle(repo: _Repo, start: str) -> str | None:
    """Triton's CircularDependencyCheck from one ensemble, walking towards its step models."""
    seen: set[str] = set()

    def walk(current: str) -> str | None:
        config = repo.models.get(current)
        if config is None or not is_ensemble(config):
            return None
        for step in config.ensemble_scheduling.step:
            up = step.model_name
            if up == start:
                return f"circular dependency between ensembles: {start} -> ... -> {current} -> {start}"
            if up not in seen:
                seen.add(up)
                found = walk(up)
                if found:
                    return found
        return None

    return walk(start)


def check_ensemble(name: str, config: Any, repo: _Repo) -> Iterator[Issue]:
    """The repository-level checks of one ensemble whose own config passed."""
    steps = config.ensemble_scheduling.step
    missing = sorted({s.model_name for s in steps if s.model_name not in repo.models
                      and s.model_name not in repo.known})
    if missing:
        yield Issue(ENSEMBLE_MODEL,
                    f"ensemble {name} contains models that are not available or ambiguous: "
                    + ", ".join(missing),
                    "ensemble_scheduling", f'"{missing[0]}"')
        return
    cycle = _cycle(repo, name)
    if cycle:
        yield Issue(ENSEMBLE_CYCLE, cycle, "ensemble_scheduling", "ensemble_scheduling")
        return
    for index, step in enumerate(steps):
        folder = repo.folders.get(step.model_name)
        model = repo.models.get(step.model_name)
        if step.model_version > 0 and model is not None and folder is not None and folder.versions \
                and step.model_version not in selected_versions(model, folder.versions):
            yield Issue(ENSEMBLE_MODEL,
                        f"ensemble '{name}' depends on '{step.model_name}' whose required version "
                        f"{step.model_version} is not loaded", _step_obj(index), "model_version")
            return

    batching = config.max_batch_size > 0
    tensors: dict[str, _Tensor] = {}
    for io in config.input:
        dims = io.reshape.shape if io.HasField("reshape") else io.dims
        tensors[io.name] = _tensor(name, batching, io.data_type, dims)
    sink = _Tensor(name)
    for io in config.output:
        dims = io.reshape.shape if io.HasField("reshape") else io.dims
        node = tensors.setdefault(io.name, _tensor(name, batching, io.data_type, dims))
        sink.prev.append(node)
        node.next.append(sink)
    complete = True
    for index, step in enumerate(steps):
        model = repo.models.get(step.model_name)
        if model is None or (not repo.strict and not model.input and not model.output):
            complete = False  # known only by name, or left to the backend's autocomplete
            continue
        if model.max_batch_size != 0 and model.max_batch_size < config.max_batch_size:
            yield Issue(ENSEMBLE_BATCH,
                        f"ensemble {name} allows maximum batch size {config.max_batch_size}, but it contains "
                        f"model {step.model_name} which only allows maximum batch size to be "
                        f"{model.max_batch_size}", _step_obj(index), "max_batch_size")
            return
        problems = list(_map_step(name, index, step, model, tensors))
        if problems:
            yield from problems
            return
        _link_step(index, step, repo.is_decoupled(step.model_name), tensors)
    if not complete:
        return
    problem, _ = _decoupled_branching(name, config, tensors)
    if problem:
        yield Issue(ENSEMBLE_DECOUPLED, problem, "ensemble_scheduling", "ensemble_scheduling")


def check_ensembles(models: Mapping[str, Any], folders: Mapping[str, ModelFolder], known_models: set[str],
                    valid: set[str], *, strict: bool = False) -> dict[str, list[Issue]]:
    """Repository-level checks of every ensemble in `valid` (those whose own config passed). With `strict`
    (auto-complete disabled) a step model that declares no inputs and outputs is checked as having none."""
    repo = _Repo(models, folders, set(known_models), strict=strict)
    result: dict[str, list[Issue]] = {}
    for name, config in models.items():
        if name in valid and is_ensemble(config) and config.HasField("ensemble_scheduling"):
            issues = list(check_ensemble(name, config, repo))
            issues.extend(_streaming_without_decoupled(name, config, repo))
            if issues:
                result[name] = issues
    return result


def _streaming_without_decoupled(name: str, config: Any, repo: _Repo) -> Iterator[Issue]:
    """A tensorrtllm step fed a streaming flag but not decoupled: every streaming request fails."""
    for index, step in enumerate(config.ensemble_scheduling.step):
        model = repo.models.get(step.model_name)
        if model is None or model.backend != "tensorrtllm" or model.model_transaction_policy.decoupled:
            continue
        fed = [key for key in step.input_map if key in streaming_inputs()]
        if fed:
            yield Issue(TRTLLM_DECOUPLED,
                        f"ensemble {name} passes '{step.input_map[fed[0]]}' to input '{fed[0]}' of "
                        f"tensorrtllm model {step.model_name}, which is not decoupled: streaming requests "
                        "will fail; set model_transaction_policy { decoupled: true } in that model",
                        _step_obj(index), f'"{fed[0]}"', WARNING)
