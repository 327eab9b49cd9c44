"""Recording engine metadata into models/<model>/engines/<gpu>/: gather it (from an engine
directory or a build Job's log), then write it atomically inside the repository. Never engine files."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.compat.catalog import by_smi_name, gpus
from kubectl_triton.compat.engine import BUILD_INFO, CONFIG, ENGINE_FILES, parse_build_info, parse_config, rank_files
from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import read_json
from kubectl_triton.gitops.model import Repository

# The line prefixes base/engine-build/build-info.py prints to the Job's log.
MARKERS = {"build_info": "KUBECTL_TRITON_BUILD_INFO ", "config": "KUBECTL_TRITON_ENGINE_CONFIG ",
           "files": "KUBECTL_TRITON_ENGINE_FILES "}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Metadata:
    """What gets recorded: the engine's config.json, its build info and rank file sizes."""

    config: dict[str, Any]
    build_info: dict[str, Any] | None
    files: dict[str, int]
    source: str


def from_dir(directory: Path) -> Metadata:
    """Metadata of an engine directory (config.json, build-info.json, rank*.engine sizes)."""
    if not (directory / CONFIG).is_file():
        raise InputError(f"{directory}: no {CONFIG} (not a TensorRT-LLM engine directory)")
    config = read_json(directory / CONFIG)
    parse_config(config, str(directory / CONFIG))
    build_info = None
    if (directory / BUILD_INFO).is_file():
        build_info = read_json(directory / BUILD_INFO)
        parse_build_info(build_info, str(directory / BUILD_INFO))
    files = {p.name: p.stat().st_size for p in rank_files(directory).values()}
    if not files and (directory / ENGINE_FILES).is_file():
        listed = read_json(directory / ENGINE_FILES)
        if not isinstance(listed, dict) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                   for v in listed.values()):
            raise InputError(f"{directory / ENGINE_FILES}: expected an object of file name -> bytes")
        files = {str(k): int(v) for k, v in listed.items()}
    return Metadata(config=config, build_info=build_info, files=files, source=str(directory))


def from_log(text: str, source: str) -> Metadata:
    """Metadata from a build Job's log: the last line carrying each marker wins (Jobs retry)."""
    found: dict[str, Any] = {}
    for line in text.splitlines():
        for key, marker in MARKERS.items():
            at = line.find(marker)
            if at >= 0:
                try:
                    found[key] = json.loads(line[at + len(marker):])
                except json.JSONDecodeError as err:
                    raise InputError(f"{source}: malformed {marker.strip()} line: {err}") from None
                except RecursionError:
                    raise InputError(f"{source}: malformed {marker.strip()} line: nested too deeply") from None
    if "build_info" not in found:
        raise InputError(f"{source}: no {MARKERS['build_info'].strip()} line; did build-info.py run?")
    if "config" not in found:
        raise InputError(f"{source}: no {MARKERS['config'].strip()} line (engine config.json)",
                         hint="record from the engine directory instead: --from DIR")
    parse_build_info(found["build_info"], source)
    parse_config(found["config"], source)
    files = found.get("files") or {}
    if not isinstance(files, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                              for v in files.values()):
        raise InputError(f"{source}: malformed {MARKERS['files'].strip()} line: expected an object of "
                         "file name -> size in bytes")
    return Metadata(config=found["config"], build_info=found["build_info"],
                    files={str(k): int(v) for k, v in files.items()}, source=source)


def gpu_key(meta: Metadata, explicit: str | None) -> str:
    """The engines/<key>/ folder name: --gpu, else the catalog key of the build GPU."""
    if explicit:
        if explicit not in gpus():
            raise InputError(f"--gpu {explicit}: not a GPU catalog key", hint="known: " + ", ".join(gpus()))
        return explicit
    if not meta.build_info:
        raise InputError(f"{meta.source}: no build-info.json, so the GPU is unknown", hint="pass --gpu KEY")
    gpu = by_smi_name(meta.build_info["gpu_name"])
    if gpu is None:
        raise InputError(f"{meta.source}: build GPU {meta.build_info['gpu_name']!r} is not in the catalog",
                         hint="pass --gpu KEY")
    return gpu.key


def destination(root: Path, model: str, key: str) -> Path:
    """models/<model>/engines/<key>/, refusing names or symlinks that lead outside the repository."""
    for what, name in (("model", model), ("GPU key", key)):
        if not _NAME.match(name) or name in (".", ".."):
            raise InputError(f"{what} {name!r}: must be a plain name (letters, digits, '.', '_', '-')")
    layout = Repository.at(root).layout
    model_dir = root / layout.model_dir(model)
    if not model_dir.is_dir():
        raise InputError(f"{model_dir}: no such model folder", hint="scaffold it first: kubectl triton add-model")
    dest = root / layout.engines_dir(model, key)
    real_root = root.resolve()
    real_dest = dest.resolve()
    if real_dest != real_root and real_root not in real_dest.parents:
        raise InputError(f"{dest}: resolves to {real_dest}, outside the repository {real_root}")
    return dest


def write(dest: Path, meta: Metadata) -> list[str]:
    """Write the metadata files into `dest`, replacing what was there in one rename. On any failure the
    tree is left as it was (folders this call created removed, the old `dest` put back) and InputError
    names `dest`."""
    created = [p for p in reversed([dest.parent, *dest.parent.parents]) if not p.exists()]
    tmp: Path | None = None
    old: Path | None = None
    moved_old = placed = False
    written: list[str] = []
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
        documents = {CONFIG: meta.config, BUILD_INFO: meta.build_info, ENGINE_FILES: meta.files or None}
        for name, doc in documents.items():
            if doc is not None:
                (tmp / name).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
                written.append(name)
        os.chmod(tmp, 0o755)
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dest, old)
            moved_old = True
        os.replace(tmp, dest)
        placed = True
    except BaseException as err:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if moved_old and not placed and old is not None:
            os.replace(old, dest)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(err, OSError):
            raise InputError(f"{dest}: cannot write: {err.strerror or err}; nothing was changed") from None
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return written


