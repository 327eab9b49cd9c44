"""What a repository's bootstrap installs before Flux runs, for validate's apply-order simulation: the releases of
its helmfiles and the Namespaces its bootstrap templates apply.

Repositories bootstrapped from the Flux Operator's home-ops template install a cluster's first charts with
helmfile (`bootstrap/helmfile.d/00-crds.yaml`, `01-apps.yaml`, `bootstrap/helmfile/crds.yaml`,
`kubernetes/bootstrap/helmfile.yaml`) and only then hand over to Flux: the CRDs of those charts and the namespaces
of those releases exist before any Flux Kustomization is applied. Only files below a folder named `bootstrap` count
(a helmfile of a kind cluster under hack/ installs nothing on production). A release creates its namespace unless
`createNamespace: false` (helmfile's default is true); a helmfile that renders CRDs only (`helmDefaults.args` with
`--include-crds`, or a post-renderer, for `helmfile template | kubectl apply`) creates none. A chart's CRDs count as
its defaults and the release's inline values say (cert-manager's `crds.enabled` is off unless set). Files are Go
templates: template actions are blanked before the YAML is read, a switch a template sets (`installed: {{ ... }}`)
counts as off, and a file that still does not parse is left out.

The same repositories apply a templated `bootstrap/.../resources.yaml.j2` (`minijinja-cli ... | kubectl apply`)
that creates the first namespaces, often in a loop (`{% for namespace in ["flux-system", "rook-ceph"] %}`):
Namespace objects of such Jinja or Go templates (`*.j2`, `*.gotmpl`) are read with loops over literal lists
unrolled.

Pure reads of the repository; no cluster, no helmfile binary."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import loads_all

BOOTSTRAP = "bootstrap"  # the folder name a file must be below to count
NAMES = ("helmfile.yaml", "helmfile.yml", "helmfile.yaml.gotmpl")
FOLDERS = ("helmfile.d", "helmfile")
SUFFIXES = (".yaml", ".yml", ".yaml.gotmpl")
TEMPLATE_SUFFIXES = (".j2", ".jinja", ".jinja2", ".gotmpl")
_ACTION_LINE = re.compile(r"^\s*\{\{-?.*-?\}\}\s*$")
_ACTION = re.compile(r"\{\{-?.*?-?\}\}")
_BLANK = "x"  # what a template action becomes
_FOR = re.compile(r"\{%-?\s*for\s+(\w+)\s+in\s+\[([^\]]*)\]\s*-?%\}(.*?)\{%-?\s*endfor\s*-?%\}", re.S)
_TAG = re.compile(r"\{%.*?%\}|\{#.*?#\}", re.S)


@dataclass(frozen=True)
class Release:
    """One helmfile release: the chart's name (the last segment of `chart:`), where it goes, whether helmfile
    creates that namespace, its inline values, and the file (repository-relative) that declares it. A Namespace a
    bootstrap template applies is one without a chart."""

    name: str
    namespace: str | None
    chart: str
    creates_namespace: bool
    file: str
    values: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def provider(self) -> str:
        if not self.chart:
            return f"bootstrap template {self.file}"
        return f"bootstrap helmfile {self.file} (release {self.name})"


def _walk(root: Path) -> list[tuple[Path, str]]:
    """(path, name) of every file below a `bootstrap` folder, hidden folders left out."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "node_modules")
        here = Path(folder)
        if BOOTSTRAP in here.relative_to(root).parts:
            out += [(here / name, name) for name in sorted(files)]
    return out


def _documents(path: Path, text: str) -> list[dict[str, Any]]:
    lines = [_ACTION.sub(_BLANK, line) for line in text.splitlines() if not _ACTION_LINE.match(line)]
    try:
        return [d for d in loads_all("\n".join(lines), str(path)) if isinstance(d, dict)]
    except (InputError, RecursionError, ValueError):
        return []


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _crds_only(defaults: dict[str, Any]) -> bool:
    args = defaults.get("args")
    return bool(defaults.get("postRenderer")) or (isinstance(args, list) and "--include-crds" in args)


def _on(value: Any, default: bool = True) -> bool:
    """A helmfile switch: a template's result (blanked) is not known to be on."""
    if value is None:
        return default
    return value is True or str(value).strip().lower() == "true"


