"""Repository-level compatibility: every TensorRT-LLM model's recorded engines against the GPU
overlays that deploy it. Rendering is the only I/O besides reading models/; the rest is pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks.findings import Finding, Severity
from kubectl_triton.checks.registry import register
from kubectl_triton.compat.catalog import GPU, by_gfd_label, gpus, resolve, strip_gfd_suffix
from kubectl_triton.compat.engine import CONFIG, EngineInfo, read_engine_dir
from kubectl_triton.compat.rules import WARNING, Reason, Result, Target, evaluate, make_result, target_reasons
from kubectl_triton.errors import InputError, RenderError
from kubectl_triton.formats import pbtxt
from kubectl_triton.formats.yamlio import load_all_shared, loads_all
from kubectl_triton.gitops import repo
from kubectl_triton.gitops.labels import INSTANCE_LABEL, PRODUCT_LABEL
from kubectl_triton.gitops.model import Layout, Repository

# The compat rules' reason codes as registered checks (severity: the worst a rule reports; rules may grade lower).
_DECLARED: tuple[tuple[str, Severity, str, str], ...] = (
    ("ArchMismatch", "error", "the engine was built for another compute capability than the overlay's GPU",
     "build the engine on (or for) the GPU type that serves it"),
    ("PrecisionUnsupported", "error", "the engine's precision needs a GPU feature the target lacks (FP8, FP4, BF16)",
     "quantize for a precision the GPU supports, or serve on a newer GPU type"),
    ("GPUCountMismatch", "error", "the engine's world size (tp x pp) differs from the GPUs a pod gets",
     "request tp x pp GPUs per pod, or rebuild the engine for the GPU count"),
    ("VersionMismatch", "error", "the engine was built with another TensorRT-LLM version than the image serves",
     "rebuild the engine in the serving image (or serve from the build image)"),
    ("InsufficientMemory", "error", "the engine's weights and KV cache do not fit the GPU's memory",
     "use more GPUs (tp), a smaller precision, or a GPU with more memory"),
    ("BatchSizeExceedsEngine", "error", "config.pbtxt's max_batch_size exceeds the engine's build limit",
     "lower max_batch_size to the engine's max_batch_size, or rebuild"),
    ("SeqLenExceedsEngine", "error", "requested sequence lengths exceed the engine's build limits",
     "lower the model's limits or rebuild with larger max_input_len / max_seq_len"),
    ("AmbiguousTarget", "error", "the overlay's GPU type or image cannot be told from the rendered objects",
     "include exactly one GPU Component and one tritonserver image"),
    ("UnknownBuildGPU", "warning", "the GPU an engine was built on is not in the GPU catalog",
     "re-record the engine on a known GPU, or declare the GPU type"),
    ("UnknownGPU", "error", "the overlay's GPU type is not in the GPU catalog", "use a GPU type of the catalog"),
    ("DeviceModelDiffers", "warning", "the engine was built on another GPU model of the same architecture",
     "usually loads; rebuild on the serving GPU for tuned kernels"),
    ("UnknownImage", "warning", "the image is not in the image -> TensorRT-LLM table, so versions are not compared",
     "use a known NGC tritonserver tag, or add it to the table"),
    ("EngineNotRecorded", "warning", "no engine metadata is recorded for the model, so nothing is compared",
     "kubectl triton record-engine after the engine build"),
)
CHECKS = {code: register(code, sev, "overlay", desc, fix) for code, sev, desc, fix in _DECLARED}


GPU_RESOURCE = "nvidia.com/gpu"
SERVER_CONTAINER = "tritonserver"
ENGINE_MODEL = "tensorrt_llm"


@dataclass(frozen=True)
class Placement:
    """What a rendered Deployment tells about where and how its pods run."""

    model: str
    deployment: str
    overlay: str                       # overlay path relative to the repo root
    labels: frozenset[str] | None      # admitted GFD product labels; None = any node
    image: str | None
    gpus_per_pod: int | None
    group_size: int = 1                # pods per LeaderWorkerSet group (a multi-node model); 1 for a Deployment


@dataclass(frozen=True)
class ModelInfo:
    """A model folder: metadata, recorded engines and its tensorrt_llm config.pbtxt values."""

    name: str
    backend: str | None
    meta: dict[str, Any]
    engines: dict[str, EngineInfo]     # GPU key -> recorded engine metadata
    config_path: str | None
    limits: dict[str, Any]             # config_limits() of the tensorrt_llm config.pbtxt


# ---- pure: rendered objects -> placements ------------------------------------------------------

def admitted_labels(pod_spec: dict[str, Any]) -> frozenset[str] | None:
    """GFD product labels a pod spec's nodeSelector and required node affinity admit (None = any)."""
    selector = (pod_spec.get("nodeSelector") or {}).get(PRODUCT_LABEL)
    chosen: set[str] | None = {str(selector)} if selector is not None else None
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms:
        union: set[str] | None = set()
        for term in terms:
            term_set: set[str] | None = None
            for expr in term.get("matchExpressions") or []:
                if expr.get("key") != PRODUCT_LABEL:
                    continue
                if expr.get("operator") == "In":
                    values = {str(v) for v in expr.get("values") or []}
                    term_set = values if term_set is None else term_set & values
            if term_set is None or union is None:
                union = None
                break
            union |= term_set
        if union is not None:
            chosen = union if chosen is None else chosen & union
    return frozenset(chosen) if chosen is not None else None


