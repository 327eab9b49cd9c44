"""The files a `kustomize build` of a folder can read: the kustomization files it reaches through resources,
components and bases, and every file they name (patches, generator files and envs, replacements, CRDs, OpenAPI
schemas). Over-inclusive by design (every file directly inside a folder it reaches counts too), so a digest of these
files changes whenever the build's output can. A remote reference (URL, helmCharts) makes the set incomplete."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import load_all_shared
from kubectl_triton.gitops.repo import kustomization_file

_DIR_LISTS = ("resources", "bases", "components", "crds", "generators", "transformers", "validators")
_FILE_LISTS = ("configurations",)


@dataclass
class Inputs:
    """The files one build reads (resolved paths) and whether the set is known to be complete."""

    files: set[Path] = field(default_factory=set)
    complete: bool = True


def _remote(entry: str) -> bool:
    return "://" in entry or entry.startswith(("github.com/", "git@", "gitlab.com/", "bitbucket.org/")) \
        or "?ref=" in entry


def _generator_files(gen: Any) -> list[str]:
    if not isinstance(gen, dict):
        return []
    names = [str(f).split("=", 1)[-1] for f in gen.get("files") or [] if isinstance(f, (str, int))]
    names += [str(e) for e in gen.get("envs") or [] if isinstance(e, str)]
    if isinstance(gen.get("env"), str):
        names.append(gen["env"])
    return names


@dataclass
class _Folder:
    """What one folder contributes to a build: its files, the folders it refers to, whether all is local."""

    files: set[Path] = field(default_factory=set)
    folders: list[Path] = field(default_factory=list)
    complete: bool = True


@dataclass
class Memo:
    """What several build_inputs calls of one run (files unchanged meanwhile) share: each folder read once,
    each path resolved once."""

    folders: dict[Path, _Folder] = field(default_factory=dict)
    paths: dict[Path, Path] = field(default_factory=dict)

    def resolve(self, path: Path) -> Path:
        """`path` with every symlink resolved, its parent's resolution reused (one lstat per new path)."""
        if path not in self.paths:
            parent = path.parent
            if parent == path or not path.is_absolute() or path.name in ("", ".", ".."):
                self.paths[path] = path.resolve()
            else:
                here = self.resolve(parent) / path.name
                self.paths[path] = here.resolve() if here.is_symlink() else here
        return self.paths[path]


def build_inputs(directory: Path, memo: Memo | None = None) -> Inputs:
    """Every file a build of `directory` can read. Pass one `memo` to the calls of one run so that folders
    they share (a base, a GPU component) are read once."""
    out = Inputs()
    seen: set[Path] = set()
    memo = memo or Memo()
    folders = memo.folders

    def visit(folder: Path) -> None:
        folder = memo.resolve(folder)
        if folder in seen:
            return
        seen.add(folder)
        if folder not in folders:
            folders[folder] = _read_folder(folder, memo)
        own: _Folder = folders[folder]
        out.files |= own.files
        out.complete = out.complete and own.complete
        for child in own.folders:
            visit(child)

    visit(directory)
    return out


def _read_folder(folder: Path, memo: Memo) -> _Folder:
    out = _Folder()
    if not folder.is_dir():
        out.complete = False
        return out
    with os.scandir(folder) as entries:  # `folder` is resolved: only symlinked children need resolving
        for entry in entries:
            if entry.is_file():
                out.files.add(Path(entry.path).resolve() if entry.is_symlink() else Path(entry.path))
    kfile = kustomization_file(folder)
    if kfile is None:
        return out
    try:
        docs = load_all_shared(kfile)
    except InputError:
        out.complete = False
        return out
    doc = docs[0] if docs and isinstance(docs[0], dict) else {}
    if doc.get("helmCharts") or doc.get("helmChartInflationGenerator"):
        out.complete = False
    refs: list[str] = []
    for key in _DIR_LISTS:
        refs += [str(e) for e in doc.get(key) or [] if isinstance(e, str)]
    for key in _FILE_LISTS:
        refs += [str(e) for e in doc.get(key) or [] if isinstance(e, str)]
    for key in ("patches", "patchesJson6902", "replacements"):
        refs += [str(p["path"]) for p in doc.get(key) or [] if isinstance(p, dict) and p.get("path")]
    refs += [str(p) for p in doc.get("patchesStrategicMerge") or [] if isinstance(p, str) and "\n" not in p]
    for key in ("configMapGenerator", "secretGenerator"):
        for gen in doc.get(key) or []:
            refs += _generator_files(gen)
    openapi = doc.get("openapi")
    if isinstance(openapi, dict) and openapi.get("path"):
        refs.append(str(openapi["path"]))
    for ref in refs:
        if _remote(ref):
            out.complete = False
            continue
        target = folder / ref
        if target.is_dir():  # joined lexically to the (symlink-free) folder, as kustomize does
            out.folders.append(Path(os.path.normpath(target)))
        else:
            # kustomize joins a file's path to its (symlink-free) root lexically; a missing file is hashed as
            # missing: the build fails and is not cached
            out.files.add(Path(os.path.normpath(target)))
    return out


def changed_files(root: Path, ref: str) -> set[Path]:
    """Files that differ between `ref` and the working tree at `root` (committed, staged, unstaged, untracked;
    deleted ones included), resolved. A ref git does not know is an InputError."""
    def git(*args: str) -> str:
        try:
            proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            raise InputError("--changed-from needs git, and git is not on PATH") from None
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if ln.strip()), "failed")
            raise InputError(f"--changed-from {ref}: {first.removeprefix('fatal: ')}")
        return proc.stdout

    top = Path(git("rev-parse", "--show-toplevel").strip())
    try:
        git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except InputError:
        raise InputError(f"--changed-from {ref}: not a commit in this repository",
                         hint="fetch it first (actions/checkout: fetch-depth: 0)") from None
    names = git("diff", "--name-only", "-z", ref, "--").split("\0")
    names += git("ls-files", "--others", "--exclude-standard", "--full-name", "-z").split("\0")
    return {(top / n).resolve() for n in names if n}
