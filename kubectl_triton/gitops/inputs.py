"""The files a `kustomize build` of a folder can read: the kustomization files it reaches through resources,
components and bases, and every file they name (patches, generator files and envs, replacements, CRDs, OpenAPI
schemas). Over-inclusive by design (every file directly inside a folder it reaches counts too), so a digest of these
files changes whenever the build's output can. A remote reference (URL, helmCharts) makes the set incomplete."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import load_all_shared
from kubectl_triton.gitops.files import KUSTOMIZATION_FILES, listing

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
    """What one folder contributes to a build: its files, the folders it refers to, whether all is local (paths
    as strings: a run handles thousands, and pathlib's objects cost more than the work)."""

    files: set[str] = field(default_factory=set)
    folders: list[str] = field(default_factory=list)
    complete: bool = True


@dataclass
class Memo:
    """What the build_inputs, digest and reaches calls of one run (files unchanged meanwhile) share: each folder
    read once, each path resolved once."""

    folders: dict[str, _Folder] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)

    def resolve(self, path: str) -> str:
        """`path` with every symlink resolved, its parent's resolution reused (one lstat per new path)."""
        found = self.paths.get(path)
        if found is None:
            parent, name = os.path.split(path)
            if parent == path or not os.path.isabs(path) or name in ("", ".", ".."):
                found = os.path.realpath(path)
            else:
                here = os.path.join(self.resolve(parent), name)
                found = os.path.realpath(here) if os.path.islink(here) else here
            self.paths[path] = found
        return found

    def folder(self, path: str) -> _Folder:
        """What the (resolved) folder `path` contributes, read once."""
        found = self.folders.get(path)
        if found is None:
            found = self.folders[path] = _read_folder(path)
        return found


def digest(directory: Path, file_digest: Callable[[str], str], memo: Memo, done: dict[str, str]) -> str | None:
    """A digest of every file a build of `directory` can read, or None when they cannot all be known (a remote
    reference): each folder's digest covers its path, its own files' contents (`file_digest`) and the digests of
    the folders it refers to, so a folder shared by many builds is digested once (`done`, kept across calls)."""
    return _digest(memo.resolve(os.fspath(directory)), file_digest, memo, done)


def _digest(folder: str, file_digest: Callable[[str], str], memo: Memo, done: dict[str, str]) -> str | None:
    if folder in done:
        return done[folder] or None
    done[folder] = ""  # a reference cycle: kustomize refuses it, so the build fails and is never cached
    own = memo.folder(folder)
    h = hashlib.sha256(f"{folder}\0".encode())
    for file in sorted(own.files):
        h.update(f"{file}\0{file_digest(file)}\0".encode())
    parts = [_digest(memo.resolve(child), file_digest, memo, done) for child in own.folders]
    if not own.complete or any(part is None for part in parts):
        return None
    for part in parts:
        h.update(f"{part}\0".encode())
    done[folder] = h.hexdigest()
    return done[folder]


def reaches(directory: Path, files: set[str], memo: Memo, done: dict[str, bool]) -> bool:
    """Whether a build of `directory` can read one of `files` (resolved paths, as strings) or something that
    cannot be known, each folder looked at once across calls sharing `done`."""
    return _reaches(memo.resolve(os.fspath(directory)), files, memo, done)


def _reaches(folder: str, files: set[str], memo: Memo, done: dict[str, bool]) -> bool:
    if folder not in done:
        done[folder] = False  # a reference cycle adds nothing
        own = memo.folder(folder)
        done[folder] = not own.complete or not own.files.isdisjoint(files) or \
            any(_reaches(memo.resolve(child), files, memo, done) for child in own.folders)
    return done[folder]


def build_inputs(directory: Path, memo: Memo | None = None) -> Inputs:
    """Every file a build of `directory` can read. Pass one `memo` to the calls of one run so that folders
    they share (a base, a GPU component) are read once."""
    out = Inputs()
    files: set[str] = set()
    seen: set[str] = set()
    memo = memo or Memo()

    def visit(folder: str) -> None:
        folder = memo.resolve(folder)
        if folder in seen:
            return
        seen.add(folder)
        own = memo.folder(folder)
        files.update(own.files)
        out.complete = out.complete and own.complete
        for child in own.folders:
            visit(child)

    visit(os.fspath(directory))
    out.files = {Path(f) for f in files}
    return out


def _read_folder(folder: str) -> _Folder:
    out = _Folder()
    try:
        entries = listing(folder)
    except OSError:  # not a folder
        out.complete = False
        return out
    for name in entries.files:  # `folder` is resolved: only symlinked files need resolving
        path = os.path.join(folder, name)
        out.files.add(os.path.realpath(path) if name in entries.links else path)
    kname = next((name for name in KUSTOMIZATION_FILES if name in entries.files), None)
    if kname is None:
        return out
    try:
        docs = load_all_shared(Path(folder, kname))
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
        target = os.path.join(folder, ref)
        if os.path.isdir(target):  # joined lexically to the (symlink-free) folder, as kustomize does
            out.folders.append(os.path.normpath(target))
        else:
            # kustomize joins a file's path to its (symlink-free) root lexically; a missing file is hashed as
            # missing: the build fails and is not cached
            out.files.add(os.path.normpath(target))
    return out


def changed_files(root: Path, ref: str) -> set[Path]:
    """Files that differ between `ref` and the working tree at `root` (committed, staged, unstaged, untracked;
    deleted ones included), resolved. A ref git does not know is an InputError."""
    return ChangedFiles(root, ref).result()


class ChangedFiles:
    """`changed_files`, started now (git runs while the caller goes on) and read with `result()`."""

    def __init__(self, root: Path, ref: str) -> None:
        self.ref = ref
        commands = {"top": ["rev-parse", "--show-toplevel"],
                    "ref": ["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                    "diff": ["diff", "--name-only", "-z", ref, "--"],
                    "new": ["ls-files", "--others", "--exclude-standard", "--full-name", "-z"]}
        try:  # the four run at once
            self._procs = {name: subprocess.Popen(["git", *args], cwd=root, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, text=True)
                           for name, args in commands.items()}
        except FileNotFoundError:
            raise InputError("--changed-from needs git, and git is not on PATH") from None

        self._out: dict[str, tuple[str, int]] = {}

    def _wait(self, *names: str) -> None:
        for name in names:
            if name not in self._out:
                stdout, stderr = self._procs[name].communicate()
                self._out[name] = (stdout, self._procs[name].returncode)
                if self._out[name][1] == 0:
                    continue
                self._stop_the_rest()
                if name == "ref" and self._out.get("top", ("", 0))[1] == 0:
                    raise InputError(f"--changed-from {self.ref}: not a commit in this repository",
                                     hint="fetch it first (actions/checkout: fetch-depth: 0)")
                first = next((ln for ln in stderr.splitlines() if ln.strip()), "failed")
                raise InputError(f"--changed-from {self.ref}: {first.removeprefix('fatal: ')}")

    def _stop_the_rest(self) -> None:
        """Kill and reap the git processes whose output is no longer wanted."""
        for name, proc in self._procs.items():
            if name not in self._out:
                proc.kill()
                proc.communicate()
                self._out[name] = ("", -1)

    def check(self) -> None:
        """Raise the InputError of a folder outside git or a ref that is no commit (without waiting for the diff)."""
        self._wait("top", "ref")

    def result(self) -> set[Path]:
        self._wait("top", "ref", "diff", "new")
        top = Path(self._out["top"][0].strip())
        names = self._out["diff"][0].split("\0") + self._out["new"][0].split("\0")
        return {(top / n).resolve() for n in names if n}