def _gpu_count(container: dict[str, Any]) -> int | None:
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (res.get(part) or {}).get(GPU_RESOURCE)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return None
    return None


def placements(docs: Iterable[Any], overlay: str) -> list[Placement]:
    """Placements of the Deployments and LeaderWorkerSet groups (their leader template; every pod of a group asks
    for the same GPUs) labelled with a model instance among rendered objects."""
    out = []
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") not in ("Deployment", "LeaderWorkerSet"):
            continue
        meta = doc.get("metadata") or {}
        group = 1
        if doc["kind"] == "LeaderWorkerSet":
            lwt = (doc.get("spec") or {}).get("leaderWorkerTemplate") or {}
            template = lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}
            size = lwt.get("size")
            group = size if isinstance(size, int) and size > 0 else 1
        else:
            template = ((doc.get("spec") or {}).get("template") or {})
        labels = {**(meta.get("labels") or {}), **((template.get("metadata") or {}).get("labels") or {})}
        model = labels.get(INSTANCE_LABEL)
        if not model:
            continue
        pod = template.get("spec") or {}
        containers = pod.get("containers") or []
        server = next((c for c in containers if c.get("name") == SERVER_CONTAINER), None)
        counts = [n for c in ([server] if server else containers) if (n := _gpu_count(c)) is not None]
        out.append(Placement(model=str(model), deployment=str(meta.get("name", "")), overlay=overlay,
                             labels=admitted_labels(pod), image=(server or {}).get("image"),
                             gpus_per_pod=sum(counts) if counts else None, group_size=group))
    return out


def target_for(placement: Placement, model: ModelInfo) -> Target:
    """A rules Target from a placement and the model's config/metadata."""
    found: dict[str, GPU] = {}
    unknown: list[str] = []
    mig_mib = None
    for label in sorted(placement.labels or ()):
        gpu = by_gfd_label(label)
        if gpu is None:
            unknown.append(label)
        else:
            found.setdefault(gpu.key, gpu)
            mig_mib = strip_gfd_suffix(label)[1] or mig_mib
    order = list(gpus())
    chosen = tuple(sorted(found.values(), key=lambda g: order.index(g.key)))
    name = chosen[0].key if len(chosen) == 1 and not unknown else Path(placement.overlay).name
    return Target(name=name, gpus=chosen, unknown_labels=tuple(unknown),
                  unselected=placement.labels is None, image=placement.image,
                  gpus_per_pod=placement.gpus_per_pod, **_model_limits(model), memory_mib=mig_mib,
                  group_size=placement.group_size)


def _number(text: Any, kind: type) -> Any:
    try:
        return kind(str(text).strip())
    except (TypeError, ValueError):
        return None  # unset template values like "${max_tokens_in_paged_kv_cache}"


def config_limits(cfg: dict[str, Any]) -> dict[str, Any]:
    """Target fields from a tensorrt_llm config.pbtxt (as pbtxt.to_dict returns it)."""
    params = parameters(cfg)
    return {
        "triton_max_batch_size": int(cfg.get("max_batch_size", 0)) or None,
        "kv_cache_free_gpu_mem_fraction": _number(params.get("kv_cache_free_gpu_mem_fraction"), float),
        "max_tokens_in_paged_kv_cache": _number(params.get("max_tokens_in_paged_kv_cache"), int),
    }


def _model_limits(model: ModelInfo) -> dict[str, Any]:
    engine = model.meta.get("engine") or {}
    return {
        **model.limits,
        "max_input_len": _number(engine.get("max_input_len"), int),
        "max_seq_len": _number(engine.get("max_seq_len"), int),
    }


