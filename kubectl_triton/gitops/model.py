"""The GitOps repository, read once: its layout, overlays, Components, models and clusters with their Flux
objects. Every command builds one `Repository` and hands it to the core; no module composes layout paths itself.

The layout (folder names, Flux wiring) comes from `Layout`, whose defaults are the layout `kubectl triton init`
writes; a repository can name other folders in its layout file (see `Layout.load`)."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import os
import posixpath
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import yaml

from kubectl_triton.compat.catalog import GPU, bundled, register
from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import files_unchanged, load_all, load_all_shared, loads_all
from kubectl_triton.gitops.files import (
    _LISTINGS,
    _RESOLVED,
    KUSTOMIZATION_FILES,
    kustomization_file,
    manifest_files,
    matching_files,
    resolved,
)
from kubectl_triton.gitops.layout import LAYOUT_FILE, LAYOUT_SCHEMA, layout_validator

FLUX_KUSTOMIZATION_API = "kustomize.toolkit.fluxcd.io/"
HELM_RELEASE_API = "helm.toolkit.fluxcd.io/"
SOURCE_API = "source.toolkit.fluxcd.io/"
ENGINE_BUILD_SUFFIX = "-engine-build"
CANARY_SUFFIX = "-canary"
MODEL_COMPONENT = "model"
ROUTE_DIR = "route"
MODEL_METADATA = "model.yaml"
ENGINES_DIR = "engines"
CONFIG = "config.pbtxt"


SOURCE_KINDS = ("GitRepository", "OCIRepository", "Bucket", "ExternalArtifact")

# The monitoring stack: `install` (the repository's kube-prometheus-stack HelmRelease) or `existing` (a Prometheus
# the cluster already runs, described by the layout file's `monitoring:` section).
MONITORING_MODES = ("install", "existing")
MONITOR_KINDS = {"ServiceMonitor": "serviceMonitorSelector", "PodMonitor": "podMonitorSelector",
                 "PrometheusRule": "ruleSelector"}  # kind -> the Prometheus field (and layout key) selecting it
INSTALL_RELEASE = "kube-prometheus-stack"  # the Helm release name of the installed stack (clusters/*/infrastructure)
DEFAULT_SELECTOR: dict[str, str] = {"release": INSTALL_RELEASE}  # kube-prometheus-stack's default selection
INSTALL_URL = "http://prometheus-operated.monitoring.svc:9090"  # the operator's Service of the installed stack


_LAYOUTS: dict[tuple[Path, bytes], Layout] = {}  # layout file (path, content digest) -> what it says

@dataclass(frozen=True)
class Monitoring:
    """The layout file's `monitoring:` section: which Prometheus selects the repository's monitors and rules.
    In `existing` mode `selectors` maps each monitor kind to the labels (matchLabels) its Prometheus selects by."""

    mode: str = "install"
    url: str = INSTALL_URL
    namespace: str = "monitoring"  # where the Prometheus runs; base/monitoring's rules and dashboard go there
    selectors: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = tuple(
        (kind, tuple(DEFAULT_SELECTOR.items())) for kind in MONITOR_KINDS)
    declared: bool = False  # the layout file has the section

    @property
    def existing(self) -> bool:
        return self.mode == "existing"

    def labels(self, kind: str) -> dict[str, str]:
        """The labels a monitor or rule of `kind` must carry to be selected."""
        return dict(dict(self.selectors).get(kind, tuple(DEFAULT_SELECTOR.items())))

    @classmethod
    def existing_stack(cls, url: str, selectors: dict[str, dict[str, str]], namespace: str | None = None
                       ) -> Monitoring:
        """An existing Prometheus at `url` selecting by `selectors` (kind -> labels; a kind left out: the default)."""
        return cls(mode="existing", url=url, namespace=namespace or url_namespace(url) or "monitoring",
                   selectors=tuple((kind, tuple(sorted((selectors.get(kind, DEFAULT_SELECTOR)).items())))
                                   for kind in MONITOR_KINDS), declared=True)

    @classmethod
    def from_section(cls, section: dict[str, Any]) -> Monitoring:
        """The `monitoring:` section (already schema-checked) as a Monitoring."""
        mode = str(section.get("mode") or "install")
        extra = sorted(k for k in section if k != "mode")
        if mode == "install":
            if extra:
                raise InputError(f"{LAYOUT_FILE}: monitoring: {', '.join(extra)} describe an existing Prometheus; "
                                 "with mode install the repository's kube-prometheus-stack HelmRelease decides",
                                 hint="set `mode: existing`, or drop those keys")
            return cls(declared=True)
        url = str(section.get("prometheusUrl") or INSTALL_URL)
        selectors = {kind: {str(k): str(v) for k, v in section[key].items()}
                     for kind, key in MONITOR_KINDS.items() if isinstance(section.get(key), dict)}
        return cls.existing_stack(url, selectors, str(section["namespace"]) if section.get("namespace") else None)

    def section(self) -> dict[str, Any]:
        """The layout file's `monitoring:` section for this (every value written out in existing mode)."""
        if not self.existing:
            return {"mode": "install"}
        out: dict[str, Any] = {"mode": "existing", "prometheusUrl": self.url, "namespace": self.namespace}
        for kind, key in MONITOR_KINDS.items():
            out[key] = self.labels(kind)
        return out


def url_namespace(url: str) -> str | None:
    """The namespace in a cluster Service URL (http://NAME.NAMESPACE.svc[.cluster.local][:PORT]), else None."""
    host = (urlsplit(url).hostname or "").split(".")
    return host[1] if len(host) >= 3 and host[2] == "svc" else None


