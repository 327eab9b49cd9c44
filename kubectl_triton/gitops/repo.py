"""The GitOps repository's layout: where overlays, components, models and clusters live."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import load_all, load_all_shared, loads_all_shared

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
FLUX_KUSTOMIZATION_API = "kustomize.toolkit.fluxcd.io/"


@dataclass(frozen=True)
class FluxKustomization:
    """A Flux Kustomization object found under clusters/."""

    name: str
    namespace: str
    path: str
    file: Path
    obj: dict[str, Any]


def find_root(start: Path | None = None) -> Path:
    """The repository root: `start` or the nearest parent that holds an `overlays/` folder."""
    here = (start or Path.cwd()).resolve()
    if not here.is_dir():
        raise InputError(f"{start}: not a directory")
    for candidate in (here, *here.parents):
        if (candidate / "overlays").is_dir():
            return candidate
    raise InputError(f"{here}: no overlays/ folder here or in any parent",
                     hint="run inside a kubectl-triton GitOps repository or pass its path")


def kustomization_file(directory: Path) -> Path | None:
    for name in KUSTOMIZATION_FILES:
        if (directory / name).is_file():
            return directory / name
    return None


def _kind(kfile: Path, tolerant: bool = False) -> str:
    """The file's kind. A malformed file raises InputError, or with `tolerant` counts as a Kustomization."""
    try:
        docs = load_all_shared(kfile) if tolerant else load_all(kfile)
    except InputError:
        if tolerant:
            return "Kustomization"
        raise
    doc = docs[0] if docs else None
    return str(doc.get("kind", "Kustomization")) if isinstance(doc, dict) else "Kustomization"


def overlays(root: Path, *, tolerant: bool = False) -> list[Path]:
    """Every buildable kustomization under overlays/ (Components excluded), sorted by path. A malformed
    kustomization.yaml raises InputError, or with `tolerant` is listed (`yaml_problems` reports it)."""
    return [d for d, kind in _kustomizations(root / "overlays", tolerant) if kind == "Kustomization"]


def components(root: Path) -> list[Path]:
    """Every Kustomize Component under overlays/."""
    return [d for d, kind in _kustomizations(root / "overlays") if kind == "Component"]


def _kustomizations(top: Path, tolerant: bool = False) -> Iterator[tuple[Path, str]]:
    if not top.is_dir():
        return
    for kfile in sorted(top.rglob("kustomization.yaml")):
        yield kfile.parent, _kind(kfile, tolerant)


def clusters(root: Path) -> list[Path]:
    """Cluster folders under clusters/ (each holds Flux objects only)."""
    top = root / "clusters"
    return sorted(p for p in top.iterdir() if p.is_dir()) if top.is_dir() else []


def flux_kustomizations(root: Path, cluster: Path | None = None, *, tolerant: bool = False
                        ) -> list[FluxKustomization]:
    """Flux Kustomization objects declared in the YAML files of clusters/ (or one cluster). A malformed file
    raises InputError, or is skipped when `tolerant` (`yaml_problems` reports it)."""
    found = []
    for cdir in [cluster] if cluster else clusters(root):
        for f in sorted(cdir.rglob("*.y*ml")):
            try:
                docs = load_all_shared(f) if tolerant else load_all(f)
            except InputError:
                if tolerant:
                    continue
                raise
            for doc in docs:
                if (isinstance(doc, dict) and doc.get("kind") == "Kustomization"
                        and str(doc.get("apiVersion", "")).startswith(FLUX_KUSTOMIZATION_API)):
                    meta: dict[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else {}
                    spec: dict[str, Any] = doc["spec"] if isinstance(doc.get("spec"), dict) else {}
                    found.append(FluxKustomization(
                        name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "flux-system")),
                        path=str(spec.get("path", "./")), file=f, obj=doc))
    return found


def relative(root: Path, path: Path) -> str:
    """`path` relative to `root` when inside it, for messages and JSON output."""
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class YamlProblem:
    """A repository file that is not valid YAML: repository-relative path, 1-based line when known, the reason."""

    path: str
    line: int | None
    message: str


def read_problem(root: Path, path: Path) -> YamlProblem | None:
    """Why `path` cannot be read as YAML (None when it can), with its repository-relative path and line."""
    rel = relative(root, path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return YamlProblem(rel, None, f"cannot read: {getattr(err, 'strerror', None) or err}")
    try:
        loads_all_shared(text, rel)
    except InputError as err:
        found = re.match(rf"{re.escape(rel)}:(\d+)(?::\d+)?: (.*)", err.message, re.S)
        return YamlProblem(rel, int(found[1]), found[2]) if found else \
            YamlProblem(rel, None, err.message.removeprefix(f"{rel}: "))
    return None


def yaml_problems(root: Path) -> list[YamlProblem]:
    """Every malformed file the repository's tools read: kustomization files (overlays/, base/, clusters/), the
    Flux files under clusters/ and models/*/model.yaml."""
    files: set[Path] = set()
    for top in ("overlays", "base", "clusters"):
        if (root / top).is_dir():
            files.update(p for name in KUSTOMIZATION_FILES for p in (root / top).rglob(name))
    if (root / "clusters").is_dir():
        files.update((root / "clusters").rglob("*.y*ml"))
    if (root / "models").is_dir():
        files.update((root / "models").glob("*/model.yaml"))
    return [p for f in sorted(files) if f.is_file() and (p := read_problem(root, f)) is not None]
