"""Engine builds against what serves them: a TensorRT-LLM engine loads only in the image (TensorRT-LLM
version) and on the GPU type it was built with, from the path it was written to. Checked on rendered objects
and model metadata before anything is built."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.registry import register
from kubectl_triton.errors import TritonCtlError
from kubectl_triton.formats import pbtxt, yamlio
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops import workloads
from kubectl_triton.gitops.labels import INSTANCE_LABEL as INSTANCE
from kubectl_triton.gitops.model import Repository

BUILD_MISSING = register("EngineBuildMissing", "warning", "repository",
                         "a TensorRT-LLM model is served on a GPU type that no engine-build overlay targets",
                         "add-model the engine-build overlay for that GPU type (engines are per compute capability)")
BUILD_IMAGE = register("EngineBuildImageMismatch", "error", "repository",
                       "the engine is built in another image than the one that serves it",
                       "build and serve with one image; rebuild the engine after an image upgrade")
ENGINE_DIR = register("EngineDirMismatch", "error", "repository",
                      "the engine-build Job writes the engine elsewhere than gpt_model_path loads it from",
                      "make model.yaml's engine_dir and the tensorrt_llm gpt_model_path parameter the same")


BUILD_NAME = "triton-engine-build"
PRODUCT = "nvidia.com/gpu.product"


def _labels(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("labels") or {}


def _pod(obj: dict) -> dict:
    """The pod spec of a Job, or of the pod that serves a workload (a LeaderWorkerSet group's leader)."""
    template = workloads.serving_template(obj)
    if template is not None:
        return template.spec
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}


def _container(obj: dict, name: str) -> dict:
    return next((c for c in _pod(obj).get("containers") or [] if c.get("name") == name), {})


def _product(obj: dict) -> str | None:
    return (_pod(obj).get("nodeSelector") or {}).get(PRODUCT)


def check_objects(builds: list[tuple[str, dict]], serving: list[tuple[str, dict]]) -> list[Finding]:
    """Pure: (overlay, Job) engine builds and (overlay, serving workload) pairs of the same models."""
    by_model: dict[str, dict[str | None, tuple[str, dict]]] = defaultdict(dict)
    for source, job in builds:
        by_model[_labels(job).get(INSTANCE, "")][_product(job)] = (source, job)
    out = []
    for source, dep in serving:
        model = _labels(dep).get(INSTANCE, "")
        if model not in by_model:
            continue
        product = _product(dep)
        build = by_model[model].get(product)
        if build is None:
            out.append(BUILD_MISSING.finding(f"{model} is served on {product or 'any GPU'} but "
                               "no engine-build overlay targets that GPU type: an engine only loads on the "
                               "compute capability it was built on", path=source, object=object_id(dep)))
            continue
        served = _container(dep, "tritonserver").get("image")
        built = _container(build[1], "engine-build").get("image")
        if served != built:
            out.append(BUILD_IMAGE.finding(f"served from {served} but its engine is built "
                               f"in {built} ({build[0]}): the TensorRT-LLM versions differ and the engine will not "
                               "load; use one image for both (and rebuild after an upgrade)",
                               path=source, object=object_id(dep)))
    return out


def check_engine_dirs(root: Path) -> list[Finding]:
    """model.yaml's engine.engine_dir must be the path the tensorrt_llm config serves the engine from."""
    out = []
    for meta_file in sorted((root / Repository.at(root, tolerant=True).layout.models).glob("*/model.yaml")):
        try:
            docs = yamlio.load_all_shared(meta_file)
        except TritonCtlError:
            continue  # the metadata checks report unreadable files
        meta = docs[0] if docs and isinstance(docs[0], dict) else {}
        engine = meta.get("engine")
        engine_dir = engine.get("engine_dir") if isinstance(engine, dict) else None
        if not isinstance(engine_dir, str) or not engine_dir:
            continue
        for config_file in sorted(meta_file.parent.glob("*/config.pbtxt")):
            try:
                config: Any = pbtxt.load(config_file)
            except TritonCtlError:
                continue  # the model-config checks report it
            if config.backend != "tensorrtllm":
                continue
            params = config.parameters
            served = (params["gpt_model_path"].string_value if "gpt_model_path" in params
                      else params["engine_dir"].string_value if "engine_dir" in params else None)
            if served and served.rstrip("/") != str(engine_dir).rstrip("/"):
                out.append(ENGINE_DIR.finding(f"the engine-build Job writes the engine to "
                                   f"{engine_dir} (model.yaml) but {config.name or config_file.parent.name} loads "
                                   f"it from {served}", path=str(config_file.relative_to(root)),
                                   model=config.name or config_file.parent.name))
    return out


def check(root: Path, targets: list[Any]) -> list[Finding]:
    """validate's hook: every rendered engine build against the overlays that serve the same model."""
    builds, serving = [], []
    for t in targets:
        for obj in t.objects:
            if obj.get("kind") == "Job" and _labels(obj).get("app.kubernetes.io/name") == BUILD_NAME:
                builds.append((t.rel, obj))
            elif workloads.serving_template(obj) is not None:
                serving.append((t.rel, obj))
    return check_objects(builds, serving) + check_engine_dirs(root)
