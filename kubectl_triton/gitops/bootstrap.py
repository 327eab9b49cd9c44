"""What a repository's bootstrap installs before Flux runs, for validate's apply-order simulation: the releases of
its helmfiles and the Namespaces its bootstrap templates apply.

Repositories bootstrapped from the Flux Operator's home-ops template install a cluster's first charts with
helmfile (`bootstrap/helmfile.d/00-crds.yaml`, `01-apps.yaml`, `bootstrap/helmfile/crds.yaml`, or a
`helmfile.yaml`) and only then hand over to
Flux: the CRDs of those charts and the namespaces of those releases exist before any Flux Kustomization is applied.
A release creates its namespace unless `createNamespace: false` (helmfile's default is true); a helmfile that
renders CRDs only (`helmDefaults.args` with `--include-crds`, or a post-renderer, for `helmfile template | kubectl
apply`) creates none. Files are Go templates: template actions are blanked before the YAML is read, and a file
that still does not parse is left out.

The same repositories apply a templated `resources.yaml.j2` (`minijinja-cli ... | kubectl apply`) that creates the
first namespaces, often in a loop (`{% for namespace in ["flux-system", "rook-ceph"] %}`): Namespace objects of
Jinja or Go templates (`*.j2`, `*.gotmpl`) are read with such loops over literal lists unrolled.

Pure reads of the repository; no cluster, no helmfile binary."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import loads_all

NAMES = ("helmfile.yaml", "helmfile.yml", "helmfile.yaml.gotmpl")
FOLDERS = ("helmfile.d", "helmfile")
SUFFIXES = (".yaml", ".yml", ".yaml.gotmpl")
_ACTION_LINE = re.compile(r"^\s*\{\{-?.*-?\}\}\s*$")
_ACTION = re.compile(r"\{\{-?.*?-?\}\}")
_BLANK = "x"  # what a template action becomes


@dataclass(frozen=True)
class Release:
    """One helmfile release: the chart's name (the last segment of `chart:`), where it goes, whether helmfile
    creates that namespace, and the file (repository-relative) that declares it. A Namespace a bootstrap template
    applies is one without a chart."""

    name: str
    namespace: str | None
    chart: str
    creates_namespace: bool
    file: str

    @property
    def provider(self) -> str:
        if not self.chart:
            return f"bootstrap template {self.file}"
        return f"bootstrap helmfile {self.file} (release {self.name})"


def _files(root: Path) -> list[Path]:
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "node_modules")
        here = Path(folder)
        for name in sorted(files):
            if name in NAMES or (here.name in FOLDERS and name.endswith(SUFFIXES)):
                out.append(here / name)
    return out


def _documents(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    lines = [_ACTION.sub(_BLANK, line) for line in text.splitlines() if not _ACTION_LINE.match(line)]
    try:
        return [d for d in loads_all("\n".join(lines), str(path)) if isinstance(d, dict)]
    except (InputError, RecursionError, ValueError):
        return []


def _crds_only(defaults: dict[str, Any]) -> bool:
    args = defaults.get("args")
    return bool(defaults.get("postRenderer")) or (isinstance(args, list) and "--include-crds" in args)


def releases(root: Path) -> list[Release]:
    """Every release of every helmfile in the repository at `root` (hidden folders left out), and the Namespaces
    its bootstrap templates apply."""
    out = []
    for path in _files(root):
        rel = path.relative_to(root).as_posix()
        for doc in _documents(path):
            found = doc.get("helmDefaults")
            defaults: dict[str, Any] = found if isinstance(found, dict) else {}
            creates = defaults.get("createNamespace", True) is not False and not _crds_only(defaults)
            for item in doc.get("releases") or []:
                if not isinstance(item, dict) or item.get("installed") is False or not item.get("name"):
                    continue
                # a chart a template resolves (or a base's template supplies) is taken to be named as the release,
                # as home-ops repositories name them
                raw = str(item.get("chart") or "").rstrip("/")
                chart = raw.rsplit("/", 1)[-1].split(":")[0] if raw and raw != _BLANK else str(item["name"])
                ns = item.get("namespace") or doc.get("namespace")
                out.append(Release(str(item["name"]), str(ns) if ns else None, chart,
                                   creates and item.get("createNamespace", True) is not False, rel))
    return out + template_namespaces(root)


_FOR = re.compile(r"\{%-?\s*for\s+(\w+)\s+in\s+\[([^\]]*)\]\s*-?%\}(.*?)\{%-?\s*endfor\s*-?%\}", re.S)
_TAG = re.compile(r"\{%.*?%\}|\{#.*?#\}", re.S)
TEMPLATE_SUFFIXES = (".j2", ".jinja", ".jinja2", ".gotmpl")


def _unrolled(text: str) -> str:
    """Jinja `for` loops over literal lists of strings written out, every other tag dropped."""
    def unroll(m: re.Match[str]) -> str:
        items = re.findall(r"[\"']([^\"']*)[\"']", m[2])
        var = re.compile(r"\{\{-?\s*" + re.escape(m[1]) + r"\s*-?\}\}")
        return "".join(var.sub(item, m[3]) for item in items)
    return _TAG.sub("", _FOR.sub(unroll, text))


def template_namespaces(root: Path) -> list[Release]:
    """The Namespaces (literal names) that the repository's bootstrap templates apply, one Release each."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "node_modules")
        for name in sorted(f for f in files if f.endswith(TEMPLATE_SUFFIXES)):
            path = Path(folder) / name
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if "kind: Namespace" not in text:
                continue
            lines = [line for line in _unrolled(text).splitlines() if "{{" not in line]
            try:
                docs = [d for d in loads_all("\n".join(lines), str(path)) if isinstance(d, dict)]
            except (InputError, RecursionError, ValueError):
                continue
            rel = path.relative_to(root).as_posix()
            for doc in docs:
                meta = doc.get("metadata")
                if doc.get("kind") == "Namespace" and isinstance(meta, dict) and meta.get("name"):
                    out.append(Release(str(meta["name"]), str(meta["name"]), "", True, rel))
    return out


def for_cluster(found: list[Release], cluster: str, clusters: list[str]) -> list[Release]:
    """The releases that bootstrap the cluster folder `cluster` (repository-relative) among `clusters`: a helmfile
    whose path names a folder that tells the clusters apart (bootstrap/main/helmfile.d for kubernetes/main/...)
    serves the clusters with that folder, any other serves them all."""
    parts = [set(PurePosixPath(c).parts) for c in clusters]
    telling: set[str] = set().union(*parts) - set(parts[0]).intersection(*parts[1:]) if parts else set()
    mine = set(PurePosixPath(cluster).parts)
    out = []
    for release in found:
        named = set(PurePosixPath(release.file).parts[:-1]) & telling
        if not named or named & mine:
            out.append(release)
    return out
