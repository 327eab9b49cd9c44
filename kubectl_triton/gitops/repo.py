"""Path-level access to the repository model for callers that hold only a root path (each call reads the
repository anew; commands build one `gitops.model.Repository` and share it instead)."""

from __future__ import annotations

from pathlib import Path

from kubectl_triton.gitops.model import FluxKustomization, Repository, kustomization_file, relative

__all__ = ["FluxKustomization", "clusters", "components", "find_root", "flux_kustomizations", "kustomization_file",
           "overlays", "relative"]


def find_root(start: Path | None = None) -> Path:
    """The repository root holding `start` (see Repository.find)."""
    return Repository.find(start).root


def overlays(root: Path) -> list[Path]:
    """Every buildable overlay, sorted by path."""
    return [o.path for o in Repository.at(root).overlays]


def components(root: Path) -> list[Path]:
    return Repository.at(root).components


def clusters(root: Path) -> list[Path]:
    return [c.path for c in Repository.at(root).clusters]


def flux_kustomizations(root: Path, cluster: Path | None = None) -> list[FluxKustomization]:
    """Flux Kustomizations of every cluster folder (or of the one at `cluster`)."""
    repo = Repository.at(root)
    if cluster is None:
        return repo.flux_kustomizations
    want = cluster.resolve()
    return [k for c in repo.clusters if c.path.resolve() == want for k in c.kustomizations]
