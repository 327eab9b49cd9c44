"""What exists when Flux applies each Kustomization of a cluster on a fresh cluster: the apply order.

Flux applies a Kustomization only after the ones it `dependsOn` are Ready, and within one Kustomization it applies
CustomResourceDefinitions and Namespaces before everything else. A Kustomization is itself an object another one
applies (its parent: the cluster folder's, or one whose path renders the child's Flux Kustomization object), and
the parent's Namespaces and CRDs are created in the apply that creates the child, so they exist before the child
runs. So what exists for a Kustomization is: the baseline (Kubernetes, Flux, kubectl-triton.yaml's
cluster.provides), what its dependsOn line created (charts of awaited HelmReleases included), what existed for its
parent and the parent's own Namespaces and CRDs, then its own.

The objects are the rendered ones (kustomize's namespace transformer has renamed a Component's Namespace `_`
already). A path without a kustomization.yaml, which Flux builds from a kustomization it generates, is read as Flux
generates it (every manifest below it; a sub-folder holding a kustomization.yaml as that folder's build) where the
gate has not rendered it; what cannot be read so is "unknown" and makes a missing namespace or CRD a warning.

Pure but for `generated` (reads the files of a path Flux builds without a kustomization.yaml)."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubectl_triton.checks.manifests.crds import data, release_crds
from kubectl_triton.errors import TritonCtlError
from kubectl_triton.formats import yamlio
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops.layout import ClusterProvides

FLUX_KS_GROUP = "kustomize.toolkit.fluxcd.io"
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _meta(obj: dict) -> dict:
    return _dict(obj.get("metadata"))


def _spec(obj: dict) -> dict:
    return _dict(obj.get("spec"))


def _ns(obj: dict) -> str | None:
    ns = _meta(obj).get("namespace")
    return str(ns) if ns else None


def _name(obj: dict) -> str:
    return str(_meta(obj).get("name", ""))


def _group(obj: dict) -> str:
    api = str(obj.get("apiVersion", ""))
    return api.rpartition("/")[0] if "/" in api else ""


def norm_path(path: Any) -> str:
    """A Flux spec.path as a repository-relative folder ('./apps/x/' -> 'apps/x', './' -> '.')."""
    text = str(path or ".").strip()
    return posixpath.normpath(text.lstrip("/")) if text else "."


def is_flux_kustomization(obj: dict) -> bool:
    return obj.get("kind") == "Kustomization" and _group(obj) == FLUX_KS_GROUP


@dataclass
class Applied:
    """One Flux Kustomization of a cluster and the objects it applies (None: unknown, it did not render).

    `generated`: for a path that did not render because it has no kustomization.yaml, the manifests Flux's
    generated kustomization would apply, as far as they could be read (Namespaces and CRDs count from them);
    `unread`: its sub-folders with a kustomization.yaml that were not rendered (their objects are unknown).
    `root`: the cluster folder itself, applied by flux bootstrap or the FluxInstance (no Flux object in git)."""

    name: str
    namespace: str
    file: str  # repository-relative file declaring the Flux Kustomization
    path: str  # repository-relative folder it applies
    spec: dict[str, Any]
    objects: list[dict] | None
    generated: list[dict] | None = None
    unread: tuple[str, ...] = ()
    root: bool = False
    foreign: bool = False  # applies another source's files (not this repository's)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def label(self) -> str:
        return f"the cluster folder {self.path} (applied by flux bootstrap or the FluxInstance)" if self.root \
            else f"Kustomization {self.name}"

    @property
    def depends(self) -> list[tuple[str, str]]:
        deps = self.spec.get("dependsOn")
        return [(str(d.get("namespace") or self.namespace), str(d.get("name"))) for d in deps
                if isinstance(d, dict)] if isinstance(deps, list) else []

    @property
    def waits(self) -> bool:
        return self.spec.get("wait") is True

    @property
    def remote(self) -> bool:
        """Does it apply to another cluster (spec.kubeConfig)?"""
        return bool(self.spec.get("kubeConfig"))

    @property
    def known(self) -> list[dict] | None:
        """What it is known to apply: the rendered objects, else the generated ones, else None."""
        return self.objects if self.objects is not None else self.generated

    def awaits(self, obj: dict) -> bool:
        """Does this Kustomization become Ready only after `obj` is healthy (wait, or a healthCheck on it)?"""
        if self.waits:
            return True
        for hc in self.spec.get("healthChecks") or []:
            if isinstance(hc, dict) and hc.get("kind") == obj.get("kind") and hc.get("name") == _name(obj) \
                    and (hc.get("namespace") or None) in (None, _ns(obj)):
                return True
        return False


def effective_objects(ks: Applied, objects: list[dict] | None = None) -> list[dict]:
    """The objects as Flux applies them (`ks.objects` unless given): spec.targetNamespace overrides every
    namespaced object's namespace."""
    target = ks.spec.get("targetNamespace")
    objects = [o for o in (ks.objects if objects is None else objects) or [] if isinstance(o, dict)]
    if not target:
        return objects
    scoped = set(data()["cluster_scoped_kinds"]["kinds"])
    out = []
    for obj in objects:
        if obj.get("kind") not in scoped:
            obj = {**obj, "metadata": {**_meta(obj), "namespace": target}}
        out.append(obj)
    return out


