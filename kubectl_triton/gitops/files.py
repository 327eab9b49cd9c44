"""The repository's files as kustomize and Flux see them: folder listings and resolved paths (memoised within a
Repository.session), kustomization files, files matching a pattern, and which YAML files are manifests (read as
YAML) rather than data a generator reads.

Pure filesystem reads; no module of this package is imported here (model.py builds on it)."""

from __future__ import annotations

import contextvars
import fnmatch
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import load_all_shared

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")

_RESOLVED: contextvars.ContextVar[dict[Path, Path] | None] = contextvars.ContextVar("resolved_paths", default=None)


@dataclass(frozen=True)
class Listing:
    """One folder's entries: sub-folders (symlinked ones apart), files (what os.walk calls non-directories) and,
    of those, the regular files and symlinks to them."""

    folders: tuple[str, ...]
    linked_folders: tuple[str, ...]
    others: tuple[str, ...]
    files: frozenset[str]
    links: frozenset[str]


_LISTINGS: contextvars.ContextVar[dict[str, Listing] | None] = contextvars.ContextVar("listings", default=None)


def listing(folder: str) -> Listing:
    """The entries of `folder` (os.scandir; OSError when it is no folder), listed once per Repository.session."""
    memo = _LISTINGS.get()
    found = memo.get(folder) if memo is not None else None
    if found is None:
        folders: list[str] = []
        linked: list[str] = []
        others: list[str] = []
        files: set[str] = set()
        links: set[str] = set()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir():
                    (linked if entry.is_symlink() else folders).append(entry.name)
                    continue
                others.append(entry.name)
                if entry.is_file():
                    files.add(entry.name)
                if entry.is_symlink():
                    links.add(entry.name)
        found = Listing(tuple(folders), tuple(linked), tuple(others), frozenset(files), frozenset(links))
        if memo is not None:
            memo[folder] = found
    return found


def walk(top: str) -> Iterator[tuple[str, Listing]]:
    """Every folder below `top` (itself included) with its listing, as os.walk goes: symlinked folders are not
    descended into, unreadable ones are left out."""
    try:
        here = listing(top)
    except OSError:
        return
    yield top, here
    for name in here.folders:
        yield from walk(os.path.join(top, name))


def resolved(path: Path) -> Path:
    """`path.resolve()`, resolved once per path within a Repository.session (the files must not change)."""
    memo = _RESOLVED.get()
    if memo is None:
        return path.resolve()
    found = memo.get(path)
    if found is None:
        found = memo[path] = path.resolve()
    return found


def kustomization_file(directory: Path) -> Path | None:
    for name in KUSTOMIZATION_FILES:
        if (directory / name).is_file():
            return directory / name
    return None


def matching_files(top: Path, *patterns: str) -> list[Path]:
    """sorted(top.rglob(pattern)) for every pattern, in one walk: files below `top` whose name matches one,
    symlinked folders not descended into (as rglob before Python 3.13)."""
    found = [os.path.join(folder, name) for folder, entries in walk(str(top)) for name in entries.others
             if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)]
    # sorted as Paths sort (by component), without making a Path of each first
    return [Path(f) for f in sorted(found, key=lambda f: f.split(os.sep)) if os.path.exists(f)]


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


def manifest_files(top: Path, flux_paths: Iterable[Path] = ()) -> list[Path]:
    """The kustomization files below `top` and the YAML files there that kustomize or Flux reads as manifests:
    those a kustomization file lists (resources, patches, ...), and every `*.yaml`/`*.yml` in a folder tree with
    no kustomization file up to `top` or up to one of `flux_paths` (the spec.path of Flux Kustomizations: Flux's
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
    generated = {resolved(p) for p in flux_paths if p.is_dir() and kustomization_file(p) is None}
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
