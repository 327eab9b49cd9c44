"""Canary rollouts of model versions, the GitOps way: pure planning over the repository's files.

Layout (docs/canary.md): the stable overlay `overlays/MODEL/GPU/` serves the version its config.pbtxt pins
(`version_policy { specific { versions: [S] } }`); the canary overlay `overlays/MODEL/GPU-canary/` builds on
the stable overlay (`resources: [../GPU]`, `nameSuffix: -canary`, its own `app.kubernetes.io/instance`
so the Services select disjoint pods) and replaces the Triton model's config in the model-config ConfigMap
with a copy pinned to version N; `overlays/MODEL/route/httproute.yaml` is a Gateway API HTTPRoute whose
weighted backendRefs (one line) split traffic between `MODEL-triton` and `MODEL-triton-canary`. Each is
registered with Flux under clusters/CLUSTER/models/. The commands read `Facts` (`read_facts`) and turn them
into a scaffold `Plan` (files to write, files to delete) that `scaffold.write_plan` applies all or nothing.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from kubectl_triton.checks.model.base import served_versions
from kubectl_triton.errors import InputError
from kubectl_triton.formats import pbtxt
from kubectl_triton.formats import yamldump as Y
from kubectl_triton.formats.yamledit import _dump as dump
from kubectl_triton.formats.yamledit import _yaml, edit_resources, resources_of
from kubectl_triton.formats.yamlio import load_all, loads_all
from kubectl_triton.gitops import inferencepool
from kubectl_triton.gitops.assembly import version_folder
from kubectl_triton.gitops.files import kustomization_file
from kubectl_triton.gitops.labels import (
    ANN_CANARY_VERSION,
    ANN_STABLE_VERSION,
    ANN_TRITON_MODEL,
    INSTANCE_LABEL,
    LABEL_MODEL,
    LABEL_TRACK,
    LABEL_VERSION,
)
from kubectl_triton.gitops.model import CANARY_SUFFIX, MODEL_COMPONENT, MODEL_METADATA, Layout, Repository
from kubectl_triton.gitops.repo import flux_kustomizations
from kubectl_triton.gitops.scaffold import Plan, flux_kustomization, resolve_cluster, triton_name, validate_name

CANARY = "canary"
SUFFIX = CANARY_SUFFIX
ROUTE_DIR = "route"
HTTP_PORT = 8000
DEFAULT_GATEWAY = "triton-gateway"
KEEP = ".gitkeep"
MAX_SERVICE_NAME = 63  # a DNS-1035 label
_NOT_GPU = ("model", ROUTE_DIR)


def service_name(model: str, canary: bool = False) -> str:
    """The Triton Service of a track: `MODEL-triton` (stable) or `MODEL-triton-canary`."""
    return f"{model}-triton" + (SUFFIX if canary else "")


def flux_name(model: str, overlay: str) -> str:
    """Flux Kustomization name of overlays/MODEL/OVERLAY (as add-model names them)."""
    return f"{model}-{overlay}"


# ---- config.pbtxt: the version policy, edited in the text --------------------------------------------

def policy_text(version: int) -> str:
    return f"version_policy: {{ specific: {{ versions: [ {version} ] }} }}"


def set_version_policy(text: str, version: int, source: str = "config.pbtxt") -> str:
    """`text` with its top-level version_policy replaced by `specific [version]` (added after the header
    fields when absent); everything else, comments included, is kept. The result is checked through
    Triton's schema: the parsed config must equal the original with only the policy changed."""
    before = pbtxt.parse(text, source)
    new = pbtxt.splice(text, ("version_policy",), policy_text(version), after=pbtxt.HEADER_FIELDS)
    after = pbtxt.parse(new, source)
    expected = type(before)()
    expected.CopyFrom(before)
    expected.version_policy.Clear()
    expected.version_policy.specific.versions.append(version)
    if after != expected:
        raise InputError(f"{source}: cannot set version_policy in this file's layout; set "
                         f"'{policy_text(version)}' by hand")
    return new


# ---- what the repository holds -----------------------------------------------------------------------

@dataclass(frozen=True)
class TritonModel:
    name: str
    config_rel: str  # models/MODEL/TM/config.pbtxt
    ensemble: bool
    backend: str
    versions: tuple[int, ...]  # numeric folders committed in git
    version_files: dict[int, tuple[str, ...]]  # version -> files under models/MODEL/TM/<v>/ (repo-relative)