def ancestors(ks: Applied, by_key: dict[tuple[str, str], Applied]) -> list[Applied]:
    """Every Kustomization `ks` transitively dependsOn (cycles and unknown names are reported elsewhere)."""
    seen: dict[tuple[str, str], Applied] = {}
    todo = list(ks.depends)
    while todo:
        key = todo.pop()
        if key in seen or key == ks.key or key not in by_key:
            continue
        seen[key] = by_key[key]
        todo.extend(by_key[key].depends)
    return list(seen.values())


def cluster_scoped(objects: Iterable[dict]) -> set[str]:
    """Kinds without a namespace: the known ones and those whose rendered CRD says `scope: Cluster`."""
    kinds = set(data()["cluster_scoped_kinds"]["kinds"])
    for obj in objects:
        if obj.get("kind") == "CustomResourceDefinition" and _spec(obj).get("scope") == "Cluster":
            kind = _dict(_spec(obj).get("names")).get("kind")
            if kind:
                kinds.add(str(kind))
    return kinds


# ------------------------------------------------------------------------------------------------ what exists


@dataclass(frozen=True)
class Suspect:
    """A HelmRelease of a chart without CRD data here: it may install any CRD."""

    release: str
    chart: str
    who: str  # the Kustomization that applies it
    why: str

    def describe(self) -> str:
        return f"HelmRelease {self.release} of {self.who} ({self.why})"


@dataclass
class Provided:
    """Namespaces and CRD groups, each with who provides it (for messages and dependsOn hints)."""

    namespaces: dict[str, str] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    unawaited: dict[str, str] = field(default_factory=dict)  # group -> HelmRelease whose readiness nobody awaits
    # what an ancestor applies whose contents are unknown here (a chart this plugin has no data on, a nested Flux
    # Kustomization of another source, a parent that did not render): it may install any CRD or namespace, so a
    # missing one is only a warning
    unknown: list[str] = field(default_factory=list)
    suspects: list[Suspect] = field(default_factory=list)  # the HelmReleases among `unknown`

    def copy(self) -> Provided:
        return Provided(dict(self.namespaces), dict(self.groups), dict(self.unawaited), list(self.unknown),
                        list(self.suspects))

    def merge(self, other: Provided) -> None:
        """Add what `other` provides (what is already here keeps its provider)."""
        for ns, who in other.namespaces.items():
            self.namespaces.setdefault(ns, who)
        for group, who in other.groups.items():
            self.groups.setdefault(group, who)
            self.unawaited.pop(group, None)
        for group, who in other.unawaited.items():
            if group not in self.groups:
                self.unawaited.setdefault(group, who)
        self.unknown.extend(u for u in other.unknown if u not in self.unknown)
        self.suspects.extend(s for s in other.suspects if s not in self.suspects)


