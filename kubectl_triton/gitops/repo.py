"""Path-level access to the repository model for callers that hold only a root path (each call reads the
repository anew; commands build one `gitops.model.Repository` and share it instead)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import load_all_shared
from kubectl_triton.gitops.files import manifest_files as _manifest_files
from kubectl_triton.gitops.model import (
    KUSTOMIZATION_FILES,
    FluxKustomization,
    Repository,
    kustomization_file,
    matching_files,
    relative,
    resolved,
)

__all__ = ["FluxKustomization", "YamlProblem", "clusters", "components", "find_root", "flux_kustomizations",
           "kustomization_file", "manifest_files", "overlays", "read_problem", "relative", "resolved",
           "yaml_problems"]


def find_root(start: Path | None = None) -> Path:
    """The repository root holding `start` (see Repository.find)."""
    return Repository.find(start).root


def overlays(root: Path, *, tolerant: bool = False) -> list[Path]:
    """Every buildable overlay, sorted by path. A malformed kustomization.yaml raises InputError, or with
    `tolerant` is listed (`yaml_problems` reports it)."""
    return [o.path for o in Repository.at(root, tolerant=tolerant).overlays]


def components(root: Path) -> list[Path]:
    return Repository.at(root).components


def clusters(root: Path, *, tolerant: bool = False) -> list[Path]:
    return [c.path for c in Repository.at(root, tolerant=tolerant).clusters]


def flux_kustomizations(root: Path, cluster: Path | None = None, *, tolerant: bool = False
                        ) -> list[FluxKustomization]:
    """Flux Kustomizations of every cluster folder (or of the one at `cluster`). A malformed file raises
    InputError, or is skipped when `tolerant` (`yaml_problems` reports it)."""
    repo = Repository.at(root, tolerant=tolerant)
    if cluster is None:
        return repo.flux_kustomizations
    want = resolved(cluster)
    return [k for c in repo.clusters if resolved(c.path) == want for k in c.kustomizations]


@dataclass(frozen=True)
class YamlProblem:
    """A repository file that is not valid YAML: repository-relative path, 1-based line when known, the reason."""

    path: str
    line: int | None
    message: str


def read_problem(root: Path, path: Path) -> YamlProblem | None:
    """Why `path` cannot be read as YAML (None when it can), with its repository-relative path and line."""
    try:
        load_all_shared(path)
    except InputError as err:
        message = err.message.removeprefix(str(path))
        found = re.match(r":(\d+)(?::\d+)?: (.*)", message, re.S)
        rel = relative(root, path)
        if found:
            return YamlProblem(rel, int(found[1]), found[2])
        return YamlProblem(rel, None, message.removeprefix(": "))
    return None


def yaml_problems(root: Path) -> list[YamlProblem]:
    """Every malformed file the repository's tools read as YAML manifests: kustomization files (overlays/, base/,
    clusters/), the files under clusters/ that kustomize or Flux reads as manifests (`manifest_files`; a file a
    configMapGenerator or secretGenerator reads is data, whatever it holds) and models/*/model.yaml."""
    repository = Repository.at(root, tolerant=True)
    layout = repository.layout
    files: set[Path] = set()
    for top in (layout.overlays, layout.bases):
        files.update(matching_files(root / top, *KUSTOMIZATION_FILES))
    files.update(manifest_files(root / layout.clusters, repository))
    models = root / layout.models
    if models.is_dir():
        files.update(models.glob("*/model.yaml"))
    return [p for f in sorted(files) if f.is_file() and (p := read_problem(root, f)) is not None]


def manifest_files(top: Path, repository: Repository | None = None) -> list[Path]:
    """files.manifest_files with the spec.paths of `repository`'s Flux Kustomizations (Flux generates a
    kustomization for those without one)."""
    paths: list[Path] = []
    if repository is not None:
        try:
            paths = [repository.root / ks.path for ks in repository.flux_kustomizations]
        except InputError:
            paths = []
    return _manifest_files(top, paths)
