"""A Triton model repository folder: load every model in it and run every static rule.

Every sub-folder holding a `config.pbtxt` is a model and its folder name is the model name, as in
Triton. This module is the thin I/O adapter: it reads files, parses them with Triton's protobuf schema
(`kubectl_triton.formats.pbtxt`) and turns the rules' `Issue`s into `Finding`s with file and line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import ERROR, Finding
from kubectl_triton.checks.model.base import (
    CONFIG_SYNTAX,
    ENSEMBLE_MODEL,
    MODEL_CONFIG_MISSING,
    TRTLLM_DECOUPLED,
    TRTLLM_TEXT_INPUT,
    DataFile,
    Issue,
    ModelFolder,
    is_ensemble,
    table,
)
from kubectl_triton.checks.model.config import autofill, check_model
from kubectl_triton.checks.model.ensemble import check_ensembles
from kubectl_triton.errors import InputError
from kubectl_triton.formats.pbtxt import PbtxtError, locate, parse
from kubectl_triton.gitops.assembly import version_folder

CONFIG = "config.pbtxt"



@dataclass
class _Model:
    name: str
    file: Path
    text: str
    folder: ModelFolder
    config: Any = None
    error: Any = None  # PbtxtError when the file does not parse


def model_dirs(repo_dir: Path) -> list[Path]:
    """Sub-folders of `repo_dir` that hold a config.pbtxt, sorted by name."""
    if not repo_dir.is_dir():
        raise InputError(f"{repo_dir}: not a directory")
    try:
        entries = sorted(os.scandir(repo_dir), key=lambda e: e.name)
    except OSError as err:
        raise InputError(f"{repo_dir}: cannot read: {err.strerror or err}") from None
    return [Path(e.path) for e in entries
            if not e.name.startswith(".") and e.is_dir() and os.path.isfile(os.path.join(e.path, CONFIG))]


def _folder(model_dir: Path) -> ModelFolder:
    versions = sorted(v for p in model_dir.iterdir() if p.is_dir() and (v := version_folder(p.name)) is not None)
    files: frozenset[str] = frozenset()
    numeric = sorted(p.name for p in model_dir.iterdir() if p.is_dir() and version_folder(p.name) is not None)
    if numeric:  # Triton inspects the first version folder in name order
        files = frozenset(p.name for p in (model_dir / numeric[0]).iterdir())
    paths = {p.relative_to(model_dir).as_posix(): p for sub in ("warmup", "initial_state")
             if (model_dir / sub).is_dir() for p in (model_dir / sub).rglob("*") if p.is_file()}
    skipped = tuple(sorted(p.name for p in model_dir.iterdir() if p.is_dir() and p.name.isascii() and p.name.isdigit()
                           and version_folder(p.name) is None))
    return ModelFolder(model_dir.name, tuple(versions), files, frozenset(paths), _data_files(paths), skipped)


_WALK_LIMIT = 1 << 20  # warmup files up to this size are also walked as TYPE_STRING data


def _data_files(paths: dict[str, Path]) -> dict[str, DataFile]:
    """Size (and TYPE_STRING layout, for small files) of every data file that can be read; others stay unknown."""
    out = {}
    for rel, path in paths.items():
        try:
            size = path.stat().st_size
            out[rel] = DataFile.read(path.read_bytes()) if size <= _WALK_LIMIT else DataFile(size)
        except OSError:
            continue
    return out


def unconfigured_dirs(repo_dir: Path) -> list[Path]:
    """Sub-folders of `repo_dir` without a config.pbtxt at their top level. Triton 2.51 polls every sub-folder
    (hidden ones too) as a model: with auto-complete disabled each of these fails the repository."""
    try:
        entries = sorted(os.scandir(repo_dir), key=lambda e: e.name)
    except OSError as err:
        raise InputError(f"{repo_dir}: cannot read: {err.strerror or err}") from None
    return [Path(e.path) for e in entries if e.is_dir() and not os.path.isfile(os.path.join(e.path, CONFIG))]


def _unconfigured(model_dir: Path, root: Path, strict: bool) -> list[Finding]:
    """What Triton does with a model folder that has no top-level config.pbtxt."""
    name = model_dir.name
    misplaced = sorted(model_dir.glob(f"*/{CONFIG}"))
    rel = _rel(model_dir, root)
    where = _rel(misplaced[0], root) if misplaced else f"{rel}/{CONFIG}"
    also = (f" (a {CONFIG} is committed under {_rel(misplaced[0].parent, root)}/; Triton reads only "
            f"{rel}/{CONFIG})") if misplaced else ""
    if strict:
        return [MODEL_CONFIG_MISSING.finding(
            f"failed to open text file for read {rel}/{CONFIG}: No such file or directory{also}; the server runs "
            "with auto-complete disabled (--disable-auto-complete-config), so every model folder needs its "
            f"{CONFIG}", path=where, model=name)]
    folder = _folder(model_dir)
    by_file = table()["default_filenames"]
    backend = next((by_file[f] for f in sorted(folder.version_files) if f in by_file),
                   name.split(".", 1)[1] if "." in name else None)
    if backend is None:
        return [MODEL_CONFIG_MISSING.finding(
            f"Invalid model name: Could not determine backend for model '{name}' with no backend in model "
            f"configuration. Expected model name of the form 'model.<backend_name>'. (no {CONFIG} in {rel}/, and no "
            f"model file Triton knows in its first version folder){also}", path=where, model=name)]
    if misplaced:
        return [MODEL_CONFIG_MISSING.finding(
            f"no {CONFIG} in {rel}/: Triton auto-completes a {backend} configuration from the model file and "
            f"ignores {where}{also}", path=where, model=name, severity="warning")]
    if backend == "python":
        # Checked with tritonserver 2.51: READY with auto-complete on (no inputs or outputs unless model.py's
        # auto_complete_config adds them), "failed to open text file for read" with it off.
        declared = any(_defines_auto_complete(v / "model.py") for v in sorted(model_dir.iterdir()) if v.is_dir())
        what = ("model.py's auto_complete_config is all it gets" if declared else
                "model.py defines no auto_complete_config, so the model gets no inputs or outputs")
        return [MODEL_CONFIG_MISSING.finding(
            f"no {CONFIG} in {rel}/: Triton loads this python model only while auto-complete is on ({what}); a "
            f"server started with --disable-auto-complete-config, as the base Deployment is, refuses it: \"failed "
            f"to open text file for read {rel}/{CONFIG}: No such file or directory\"", path=where, model=name,
            severity="warning")]
    return []


def _defines_auto_complete(model_py: Path) -> bool:
    try:
        return "def auto_complete_config" in model_py.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _read(model_dir: Path) -> _Model:
    file = model_dir / CONFIG
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{file}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    model = _Model(model_dir.name, file, text, _folder(model_dir))
    try:
        model.config = parse(text, str(file))
    except PbtxtError as err:
        model.error = err
    return model


def _scan(repo_dir: Path) -> list[_Model]:
    return [_read(d) for d in model_dirs(repo_dir)]


def load_repository(repo_dir: Path) -> dict[str, Any]:
    """Model name -> parsed ModelConfig for every model folder; a syntax error raises PbtxtError
    (an InputError naming file:line:column)."""
    result = {}
    for model in _scan(repo_dir):
        if model.error is not None:
            raise model.error
        result[model.name] = model.config
    return result


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _findings(model: _Model, issues: Iterable[Issue], root: Path) -> list[Finding]:
    rel = _rel(model.file, root)
    return [i.check.finding(i.message, severity=i.severity, path=rel, model=model.name, object=i.object,
                            line=locate(model.text, i.object, i.needle, i.index)) for i in issues]


def check_repository(repo_dir: Path, *, display_root: Path | None = None,
                     known_models: set[str] | None = None, strict: bool = False) -> list[Finding]:
    """Every static rule over one model repository. `known_models` are names served from elsewhere
    (ensemble steps may use them); paths in findings are relative to `display_root` (default repo_dir).
    `strict`: the server runs with auto-complete disabled (--disable-auto-complete-config), as this repository's
    Deployments do; Triton's own default is auto-complete on."""
    root = display_root or repo_dir
    models = _scan(repo_dir)
    findings: list[Finding] = []
    for model_dir in unconfigured_dirs(repo_dir):
        findings.extend(_unconfigured(model_dir, root, strict))
    users: dict[str, list[str]] = {}
    for m in models:
        if m.config is not None and is_ensemble(m.config):
            for step in m.config.ensemble_scheduling.step:
                users.setdefault(step.model_name, []).append(m.config.name or m.name)
    filled: dict[str, Any] = {}
    folders: dict[str, ModelFolder] = {}
    valid: set[str] = set()
    broken: set[str] = set()
    for m in models:
        if m.error is not None:
            err = m.error
            rel = _rel(m.file, root)
            where = f"{rel}:{err.line}" + (f":{err.column}" if err.column else "")
            findings.append(CONFIG_SYNTAX.finding(f"{where}: {err.problem}",
                                    path=rel, line=err.line, model=m.name))
            broken.add(m.name)
            continue
        issues = check_model(m.config, m.folder, ensembles=tuple(sorted(set(users.get(m.name, ())))))
        findings.extend(_findings(m, issues, root))
        filled[m.name] = autofill(m.config, m.folder)[0]
        folders[m.name] = m.folder
        if not any(i.level == ERROR for i in issues):
            valid.add(m.name)
    by_name = {m.name: m for m in models}
    known = set(known_models or ()) | broken
    for name, issues in check_ensembles(filled, folders, known, valid, strict=strict).items():
        findings.extend(_findings(by_name[name], issues, root))
    findings.extend(_failing_steps(models, findings, root))
    return findings


