"""Where a model's large files come from: a folder on the model-artifacts PVC, an S3 prefix synced at start, or an
OCI image mounted read-only as a Kubernetes image volume (`volumes[].image`, KEP-4639).

An OCI artifact is reviewed in git by its layout file, `models/<model>/artifact-layout.yaml`: the digest-pinned
reference and every file inside the image with its size, written by `kubectl triton package-model`. `validate`
checks the Triton models' paths against it without pulling anything."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kubectl_triton.errors import InputError

ARTIFACTS_CLAIM = "model-artifacts"
ARTIFACTS_MOUNT = "/artifacts"
LAYOUT_FILE = "artifact-layout.yaml"
VOLUME_PATCH = "artifact-volume.yaml"  # the model Component's patch that mounts the image
PULL_POLICIES = ("IfNotPresent", "Always", "Never")
_PLAIN = re.compile(r"[A-Za-z0-9/._][A-Za-z0-9/._:@+\-]*")

# The OCI distribution spec's reference grammar (distribution/reference): a registry host, a repository path of
# lower-case components, then a tag and/or a sha256 digest.
_HOST = r"(?:localhost|[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+" \
        r"|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?|[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?:[0-9]{1,5}"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(rf"(?P<host>{_HOST})/(?P<repo>{_COMPONENT}(?:/{_COMPONENT})*)"
                        r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?")


@dataclass(frozen=True)
class OciReference:
    """registry/repository[:tag][@sha256:…], as kubelet pulls it."""

    host: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    def __str__(self) -> str:
        return f"{self.host}/{self.repository}" + (f":{self.tag}" if self.tag else "") + \
            (f"@{self.digest}" if self.digest else "")

    @property
    def pinned(self) -> str:
        """The reference pinned to its digest only (the tag dropped: the digest decides what kubelet pulls)."""
        return str(self.untagged)

    @property
    def untagged(self) -> OciReference:
        return OciReference(self.host, self.repository, None, self.digest) if self.digest else self

    def with_digest(self, digest: str) -> OciReference:
        return OciReference(self.host, self.repository, self.tag, digest)


def parse_reference(text: str, what: str = "--artifact") -> OciReference:
    """`[oci://]REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`; a one-line InputError naming `what` otherwise. The
    registry is required: a bare `repo:tag` would silently mean Docker Hub to kubelet."""
    ref = text.removeprefix("oci://")
    found = _REFERENCE.fullmatch(ref)
    if found is None:
        raise InputError(f"{what} {text!r}: expected oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST] "
                         "(a registry host, lower-case repository path, a tag and/or a sha256 digest)")
    if found["tag"] is None and found["digest"] is None:
        raise InputError(f"{what} {text!r}: give a tag or a digest (@sha256:...); a digest pins what every node "
                         "pulls")
    return OciReference(found["host"], found["repo"], found["tag"], found["digest"])


@dataclass(frozen=True)
class Artifact:
    """A model's artifact source: `pvc` (path on the claim), `s3` (uri) or `oci` (reference)."""

    source: str
    path: str = ""
    uri: str = ""
    reference: OciReference | None = None
    pull_policy: str = "IfNotPresent"

    @property
    def pod_dir(self) -> str:
        """The folder holding the model's files in the serving pod (the assembly script's ARTIFACTS_DIR): the
        same for every source (an OCI image holds them under `path`/), so moving a model between sources changes
        its volume only."""
        return f"{ARTIFACTS_MOUNT}/{self.path}"


def parse_artifact(artifact: str | None, name: str) -> Artifact:
    """`--artifact`: oci://REGISTRY/REPO:TAG or @sha256:…, an s3:// URI, or a folder on the model-artifacts PVC
    (relative, or under /artifacts/)."""
    if artifact is None or artifact == "":
        return Artifact("pvc", path=name)
    if artifact.startswith("oci://"):
        return Artifact("oci", path=name, reference=parse_reference(artifact))
    if artifact.startswith("s3://"):
        bucket = artifact[5:].split("/", 1)[0]
        if not bucket or any(c.isspace() for c in artifact):
            raise InputError(f"--artifact {artifact!r}: expected s3://BUCKET/PREFIX")
        return Artifact("s3", path=name, uri=artifact.rstrip("/"))
    if "://" in artifact:
        raise InputError(f"--artifact {artifact!r}: only oci:// references, s3:// URIs and paths on the "
                         f"{ARTIFACTS_CLAIM} PVC")
    path = artifact.removeprefix(f"{ARTIFACTS_MOUNT}/").strip("/")
    parts = path.split("/")
    if artifact.startswith("/") and not artifact.startswith(f"{ARTIFACTS_MOUNT}/") or not path \
            or any(p in ("", ".", "..") for p in parts) or not all(_PLAIN.fullmatch(p) for p in parts):
        raise InputError(f"--artifact {artifact!r}: expected a folder on the {ARTIFACTS_CLAIM} PVC "
                         "(e.g. my-model or /artifacts/my-model), s3://BUCKET/PREFIX or oci://REGISTRY/REPO:TAG")
    return Artifact("pvc", path=path)


