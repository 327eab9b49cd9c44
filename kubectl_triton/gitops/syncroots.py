"""Where Flux really syncs a repository from, for `init`: the sync roots (the folders a cluster's Flux applies first)
found from what Flux reads, never from folder names alone:

- a `FluxInstance` (fluxcd.controlplane.io, the Flux Operator): `spec.sync.path` of `spec.sync.kind`/`name`, also
  written as the values of the flux-instance Helm chart (a HelmRelease's `values.instance.sync`, or a values file
  with `instance.sync`), as home-ops repositories do;
- the bootstrap Kustomization `flux-system` (gotk-sync.yaml: `spec.path`, `spec.sourceRef`), and the
  `<path>/flux-system/` folder holding gotk-components.yaml or gotk-sync.yaml that `flux bootstrap --path` writes.

Hidden folders (`.archive/`, `.github/`) are never read; a root that only a development environment syncs (a kind
cluster, a local registry) counts only when no other root exists. For an OCIRepository sync the path is inside the
pushed artifact: when it is not a folder of the repository but is one below a single sub-folder, that sub-folder is
the artifact's root.

What a GitRepository's artifact leaves out (`.sourceignore` files, `spec.ignore` patched in by a FluxInstance or
set on the bootstrap GitRepository) follows source-controller's reading of those patterns (go-git's gitignore:
last match wins, an excluded folder is not descended into)."""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import loads_all
from kubectl_triton.gitops.model import FLUX_KUSTOMIZATION_API, KUSTOMIZATION_FILES, FluxKustomization

OPERATOR_API = "fluxcd.controlplane.io/"
HELM_RELEASE_API = "helm.toolkit.fluxcd.io/"
SOURCE_API = "source.toolkit.fluxcd.io/"
SYNC_KINDS = ("GitRepository", "OCIRepository", "Bucket")
BOOTSTRAP = "flux-system"  # flux bootstrap's (and the Flux Operator's default) name of the source and Kustomization
GOTK_FILES = ("gotk-components.yaml", "gotk-sync.yaml")
YAML_SUFFIXES = (".yaml", ".yml")
SOURCEIGNORE = ".sourceignore"
# Folder names of development-only environments (a kind or minikube cluster on a laptop).
DEV_FOLDERS = frozenset({"devenv", "dev-env", "localdev", "local-dev", "local", "kind", "minikube", "k3d", "tilt"})
DEV_URL = re.compile(r"(^|[/@.:])(localhost|127\.0\.0\.1|host\.docker\.internal)([:/]|$)|kind-registry")
VARIABLE = re.compile(r"\$\{[^}]*\}")


@dataclass(frozen=True)
class SyncRoot:
    """A folder Flux syncs first: repository-relative `path` (no `./`, no trailing `/`), the source it reads
    (kind, name, namespace), where it was found, and for an OCI artifact pushed from a sub-folder that folder
    (`artifact_root`; the sync path is relative to it)."""

    path: str
    source: tuple[str, str, str]
    evidence: str
    artifact_root: str = ""
    dev: bool = False
    ignore: str | None = None  # the source's spec.ignore, where the repository sets it
    declared: bool = True  # the source is named where the root was found (a flux-system/ folder alone: assumed)

    @property
    def name(self) -> str:
        """The sync path's last folder name."""
        return posixpath.basename(self.path)

    @property
    def source_text(self) -> str:
        return f"{self.source[0]}/{self.source[1]}"


@dataclass
class Found:
    """The sync roots of a repository (development-only ones dropped when another exists) and notes on those left
    out (a path with variables, a folder that is not there, development-only roots)."""

    roots: list[SyncRoot] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dev: list[SyncRoot] = field(default_factory=list)  # development-only roots left out


# ---- reading the repository -------------------------------------------------------------------------------------