@dataclass(frozen=True)
class Layout:
    """Where things live, relative to the repository root, and the names scaffolded Flux objects use."""

    bases: str = "base"
    gpus: str = "overlays/gpus"
    overlays: str = "overlays"
    models: str = "models"
    clusters: str = "clusters"
    namespace: str = "triton"
    source_kind: str = "GitRepository"
    source_name: str = "flux-system"
    depends_on: tuple[str, ...] = ("infrastructure", "platform")
    platform: str = "platform"  # the Flux Kustomization applying <bases>/platform
    monitoring: str = "monitoring"  # the Flux Kustomization applying <bases>/monitoring
    source_namespace: str = "flux-system"
    artifact_root: str = ""  # the folder the own source's artifact is pushed from (flux.artifactRoot); "": the top
    gpu_types: tuple[GPU, ...] = ()  # the repository's own GPU types (`gpus:`), beyond the bundled catalog
    prometheus: Monitoring = Monitoring()  # the `monitoring:` section: installed or existing Prometheus
    file: Path | None = None  # the layout file it was read from; None: defaults

    @classmethod
    def load(cls, root: Path, *, tolerant: bool = False) -> Layout:
        """The layout file over the defaults (defaults when there is no file); the file is checked against
        the JSON Schema shipped in the package (data/kubectl-triton.schema.json). A malformed file raises
        InputError, or with `tolerant` (validate, which reports it as a finding) gives the defaults."""
        path = root / LAYOUT_FILE
        if not path.is_file():
            return cls()
        try:
            try:
                key = (path, hashlib.blake2b(path.read_bytes(), digest_size=16).digest())
            except OSError as err:
                raise InputError(f"{LAYOUT_FILE}: cannot read: {err.strerror or err}") from None
            if key not in _LAYOUTS:  # read once per content: every check of a validate run asks for it
                _LAYOUTS[key] = cls._read(path)
            return _LAYOUTS[key]
        except InputError:
            if tolerant:
                return cls(file=path)
            raise

    @classmethod
    def _read(cls, path: Path) -> Layout:
        docs = load_all(path)
        doc = (docs[0] if docs else None) or {}  # an empty file: the defaults
        if not isinstance(doc, dict):
            raise InputError(f"{LAYOUT_FILE}: expected a mapping at the top level")
        _check_schema(doc)
        paths = _section(doc, "paths")
        flux = _section(doc, "flux")
        source = _mapping(flux.get("sourceRef"))
        values: dict[str, Any] = {k: str(paths[k]).strip("/") for k in ("bases", "gpus", "overlays", "models",
                                                                         "clusters") if paths.get(k)}
        if doc.get("namespace"):
            values["namespace"] = str(doc["namespace"])
        if source.get("kind"):
            values["source_kind"] = str(source["kind"])
        if source.get("name"):
            values["source_name"] = str(source["name"])
        if source.get("namespace"):
            values["source_namespace"] = str(source["namespace"])
        if isinstance(flux.get("dependsOn"), list):
            values["depends_on"] = tuple(str(d) for d in flux["dependsOn"])
        for key in ("platform", "monitoring"):
            if flux.get(key):
                values[key] = str(flux[key])
        if flux.get("artifactRoot"):
            if values.get("source_kind") not in ("OCIRepository", "Bucket"):
                raise InputError(f"{LAYOUT_FILE}: flux.artifactRoot needs flux.sourceRef of kind OCIRepository or "
                                 "Bucket (a GitRepository's artifact is the whole repository)")
            values["artifact_root"] = posixpath.normpath(str(flux["artifactRoot"]).strip("/"))
        values["gpu_types"] = tuple(_gpu_type(k, v) for k, v in _section(doc, "gpus").items())
        if "monitoring" in doc:
            values["prometheus"] = Monitoring.from_section(_section(doc, "monitoring"))
        return cls(**values, file=path)

    @property
    def source(self) -> str:
        """KIND/NAME of the repository's own Flux source."""
        return f"{self.source_kind}/{self.source_name}"

    def flux_path(self, folder: str) -> str:
        """A repository-relative folder as spec.path of a Kustomization of the own source (relative to the
        artifact root)."""
        inside = posixpath.relpath(folder, self.artifact_root) if self.artifact_root else folder
        if inside == ".." or inside.startswith("../"):
            raise InputError(f"{folder}: outside {self.artifact_root}/, the folder this repository's artifact is "
                             f"pushed from ({LAYOUT_FILE} flux.artifactRoot): Flux would not find it",
                             hint=f"give it a path inside {self.artifact_root}/ in {LAYOUT_FILE} (paths:)")
        return "./" + inside

    def is_own_source(self, kind: str, name: str, namespace: str) -> bool:
        """Is sourceRef (kind, name, namespace) this repository's own source (its spec.path lies here)?"""
        return (kind, name, namespace) == (self.source_kind, self.source_name, self.source_namespace)

    # Paths of things that may not exist yet (what add-model, canary and init write), relative to the root.
    def model_dir(self, model: str) -> str:
        return f"{self.models}/{model}"

    def overlay_dir(self, model: str, variant: str | None = None) -> str:
        return f"{self.overlays}/{model}" + (f"/{variant}" if variant else "")

    def gpu_component(self, gpu: str) -> str:
        return f"{self.gpus}/{gpu}"

    def cluster_dir(self, cluster: str) -> str:
        return f"{self.clusters}/{cluster}"

    def engines_dir(self, model: str, gpu: str | None = None) -> str:
        return f"{self.models}/{model}/{ENGINES_DIR}" + (f"/{gpu}" if gpu else "")

    def base(self, name: str) -> str:
        """A Triton base (`triton`, `engine-build`, `triton-multinode`, `endpoint-picker`, `platform`)."""
        return f"{self.bases}/{name}"

    def shared_component(self, name: str) -> str:
        """A Component every model may include (`artifacts/s3`, `autoscaling/keda`), beside the GPU types."""
        return f"{self.overlays}/{name}"

    def cluster_models_dir(self, cluster: str) -> str:
        """The folder of a cluster's per-model Flux Kustomizations (and their kustomization.yaml)."""
        return f"{self.clusters}/{cluster}/models"

    @staticmethod
    def reference(from_dir: str, to: str) -> str:
        """`to` as a kustomization in `from_dir` names it (a relative path; both relative to the root)."""
        return posixpath.relpath(to, from_dir)


