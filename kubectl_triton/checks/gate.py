"""`validate`'s orchestration: render every overlay and Flux path once, then run every check on the results.

The checks themselves are pure (checks/*, schemas, compat); this module only gathers their inputs."""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.manifests import enginebuild, monitoring, multinode, routes, security
from kubectl_triton.checks.registry import register
from kubectl_triton.errors import RenderError, TritonCtlError
from kubectl_triton.formats import schemas, yamlio
from kubectl_triton.gitops import assembly, repo
from kubectl_triton.gitops.labels import INSTANCE_LABEL
from kubectl_triton.gitops.model import Layout

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


def validate_repo(root: Path, options: Options | None = None,
                  progress: Callable[[str], None] | None = None) -> list[Finding]:
    """Every finding for the repository at `root`."""
    options = options or Options()
    say = progress or (lambda _msg: None)
    findings: list[Finding] = []
    targets = _targets(root, findings)
    say(f"rendering {len(targets)} kustomizations")
    for target, result in zip(targets, kustomize.build_many(t.path for t in targets), strict=True):
        if isinstance(result, RenderError):
            findings.append(RENDER_FAILED.finding(f"kustomize build failed: {result.detail}",
                                    path=target.rel))
            continue
        target.result = result
        try:
            target.objects = yamlio.loads_all(result.yaml, target.rel)
        except TritonCtlError as err:
            findings.append(RENDER_FAILED.finding(err.message, path=target.rel))
    rendered = [t for t in targets if t.objects]
    say("checking schemas")
    schema_findings = _schema_findings(rendered, options.kubernetes_version)
    findings += schema_findings
    # Objects that fail their schema are reported as such; the checks below only see well-formed objects.
    invalid = {(f.path, f.object) for f in schema_findings if f.code == "SchemaInvalid"}
    for target in rendered:
        target.objects = [o for o in target.objects if isinstance(o, dict)
                          and (target.rel, schemas.object_id(o)) not in invalid]
    findings += _duplicate_findings(root, rendered)
    say("checking model repositories")
    findings += _model_findings(root, rendered, options)
    if options.compat:
        findings += _compat_findings(root, rendered)
    for repo_check in (enginebuild.check, security.check, routes.check, monitoring.check, multinode.check):
        findings += repo_check(root, rendered)
    return _dedupe(findings)


def _targets(root: Path, findings: list[Finding]) -> list[Target]:
    targets: dict[Path, Target] = {}

    def add(path: Path) -> Target:
        path = path.resolve()
        if path not in targets:
            targets[path] = Target(path, repo.relative(root, path))
        return targets[path]

    for overlay in repo.overlays(root):
        add(overlay)
    for cluster in repo.clusters(root):
        if repo.kustomization_file(cluster) is not None:
            add(cluster)
    names = {(k.namespace, k.name) for k in repo.flux_kustomizations(root)}
    layout = Layout.load(root)
    for ks in repo.flux_kustomizations(root):
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
        path = (root / ks.path).resolve()
        if root.resolve() not in (path, *path.parents):
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
            from kubectl_triton.checks.manifests.practices import parse_duration

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
    for cluster in repo.clusters(root):
        owners: dict[str, list[str]] = defaultdict(list)
        for ks in repo.flux_kustomizations(root, cluster):
            target = by_path.get((root / ks.path).resolve())
            if target is None or target.path == cluster.resolve():
                continue
            for obj in target.objects:
                owners[f"{obj.get('apiVersion')}:{schemas.object_id(obj)}"].append(ks.name)
        for oid, names in sorted(owners.items()):
            if len(names) > 1:
                out.append(DUPLICATE_OBJECT.finding(f"rendered by several Flux Kustomizations "
                                   f"({', '.join(sorted(names))}); they would fight over it and prune it",
                                   path=repo.relative(root, cluster), object=oid.split(":", 1)[1]))
    return out


def _model_findings(root: Path, targets: list[Target], options: Options) -> list[Finding]:
    from kubectl_triton.checks.manifests import practices
    from kubectl_triton.checks.model.modelrepo import check_repository, load_repository

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
                    checked[digest] = _check_assembled(root, target, data, Path(tmp) / digest, options,
                                                       check_repository, load_repository)
                found, facts = checked[digest]
                out += found
            timeout = min(target.flux_timeouts) if target.flux_timeouts else None
            out += practices.check_overlay(target.rel, target.objects, facts, timeout)
    return out


def _check_assembled(root: Path, target: Target, data: dict[str, str], dest: Path, options: Options,
                     check_repository: Any, load_repository: Any) -> tuple[list[Finding], Any]:
    from kubectl_triton.checks.manifests import practices

    dest.mkdir(parents=True)
    try:
        assembly.assemble(data, dest)
    except TritonCtlError as err:
        return [MODEL_REPOSITORY.finding(err.message, path=target.rel)], \
            practices.ModelFacts(False, False)
    instance = _instance(target.objects)
    found = check_repository(dest, display_root=dest)
    if options.triton:
        from kubectl_triton.checks.model.triton import check_repository_with_triton

        found += check_repository_with_triton(dest, display_root=dest)
    try:
        facts = practices.model_facts(load_repository(dest))
    except TritonCtlError:
        facts = practices.ModelFacts(False, False)
    return [_source_path(root, target, instance, dest, f) for f in found], facts


def _instance(objects: list[dict]) -> str | None:
    for obj in objects:
        if obj.get("kind") == "Deployment":
            return ((obj.get("metadata") or {}).get("labels") or {}).get(INSTANCE_LABEL)
    return None


def _source_path(root: Path, target: Target, instance: str | None, dest: Path, finding: Finding) -> Finding:
    """Point a finding about the assembled repository at the committed file it came from."""
    from dataclasses import replace

    if not finding.path:
        return replace(finding, path=target.rel)
    assembled = dest / finding.path
    if instance:
        source = root / "models" / instance / finding.path
        if source.is_file() and assembled.is_file() and source.read_bytes() == assembled.read_bytes():
            return replace(finding, path=repo.relative(root, source))
    return replace(finding, path=f"{target.rel} (assembled {finding.path})")


def _compat_findings(root: Path, targets: list[Target]) -> list[Finding]:
    from kubectl_triton.compat.repo_check import check_repo

    overlays = [t.result for t in targets if t.result is not None and t.rel.startswith("overlays/")]
    try:
        return check_repo(root, overlays)
    except TritonCtlError as err:
        return [COMPAT_INPUT.finding(err.message)]


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        if f not in seen:
            seen.add(f)
            out.append(f)
    return out