def _creates_namespace(release: dict) -> bool:
    install = _spec(release).get("install")
    return isinstance(install, dict) and install.get("createNamespace") is True


def _release_namespace(release: dict) -> str | None:
    """The namespace install.createNamespace creates: spec.targetNamespace, else the HelmRelease's own (never
    storageNamespace, where Helm only keeps its release records: helm-controller's API reference)."""
    spec = _spec(release)
    return str(spec.get("targetNamespace") or _ns(release) or "") or None


def add_from(provided: Provided, ks: Applied, objects: list[dict], ancestor: bool, all_objects: list[dict],
             known_child: Any = None) -> None:
    """What `ks`'s objects make available: to itself and the Kustomizations it applies (Namespaces, CRDs applied
    first) or, as an ancestor (dependsOn), also what its HelmReleases install. `known_child(obj)`: whether a
    nested Flux Kustomization object is one the simulation knows (else its contents count as unknown)."""
    who = ks.label
    for obj in objects:
        kind = obj.get("kind")
        if kind == "Namespace" and _group(obj) == "":
            provided.namespaces.setdefault(_name(obj), f"{who} ({object_id(obj)})")
        elif kind == "CustomResourceDefinition":
            group = _spec(obj).get("group")
            if group:
                provided.groups.setdefault(str(group), f"{who} ({object_id(obj)})")
                provided.unawaited.pop(str(group), None)
        elif is_flux_kustomization(obj) and ancestor and not (known_child is not None and known_child(obj)):
            note = f"Kustomization {_name(obj)} (applied by {who})"
            if note not in provided.unknown:
                provided.unknown.append(note)
        elif kind == "HelmRelease" and ancestor and not _spec(obj).get("kubeConfig"):
            crds = release_crds(obj, all_objects)
            if not crds.known:
                suspect = Suspect(_name(obj), crds.chart, who, crds.why)
                provided.unknown.append(suspect.describe())
                provided.suspects.append(suspect)
            namespace = _release_namespace(obj)
            if _creates_namespace(obj) and namespace:
                provided.namespaces.setdefault(namespace, f"HelmRelease {_name(obj)} of {who}")
            for group in crds.groups:
                source = f"chart {crds.chart} (HelmRelease {_name(obj)} of {who})"
                if ks.awaits(obj):
                    provided.groups.setdefault(group, source)
                    provided.unawaited.pop(group, None)
                elif group not in provided.groups:
                    provided.unawaited.setdefault(group, source)


def baseline(provides: ClusterProvides, flux_namespace: str) -> Provided:
    out = Provided()
    for ns in data()["builtin_namespaces"]["namespaces"]:
        out.namespaces[ns] = "Kubernetes"
    out.namespaces.setdefault(flux_namespace, "flux bootstrap")
    for group in data()["builtin_groups"]["groups"]:
        out.groups[group] = "Kubernetes"
    for group in data()["flux"]["groups"]:
        out.groups[group] = "flux bootstrap"
    who = dict(provides.providers)
    for ns in provides.namespaces:
        out.namespaces.setdefault(ns, who.get(("namespace", ns)) or provides.file or "kubectl-triton.yaml")
    for group in provides.crds:
        out.groups.setdefault(group, who.get(("crd", group)) or provides.file or "kubectl-triton.yaml")
    return out


# ------------------------------------------------------------------------------------------------ the simulation


def _under(file: str, folder: str) -> bool:
    return folder in ("", ".") or file == folder or file.startswith(folder.rstrip("/") + "/")


