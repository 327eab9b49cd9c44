"""Shadow model repositories: the same configurations, every heavy model replaced by a python stub.

A shadow lets the real tritonserver (CPU-only, python backend only) judge a repository exactly as it
judges the real one: every non-ensemble model keeps its I/O, batching, sequence/transaction policy
and name, but runs on the python backend on CPU; ensembles are copied unchanged.

What the shadow changes in a non-ensemble model's config (and why):
- `backend: "python"`, `platform`, `runtime`, `default_model_filename`, `cc_model_filenames` cleared
  (only the python backend exists in the shadow);
- instance groups of kind KIND_GPU / KIND_AUTO become KIND_CPU with `gpus`, `profile`,
  `secondary_devices` and `host_policy` cleared (the shadow host has no GPUs). A group whose gpu ids
  include a negative one is kept as written: that id is invalid on every host, so Triton's refusal
  is a true error. Non-negative ids that the target host may lack cannot be judged here. KIND_CPU
  and KIND_MODEL groups are kept as written (KIND_CPU with gpus is refused on every host);
  with `max_instances`, larger instance counts are lowered to it (fewer stub processes);
- `model_repository_agents`, `model_operations` cleared (agents and custom op libraries are not in
  the shadow); the python-only parameter `EXECUTION_ENV_PATH` dropped (its archive is not there);
- output `label_filename` files created empty; `warmup/` copied; version folders mirrored (a model
  without any gets `1/`, as a deployment that mounts its artifacts would have).
A config that does not parse with Triton's schema is copied verbatim so the server reports it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from kubectl_triton.formats import pbtxt
from kubectl_triton.gitops.assembly import version_folder

PYTHON = "python"
ENSEMBLE = "ensemble"
STUB_MODULES = {"generic": "generic.py", "tensorrtllm_echo": "tensorrtllm_echo.py", "vllm_args": "vllm_args.py"}
# Small per-version files a stubbed backend reads (the vLLM backend's engine arguments and LoRA adapters): copied
# into the shadow.
VERSION_FILES = ("model.json", "multi_lora.json")


def stub_path(name: str) -> Path:
    """Path of a stub shipped in kubectl_triton/data/stubs (e.g. "generic", "tensorrtllm_echo")."""
    return Path(str(resources.files("kubectl_triton") / "data" / "stubs" / STUB_MODULES[name]))


def model_dirs(repo: Path) -> list[Path]:
    """Every sub-folder of a model repository that holds a config.pbtxt, sorted by name."""
    return sorted(p.parent for p in repo.glob("*/config.pbtxt") if p.is_file())


def version_dirs(model_dir: Path) -> list[str]:
    """Names of the numeric version folders of a model."""
    return sorted((p.name for p in model_dir.iterdir() if p.is_dir() and version_folder(p.name) is not None), key=int)


PLATFORM_BACKENDS = {"tensorrt_plan": "tensorrt", "onnxruntime_onnx": "onnxruntime",
                     "pytorch_libtorch": "pytorch", "tensorflow_graphdef": "tensorflow",
                     "tensorflow_savedmodel": "tensorflow"}


def backend_of(config: Any) -> str:
    """The backend that serves a config: `backend`, else the one its `platform` implies."""
    return config.backend or PLATFORM_BACKENDS.get(config.platform, config.platform)


def is_ensemble(config: Any) -> bool:
    return config.platform == ENSEMBLE


def unknown_platform(config: Any) -> bool:
    """A platform without a backend that Triton does not know (e.g. the removed `custom`)."""
    return bool(config.platform) and not config.backend and config.platform not in PLATFORM_BACKENDS \
        and not is_ensemble(config)


def default_versions(config: Any) -> list[str]:
    """The version folders a model without any gets in the shadow: those its `specific` version policy names
    (a deployment that mounts the artifacts has them), else `1`."""
    if config.version_policy.WhichOneof("policy_choice") == "specific" and config.version_policy.specific.versions:
        return [str(v) for v in sorted(set(config.version_policy.specific.versions)) if v >= 0] or ["1"]
    return ["1"]


def shadow_config(config: Any, max_instances: int | None = None) -> Any:
    """A copy of `config` that the python backend loads on CPU, with the same I/O and policies."""
    kind = pbtxt.schema().ModelInstanceGroup.Kind
    out = type(config)()
    out.CopyFrom(config)
    out.backend = PYTHON
    for field in ("platform", "runtime", "default_model_filename", "cc_model_filenames",
                  "model_repository_agents", "model_operations"):
        out.ClearField(field)
    if "EXECUTION_ENV_PATH" in out.parameters:
        del out.parameters["EXECUTION_ENV_PATH"]
    for group in out.instance_group:
        if group.kind in (kind.KIND_GPU, kind.KIND_AUTO) and not any(g < 0 for g in group.gpus):
            group.kind = kind.KIND_CPU
            for field in ("gpus", "profile", "secondary_devices", "host_policy"):
                group.ClearField(field)
        if max_instances is not None and group.count > max_instances:
            group.count = max_instances
    return out


def build_shadow(src: Path, dest: Path, *, keep_python: bool = False,
                 stubs: Mapping[str, str] | None = None, max_instances: int | None = None) -> None:
    """Copy model repository `src` to `dest` as a shadow (see the module docstring).

    keep_python: python-backend models keep their own files (model.py etc.), only their config is
    shadowed. stubs: backend name -> stub source file used as `model.py` instead of the generic one.
    """
    src, dest = Path(src), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    generic = stub_path("generic")
    for model_dir in model_dirs(src):
        _shadow_model(model_dir, dest / model_dir.name, keep_python, dict(stubs or {}), generic,
                      max_instances)


def _shadow_model(src: Path, dest: Path, keep_python: bool, stubs: dict[str, str], generic: Path,
                  max_instances: int | None) -> None:
    text = (src / "config.pbtxt").read_text(encoding="utf-8", errors="replace")
    try:
        config = pbtxt.parse(text, str(src / "config.pbtxt"))
    except pbtxt.PbtxtError:
        config = None
    versions = version_dirs(src) or (default_versions(config) if config is not None else ["1"])
    if config is None or is_ensemble(config) or unknown_platform(config):
        # Triton judges these as written: unparsable configs (it reports the syntax error), ensembles, and a
        # platform no backend serves (refused as "unexpected platform type" on every host)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / "config.pbtxt", dest / "config.pbtxt")
        for version in versions:
            (dest / version).mkdir(parents=True, exist_ok=True)
        return

    backend = backend_of(config)
    stub = stubs.get(backend)
    if stub is None and keep_python and backend == PYTHON:
        _copy_tree(src, dest)
        for version in versions:
            (dest / version).mkdir(parents=True, exist_ok=True)
    else:
        dest.mkdir(parents=True, exist_ok=True)
        if (src / "warmup").is_dir():
            shutil.copytree(src / "warmup", dest / "warmup", dirs_exist_ok=True)
        for version in versions:
            (dest / version).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(stub or generic, dest / version / "model.py")
            for name in VERSION_FILES:
                if (src / version / name).is_file():
                    shutil.copyfile(src / version / name, dest / version / name)
    shadow = shadow_config(config, max_instances)
    if keep_python and backend == PYTHON and stub is None:
        shadow.default_model_filename = config.default_model_filename
    for output in shadow.output:
        if output.label_filename and not (dest / output.label_filename).exists():
            label = dest / output.label_filename
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text("", encoding="utf-8")
    pbtxt.write_atomic(dest / "config.pbtxt", pbtxt.dumps(shadow))


def _copy_tree(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