@dataclass
class Facts:
    """Everything the canary commands read from the repository."""

    model: str
    cluster: str
    triton_models: dict[str, TritonModel]
    texts: dict[str, str]  # repo-relative path -> text of every file a plan may edit
    overlays: tuple[str, ...]  # overlay folder names under overlays/MODEL/ (with a kustomization.yaml)
    registered: dict[str, str]  # overlay folder name -> Flux file (repo-relative) in this cluster
    flux_entries: tuple[str, ...]  # resources of clusters/CLUSTER/models/kustomization.yaml
    model_yaml: dict = field(default_factory=dict)
    overlay_files: dict[str, tuple[str, ...]] = field(default_factory=dict)  # overlay -> its files
    layout: Layout = field(default_factory=Layout)
    kustomizations: dict[str, str] = field(default_factory=dict)  # overlay -> its kustomization file (any name)
    elsewhere: dict[str, list[str]] = field(default_factory=dict)  # overlay -> Flux files of other clusters for it

    def kustomization(self, variant: str) -> str:
        """The repository-relative kustomization file of one overlay (kustomization.yaml when it has none yet)."""
        return self.kustomizations.get(variant) or f"{self.overlay(variant)}/kustomization.yaml"

    @property
    def flux_dir(self) -> str:
        return self.layout.cluster_models_dir(self.cluster)

    def overlay(self, variant: str | None = None) -> str:
        """The model's overlays folder, or one overlay in it (repository-relative)."""
        return self.layout.overlay_dir(self.model, variant)

    @property
    def model_dir(self) -> str:
        return self.layout.model_dir(self.model)

    @property
    def canary_overlay(self) -> str | None:
        found = [o for o in self.overlays if o.endswith(SUFFIX)]
        if len(found) > 1:
            raise InputError(f"{self.overlay()}/: several canary overlays ({', '.join(found)}); keep one")
        return found[0] if found else None

    @property
    def route_rel(self) -> str:
        return f"{self.overlay(ROUTE_DIR)}/httproute.yaml"

    def text(self, rel: str) -> str | None:
        return self.texts.get(rel)


def read_facts(root: Path, model: str, cluster: str | None) -> Facts:
    """Read the model's folders, its Flux registration in CLUSTER and the files a plan may edit."""
    validate_name(model)
    layout = Repository.at(root).layout
    mdir, odir = root / layout.model_dir(model), root / layout.overlay_dir(model)
    if not mdir.is_dir() or not (odir / MODEL_COMPONENT).is_dir():
        raise InputError(f"{model}: no such model ({layout.model_dir(model)}/ and "
                         f"{layout.overlay_dir(model, MODEL_COMPONENT)}/ are needed)",
                         hint="kubectl triton add-model creates one")
    cluster_name = resolve_cluster(root, cluster)
    texts: dict[str, str] = {}

    def read(rel: str) -> str | None:
        path = root / rel
        if not path.is_file():
            return None
        try:
            texts[rel] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"{rel}: cannot read: {getattr(err, 'strerror', None) or err}") from None
        return texts[rel]

    tms: dict[str, TritonModel] = {}
    for cfg in sorted(mdir.glob("*/config.pbtxt")):
        rel = cfg.relative_to(root).as_posix()
        config = pbtxt.parse(read(rel) or "", rel)
        folder = cfg.parent
        versions = sorted(v for p in folder.iterdir() if p.is_dir() and (v := version_folder(p.name)) is not None)
        files = {v: tuple(sorted(p.relative_to(root).as_posix() for p in (folder / str(v)).rglob("*")
                                 if p.is_file() and "__pycache__" not in p.parts)) for v in versions}
        tms[folder.name] = TritonModel(folder.name, rel, config.platform == "ensemble",
                                       config.backend or config.platform, tuple(versions), files)
    kustomizations = {p.name: f.relative_to(root).as_posix() for p in sorted(odir.iterdir()) if p.is_dir()
                      and (f := kustomization_file(p)) is not None}
    overlays = tuple(sorted(kustomizations))
    overlay_files = {o: tuple(sorted(p.relative_to(root).as_posix() for p in (odir / o).rglob("*")
                                     if p.is_file() or p.is_symlink())) for o in overlays}
    for rel in kustomizations.values():
        read(rel)
    kfile = f"{layout.cluster_models_dir(cluster_name)}/kustomization.yaml"
    ktext = read(kfile) or ""
    registered = {}
    elsewhere: dict[str, list[str]] = {}
    prefix = f"./{layout.overlay_dir(model)}/"
    here = root / layout.cluster_dir(cluster_name)
    own = flux_kustomizations(root, here)
    others = [fk for fk in flux_kustomizations(root, tolerant=True)  # another cluster's malformed file is not ours
              if not fk.file.resolve().is_relative_to(here.resolve())]
    for fk in own + others:
        path = fk.path.rstrip("/")
        if not (path.startswith(prefix) and "/" not in path[len(prefix):]):
            continue
        rel = fk.file.relative_to(root).as_posix()
        if fk in own:
            registered[path[len(prefix):]] = rel
            read(rel)
        else:
            elsewhere.setdefault(path[len(prefix):], []).append(rel)
    for name in ("httproute.yaml", "kustomization.yaml", "inferencepool.yaml"):
        read(f"{layout.overlay_dir(model, ROUTE_DIR)}/{name}")
    meta_text = read(f"{layout.model_dir(model)}/{MODEL_METADATA}")
    meta = {}
    if meta_text is not None:
        docs = load_all(root / layout.model_dir(model) / MODEL_METADATA)
        meta = docs[0] if docs and isinstance(docs[0], dict) else {}
    return Facts(model=model, cluster=cluster_name, triton_models=tms, texts=texts, overlays=overlays,
                 registered=registered, flux_entries=tuple(resources_of(ktext, kfile)), model_yaml=meta,
                 overlay_files=overlay_files, layout=layout, kustomizations=kustomizations, elsewhere=elsewhere)