class Simulation:
    """The apply order of `applied` (one cluster's Kustomizations); `outside`: Kustomizations that may apply
    them without being of this cluster folder (another cluster folder's, the cluster folder itself as flux
    bootstrap applies it). Nothing of `outside` is reported on; they only count as parents."""

    def __init__(self, applied: list[Applied], provides: ClusterProvides, flux_namespace: str = "flux-system",
                 effective: dict[tuple[str, str], list[dict]] | None = None,
                 outside: Iterable[Applied] = ()) -> None:
        self.applied = applied
        self._mine = mine = {id(ks) for ks in applied}
        self.outside = [o for o in outside if id(o) not in mine]
        self.provides, self.flux_namespace = provides, flux_namespace
        self.every = every = [*applied, *self.outside]
        self.by_key: dict[tuple[str, str], Applied] = {ks.key: ks for ks in self.outside}
        self.by_key.update({ks.key: ks for ks in applied})
        self._simulated = {(ks.name, norm_path(ks.path)): ks for ks in every}
        self._effective: dict[int, list[dict]] = {}
        for ks in every:
            given = effective.get(ks.key) if effective is not None and id(ks) in mine else None
            self._effective[id(ks)] = given if given is not None else effective_objects(ks, ks.known)
        self.all_objects = [o for ks in applied for o in self._effective[id(ks)]]
        # (name, path) of every Flux Kustomization object a Kustomization applies -> the ones applying it
        self._applies: dict[tuple[str, str], list[Applied]] = {}
        for ks in every:
            for obj in self._effective[id(ks)]:
                if is_flux_kustomization(obj):
                    key = (_name(obj), norm_path(_spec(obj).get("path")))
                    self._applies.setdefault(key, []).append(ks)
        self._before: dict[int, Provided | None] = {}
        self._after: dict[int, Provided | None] = {}
        self._busy: set[int] = set()

    def objects(self, ks: Applied) -> list[dict]:
        return self._effective[id(ks)]

    def known_child(self, obj: dict) -> bool:
        """Is a Flux Kustomization object one of the simulated Kustomizations, whose objects are known (not one of
        another source, or one that did not render)?"""
        found = self._simulated.get((_name(obj), norm_path(_spec(obj).get("path")))) or \
            self.by_key.get((_ns(obj) or "", _name(obj)))
        return found is not None and found.known is not None and not found.foreign

    def parent(self, ks: Applied) -> tuple[Applied | None, list[str]]:
        """The Kustomization that applies `ks` (its rendered objects hold ks's Flux Kustomization object; else,
        of those whose objects are not known, the deepest whose path holds ks's file), with what is unknown
        about it."""
        rendered = [p for p in self._applies.get((ks.name, norm_path(ks.path)), []) if p is not ks]
        if rendered:
            best = sorted(rendered, key=lambda p: (not _under(ks.file, p.path), id(p) not in self._mine, p.root))[0]
            return best, [f"folder {u} of {best.label}'s path (not rendered here)" for u in best.unread
                          if _under(ks.file, u)]
        holders = [p for p in self.every if p is not ks and p.known is None and not p.foreign
                   and not p.remote and _under(ks.file, p.path)]
        if holders:
            best = max(holders, key=lambda p: (len(p.path), not p.root))
            return best, [f"{best.label}, which applies it (its path {best.path} is not rendered here)"]
        partial = [p for p in self.every if p is not ks and any(_under(ks.file, u) for u in p.unread)]
        if partial:
            best = max(partial, key=lambda p: len(p.path))
            return best, [f"folder {u} of {best.label}'s path (not rendered here)" for u in best.unread
                          if _under(ks.file, u)]
        return None, []

    def before(self, ks: Applied) -> Provided | None:
        """What exists when Flux applies `ks` (None: an ancestor did not render, so nothing can be said)."""
        if id(ks) in self._before:
            return self._before[id(ks)]
        if id(ks) in self._busy:
            return None  # a dependsOn circle: reported as FluxDependencyCycle
        self._busy.add(id(ks))
        out: Provided | None = baseline(self.provides, self.flux_namespace)
        for key in ks.depends:
            ancestor = self.by_key.get(key)
            if ancestor is ks:
                continue
            # an unknown name (FluxDependencyMissing: Flux waits forever) or an ancestor that did not render
            # (reported as such): what exists for this one cannot be said
            after = self.after(ancestor) if ancestor is not None else None
            if after is None:
                out = None
                break
            out.merge(after)  # type: ignore[union-attr]
        if out is not None:
            parent, unknown = self.parent(ks)
            if unknown:
                out = None  # applied by a path that did not render (FluxPathUnbuildable, RenderFailed)
            elif parent is not None and parent.remote == ks.remote:
                earlier = self.before(parent)
                if earlier is None:
                    out = None
                else:
                    out.merge(earlier)
                    add_from(out, parent, self.objects(parent), False, self.all_objects)
        self._busy.discard(id(ks))
        self._before[id(ks)] = out
        return out

    def after(self, ks: Applied) -> Provided | None:
        """What exists once `ks` is Ready: what existed before it, and all it created (its HelmReleases' CRDs
        where it awaits them)."""
        if id(ks) not in self._after:
            earlier = self.before(ks) if ks.known is not None and not ks.unread else None
            out = earlier.copy() if earlier is not None else None
            if out is not None:
                add_from(out, ks, self.objects(ks), True, self.all_objects, self.known_child)
            self._after[id(ks)] = out
        return self._after[id(ks)]

    def have(self, ks: Applied) -> Provided | None:
        """What `ks`'s objects find when Flux applies them: what existed before, and its own Namespaces and
        CRDs (applied first)."""
        earlier = self.before(ks)
        if earlier is None:
            return None
        out = earlier.copy()
        add_from(out, ks, self.objects(ks), False, self.all_objects)
        return out


