"""`kubectl triton init` core: the files that make a folder (empty, or an existing Flux repository) a kubectl-triton
repository, as a plan (repository-relative path -> text) that `scaffold.write_plan` writes all or nothing.

Every manifest comes from the package: the bases are copied from data/init/ byte for byte; GPU Components,
cluster Flux objects, the CI workflow and the layout file are data dumped by ruamel.yaml. A file that already
exists is never rewritten: identical ones are skipped, different ones are kept and reported. The only edit of a
user's file is appending entries to a cluster's kustomization.yaml `resources:` (round trip, comments kept)."""

from __future__ import annotations

import io
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kubectl_triton import __version__
from kubectl_triton.compat.catalog import GPU, gpus, register
from kubectl_triton.datafiles import data_file
from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamledit import edit_resources
from kubectl_triton.formats.yamlio import load_all
from kubectl_triton.gitops import prometheus, syncroots
from kubectl_triton.gitops.model import (
    LAYOUT_FILE,
    MONITORING_MODES,
    SOURCE_KINDS,
    FluxKustomization,
    Layout,
    Repository,
    kustomization_file,
)
from kubectl_triton.gitops.scaffold import validate_name

DEFAULT_CLUSTER = "production"
WORKFLOW = ".github/workflows/kubectl-triton.yaml"
FLUX_API = "kustomize.toolkit.fluxcd.io/v1"
ARTIFACT_GENERATOR_API = "source.extensions.fluxcd.io/"
BASES = ("triton", "engine-build", "platform", "monitoring")
INFRASTRUCTURE = "infrastructure"  # name of the GPU Operator / prometheus-adapter Kustomization of a new repository


@dataclass(frozen=True)
class InitOptions:
    """What `init` was asked for: GPU types (empty: the whole catalog), cluster folder, own source KIND/NAME,
    the monitoring stack (install, existing; None: existing when the repository deploys a Prometheus) and, for an
    existing one, its URL and `[KIND:]KEY=VALUE` selector labels."""

    gpus: tuple[str, ...] = ()
    cluster: str | None = None
    source: str | None = None
    monitoring: str | None = None
    prometheus_url: str | None = None
    prometheus_selectors: tuple[str, ...] = ()


@dataclass
class InitPlan:
    """The files to write and what to tell the user."""

    layout: Layout
    cluster: str
    adopted: bool  # the folder already held Flux Kustomizations
    files: dict[str, str] = field(default_factory=dict)  # path -> text: new files and appended lists
    created: list[str] = field(default_factory=list)
    appended: list[str] = field(default_factory=list)  # user files that get entries appended
    kept: list[str] = field(default_factory=list)  # existing files that differ from init's; left as they are
    review: list[str] = field(default_factory=list)


# ---- YAML as data ---------------------------------------------------------------------------------

def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    return yaml


def dump(doc: Any, comment: str | None = None) -> str:
    """`doc` as block YAML (2-space mappings, `- ` items indented under their key), `comment` lines on top."""
    from ruamel.yaml.comments import CommentedMap

    if comment:
        doc = CommentedMap(doc)
        doc.yaml_set_start_comment(comment)
    out = io.StringIO()
    _yaml().dump(doc, out)
    return out.getvalue()


def _data(*parts: str) -> Any:
    return data_file("init", *parts)


def _data_files(top: Any, prefix: str = "") -> Iterator[tuple[str, bytes]]:
    for entry in sorted(top.iterdir(), key=lambda e: e.name):
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            yield from _data_files(entry, f"{prefix}{entry.name}/")
        else:
            yield f"{prefix}{entry.name}", entry.read_bytes()


# ---- what init writes -------------------------------------------------------------------------------

DEFAULT_NAMESPACE = "triton"  # the namespace the packaged platform base creates
NAMESPACED = {"platform/namespace.yaml": ("metadata", "name"), "platform/persistentvolumeclaim.yaml": ("metadata",
                                                                                                  "namespace")}


def base_files(layout: Layout) -> dict[str, str]:
    """The Triton, engine-build, platform and monitoring bases, as the package holds them; with another target
    namespace in the layout file, the platform's Namespace and volume claim name it (round trip, comments kept)."""
    out = {}
    for rel, data in _data_files(_data("base")):
        text = data.decode("utf-8")
        if layout.namespace != DEFAULT_NAMESPACE and rel in NAMESPACED:
            yaml = _yaml()
            doc = yaml.load(text)
            section, key = NAMESPACED[rel]
            doc[section][key] = layout.namespace
            buf = io.StringIO()
            yaml.dump(doc, buf)
            text = buf.getvalue()
        out[f"{layout.bases}/{rel}"] = text
    return out


