"""Real model repositories and single-point mutations of them, judged by the real tritonserver and by the static
checks (`check_repository`). Used by tests/test_conformance_realworld.py (a fixed subset in `make test`, the whole
corpus in `make realworld`).

Corpus: ../shared/conformance/realworld-configs/<owner>__<project>__<path>/ (or the folder that
KUBECTL_TRITON_REALWORLD_CORPUS names) — one real model repository each, as committed in public projects (config.pbtxt
texts and folder shape; no weights), sources.json names repository, path, commit and license. Third-party files, so
the corpus is not in git: tests/fixtures/realworld-sources.json names every repository of it and
tools/realworld_corpus.py writes it from git copies of those projects.

How one case is judged: its models are renamed with a unique prefix (folder, `name`, ensemble steps) so that many
cases share one server; the server runs on a shadow of them (kubectl_triton.adapters.shadow: every non-ensemble
model becomes a python-backend stub on CPU, ensembles unchanged) with auto-complete on, Triton's default, which
these projects ran with. A model's Triton verdict is "refused" when it is not READY; its static verdict is
"refused" when check_repository reports an error for it. A case agrees when every judged model agrees.

What a python shadow cannot judge, and how it is handled (`unjudgeable`):
- backend and platform (the shadow replaces them): mutations never touch them;
- I/O a backend auto-completes from its model file (an onnx/TensorRT/... model that declares no inputs or
  outputs): such a model loads in the shadow as it would with its file, but an ensemble that maps onto its
  undeclared tensors fails in the shadow only; such ensembles are left out of the score;
- python models whose own model.py auto-completes its config (`auto_complete_config`): the stub does not;
  treated like the previous case;
- backend-specific parameters and files (weights, TensorRT engines, DALI pipelines, warmup data files): not
  present; mutations never touch them. Where the static checks refuse a model for its backend's own parameters
  only (the TensorRT-LLM checks: an unfilled `${engine_dir}` template placeholder), that model and the
  ensembles that run it are left out of the score (the shadow's stub would load them);
- GPU ids: the shadow runs GPU groups on CPU (host-dependent messages are not errors; see checks.model.triton).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import ERROR
from kubectl_triton.formats import pbtxt

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CORPUS = Path(os.environ.get("KUBECTL_TRITON_REALWORLD_CORPUS") or SHARED / "conformance" / "realworld-configs")
CONFIG = "config.pbtxt"
# Checks of one backend's own parameters (the TensorRT-LLM backend reads them when it loads): a python shadow
# does not read them, so a model refused only by these (and the ensembles that run it) is left out of the score.
BACKEND_SPECIFIC = {"TRTLLMParameter", "TRTLLMPlaceholder", "TRTLLMDecoupled", "TRTLLMTextInput"}
AUTOCOMPLETING_BACKENDS = {"onnxruntime", "tensorrt", "pytorch", "tensorflow", "openvino", "paddle", "fil", "dali",
                           "tensorrtllm", "vllm"}


@dataclass
class Repo:
    """One real model repository of the corpus."""

    slug: str
    path: Path
    source: dict[str, Any]

    @property
    def project(self) -> str:
        return str(self.source["repository"])

    def models(self) -> list[str]:
        return sorted(p.parent.name for p in self.path.glob(f"*/{CONFIG}"))


@dataclass
class Case:
    """A repository as found (mutation None) or with one mutation applied to one model."""

    repo: Repo
    mutation: str | None = None  # "<operator>:<model>"
    apply: Callable[[dict[str, Any]], bool] | None = field(default=None, repr=False)
    triton: dict[str, str | None] = field(default_factory=dict)  # model -> Triton's failure (None: READY)
    static: dict[str, list[str]] = field(default_factory=dict)  # model -> static error messages
    skipped: set[str] = field(default_factory=set)  # models left out of the score (see module docstring)

    @property
    def name(self) -> str:
        return self.repo.slug + (f" [{self.mutation}]" if self.mutation else "")

    def disagreements(self) -> list[str]:
        out = []
        for model, message in sorted(self.triton.items()):
            if model in self.skipped:
                continue
            ours = self.static.get(model, [])
            if message is None and ours:
                out.append(f"{model}: Triton loads it, static says {ours[0]!r}")
            elif message is not None and not ours:
                out.append(f"{model}: Triton refuses ({message[:300]!r}), static reports no error")
        return out

    @property
    def agrees(self) -> bool:
        return not self.disagreements()


def load_corpus(root: Path = CORPUS) -> list[Repo]:
    sources = {row["slug"]: row for row in json.loads((root / "sources.json").read_text(encoding="utf-8"))}
    return [Repo(slug, root / slug, row) for slug, row in sorted(sources.items()) if (root / slug).is_dir()]


# -- staging: a case as a model repository of its own, models renamed -------------------------------------------

def _parse(text: str) -> Any | None:
    try:
        return pbtxt.parse(text, CONFIG)
    except pbtxt.PbtxtError:
        return None


def stage(case: Case, dest: Path, prefix: str) -> dict[str, str]:
    """Write the case's repository under `dest` with every model renamed `prefix + name`, the mutation applied;
    returns staged name -> original name."""
    names = {}
    configs: dict[str, Any] = {}
    models = case.repo.models()
    if case.mutation:
        models = sorted(closure(case.repo, case.mutation.split(":", 1)[1]))
    for model in models:
        src = case.repo.path / model
        out = dest / f"{prefix}{model}"
        shutil.copytree(src, out)
        names[out.name] = model
        text = (src / CONFIG).read_text(encoding="utf-8", errors="replace")
        config = _parse(text)
        if config is None:
            continue  # Triton reports the syntax error whatever the name
        if config.name:
            config.name = prefix + config.name
        for step in config.ensemble_scheduling.step:
            step.model_name = prefix + step.model_name
        configs[model] = config
    if case.apply is not None:
        target = case.mutation.split(":", 1)[1] if case.mutation else ""
        case.apply({"target": target, "configs": configs, "prefix": prefix, "dest": dest})
    for model, config in configs.items():
        (dest / f"{prefix}{model}" / CONFIG).write_text(pbtxt.dumps(config), encoding="utf-8")
    return names


def closure(repo: Repo, target: str) -> set[str]:
    """The folders a mutation of `target` can affect: the ensembles that run it (transitively) and every model
    those ensembles run."""
    configs = {m: _parse((repo.path / m / CONFIG).read_text(encoding="utf-8", errors="replace"))
               for m in repo.models()}
    folder_of = {(c.name or m): m for m, c in configs.items() if c is not None}
    folder_of.update({m: m for m in configs})

    def steps(model: str) -> set[str]:
        config = configs.get(model)
        if config is None:
            return set()
        return {folder_of.get(s.model_name, s.model_name) for s in config.ensemble_scheduling.step}

    out = {target}
    changed = True
    while changed:
        changed = False
        for model in configs:
            if model not in out and steps(model) & out:
                out.add(model)
                changed = True
        for model in list(out):
            new = (steps(model) & set(configs)) - out
            if new:
                out |= new
                changed = True
    return out


def autocompleted(configs: dict[str, Any]) -> set[str]:
    """Models whose I/O a real backend would auto-complete (none declared); the shadow cannot."""
    from kubectl_triton.adapters.shadow import backend_of

    out = set()
    for model, config in configs.items():
        if config.platform == "ensemble":
            continue
        backend = backend_of(config)
        if (backend in AUTOCOMPLETING_BACKENDS and (not config.input or not config.output)) or (
                backend == "python" and not config.input and not config.output):
            out.add(model)
    return out


def unjudgeable(staged: Path) -> set[str]:
    """Ensembles (by staged folder name) with a step onto a model whose I/O only its backend would fill in."""
    configs = {p.parent.name: c for p in staged.glob(f"*/{CONFIG}")
               if (c := _parse(p.read_text(encoding="utf-8", errors="replace"))) is not None}
    by_name = {(c.name or m): m for m, c in configs.items()}
    filled = {by_name.get(n, n) for n in autocompleted(configs)} | autocompleted(configs)
    out: set[str] = set()
    changed = True
    while changed:  # ensembles of ensembles inherit it
        changed = False
        for model, config in configs.items():
            if model in out or config.platform != "ensemble":
                continue
            steps = {by_name.get(s.model_name, s.model_name) for s in config.ensemble_scheduling.step}
            if steps & (filled | out):
                out.add(model)
                changed = True
    return out


# -- judging ------------------------------------------------------------------------------------------------------

def judge_static(case: Case, staged: Path, names: dict[str, str]) -> set[str]:
    """The static verdicts; returns the staged models whose only errors are backend-specific ones."""
    from kubectl_triton.checks.model.modelrepo import check_repository

    errors: dict[str, list[str]] = {}
    codes: dict[str, set[str]] = {}
    for f in check_repository(staged, strict=False):
        if f.severity == ERROR and f.model in names:
            errors.setdefault(names[str(f.model)], []).append(f.message)
            codes.setdefault(str(f.model), set()).add(f.code)
    case.static = errors
    return {model for model, found in codes.items() if found <= BACKEND_SPECIFIC}


def dependents(staged: Path, models: set[str]) -> set[str]:
    """`models` and every ensemble (staged folder name) that runs one of them, transitively."""
    configs = {p.parent.name: c for p in staged.glob(f"*/{CONFIG}")
               if (c := _parse(p.read_text(encoding="utf-8", errors="replace"))) is not None}
    out = set(models)
    changed = True
    while changed:
        changed = False
        for model, config in configs.items():
            if model not in out and {s.model_name for s in config.ensemble_scheduling.step} & out:
                out.add(model)
                changed = True
    return out


def _serve(shadow: Path, install: Any) -> dict[str, str | None] | None:
    """Staged model -> Triton's failure (None: READY) from one server (load_repository: started again without
    the models a dying server had refused); None when the server kept dying."""
    from kubectl_triton.adapters.tritonserver import TritonServerError, load_repository

    try:
        loaded = load_repository(shadow, timeout=600, exit_on_error=False, strict_model_config=False,
                                 install=install, extra_args=["--model-load-thread-count=4"])
    except TritonServerError:
        return None
    return {p.name: loaded.verdict(p.name) for p in shadow.iterdir() if p.is_dir()}


def judge(cases: list[Case], install: Any, workdir: Path) -> None:
    """Judge every case: one tritonserver for all of them (halved and retried where the server dies)."""
    staged: list[tuple[Case, Path, str, dict[str, str]]] = []
    for i, case in enumerate(cases):
        prefix = f"c{i:04d}_"
        dest = workdir / "staged" / prefix
        names = stage(case, dest, prefix)
        backend_only = judge_static(case, dest, names)
        skip = unjudgeable(dest) | dependents(dest, backend_only)
        case.skipped = {names[s] for s in skip if s in names}
        staged.append((case, dest, prefix, names))
    _judge_triton(staged, install, workdir)


def _judge_triton(staged: list[tuple[Case, Path, str, dict[str, str]]], install: Any, workdir: Path) -> None:
    from kubectl_triton.adapters.shadow import build_shadow

    shadow = Path(tempfile.mkdtemp(prefix="shadow-", dir=workdir))
    for _, dest, _, _ in staged:
        build_shadow(dest, shadow, max_instances=1)
    verdicts = _serve(shadow, install)
    shutil.rmtree(shadow, ignore_errors=True)
    if verdicts is None:
        if len(staged) == 1:
            case, _, _, names = staged[0]
            case.triton = {m: "the server died loading it" for m in names.values()}
            return
        half = len(staged) // 2
        _judge_triton(staged[:half], install, workdir)
        _judge_triton(staged[half:], install, workdir)
        return
    for case, _, _, names in staged:
        case.triton = {names[s]: verdicts.get(s, "not loaded") for s in names}


# -- single-point mutations ---------------------------------------------------------------------------------------

Mutator = Callable[[dict[str, Any]], bool]


def _cfg(ctx: dict[str, Any]) -> Any:
    return ctx["configs"].get(ctx["target"])


def _ensemble_of(ctx: dict[str, Any]) -> Any:
    return _cfg(ctx) if _cfg(ctx) is not None and _cfg(ctx).platform == "ensemble" else None


def _steps_onto(ctx: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    """(ensemble config, step) of every step in the case that runs the target model."""
    target = _cfg(ctx)
    name = target.name or ctx["prefix"] + ctx["target"]
    for config in ctx["configs"].values():
        for step in config.ensemble_scheduling.step:
            if step.model_name == name:
                yield config, step


def m_drop_input_type(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if not c.input:
        return False
    c.input[0].data_type = 0
    return True


def m_drop_output_dims(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if not c.output or not c.output[0].dims:
        return False
    del c.output[0].dims[:]
    return True


def m_zero_dim(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if not c.input or not c.input[0].dims:
        return False
    c.input[0].dims[-1] = 0
    return True


def m_bad_dim(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if not c.output or not c.output[0].dims:
        return False
    c.output[0].dims[0] = -2
    return True


def m_duplicate_input(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if not c.input:
        return False
    c.input.add().CopyFrom(c.input[0])
    return True


def m_negative_max_batch(ctx: dict[str, Any]) -> bool:
    _cfg(ctx).max_batch_size = -1
    return True


def m_preferred_above_max(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if c.max_batch_size <= 0 or c.platform == "ensemble":
        return False
    del c.dynamic_batching.preferred_batch_size[:]
    c.dynamic_batching.preferred_batch_size.append(c.max_batch_size + 1)
    return True


def m_batching_without_batch(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if c.max_batch_size <= 0 or not c.HasField("dynamic_batching") or c.platform == "ensemble":
        return False
    c.max_batch_size = 0
    return True


def m_cpu_with_gpus(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if c.platform == "ensemble":
        return False
    kind = pbtxt.schema().ModelInstanceGroup.Kind
    del c.instance_group[:]
    c.instance_group.add(kind=kind.KIND_CPU, count=1, gpus=[0])
    return True


def m_negative_count(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if c.platform == "ensemble":
        return False
    kind = pbtxt.schema().ModelInstanceGroup.Kind
    del c.instance_group[:]
    c.instance_group.add(kind=kind.KIND_CPU, count=-1)
    return True


def m_format_rank(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if not c.input or c.platform == "ensemble":
        return False
    c.input[0].format = pbtxt.schema().ModelInput.Format.FORMAT_NCHW
    del c.input[0].dims[:]
    c.input[0].dims.extend([3, 8])
    return True


def m_reshape_mismatch(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if not c.input or not c.input[0].dims or any(d < 0 for d in c.input[0].dims) or c.platform == "ensemble":
        return False
    size = 1
    for d in c.input[0].dims:
        size *= d
    del c.input[0].reshape.shape[:]
    c.input[0].reshape.shape.append(size + 1)
    return True


def m_version_missing(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    del c.version_policy.specific.versions[:]
    c.version_policy.specific.versions.append(7)
    return True


def _priorities(ctx: dict[str, Any], levels: int, default: int) -> bool:
    """Dynamic batching with `levels` priority levels and `default` as the default one (batching models only)."""
    c = _cfg(ctx)
    if c.max_batch_size <= 0 or c.platform == "ensemble" or c.HasField("sequence_batching"):
        return False
    c.dynamic_batching.priority_levels = levels
    c.dynamic_batching.default_priority_level = default
    return True


def m_priority_default_above(ctx: dict[str, Any]) -> bool:
    return _priorities(ctx, 2, 3)


def m_step_missing_model(ctx: dict[str, Any]) -> bool:
    c = _ensemble_of(ctx)
    if c is None:
        return False
    c.ensemble_scheduling.step[-1].model_name += "_missing"
    return True


def m_input_map_missing_tensor(ctx: dict[str, Any]) -> bool:
    c = _ensemble_of(ctx)
    if c is None:
        return False
    for step in c.ensemble_scheduling.step:
        for key in sorted(step.input_map):
            step.input_map[key] = step.input_map[key] + "_nowhere"
            return True
    return False


def m_output_map_unknown_output(ctx: dict[str, Any]) -> bool:
    c = _ensemble_of(ctx)
    if c is None:
        return False
    for step in c.ensemble_scheduling.step:
        for key in sorted(step.output_map):
            value = step.output_map[key]
            del step.output_map[key]
            step.output_map[key + "_undeclared"] = value
            return True
    return False


def m_ensemble_output_unproduced(ctx: dict[str, Any]) -> bool:
    c = _ensemble_of(ctx)
    if c is None or not c.output:
        return False
    c.output[0].name += "_unproduced"
    return True


def m_composing_type_changed(ctx: dict[str, Any]) -> bool:
    """An input of a composing model gets another data type than the ensemble tensor mapped onto it."""
    c = _cfg(ctx)
    if c.platform == "ensemble":
        return False
    for _, step in _steps_onto(ctx):
        for inp in c.input:
            if inp.name in step.input_map:
                fp32, int64 = pbtxt.schema().TYPE_FP32, pbtxt.schema().TYPE_INT64
                inp.data_type = int64 if inp.data_type != int64 else fp32
                return True
    return False


def m_composing_dims_changed(ctx: dict[str, Any]) -> bool:
    """An input of a composing model gets one more dimension than the ensemble tensor mapped onto it."""
    c = _cfg(ctx)
    if c.platform == "ensemble":
        return False
    for _, step in _steps_onto(ctx):
        for inp in c.input:
            if inp.name in step.input_map and inp.dims and all(d > 0 for d in inp.dims):
                inp.dims.append(5)
                return True
    return False


def m_decoupled_in_ensemble(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if c.platform == "ensemble" or not any(True for _ in _steps_onto(ctx)):
        return False
    c.model_transaction_policy.decoupled = not c.model_transaction_policy.decoupled
    return True


def m_composing_batch_below_ensemble(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    steps = list(_steps_onto(ctx))
    if c.platform == "ensemble" or not steps or c.max_batch_size <= 0:
        return False
    ensemble = steps[0][0]
    if ensemble.max_batch_size <= 1:
        return False
    c.max_batch_size = ensemble.max_batch_size - 1
    c.dynamic_batching.ClearField("preferred_batch_size")
    return True


def m_rename_model(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    c.name = (c.name or ctx["prefix"] + ctx["target"]) + "_renamed"
    return True


def m_duplicate_output(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if not c.output:
        return False
    c.output.add().CopyFrom(c.output[0])
    return True


def m_empty_input_name(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if not c.input or c.platform == "ensemble":
        return False
    c.input[0].name = ""
    return True


def m_batch_input_unknown_source(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if c.max_batch_size <= 0 or c.platform == "ensemble":
        return False
    c.batch_input.add(target_name=["BATCH_COUNT"], data_type=pbtxt.schema().TYPE_FP32,
                      source_input=["undeclared_input"])
    return True


def m_shape_tensor_float(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    # Triton's core refuses a shape tensor on any platform but TensorRT's; on a TensorRT model only the engine
    # can say (its backend checks the type), and the shadow has none
    if not c.input or c.platform in ("ensemble", "tensorrt_plan") or c.backend == "tensorrt":
        return False
    c.input[0].is_shape_tensor = True
    c.input[0].data_type = pbtxt.schema().TYPE_FP32
    return True


def m_default_priority_without_levels(ctx: dict[str, Any]) -> bool:
    return _priorities(ctx, 0, 1)


def m_kind_model(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if c.platform == "ensemble":
        return False
    kind = pbtxt.schema().ModelInstanceGroup.Kind
    del c.instance_group[:]
    c.instance_group.add(kind=kind.KIND_MODEL, count=1)
    return True


def m_output_reshape_mismatch(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if not c.output or not c.output[0].dims or any(d < 0 for d in c.output[0].dims) or c.platform == "ensemble":
        return False
    size = 1
    for d in c.output[0].dims:
        size *= d
    del c.output[0].reshape.shape[:]
    c.output[0].reshape.shape.extend([size, 2])
    return True


def m_response_cache_decoupled(ctx: dict[str, Any]) -> bool:
    c = _cfg(ctx)
    if c.platform == "ensemble":
        return False
    c.model_transaction_policy.decoupled = True
    c.response_cache.enable = True
    return True


def m_composing_nonbatching(ctx: dict[str, Any]) -> bool:
    """A composing model stops batching while the ensemble batches."""
    c = _cfg(ctx)
    steps = list(_steps_onto(ctx))
    if c.platform == "ensemble" or not steps or c.max_batch_size <= 0 or steps[0][0].max_batch_size <= 0:
        return False
    c.max_batch_size = 0
    c.ClearField("dynamic_batching")
    return True


def m_ensemble_input_unused(ctx: dict[str, Any]) -> bool:
    c = _ensemble_of(ctx)
    if c is None:
        return False
    c.input.add(name="UNUSED_INPUT", data_type=pbtxt.schema().TYPE_FP32, dims=[1])
    return True


def m_ensemble_self_step(ctx: dict[str, Any]) -> bool:
    c = _ensemble_of(ctx)
    if c is None:
        return False
    c.ensemble_scheduling.step[0].model_name = c.name or ctx["prefix"] + ctx["target"]
    return True


def m_ensemble_optional_input(ctx: dict[str, Any]) -> bool:
    c = _ensemble_of(ctx)
    if c is None or not c.input:
        return False
    c.input[0].optional = True
    return True


MUTATORS: dict[str, Mutator] = {f.__name__[2:]: f for f in (
    m_drop_input_type, m_drop_output_dims, m_zero_dim, m_bad_dim, m_duplicate_input, m_negative_max_batch,
    m_preferred_above_max, m_batching_without_batch, m_cpu_with_gpus, m_negative_count, m_format_rank,
    m_reshape_mismatch, m_version_missing, m_priority_default_above, m_step_missing_model,
    m_input_map_missing_tensor, m_output_map_unknown_output, m_ensemble_output_unproduced,
    m_composing_type_changed, m_composing_dims_changed, m_decoupled_in_ensemble, m_composing_batch_below_ensemble,
    m_rename_model, m_duplicate_output, m_empty_input_name, m_batch_input_unknown_source, m_shape_tensor_float,
    m_default_priority_without_levels, m_kind_model, m_output_reshape_mismatch, m_response_cache_decoupled,
    m_composing_nonbatching, m_ensemble_input_unused, m_ensemble_self_step, m_ensemble_optional_input)}


class _NotApplicable(Exception):
    pass


def _guarded(mutator: Mutator) -> Mutator:
    def run(ctx: dict[str, Any]) -> bool:
        if _cfg(ctx) is None or not mutator(ctx):
            raise _NotApplicable
        return True
    return run


def mutations(repos: list[Repo], per_repo: int, seed: int = 15) -> list[Case]:
    """Up to `per_repo` applicable single-point mutations per repository, chosen reproducibly (seeded): each
    picks an operator not yet used for that repository and a model it applies to."""
    rng = random.Random(seed)
    out = []
    for repo in repos:
        models = repo.models()
        ops = sorted(MUTATORS)
        rng.shuffle(ops)
        wiring = [op for op in ops if op in ENSEMBLE_OPERATORS]
        ops = wiring[:2] + [op for op in ops if op not in wiring[:2]]  # ensembles: two wiring mutations first
        chosen = 0
        for op in ops:
            if chosen >= per_repo:
                break
            candidates = models[:]
            rng.shuffle(candidates)
            for model in candidates:
                if _applies_guarded(repo, op, model):
                    out.append(Case(repo, f"{op}:{model}", _guarded(MUTATORS[op])))
                    chosen += 1
                    break
    return out


ENSEMBLE_OPERATORS = {"step_missing_model", "input_map_missing_tensor", "output_map_unknown_output",
                      "ensemble_output_unproduced", "composing_type_changed", "composing_dims_changed",
                      "decoupled_in_ensemble", "composing_batch_below_ensemble", "composing_nonbatching",
                      "ensemble_input_unused", "ensemble_self_step", "ensemble_optional_input"}


def _applies_guarded(repo: Repo, name: str, model: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            stage(Case(repo, f"{name}:{model}", _guarded(MUTATORS[name])), Path(tmp), "p_")
        except _NotApplicable:
            return False
    return True


def summary(originals: list[Case], mutated: list[Case]) -> tuple[str, list[str]]:
    """The figures line and one line per disagreement."""
    cases = originals + mutated
    agree = [c for c in cases if c.agrees]
    false_errors = [(c, d) for c in originals for d in c.disagreements() if "Triton loads it" in d]
    projects = {c.repo.project for c in originals}
    skipped = sum(len(c.skipped) for c in originals)
    line = (f"real-world conformance: {len(originals)} repositories from {len(projects)} projects, "
            f"{len(mutated)} single-point mutations; {len(agree)}/{len(cases)} cases agree with tritonserver "
            f"({len(agree) / max(1, len(cases)):.1%}); unmutated {sum(c.agrees for c in originals)}/{len(originals)}, "
            f"mutated {sum(c.agrees for c in mutated)}/{len(mutated)}; false errors on unmutated repositories: "
            f"{len(false_errors)}; models left out (I/O only a backend auto-completes, or backend-specific "
            f"parameters): {skipped}")
    misses = [f"  {c.name}: {d}" for c in cases for d in c.disagreements()]
    return line, misses


def families(cases: list[Case]) -> dict[str, int]:
    """Disagreements per mutation operator ("as found" for unmutated repositories)."""
    out: dict[str, int] = {}
    for c in cases:
        if not c.agrees:
            key = c.mutation.split(":")[0] if c.mutation else "as found"
            out[key] = out.get(key, 0) + 1
    return out


def project_of(slug: str) -> str:
    return re.sub(r"__.*", "", slug)