def _check_schema(doc: dict[str, Any]) -> None:
    """One InputError naming the first place where `doc` breaks the layout file's JSON Schema."""
    import jsonschema

    error = jsonschema.exceptions.best_match(layout_validator().iter_errors(doc))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise InputError(f"{LAYOUT_FILE}: {where}: {error.message}",
                         hint=f"the layout file's keys are described in kubectl_triton/data/{LAYOUT_SCHEMA}")


def _gpu_type(key: str, entry: dict[str, Any]) -> GPU:
    """A `gpus:` entry of the layout file as a catalog GPU; FP8/FP4 flags must agree with the compute capability
    (the compat checks derive precision support from it). An entry of a bundled type that gives only
    `gpusPerNode` sets the node size of this repository's clusters for that type."""
    base = bundled().get(key)
    if base is not None and set(entry) == {"gpusPerNode"}:
        count = int(entry["gpusPerNode"])
        return replace(base, gpus_per_node=count, max_gpus_per_node=count,
                       max_source=f"{LAYOUT_FILE} gpus/{key}/gpusPerNode")
    missing = [k for k in ("product", "computeCapability", "memoryMiB") if k not in entry]
    if missing:
        known = " (a bundled type: give only gpusPerNode to set its node size)" if base is not None else ""
        raise InputError(f"{LAYOUT_FILE}: gpus/{key}: '{missing[0]}' is a required property{known}")
    cc = str(entry["computeCapability"])
    major, minor = (int(x) for x in cc.split("."))
    for flag, since in (("fp8", (8, 9)), ("fp4", (10, 0))):
        if flag in entry and bool(entry[flag]) != ((major, minor) >= since):
            raise InputError(f"{LAYOUT_FILE}: gpus/{key}/{flag}: {str(entry[flag]).lower()} disagrees with "
                             f"computeCapability {cc} ({flag.upper()} needs {since[0]}.{since[1]} or later)")
    product = str(entry["product"])
    return GPU(key=key, gfd_products=(product,), smi_names=(product.replace("-", " "),), compute_capability=cc,
               memory_mib=int(entry["memoryMiB"]), family=str(entry.get("family") or "unknown"),
               name=str(entry.get("name") or product.replace("-", " ")),
               gpus_per_node=int(entry["gpusPerNode"]) if entry.get("gpusPerNode") else None,
               max_gpus_per_node=int(entry["gpusPerNode"]) if entry.get("gpusPerNode") else None,
               max_source=f"{LAYOUT_FILE} gpus/{key}/gpusPerNode" if entry.get("gpusPerNode") else "")