def engine_for(model: ModelInfo, target: Target) -> tuple[str | None, EngineInfo | None]:
    """The recorded engine a target would load: engines/<its GPU key>, or the model's only one."""
    if len(target.gpus) == 1 and target.gpus[0].key in model.engines:
        key = target.gpus[0].key
        return key, model.engines[key]
    if target.name in model.engines:
        return target.name, model.engines[target.name]
    if len(model.engines) == 1:
        return next(iter(model.engines.items()))
    return None, None


def pair_result(model: ModelInfo, target: Target, overlay: str | None) -> Result:
    """One (model, target) verdict, or EngineNotRecorded when no engine metadata applies."""
    _, engine = engine_for(model, target)
    if engine is None:
        reason = Reason("EngineNotRecorded", WARNING,
                        f"no engine metadata under models/{model.name}/engines/ for {target.name}; "
                        f"run `kubectl triton record-engine {model.name} --from DIR`")
        return make_result(model.name, target.name, [*target_reasons(target), reason], overlay=overlay)
    result = evaluate(engine, target, model=model.name)
    result.overlay = overlay
    return result



# ---- I/O adapters ------------------------------------------------------------------------------

def parameters(cfg: dict[str, Any]) -> dict[str, str]:
    """A config.pbtxt's parameters map as plain strings."""
    return {k: str((v or {}).get("string_value", "")) for k, v in (cfg.get("parameters") or {}).items()}


_META_STRINGS = ("name", "backend", "image")
_ENGINE_INTS = ("tp", "pp", "max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens")


def check_metadata(meta: Any, path: Path) -> None:
    """The shape of models/<name>/model.yaml as add-model writes it; anything else raises InputError."""
    if not isinstance(meta, dict):
        raise InputError(f"{path}: model metadata must be a mapping, got {type(meta).__name__}")
    for key in _META_STRINGS:
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise InputError(f"{path}: {key} must be a string, got {meta[key]!r}")
    gpus = meta.get("gpus")
    if gpus is not None and (not isinstance(gpus, list) or not all(isinstance(g, str) for g in gpus)):
        raise InputError(f"{path}: gpus must be a list of GPU types, got {gpus!r}")
    for key in ("engine", "artifacts"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            raise InputError(f"{path}: {key} must be a mapping, got {type(meta[key]).__name__}")
    engine = meta.get("engine") or {}
    for key in _ENGINE_INTS:
        value = engine.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31):
            raise InputError(f"{path}: engine.{key} must be a positive integer, got {value!r}")


def _model_name(directory: Path) -> str:
    """The name model.yaml gives the model (else its folder's); a malformed file raises InputError."""
    if not (directory / "model.yaml").is_file():
        return directory.name
    docs = load_all_shared(directory / "model.yaml")
    meta = docs[0] if docs else {}
    check_metadata(meta, directory / "model.yaml")
    return str(meta.get("name") or directory.name)


def load_model(root: Path, directory: Path) -> ModelInfo:
    """Read models/<name>/: model.yaml, engines/<gpu>/ metadata, the tensorrt_llm config.pbtxt."""
    meta: dict[str, Any] = {}
    if (directory / "model.yaml").is_file():
        docs = load_all_shared(directory / "model.yaml")
        meta = docs[0] if docs else {}
        check_metadata(meta, directory / "model.yaml")
    engines = {}
    engines_dir = directory / "engines"
    if engines_dir.is_dir():
        for sub in sorted(p for p in engines_dir.iterdir() if (p / CONFIG).is_file()):
            engines[sub.name] = read_engine_dir(sub)
    config_path, limits = None, {}
    candidates = [directory / ENGINE_MODEL / "config.pbtxt",
                  *sorted(p for p in directory.glob("*/config.pbtxt") if p.parent.name != ENGINE_MODEL)]
    for path in candidates:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # validate reports unreadable configs; compat only skips them
        if "tensorrtllm" not in text:
            continue  # cannot say backend: "tensorrtllm"; parsing every model's config costs more than this test
        try:
            cfg = pbtxt.to_dict(pbtxt.parse(text, str(path)))
        except InputError:
            continue
        if cfg.get("backend") == "tensorrtllm":
            config_path = str(path.relative_to(root))
            limits = config_limits(cfg)
            break
    return ModelInfo(name=str(meta.get("name") or directory.name), backend=meta.get("backend"),
                     meta=meta, engines=engines, config_path=config_path, limits=limits)