def _inline_values(item: dict[str, Any]) -> dict[str, Any]:
    """The release's inline values (dicts among `values:`, and `set:` entries), merged in order."""
    out: dict[str, Any] = {}
    values, sets = item.get("values"), item.get("set")
    for entry in values if isinstance(values, list) else []:
        if isinstance(entry, dict):
            out.update(entry)
    for entry in sets if isinstance(sets, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            node = out
            *parents, last = entry["name"].split(".")
            for part in parents:
                node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
            node[last] = entry.get("value")
    return out


def _releases(path: Path, rel: str, text: str) -> list[Release]:
    docs = _documents(path, text)
    defaults: dict[str, Any] = {}
    for doc in docs:
        found = doc.get("helmDefaults")
        defaults.update(found if isinstance(found, dict) else {})
    creates = _on(defaults.get("createNamespace")) and not _crds_only(defaults)
    out = []
    for doc in docs:
        items = doc.get("releases")
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or not _on(item.get("installed")) or not isinstance(item.get("name"), str):
                continue
            # a chart a template resolves (or a base's template supplies) is taken to be named as the release, as
            # home-ops repositories name them
            raw = str(item.get("chart") or "").rstrip("/")
            chart = raw.rsplit("/", 1)[-1].split(":")[0] if raw and raw != _BLANK else item["name"]
            ns = item.get("namespace") or doc.get("namespace")
            out.append(Release(item["name"], str(ns) if ns and ns != _BLANK else None, chart,
                               creates and _on(item.get("createNamespace")), rel, _inline_values(item)))
    return out


def _unrolled(text: str) -> str:
    """Jinja `for` loops over literal lists of strings written out, every other tag dropped."""
    def unroll(m: re.Match[str]) -> str:
        items = re.findall(r"[\"']([^\"']*)[\"']", m[2])
        var = re.compile(r"\{\{-?\s*" + re.escape(m[1]) + r"\s*-?\}\}")
        return "".join(var.sub(item, m[3]) for item in items)
    return _TAG.sub("", _FOR.sub(unroll, text))


def _template_namespaces(path: Path, rel: str, text: str) -> list[Release]:
    lines = [line for line in _unrolled(text).splitlines() if "{{" not in line]
    try:
        docs = [d for d in loads_all("\n".join(lines), str(path)) if isinstance(d, dict)]
    except (InputError, RecursionError, ValueError):
        return []
    out = []
    for doc in docs:
        meta = doc.get("metadata")
        if doc.get("kind") == "Namespace" and isinstance(meta, dict) and isinstance(meta.get("name"), str):
            out.append(Release(meta["name"], meta["name"], "", True, rel))
    return out


def releases(root: Path) -> list[Release]:
    """Every release of the bootstrap helmfiles of the repository at `root`, and the Namespaces its bootstrap
    templates apply."""
    out = []
    for path, name in _walk(root):
        helmfile = name in NAMES or (path.parent.name in FOLDERS and name.endswith(SUFFIXES))
        template = name.endswith(TEMPLATE_SUFFIXES)
        if not helmfile and not template:
            continue
        text = _read(path)
        if text is None:
            continue
        rel = path.relative_to(root).as_posix()
        if helmfile and "releases" in text:
            out += _releases(path, rel, text)
        elif template and "kind: Namespace" in text:
            out += _template_namespaces(path, rel, text)
    return out


def for_cluster(found: list[Release], cluster: str, clusters: list[str]) -> list[Release]:
    """The releases that bootstrap the cluster folder `cluster` (repository-relative) among `clusters` (those with
    Flux Kustomizations): a file whose path names a folder that tells the clusters apart (bootstrap/main/helmfile.d
    for kubernetes/main/...) serves the clusters with that folder, any other serves them all."""
    parts = [set(PurePosixPath(c).parts) for c in clusters]
    telling: set[str] = set().union(*parts) - set(parts[0]).intersection(*parts[1:]) if parts else set()
    mine = set(PurePosixPath(cluster).parts)
    out = []
    for release in found:
        named = set(PurePosixPath(release.file).parts[:-1]) & telling
        if not named or named & mine:
            out.append(release)
    return out
