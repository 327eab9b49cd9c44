"""GPU facts before an engine exists: what a serving overlay asks of its GPU type, checked against the GPU catalog
(data/gpus.yaml: memory, compute capability, GPUs per node), the precision table (data/precisions.yaml) and the
model's metadata (models/<model>/model.yaml). Pure over rendered objects and parsed metadata; `check` reads them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.manifests import kvcapacity, tensorrtllm_release, vllm
from kubectl_triton.checks.registry import register
from kubectl_triton.compat.catalog import GPU, by_gfd_label, cc_tuple
from kubectl_triton.compat.data import load
from kubectl_triton.compat.repo_check import Placement, check_metadata, placements
from kubectl_triton.compat.sizing import Sizing, read_sizing
from kubectl_triton.errors import InputError, TritonCtlError
from kubectl_triton.formats import yamlio
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops.model import Repository

GPUS_PER_NODE = register(
    "GPUsPerNodeExceeded", "error", "overlay",
    "A pod asks for more GPUs than one node of its GPU type has: it stays Pending forever.",
    "Lower tp x pp (or the nvidia.com/gpu limit), or choose a GPU type with more GPUs per node.")
PARALLELISM_MISMATCH = register(
    "ParallelismMismatch", "error", "overlay",
    "A TensorRT-LLM model's tp x pp (model.yaml engine:) differs from the GPUs its serving pod requests: the engine "
    "needs exactly tp x pp ranks.",
    "Set the serving overlay's nvidia.com/gpu limit to tp x pp (add-model writes that patch) or change tp/pp.")
QUANTIZATION_UNSUPPORTED = register(
    "QuantizationUnsupported", "error", "overlay",
    "The model's precision (engine.quantization or engine.dtype) is one its GPU type cannot run (FP8 needs compute "
    "capability 8.9, NVFP4 10.0, BF16 8.0).",
    "Choose a precision the GPU supports or a newer GPU type.")
MEMORY_FIT = register(
    "MemoryFit", "warning", "overlay",
    "Rough memory fit: the weights at the chosen precision, split over tp x pp GPUs, leave little or no GPU memory "
    "for the KV cache.",
    "Raise tp/pp, quantize, or choose a GPU type with more memory.")
CAPACITY_INVALID = register(
    "CapacityConfigInvalid", "warning", "model",
    "model.yaml `capacity:` cannot be read: its Hugging Face config.json (hf_config) is missing or malformed, a key "
    "is unknown, or the backend's settings it reads (engine:, model.json, the tensorrt_llm config.pbtxt) are out of "
    "range: the model's KV-cache capacity is not checked (a warning: config.json is not deployed; the backend's own "
    "checks report what the server would refuse).",
    "Fix the file the message names (docs/capacity.md lists the keys).")
RELEASE_MISMATCH = register(
    "TritonReleaseMismatch", "error", "model",
    "models/<model>/model.yaml names another Triton release than the image its overlay serves (e.g. after an image "
    "upgrade that missed the metadata).",
    "Update `image:` in model.yaml to the overlay's image (and rebuild engines for TensorRT-LLM models).")

_SIZE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)b(?![a-z])", re.I)
_RELEASE = re.compile(r":(\d{2}\.\d{2})(?:[-.]|$)")


@dataclass(frozen=True)
class ModelMeta:
    """A model's metadata file and what it says."""

    name: str
    path: str  # repository-relative models/<name>/model.yaml
    text: str
    meta: dict[str, Any]


def release(image: Any) -> str | None:
    """The Triton release (YY.MM) an image tag names, e.g. nvcr.io/nvidia/tritonserver:24.12-py3 -> 24.12."""
    found = _RELEASE.search(str(image or ""))
    return found.group(1) if found else None


def parameters_billion(meta: dict[str, Any], name: str) -> float | None:
    """The model's size in billions of parameters: engine.parameters_billion, else a size in its name or its
    checkpoint path (llama3-8b -> 8)."""
    engine: dict[str, Any] = meta["engine"] if isinstance(meta.get("engine"), dict) else {}
    given = engine.get("parameters_billion")
    if isinstance(given, (int, float)) and not isinstance(given, bool) and given > 0:
        return float(given)
    for text in (name, str(engine.get("checkpoint") or "")):
        found = _SIZE.search(text)
        if found:
            return float(found.group(1))
    return None


def _line(text: str, key: str) -> int | None:
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*:", line):
            return number
    return None


