"""`validate`'s orchestration: render every overlay and Flux path once, then run every check on the results.

The checks themselves are pure (checks/*, schemas, compat); this module only gathers their inputs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kubectl_triton.adapters import kustomize, network
from kubectl_triton.checks import server as server_check
from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.manifests import (
    artifacts,
    clusterversions,
    convergence,
    enginebuild,
    gpufacts,
    lora_trtllm,
    modelrewrites,
    monitoring,
    multinode,
    nodecache,
    practices,
    routes,
    security,
)
from kubectl_triton.checks.model.modelrepo import check_repository, load_repository
from kubectl_triton.checks.model.triton import check_repository_with_triton
from kubectl_triton.checks.registry import register
from kubectl_triton.compat.repo_check import check_metadata, check_repo
from kubectl_triton.errors import RenderError, TritonCtlError
from kubectl_triton.formats import schemas, yamlio
from kubectl_triton.formats.duration import parse_duration
from kubectl_triton.gitops import assembly, inputs, repo, workloads
from kubectl_triton.gitops.labels import INSTANCE_LABEL
from kubectl_triton.gitops.layout import LAYOUT_FILE, ClusterProvides, LayoutError, read_cluster_provides
from kubectl_triton.gitops.model import (
    FluxBuild,
    FluxKustomization,
    FluxRender,
    Layout,
    Repository,
    flux_build,
    flux_rendering,
    substitute_objects,
)

# kustomize's words when a remote resource (an https:// URL, a git repository) cannot be reached at all: where this
# machine reaches no network (adapters/network.py), the machine is at fault and the path is not checked; with a
# network the same words are the repository's (a mistyped host), and an answer such as 404 is an error anyway
_UNREACHABLE = re.compile(r"dial tcp|no such host|i/o timeout|connection refused|network is unreachable|"
                          r"TLS handshake timeout|Could not resolve host")
RENDER_FAILED = register("RenderFailed", "error", "overlay",
                         "kustomize cannot build the folder (as Flux's build would fail)",
                         "run `kubectl kustomize PATH` and fix the file it names")
SCHEMA_INVALID = register("SchemaInvalid", "error", "overlay", "a rendered object fails its Kubernetes or CRD schema",
                          "fix the field named; the API server (or Flux's dry run) would reject the object")
SCHEMA_MISSING = register("SchemaMissing", "warning", "overlay", "no schema is known for a rendered kind",
                          "check the kind and apiVersion; custom resources need their CRD schema bundled")
FLUX_DEPENDENCY = register("FluxDependencyMissing", "error", "cluster",
                           "a Flux Kustomization dependsOn something no Flux Kustomization of the repository is",
                           "name an existing Kustomization in dependsOn (name and namespace), or add it")
FLUX_PATH = register("FluxPathInvalid", "error", "cluster", "a Flux Kustomization's spec.path is missing or leaves "
                     "the repository", "point spec.path at a folder of this repository (relative to its root)")
FLUX_UNBUILDABLE = register("FluxPathUnbuildable", "warning", "cluster",
                            "a Flux Kustomization's path has no kustomization.yaml and holds YAML files that are no "
                            "Kubernetes objects: the kustomization Flux generates for it (every manifest below it) "
                            "fails on them, unless .sourceignore or the source's spec.ignore leaves them out",
                            "add a kustomization.yaml listing the manifests, or leave the files out of the source")
FLUX_PATH_VARIABLE = register(
    "FluxPathVariable", "info", "cluster",
    "a Flux Kustomization's spec.path holds a postBuild variable that no Kustomization of this repository "
    "substitutes (the one syncing the cluster folder, outside the repository, may): the path is not checked",
    "nothing to fix; substitute it in a Kustomization of the repository to have it checked")
FLUX_VARIABLE_UNKNOWN = register(
    "FluxVariableUnknown", "info", "cluster",
    "rendered objects hold postBuild variables whose values are not in the repository (a Secret, a ConfigMap "
    "created elsewhere): the fields that hold them are not judged",
    "nothing to fix; give the values in spec.postBuild.substitute or a ConfigMap of the repository to have them "
    "checked")
FLUX_ARTIFACT_ROOT = register(
    "FluxArtifactRoot", "info", "cluster",
    "this repository's own Flux source is an OCI artifact (or bucket) pushed from a sub-folder: spec.paths are read "
    "below that folder (the one of the cluster folders' parents under which they exist)",
    "nothing to fix")
DUPLICATE_OBJECT = register("DuplicateObject", "error", "cluster",
                            "two Flux Kustomizations of one cluster render the same object",
                            "render each object from one Kustomization only (a model on one GPU type per cluster)")
MODEL_REPOSITORY = register("ModelRepositoryInvalid", "error", "overlay",
                            "the model-repository ConfigMap cannot be assembled into a Triton repository",
                            "fix the ConfigMap keys (model/config.pbtxt paths) that the generator writes")
FLUX_SOURCE_NOT_CHECKED = register(
    "FluxSourceNotChecked", "info", "cluster",
    "a Flux Kustomization applies a path of another Flux source than this repository's own (an ExternalArtifact, "
    "another GitRepository, an OCIRepository or Bucket): its spec.path is not checked here",
    "nothing to fix; if the source is this repository, declare it in kubectl-triton.yaml (flux.sourceRef)")
COMPAT_INPUT = register("CompatInputInvalid", "error", "repository",
                        "an engine record or model metadata that the compat checks cannot read",
                        "fix or re-record the file named (kubectl triton record-engine)")
YAML_INVALID = register(
    "YamlInvalid", "error", "repository",
    "A kustomization, Flux or model.yaml file of the repository is not valid YAML; the gate reports it and checks "
    "everything else.",
    "Fix the syntax at the line shown (the folders that use the file cannot render until then).")
LAYOUT_INVALID = register(
    "LayoutInvalid", "error", "repository",
    "kubectl-triton.yaml does not follow its schema (kubectl_triton/data/kubectl-triton.schema.json).",
    "Fix the entry at the line shown; docs/layout-file.md describes the `cluster.provides` section.")
MODEL_METADATA_INVALID = register(
    "ModelMetadataInvalid", "error", "model",
    "models/<model>/model.yaml has a field of the wrong shape (the GPU and compatibility checks skip that model).",
    "Write the field as add-model does (strings, a list of GPU types, positive integers under engine:).")
CHECK_INPUT = register(
    "CheckInputInvalid", "error", "repository",
    "a file a repository-wide check reads cannot be used (it is reported on its own too); the check was skipped",
    "fix the file named")

# Repository-wide checks: check(root, targets) -> findings. LOCAL ones judge each folder on its own (so
# --changed-from runs them on the affected folders only); the others need every folder of a cluster.
LOCAL_CHECKS = (security.check, artifacts.check)
CLUSTER_CHECKS = (enginebuild.check, routes.check, monitoring.check, multinode.check, lora_trtllm.check,
                  modelrewrites.check, nodecache.check)



@dataclass
class Target:
    """One folder that kustomize builds: an overlay, a cluster folder, or a Flux Kustomization path. For a Flux
    Kustomization, as Flux builds and applies it: `flux` what kustomize-controller writes into the folder's
    kustomization (None: the folder as it is, or the kustomization Flux generates where it has none) and
    `variables` its postBuild variables (None: no postBuild); `kustomizations` are those applying it so."""

    path: Path
    rel: str
    objects: list[dict] = field(default_factory=list)
    result: kustomize.Rendered | None = None
    flux_timeouts: list[int] = field(default_factory=list)
    flux: FluxBuild | None = None
    variables: tuple[tuple[str, str], ...] | None = None
    variables_known: bool = True
    kustomizations: list[FluxKustomization] = field(default_factory=list)
    unknown: set[str] = field(default_factory=set)  # postBuild variables left in its objects

    @property
    def build(self) -> FluxBuild:
        return self.flux or FluxBuild(self.path)


@dataclass
class Options:
    kubernetes_version: str | None = None  # None: each cluster's from kubectl-triton.yaml `kubernetes:`
    triton: bool = False
    compat: bool = True
    cache: bool = True  # reuse renders whose inputs are unchanged (adapters.kustomize.RenderCache)
    changed_from: str | None = None  # git ref: per-overlay checks only where the change can reach
    server: Any = None  # checks.server.Target: also apply every cluster folder to a real API server


def validate_repo(root: Path, options: Options | None = None,
                  progress: Callable[[str], None] | None = None) -> list[Finding]:
    """Every finding for the repository at `root` (read once: every check shares one Repository)."""
    with Repository.session():
        return _validate(root, options or Options(), progress)


def _validate(root: Path, options: Options, progress: Callable[[str], None] | None) -> list[Finding]:
    say = progress or (lambda _msg: None)
    findings: list[Finding] = []
    changes = None if options.changed_from is None else inputs.ChangedFiles(root, options.changed_from)
    if changes is not None:
        changes.check()  # a usage error (no git, a ref that is no commit) before any build starts
    cache = kustomize.RenderCache() if options.cache else None
    renderer = FluxRenderer(root, cache)
    with flux_rendering(renderer):  # Flux objects as Flux builds them: cluster folders and paths rendered
        return _validate_rendered(root, options, say, findings, changes, cache, renderer)


def _validate_rendered(root: Path, options: Options, say: Callable[[str], None], findings: list[Finding],
                       changes: inputs.ChangedFiles | None, cache: kustomize.RenderCache | None,
                       renderer: FluxRenderer) -> list[Finding]:
    repository = Repository.at(root, tolerant=True)
    layout = repository.layout
    early = _early_builds(root, repository, changes) if changes is not None and cache is not None else None
    try:
        if cache is not None:
            cache.load_parsed(root)
        provides = _provides(root, findings)
        targets = _targets(root, layout, findings)
        # A folder whose own kustomization file is malformed is reported as such, not rendered.
        own = {t.path: problem for t in targets if (kfile := repo.kustomization_file(t.path)) is not None
               and (problem := repo.read_problem(root, kfile)) is not None}
        targets = [t for t in targets if t.path not in own]
        say(f"rendering {len(targets)} kustomizations")
        builds = renderer.start([t.build for t in targets], early)
    except BaseException:
        if early is not None:
            early.cancel()
        raise
    try:  # while kustomize runs: the malformed files, model metadata, what the change can reach
        problems = repo.yaml_problems(root)
        problems += [p for p in own.values() if p not in problems]
        findings += [YAML_INVALID.finding(f"invalid YAML: {p.message}" if "YAML" not in p.message else p.message,
                                          path=p.path, line=p.line) for p in problems]
        findings += _metadata_findings(root, layout, {root / p.path for p in problems})
        # Per-folder checks run where the change can reach; cluster-wide checks always see every folder.
        affected = None if changes is None else \
            _affected(root, layout, targets, changes.result(), cache.memo if cache is not None else None)
        _warm_schemas(builds, options.kubernetes_version or schemas.DEFAULT_KUBERNETES_VERSION)
    except BaseException:
        builds.cancel()
        raise
    renderer.finish(builds)
    for target in targets:
        result, docs = renderer.result(target.build)
        if isinstance(docs, str):
            unreachable = _UNREACHABLE.search(docs) if "://" in docs else None
            offline = unreachable is not None and network.offline()
            findings.append(RENDER_FAILED.finding(
                f"{docs}; not checked: this machine reaches no network ({unreachable[0] if unreachable else ''}; "
                f"{network.PROBE_HOST} does not resolve either), so nothing this path renders is checked"
                if offline else docs, path=target.rel, severity="warning" if offline else None))
            continue
        assert result is not None
        objects, target.unknown = substitute_objects(docs, target.variables, target.variables_known)
        target.objects = list(objects)
        # later readers (compat) need not parse it again
        target.result = replace(result, path=target.path, docs=target.objects)
    if cache is not None:
        cache.prune()
    rendered = [t for t in targets if t.objects]
    local = rendered if affected is None else [t for t in rendered if t.path in affected]
    say("checking schemas")
    where = clusterversions.placements(root, local, options.kubernetes_version)
    schema_findings = _schema_findings(local, where) + _version_findings(where)
    findings += schema_findings
    # Objects that fail their schema are reported as such; the checks below only see well-formed objects.
    invalid = {(f.path, f.object) for f in schema_findings if f.code == "SchemaInvalid"}
    as_rendered = [replace(t, objects=list(t.objects)) for t in targets]  # the API server judges them all
    for target in rendered:
        target.objects = [o for o in target.objects if isinstance(o, dict)
                          and (target.rel, schemas.object_id(o)) not in invalid]
    findings += _duplicate_findings(root, rendered)
    say("checking model repositories")
    findings += _model_findings(root, layout, local, options)
    if options.compat:
        findings += _compat_findings(root, layout, local)
    for repo_check in (*LOCAL_CHECKS, *CLUSTER_CHECKS):
        try:
            findings += repo_check(root, local if repo_check in LOCAL_CHECKS else rendered)
        except TritonCtlError as err:  # a file the check reads is malformed: reported above, go on
            findings.append(CHECK_INPUT.finding(_relative_message(root, err.message)))
    say("simulating each cluster's apply order")
    findings += convergence.check(root, targets, provides)
    if options.server is not None:
        say("applying each cluster folder to the API server (server-side dry run)")
        findings += server_check.check(root, as_rendered, provides, options.server)
    findings += gpufacts.check(root, local)
    if cache is not None:
        cache.save_parsed(root)
    return _dedupe(findings)


@dataclass
class _Plan:
    """How one FluxBuild is built: the folder kustomize builds (the repository's own, or a copy of its tree with
    the kustomization Flux writes: `copy` its top, whose paths are the repository's in messages)."""

    path: Path
    copy: Path | None = None


class FluxRenderer:
    """validate's gitops.model.FluxRenderer: every FluxBuild built once a run by kustomize (kustomize.start_many:
    the render cache, batches), a folder Flux writes a kustomization into built from a copy of its tree with it
    (kustomize.flux_kustomization, flux_build_folder); the cluster folders' Flux objects are read from these
    renders and the targets reuse them."""

    def __init__(self, root: Path, cache: kustomize.RenderCache | None) -> None:
        self.root = repo.resolved(root)
        self.cache = cache
        self.memo = cache.memo if cache is not None else inputs.Memo()
        self.plans: dict[FluxBuild, _Plan] = {}
        self.results: dict[FluxBuild, kustomize.Rendered | None] = {}
        self.docs: dict[FluxBuild, list[Any] | str] = {}  # the objects, or why there are none (a finding)
        self.files: dict[FluxBuild, tuple[Path, ...]] = {}
        self.pending: dict[int, list[FluxBuild]] = {}  # id of the kustomize.Builds under way -> what it builds

    def plan(self, build: FluxBuild) -> _Plan:
        found = self.plans.get(build)
        if found is None:
            found = self.plans[build] = _Plan(build.folder)
            if build.fields or repo.kustomization_file(build.folder) is None:
                kfile = kustomize.flux_kustomization(build.folder, build.spec)
                top = self.root
                if kfile is not None and (build.folder == top or top in build.folder.parents):
                    try:
                        path = kustomize.flux_build_folder(top, build.folder, kfile, kustomize.flux_work_dir())
                    except OSError:
                        return found
                    copy = path
                    for _ in build.folder.relative_to(top).parts:
                        copy = copy.parent
                    found = self.plans[build] = _Plan(path, copy)
        return found

    def start(self, builds: list[FluxBuild], early: kustomize.Early | None = None) -> kustomize.Builds:
        """Start building those of `builds` not built yet (see `finish`)."""
        todo = [b for b in dict.fromkeys(builds) if b not in self.docs]
        started = kustomize.start_many([self.plan(b).path for b in todo], self.cache, early)
        self.pending[id(started)] = todo
        return started

    def finish(self, started: kustomize.Builds) -> None:
        """Keep the results of builds `start` started (waiting for them)."""
        for build, result in zip(self.pending.pop(id(started)), started.results(), strict=True):
            self._keep(build, result)

    def render(self, builds: Sequence[FluxBuild]) -> list[FluxRender]:
        self.finish(self.start(list(builds)))
        out = []
        for build in builds:
            docs = self.docs[build]
            if build not in self.files:
                found = inputs.build_inputs(self.plan(build).path, self.memo).files
                self.files[build] = tuple(sorted(found))
            out.append(FluxRender(None if isinstance(docs, str) else docs, self.files[build]))
        return out

    def result(self, build: FluxBuild) -> tuple[kustomize.Rendered | None, list[Any] | str]:
        return self.results.get(build), self.docs[build]

    def _keep(self, build: FluxBuild, result: kustomize.Rendered | RenderError) -> None:
        plan = self.plan(build)
        rel = repo.relative(self.root, build.folder)
        if isinstance(result, RenderError):
            detail = result.detail if plan.copy is None else result.detail.replace(str(plan.copy), str(self.root))
            self.results[build] = None
            self.docs[build] = f"kustomize build failed: {detail}"
            return
        self.results[build] = result
        if result.docs is not None:
            self.docs[build] = list(result.docs)
            return
        try:
            docs = yamlio.loads_all(result.yaml, rel)
        except TritonCtlError as err:
            self.results[build] = None
            self.docs[build] = err.message
            return
        self.docs[build] = docs
        self.results[build] = replace(result, docs=docs)
        if self.cache is not None and result.key is not None:
            self.cache.put_docs(result.key, docs)


def _warm_schemas(builds: kustomize.Builds, version: str) -> None:
    """While kustomize still builds, validate one object of each kind the cached renders hold (results
    dropped): the schema validators the per-folder checks need are built in that wait, not after it."""
    seen: set[tuple[Any, Any]] = set()
    for rendered in builds.cached():
        for obj in rendered.docs or []:
            if not builds.running():
                return
            if isinstance(obj, dict) and (kind := (obj.get("apiVersion"), obj.get("kind"))) not in seen:
                seen.add(kind)
                schemas.validate_object(obj, version)


def _early_builds(root: Path, repository: Repository, changes: inputs.ChangedFiles) -> kustomize.Early | None:
    """Start building, before anything else, the overlays a change most likely needs rebuilt: those of a model
    whose files (models/<model>/) or overlay folder (overlays/<model>/) changed, when there are no more than
    CPUs. The cache lookups adopt those they miss (kustomize.start_many), so the slowest part of a one-model
    change runs while the repository is read."""
    rels = _relative(root, changes.result())
    layout = repository.layout
    folders = [repo.resolved(o.path) for model in sorted(_models_in(layout.models, rels) |
                                                        _models_in(layout.overlays, rels))
               for o in repository.model_overlays(model)]
    if not folders or len(folders) > (os.cpu_count() or 2):
        return None
    return kustomize.Early(folders)


def _relative(root: Path, changed: set[Path]) -> list[str]:
    """The changed files inside the repository, relative to it."""
    top = repo.resolved(root)
    return [c.relative_to(top).as_posix() for c in changed if top in c.parents]


def _models_in(folder: str, rels: list[str]) -> set[str]:
    """Names of the sub-folders of `folder` (the layout's models or overlays folder) that `rels` change files in."""
    return {rel[len(folder) + 1:].split("/", 1)[0] for rel in rels
            if rel.startswith(f"{folder}/") and "/" in rel[len(folder) + 1:]}


def _affected(root: Path, layout: Layout, targets: list[Target], changed: set[Path],
              memo: inputs.Memo | None) -> set[Path]:
    """The folders of `targets` that the `changed` files can affect: those whose build inputs changed, the
    overlays of a changed model's folder, the paths of changed Flux files. A change outside the layout's overlays,
    bases, models and clusters folders (the layout file, say) affects everything."""
    rels = _relative(root, changed)
    folders = (layout.overlays, layout.bases, layout.models, layout.clusters)
    if any(not any(rel.startswith(f"{folder}/") for folder in folders) for rel in rels):
        return {t.path for t in targets}
    inside = {repo.resolved(root) / rel for rel in rels}
    models = _models_in(layout.models, rels)
    flux_paths = {repo.resolved(root / ks.path) for ks in repo.flux_kustomizations(root, tolerant=True)
                  if repo.resolved(ks.file) in inside}
    out = set()
    memo = memo or inputs.Memo()  # the render cache's: the folders its lookups read
    done: dict[str, bool] = {}
    inside_names = {str(p) for p in inside}
    for target in targets:
        under = target.rel[len(layout.overlays) + 1:].split("/", 1)[0] \
            if target.rel.startswith(f"{layout.overlays}/") else None
        if target.path in flux_paths or under in models or inputs.reaches(target.path, inside_names, memo, done):
            out.add(target.path)
    return out


def _relative_message(root: Path, message: str) -> str:
    """A message with the repository's absolute path written relative to it."""
    return message.replace(f"{root.resolve()}/", "").replace(f"{root}/", "")


def _provides(root: Path, findings: list[Finding]) -> ClusterProvides:
    """kubectl-triton.yaml's `cluster.provides`; a malformed file is a finding (the gate goes on with the default
    layout) and counts as empty."""
    try:
        provides = read_cluster_provides(root)
        Layout.load(root)
    except LayoutError as err:
        findings.append(LAYOUT_INVALID.finding(err.problem, path=err.path, line=err.line))
        return ClusterProvides(file=LAYOUT_FILE)
    except TritonCtlError as err:  # valid by the schema, refused by the reader (the defaults are used)
        findings.append(LAYOUT_INVALID.finding(err.message.removeprefix(f"{LAYOUT_FILE}: "), path=LAYOUT_FILE))
        return ClusterProvides(file=LAYOUT_FILE)
    return provides


def _metadata_findings(root: Path, layout: Layout, broken: set[Path]) -> list[Finding]:
    """The models' model.yaml files that parse but have fields of the wrong shape."""
    out = []
    models = root / layout.models
    for meta_file in sorted(models.glob("*/model.yaml")) if models.is_dir() else []:
        if meta_file in broken:
            continue
        rel = repo.relative(root, meta_file)
        docs = yamlio.load_all_shared(meta_file)
        try:
            check_metadata(docs[0] if docs else {}, Path(rel))
        except TritonCtlError as err:
            out.append(MODEL_METADATA_INVALID.finding(err.message.removeprefix(f"{rel}: "), path=rel,
                                                      model=meta_file.parent.name))
    return out


def _targets(root: Path, layout: Layout, findings: list[Finding]) -> list[Target]:
    """Every folder to build: the overlays, the cluster folders with a kustomization file and each Flux
    Kustomization's path as Flux builds it (the kustomization it generates where the folder has none, what it
    adds to the kustomization, its postBuild variables); with the findings about the Flux Kustomizations."""
    targets: dict[tuple[Path, FluxBuild | None, Any], Target] = {}

    def add(path: Path, build: FluxBuild | None = None, variables: tuple[tuple[str, str], ...] | None = None,
            known: bool = True) -> Target:
        path = repo.resolved(path)
        key = (path, build, (variables, known) if variables is not None else None)
        if key not in targets:
            targets[key] = Target(path, repo.relative(root, path), flux=build, variables=variables,
                                  variables_known=known)
        return targets[key]

    for overlay in repo.overlays(root, tolerant=True):
        add(overlay)
    repository = Repository.at(root, tolerant=True)
    for cluster in repo.clusters(root, tolerant=True):
        if repo.kustomization_file(cluster) is not None:  # without: checked where a Kustomization applies it
            add(cluster)
    if repository.artifact_root:
        findings.append(FLUX_ARTIFACT_ROOT.finding(
            f"spec.path of {layout.source}'s Kustomizations is read below {repository.artifact_root}/, the folder "
            "its artifact is pushed from", path=layout.clusters))
    flux = repo.flux_kustomizations(root, tolerant=True)
    names = {(k.namespace, k.name) for k in flux} | {
        (k.namespace, k.name) for c in repository.clusters for k in c.nested_elsewhere}
    in_cluster = _cluster_names(repository)
    top = repo.resolved(root)
    for ks in flux:
        rel_file = repo.relative(root, ks.file)
        where = f"Kustomization/{ks.namespace}/{ks.name}"
        spec = ks.spec
        depends = spec.get("dependsOn") or []
        if not isinstance(depends, list) or not all(isinstance(d, dict) for d in depends):
            findings.append(FLUX_DEPENDENCY.finding("dependsOn must be a list of {name, namespace} "
                                    "objects", path=rel_file, object=where))
            depends = [d for d in depends if isinstance(d, dict)] if isinstance(depends, list) else []
        for dep in depends:
            if "${" in f"{dep.get('namespace', '')}{dep.get('name')}":
                continue  # a postBuild variable of the Kustomization applying it, unknown here
            wanted = (dep.get("namespace", ks.namespace), dep.get("name"))
            if wanted not in names:
                findings.append(FLUX_DEPENDENCY.finding(f"dependsOn {dep.get('name')} names no "
                                        "Flux Kustomization in this repository: Flux would wait for it forever",
                                        path=rel_file, object=where))
                continue
            for cname, known in in_cluster.get((ks.file, ks.namespace, ks.name), ()):
                if wanted not in known:
                    findings.append(FLUX_DEPENDENCY.finding(
                        f"dependsOn {wanted[0]}/{wanted[1]} is a Kustomization of another cluster, not of cluster "
                        f"{cname}, which applies this one: Flux there would wait for it forever",
                        path=rel_file, object=where))
        not_here = _other_source(layout, ks, rel_file, where)
        if not_here is not None:
            findings.append(not_here)
            continue
        shown = str(spec.get("path") or ks.path)
        if "${" in ks.path:
            findings.append(FLUX_PATH_VARIABLE.finding(
                f"spec.path {shown} holds postBuild variables that no Kustomization of this repository substitutes: "
                "not checked", path=rel_file, object=where))
            continue
        path = repo.resolved(root / ks.path)
        if top != path and top not in path.parents:
            findings.append(FLUX_PATH.finding(f"spec.path {shown} leaves the repository",
                                    path=rel_file, object=where))
            continue
        if not path.is_dir():
            findings.append(FLUX_PATH.finding(f"spec.path {shown} does not exist",
                                    path=rel_file, object=where))
            continue
        if repo.kustomization_file(path) is None:
            _, refused = kustomize.flux_manifests(path)
            for file, why in refused:
                findings.append(FLUX_UNBUILDABLE.finding(
                    f"spec.path {shown} has no kustomization.yaml; the one Flux generates from every manifest below "
                    f"it fails on {repo.relative(root, path / file)} ({why}) unless .sourceignore or the source's "
                    "spec.ignore leaves it out", path=rel_file, object=where))
        build = flux_build(root, ks)
        target = add(path, build if build is not None and build.fields else None, ks.variables, ks.variables_known)
        target.kustomizations.append(ks)
        timeout = parse_duration(spec.get("timeout") or spec.get("interval") or "", bare_seconds=False)
        if timeout and int(timeout):
            target.flux_timeouts.append(int(timeout))
    # A folder that Flux Kustomizations apply is checked as they apply it: its plain build (overlay) only where
    # one applies it as it is.
    applied = {t.path for t in targets.values() if t.kustomizations}
    return sorted((t for t in targets.values() if t.kustomizations or t.flux is not None or t.variables is not None
                   or t.path not in applied), key=lambda t: t.rel)


def _other_source(layout: Layout, ks: repo.FluxKustomization, rel_file: str, where: str) -> Finding | None:
    """An info finding when `ks` applies a path of another source than the repository's own (the layout file's
    flux.sourceRef, default GitRepository/flux-system): that path lies in another artifact, so it is not
    resolved against this repository (never an error). None for the own source."""
    kind, name, namespace = ks.source_ref
    if layout.is_own_source(kind, name, namespace):
        return None
    return FLUX_SOURCE_NOT_CHECKED.finding(f"spec.path {ks.path} belongs to {kind or '(no kind)'}/{name}, not to "
                                           f"this repository's source {layout.source}: not checked",
                                           path=rel_file, object=where)


def _schema_findings(targets: list[Target], where: dict[Path, list[clusterversions.Placement]]) -> list[Finding]:
    """Every object against the schemas of each Kubernetes version that its clusters run (one message per
    problem; where the clusters differ, the message names those it concerns). A kind without a schema is reported
    once, with how many objects of it are not checked: a fleet holds hundreds of ExternalSecrets."""
    out = []
    unchecked: dict[str, list[tuple[str, str]]] = defaultdict(list)  # message -> (folder, object)
    for target in targets:
        held = 0
        by_version: dict[str, list[str]] = defaultdict(list)
        for placement in where.get(target.path) or ():
            by_version[placement.version].append(placement.cluster or "")
        versions = sorted(by_version) or [schemas.DEFAULT_KUBERNETES_VERSION]
        for obj in target.objects:
            issues: dict[tuple[str, str, bool], list[str]] = {}
            for version in versions:
                for issue in schemas.validate_object(obj, version):
                    issues.setdefault((issue.object, issue.message, issue.missing_schema), []).append(version)
            for (oid, message, missing), found in issues.items():
                if target.unknown and "${" in message:
                    held += 1  # a value Flux substitutes from a source not in the repository
                    continue
                if len(versions) > 1 and len(found) < len(versions):
                    named = sorted(c for v in found for c in by_version[v] if c)
                    message += f" (Kubernetes {', '.join(found)}: cluster {', '.join(named)})"
                if missing:
                    unchecked[message].append((target.rel, oid))
                else:
                    out.append(SCHEMA_INVALID.finding(message, path=target.rel, object=oid))
        if target.unknown:
            names = ", ".join(sorted(target.unknown))
            by = ", ".join(sorted({k.name for k in target.kustomizations})) or "?"
            held_text = f"; {held} schema error(s) on fields holding them not reported" if held else ""
            out.append(FLUX_VARIABLE_UNKNOWN.finding(
                f"postBuild variables of Kustomization {by} not in the repository ({names}): left as written"
                f"{held_text}", path=target.rel))
    for message, where_found in unchecked.items():
        objects, folders = len(dict.fromkeys(where_found)), len({rel for rel, _ in where_found})
        more = f"; {objects} objects of this kind in {folders} folder(s) are not schema-checked (the first shown)" \
            if objects > 1 else ""
        out.append(SCHEMA_MISSING.finding(message + more, path=where_found[0][0], object=where_found[0][1]))
    return out


def _version_findings(where: dict[Path, list[clusterversions.Placement]]) -> list[Finding]:
    """A Kubernetes version in kubectl-triton.yaml whose schemas are not bundled: checked against the nearest
    bundled version."""
    out = []
    for found in where.values():
        for placement in found:
            if placement.declared and not schemas.supported_version(placement.version):
                out.append(LAYOUT_INVALID.finding(
                    f"kubernetes: version {placement.version} (cluster {placement.cluster or 'default'}) has no "
                    f"bundled schemas ({schemas.supported_range()}): its objects are checked against the nearest",
                    path=LAYOUT_FILE, severity="warning"))
    return list(dict.fromkeys(out))


def _duplicate_findings(root: Path, targets: list[Target]) -> list[Finding]:
    """Two Flux Kustomizations applying to the same cluster must not apply the same object (as Flux applies
    them: targetNamespace, name prefixes and postBuild variables in; one applying to another cluster through
    spec.kubeConfig, a hub's spoke, apart)."""
    by_ks = {(ks.file, ks.namespace, ks.name): t for t in targets for ks in t.kustomizations}
    out = []
    for cluster in Repository.at(root, tolerant=True).clusters:
        owners: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
        for ks in cluster.kustomizations:
            target = by_ks.get((ks.file, ks.namespace, ks.name))
            if target is None or target.path == repo.resolved(cluster.path):
                continue
            # the cluster a kubeConfig names (its Secret or ConfigMap is the Kustomization's namespace's)
            spoke = json.dumps([ks.namespace, ks.spec["kubeConfig"]], sort_keys=True, default=str) \
                if ks.spec.get("kubeConfig") else ""
            for obj in target.objects:
                oid = schemas.object_id(obj)
                if target.unknown and "${" in oid:
                    continue  # its name comes from a variable not known here
                owners[(spoke, f"{obj.get('apiVersion')}:{oid}")].append((ks.name, _content(obj)))
        for (_, oid), found in sorted(owners.items()):
            if len(found) < 2:
                continue
            names = ", ".join(sorted(n for n, _ in found))
            if len({c for _, c in found}) == 1:  # the same object: it converges, but ownership changes hands
                out.append(DUPLICATE_OBJECT.finding(
                    f"applied, identically, by several Flux Kustomizations ({names}): the one that reconciled last "
                    "owns it, and if that one drops it Flux prunes it until another reapplies it at its next "
                    "interval", path=repo.relative(root, cluster.path), object=oid.split(":", 1)[1],
                    severity="warning"))
                continue
            out.append(DUPLICATE_OBJECT.finding(f"rendered by several Flux Kustomizations "
                               f"({names}); they would fight over it and prune it",
                               path=repo.relative(root, cluster.path), object=oid.split(":", 1)[1]))
    return out


def _content(obj: dict) -> str:
    """An object as applied, but for its labels and annotations (Flux's commonMetadata and ownership labels)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("labels", "annotations")}
    return json.dumps({**obj, "metadata": meta}, sort_keys=True, default=str)


def _model_findings(root: Path, layout: Layout, targets: list[Target], options: Options) -> list[Finding]:
    out: list[Finding] = []
    checked: dict[str, tuple[list[Finding], practices.ModelFacts]] = {}
    with tempfile.TemporaryDirectory(prefix="kubectl-triton-validate-") as tmp:
        for target in targets:
            cm = assembly.model_config_map(target.objects)
            facts = practices.ModelFacts(False, False)
            if cm is not None:
                data = cm.get("data") or {}
                digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
                if digest not in checked:
                    checked[digest] = _check_assembled(root, layout, target, data, Path(tmp) / digest, options,
                                                       check_repository, load_repository)
                found, facts = checked[digest]
                out += found
            timeout = min(target.flux_timeouts) if target.flux_timeouts else None
            out += practices.check_overlay(target.rel, target.objects, facts, timeout)
    return out


def _check_assembled(root: Path, layout: Layout, target: Target, data: dict[str, str], dest: Path, options: Options,
                     check_repository: Any, load_repository: Any) -> tuple[list[Finding], Any]:
    dest.mkdir(parents=True)
    try:
        assembly.assemble(data, dest)
    except TritonCtlError as err:
        return [MODEL_REPOSITORY.finding(err.message, path=target.rel)], \
            practices.ModelFacts(False, False)
    instance = _instance(target.objects)
    found = check_repository(dest, display_root=dest, strict=strict_model_config(target.objects))
    if options.triton:
        found += check_repository_with_triton(dest, display_root=dest)
    try:
        facts = practices.model_facts(load_repository(dest))
    except TritonCtlError:
        facts = practices.ModelFacts(False, False)
    return [_source_path(root, layout, target, instance, dest, f) for f in found], facts


STRICT_FLAG = "--disable-auto-complete-config"
DEPRECATED_STRICT = "--strict-model"  # the flag it replaced (…-config=true), still honoured by tritonserver


_SCRIPT = re.compile(r"[\w.-]+\.sh\b")


def _scripts(objects: list[dict]) -> dict[str, str]:
    """Shell scripts the overlay's ConfigMaps carry (key -> text): a container may start tritonserver through one
    (base/triton-multinode: leader.sh runs rank.sh on every rank)."""
    out: dict[str, str] = {}
    for obj in objects:
        data = obj.get("data") if obj.get("kind") == "ConfigMap" else None
        if isinstance(data, dict):
            out.update({str(k): v for k, v in data.items() if str(k).endswith(".sh") and isinstance(v, str)})
    return out


def _with_scripts(words: list[str], scripts: dict[str, str], depth: int = 3) -> list[str]:
    """The words of a command line and of the scripts it runs (those of the overlay's ConfigMaps, followed
    `depth` deep)."""
    out = list(words)
    for name in dict.fromkeys(m for w in words for m in _SCRIPT.findall(w)):
        text = scripts.get(name.rsplit("/", 1)[-1])
        if text is not None and depth > 0:
            out += _with_scripts([w.strip("\"'") for w in text.split()], scripts, depth - 1)
    return out


def _cluster_names(repository: Repository) -> dict[tuple[Path, str, str], list[tuple[str, set[tuple[str, str]]]]]:
    """Per Kustomization (file, namespace, name): the clusters applying it, each with the Kustomizations it has
    (dependsOn resolves in the Kustomization's own cluster only)."""
    out: dict[tuple[Path, str, str], list[tuple[str, set[tuple[str, str]]]]] = defaultdict(list)
    for cluster in repository.clusters:
        known = {(k.namespace, k.name) for k in (*cluster.kustomizations, *cluster.nested_elsewhere)}
        for k in cluster.kustomizations:
            out[(k.file, k.namespace, k.name)].append((cluster.name, known))
    return out


def strict_model_config(objects: list[dict]) -> bool:
    """Does the overlay's tritonserver run with auto-complete disabled (--disable-auto-complete-config, or its
    deprecated predecessor set to true), on its command line or in a script of the overlay's ConfigMaps that it
    runs? Triton's default is auto-complete on."""
    strict = False
    scripts = _scripts(objects)
    for obj in objects:
        for template in workloads.templates(obj) if obj.get("kind") in workloads.SERVING_KINDS else []:
            for container in template.spec.get("containers") or []:
                words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
                words = _with_scripts(words, scripts)
                if not any("tritonserver" in w for w in words):
                    continue
                for i, word in enumerate(words):
                    flag, _, value = word.partition("=")
                    if flag == STRICT_FLAG:
                        strict = True
                    elif flag.startswith(DEPRECATED_STRICT) and flag.endswith("-config"):
                        value = value or (words[i + 1] if i + 1 < len(words) else "true")
                        strict = value.lower() in ("true", "1", "yes", "on")
    return strict


def _instance(objects: list[dict]) -> str | None:
    """The model (instance label) the overlay's serving workload serves."""
    for obj in objects:
        if obj.get("kind") in workloads.SERVING_KINDS:
            return workloads.labels(obj).get(INSTANCE_LABEL) or \
                ((obj.get("metadata") or {}).get("labels") or {}).get(INSTANCE_LABEL)
    return None


def _source_path(root: Path, layout: Layout, target: Target, instance: str | None, dest: Path,
                 finding: Finding) -> Finding:
    """Point a finding about the assembled repository at the committed file it came from."""
    if not finding.path:
        return replace(finding, path=target.rel)
    assembled = dest / finding.path
    if instance:
        source = root / layout.model_dir(instance) / finding.path
        if source.is_file() and assembled.is_file() and source.read_bytes() == assembled.read_bytes():
            return replace(finding, path=repo.relative(root, source))
    return replace(finding, path=f"{target.rel} (assembled {finding.path})")


def _compat_findings(root: Path, layout: Layout, targets: list[Target]) -> list[Finding]:
    overlays = [t.result for t in targets if t.result is not None and t.rel.startswith(f"{layout.overlays}/")]
    try:
        return check_repo(root, overlays)
    except TritonCtlError as err:
        return [COMPAT_INPUT.finding(_relative_message(root, err.message))]


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        if f not in seen:
            seen.add(f)
            out.append(f)
    return out