def _yaml_files(root: Path) -> Iterator[Path]:
    """Every .yaml/.yml file of the repository outside hidden folders (.git, .archive, .github), sorted."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.endswith(YAML_SUFFIXES):
                yield Path(folder) / name


def _docs(path: Path, text: str) -> list[dict[str, Any]]:
    """The mappings of a YAML file; a file that does not parse is validate's to report, not a sync root."""
    try:
        return [d for d in loads_all(text, str(path)) if isinstance(d, dict)]
    except (InputError, RecursionError, ValueError):
        return []


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _meta(doc: dict[str, Any]) -> tuple[str, str]:
    meta = _mapping(doc.get("metadata"))
    return str(meta.get("name") or ""), str(meta.get("namespace") or BOOTSTRAP)


def normalise(path: str) -> str:
    """A Flux path as a repository-relative folder: `./a/b/` -> `a/b`, `./` -> `.`."""
    out = posixpath.normpath(str(path).strip().lstrip("/") or ".")
    return "." if out in ("", ".") else out


@dataclass(frozen=True)
class _Sync:
    """One sync declaration before its path is resolved to a folder."""

    path: str
    source: tuple[str, str, str]
    evidence: str
    url: str = ""
    ignore: str | None = None
    declared: bool = True
    self_sync: bool = False  # found only as a source and its Kustomization applying their own file's folder


def _instance_sync(sync: dict[str, Any], namespace: str, what: str, rel: str,
                   patches: Any) -> _Sync | None:
    path = sync.get("path")
    if not isinstance(path, str) or not path.strip():
        return None
    kind = str(sync.get("kind") or "GitRepository")
    name = str(sync.get("name") or namespace)
    return _Sync(path, (kind, name, namespace), f"{what} ({rel})", str(sync.get("url") or ""),
                 _patched_ignore(patches, kind, name))


def _patched_ignore(patches: Any, kind: str, name: str) -> str | None:
    """spec.ignore set on the sync source by a FluxInstance's `kustomize.patches` (JSON 6902 or strategic merge)."""
    if kind != "GitRepository" or not isinstance(patches, list):
        return None
    out = None
    for item in patches:
        item = _mapping(item)
        target = _mapping(item.get("target"))
        if target.get("kind") not in (None, "GitRepository") or target.get("name") not in (None, name):
            continue
        text = item.get("patch")
        if not isinstance(text, str):
            continue
        try:
            docs = loads_all(text, "patch")
        except InputError:
            continue
        for doc in docs:
            if isinstance(doc, list):
                for op in doc:
                    op = _mapping(op)
                    if op.get("op") in ("add", "replace") and op.get("path") == "/spec/ignore" \
                            and isinstance(op.get("value"), str):
                        out = op["value"]
            elif isinstance(doc, dict) and isinstance(_mapping(doc.get("spec")).get("ignore"), str):
                out = doc["spec"]["ignore"]
    return out