def _gpu(placement: Placement) -> GPU | None:
    found = {g.key: g for g in (by_gfd_label(label) for label in placement.labels or ()) if g is not None}
    return next(iter(found.values())) if len(found) == 1 else None


def _supported(table: dict[str, Any], key: str | None, cc: tuple[int, int]) -> dict[str, Any] | None:
    """The precision table entry when `cc` cannot run it, else None."""
    entry = table.get(key) if key else None
    if not isinstance(entry, dict):
        return None
    low, high = cc_tuple(entry.get("min")), cc_tuple(entry.get("below"))
    return entry if (low and cc < low) or (high and cc >= high) else None


def check_placement(placement: Placement, model: ModelMeta | None, object_id: str,
                    sizing: Sizing | None = None) -> Iterator[Finding]:
    """Every GPU fact of one serving Deployment (`sizing`: the model's KV-cache sizing, when it declares one)."""
    gpu = _gpu(placement)
    where = placement.overlay
    count = placement.gpus_per_pod
    if gpu is not None and count:
        per_node = gpu.node_limit  # the layout file's node size, else the largest node the catalog names
        if isinstance(per_node, int) and count > per_node:
            source = f" ({gpu.max_source})" if gpu.max_source else ""
            yield GPUS_PER_NODE.finding(
                f"the pod asks for nvidia.com/gpu: {count}, but a {gpu.key} node has at most {per_node} GPUs"
                f"{source}: it stays Pending (\"Insufficient nvidia.com/gpu\"); if your nodes have more, set "
                f"gpus/{gpu.key}/gpusPerNode in kubectl-triton.yaml", path=where, object=object_id)
    if model is None:
        return
    if sizing is not None and gpu is not None:
        try:
            yield from kvcapacity.check(sizing, gpu, where, model.path, object_id)
        except InputError as err:  # a setting the estimator cannot use: capacity not checked, the gate goes on
            yield CAPACITY_INVALID.finding(f"{err.message}: capacity on {gpu.key} not checked", path=model.path,
                                           model=model.name)
    meta = model.meta
    served, declared = release(placement.image), release(meta.get("image"))
    if served and declared and served != declared:
        yield RELEASE_MISMATCH.finding(
            f"model.yaml names Triton {declared} ({meta.get('image')}) but {where} serves {placement.image}: "
            "update the metadata (engines are built from it)", path=model.path, line=_line(model.text, "image"),
            model=model.name)
    engine = meta.get("engine") if isinstance(meta.get("engine"), dict) else None
    if meta.get("backend") != "tensorrtllm" or engine is None:
        return
    tp, pp = engine.get("tp", 1), engine.get("pp", 1)
    if not (isinstance(tp, int) and isinstance(pp, int)):
        return
    world = tp * pp
    group = max(1, placement.group_size)
    if count is not None and count * group != world:
        asked = f"nvidia.com/gpu: {count}" + (f" in each of {group} pods" if group > 1 else "")
        yield PARALLELISM_MISMATCH.finding(
            f"engine tp {tp} x pp {pp} = {world} GPU(s), but {where} requests {asked}: "
            f"{'the engine cannot start its ranks' if count * group < world else 'the extra GPUs stay idle'}",
            path=model.path, line=_line(model.text, "tp"), model=model.name, object=object_id)
    if gpu is None:
        return
    precisions = load("precisions.yaml")
    cc = cc_tuple(gpu.compute_capability)
    if cc is None:
        return
    quant = str(engine.get("quantization", "none"))
    algo = (precisions.get("model_quantizations", {}).get(quant) or {}).get("quant_algo")
    for key, table, field in ((algo, precisions["quant_algos"], "quantization"),
                              (str(engine.get("dtype", "")), precisions["dtypes"], "dtype")):
        bad = _supported(table, key, cc)
        if bad:
            need = (f"compute capability >= {bad['min']}" if cc < (cc_tuple(bad.get("min")) or (0, 0))
                    else f"compute capability below {bad.get('below')}")
            yield QUANTIZATION_UNSUPPORTED.finding(
                f"{field} {engine.get(field)} ({bad.get('label', key)}) needs {need}; {gpu.key} has "
                f"{gpu.compute_capability}: the engine build fails on {where}'s GPU type", path=model.path,
                line=_line(model.text, field), model=model.name, object=object_id)
    if sizing is None:  # the rough parameter-count fit, for models without a config.json to size from
        yield from _memory_fit(model, engine, gpu, world, where, object_id, precisions, quant)