def _section(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{LAYOUT_FILE}: `{key}` must be a mapping")
    return value


@dataclass(frozen=True)
class FluxObject:
    """A Flux object declared in a cluster folder (Kustomization, HelmRelease or a source)."""

    kind: str
    name: str
    namespace: str
    file: Path
    obj: dict[str, Any]

    @property
    def spec(self) -> dict[str, Any]:
        spec = self.obj.get("spec")
        return spec if isinstance(spec, dict) else {}


@dataclass(frozen=True)
class FluxKustomization(FluxObject):
    """A Flux Kustomization: what it applies (`path`, from its `sourceRef`) and what it waits for.

    `path` is the folder of this repository it applies (spec.path, relative to the artifact root of an
    OCIRepository pushed from a sub-folder: see Repository.artifact_root). Read from a render (validate), `obj` is
    the object as Flux applies it (the kustomization's namespace, patches and the applying Kustomization's postBuild
    variables in it), `parent` names the Kustomization whose path declares it (None: the cluster folder's own) and
    `variables` are its postBuild variables known here (None: no postBuild; `variables_known` False when a source
    of them is not in the repository: a Secret, or a ConfigMap no folder of the cluster declares)."""

    path: str = "./"
    parent: str | None = None
    variables: tuple[tuple[str, str], ...] | None = None
    variables_known: bool = True

    @property
    def build_fields(self) -> str:
        """What kustomize-controller writes into the kustomization of its path (targetNamespace, namePrefix,
        nameSuffix, patches, components, images, buildMetadata), as canonical JSON; "" when nothing."""
        spec = self.spec
        fields = {k: spec[k] for k in FLUX_BUILD_FIELDS if spec.get(k) not in (None, [], {})
                  or (k in ("targetNamespace", "namePrefix", "nameSuffix") and spec.get(k) == "")}
        if "components" not in fields:
            fields.pop("ignoreMissingComponents", None)
        return json.dumps(fields, sort_keys=True, default=str) if fields else ""

    @property
    def depends_on(self) -> list[tuple[str, str]]:
        """(namespace, name) of each well-formed dependsOn entry."""
        deps = self.spec.get("dependsOn")
        return [(str(d.get("namespace", self.namespace)), str(d.get("name"))) for d in deps
                if isinstance(d, dict)] if isinstance(deps, list) else []

    @property
    def source_ref(self) -> tuple[str, str, str]:
        """(kind, name, namespace) of spec.sourceRef."""
        raw = self.spec.get("sourceRef")
        ref: dict[str, Any] = raw if isinstance(raw, dict) else {}
        return (str(ref.get("kind", "")), str(ref.get("name", "")), str(ref.get("namespace", self.namespace)))


@dataclass(frozen=True)
class Cluster:
    """A cluster folder: the Flux objects in its YAML files (see Repository.clusters). `nested_elsewhere`: the
    Kustomizations of other sources that the paths' renders declare (what they apply is another artifact's: they
    are known by name, for dependsOn, and left to the Kustomization applying them)."""

    name: str
    path: Path
    flux: tuple[FluxObject, ...]
    nested_elsewhere: tuple[FluxKustomization, ...] = ()

    @property
    def kustomizations(self) -> list[FluxKustomization]:
        return [o for o in self.flux if isinstance(o, FluxKustomization)]

    @property
    def helm_releases(self) -> list[FluxObject]:
        return [o for o in self.flux if o.kind == "HelmRelease"]


@dataclass(frozen=True)
class Overlay:
    """A buildable kustomization under the overlays folder. `model` and `variant` come from its place
    (`<overlays>/<model>/<variant>`); a GPU Component folder is no overlay."""

    path: Path
    rel: str
    model: str | None
    variant: str | None

    @property
    def is_engine_build(self) -> bool:
        return bool(self.variant and self.variant.endswith(ENGINE_BUILD_SUFFIX))

    @property
    def is_canary(self) -> bool:
        return bool(self.variant and self.variant.endswith(CANARY_SUFFIX))


@dataclass(frozen=True)
class Model:
    """A model folder: its metadata file and the Triton models (sub-folders holding config.pbtxt)."""

    name: str
    path: Path
    triton_models: tuple[str, ...]

    @property
    def metadata_file(self) -> Path:
        return self.path / MODEL_METADATA

    def config_file(self, triton_model: str) -> Path:
        return self.path / triton_model / CONFIG


_SESSION: contextvars.ContextVar[dict[tuple[Path, bool, int], Repository] | None] = contextvars.ContextVar(
    "repository_session", default=None)


@dataclass
class Repository:
    """The repository at `root`, read on first use of each part and then kept (one command, one read)."""

    root: Path
    layout: Layout = field(default_factory=Layout)
    tolerant: bool = False  # malformed files are skipped (validate reports them) instead of raising InputError
    renderer: FluxRenderer | None = None  # set: Flux objects are read from renders (see flux_rendering)

    @classmethod
    def at(cls, root: Path, *, tolerant: bool = False) -> Repository:
        """The repository whose root is `root` (its layout file read, if any). With `tolerant`, malformed
        kustomization and Flux files are skipped and a malformed layout file gives the default layout
        (validate reports each as a finding). Within `flux_rendering`, its Flux objects are read from renders."""
        root = resolved(root)
        layout = Layout.load(root, tolerant=tolerant)
        register(layout.gpu_types)  # the repository's own GPU types join the catalog for every lookup
        renderer = _RENDERER.get()
        session = _SESSION.get()
        if session is not None:
            key = (root, tolerant, id(renderer) if renderer is not None else 0)
            found = session.get(key)
            if found is None or found.layout is not layout:
                found = session[key] = cls(root, layout, tolerant, renderer)
            return found
        return cls(root, layout, tolerant, renderer)

    @staticmethod
    @contextlib.contextmanager
    def session() -> Iterator[None]:
        """Within it, `at` gives every caller the same Repository per root, paths resolve once and YAML files are
        read once: one read for all the checks of a validate run (the files must not change meanwhile)."""
        token, paths, listings = _SESSION.set({}), _RESOLVED.set({}), _LISTINGS.set({})
        try:
            with files_unchanged():
                yield
        finally:
            _SESSION.reset(token)
            _RESOLVED.reset(paths)
            _LISTINGS.reset(listings)

    @classmethod
    def find(cls, start: Path | None = None, *, tolerant: bool = False) -> Repository:
        """The repository holding `start` (default: the working directory): the nearest folder upwards with a
        layout file, else one with an overlays/ folder (the default layout). `tolerant` as for `at`."""
        here = (start or Path.cwd()).resolve()
        if not here.is_dir():
            raise InputError(f"{start}: not a directory")
        for candidate in (here, *here.parents):
            if (candidate / LAYOUT_FILE).is_file():
                return cls.at(candidate, tolerant=tolerant)
        for candidate in (here, *here.parents):
            if (candidate / Layout.overlays).is_dir():
                return cls.at(candidate, tolerant=tolerant)
        raise InputError(f"{here}: no {LAYOUT_FILE} or {Layout.overlays}/ folder here or in any parent",
                         hint="run inside a kubectl-triton GitOps repository or pass its path")

    def path(self, rel: str) -> Path:
        return self.root / rel

    def relative(self, path: Path) -> str:
        return relative(self.root, path)

    @cached_property
    def _kustomizations(self) -> list[tuple[Path, str]]:
        return list(_kustomizations(self.root / self.layout.overlays, self.tolerant))

    @cached_property
    def overlays(self) -> list[Overlay]:
        """Every buildable kustomization under the overlays folder (Components excluded), sorted by path."""
        return self._overlays(self._kustomizations)

    def model_overlays(self, model: str) -> list[Overlay]:
        """The overlays of one model (`<overlays>/<model>/…`), reading only that folder when the whole overlays
        folder has not been read yet."""
        if "overlays" in self.__dict__:
            return [o for o in self.overlays if o.model == model]
        return self._overlays(_kustomizations(self.root / self.layout.overlays / model, self.tolerant))

    def _overlays(self, kustomizations: Iterable[tuple[Path, str]]) -> list[Overlay]:
        top = self.root / self.layout.overlays
        out = []
        for path, kind in kustomizations:
            if kind != "Kustomization":
                continue
            parts = path.relative_to(top).parts
            out.append(Overlay(path, self.relative(path), parts[0] if parts else None,
                               "/".join(parts[1:]) or None))
        return out

    @cached_property
    def components(self) -> list[Path]:
        """Every Kustomize Component under the overlays folder (GPU types, model components)."""
        return [path for path, kind in self._kustomizations if kind == "Component"]

    @cached_property
    def gpu_components(self) -> dict[str, Path]:
        """GPU type key -> its Component folder."""
        top = self.root / self.layout.gpus
        if not top.is_dir():
            return {}
        return {p.name: p for p in sorted(top.iterdir()) if kustomization_file(p) is not None}

    @cached_property
    def _cluster_files(self) -> dict[Path, tuple[FluxObject, ...]]:
        """Cluster folder -> the Flux objects its YAML files declare (as written: spec.path not yet resolved
        against the artifact root)."""
        top = self.root / self.layout.clusters
        folders = sorted(p for p in top.iterdir() if p.is_dir()) if top.is_dir() else []
        return {p: tuple(_flux_objects(p, self.tolerant)) for p in folders}

    @cached_property
    def clusters(self) -> list[Cluster]:
        """Cluster folders, each with its Flux objects: those its YAML files declare or, within
        `flux_rendering`, those Flux applies: the folder's render (as Flux's sync of it builds it) and, followed
        through every Kustomization of this repository's source, the renders of their paths (a Kustomization that
        only exists once another's path is built included), falling back to the files where a folder does not
        render."""
        raw = {p: tuple(self._applied(o) for o in objs) for p, objs in self._cluster_files.items()}
        if self.renderer is None:
            return [Cluster(p.name, p, objs) for p, objs in raw.items()]
        tree = _FluxTree(self, self.renderer)
        out = []
        for p, objs in raw.items():
            found = tree.cluster(p, objs)
            elsewhere = tuple(o for o in found if isinstance(o, FluxKustomization) and o.parent is not None
                              and not tree.own(o))
            apart = {id(o) for o in elsewhere}
            out.append(Cluster(p.name, p, tuple(o for o in found if id(o) not in apart), elsewhere))
        return out

    @cached_property
    def artifact_root(self) -> str:
        """The folder (relative to the root; "" for the root itself) that this repository's own Flux source
        holds, which spec.path is relative to: flux.artifactRoot of the layout file, else inferred. A GitRepository
        holds the whole repository. An OCIRepository or Bucket holds what was pushed (`flux push artifact
        --path=./kubernetes`): of the folders above the cluster folders, the one under which most of the source's
        spec.paths exist (the root on a tie)."""
        layout = self.layout
        if layout.artifact_root:
            return layout.artifact_root
        if layout.source_kind not in ("OCIRepository", "Bucket"):
            return ""
        paths = [o.path for objs in self._cluster_files.values() for o in objs if isinstance(o, FluxKustomization)
                 and layout.is_own_source(*o.source_ref) and "${" not in o.path]
        candidates: list[str] = [""]
        for folder in self._cluster_files:
            rel = Path(relative(self.root, folder)).parts
            candidates += ["/".join(rel[:n]) for n in range(len(rel) - 1, 0, -1)]
        best, score = "", -1
        for candidate in dict.fromkeys(candidates):
            found = sum((self.root / candidate / _inside(p)).is_dir() for p in paths)
            if found > score:
                best, score = candidate, found
        return best

    def _applied(self, obj: FluxObject) -> FluxObject:
        """A Flux Kustomization of this repository's source with `path` the folder it applies."""
        if not isinstance(obj, FluxKustomization) or not self.layout.is_own_source(*obj.source_ref):
            return obj
        path = self.applied_path(obj.path)
        return obj if path == obj.path else replace(obj, path=path)

    def applied_path(self, spec_path: str) -> str:
        """spec.path of a Kustomization of this repository's source as a path from the root: below the artifact
        root, a leading / being that root (as kustomize-controller joins them)."""
        if not self.artifact_root and not spec_path.startswith("/"):
            return spec_path
        inside = _inside(spec_path)
        return "./" + posixpath.normpath(posixpath.join(self.artifact_root, inside)) if inside or \
            self.artifact_root else "./"

    def cluster(self, name: str) -> Cluster | None:
        return next((c for c in self.clusters if c.name == name), None)

    @property
    def flux_kustomizations(self) -> list[FluxKustomization]:
        return [k for c in self.clusters for k in c.kustomizations]

    @cached_property
    def models(self) -> list[Model]:
        """Model folders (each holding Triton model folders and, usually, model.yaml)."""
        top = self.root / self.layout.models
        if not top.is_dir():
            return []
        out = []
        for p in sorted(top.iterdir()):
            if p.is_dir() and not p.name.startswith("."):
                tms = tuple(sorted(c.parent.name for c in p.glob(f"*/{CONFIG}") if c.is_file()))
                out.append(Model(p.name, p, tms))
        return out

    def model(self, name: str) -> Model | None:
        return next((m for m in self.models if m.name == name), None)

    def owners_of(self, triton_model: str) -> list[Model]:
        """Models whose folder holds Triton model `triton_model`."""
        return [m for m in self.models if triton_model in m.triton_models]


def relative(root: Path, path: Path) -> str:
    """`path` relative to `root` when inside it, for messages and JSON output."""
    top = _resolved(root)
    if path.is_absolute():  # most paths are already under the resolved root: no filesystem call needed
        lexical = os.path.normpath(path)
        if lexical.startswith(top + os.sep):
            return lexical[len(top) + 1:]
    try:
        return str(path.resolve().relative_to(top))
    except ValueError:
        return str(path)


@functools.lru_cache(maxsize=64)
def _resolved(root: Path) -> str:
    return str(root.resolve())


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _kind(kfile: Path, tolerant: bool = False) -> str:
    """The file's kind. A malformed file raises InputError, or with `tolerant` counts as a Kustomization (its
    build then fails and says why)."""
    try:
        docs = load_all_shared(kfile) if tolerant else load_all(kfile)
    except InputError:
        if not tolerant:
            raise
        return "Kustomization"
    doc = docs[0] if docs else None
    return str(doc.get("kind", "Kustomization")) if isinstance(doc, dict) else "Kustomization"


def _kustomizations(top: Path, tolerant: bool = False) -> Iterator[tuple[Path, str]]:
    for kfile in matching_files(top, "kustomization.yaml"):
        yield kfile.parent, _kind(kfile, tolerant)


def _flux_objects(cluster_dir: Path, tolerant: bool = False) -> Iterator[FluxObject]:
    """The Flux objects of every YAML file below `cluster_dir`, as written (Repository.clusters reads them from
    the folder's render within `flux_rendering`, these where a folder does not render). A file that does not parse
    raises InputError unless `tolerant`, or unless it is no manifest (a generator's data file, whatever it holds)."""
    manifests: set[Path] | None = None
    for f in matching_files(cluster_dir, "*.y*ml"):
        try:
            docs = load_all_shared(f) if tolerant else load_all(f)
        except InputError:
            if tolerant:
                continue
            manifests = set(manifest_files(cluster_dir)) if manifests is None else manifests
            if f in manifests:
                raise
            continue
        for doc in docs:
            found = _flux_object(doc, f)
            if found is not None:
                yield found


def _flux_object(doc: Any, file: Path, parent: str | None = None) -> FluxObject | None:
    """`doc` as a FluxObject declared in `file`, None when it is no Flux Kustomization, HelmRelease or source."""
    if not isinstance(doc, dict):
        return None
    api, kind = str(doc.get("apiVersion", "")), str(doc.get("kind", ""))
    meta = _mapping(doc.get("metadata"))
    name, ns = str(meta.get("name", "")), str(meta.get("namespace") or "flux-system")
    if kind == "Kustomization" and api.startswith(FLUX_KUSTOMIZATION_API):
        spec = _mapping(doc.get("spec"))
        return FluxKustomization(kind, name, ns, file, doc, path=str(spec.get("path") or "./"), parent=parent)
    if (kind == "HelmRelease" and api.startswith(HELM_RELEASE_API)) or api.startswith(SOURCE_API):
        return FluxObject(kind, name, ns, file, doc)
    return None


def _inside(spec_path: str) -> str:
    """spec.path inside its artifact ("" for its root), as kustomize-controller joins it (securejoin: a leading /
    is the artifact's root, `..` stops there)."""
    return posixpath.normpath(posixpath.join("/", spec_path)).lstrip("/")


# ---- Flux Kustomizations as Flux builds them (validate) ---------------------------------------------------------

# Fields of a Flux Kustomization's spec that kustomize-controller writes into its path's kustomization.
FLUX_BUILD_FIELDS = ("targetNamespace", "namePrefix", "nameSuffix", "patches", "components", "ignoreMissingComponents",
                     "patchesStrategicMerge", "patchesJson6902", "images", "buildMetadata")
SUBSTITUTE_KEY = "kustomize.toolkit.fluxcd.io/substitute"  # label or annotation; `disabled`: not substituted
MAX_FLUX_BUILDS = 4000  # per cluster folder: a bound on a tree of Kustomizations that keeps producing new builds


@dataclass(frozen=True)
class FluxBuild:
    """What kustomize-controller builds for a Flux Kustomization: the folder its path names (resolved) with
    `fields` (FluxKustomization.build_fields) written into its kustomization, or into the one Flux generates for
    a folder without it. `FluxBuild(folder)`: the folder as it is (or its generated kustomization)."""

    folder: Path
    fields: str = ""

    @property
    def spec(self) -> dict[str, Any]:
        loaded = json.loads(self.fields) if self.fields else {}
        return loaded if isinstance(loaded, dict) else {}


@dataclass(frozen=True)
class FluxRender:
    """A FluxBuild's objects (None: kustomize fails on it) and the files its build reads (resolved), where the
    objects are declared."""

    docs: list[Any] | None
    files: tuple[Path, ...] = ()


class FluxRenderer(Protocol):
    """Builds FluxBuilds (validate's runs kustomize once per build and keeps the results for its checks)."""

    def render(self, builds: Sequence[FluxBuild]) -> list[FluxRender]: ...


_RENDERER: contextvars.ContextVar[FluxRenderer | None] = contextvars.ContextVar("flux_renderer", default=None)


@contextlib.contextmanager
def flux_rendering(renderer: FluxRenderer) -> Iterator[None]:
    """Within it, Repository.at reads each cluster folder's Flux objects from renders made by `renderer`."""
    token = _RENDERER.set(renderer)
    try:
        yield
    finally:
        _RENDERER.reset(token)


def flux_build(root: Path, ks: FluxKustomization) -> FluxBuild | None:
    """What Flux builds for `ks` (a Kustomization of this repository's source), None when its path is no folder
    of the repository (or still holds a postBuild variable)."""
    if "${" in ks.path:
        return None
    folder = resolved(root / ks.path)
    top = resolved(root)
    if (folder != top and top not in folder.parents) or not folder.is_dir():
        return None
    return FluxBuild(folder, ks.build_fields)


# Flux's envsubst (fluxcd/pkg/envsubst, a fork of drone/envsubst): `$$` is a literal `$` (so `$${x}` stays
# `${x}`), `${x}` the value of x, `${x:=d}`/`${x:-d}` d when x is unset or empty, `${x=d}`/`${x-d}` d when unset.
_EXPRESSION = re.compile(r"\$\$|\$\{([^{}$]*)\}")
_NAME = re.compile(r"[A-Za-z0-9_]+")


def envsubst(text: str, values: dict[str, str]) -> tuple[str, set[str]]:
    """`text` with postBuild variables replaced as Flux does, and the names it could not replace (not in
    `values`, no default; or an expression Flux evaluates with a bash function, left as written)."""
    unknown: set[str] = set()

    def one(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return "$"
        body = m.group(1)
        name = _NAME.match(body)
        if name is None:
            unknown.add(body)
            return m.group(0)
        var, rest = name.group(0), body[name.end():]
        if not rest:
            if var in values:
                return values[var]
            unknown.add(var)
            return m.group(0)
        for op in (":=", ":-", "=", "-"):
            if rest.startswith(op):
                value = values.get(var)
                if value is not None and (value or op in ("=", "-")):
                    return value
                return rest[len(op):]  # unset here: a variable from a source not in the repository may set it
        unknown.add(var)
        return m.group(0)

    return _EXPRESSION.sub(one, text), unknown


def substitution_disabled(obj: dict[str, Any]) -> bool:
    meta = _mapping(obj.get("metadata"))
    return any(_mapping(meta.get(k)).get(SUBSTITUTE_KEY) == "disabled" for k in ("labels", "annotations"))


def substitute_objects(docs: list[Any], variables: tuple[tuple[str, str], ...] | None, known: bool = True
                       ) -> tuple[list[Any], set[str]]:
    """The objects of a build as Flux applies them with postBuild `variables` (None: no postBuild, nothing
    substituted): each object's YAML substituted (envsubst) and read again, unless labelled or annotated
    kustomize.toolkit.fluxcd.io/substitute: disabled; Flux substitutes only when it has variables (`known` False:
    some source of them is not in the repository, so it has). Returns them and the variables left unknown."""
    values = dict(variables or ())
    if variables is None or (not values and known):
        return docs, set()
    out: list[Any] = []
    unknown: set[str] = set()
    for doc in docs:
        if not isinstance(doc, dict) or substitution_disabled(doc) or "$" not in json.dumps(doc, default=str):
            out.append(doc)
            continue
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1 << 30)  # no line folded
        new, missing = envsubst(text, values)
        unknown |= missing
        if new == text:
            out.append(doc)
            continue
        try:
            again = loads_all(new)
        except InputError:  # a value that breaks the YAML: Flux fails on it too; judged as written
            out.append(doc)
            continue
        out.extend(again[:1] if again else [doc])
    return out, unknown


def _configmaps(docs: list[Any], namespace: str | None) -> dict[tuple[str, str], dict[str, str]]:
    """The ConfigMaps among `docs` (their namespace, else `namespace`): (namespace, name) -> data."""
    out = {}
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap" and doc.get("apiVersion") == "v1":
            meta = _mapping(doc.get("metadata"))
            data = _mapping(doc.get("data"))
            out[(str(meta.get("namespace") or namespace or "default"), str(meta.get("name")))] = {
                str(k): str(v).replace("\n", "") for k, v in data.items()}
    return out


def _variables(ks: FluxKustomization, configmaps: dict[tuple[str, str], dict[str, str]]
               ) -> tuple[tuple[tuple[str, str], ...] | None, bool]:
    """The postBuild variables of `ks` known in this cluster (ConfigMaps of its renders, in the Kustomization's
    namespace, or the only one of that name) and whether every source of them was found (kustomize-controller:
    substituteFrom in order, spec.postBuild.substitute last, newlines removed)."""
    post = ks.spec.get("postBuild")
    if not isinstance(post, dict):
        return None, True
    values: dict[str, str] = {}
    known = True
    refs = post.get("substituteFrom")
    for ref in refs if isinstance(refs, list) else ():  # another shape is a SchemaInvalid finding of its own
        if not isinstance(ref, dict):
            continue
        name = str(ref.get("name"))
        data = None
        if ref.get("kind") == "ConfigMap":
            data = configmaps.get((ks.namespace, name))
            if data is None:
                named = [d for (_, n), d in configmaps.items() if n == name]
                data = named[0] if len(named) == 1 else None
        if data is None:
            known = False  # a Secret (never read here) or a ConfigMap created elsewhere
            continue
        values.update(data)
    for k, v in _mapping(post.get("substitute")).items():
        values[str(k)] = str(v).replace("\n", "")
    return tuple(sorted(values.items())), known


class _FluxTree:
    """One cluster folder's Flux objects as Flux applies them: the folder's render, then, through every
    Kustomization of this repository's own source, its path's render (with what Flux adds to the build and its
    postBuild variables), each object attributed to the file that declares it."""

    def __init__(self, repository: Repository, renderer: FluxRenderer) -> None:
        self.repository = repository
        self.renderer = renderer
        self.index: dict[tuple[Path, ...], dict[tuple[str, str], Path]] = {}

    def cluster(self, folder: Path, raw: tuple[FluxObject, ...]) -> list[FluxObject]:
        configmaps: dict[tuple[str, str], dict[str, str]] = {}
        found: list[FluxObject] = list(raw)
        for _ in range(4):  # again while a ConfigMap found later changes a Kustomization's postBuild variables
            found = self._walk(folder, raw, configmaps)
            if all(_variables(k, configmaps) == (k.variables, k.variables_known) for k in found
                   if isinstance(k, FluxKustomization)):
                break
        return found

    def own(self, obj: FluxObject) -> bool:
        return isinstance(obj, FluxKustomization) and self.repository.layout.is_own_source(*obj.source_ref)

    def _walk(self, folder: Path, raw: tuple[FluxObject, ...],
              configmaps: dict[tuple[str, str], dict[str, str]]) -> list[FluxObject]:
        root = self.repository.root
        start = FluxBuild(resolved(folder))
        first = self.renderer.render([start])[0]
        if first.docs is None:
            top: list[FluxObject] = list(raw)
        else:
            configmaps.update(_configmaps(first.docs, None))
            top = self._objects(first, folder, None, None, True, configmaps)
        # The Kustomization syncing the folder itself (flux bootstrap's flux-system) builds it with its fields
        # and postBuild variables.
        sync = next((k for k in top if isinstance(k, FluxKustomization) and self.own(k)
                     and (b := flux_build(root, k)) is not None and b.folder == start.folder), None)
        seen: set[tuple[FluxBuild, Any]] = {(start, None)}
        if sync is not None and first.docs is not None:
            assert isinstance(sync, FluxKustomization)
            variables, known = _variables(sync, configmaps)
            build = FluxBuild(start.folder, sync.build_fields)
            if variables is not None or build != start:
                again = self.renderer.render([build])[0]
                seen.add((build, variables))
                if again.docs is not None:
                    top = self._objects(again, folder, None, (variables, known), True, configmaps)
        out: list[FluxObject] = []
        have: set[tuple[str, str, str]] = set()
        queue: list[FluxKustomization] = []

        def take(objs: list[FluxObject]) -> None:
            for obj in objs:
                if (obj.kind, obj.namespace, obj.name) in have:
                    continue
                have.add((obj.kind, obj.namespace, obj.name))
                if isinstance(obj, FluxKustomization):
                    variables, known = _variables(obj, configmaps)
                    obj = replace(obj, variables=variables, variables_known=known)
                    if self.own(obj):
                        queue.append(obj)
                out.append(obj)

        take(top)
        builds = 0
        while queue and builds < MAX_FLUX_BUILDS:
            level: list[tuple[FluxKustomization, FluxBuild]] = []
            for ks in queue:
                path = flux_build(root, ks)
                if path is None or (path, ks.variables) in seen:
                    continue
                seen.add((path, ks.variables))
                level.append((ks, path))
            queue = []
            builds += len(level)
            renders = self.renderer.render([b for _, b in level])
            for (ks, build), rendered in zip(level, renders, strict=True):
                if rendered.docs is not None:
                    take(self._objects(rendered, build.folder, ks, (ks.variables, ks.variables_known), False,
                                       configmaps))
        return out

    def _objects(self, rendered: FluxRender, folder: Path, parent: FluxKustomization | None,
                 variables: tuple[tuple[tuple[str, str], ...] | None, bool] | None, top: bool,
                 configmaps: dict[tuple[str, str], dict[str, str]]) -> list[FluxObject]:
        """The Flux objects of a render (substituted with `variables`), each with the file declaring it."""
        docs = rendered.docs or []
        if variables is not None:
            docs, _ = substitute_objects(docs, variables[0], variables[1])
        if not top:
            namespace = parent.spec.get("targetNamespace") if parent is not None else None
            configmaps.update(_configmaps(docs, str(namespace) if namespace else None))
        index = self._index(rendered.files)
        fallback = kustomization_file(folder) or folder
        out = []
        for doc in docs:
            obj = _flux_object(doc, fallback, parent=None if parent is None else f"{parent.namespace}/{parent.name}")
            if obj is None:
                continue
            file = index.get((obj.kind, obj.name)) or next(
                (f for (kind, name), f in index.items() if kind == obj.kind and name and name in obj.name), fallback)
            out.append(self.repository._applied(replace(obj, file=file)))
        return out

    def _index(self, files: tuple[Path, ...]) -> dict[tuple[str, str], Path]:
        """(kind, name) -> the file of `files` declaring a Flux object of that kind and name (as written)."""
        found = self.index.get(files)
        if found is None:
            found = {}
            for f in sorted(files):
                if f.suffix not in (".yaml", ".yml") or f.name in KUSTOMIZATION_FILES:
                    continue
                try:
                    docs = load_all_shared(f)
                except InputError:
                    continue
                for doc in docs:
                    obj = _flux_object(doc, f)
                    if obj is not None:
                        found.setdefault((obj.kind, obj.name), f)
            self.index[files] = found
        return found