# ---- choices ------------------------------------------------------------------------------------------

def pick_triton_model(facts: Facts, name: str | None) -> TritonModel:
    """--triton-model, else MODEL with '-' written '_', else the model's only non-ensemble Triton model."""
    tms = facts.triton_models
    if name is not None:
        if name not in tms:
            raise InputError(f"--triton-model {name!r}: not a Triton model of {facts.model} "
                             f"(models/{facts.model}/ holds {', '.join(tms) or 'none'})")
        tm = tms[name]
    else:
        candidates = [t for t in tms.values() if not t.ensemble]
        default = tms.get(triton_name(facts.model))
        if default is not None and not default.ensemble:
            tm = default
        elif len(candidates) == 1:
            tm = candidates[0]
        else:
            raise InputError(f"{facts.model}: several Triton models ({', '.join(t.name for t in candidates)}); "
                             "name the versioned one with --triton-model")
    if tm.ensemble:
        raise InputError(f"--triton-model {tm.name}: an ensemble has no versions of its own; version one of "
                         "its steps (the ensemble calls the version that the step's policy serves)")
    return tm


def pick_stable_gpu(facts: Facts, gpu: str | None) -> str:
    """--gpu, else the only stable overlay of MODEL registered with Flux in the cluster."""
    stable = [o for o in facts.registered if o not in _NOT_GPU and not o.endswith(SUFFIX)
              and not o.endswith("-engine-build")]
    if gpu is not None:
        if gpu.endswith(SUFFIX) or gpu in _NOT_GPU or gpu not in facts.overlays:
            choices = ", ".join(o for o in facts.overlays if o not in _NOT_GPU and not o.endswith(SUFFIX)
                                and not o.endswith("-engine-build"))
            raise InputError(f"--gpu {gpu!r}: no overlay overlays/{facts.model}/{gpu}/; available: {choices}")
        if gpu not in stable:
            raise InputError(f"--gpu {gpu}: overlays/{facts.model}/{gpu} is not registered with Flux in "
                             f"{facts.layout.cluster_dir(facts.cluster)}: a canary needs a stable track that runs")
        return gpu
    if len(stable) == 1:
        return stable[0]
    if not stable:
        raise InputError(f"{facts.model}: no overlay of it is registered with Flux in clusters/{facts.cluster}")
    raise InputError(f"{facts.model}: several stable overlays run in clusters/{facts.cluster} "
                     f"({', '.join(sorted(stable))}); pick one with --gpu")


def _config(facts: Facts, tm: TritonModel) -> Any:
    return pbtxt.parse(facts.texts[tm.config_rel], tm.config_rel)


def stable_version(facts: Facts, tm: TritonModel, canary: int, requested: int | None) -> tuple[int, bool]:
    """The version the stable track serves and whether config.pbtxt already pins it: the pinned one, else
    `requested` (--stable-version), else what Triton's `latest` policy serves today (the highest committed version
    other than the canary's), else model.yaml's `version`, else 1."""
    kind, versions = served_versions(_config(facts, tm))
    if requested is not None:
        if requested < 1:
            raise InputError(f"--stable-version {requested}: Triton versions are positive integers")
        if requested == canary:
            raise InputError(f"--stable-version {requested}: that is the canary's version (--version)")
        if tm.versions and requested not in tm.versions:
            raise InputError(f"--stable-version {requested}: {facts.model_dir}/{tm.name}/{requested}/ is not "
                             f"committed (versions: {', '.join(map(str, tm.versions))})")
    if kind == "specific" and len(versions) == 1:
        if requested is not None and requested != versions[0]:
            raise InputError(f"--stable-version {requested}: {tm.config_rel} pins version {versions[0]}")
        return versions[0], True
    if requested is not None:
        return requested, False
    if kind != "latest" or versions != [1]:
        raise InputError(f"{tm.config_rel}: the stable track serves several versions ({kind} policy); pin "
                         "one with 'version_policy: { specific: { versions: [ N ] } }' or pass --stable-version")
    others = [v for v in tm.versions if v != canary]
    meta = facts.model_yaml.get("version")
    if others:
        return max(others), False
    if isinstance(meta, int) and meta != canary:
        return meta, False
    return 1, False


def version_entries(tm: TritonModel, version: int, from_dir: str) -> list[str]:
    """configMapGenerator entries (`KEY=<path from from_dir>`) of the files committed for one version: the key is
    the path inside the model folder (`TM/N/model.py` -> `TM__N__model.py`)."""
    top = posixpath.dirname(posixpath.dirname(tm.config_rel))  # the model folder holding TM/
    return [f"{posixpath.relpath(rel, top).replace('/', '__')}={Layout.reference(from_dir, rel)}"
            for rel in tm.version_files.get(version, ())]


# ---- file texts ---------------------------------------------------------------------------------------

