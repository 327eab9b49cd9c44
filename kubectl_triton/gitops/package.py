"""What `kubectl triton package-model` writes once a model's image is built: its layout file, model.yaml's
`artifacts:` and the model Component's volume patch. Pure: from the repository's files to the new ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats import yamldump as Y
from kubectl_triton.formats.yamledit import add_patch, set_key
from kubectl_triton.gitops import artifacts
from kubectl_triton.gitops.artifacts import Artifact, ArtifactLayout


def packable(name: str, meta: Mapping[str, Any], source: str) -> Artifact:
    """The model's current artifact source, refused where moving it to an image takes more than its volume."""
    art = artifacts.from_metadata(dict(meta), name)
    engine: dict[str, Any] = meta["engine"] if isinstance(meta.get("engine"), dict) else {}
    if art.source == "s3":
        raise InputError(f"{source}: {name} syncs its files from {art.uri}; add it again with `kubectl triton "
                         "add-model ... --artifact oci://... --force` to serve them from an image")
    if meta.get("backend") == "tensorrtllm" and art.source == "pvc":
        raise InputError(f"{source}: {name}'s engines are built onto the model-artifacts PVC by its engine-build "
                         "Job; add it again with `--artifact oci://... --force` to serve prebuilt engines from an "
                         "image")
    if isinstance(engine.get("nodes"), int) and engine["nodes"] > 1:
        raise InputError(f"{source}: {name} is served by a LeaderWorkerSet group, which reads the PVC; image volumes "
                         "are scaffolded for single-node Deployments")
    return art


def layout_text(layout: ArtifactLayout, name: str) -> str:
    header = (f"The files of {name}'s OCI image (bytes), written by `kubectl triton package-model`: `kubectl triton "
              "validate`\nchecks the paths its Triton models need against them without pulling the image.")
    return Y.dumps(layout_document(layout), header)


def layout_document(layout: ArtifactLayout) -> Any:
    """The layout file's data (a size not recorded stays null)."""
    from ruamel.yaml.comments import CommentedMap

    return Y.mapping(reference=layout.reference.pinned, files=CommentedMap(sorted(layout.files.items())))


def plan_package(name: str, art: Artifact, layout: ArtifactLayout, pull_policy: str, *, metadata_rel: str,
                 metadata_text: str, component_rel: str, component_text: str, models_rel: str) -> dict[str, str]:
    """Repository-relative path -> content of every file package-model writes for model `name`."""
    image = Artifact("oci", path=art.path, reference=layout.reference.untagged, pull_policy=pull_policy)
    entry = Y.mapping(**artifacts.metadata_entry(image))
    return {
        f"{models_rel}/{artifacts.LAYOUT_FILE}": layout_text(layout, name),
        metadata_rel: set_key(metadata_text, "artifacts", entry, metadata_rel),
        f"{component_rel}/{artifacts.VOLUME_PATCH}": volume_patch(name, image),
        f"{component_rel}/kustomization.yaml": add_patch(component_text, artifacts.VOLUME_PATCH, "Deployment",
                                                          f"{component_rel}/kustomization.yaml"),
    }


def volume_patch(name: str, art: artifacts.Artifact) -> str:
    """The model Component's patch that mounts the OCI image `art` as the artifacts volume."""
    volume = Y.mapping(name="artifacts", image=Y.mapping(**artifacts.volume_source(art)))
    volume.insert(1, "persistentVolumeClaim", None)  # strategic merge: null deletes the base's claim
    doc = Y.mapping(apiVersion="apps/v1", kind="Deployment", metadata=Y.mapping(name="any"),
                    spec=Y.mapping(template=Y.mapping(spec=Y.mapping(volumes=Y.seq([volume])))))
    return Y.dumps(doc, f"{name}'s files: the OCI image kubelet mounts read-only at "
                   f"{artifacts.ARTIFACTS_MOUNT}, holding them under {art.path}/\n(an image volume: Kubernetes "
                   "1.35, or 1.31+ with the ImageVolume feature gate; docs/oci-artifacts.md).\n"
                   f"models/{name}/{artifacts.LAYOUT_FILE} lists its files.")
