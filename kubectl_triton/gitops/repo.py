"""The GitOps repository's layout: where overlays, components, models and clusters live."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import load_all

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


def _kind(kfile: Path) -> str:
    docs = load_all(kfile)
    doc = docs[0] if docs else None
    return str(doc.get("kind", "Kustomization")) if isinstance(doc, dict) else "Kustomization"


def overlays(root: Path) -> list[Path]:
    """Every buildable kustomization under overlays/ (Components excluded), sorted by path."""
    return [d for d, kind in _kustomizations(root / "overlays") if kind == "Kustomization"]


def components(root: Path) -> list[Path]:
    """Every Kustomize Component under overlays/."""
    return [d for d, kind in _kustomizations(root / "overlays") if kind == "Component"]


def _kustomizations(top: Path) -> Iterator[tuple[Path, str]]:
    if not top.is_dir():
        return
    for kfile in sorted(top.rglob("kustomization.yaml")):
        yield kfile.parent, _kind(kfile)


def clusters(root: Path) -> list[Path]:
    """Cluster folders under clusters/ (each holds Flux objects only)."""
    top = root / "clusters"
    return sorted(p for p in top.iterdir() if p.is_dir()) if top.is_dir() else []


def flux_kustomizations(root: Path, cluster: Path | None = None) -> list[FluxKustomization]:
    """Flux Kustomization objects declared in the YAML files of clusters/ (or one cluster)."""
    found = []
    for cdir in [cluster] if cluster else clusters(root):
        for f in sorted(cdir.rglob("*.y*ml")):
            for doc in load_all(f):
                if (isinstance(doc, dict) and doc.get("kind") == "Kustomization"
                        and str(doc.get("apiVersion", "")).startswith(FLUX_KUSTOMIZATION_API)):
                    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
                    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
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