def _declarations(root: Path) -> Iterator[_Sync]:
    for path in _yaml_files(root):
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        instance = "FluxInstance" in text or ("instance:" in text and "sync:" in text)
        bootstrap = FLUX_KUSTOMIZATION_API in text and (BOOTSTRAP in text or SOURCE_API in text)
        if not instance and not bootstrap:
            continue
        docs = _docs(path, text)
        ignores = {(_meta(d)[0], _meta(d)[1]): _mapping(d.get("spec")).get("ignore") for d in docs
                   if d.get("kind") == "GitRepository" and str(d.get("apiVersion", "")).startswith(SOURCE_API)}
        sources = {(str(d.get("kind")), *_meta(d)) for d in docs
                   if d.get("kind") in SYNC_KINDS and str(d.get("apiVersion", "")).startswith(SOURCE_API)}
        for doc in docs:
            api, kind = str(doc.get("apiVersion", "")), doc.get("kind")
            name, namespace = _meta(doc)
            spec = _mapping(doc.get("spec"))
            if kind == "FluxInstance" and api.startswith(OPERATOR_API):
                found = _instance_sync(_mapping(spec.get("sync")), namespace, f"FluxInstance {name}", rel,
                                       _mapping(spec.get("kustomize")).get("patches"))
            elif kind == "HelmRelease" and api.startswith(HELM_RELEASE_API):
                instance_values = _mapping(_mapping(spec.get("values")).get("instance"))
                namespace = str(spec.get("targetNamespace") or namespace)
                found = _instance_sync(_mapping(instance_values.get("sync")), namespace,
                                       f"HelmRelease {name} (flux-instance values)", rel,
                                       _mapping(instance_values.get("kustomize")).get("patches"))
            elif "apiVersion" not in doc and "kind" not in doc and isinstance(doc.get("instance"), dict):
                instance_values = doc["instance"]  # the flux-instance chart's values file
                found = _instance_sync(_mapping(instance_values.get("sync")), BOOTSTRAP,
                                       "flux-instance Helm values", rel,
                                       _mapping(instance_values.get("kustomize")).get("patches"))
            elif kind == "Kustomization" and api.startswith(FLUX_KUSTOMIZATION_API) \
                    and isinstance(spec.get("path"), str) \
                    and (name == BOOTSTRAP or _self_sync(rel, str(spec["path"]), _source(spec, namespace), sources)):
                source = _source(spec, namespace)
                ignore = ignores.get((source[1], source[2]))
                found = _Sync(str(spec["path"]), source, f"Kustomization {namespace}/{name} ({rel})",
                              ignore=ignore if isinstance(ignore, str) else None, self_sync=name != BOOTSTRAP)
            else:
                found = None
            if found is not None:
                yield found


def _source(spec: dict[str, Any], namespace: str) -> tuple[str, str, str]:
    ref = _mapping(spec.get("sourceRef"))
    return (str(ref.get("kind") or "GitRepository"), str(ref.get("name") or BOOTSTRAP),
            str(ref.get("namespace") or namespace))


def _self_sync(rel: str, path: str, source: tuple[str, str, str], sources: set[tuple[str, str, str]]) -> bool:
    """A bootstrap pair under another name: the file declares the source and a Kustomization of it whose path holds
    the file itself (it keeps itself applied, as flux bootstrap's gotk-sync.yaml does). A path of `./` is left out:
    it is as often another artifact's top (the Flux manifests an OCIRepository pulls) as this repository's."""
    folder = normalise(path)
    return source in sources and folder != "." and rel.startswith(folder + "/")


def _declares_kustomizations(folder: Path) -> bool:
    """Does a YAML file directly in `folder` declare a Flux Kustomization?"""
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name.endswith(YAML_SUFFIXES):
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if FLUX_KUSTOMIZATION_API in text and any(
                    d.get("kind") == "Kustomization" and str(d.get("apiVersion", "")).startswith(
                        FLUX_KUSTOMIZATION_API) for d in _docs(path, text)):
                return True
    return False