def _memory_fit(model: ModelMeta, engine: dict[str, Any], gpu: GPU, world: int, where: str, object_id: str,
                precisions: dict[str, Any], quant: str) -> Iterator[Finding]:
    size = parameters_billion(model.meta, model.name)
    weight_bytes = (precisions.get("model_quantizations", {}).get(quant) or {}).get("weight_bytes") \
        or precisions["dtype_bytes"].get(str(engine.get("dtype", "float16")))
    if size is None or not weight_bytes or world < 1:
        return
    weights_mib = size * 1e9 * float(weight_bytes) / world / 2**20
    reserve = precisions["memory"]["runtime_reserve_mib"]
    fraction = precisions["memory"]["default_kv_cache_free_gpu_mem_fraction"]
    free = gpu.memory_mib - reserve - weights_mib
    label = f"{size:g}B parameters x {weight_bytes:g} byte(s) / {world} GPU(s) = {weights_mib:,.0f} MiB of weights"
    if free <= 0:
        yield MEMORY_FIT.finding(
            f"{label} per GPU, more than a {gpu.key} has ({gpu.memory_mib:,} MiB, {reserve:,} MiB of it for the "
            f"runtime): the engine does not load on {where}", path=model.path, model=model.name, object=object_id)
    elif free * fraction < 0.1 * gpu.memory_mib:
        yield MEMORY_FIT.finding(
            f"{label} per GPU leave {free * fraction:,.0f} MiB of a {gpu.key}'s {gpu.memory_mib:,} MiB for the KV "
            f"cache (kv_cache_free_gpu_mem_fraction {fraction}): few concurrent sequences fit on {where}",
            path=model.path, model=model.name, object=object_id)


def read_models(root: Path) -> dict[str, ModelMeta]:
    """Parsable models/*/model.yaml files by model name (malformed ones are reported by validate itself)."""
    out = {}
    models = Repository.at(root, tolerant=True).layout.models
    for meta_file in sorted((root / models).glob("*/model.yaml")) if (root / models).is_dir() else []:
        try:
            text = meta_file.read_text(encoding="utf-8")
            docs = yamlio.loads_all_shared(text, str(meta_file))
        except (OSError, UnicodeDecodeError, TritonCtlError):
            continue
        meta = docs[0] if docs and isinstance(docs[0], dict) else None
        if meta is None:
            continue
        name = str(meta.get("name") or meta_file.parent.name)
        out[name] = ModelMeta(name, f"{models}/{meta_file.parent.name}/model.yaml", text, meta)
    return out


def check(root: Path, targets: list[Any]) -> list[Finding]:
    """validate's hook: every serving Deployment and LeaderWorkerSet group of every overlay."""
    models = read_models(root)
    out: list[Finding] = []
    sizings: dict[str, Sizing | None] = {}
    for name, model in models.items():
        try:
            check_metadata(model.meta, root / model.path)
        except InputError:
            continue  # ModelMetadataInvalid, from validate's metadata check
        try:
            sizings[name] = read_sizing(root, root / Path(model.path).parent, model.meta)
        except InputError as err:
            sizings[name] = None
            out.append(CAPACITY_INVALID.finding(err.message, path=model.path, model=name))
    for target in targets:
        if not target.rel.startswith(f"{Repository.at(root, tolerant=True).layout.overlays}/"):
            continue
        workloads = {str((o.get("metadata") or {}).get("name", "")): o for o in target.objects
                     if isinstance(o, dict) and o.get("kind") in ("Deployment", "LeaderWorkerSet")}
        for placement in placements(target.objects, target.rel):
            workload = workloads.get(placement.deployment)
            oid = object_id(workload) if workload else f"Deployment/{placement.deployment}"
            served = models.get(placement.model)
            sizing = sizings.get(placement.model)
            out.extend(check_placement(placement, served, oid, sizing))
            if served is not None and served.meta.get("backend") == "vllm":
                out.extend(vllm.check(root, root / Path(served.path).parent, release(placement.image),
                                      placement.gpus_per_pod, sizing.arch if sizing else None, placement.overlay,
                                      oid, served.name, served.meta, _gpu(placement)))
            if served is not None:  # the tensorrtllm configs of any model folder (an ensemble's, a BLS front's)
                out.extend(tensorrtllm_release.check(root, root / Path(served.path).parent, release(placement.image),
                                                     placement.overlay, oid, served.name))
    return out