def canary_kustomization(facts: Facts, gpu: str, tm: TritonModel, version: int, stable: int) -> str:
    """overlays/MODEL/GPU-canary/kustomization.yaml: the stable overlay, renamed, relabelled, pinned to N."""
    m = facts.model
    files = [f"{tm.name}__config.pbtxt={tm.name}.config.pbtxt",
             *version_entries(tm, version, facts.overlay(f"{gpu}{SUFFIX}"))]
    header = "\n".join([
        f"Canary of {m}: Triton model {tm.name} version {version} beside {facts.overlay(gpu)} (version {stable}).",
        f"{tm.name}.config.pbtxt is {tm.config_rel} pinned to version {version}.",
        f"Traffic split: {facts.route_rel}. Written by `kubectl triton canary`;",
        f"`kubectl triton promote {m}` or `kubectl triton abort {m}` removes this folder."])
    fields = Y.seq([Y.mapping(path="spec/selector/matchLabels", kind="ServiceMonitor", create=True)])
    if "triton-multinode" in facts.texts.get(facts.kustomization(gpu), ""):
        # A multi-node model's canary is a whole second group: its pod templates carry the canary labels too.
        fields += [Y.mapping(path=f"spec/leaderWorkerTemplate/{t}/metadata/labels", kind="LeaderWorkerSet",
                             create=True) for t in ("leaderTemplate", "workerTemplate")]
    instance = Y.mapping(pairs=Y.mapping([(INSTANCE_LABEL, f"{m}-canary")]), includeSelectors=True, fields=fields)
    track = Y.mapping(pairs=Y.mapping([(LABEL_MODEL, m), (LABEL_TRACK, CANARY), (LABEL_VERSION, str(version))]),
                      includeTemplates=True)
    doc = Y.mapping(
        apiVersion="kustomize.config.k8s.io/v1beta1", kind="Kustomization", nameSuffix=SUFFIX,
        labels=Y.seq([instance, track]),
        commonAnnotations=Y.mapping([(ANN_TRITON_MODEL, tm.name), (ANN_STABLE_VERSION, str(stable))]),
        resources=Y.seq([f"../{gpu}"]),
        configMapGenerator=Y.seq([Y.mapping(name="model-config", namespace=facts.layout.namespace, behavior="merge",
                                            files=Y.seq(files))]))
    if "autoscaling/keda" in facts.texts.get(facts.kustomization(gpu), ""):
        # the stable overlay wrote its own Service into the ScaledObject's queue query before this nameSuffix: the
        # canary scales on its own queue (the wake-up trigger stays on the model's route, which both tracks share)
        doc["replacements"] = Y.seq([Y.mapping(
            source=Y.mapping(kind="Service", fieldPath="metadata.name"),
            targets=Y.seq([Y.mapping(select=Y.mapping(kind="ScaledObject"),
                                     fieldPaths=Y.seq(["spec.triggers.[name=queue-compute-ratio].metadata.query"]),
                                     options=Y.mapping(delimiter='"', index=3))]))])
    return Y.dumps(doc, header)


def _gateway(gateway: str) -> tuple[str | None, str]:
    ns, _, name = gateway.rpartition("/")
    dns = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
    if not dns.fullmatch(name) or (ns and not dns.fullmatch(ns)) or len(name) > 253:
        raise InputError(f"--gateway {gateway!r}: expected [NAMESPACE/]NAME of a Gateway (DNS names)")
    return ns or None, name


def split_line(model: str, weight: int | None) -> list[dict]:
    refs = [{"name": service_name(model), "port": HTTP_PORT, "weight": 100 - (weight or 0)}]
    if weight is not None:
        refs.append({"name": service_name(model, True), "port": HTTP_PORT, "weight": weight})
    return refs


def route_files(facts: Facts, tm: TritonModel, gateway: str, stable: int, version: int, weight: int) -> dict:
    """overlays/MODEL/route/{kustomization,httproute}.yaml for a new route."""
    m = facts.model
    ns, name = _gateway(gateway)
    header = (f"{m} behind the Gateway: requests for its Triton models go to the stable and canary Services by "
              f"weight.\n`kubectl triton canary {m} --weight P` edits the backendRefs line (weights sum to 100).")
    matches = Y.seq(Y.mapping(path=Y.flow({"type": "PathPrefix", "value": f"/v2/models/{p}"}))
                    for p in sorted(facts.triton_models))
    route = Y.mapping(
        apiVersion="gateway.networking.k8s.io/v1", kind="HTTPRoute",
        metadata=Y.mapping(name=m, labels=Y.mapping([(INSTANCE_LABEL, m)]), annotations=Y.mapping(
            [(ANN_TRITON_MODEL, tm.name), (ANN_STABLE_VERSION, str(stable)), (ANN_CANARY_VERSION, str(version))])),
        spec=Y.mapping(parentRefs=Y.seq([Y.mapping(name=name, namespace=ns)]),
                       rules=Y.seq([Y.mapping(matches=matches, backendRefs=_flow_refs(split_line(m, weight)))])))
    kust = Y.mapping(apiVersion="kustomize.config.k8s.io/v1beta1", kind="Kustomization",
                     namespace=facts.layout.namespace, resources=Y.seq(["httproute.yaml"]))
    base = facts.overlay(ROUTE_DIR)
    return {f"{base}/kustomization.yaml": Y.dumps(kust), f"{base}/httproute.yaml": Y.dumps(route, header)}


