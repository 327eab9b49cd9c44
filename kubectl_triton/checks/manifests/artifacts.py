"""OCI image volumes (`volumes[].image`) of every pod template: what each cluster's Kubernetes makes of them, and
whether the image a model's overlay mounts holds the files its Triton models need (models/<model>/
artifact-layout.yaml, gitops/artifacts.py). Pure over rendered objects and repository files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.manifests import clusterversions
from kubectl_triton.checks.registry import register
from kubectl_triton.errors import InputError, TritonCtlError
from kubectl_triton.formats import pbtxt, yamlio
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops import artifacts, assembly, workloads
from kubectl_triton.gitops.assembly import version_folder
from kubectl_triton.gitops.labels import INSTANCE_LABEL
from kubectl_triton.gitops.model import Repository

IMAGE_VOLUME_GATE = "ImageVolume"
# KEP-4639: the `image` volume source is alpha in 1.31 and beta from 1.33, both off by default, and beta on by
# default from 1.35 (kubernetes.io, "Use an Image Volume With a Pod"). With the gate off the API server drops every
# image volume and the mounts of it, and accepts the rest (k8s.io/kubernetes v1.35.4 pkg/api/pod/util.go,
# dropImageVolumes): the pods start without the model's files.
FIRST_VERSION = (1, 31)
DEFAULT_ON = (1, 35)

REFERENCE_MUTABLE = register(
    "OciReferenceMutable", "warning", "overlay",
    "An image volume names its OCI image by tag only: every node pulls what the tag points to when a pod starts "
    "there (IfNotPresent keeps a node's older copy), so replicas can serve different files and a rollback does not "
    "restore the old ones.",
    "Pin the reference to its digest (REGISTRY/REPO@sha256:...): `kubectl triton package-model` prints it and "
    "writes it into the model's files.")
REFERENCE_INVALID = register(
    "OciReferenceInvalid", "error", "overlay",
    "An image volume's reference is not a valid OCI reference with a registry host: kubelet cannot pull it "
    "(InvalidImageName) and the pod never starts.",
    "Write REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:DIGEST.")
IMAGE_VOLUME_UNSUPPORTED = register(
    "ImageVolumeUnsupported", "error", "overlay",
    "A pod template mounts an image volume on a cluster whose Kubernetes does not serve them: before 1.31 the field "
    "does not exist; from 1.31 to 1.34 (and wherever the gate is set false) the ImageVolume feature gate is off by "
    "default, and the API server silently drops the volume and its mounts: pods start without the model's files.",
    "Upgrade the cluster to 1.35, or enable the ImageVolume gate on its API servers and kubelets and declare it in "
    "kubectl-triton.yaml (kubernetes.featureGates), or serve the model from the model-artifacts PVC.")
IMAGE_VOLUME_VERSION_UNKNOWN = register(
    "ImageVolumeVersionUnknown", "info", "overlay",
    "A pod template mounts an image volume, and kubectl-triton.yaml does not declare the Kubernetes version of the "
    "clusters applying it: whether they serve image volumes (1.35, or 1.31+ with the ImageVolume gate) is not "
    "checked.",
    "Declare kubernetes.version (and per cluster kubernetes.clusters.<name>.version) in kubectl-triton.yaml.")
LAYOUT_MISSING = register(
    "OciArtifactLayoutMissing", "warning", "model",
    "A model is served from an OCI image, and models/<model>/artifact-layout.yaml, the list of the files inside it, "
    "is not in git: whether the image holds what the Triton models load is not checked.",
    "Build and push the image with `kubectl triton package-model MODEL FOLDER --to oci://...`, which writes it.")
LAYOUT_INVALID = register(
    "OciArtifactLayoutInvalid", "error", "model",
    "models/<model>/artifact-layout.yaml cannot be read: it must hold the digest-pinned reference and each file's "
    "size in bytes.",
    "Write it again with `kubectl triton package-model`.")
LAYOUT_STALE = register(
    "OciArtifactLayoutStale", "error", "overlay",
    "The image an overlay mounts is not the one models/<model>/artifact-layout.yaml describes: the files the gate "
    "checked are not the files the pods get.",
    "Mount the reference the layout names, or package the image again (package-model updates both).")
PATH_MISSING = register(
    "OciArtifactPathMissing", "error", "overlay",
    "A Triton model of the overlay needs a file from the model's OCI image (its model file in a version folder, a "
    "path its config.pbtxt parameters or model.json name) that the image does not hold: the model fails to load "
    "(\"failed to load\", \"No such file or directory\").",
    "Add the file to the packaged folder and package it again, or fix the path in the model's configuration.")


def _version_tuple(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor)


def _mounts(template: dict, volume: str) -> dict[str, str]:
    """container name -> where it mounts `volume`."""
    out = {}
    for key in ("initContainers", "containers"):
        for container in template.get(key) or []:
            if not isinstance(container, dict):
                continue
            for mount in container.get("volumeMounts") or []:
                if isinstance(mount, dict) and mount.get("name") == volume and isinstance(mount.get("mountPath"), str):
                    out[str(container.get("name"))] = mount["mountPath"]
    return out


def _env(template: dict, container: str, name: str) -> str | None:
    for key in ("initContainers", "containers"):
        for c in template.get(key) or []:
            if isinstance(c, dict) and c.get("name") == container:
                for var in c.get("env") or []:
                    if isinstance(var, dict) and var.get("name") == name and isinstance(var.get("value"), str):
                        return var["value"]
    return None


def _json_paths(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _json_paths(item)
    elif isinstance(value, list):
        for item in value:
            yield from _json_paths(item)


def needed_paths(data: dict[str, str], artifacts_dir: str, mount: str) -> list[tuple[str, str, str]]:
    """(Triton model, path inside the image, why) for every file the model repository that the ConfigMap `data`
    assembles takes from an image mounted at `mount`, the assembly script linking `artifacts_dir`/<model>/."""
    files: dict[PurePosixPath, str] = {}
    for key, text in data.items():
        try:
            files[assembly.key_to_path(key)] = text
        except InputError:
            continue  # ModelRepositoryInvalid reports it
    linked = artifacts.in_pod(artifacts_dir, mount)
    out = []
    for model in sorted({p.parts[0] for p in files if len(p.parts) > 1}):
        config_text = files.get(PurePosixPath(model, "config.pbtxt"))
        if config_text is None:
            continue
        try:
            config = pbtxt.parse(config_text, f"{model}/config.pbtxt")
        except TritonCtlError:
            continue  # the model checks report it
        versions = sorted({p.parts[1] for p in files if len(p.parts) > 2 and p.parts[0] == model
                           and version_folder(p.parts[1]) is not None}) or ["1"]
        kind = str(config.backend or config.platform)
        default = config.default_model_filename or artifacts.DEFAULT_MODEL_FILES.get(kind)
        if default and linked is not None and kind not in ("ensemble", "vllm", "tensorrtllm"):
            for version in versions:
                if PurePosixPath(model, version, default) not in files:
                    inside = "/".join(p for p in (linked, model, version, default) if p)
                    out.append((model, inside, f"its {kind} model file {version}/{default}"))
        for name, param in sorted(config.parameters.items()):
            in_param = artifacts.in_pod(param.string_value.rstrip("/"), mount)
            if in_param is not None and "${" not in param.string_value:
                out.append((model, in_param, f"parameter {name}"))
        for rel, body in sorted(files.items()):
            if rel.parts[0] != model or rel.suffix != ".json":
                continue
            try:
                doc = json.loads(body)
            except json.JSONDecodeError:
                continue  # the backend checks report it
            for value in _json_paths(doc):
                in_json = artifacts.in_pod(value.rstrip("/"), mount)
                if in_json is not None:
                    out.append((model, in_json, f"{'/'.join(rel.parts[1:])} value {value}"))
    return out


def _layout(root: Path, model_dir: str, model: str) -> tuple[artifacts.ArtifactLayout | None, Finding | None]:
    path = root / model_dir / artifacts.LAYOUT_FILE
    rel = f"{model_dir}/{artifacts.LAYOUT_FILE}"
    if not path.is_file():
        return None, None
    try:
        docs = yamlio.loads_all_shared(path.read_text(encoding="utf-8"), rel)
        return artifacts.parse_layout(docs[0] if docs else None, rel), None
    except (OSError, UnicodeDecodeError) as err:
        return None, LAYOUT_INVALID.finding(f"{rel}: cannot be read: {err}", path=rel, model=model)
    except TritonCtlError as err:
        return None, LAYOUT_INVALID.finding(err.message, path=rel, model=model)


def _version_findings(volume: str, where: list[clusterversions.Placement], rel: str, oid: str) -> Iterator[Finding]:
    for placement in where:
        on = f"cluster {placement.cluster}" if placement.cluster else "the clusters"
        if not placement.declared:
            yield IMAGE_VOLUME_VERSION_UNKNOWN.finding(
                f"volume {volume} is an image volume; the Kubernetes version of {on} is not declared in "
                "kubectl-triton.yaml (kubernetes.version): image volumes need 1.35, or 1.31+ with the ImageVolume "
                "feature gate, and a runtime that mounts them (containerd 2.1+, CRI-O 1.31+)", path=rel, object=oid)
            continue
        version = _version_tuple(placement.version)
        gate = placement.facts.gate(IMAGE_VOLUME_GATE)
        if version < FIRST_VERSION:
            yield IMAGE_VOLUME_UNSUPPORTED.finding(
                f"volume {volume} is an image volume, which Kubernetes {placement.version} ({on}) does not have "
                "(volumes[].image came in 1.31): the API server refuses the pod template", path=rel, object=oid)
        elif gate is False or (gate is None and version < DEFAULT_ON):
            state = "set false" if gate is False else f"off by default in {placement.version}"
            yield IMAGE_VOLUME_UNSUPPORTED.finding(
                f"volume {volume} is an image volume and the ImageVolume feature gate is {state} on {on}: the API "
                "server drops the volume and its mounts without a word, and the pods start without the model's "
                "files; enable the gate and declare it in kubectl-triton.yaml, or upgrade to 1.35",
                path=rel, object=oid)


def check(root: Path, targets: list[Any]) -> list[Finding]:
    """validate's hook: every image volume of every rendered pod template."""
    repository = Repository.at(root, tolerant=True)
    where = clusterversions.placements(root, targets)
    out: list[Finding] = []
    layouts: dict[str, tuple[artifacts.ArtifactLayout | None, Finding | None]] = {}
    for target in targets:
        for obj in target.objects:
            if not isinstance(obj, dict):
                continue
            oid = object_id(obj)
            for template in workloads.templates(obj):
                for volume in template.spec.get("volumes") or []:
                    if not isinstance(volume, dict) or not isinstance(volume.get("image"), dict):
                        continue
                    out.extend(_volume(root, repository, target, obj, oid, template.spec, volume,
                                       where.get(target.path) or [], layouts))
    for found in layouts.values():
        if found[1] is not None:
            out.append(found[1])
    return list(dict.fromkeys(out))


