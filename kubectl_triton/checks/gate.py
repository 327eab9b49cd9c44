"""`validate`'s orchestration: render every overlay and Flux path once, then run every check on the results.

The checks themselves are pure (checks/*, schemas, compat); this module only gathers their inputs."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks import server as server_check
from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.manifests import (
    convergence,
    enginebuild,
    gpufacts,
    monitoring,
    multinode,
    practices,
    routes,
    security,
)
from kubectl_triton.checks.manifests.practices import parse_duration
from kubectl_triton.checks.model.modelrepo import check_repository, load_repository
from kubectl_triton.checks.model.triton import check_repository_with_triton
from kubectl_triton.checks.registry import register
from kubectl_triton.compat.repo_check import check_metadata, check_repo
from kubectl_triton.errors import RenderError, TritonCtlError
from kubectl_triton.formats import schemas, yamlio
from kubectl_triton.gitops import assembly, inputs, repo, workloads
from kubectl_triton.gitops.labels import INSTANCE_LABEL
from kubectl_triton.gitops.layout import LAYOUT_FILE, ClusterProvides, LayoutError, read_cluster_provides
from kubectl_triton.gitops.model import Layout, Repository

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
                            "a Flux Kustomization's path has no kustomization.yaml",
                            "add a kustomization.yaml so the folder renders the same here and in Flux")
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
LOCAL_CHECKS = (security.check,)
CLUSTER_CHECKS = (enginebuild.check, routes.check, monitoring.check, multinode.check)



@dataclass
class Target:
    """One folder that kustomize builds: an overlay, a cluster folder, or a Flux Kustomization path."""

    path: Path
    rel: str
    objects: list[dict] = field(default_factory=list)
    result: kustomize.Rendered | None = None
    flux_timeouts: list[int] = field(default_factory=list)


@dataclass
class Options:
    kubernetes_version: str = schemas.DEFAULT_KUBERNETES_VERSION
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
        builds = kustomize.start_many((t.path for t in targets), cache, early)
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
        _warm_schemas(builds, options.kubernetes_version)
    except BaseException:
        builds.cancel()
        raise
    for target, result in zip(targets, builds.results(), strict=True):
        if isinstance(result, RenderError):
            findings.append(RENDER_FAILED.finding(f"kustomize build failed: {result.detail}",
                                    path=target.rel))
            continue
        target.result = result
        if result.docs is not None:
            target.objects = list(result.docs)
            continue
        try:
            target.objects = yamlio.loads_all(result.yaml, target.rel)
        except TritonCtlError as err:
            findings.append(RENDER_FAILED.finding(err.message, path=target.rel))
            continue
        target.result = replace(result, docs=target.objects)  # later readers (compat) need not parse it again
        if cache is not None and result.key is not None:
            cache.put_docs(result.key, target.objects)
    if cache is not None:
        cache.prune()
    rendered = [t for t in targets if t.objects]
    local = rendered if affected is None else [t for t in rendered if t.path in affected]
    say("checking schemas")
    schema_findings = _schema_findings(local, options.kubernetes_version)
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
    targets: dict[Path, Target] = {}

    def add(path: Path) -> Target:
        path = repo.resolved(path)
        if path not in targets:
            targets[path] = Target(path, repo.relative(root, path))
        return targets[path]

    for overlay in repo.overlays(root, tolerant=True):
        add(overlay)
    for cluster in repo.clusters(root, tolerant=True):
        if repo.kustomization_file(cluster) is not None:
            add(cluster)
    flux = repo.flux_kustomizations(root, tolerant=True)
    names = {(k.namespace, k.name) for k in flux}
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
            if (dep.get("namespace", ks.namespace), dep.get("name")) not in names:
                findings.append(FLUX_DEPENDENCY.finding(f"dependsOn {dep.get('name')} names no "
                                        "Flux Kustomization in this repository: Flux would wait for it forever",
                                        path=rel_file, object=where))
        not_here = _other_source(layout, ks, rel_file, where)
        if not_here is not None:
            findings.append(not_here)
            continue
        path = repo.resolved(root / ks.path)
        if top != path and top not in path.parents:
            findings.append(FLUX_PATH.finding(f"spec.path {ks.path} leaves the repository",
                                    path=rel_file, object=where))
        elif not path.is_dir():
            findings.append(FLUX_PATH.finding(f"spec.path {ks.path} does not exist",
                                    path=rel_file, object=where))
        elif repo.kustomization_file(path) is None:
            findings.append(FLUX_UNBUILDABLE.finding(f"spec.path {ks.path} has no "
                                    "kustomization.yaml; Flux generates one from every YAML file below it",
                                    path=rel_file, object=where))
        else:
            target = add(path)
            timeout = parse_duration(spec.get("timeout") or spec.get("interval") or "")
            if timeout:
                target.flux_timeouts.append(timeout)
    return sorted(targets.values(), key=lambda t: t.rel)


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


def _schema_findings(targets: list[Target], version: str) -> list[Finding]:
    out = []
    for target in targets:
        for obj in target.objects:
            for issue in schemas.validate_object(obj, version):
                check = SCHEMA_MISSING if issue.missing_schema else SCHEMA_INVALID
                out.append(check.finding(issue.message, path=target.rel, object=issue.object))
    return out


def _duplicate_findings(root: Path, targets: list[Target]) -> list[Finding]:
    """Two overlays applied to the same cluster must not render the same object."""
    by_path = {t.path: t for t in targets}
    out = []
    for cluster in repo.clusters(root, tolerant=True):
        owners: dict[str, list[str]] = defaultdict(list)
        for ks in repo.flux_kustomizations(root, cluster, tolerant=True):
            target = by_path.get(repo.resolved(root / ks.path))
            if target is None or target.path == repo.resolved(cluster):
                continue
            for obj in target.objects:
                owners[f"{obj.get('apiVersion')}:{schemas.object_id(obj)}"].append(ks.name)
        for oid, names in sorted(owners.items()):
            if len(names) > 1:
                out.append(DUPLICATE_OBJECT.finding(f"rendered by several Flux Kustomizations "
                                   f"({', '.join(sorted(names))}); they would fight over it and prune it",
                                   path=repo.relative(root, cluster), object=oid.split(":", 1)[1]))
    return out


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


def strict_model_config(objects: list[dict]) -> bool:
    """Does the overlay's tritonserver run with auto-complete disabled (--disable-auto-complete-config, or its
    deprecated predecessor set to true)? Triton's default is auto-complete on."""
    strict = False
    for obj in objects:
        for template in workloads.templates(obj) if obj.get("kind") in workloads.SERVING_KINDS else []:
            for container in template.spec.get("containers") or []:
                words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
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