# ---- round-trip edits -----------------------------------------------------------------------------------

def _load(text: str, source: str) -> tuple[Any, Any]:
    return _yaml(text, source)


def _dump(yaml: Any, doc: Any) -> str:
    return dump(yaml, doc)


def _flow_refs(refs: list[dict]) -> Any:
    return Y.flow([Y.flow(ref) for ref in refs])


def _backends(doc: Any, model: str) -> tuple[str, str, Any]:
    """(stable backend name, canary backend name, refs(weight)) of a route: the two Services, or the two
    InferencePools when the route sends traffic to pools (add-model --route inferencepool)."""
    if inferencepool.is_pool_route(doc):
        return (inferencepool.pool_name(model), inferencepool.pool_name(model, True),
                lambda weight: inferencepool.refs(model, weight))
    return service_name(model), service_name(model, True), lambda weight: split_line(model, weight)


def _shaped(value: Any, kind: type, source: str, field: str) -> Any:
    """`value` when it is of `kind` (None: empty); otherwise a one-line error naming the file and field (a
    hand edit kubectl triton cannot follow)."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise InputError(f"{source}: {field} must be a {'list' if kind is list else 'mapping'}, got "
                         f"{type(value).__name__}", hint="fix the file by hand (kustomize and Flux refuse it too)")
    return value


def _rules(doc: Any, source: str) -> list[dict]:
    """The route's rules that carry a list of backendRefs."""
    spec = _shaped(doc.get("spec") if isinstance(doc, dict) else None, dict, source, "spec")
    rules = _shaped(spec.get("rules"), list, source, "spec.rules")
    return [r for r in rules if isinstance(r, dict) and isinstance(r.get("backendRefs"), list)]


def _split_rules(doc: Any, model: str, source: str) -> list[Any]:
    stable, _, _ = _backends(doc, model)
    rules = [r for r in _rules(doc, source)
             if any(isinstance(b, dict) and b.get("name") == stable for b in r["backendRefs"])]
    if not rules:
        raise InputError(f"{source}: no rule sends traffic to {stable}")
    return rules


def route_set_split(text: str, model: str, weight: int | None, *, stable: int,
                    canary: int | None, source: str, triton_model: str | None = None) -> str:
    """The route with its split rewritten: stable (+ canary at `weight`) and the version annotations (and the Triton
    model they are versions of, when a new canary names it)."""
    yaml, doc = _load(text, source)
    stable_name, canary_name, make_refs = _backends(doc, model)
    for rule in _split_rules(doc, model, source):
        refs = rule["backendRefs"]
        keep = [b for b in refs if not (isinstance(b, dict) and b.get("name") in (stable_name, canary_name))]
        rule["backendRefs"] = _flow_refs(make_refs(weight)) if not keep else refs
        if keep:
            raise InputError(f"{source}: a rule also sends traffic to {keep[0].get('name')}; edit it by hand")
    meta = _shaped(doc.setdefault("metadata", {}), dict, source, "metadata")
    ann = _shaped(meta.setdefault("annotations", {}), dict, source, "metadata.annotations")
    if triton_model is not None:
        ann[ANN_TRITON_MODEL] = triton_model
    ann[ANN_STABLE_VERSION] = _dq(str(stable))
    if canary is None:
        ann.pop(ANN_CANARY_VERSION, None)
    else:
        ann[ANN_CANARY_VERSION] = _dq(str(canary))
    return _dump(yaml, doc)


def _dq(text: str) -> Any:
    return DoubleQuotedScalarString(text)


def route_set_weight(text: str, model: str, weight: int, source: str) -> str:
    """Only the two weights change (the backendRefs line)."""
    yaml, doc = _load(text, source)
    stable_name, canary_name, _ = _backends(doc, model)
    changed = False
    for rule in _split_rules(doc, model, source):
        refs = {b.get("name"): b for b in rule["backendRefs"] if isinstance(b, dict)}
        if canary_name not in refs:
            continue
        refs[stable_name]["weight"] = 100 - weight
        refs[canary_name]["weight"] = weight
        changed = True
    if not changed:
        raise InputError(f"{source}: no rule sends traffic to the canary {canary_name}")
    return _dump(yaml, doc)