def from_metadata(meta: dict[str, Any], name: str) -> Artifact:
    """The Artifact model.yaml's `artifacts:` describes (the PVC folder NAME when absent)."""
    art = meta.get("artifacts")
    if not isinstance(art, dict):
        return Artifact("pvc", path=name)
    source = art.get("source", "pvc")
    if source == "oci":
        ref = art.get("reference")
        return Artifact("oci", path=str(art.get("path") or name),
                        reference=parse_reference(str(ref), "artifacts.reference"),
                        pull_policy=str(art.get("pullPolicy") or "IfNotPresent"))
    if source == "s3":
        return Artifact("s3", path=name, uri=str(art.get("uri") or ""))
    return Artifact("pvc", path=str(art.get("path") or name))


def metadata_entry(artifact: Artifact) -> dict[str, Any]:
    """model.yaml's `artifacts:` for an OCI source."""
    return {"source": "oci", "reference": str(artifact.reference), "pullPolicy": artifact.pull_policy,
            "path": artifact.path}


def volume_source(artifact: Artifact) -> dict[str, Any]:
    """The `artifacts` volume's image source (Kubernetes' ImageVolumeSource)."""
    assert artifact.reference is not None
    return {"reference": str(artifact.reference), "pullPolicy": artifact.pull_policy}


# ---- the layout file: what the image holds ----------------------------------------------------------------------

@dataclass(frozen=True)
class ArtifactLayout:
    """models/<model>/artifact-layout.yaml: the reference it describes and each file's size (bytes; None where a
    hand-written layout does not record it)."""

    reference: OciReference
    files: dict[str, int | None] = field(default_factory=dict)

    @property
    def size(self) -> int | None:
        """The bytes of every file, None unless every size is recorded."""
        sizes = list(self.files.values())
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    def has(self, path: str) -> bool:
        """Is `path` (relative to the image root) a file of the image or a folder holding one?"""
        path = path.strip("/")
        return path in self.files or any(f.startswith(f"{path}/") for f in self.files) or path == ""


def parse_layout(doc: Any, source: str) -> ArtifactLayout:
    """An ArtifactLayout from the file's YAML document; a one-line InputError naming `source` otherwise."""
    if not isinstance(doc, dict):
        raise InputError(f"{source}: expected a mapping with reference and files")
    ref = doc.get("reference")
    if not isinstance(ref, str):
        raise InputError(f"{source}: reference must be the artifact's oci reference")
    reference = parse_reference(ref, f"{source}: reference")
    if reference.digest is None:
        raise InputError(f"{source}: reference {ref!r} has no digest: a layout describes one immutable image")
    files = doc.get("files")
    if not isinstance(files, dict) or not files:
        raise InputError(f"{source}: files must map each path inside the image to its size in bytes")
    out: dict[str, int | None] = {}
    for path, size in files.items():
        if not isinstance(path, str) or path.startswith("/") or ".." in path.split("/") or not path:
            raise InputError(f"{source}: files: {path!r} is not a relative path inside the image")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise InputError(f"{source}: files: {path}: the size must be a byte count (or null), got {size!r}")
        out[path] = size
    return ArtifactLayout(reference, out)


# ---- what Triton needs from it ----------------------------------------------------------------------------------

# The file each backend loads from a version folder when config.pbtxt names no default_model_filename (Triton's
# backends: onnxruntime model.onnx, pytorch/libtorch model.pt, tensorrt model.plan, tensorflow model.savedmodel
# (platform tensorflow_graphdef: model.graphdef), openvino model.xml, python model.py).
DEFAULT_MODEL_FILES = {"onnxruntime": "model.onnx", "onnxruntime_onnx": "model.onnx", "pytorch": "model.pt",
                       "pytorch_libtorch": "model.pt", "tensorrt": "model.plan", "tensorrt_plan": "model.plan",
                       "tensorflow": "model.savedmodel", "tensorflow_savedmodel": "model.savedmodel",
                       "tensorflow_graphdef": "model.graphdef", "openvino": "model.xml", "python": "model.py"}


def in_pod(path: str, mount: str = ARTIFACTS_MOUNT) -> str | None:
    """A pod path under the image mount, relative to the image root; None for a path elsewhere."""
    if path == mount:
        return ""
    return path[len(mount) + 1:] if path.startswith(f"{mount}/") else None