def _gotk_folders(root: Path) -> Iterator[_Sync]:
    """`<path>/flux-system/` folders of `flux bootstrap --path=<path>`: holding gotk-components.yaml or
    gotk-sync.yaml, or a kustomization beside Flux Kustomizations declared in `<path>` itself (a namespace folder
    named flux-system, kubernetes/apps/flux-system, has only folders beside it)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        here = Path(folder)
        if here.name != BOOTSTRAP or here == root:
            continue
        gotk = any(f in files for f in GOTK_FILES)
        if gotk or ("kustomization.yaml" in files and _declares_kustomizations(here.parent)):
            parent = here.parent.relative_to(root).as_posix() or "."
            yield _Sync(parent, ("GitRepository", BOOTSTRAP, BOOTSTRAP),
                        f"flux bootstrap folder {here.relative_to(root).as_posix()}/", declared=False)


def _dev(path: str, evidence: str, url: str) -> bool:
    parts = {*path.split("/"), *evidence.split(" (")[-1].rstrip(")").split("/")}
    return bool(parts & DEV_FOLDERS) or bool(url and DEV_URL.search(url))


def _resolve(root: Path, decl: _Sync, notes: list[str]) -> list[SyncRoot]:
    """The folders one declaration syncs: its path, ${VAR} parts matched against the repository's folders, and for
    an OCI artifact a sub-folder it is pushed from when the path is not a folder at the top."""
    wanted = normalise(decl.path)
    if VARIABLE.search(wanted):
        pattern = VARIABLE.sub("*", wanted)
        matches = sorted(p.relative_to(root).as_posix() for p in root.glob(pattern)
                         if p.is_dir() and not any(s.startswith(".") for s in p.relative_to(root).parts))
        if not matches:
            notes.append(f"{decl.evidence} syncs {decl.path}, which names no folder here (its variables are set "
                         "outside the repository)")
        paths = [(m, "") for m in matches]
    elif wanted == "." or (root / wanted).is_dir():
        paths = [(wanted, "")]
    elif decl.source[0] == "OCIRepository":
        below = sorted(p.relative_to(root).as_posix() for p in root.glob(f"*/{wanted}")
                       if p.is_dir() and not p.relative_to(root).parts[0].startswith("."))
        if len(below) == 1:
            paths = [(below[0], below[0][:-len(wanted) - 1])]
        else:
            notes.append(f"{decl.evidence} syncs {decl.path} of an OCI artifact; no single folder of this repository "
                         "holds it")
            paths = []
    else:
        notes.append(f"{decl.evidence} syncs {decl.path}, which is not a folder of this repository")
        paths = []
    return [SyncRoot(p, decl.source, decl.evidence, artifact, _dev(p, decl.evidence, decl.url), decl.ignore,
                     decl.declared) for p, artifact in paths]


def find(root: Path) -> Found:
    """The sync roots of the repository at `root`, in path order."""
    out = Found()
    by_path: dict[str, SyncRoot] = {}
    declarations = [*_declarations(root), *_gotk_folders(root)]
    # a source and Kustomization applying their own folder count only where Flux shows no other sync root: a
    # tenant's GitRepository with its Kustomization inside the cluster folder is another repository's
    for wanted in (False, True):
        for decl in (d for d in declarations if d.self_sync == wanted):
            for found in _resolve(root, decl, out.notes):
                known = by_path.get(found.path)
                if known is None or (found.declared and not known.declared):
                    by_path[found.path] = found
                elif known.ignore is None and found.ignore is not None:
                    by_path[found.path] = replace(known, ignore=found.ignore)
        if by_path:
            break
    roots = sorted(by_path.values(), key=lambda r: r.path)
    real = [r for r in roots if not r.dev]
    if real and len(real) < len(roots):
        out.notes.append("development-only sync roots left out: " + ", ".join(
            f"{r.path} ({r.evidence})" for r in roots if r.dev))
        out.dev = [r for r in roots if r.dev]
        roots = real
    out.roots = roots
    return out


def labels(roots: list[SyncRoot]) -> dict[str, str]:
    """A short name per root (its path -> name): the last folder name, or where several roots share it the
    deepest folder name that only this root's path has (kubernetes/main/flux, kubernetes/utility/flux -> main,
    utility); the path itself where none is."""
    out = {}
    for r in roots:
        others = [set(o.path.split("/")) for o in roots if o is not r]
        names = [o.name for o in roots if o is not r]
        if r.name not in names:
            out[r.path] = r.name
            continue
        own = next((part for part in reversed(r.path.split("/")) if not any(part in o for o in others)), None)
        out[r.path] = own or r.path
    return out


def matching(roots: list[SyncRoot], wanted: str) -> list[SyncRoot]:
    """The roots `--cluster` names: by path (with or without ./ and a trailing /), last folder name or label."""
    path = normalise(wanted)
    named = labels(roots)
    exact = [r for r in roots if r.path == path]
    return exact or [r for r in roots if wanted in (r.name, named[r.path])]


def _resources(kfile: Path, cache: dict[Path, tuple[str | None, list[str]]]) -> tuple[str | None, list[str]]:
    """(namespace, resolved resource paths) of a kustomization file."""
    if kfile not in cache:
        try:
            docs = _docs(kfile, kfile.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            docs = []
        doc = docs[0] if docs else {}
        entries = [*(doc.get("resources") or []), *(doc.get("bases") or [])] \
            if isinstance(doc.get("resources") or [], list) and isinstance(doc.get("bases") or [], list) else []
        folder = str(kfile.parent)
        namespace = doc.get("namespace")
        cache[kfile] = (str(namespace) if isinstance(namespace, str) and namespace else None,
                        [os.path.normpath(os.path.join(folder, e)) for e in entries
                         if isinstance(e, str) and "://" not in e])
    return cache[kfile]


def _namespace(path: Path, declared: str | None, top: Path, cache: dict[Path, tuple[str | None, list[str]]]) -> str:
    """The namespace a Flux Kustomization declared in `path` gets when `top` is built: kustomize's namespace
    transformer of each kustomization that includes it (the outermost wins), up to `top`; else its own
    metadata.namespace; else flux-system."""
    namespace = declared
    target = str(path)
    folder = path.parent
    while True:
        kfile = next((folder / n for n in KUSTOMIZATION_FILES if (folder / n).is_file()), None)
        if kfile is not None:
            transformer, entries = _resources(kfile, cache)
            if not any(e == target or target.startswith(e + os.sep) for e in entries):
                break  # not included from here: what includes it is not this tree's
            namespace = transformer or namespace
            target = str(folder)
        if folder == top or top not in folder.parents:
            break
        folder = folder.parent
    return namespace or BOOTSTRAP


def kustomizations(root: Path, rel: str) -> list[FluxKustomization]:
    """The Flux Kustomizations declared in the files under folder `rel` (a file that does not parse is skipped),
    each with the namespace the build of `rel` gives it."""
    out: list[FluxKustomization] = []
    top = root / rel
    if not top.is_dir():
        return out
    cache: dict[Path, tuple[str | None, list[str]]] = {}
    for path in _yaml_files(top):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if FLUX_KUSTOMIZATION_API not in text:
            continue
        for doc in _docs(path, text):
            if doc.get("kind") == "Kustomization" and str(doc.get("apiVersion", "")).startswith(
                    FLUX_KUSTOMIZATION_API):
                name = _meta(doc)[0]
                declared = _mapping(doc.get("metadata")).get("namespace")
                namespace = _namespace(path, str(declared) if declared else None, top, cache)
                spec = _mapping(doc.get("spec"))
                out.append(FluxKustomization("Kustomization", name, namespace, path, doc,
                                             path=str(spec.get("path", "./"))))
    return out


def kustomization_names(root: Path) -> set[str]:
    """Names of every Flux Kustomization of the repository (outside hidden folders)."""
    return {k.name for k in kustomizations(root, ".")}


# ---- what the source's artifact leaves out ----------------------------------------------------------------------

@dataclass(frozen=True)
class _Pattern:
    """One gitignore pattern as go-git (source-controller's matcher) reads it."""

    parts: tuple[str, ...]
    domain: tuple[str, ...]
    include: bool
    dir_only: bool
    glob: bool
    origin: str

    @classmethod
    def parse(cls, line: str, domain: tuple[str, ...], origin: str) -> _Pattern:
        include = line.startswith("!")
        if include:
            line = line[1:]
        if not line.endswith("\\ "):
            line = line.rstrip(" ")
        dir_only = line.endswith("/")
        if dir_only:
            line = line[:-1]
        return cls(tuple(line.split("/")), domain, include, dir_only, "/" in line, origin)

    def match(self, path: tuple[str, ...], is_dir: bool) -> bool:
        if len(path) <= len(self.domain) or path[:len(self.domain)] != self.domain:
            return False
        path = path[len(self.domain):]
        return self._glob(path, is_dir) if self.glob else self._name(path, is_dir)

    def _name(self, path: tuple[str, ...], is_dir: bool) -> bool:
        for i, name in enumerate(path):
            if not fnmatch.fnmatchcase(name, self.parts[0]):
                continue
            return not (self.dir_only and not is_dir and i == len(path) - 1)
        return False

    def _glob(self, path: tuple[str, ...], is_dir: bool) -> bool:
        matched = traverse = False
        rest = list(path)
        for i, part in enumerate(self.parts):
            if part == "":
                traverse = False
                continue
            if part == "**":
                if i == len(self.parts) - 1:
                    break
                traverse = True
                continue
            if "**" in part or not rest:
                return False
            if traverse:
                traverse = False
                while rest:
                    head = rest.pop(0)
                    if fnmatch.fnmatchcase(head, part):
                        matched = True
                        break
                    if not rest:
                        matched = False
            else:
                if not fnmatch.fnmatchcase(rest[0], part):
                    return False
                matched = True
                rest.pop(0)
        return not (matched and self.dir_only and not is_dir and not rest) and matched


def _read_patterns(text: str, domain: tuple[str, ...], origin: str) -> list[_Pattern]:
    return [_Pattern.parse(line, domain, origin) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


@dataclass(frozen=True)
class Ignore:
    """The patterns a sync root's source applies: `.sourceignore` files (the top one first), then spec.ignore."""

    patterns: tuple[_Pattern, ...]

    @classmethod
    def of(cls, root: Path, sync: SyncRoot, *, extra: str = "") -> Ignore:
        """`extra`: lines to read as if appended to the top .sourceignore."""
        found: list[_Pattern] = []
        top = root / sync.artifact_root if sync.artifact_root else root
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != ".git")
            if SOURCEIGNORE not in files:
                continue
            here = Path(folder)
            domain = here.relative_to(top).parts
            try:
                text = (here / SOURCEIGNORE).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            rel = (here / SOURCEIGNORE).relative_to(root).as_posix()
            if not domain:
                text = f"{text}\n{extra}"
            found += _read_patterns(text, domain, rel)
        if extra and not (top / SOURCEIGNORE).is_file():
            found = _read_patterns(extra, (), SOURCEIGNORE) + found
        if sync.ignore is not None:
            found += _read_patterns(sync.ignore, (), f"spec.ignore of {sync.source_text} ({sync.evidence})")
        return cls(tuple(found))

    def _verdict(self, path: tuple[str, ...], is_dir: bool) -> _Pattern | None:
        for pattern in reversed(self.patterns):
            if pattern.match(path, is_dir):
                return None if pattern.include else pattern
        return None

    def excluded_by(self, rel: str, *, is_dir: bool = False) -> _Pattern | None:
        """The pattern that leaves repository file `rel` out of the artifact (a folder above it excluded leaves it
        out too), None when it is in."""
        parts = tuple(p for p in rel.split("/") if p)
        for i in range(1, len(parts) + 1):
            hit = self._verdict(parts[:i], is_dir or i < len(parts))
            if hit is not None:
                return hit
        return None


def excluded(root: Path, sync: SyncRoot, paths: Iterable[str], *, extra: str = "") -> dict[str, str]:
    """Of the repository-relative `paths`, those the sync root's artifact leaves out -> where the pattern is."""
    if sync.source[0] != "GitRepository" or sync.artifact_root:
        return {}
    rules = Ignore.of(root, sync, extra=extra)
    out = {}
    for rel in paths:
        hit = rules.excluded_by(rel)
        if hit is not None:
            out[rel] = hit.origin
    return out


def remote_clusters(root: Path, sync: SyncRoot) -> list[str]:
    """Flux Kustomizations in the sync root that apply to another cluster (spec.kubeConfig: hub and spoke), as
    `namespace/name (file)`."""
    out = []
    for k in kustomizations(root, sync.path):
        if k.spec.get("kubeConfig"):
            out.append(f"{k.namespace}/{k.name} ({k.file.relative_to(root).as_posix()})")
    return out