def route_canary(text: str, model: str, source: str) -> tuple[int | None, int | None, int | None]:
    """(stable version, canary version, canary weight) as the route records them."""
    docs = loads_all(text, source)
    doc = docs[0] if docs and isinstance(docs[0], dict) else {}
    meta = _shaped(doc.get("metadata"), dict, source, "metadata")
    ann = _shaped(meta.get("annotations"), dict, source, "metadata.annotations")
    _, canary_name, _ = _backends(doc, model)
    weight = None
    for rule in _rules(doc, source):
        for b in rule["backendRefs"]:
            if isinstance(b, dict) and b.get("name") == canary_name:
                weight = b.get("weight", 1)
    return _int(ann.get(ANN_STABLE_VERSION)), _int(ann.get(ANN_CANARY_VERSION)), weight


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def flux_depends(text: str, *, add: tuple[str, ...] = (), remove: tuple[str, ...] = (), source: str) -> str:
    """A Flux Kustomization file with dependsOn entries added/removed (round trip)."""
    yaml, doc = _load(text, source)
    spec = _shaped(doc.setdefault("spec", CommentedMap()), dict, source, "spec")
    deps = _shaped(spec.get("dependsOn"), list, source, "spec.dependsOn")
    if spec.get("dependsOn") is None:
        deps = spec["dependsOn"] = CommentedSeq()
    for i in reversed(range(len(deps))):
        if isinstance(deps[i], dict) and deps[i].get("name") in remove:
            del deps[i]
    names = {d.get("name") for d in deps if isinstance(d, dict)}
    for name in add:
        if name not in names:
            deps.append(CommentedMap([("name", name)]))
    return _dump(yaml, doc)


def component_add_files(text: str, entries: list[str], source: str) -> str:
    """The model Component with `entries` appended to the model-config generator's files."""
    yaml, doc = _load(text, source)
    generators = _shaped(doc.get("configMapGenerator"), list, source, "configMapGenerator")
    gens = [g for g in generators if isinstance(g, dict) and g.get("name") == "model-config"]
    if not gens:
        raise InputError(f"{source}: no model-config configMapGenerator")
    files = _shaped(gens[0].setdefault("files", []), list, source, "configMapGenerator[model-config].files")
    present = {str(f).split("=", 1)[0] for f in files}
    added = False
    for entry in entries:
        if entry.split("=", 1)[0] not in present:
            files.append(entry)
            added = True
    return _dump(yaml, doc) if added else text


def model_yaml_version(text: str, version: int, source: str) -> str:
    yaml, doc = _load(text, source)
    if doc.get("version") == version or ("version" not in doc and version == 1):
        return text
    doc["version"] = version
    return _dump(yaml, doc)


# ---- plans ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rollout:
    """A canary in progress, as the repository describes it."""

    gpu: str  # stable overlay
    canary_overlay: str
    triton_model: str
    stable: int
    canary: int
    weight: int | None


def current(facts: Facts) -> Rollout | None:
    """The canary in progress, or None."""
    overlay = facts.canary_overlay
    if overlay is None:
        return None
    krel = facts.kustomization(overlay)
    docs = loads_all(facts.texts.get(krel, ""), krel)
    doc = docs[0] if docs and isinstance(docs[0], dict) else {}
    resources = _shaped(doc.get("resources"), list, krel, "resources")
    gpu = next((str(r)[3:] for r in resources if str(r).startswith("../")), overlay[:-len(SUFFIX)])
    labels: dict[str, Any] = {}
    for entry in _shaped(doc.get("labels"), list, krel, "labels"):
        if isinstance(entry, dict) and isinstance(entry.get("pairs"), dict):
            labels.update(entry["pairs"])
    ann = _shaped(doc.get("commonAnnotations"), dict, krel, "commonAnnotations")
    tm = str(ann.get(ANN_TRITON_MODEL) or "")
    canary, stable = _int(labels.get(LABEL_VERSION)), _int(ann.get(ANN_STABLE_VERSION))
    if not tm or canary is None or stable is None:
        raise InputError(f"{krel}: not a canary overlay written by kubectl triton (labels {LABEL_VERSION}, "
                         f"annotations {ANN_TRITON_MODEL}, {ANN_STABLE_VERSION} are needed)")
    weight = None
    if facts.route_rel in facts.texts:
        weight = route_canary(facts.texts[facts.route_rel], facts.model, facts.route_rel)[2]
    return Rollout(gpu, overlay, tm, stable, canary, weight)


def check_weight(weight: int) -> None:
    if not 0 <= weight <= 100:
        raise InputError(f"--weight {weight}: a percentage from 0 to 100")