def gpu_component(gpu: GPU) -> dict[str, str]:
    """The Kustomize Component of one GPU type, by file name: node selector on GFD's product label, the
    nvidia.com/gpu toleration and one GPU for the Deployment's tritonserver and the engine-build Job."""
    def patch(api: str, kind: str, container: str) -> dict[str, Any]:
        return {"apiVersion": api, "kind": kind, "metadata": {"name": "any"}, "spec": {"template": {"spec": {
            "nodeSelector": {"nvidia.com/gpu.product": gpu.label},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": container, "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}

    component = {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component", "patches": [
        {"path": "gpu.yaml", "target": {"kind": "Deployment"}},
        {"path": "gpu-job.yaml", "target": {"kind": "Job"}}]}
    title = f"{gpu.name or gpu.label} ({gpu.family.capitalize()}, compute {gpu.compute_capability})"
    return {"kustomization.yaml": dump(component, title), "gpu.yaml": dump(patch("apps/v1", "Deployment",
                                                                                 "tritonserver")),
            "gpu-job.yaml": dump(patch("batch/v1", "Job", "engine-build"))}


def gpu_component_files(layout: Layout, key: str) -> dict[str, str]:
    """Repository-relative files of GPU type `key`'s Component (a catalog or layout-file type)."""
    gpu = gpus().get(key)
    if gpu is None:
        raise InputError(f"--gpu {key!r}: not a GPU type of the catalog or of {LAYOUT_FILE}",
                         hint=f"known: {', '.join(gpus())}; declare others under `gpus:` in {LAYOUT_FILE}")
    return {f"{layout.gpu_component(key)}/{name}": text for name, text in gpu_component(gpu).items()}


def flux_kustomization(layout: Layout, name: str, path: str, *, interval: str, timeout: str,
                       depends_on: tuple[str, ...] = (), comment: str | None = None) -> str:
    """A Flux Kustomization applying `path` of this repository's own source."""
    spec: dict[str, Any] = {"interval": interval, "retryInterval": "1m", "timeout": timeout,
                            "path": layout.flux_path(path), "prune": True, "wait": True}
    if depends_on:
        spec["dependsOn"] = [{"name": d} for d in depends_on]
    spec["sourceRef"] = source_ref(layout)
    return dump({"apiVersion": FLUX_API, "kind": "Kustomization",
                 "metadata": {"name": name, "namespace": "flux-system"}, "spec": spec}, comment)


def source_ref(layout: Layout, namespace: str = "flux-system") -> dict[str, str]:
    """The sourceRef of a Kustomization in `namespace` pointing at the repository's own source."""
    ref = {"kind": layout.source_kind, "name": layout.source_name}
    if layout.source_namespace != namespace:
        ref["namespace"] = layout.source_namespace
    return ref


def cluster_files(layout: Layout, cluster: str, *, infrastructure: bool) -> dict[str, str]:
    """The cluster folder's Flux objects: platform, monitoring, the models list (and, for a new repository,
    the GPU Operator and prometheus-adapter infrastructure)."""
    top = cluster_dir(layout, cluster)
    infra = tuple(d for d in layout.depends_on if d != layout.platform)
    files = {f"{top}/{layout.platform}.yaml": flux_kustomization(
        layout, layout.platform, f"{layout.bases}/platform", interval="1h", timeout="5m",
        comment="The namespace Triton runs in and the model-artifacts volume.")}
    if infrastructure:
        # Outside the cluster folder: Flux would otherwise apply its HelmReleases twice (the folder's
        # generated kustomization takes every sub-folder holding a kustomization.yaml).
        files[f"{top}/{INFRASTRUCTURE}.yaml"] = flux_kustomization(
            layout, INFRASTRUCTURE, INFRASTRUCTURE, interval="1h", timeout="15m",
            comment="GPU Operator (GPU Feature Discovery labels nodes) and prometheus-adapter (the HPAs' metric).")
        for rel, data in _data_files(_data("infrastructure")):
            files[f"{INFRASTRUCTURE}/{rel}"] = data.decode("utf-8")
    files[f"{top}/{layout.monitoring}.yaml"] = flux_kustomization(
        layout, layout.monitoring, f"{layout.bases}/monitoring", interval="1h", timeout="5m", depends_on=infra,
        comment="Grafana dashboard and Prometheus alert rules for every Triton model (needs the Prometheus "
                "Operator).")
    files[f"{top}/models/kustomization.yaml"] = dump(
        {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": []},
        "One Flux Kustomization per model overlay; `kubectl triton add-model` appends here.")
    return files


def workflow() -> str:
    """The pull-request gate for GitHub Actions: the published plugin (this version), validate and diff."""
    yaml = _yaml()
    doc = yaml.load(_data("workflow.yaml").read_text(encoding="utf-8"))
    for step in doc["jobs"]["validate"]["steps"]:
        if step.get("name") == "Install kubectl-triton":
            step["run"] = f"pip install 'kubectl-triton=={__version__}'"
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def cluster_provides(layout: Layout, *, infrastructure: bool) -> dict[str, Any]:
    """The layout file's `cluster.provides`: what the scaffolded repository relies on but does not install, declared
    (with why) so `validate`'s apply-order simulation sees it; the user corrects it to the real cluster. Without
    the repository's own infrastructure (an adopted repository) the monitoring, KEDA and LeaderWorkerSet CRDs and the
    monitoring namespace are the cluster's too."""
    crds = [{"group": "gateway.networking.k8s.io", "reason": "assumed: the cluster's Gateway controller installs "
             "the Gateway API CRDs (canary routes)"},
            {"group": "inference.networking.k8s.io", "reason": "assumed: the cluster's inference gateway installs "
             "the Inference Extension CRDs (add-model --route inferencepool)"}]
    provides: dict[str, Any] = {}
    mon = layout.prometheus
    if not infrastructure:
        provides["namespaces"] = [{"name": mon.namespace, "reason": "assumed: the cluster's monitoring stack runs "
                                   "there (base/monitoring is applied into it)"}]
        crds += [{"group": group, "reason": f"assumed: the cluster installs the {what} CRDs"}
                 for group, what in (("monitoring.coreos.com", "Prometheus Operator"), ("keda.sh", "KEDA"),
                                     ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"))]
    if infrastructure and mon.existing:
        provides["namespaces"] = [{"name": mon.namespace, "reason": "the existing Prometheus runs there "
                                   f"({LAYOUT_FILE} monitoring; base/monitoring is applied into it)"}]
        crds += [{"group": "monitoring.coreos.com", "reason": "the existing monitoring stack installs the Prometheus "
                  "Operator CRDs"}]
    provides["crds"] = crds
    provides["storageClasses"] = [{"name": "default", "default": True, "rwx": True,
                                   "volumeBindingMode": "Immediate",
                                   "reason": "assumed: the cluster's default StorageClass serves ReadWriteMany "
                                   "(the platform's model-artifacts PVC); name your cluster's class"}]
    provides["secrets"] = [{"name": "model-store-credentials", "namespace": layout.namespace,
                            "reason": "S3 artifact credentials (overlays/artifacts/s3), created outside git"},
                           {"name": "*-mpi-ssh", "namespace": layout.namespace,
                            "reason": "each multi-node model's SSH key pair (docs/multinode.md), created outside git"}]
    return {"provides": provides}


def layout_file(layout: Layout, *, infrastructure: bool = True) -> str:
    """kubectl-triton.yaml for `layout` (every value written out, so the user sees what was detected)."""
    flux: dict[str, Any] = {"sourceRef": {"kind": layout.source_kind, "name": layout.source_name},
                            "dependsOn": list(layout.depends_on), "platform": layout.platform,
                            "monitoring": layout.monitoring}
    if layout.source_namespace != "flux-system":
        flux["sourceRef"]["namespace"] = layout.source_namespace
    if layout.artifact_root:
        flux["artifactRoot"] = layout.artifact_root
    doc = {"paths": {"bases": layout.bases, "gpus": layout.gpus, "overlays": layout.overlays,
                     "models": layout.models, "clusters": layout.clusters},
           "namespace": layout.namespace, "flux": flux, "monitoring": layout.prometheus.section(),
           "cluster": cluster_provides(layout, infrastructure=infrastructure)}
    return dump(doc, "kubectl-triton: this repository's layout (written by `kubectl triton init`; every command "
                     "reads it).\nKeys: kubectl_triton/data/kubectl-triton.schema.json in the installed package. "
                     "Add GPU types\nof your own under `gpus:` (product, computeCapability, memoryMiB, gpusPerNode, "
                     "fp8, fp4).")


# ---- detection of an existing Flux repository -------------------------------------------------------

def _clusters_folder(root: Path) -> str:
    """Where the cluster folders are when no sync root says (a repository Flux does not sync yet, or whose sync path
    is set outside it): clusters/ when it exists, else the shallowest other folder named clusters, else the parent
    of the first folder holding a flux-system/ folder, else clusters/. Hidden folders (.archive/) are never it."""
    if (root / "clusters").is_dir():
        return "clusters"
    visible = []
    for folder, dirs, _ in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        visible += [Path(folder) / d for d in dirs]
    named = sorted((p for p in visible if p.name == "clusters" and any(c.is_dir() for c in p.iterdir())),
                   key=lambda p: (len(p.parts), p.parts))
    if named:
        return named[0].relative_to(root).as_posix()
    for found in sorted(visible):
        if found.name == "flux-system" and found.parent.parent != found.parent:
            parent = found.parent.parent
            if parent != root and root in parent.parents:
                return parent.relative_to(root).as_posix()
    return "clusters"


def _documents(folder: Path) -> Iterator[dict[str, Any]]:
    for f in sorted(folder.rglob("*.y*ml")):
        for doc in load_all(f):
            if isinstance(doc, dict):
                yield doc


def _parse_source(text: str) -> tuple[str, str]:
    kind, sep, name = text.partition("/")
    if not sep or kind not in SOURCE_KINDS or not name:
        raise InputError(f"--source {text!r}: expected KIND/NAME, KIND one of {', '.join(SOURCE_KINDS)}")
    return kind, name


def detect_source(cluster_dir: Path, cluster_rel: str, kustomizations: list[FluxKustomization],
                  given: str | None) -> tuple[str, str, str]:
    """(kind, name, namespace) of the repository's own Flux source: --source; else the source of the
    Kustomization that applies the cluster folder itself; else GitRepository/flux-system when it is a candidate
    (flux bootstrap's name) or nothing names a source; else the only candidate. Several: InputError listing them."""
    if given:
        kind, name = _parse_source(given)
        return kind, name, "flux-system"
    for k in kustomizations:
        if k.path.strip("./").rstrip("/") == cluster_rel and k.source_ref[0] in SOURCE_KINDS:
            return k.source_ref
    candidates: list[tuple[str, str, str]] = []
    for k in kustomizations:
        if k.source_ref[0] in SOURCE_KINDS and k.source_ref[0] != "ExternalArtifact":
            candidates.append(k.source_ref)
    if cluster_dir.is_dir():
        for doc in _documents(cluster_dir):
            if str(doc.get("apiVersion", "")).startswith(ARTIFACT_GENERATOR_API):
                ns = str((doc.get("metadata") or {}).get("namespace", "flux-system"))
                for src in (doc.get("spec") or {}).get("sources") or []:
                    if isinstance(src, dict) and src.get("kind") in SOURCE_KINDS:
                        candidates.append((str(src["kind"]), str(src.get("name")), str(src.get("namespace", ns))))
    unique = list(dict.fromkeys(candidates))
    bootstrap = ("GitRepository", "flux-system", "flux-system")
    if not unique or bootstrap in unique:
        return bootstrap
    if len(unique) == 1:
        return unique[0]
    shown = ", ".join(f"{k}/{n}" for k, n, _ in unique)
    raise InputError(f"{cluster_rel}: several Flux sources ({shown}); none is obviously this repository",
                     hint="name this repository's own source: kubectl triton init --source KIND/NAME")


def local(kustomizations: list[FluxKustomization]) -> list[FluxKustomization]:
    """The Kustomizations that apply to the cluster init's Kustomizations run on: in their namespace (flux-system,
    where a dependsOn without namespace looks), without spec.kubeConfig (a hub's Kustomizations for its spokes)."""
    return [k for k in kustomizations if k.namespace == "flux-system" and not k.spec.get("kubeConfig")]


def detect_infrastructure(kustomizations: list[FluxKustomization]) -> tuple[str, ...]:
    """Names of the Kustomizations that install infrastructure (name or path mentions infra), only the last of
    each chain (the ones no other infrastructure Kustomization depends on), of those `local` keeps."""
    infra = [k for k in local(kustomizations) if "infra" in k.name or "infra" in k.path]
    needed = {name for k in infra for _, name in k.depends_on}
    return tuple(dict.fromkeys(k.name for k in infra if k.name not in needed))


def _free_name(wanted: str, taken: set[str], cluster_dir: Path) -> str:
    for name in (wanted, f"triton-{wanted}"):
        if name not in taken and not (cluster_dir / f"{name}.yaml").exists():
            return name
    raise InputError(f"{cluster_dir}: Flux Kustomizations {wanted} and triton-{wanted} both exist",
                     hint=f"name the {wanted} Kustomization in {LAYOUT_FILE} (flux.{wanted})")


def _pick_cluster(root: Path, clusters: str, cluster: str | None) -> str:
    top = root / clusters
    names = sorted(p.name for p in top.iterdir() if p.is_dir()) if top.is_dir() else []
    if cluster is not None:
        as_path = syncroots.normalise(cluster)
        if posixpath.dirname(as_path) == posixpath.normpath(clusters):  # --cluster clusters/<name>
            cluster = posixpath.basename(as_path)
        try:
            validate_name(cluster)
        except InputError:
            raise InputError(f"--cluster {cluster!r}: a cluster folder name is a DNS-1123 label "
                             "(lowercase letters, digits and '-')") from None
        return cluster
    if not names or DEFAULT_CLUSTER in names:
        return DEFAULT_CLUSTER
    if len(names) == 1:
        return names[0]
    raise InputError(f"{clusters}/: several cluster folders ({', '.join(names)}); name one with --cluster")


@dataclass
class Detected:
    """What detection found: the layout, the cluster folder (its name under `layout.clusters`), whether the
    repository already runs Flux, review notes, the sync root the cluster folder is (None: nothing found syncs it)
    and every sync root found."""

    layout: Layout
    cluster: str
    adopted: bool
    notes: list[str]
    sync: syncroots.SyncRoot | None = None
    roots: list[syncroots.SyncRoot] = field(default_factory=list)


def cluster_dir(layout: Layout, cluster: str) -> str:
    """The cluster folder, repository-relative (`hub`, not `./hub`, for a sync root at the top)."""
    return posixpath.normpath(layout.cluster_dir(cluster))


def detect(root: Path, opts: InitOptions) -> Detected:
    """The layout, cluster folder and review notes for the folder at `root`: the cluster folder is a sync root
    (what a FluxInstance or the bootstrap Kustomization syncs) when the repository has one, else found as before
    (clusters/<name>, or beside a flux-system/ folder)."""
    found = syncroots.find(root)
    if (root / LAYOUT_FILE).is_file():
        return _detect_with_layout(root, opts, found)
    if found.roots:
        return _detect_sync_root(root, opts, found)
    clusters = _clusters_folder(root)
    cluster = _pick_cluster(root, clusters, opts.cluster)
    return _adopt(root, opts, Layout(clusters=clusters), cluster, found.notes, None, [])


def _detect_with_layout(root: Path, opts: InitOptions, found: syncroots.Found) -> Detected:
    """A repository that has a layout file: its cluster folder (--cluster, the only one holding models/, a sync
    root under its clusters folder, or the default)."""
    layout = Layout.load(root)
    top = posixpath.normpath(layout.clusters)
    below = [r for r in found.roots if posixpath.dirname(r.path) == ("" if top == "." else top)]
    if opts.cluster is not None:
        named = syncroots.matching(below, opts.cluster)
        elsewhere = syncroots.matching(found.roots, opts.cluster) if not named else []
        if len(elsewhere) == 1:
            raise InputError(f"--cluster {opts.cluster!r}: the sync root {elsewhere[0].path} is not in {top}/, the "
                             f"cluster folders of {LAYOUT_FILE} (paths.clusters)",
                             hint="one layout file holds the clusters of one folder: adopt that cluster in a "
                             "repository of its own, or move its sync root beside the others")
        cluster = named[0].name if len(named) == 1 else _pick_cluster(root, layout.clusters, opts.cluster)
    else:
        folder = root / layout.clusters
        with_models = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")
                             and (p / "models" / "kustomization.yaml").is_file()) if folder.is_dir() else []
        cluster = with_models[0] if len(with_models) == 1 else below[0].name if len(below) == 1 else \
            _pick_cluster(root, layout.clusters, None)
    sync = next((r for r in found.roots if r.path == cluster_dir(layout, cluster)), None)
    own = syncroots.kustomizations(root, cluster_dir(layout, cluster))
    return Detected(layout, cluster, bool(own) or sync is not None, [], sync, found.roots)


def _choose_root(found: syncroots.Found, wanted: str | None) -> syncroots.SyncRoot | str:
    """The sync root --cluster names (or the only one, or the one named production); a plain name that no root has
    where every root lies in one folder: that new cluster folder's path. Otherwise InputError naming the roots."""
    roots = found.roots
    named = syncroots.labels(roots)
    shown = ", ".join(r.path for r in roots)
    if wanted is not None:
        hits = syncroots.matching([*roots, *found.dev], wanted)
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise InputError(f"--cluster {wanted!r} names several sync roots ({', '.join(r.path for r in hits)}); "
                             "give the sync path")
        parents = {posixpath.dirname(r.path) for r in roots}
        if len(parents) == 1 and "" not in parents and "/" not in wanted:
            try:
                validate_name(wanted)
            except InputError:
                raise InputError(f"--cluster {wanted!r}: a cluster folder name is a DNS-1123 label "
                                 "(lowercase letters, digits and '-')") from None
            return f"{parents.pop()}/{wanted}"
        raise InputError(f"--cluster {wanted!r}: not a sync root of this repository (Flux syncs {shown})",
                         hint="name one by its path or its folder name: " + ", ".join(named.values()))
    if len(roots) == 1:
        return roots[0]
    production = [r for r in roots if r.name == DEFAULT_CLUSTER]
    if len(production) == 1:
        return production[0]
    raise InputError(f"several cluster folders ({', '.join(named[r.path] for r in roots)}) are sync roots: {shown}; "
                     "name one with --cluster",
                     hint="--cluster takes the sync path or the name in parentheses; each cluster is adopted on its "
                     "own run")


def _detect_sync_root(root: Path, opts: InitOptions, found: syncroots.Found) -> Detected:
    chosen = _choose_root(found, opts.cluster)
    notes = list(found.notes)
    if isinstance(chosen, str):  # a new cluster folder beside the bootstrapped ones
        clusters, cluster = posixpath.split(chosen)
        return _adopt(root, opts, Layout(clusters=clusters), cluster, notes, None, found.roots)
    sync = chosen
    if sync.path == ".":
        raise InputError(f"{sync.evidence} syncs the repository's top folder: Flux would apply init's bases as they "
                         "are; move that sync path to a folder of its own (clusters/<name>) and run init again")
    others = [r.path for r in found.roots if r is not sync]
    where = f"placed under the sync root {sync.path} ({sync.evidence})"
    if others:
        labels = syncroots.labels(found.roots)
        where += "; other sync roots: " + ", ".join(f"{r} (--cluster {labels[r]})" for r in others)
    notes.insert(0, where)
    remote = syncroots.remote_clusters(root, sync)
    if remote:
        notes.append(f"{sync.path} also applies Kustomizations to other clusters through spec.kubeConfig "
                     f"({', '.join(remote[:3])}{' …' if len(remote) > 3 else ''}): the models run on the cluster that "
                     f"syncs {sync.path}, not on those (docs/adopting.md, hub and spoke)")
    clusters, cluster = posixpath.split(sync.path)
    return _adopt(root, opts, Layout(clusters=clusters or "."), cluster, notes, sync, found.roots)


def _adopt(root: Path, opts: InitOptions, base: Layout, cluster: str, notes: list[str],
           sync: syncroots.SyncRoot | None, roots: list[syncroots.SyncRoot]) -> Detected:
    """The layout for cluster folder `cluster` under `base.clusters`: its own source, infrastructure and free
    Kustomization names. A repository without Flux Kustomizations there and no sync root is a new one."""
    cluster_rel = cluster_dir(base, cluster)
    if sync is not None:
        own = syncroots.kustomizations(root, cluster_rel)
        everything = own
    else:
        repo = Repository(root, base)
        everything = repo.flux_kustomizations
        cluster_obj = repo.cluster(cluster)
        own = cluster_obj.kustomizations if cluster_obj else []
    if not everything and sync is None and not roots:
        kind, name = _parse_source(opts.source) if opts.source else ("GitRepository", "flux-system")
        return Detected(replace(base, source_kind=kind, source_name=name), cluster, False, notes)
    if sync is not None and sync.declared and not opts.source:
        kind, name, namespace = sync.source
    else:
        kind, name, namespace = detect_source(root / cluster_rel, cluster_rel, own or everything, opts.source)
    taken = {k.name for k in everything} | (syncroots.kustomization_names(root) if sync is not None else set())
    platform = _free_name("platform", taken, root / cluster_rel)
    monitoring = _free_name("monitoring", taken, root / cluster_rel)
    infra = detect_infrastructure(own)
    layout = replace(base, source_kind=kind, source_name=name, source_namespace=namespace,
                     depends_on=(*infra, platform), platform=platform, monitoring=monitoring)
    notes.append(f"own Flux source: {kind}/{name} (spec.path of Kustomizations of other sources is not checked)")
    if infra:
        notes.append(f"models and monitoring wait for your infrastructure Kustomizations: {', '.join(infra)}")
    else:
        notes.append("no infrastructure Kustomization found: models wait only for the platform; add yours to "
                     f"flux.dependsOn in {LAYOUT_FILE}")
    notes.append("GPU Operator (GPU Feature Discovery node labels) and the Prometheus Operator CRDs are expected "
                 "from your infrastructure; init adds no HelmRelease for them")
    external = sorted({f"{k.source_ref[0]}/{k.source_ref[1]}" for k in everything
                       if not layout.is_own_source(*k.source_ref)})
    if external:
        notes.append(f"Kustomizations of other sources ({', '.join(external)}) are reported as not checked")
    return Detected(layout, cluster, True, notes, sync, roots)


# ---- the plan ---------------------------------------------------------------------------------------

def _proposed(root: Path, layout: Layout, cluster: str, wanted: tuple[str, ...], infrastructure: bool
              ) -> dict[str, str]:
    proposed: dict[str, str] = {}
    if not (root / LAYOUT_FILE).is_file():
        proposed[LAYOUT_FILE] = layout_file(layout, infrastructure=infrastructure)
    proposed.update(base_files(layout))
    # Components every model overlay may use (S3 artifacts, KEDA autoscaling), beside the GPU Components
    proposed.update({f"{layout.overlays}/{rel}": data.decode("utf-8") for rel, data in _data_files(_data("overlays"))})
    for key in wanted:
        proposed.update(gpu_component_files(layout, key))
    proposed.update(cluster_files(layout, cluster, infrastructure=infrastructure))
    proposed[WORKFLOW] = workflow()
    if layout.prometheus.existing:
        proposed = prometheus.existing_files(proposed, layout, INFRASTRUCTURE)
    return proposed


def plan_init(root: Path, opts: InitOptions) -> InitPlan:
    """Everything init would write into the folder at `root` (nothing is written here)."""
    root = root.resolve()
    if not root.is_dir():
        raise InputError(f"{root}: not a directory")
    found = detect(root, opts)
    layout, cluster, adopted, notes = found.layout, found.cluster, found.adopted, found.notes
    layout = _monitoring(root, layout, cluster, adopted, opts, notes)
    register(layout.gpu_types)
    wanted = opts.gpus or tuple(gpus())
    for key in wanted:
        if key not in gpus():
            raise InputError(f"--gpu {key!r}: not a GPU type of the catalog or of {LAYOUT_FILE}",
                             hint=f"declare it under `gpus:` in {LAYOUT_FILE}; known: {', '.join(gpus())}")
    top = cluster_dir(layout, cluster)
    fresh_cluster = not syncroots.kustomizations(root, top)
    infrastructure = not adopted and fresh_cluster and found.sync is None and not found.roots
    proposed = _proposed(root, layout, cluster, wanted, infrastructure)
    ignore_edit: tuple[str, str] | None = None
    if found.sync is not None:
        layout, proposed, ignore_edit = _in_artifact(root, found.sync, layout, proposed,
                                                     lambda lay: _proposed(root, lay, cluster, wanted, infrastructure),
                                                     notes)
    out = InitPlan(layout, cluster, adopted, review=notes)
    models_list = f"{top}/models/kustomization.yaml"  # add-model appends to it
    for rel, text in proposed.items():
        path = root / rel
        if rel == models_list and path.is_file():
            continue
        if path.is_symlink() or path.exists():
            try:
                same = path.is_file() and path.read_text(encoding="utf-8") == text
            except (OSError, UnicodeDecodeError):
                same = False
            if not same:
                out.kept.append(rel)
            continue
        out.files[rel] = text
        out.created.append(rel)
    _append_to_cluster_list(root, layout, cluster, proposed, out)
    if ignore_edit is not None:
        out.files[ignore_edit[0]] = ignore_edit[1]
        out.appended.append(ignore_edit[0])
    if out.kept:
        out.review.append(f"{len(out.kept)} existing file(s) differ from what init would write and were left "
                          f"as they are: {', '.join(out.kept[:5])}{' …' if len(out.kept) > 5 else ''}")
    if found.sync is None and not (root / top / "flux-system").is_dir():
        if found.roots:
            out.review.append(f"nothing syncs {top} yet: bootstrap that cluster with --path={top}, or name a sync "
                              f"root with --cluster ({', '.join(r.path for r in found.roots)})")
        elif adopted:
            out.review.append(f"no sync root found in the repository (a FluxInstance spec.sync.path, a flux-system/ "
                              f"bootstrap folder): the models deploy where Flux syncs {top} (its sync path set outside "
                              "the repository, or `flux bootstrap --path` of it); if Flux syncs another folder, name "
                              "it with --cluster")
        else:
            out.review.append(f"bootstrap Flux with --path={top} (e.g. `flux bootstrap github --path={top} ...`): it "
                              f"adds the flux-system source these Kustomizations use ({layout.source})")
    return out


RELOCATED = "triton"  # the folder init's bases, overlays and models go to inside a folder the artifact holds


def _in_artifact(root: Path, sync: syncroots.SyncRoot, layout: Layout, proposed: dict[str, str],
                 propose: Any, notes: list[str]) -> tuple[Layout, dict[str, str], tuple[str, str] | None]:
    """Init's files as the sync root's source artifact holds them. What `.sourceignore` leaves out is let in by
    lines appended to the top .sourceignore; what the source's spec.ignore leaves out moves (bases, overlays,
    models) into a folder the artifact holds, beside the sync root. InputError when neither helps."""
    def needed(files: dict[str, str], lay: Layout) -> list[str]:
        # what Flux reads: init's files and, later, add-model's (a model's config.pbtxt is a ConfigMap's data)
        return [*(rel for rel in files if rel not in (LAYOUT_FILE, WORKFLOW)),
                f"{lay.model_dir('model')}/model/config.pbtxt", f"{lay.overlay_dir('model', 'gpu')}/kustomization.yaml"]

    if sync.artifact_root:
        return _in_pushed_artifact(root, sync, layout, proposed, propose, notes, needed)

    left_out = syncroots.excluded(root, sync, needed(proposed, layout))
    if not left_out:
        return layout, proposed, None
    tops = list(dict.fromkeys(rel.split("/", 1)[0] for rel in left_out))
    extra = "# kubectl-triton: the folders its Flux Kustomizations apply (kubectl triton init)\n" + \
        "".join(f"!/{t}/\n" for t in tops)
    if not syncroots.excluded(root, sync, needed(proposed, layout), extra=extra):
        rel = syncroots.SOURCEIGNORE
        text = (root / rel).read_text(encoding="utf-8") if (root / rel).is_file() else ""
        notes.append(f"{rel} left out {', '.join(f'{t}/' for t in tops)} of the artifact Flux syncs; init appends "
                     f"{', '.join(f'!/{t}/' for t in tops)} to it")
        return layout, proposed, (rel, (text if not text or text.endswith("\n") else text + "\n") + extra)
    first = sync.path.split("/", 1)[0]
    if not (root / LAYOUT_FILE).is_file() and first != sync.path:
        prefix = f"{first}/{RELOCATED}"
        moved = replace(layout, bases=f"{prefix}/base", gpus=f"{prefix}/overlays/gpus", overlays=f"{prefix}/overlays",
                        models=f"{prefix}/models")
        files = propose(moved)
        if not (root / prefix).exists() and not syncroots.excluded(root, sync, needed(files, moved)):
            origin = sorted(set(left_out.values()))[0]
            notes.append(f"{origin} leaves {', '.join(f'{t}/' for t in tops)} out of the artifact Flux syncs: init "
                         f"writes its bases, overlays and models under {prefix}/ (paths: in {LAYOUT_FILE})")
            return moved, files, None
    rel, origin = next(iter(left_out.items()))
    raise InputError(f"{rel}: left out of the artifact that {sync.path} is synced from ({origin}); init's files "
                     "would not reach the cluster",
                     hint=f"let the folders init writes ({', '.join(f'{t}/' for t in tops)}) into that source, or "
                     f"give them paths inside it in {LAYOUT_FILE} (paths:) and run init again")


def _in_pushed_artifact(root: Path, sync: syncroots.SyncRoot, layout: Layout, proposed: dict[str, str],
                        propose: Any, notes: list[str], needed: Any) -> tuple[Layout, dict[str, str], None]:
    """Init's files inside an OCI artifact pushed from a sub-folder (`flux push artifact --path=./kubernetes`):
    bases, overlays and models under <artifact root>/triton/ unless the layout file puts them inside it already,
    and every spec.path relative to the artifact root (flux.artifactRoot in the layout file)."""
    top = sync.artifact_root
    lay = layout
    outside = [rel for rel in needed(proposed, layout) if not rel.startswith(top + "/")]
    if outside and (root / LAYOUT_FILE).is_file():
        raise InputError(f"{outside[0]}: outside {top}/, the folder the artifact that {sync.path} is synced from is "
                         f"pushed from ({sync.evidence}); init's files would not reach the cluster",
                         hint=f"give bases, overlays and models paths inside {top}/ in {LAYOUT_FILE} (paths:)")
    if outside:
        prefix = f"{top}/{RELOCATED}"
        if (root / prefix).exists():
            raise InputError(f"{prefix}: exists; init would write its bases, overlays and models there (inside "
                             f"{top}/, the folder the artifact of {sync.path} is pushed from)",
                             hint=f"give them paths inside {top}/ in {LAYOUT_FILE} (paths:) and run init again")
        lay = replace(lay, bases=f"{prefix}/base", gpus=f"{prefix}/overlays/gpus", overlays=f"{prefix}/overlays",
                      models=f"{prefix}/models")
    lay = replace(lay, artifact_root=top)
    notes.append(f"Flux syncs ./{posixpath.relpath(sync.path, top)} of an OCI artifact pushed from {top}/ "
                 f"({sync.evidence}): init writes "
                 + (f"its bases, overlays and models under {lay.bases.rsplit('/', 1)[0]}/ and " if outside else "")
                 + f"spec.path relative to {top}/ (flux.artifactRoot in {LAYOUT_FILE})")
    return lay, propose(lay), None


def _monitoring(root: Path, layout: Layout, cluster: str, adopted: bool, opts: InitOptions,
                notes: list[str]) -> Layout:
    """`layout` with the monitoring stack chosen (prometheus.choose); with a layout file, the one it declares (a
    different --monitoring, --prometheus-url or --prometheus-selector is a usage error: edit the file)."""
    if opts.monitoring is not None and opts.monitoring not in MONITORING_MODES:
        raise InputError(f"--monitoring {opts.monitoring!r}: one of {', '.join(MONITORING_MODES)}")
    if (root / LAYOUT_FILE).is_file():
        declared = layout.prometheus
        asked = opts.monitoring is not None or opts.prometheus_url is not None or opts.prometheus_selectors
        if asked:
            wanted, _, _ = prometheus.choose(layout, None, root, opts.monitoring or "existing", opts.prometheus_url,
                                             opts.prometheus_selectors)
            if replace(wanted, declared=False) != replace(declared, declared=False):
                what = f"already declares the monitoring stack (mode {declared.mode})" if declared.declared else \
                    "exists without a `monitoring:` section (install mode)"
                raise InputError(f"{LAYOUT_FILE} {what}; init does not rewrite it",
                                 hint=f"edit `monitoring:` in {LAYOUT_FILE} (docs/layout-file.md), then fix what "
                                 "`kubectl triton validate` reports (MonitorNotSelected)")
        return layout
    own = [k for k in syncroots.kustomizations(root, cluster_dir(layout, cluster))
           if not k.spec.get("kubeConfig") and layout.is_own_source(*k.source_ref)] if adopted else None
    chosen, after, more = prometheus.choose(layout, own, root, opts.monitoring, opts.prometheus_url,
                                            opts.prometheus_selectors)
    notes += more
    deploys = next((k for k in own or [] if k.name == after), None)
    if deploys is not None and deploys not in local([deploys]):
        notes.append(f"models and monitoring do not wait for {deploys.namespace}/{after}, which deploys that "
                     f"Prometheus: {LAYOUT_FILE} flux.dependsOn names Kustomizations of flux-system")
        after = None
    if after is not None:
        notes.append(f"models and monitoring also wait for {after}, which deploys that Prometheus")
        layout = replace(layout, depends_on=(after, *layout.depends_on))
    return replace(layout, prometheus=chosen)


def _append_to_cluster_list(root: Path, layout: Layout, cluster: str, proposed: dict[str, str],
                            out: InitPlan) -> None:
    """A cluster folder with its own kustomization.yaml lists what Flux applies: append the new Flux files."""
    top = cluster_dir(layout, cluster)
    kfile = kustomization_file(root / top)
    if kfile is None:
        return  # Flux generates the list from every file of the folder
    entries = [rel[len(top) + 1:] for rel in proposed
               if rel.startswith(f"{top}/") and rel.count("/") == top.count("/") + 1]
    entries.append("models")
    rel = kfile.relative_to(root).as_posix()
    text = kfile.read_text(encoding="utf-8")
    updated = edit_resources(text, add=list(dict.fromkeys(entries)), source=rel)
    if updated != text:
        out.files[rel] = updated
        out.appended.append(rel)

