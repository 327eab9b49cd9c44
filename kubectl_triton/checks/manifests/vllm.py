"""Triton vLLM backend models: each version's `model.json` against the engine arguments of the vLLM version the
overlay's image carries (data/vllm_engine_args.yaml, generated from vLLM's own EngineArgs by
tools/vllm_engine_args.py; data/triton_images.yaml maps a Triton release to its vLLM), and against what the
overlay gives it (GPUs per pod, the model's context length). The backend calls `AsyncEngineArgs(**model_json)`:
an unknown key is a TypeError and the model does not load. Pure over parsed files; gpufacts calls it per workload."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import ERROR, WARNING, Finding
from kubectl_triton.checks.manifests import lora as lora_checks
from kubectl_triton.checks.registry import Severity, register
from kubectl_triton.compat.catalog import GPU, cc_tuple
from kubectl_triton.compat.data import load
from kubectl_triton.compat.hfconfig import Architecture
from kubectl_triton.formats import pbtxt
from kubectl_triton.gitops.assembly import version_folder

ENGINE_ARGS_INVALID = register(
    "VllmEngineArgsInvalid", "error", "overlay",
    "A vLLM model's <version>/model.json is not what the image's vLLM accepts: missing or not a JSON object, a key "
    "that is no engine argument of that vLLM version (AsyncEngineArgs raises TypeError and the model does not "
    "load), a value of the wrong JSON type or outside the argument's choices, or no `model`.",
    "Use the engine arguments of the vLLM version the image carries (docs/add-an-llm.md lists where to look); "
    "after an image upgrade, check the arguments that release renamed or removed.")
PARALLELISM = register(
    "VllmParallelismMismatch", "error", "overlay",
    "tensor_parallel_size x pipeline_parallel_size in model.json differs from the GPUs the serving pod requests: "
    "with fewer GPUs vLLM cannot start its workers, with more they stay idle.",
    "Set nvidia.com/gpu of the serving overlay to tp x pp (add-model writes that patch) or change model.json.")
MAX_MODEL_LEN = register(
    "VllmMaxModelLenTooLong", "error", "overlay",
    "model.json's max_model_len exceeds the model's context length (max_position_embeddings of its config.json): "
    "vLLM refuses to start (\"User-specified max_model_len is greater than the derived max_model_len\").",
    "Lower max_model_len to the model's context length (or configure rope scaling in the checkpoint).")
CONFIG_REFUSED = register(
    "VllmConfigRefused", "error", "overlay",
    "The vLLM model's config.pbtxt is one the backend refuses when it loads: without the decoupled transaction "
    "policy (\"vLLM Triton backend must be configured to use decoupled model transaction policy\"), or with "
    "KIND_GPU instances for a model of more than one GPU (\"KIND_GPU is currently for single-GPU models, please "
    "specify KIND_MODEL\").",
    "Set model_transaction_policy { decoupled: true } and instance_group [{ kind: KIND_MODEL }] (add-model "
    "writes both).")
DTYPE_UNSUPPORTED = register(
    "VllmDtypeUnsupported", "error", "overlay",
    "model.json asks for bfloat16 on a GPU type below compute capability 8.0 (T4, V100): vLLM refuses to start "
    "(\"Bfloat16 is only supported on GPUs with compute capability of at least 8.0\").",
    "Use \"dtype\": \"auto\" (vLLM casts to float16 there) or float16, or a newer GPU type.")
NOT_CHECKED = register(
    "VllmEngineArgsNotChecked", "info", "overlay",
    "The engine arguments of the image's vLLM version are not in the bundled data, so model.json is checked only "
    "for its shape.",
    "Generate them with tools/vllm_engine_args.py from that vLLM release (or use an image whose version is known).")

_JSON_TYPES = {"string": str, "boolean": bool, "object": dict, "array": list}


def vllm_version(release: str | None) -> str | None:
    """The vLLM version of the `<release>-vllm-python-py3` image (data/triton_images.yaml), None if unknown."""
    entry = (load("triton_images.yaml").get("releases") or {}).get(release or "") or {}
    return entry.get("vllm")


def _type_ok(value: Any, types: list[str]) -> bool:
    for name in types:
        if name == "null" and value is None:
            return True
        if name == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if name == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        kind = _JSON_TYPES.get(name)
        if kind is not None and isinstance(value, kind) and not (kind is not bool and isinstance(value, bool)):
            return True
    return False


def argument_problems(args: Any, fields: dict[str, Any] | None) -> list[tuple[Severity, str]]:
    """(severity, message) of what the vLLM of `fields` (None: unknown version) makes of the parsed model.json
    `args`: an error where the model does not load, a warning where it loads but not as written (EngineArgs is a
    plain dataclass: a boolean given as a string is taken as true whatever it says)."""
    if not isinstance(args, dict):
        return [(ERROR, f"must be a JSON object of engine arguments, got {type(args).__name__}")]
    out: list[tuple[Severity, str]] = []
    if not isinstance(args.get("model"), str) or not args.get("model"):
        out.append((ERROR, "no `model` (the checkpoint's path or name)"))
    if fields is None:
        return out
    for key, value in args.items():
        spec = fields.get(key)
        if spec is None:
            out.append((ERROR, f"{key!r} is no engine argument of this vLLM (AsyncEngineArgs raises TypeError)"))
            continue
        types = list(spec.get("json_types") or [])
        if types and not _type_ok(value, types):
            if "boolean" in types and isinstance(value, str):
                out.append((WARNING, f"{key}: {json.dumps(value)} is a string: vLLM takes any non-empty string as "
                                     "true; write true or false"))
            else:
                out.append((ERROR, f"{key}: {json.dumps(value)} is not {' or '.join(types)}"))
        elif spec.get("choices") and value not in spec["choices"] and value is not None:
            out.append((ERROR, f"{key}: {json.dumps(value)} is not one of {', '.join(map(str, spec['choices']))}"))
    return out


def vllm_models(model_dir: Path) -> list[tuple[str, list[str], dict[str, Any]]]:
    """(Triton model folder name, its version folders, its parsed config) of the vllm-backend models in
    `model_dir`."""
    out = []
    for config, parsed in pbtxt.backend_configs(model_dir, "vllm"):
        versions = sorted(p.name for p in config.parent.iterdir() if p.is_dir() and version_folder(p.name) is not None)
        out.append((config.parent.name, versions or ["1"], parsed))
    return out


def config_problems(config: dict[str, Any], world: int) -> list[str]:
    """What the vLLM backend refuses in a parsed config.pbtxt, for a model of `world` GPUs."""
    out = []
    if not (config.get("model_transaction_policy") or {}).get("decoupled"):
        out.append("no decoupled transaction policy: the backend asserts model_transaction_policy { decoupled: true }")
    kinds = {str(g.get("kind") or "KIND_GPU") for g in config.get("instance_group") or [{}]}
    if world > 1 and ("KIND_GPU" in kinds or "KIND_AUTO" in kinds):
        out.append(f"KIND_GPU instances for tensor_parallel_size x pipeline_parallel_size = {world}: the backend "
                   "refuses them (\"KIND_GPU is currently for single-GPU models\"); use KIND_MODEL")
    return out


def check(root: Path, model_dir: Path, release: str | None, gpus_per_pod: int | None, arch: Architecture | None,
          where: str, object_id: str, model: str, meta: dict[str, Any] | None = None,
          gpu: GPU | None = None) -> Iterator[Finding]:
    """The findings of the vLLM models in `model_dir` served by one workload (image release, GPUs per pod)."""
    version = vllm_version(release)
    data = (load("vllm_engine_args.yaml").get("versions") or {}).get(version) if version else None
    fields = data.get("fields") if isinstance(data, dict) else None
    limits = data.get("lora") if isinstance(data, dict) else None
    for name, versions, config in vllm_models(model_dir):
        if fields is None:
            yield NOT_CHECKED.finding(
                f"{name}: the image of {where} (Triton {release or 'unknown'}, vLLM {version or 'unknown'}) has no "
                "bundled engine-argument schema: model.json is checked for its shape only", path=where, model=model,
                object=object_id)
        for ver in versions:
            path = model_dir / name / ver / "model.json"
            rel = path.relative_to(root).as_posix()
            try:
                args = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                yield ENGINE_ARGS_INVALID.finding(f"no {name}/{ver}/model.json: the vLLM backend does not load "
                                                  f"{name} without its engine arguments", path=rel, model=model,
                                                  object=object_id)
                continue
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
                yield ENGINE_ARGS_INVALID.finding(f"not valid JSON: {err}", path=rel, model=model, object=object_id)
                continue
            for severity, problem in argument_problems(args, fields):
                yield ENGINE_ARGS_INVALID.finding(f"{problem} (vLLM {version}, the image of {where})", path=rel,
                                                  model=model, object=object_id, severity=severity)
            if not isinstance(args, dict):
                continue
            tp, pp = args.get("tensor_parallel_size", 1), args.get("pipeline_parallel_size", 1)
            world = tp * pp if isinstance(tp, int) and isinstance(pp, int) else 1
            for problem in config_problems(config, world):
                yield CONFIG_REFUSED.finding(f"{name}: {problem}", path=f"{model_dir.relative_to(root).as_posix()}/"
                                             f"{name}/config.pbtxt", model=model, object=object_id)
            if isinstance(tp, int) and isinstance(pp, int) and gpus_per_pod is not None and tp * pp != gpus_per_pod:
                effect = "vLLM cannot start its workers" if gpus_per_pod < tp * pp else "the extra GPUs stay idle"
                yield PARALLELISM.finding(
                    f"tensor_parallel_size {tp} x pipeline_parallel_size {pp} = {tp * pp} GPU(s), but {where} "
                    f"requests nvidia.com/gpu: {gpus_per_pod}: {effect}", path=rel, model=model, object=object_id)
            yield from lora_checks.check(root, model_dir, path.parent, args, meta or {}, limits, where, object_id,
                                         model)
            longest = args.get("max_model_len")
            context = arch.max_context if arch else None
            if isinstance(longest, int) and context and longest > context:
                yield MAX_MODEL_LEN.finding(
                    f"max_model_len {longest:,} exceeds the model's context length {context:,} "
                    f"(max_position_embeddings, with its rope scaling): vLLM refuses to start on {where}", path=rel,
                    model=model, object=object_id)
            if arch and isinstance(tp, int) and tp > 0 and arch.num_attention_heads % tp:
                yield PARALLELISM.finding(
                    f"tensor_parallel_size {tp} does not divide the model's {arch.num_attention_heads} attention "
                    f"heads: vLLM refuses to start on {where}", path=rel, model=model, object=object_id)
            cc = cc_tuple(gpu.compute_capability) if gpu else None
            if gpu and cc and cc < (8, 0) and args.get("dtype") == "bfloat16":
                yield DTYPE_UNSUPPORTED.finding(
                    f"dtype bfloat16 needs compute capability 8.0; {gpu.key} has {gpu.compute_capability}: vLLM "
                    f"refuses to start on {where} (\"auto\" or float16 serve there)", path=rel, model=model,
                    object=object_id)
