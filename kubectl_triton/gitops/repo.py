"""Path-level access to the repository model for callers that hold only a root path (each call reads the
repository anew; commands build one `gitops.model.Repository` and share it instead)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import load_all_shared
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


# Fields of a kustomization that name files kustomize reads as YAML (manifests, patches, plugin and transformer
# configurations); a directory among them brings its own kustomization file. The generators' `files`/`envs` and
# `literals` are data that kustomize never parses, so they are not here.
_FILE_LISTS = ("resources", "bases", "crds", "components", "patchesStrategicMerge", "transformers", "generators",
               "validators", "configurations")
_PATH_ITEMS = ("patches", "patchesJson6902", "replacements")


def _files_read(kfile: Path) -> set[Path]:
    """The local files (resolved) that one kustomization file has kustomize read as YAML; none if it is malformed
    (yaml_problems reports that)."""
    try:
        docs = load_all_shared(kfile)
    except InputError:
        return set()
    doc: dict[str, Any] = docs[0] if docs and isinstance(docs[0], dict) else {}

    def items(key: str) -> list[Any]:
        value = doc.get(key)
        return value if isinstance(value, list) else []

    refs: list[Any] = [item for key in _FILE_LISTS for item in items(key)]
    refs += [item.get("path") for key in _PATH_ITEMS for item in items(key) if isinstance(item, dict)]
    refs += [item.get("valuesFile") for item in items("helmCharts") if isinstance(item, dict)]
    return {resolved(kfile.parent / ref) for ref in refs
            if isinstance(ref, str) and ref and "\n" not in ref and "://" not in ref and not ref.startswith("git@")}


def manifest_files(top: Path, repository: Repository | None = None) -> list[Path]:
    """The kustomization files below `top` and the YAML files there that kustomize or Flux reads as manifests:
    those a kustomization file lists (resources, patches, ...), and every `*.yaml`/`*.yml` in a folder tree with
    no kustomization file up to `top` or up to the spec.path of one of `repository`'s Flux Kustomizations (Flux's
    kustomize-controller then generates a kustomization of every manifest there, not descending into folders
    that have their own). Any other file (a configMapGenerator's `recyclarr.yml` with `!env_var` tags, a Helm
    values template) is data to kustomize: it is not read as YAML at all."""
    found = matching_files(top, *KUSTOMIZATION_FILES, "*.y*ml")
    kfiles = [f for f in found if f.name in KUSTOMIZATION_FILES]
    if not kfiles:
        return found  # all of it generated by Flux, as it is
    listed: set[Path] = set()
    for kfile in kfiles:
        listed |= _files_read(kfile)
    generated: set[Path] = set()
    if repository is not None:
        try:
            paths = [repository.root / ks.path for ks in repository.flux_kustomizations]
        except InputError:
            paths = []
        generated = {resolved(p) for p in paths if p.is_dir() and kustomization_file(p) is None}
    top = resolved(top)
    return [f for f in found if f.name in KUSTOMIZATION_FILES or resolved(f) in listed
            or _flux_generated(resolved(f).parent, top, generated)]


def _flux_generated(folder: Path, top: Path, generated: set[Path]) -> bool:
    """Whether a file in `folder` is in a tree Flux generates a kustomization for: no kustomization file in it or
    above it up to `top`, or up to one of the `generated` Flux paths."""
    while True:
        if folder in generated:
            return True
        if kustomization_file(folder) is not None:
            return False
        if folder == top or top not in folder.parents:
            return True
        folder = folder.parent