# Errors about what every request will do, not about loading: the model (and its ensembles) still load.
_LOADS_ANYWAY = frozenset({TRTLLM_DECOUPLED.code, TRTLLM_TEXT_INPUT.code})


def _failing_steps(models: list[_Model], findings: list[Finding], root: Path) -> list[Finding]:
    """Triton refuses an ensemble whose step model fails (its config is refused, or it is an ensemble refused in
    turn): "ensemble 'E' depends on 'M' which is not valid". One error per ensemble that has none of its own."""
    failed: dict[str, str] = {}
    for f in findings:
        if f.severity == ERROR and f.model and f.model not in failed and f.code not in _LOADS_ANYWAY:
            failed[str(f.model)] = f.message
    out: list[Finding] = []
    changed = True
    while changed:  # an ensemble of ensembles fails when an inner one does
        changed = False
        for m in models:
            if m.name in failed or m.config is None or not is_ensemble(m.config):
                continue
            steps = m.config.ensemble_scheduling.step
            bad = next((i for i, s in enumerate(steps) if s.model_name in failed), None)
            if bad is None:
                continue
            step = steps[bad].model_name
            message = (f"ensemble '{m.config.name or m.name}' depends on '{step}' which is not valid. Model "
                       f"'{step}' failed with error: {failed[step]}")
            issue = Issue(ENSEMBLE_MODEL, message, f"ensemble_scheduling.step[{bad}]", f'"{step}"')
            out.extend(_findings(m, [issue], root))
            failed[m.name] = message
            changed = True
    return out