def plan_start(facts: Facts, *, version: int, weight: int, gpu: str | None = None,
               triton_model: str | None = None, stable: int | None = None,
               gateway: str = DEFAULT_GATEWAY) -> Plan:
    """A new canary: canary overlay + pinned config, stable pinned, route, Flux registration."""
    check_weight(weight)
    if version < 1:
        raise InputError(f"--version {version}: Triton versions are positive integers")
    if facts.canary_overlay is not None:
        raise InputError(f"{facts.model}: a canary is in progress (overlays/{facts.model}/{facts.canary_overlay});"
                         f" change its weight with --weight alone, or promote/abort it first")
    service = service_name(facts.model, canary=True)
    if len(service) > MAX_SERVICE_NAME:
        raise InputError(f"{facts.model}: the canary's Service {service} would have {len(service)} characters, more "
                         f"than a Service name may ({MAX_SERVICE_NAME}); a canary needs a model name of at most "
                         f"{MAX_SERVICE_NAME - len(service) + len(facts.model)} characters")
    tm = pick_triton_model(facts, triton_model)
    gpu = pick_stable_gpu(facts, gpu)
    s, pinned = stable_version(facts, tm, version, stable)
    if s == version:
        raise InputError(f"--version {version}: the stable track already serves version {version}")
    m, files = facts.model, {}
    folder = f"{facts.model_dir}/{tm.name}/{version}"
    committed = {"python": "model.py", "vllm": "model.json"}  # backends whose versions live in git, by file
    if tm.backend in committed and f"{folder}/{committed[tm.backend]}" not in tm.version_files.get(version, ()):
        raise InputError(f"--version {version}: commit {folder}/{committed[tm.backend]} first ({tm.backend} models "
                         "keep their versions side by side in git)")
    if not tm.version_files.get(version):
        # Model files come from the artifact store; the committed folder declares the version, so the
        # assembled repository (and validate) have it and the pod links the artifacts into it.
        files[f"{folder}/{KEEP}"] = ""
        tm = replace(tm, version_files={**tm.version_files, version: (f"{folder}/{KEEP}",)})
    stable_text = facts.texts[tm.config_rel]
    if not pinned:
        stable_text = set_version_policy(stable_text, s, tm.config_rel)
        files[tm.config_rel] = stable_text
    canary_dir = facts.overlay(f"{gpu}{SUFFIX}")
    files[f"{canary_dir}/kustomization.yaml"] = canary_kustomization(facts, gpu, tm, version, s)
    files[f"{canary_dir}/{tm.name}.config.pbtxt"] = set_version_policy(stable_text, version, tm.config_rel)
    stable_flux, canary_flux, route_flux = (flux_name(m, gpu), flux_name(m, gpu + SUFFIX), flux_name(m, ROUTE_DIR))
    files[f"{facts.flux_dir}/{canary_flux}.yaml"] = flux_kustomization(
        canary_flux, canary_dir, timeout=_timeout(facts, gpu), layout=facts.layout)
    if facts.route_rel in facts.texts:
        if gateway != DEFAULT_GATEWAY:
            raise InputError(f"--gateway {gateway}: {facts.route_rel} exists and keeps its parentRefs; edit them there")
        files[facts.route_rel] = route_set_split(facts.texts[facts.route_rel], m, weight, stable=s, canary=version,
                                                 source=facts.route_rel, triton_model=tm.name)
        files.update(_canary_pool_files(facts))
    else:
        files.update(route_files(facts, tm, gateway, s, version, weight))
    route_file = facts.registered.get(ROUTE_DIR)
    if route_file:
        files[route_file] = flux_depends(facts.texts[route_file], add=(stable_flux, canary_flux), source=route_file)
    else:
        route_file = f"{facts.flux_dir}/{route_flux}.yaml"
        files[route_file] = flux_kustomization(route_flux, facts.overlay(ROUTE_DIR), timeout="5m",
                                               depends=(stable_flux, canary_flux), layout=facts.layout)
    _register(facts, files, add=[f"{canary_flux}.yaml", Path(route_file).name], remove=[])
    return Plan(files)


def _pool_route(facts: Facts) -> bool:
    docs = loads_all(facts.texts.get(facts.route_rel, ""), facts.route_rel)
    return bool(docs) and inferencepool.is_pool_route(docs[0])


def _canary_pool_files(facts: Facts) -> dict[str, str]:
    """For a route through InferencePools: the canary's pool (selecting the canary track only), its endpoint
    picker unless the platform provides it, both listed in the route's kustomization."""
    if not _pool_route(facts):
        return {}
    base = facts.overlay(ROUTE_DIR)
    stable_rel, kust_rel = f"{base}/inferencepool.yaml", f"{base}/kustomization.yaml"
    if stable_rel not in facts.texts or kust_rel not in facts.texts:
        raise InputError(f"{base}/: the route sends traffic to InferencePools but inferencepool.yaml or "
                         "kustomization.yaml is missing")
    stable = facts.texts[stable_rel]
    picker = inferencepool.picker_of(stable, stable_rel)
    files = {f"{base}/inferencepool-canary.yaml": inferencepool.pool_yaml(
        facts.model, canary=True, multinode=inferencepool.pool_selector_is_multinode(stable, stable_rel),
        picker=picker, port=inferencepool.pool_port(stable, stable_rel))}
    add = ["inferencepool-canary.yaml"]
    if picker is None:
        files[f"{base}/{inferencepool.epp_dir(True)}/kustomization.yaml"] = inferencepool.epp_kustomization(
            facts.model, canary=True, layout=facts.layout)
        add.append(inferencepool.epp_dir(True))
    files[kust_rel] = edit_resources(facts.texts[kust_rel], add=add, source=kust_rel)
    return files


def _timeout(facts: Facts, gpu: str) -> str:
    """The stable overlay's Flux timeout, so the canary gets the same budget."""
    rel = facts.registered.get(gpu)
    if rel and rel in facts.texts:
        docs = loads_all(facts.texts[rel], rel)
        first = docs[0] if docs and isinstance(docs[0], dict) else {}
        spec = first.get("spec")
        value = spec.get("timeout") if isinstance(spec, dict) else None
        if value:
            return str(value)
    return "15m"