def load_models(root: Path, *, skip_invalid: bool = False, names: set[str] | None = None) -> dict[str, ModelInfo]:
    """TensorRT-LLM models of the repo (backend tensorrtllm, or with recorded engines), by name (only those of
    `names`, when given). A malformed model.yaml raises InputError, or (`skip_invalid`, validate reports it
    itself) leaves that model out."""
    out: dict[str, ModelInfo] = {}
    top = root / Repository.at(root, tolerant=skip_invalid).layout.models
    if not top.is_dir():
        return out
    for directory in sorted(p for p in top.iterdir() if p.is_dir()):
        try:
            if names is not None and _model_name(directory) not in names:
                continue
            info = load_model(root, directory)
        except InputError:
            if skip_invalid:
                continue
            raise
        if info.engines or info.backend == "tensorrtllm" or info.config_path:
            out[info.name] = info
    return out


def render_placements(root: Path, rendered: Iterable[Any] | None = None
                      ) -> tuple[list[Placement], list[RenderError]]:
    """Placements from every overlay (rendered now with kustomize unless `rendered` is given)."""
    results = list(rendered) if rendered is not None else kustomize.build_many(repo.overlays(root))
    found, failures = [], []
    for r in results:
        if isinstance(r, RenderError):
            failures.append(r)
            continue
        rel = repo.relative(root, r.path)
        found.extend(placements(r.docs if r.docs is not None else loads_all(r.yaml, rel), rel))
    return found, failures


def matrix(root: Path, *, model: str | None = None, gpu: str | None = None,
           rendered: Iterable[Any] | None = None, skip_invalid: bool = False
           ) -> tuple[list[Result], list[RenderError]]:
    """Every (TensorRT-LLM model x GPU overlay) verdict; with `gpu`, also a hypothetical one for
    models that have no overlay on it (GPU count = tp x pp, image from model.yaml)."""
    # Without a GPU to place every model on, only the models the overlays deploy have verdicts: validate
    # (skip_invalid) reads only those. The compat command reads every model first (a malformed one is an error).
    placed_only = skip_invalid and not gpu

    def known(models: dict[str, ModelInfo]) -> dict[str, ModelInfo]:
        if model is not None and model not in models:
            raise InputError(f"{model}: no TensorRT-LLM model of that name under {root / 'models'}")
        return models

    models = {} if placed_only else known(load_models(root, skip_invalid=skip_invalid))
    want_gpu = resolve(gpu) if gpu else None
    if gpu and want_gpu is None:
        raise InputError(f"{gpu}: not a GPU catalog key, GFD product label or nvidia-smi name",
                         hint="known keys: " + ", ".join(gpus()))
    found, failures = render_placements(root, rendered)
    if placed_only:
        models = known(load_models(root, skip_invalid=True,
                                   names={p.model for p in found} | ({model} if model else set())))
    results = []
    covered: set[str] = set()
    for p in found:
        info = models.get(p.model)
        if info is None or (model and p.model != model):
            continue
        target = target_for(p, info)
        if want_gpu and want_gpu.key not in {g.key for g in target.gpus}:
            continue
        covered.add(p.model)
        results.append(pair_result(info, target, p.overlay))
    if want_gpu:
        for name, info in models.items():
            if name in covered or (model and name != model):
                continue
            _, engine = engine_for(info, Target(name=want_gpu.key, gpus=(want_gpu,)))
            target = Target(name=want_gpu.key, gpus=(want_gpu,), image=info.meta.get("image"),
                            gpus_per_pod=engine.world_size if engine else None, **_model_limits(info))
            results.append(pair_result(info, target, None))
    results.sort(key=lambda r: (r.model or "", list(gpus()).index(r.gpu) if r.gpu in gpus() else 99, r.gpu))
    return results, failures


def to_findings(results: Iterable[Result], layout: Layout) -> list[Finding]:
    """Results as validate findings: every reason of every pair, on the overlay that deploys it (or, for a
    model no overlay deploys, on the model's folder)."""
    out = []
    for r in results:
        for reason in r.reasons:
            out.append(CHECKS[reason.code].finding(f"on {r.gpu}: {reason.message}", severity=reason.severity,
                                                   path=r.overlay or layout.model_dir(r.model or ""), model=r.model))
    return out


def check_repo(root: Path, rendered: Iterable[Any] | None = None) -> list[Finding]:
    """validate's entry point: compatibility findings for the whole repo. Pass `rendered` (the
    results of kustomize.build_many over repo.overlays(root)) to avoid rendering twice; render
    failures are left to validate."""
    results, _ = matrix(root, rendered=rendered, skip_invalid=True)
    return to_findings(results, Repository.at(root, tolerant=True).layout)