def provisions(applied: list[Applied], provides: ClusterProvides, flux_namespace: str = "flux-system",
               effective: dict[tuple[str, str], list[dict]] | None = None,
               outside: Iterable[Applied] = ()) -> dict[tuple[str, str], Provided]:
    """What exists when each rendered Kustomization is applied on a fresh cluster: the baseline (Kubernetes, flux
    bootstrap, kubectl-triton.yaml's cluster.provides), what its dependsOn line creates (HelmReleases' charts
    included), what its parent created, and its own Namespaces and CRDs. Kustomizations with an unrendered
    ancestor are left out."""
    sim = Simulation(applied, provides, flux_namespace, effective, outside)
    out: dict[tuple[str, str], Provided] = {}
    for ks in applied:
        if ks.objects is None:
            continue
        have = sim.have(ks)
        if have is not None:
            out[ks.key] = have
    return out


# ------------------------------------------------------------------------------------------------ Flux-generated


def generated(root: Path, folder: Path, rendered: dict[Path, list[dict] | None]) -> tuple[list[dict], list[str]]:
    """The manifests Flux applies for `folder`, which has no kustomization.yaml (kustomize-controller generates
    one): every YAML manifest below it, and for a sub-folder holding a kustomization.yaml, that folder's render
    (`rendered`, by resolved path) where there is one. Returns the objects and the repository-relative
    sub-folders it could not read (not rendered)."""
    objects: list[dict] = []
    unread: list[str] = []
    top = Path(os.path.realpath(root))
    for current, dirs, files in os.walk(folder):
        here = Path(current)
        if here != folder and any(name in files for name in KUSTOMIZATION_FILES):
            built = rendered.get(Path(os.path.realpath(here)))
            if built is None:
                unread.append(_relative(top, here))
            else:
                objects.extend(o for o in built if isinstance(o, dict))
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or not name.endswith((".yaml", ".yml")):
                continue
            try:
                docs = yamlio.load_all_shared(here / name)
            except (TritonCtlError, OSError, ValueError):
                continue  # reported by the YAML checks
            objects.extend(d for d in docs if isinstance(d, dict) and d.get("apiVersion") and d.get("kind"))
    return objects, unread


def _relative(top: Path, path: Path) -> str:
    try:
        return Path(os.path.realpath(path)).relative_to(top).as_posix()
    except ValueError:
        return str(path)