def _register(facts: Facts, files: dict[str, str], *, add: list[str], remove: list[str]) -> None:
    kfile = f"{facts.flux_dir}/kustomization.yaml"
    text = facts.texts.get(kfile, "")
    updated = edit_resources(text, add=add, remove=remove, source=kfile)
    if updated != text:
        files[kfile] = updated


def plan_weight(facts: Facts, weight: int, version: int | None = None) -> Plan:
    """Change the split of the canary in progress: one line of the route."""
    check_weight(weight)
    ro = current(facts)
    if ro is None:
        raise InputError(f"{facts.model}: no canary in progress; start one with --version N --weight P")
    if version is not None and version != ro.canary:
        raise InputError(f"--version {version}: the canary in progress serves version {ro.canary}; promote or "
                         "abort it before starting another")
    if facts.route_rel not in facts.texts:
        raise InputError(f"{facts.route_rel}: missing; the canary has no route to change")
    text = facts.texts[facts.route_rel]
    new = route_set_weight(text, facts.model, weight, facts.route_rel)
    return Plan({facts.route_rel: new})


def _end(facts: Facts, promote: bool) -> tuple[Plan, Rollout]:
    ro = current(facts)
    if ro is None:
        raise InputError(f"{facts.model}: no canary in progress (no {facts.overlay()}/*{SUFFIX}/)")
    m, files = facts.model, {}
    others = facts.elsewhere.get(ro.canary_overlay, [])
    if others:  # the canary folder is shared: ending it here would leave the other clusters' Flux pointing at nothing
        where = "" if ro.canary_overlay in facts.registered else f", not in clusters/{facts.cluster}"
        raise InputError(f"{facts.overlay(ro.canary_overlay)} is registered with Flux in {', '.join(others)}{where}",
                         hint="promote or abort it with --cluster naming that cluster (and remove the other "
                              "registrations by hand first when several clusters run it)")
    tm = facts.triton_models.get(ro.triton_model)
    if tm is None:
        raise InputError(f"{facts.overlay(ro.canary_overlay)}: Triton model {ro.triton_model} is not in "
                         f"{facts.model_dir}/")
    version = ro.canary if promote else ro.stable
    if promote:
        files[tm.config_rel] = set_version_policy(facts.texts[tm.config_rel], version, tm.config_rel)
        comp = facts.kustomization(MODEL_COMPONENT)
        entries = version_entries(tm, version, facts.overlay(MODEL_COMPONENT))
        if entries:
            new = component_add_files(facts.texts[comp], entries, comp)
            if new != facts.texts[comp]:
                files[comp] = new
        meta = f"{facts.model_dir}/{MODEL_METADATA}"
        if meta in facts.texts:
            new = model_yaml_version(facts.texts[meta], version, meta)
            if new != facts.texts[meta]:
                files[meta] = new
        if files.get(tm.config_rel) == facts.texts[tm.config_rel]:
            del files[tm.config_rel]
    if facts.route_rel in facts.texts:
        files[facts.route_rel] = route_set_split(facts.texts[facts.route_rel], m, None, stable=version, canary=None,
                                                 source=facts.route_rel)
    delete = list(facts.overlay_files.get(ro.canary_overlay, ()))
    if facts.route_rel in facts.texts and _pool_route(facts):
        base = facts.overlay(ROUTE_DIR)
        canary_dir = f"{base}/{inferencepool.epp_dir(True)}/"
        delete += [p for p in facts.overlay_files.get(ROUTE_DIR, ())
                   if p == f"{base}/inferencepool-canary.yaml" or p.startswith(canary_dir)]
        kust_rel = f"{base}/kustomization.yaml"
        if kust_rel in facts.texts:
            new = edit_resources(facts.texts[kust_rel], remove=["inferencepool-canary.yaml",
                                                                inferencepool.epp_dir(True)], source=kust_rel)
            if new != facts.texts[kust_rel]:
                files[kust_rel] = new
    canary_flux = flux_name(m, ro.canary_overlay)
    route_file = facts.registered.get(ROUTE_DIR)
    if route_file:
        files[route_file] = flux_depends(facts.texts[route_file], remove=(canary_flux,), source=route_file)
    keep = f"{facts.model_dir}/{tm.name}/{ro.canary}/{KEEP}"
    if not promote and tm.version_files.get(ro.canary) == (keep,):
        delete.append(keep)  # the marker `canary` wrote for an artifact-backed version
    flux_file = facts.registered.get(ro.canary_overlay)
    remove = []
    if flux_file:
        delete.append(flux_file)
        remove.append(Path(flux_file).name)
    _register(facts, files, add=[], remove=remove)
    return Plan(files, tuple(delete)), ro


def plan_promote(facts: Facts) -> tuple[Plan, Rollout]:
    """The canary's version becomes stable (config.pbtxt pin, model files), the canary is removed and the
    route sends everything to the stable Service."""
    return _end(facts, promote=True)


def plan_abort(facts: Facts) -> tuple[Plan, Rollout]:
    """The canary is removed; the stable version and config stay; the route sends everything to stable."""
    return _end(facts, promote=False)