def _volume(root: Path, repository: Repository, target: Any, obj: dict, oid: str, template: dict, volume: dict,
            where: list[clusterversions.Placement],
            layouts: dict[str, tuple[artifacts.ArtifactLayout | None, Finding | None]]) -> Iterator[Finding]:
    name = str(volume.get("name"))
    text = volume["image"].get("reference")
    rel = target.rel
    yield from _version_findings(name, where, rel, oid)
    try:
        reference = artifacts.parse_reference(str(text or ""), f"volume {name}: reference")
    except InputError as err:
        yield REFERENCE_INVALID.finding(f"{err.message}: kubelet cannot pull it", path=rel, object=oid)
        return
    if reference.digest is None:
        policy = volume["image"].get("pullPolicy") or ("Always" if reference.tag == "latest" else "IfNotPresent")
        yield REFERENCE_MUTABLE.finding(
            f"volume {name} mounts {reference} by tag (pullPolicy {policy}): nodes may hold different images under "
            "it; pin @sha256:...", path=rel, object=oid)
    model = workloads.labels(obj).get(INSTANCE_LABEL)
    if model is None or obj.get("kind") not in workloads.SERVING_KINDS or \
            not rel.startswith(f"{repository.layout.overlays}/"):
        return
    found = repository.model(model)
    if found is None:
        return
    model_dir = repository.relative(found.path)
    if model_dir not in layouts:
        layouts[model_dir] = _layout(root, model_dir, model)
    layout, problem = layouts[model_dir]
    if layout is None:
        if problem is None:
            yield LAYOUT_MISSING.finding(
                f"{model} is served from the OCI image {reference}, and {model_dir}/{artifacts.LAYOUT_FILE} is not "
                "in git: the files its Triton models need are not checked", path=model_dir, model=model)
        return
    if reference.digest != layout.reference.digest or \
            (reference.host, reference.repository) != (layout.reference.host, layout.reference.repository):
        yield LAYOUT_STALE.finding(
            f"volume {name} mounts {reference}, and {model_dir}/{artifacts.LAYOUT_FILE} describes "
            f"{layout.reference.pinned}: the gate checked other files than the pods get", path=rel, object=oid,
            model=model)
        return
    cm = assembly.model_config_map([obj, *[o for o in target.objects if isinstance(o, dict)
                                           and o.get("kind") == "ConfigMap"]])
    mounts = _mounts(template, name)
    mount = mounts.get(workloads.SERVER_CONTAINER) or next(iter(mounts.values()), None)
    if cm is None or mount is None:
        return
    artifacts_dir = _env(template, "assemble-model-repository", "ARTIFACTS_DIR") or artifacts.ARTIFACTS_MOUNT
    data = cm["data"] if isinstance(cm.get("data"), dict) else {}
    for triton_model, inside, why in needed_paths({str(k): str(v) for k, v in data.items()}, artifacts_dir, mount):
        if not layout.has(inside):
            yield PATH_MISSING.finding(
                f"{triton_model} needs {inside} ({why}) from the image {layout.reference.pinned}, which does not hold "
                f"it ({len(layout.files)} files in {model_dir}/{artifacts.LAYOUT_FILE}): the model does not load",
                path=rel, object=oid, model=model)
