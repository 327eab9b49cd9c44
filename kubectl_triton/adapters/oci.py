"""A model folder as an OCI image that kubelet mounts as an image volume, built reproducibly and pushed with
oras-py (the ORAS project's Python client).

The image is data only: one uncompressed tar layer per top-level entry of the folder (weights do not compress,
and an uncompressed layer is mounted without a decompression pass; a layer that did not change between two
versions is not pulled again), entries sorted, owners 0, times 0, modes 0644/0755, so the same folder always gives
the same digest. An index lists one manifest per platform (same layers, a config naming the platform): containerd
pulls a single manifest only for the node's own platform."""

from __future__ import annotations

import hashlib
import json
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kubectl_triton.errors import InputError, TritonCtlError
from kubectl_triton.gitops.artifacts import ArtifactLayout, OciReference

LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
TITLE = "org.opencontainers.image.title"
PLATFORMS = ("linux/amd64", "linux/arm64")


@dataclass
class Blob:
    media_type: str
    digest: str
    size: int
    path: Path | None = None  # on disk (layers)
    data: bytes = b""  # in memory (configs, manifests)
    annotations: dict[str, str] = field(default_factory=dict)

    def descriptor(self) -> dict:
        out: dict = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.annotations:
            out["annotations"] = self.annotations
        return out


@dataclass
class Image:
    """A built image: its layers, configs and manifests, the index whose digest names it, and its files."""

    layers: list[Blob]
    configs: list[Blob]
    manifests: list[Blob]
    index: Blob
    files: dict[str, int]

    @property
    def digest(self) -> str:
        return self.index.digest


def _canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _json_blob(media_type: str, doc: dict) -> Blob:
    data = _canonical(doc)
    return Blob(media_type, "sha256:" + hashlib.sha256(data).hexdigest(), len(data), data=data)


def _walk(top: Path) -> Iterator[Path]:
    """`top` and everything below it, sorted; a symlink or special file is refused (an image volume would carry
    a link into the node's file system, or nothing)."""
    mode = top.lstat().st_mode
    if stat.S_ISLNK(mode) or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise InputError(f"{top}: not a plain file or folder (symlinks and special files are not packaged)")
    yield top
    if stat.S_ISDIR(mode):
        for child in sorted(top.iterdir(), key=lambda p: p.name):
            yield from _walk(child)


def _tar_info(path: Path, name: str) -> tarfile.TarInfo:
    st = path.lstat()
    info = tarfile.TarInfo(name)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    if stat.S_ISDIR(st.st_mode):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size, info.mode = st.st_size, 0o755 if st.st_mode & 0o111 else 0o644
    return info


def _layer(folder: Path, entry: Path, prefix: str, work: Path, files: dict[str, int]) -> Blob:
    out = work / f"layer-{entry.name}.tar"
    with out.open("wb") as raw, tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        parts = [p for p in prefix.split("/") if p]
        for depth in range(1, len(parts) + 1):
            tar.addfile(_tar_info(folder, "/".join(parts[:depth])))
        for path in _walk(entry):
            name = "/".join([*parts, path.relative_to(folder).as_posix()])
            info = _tar_info(path, name)
            if info.isdir():
                tar.addfile(info)
            else:
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
                files[name] = info.size
    digest = hashlib.sha256()
    with out.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return Blob(LAYER, "sha256:" + digest.hexdigest(), out.stat().st_size, path=out,
                annotations={TITLE: entry.name})


def build(folder: Path, work: Path, title: str, prefix: str = "", platforms: tuple[str, ...] = PLATFORMS) -> Image:
    """The image of `folder`'s content under `prefix`/ (the model's path below /artifacts in the pod), its layer
    files written under `work`."""
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder")
    entries = sorted(folder.iterdir(), key=lambda p: p.name)
    if not entries:
        raise InputError(f"{folder}: the folder is empty")
    files: dict[str, int] = {}
    layers = [_layer(folder, entry, prefix, work, files) for entry in entries]
    configs, manifests, listed = [], [], []
    for platform in platforms:
        os_name, _, arch = platform.partition("/")
        config = _json_blob(CONFIG, {"architecture": arch, "os": os_name, "config": {},
                                     "rootfs": {"type": "layers", "diff_ids": [b.digest for b in layers]}})
        manifest = _json_blob(MANIFEST, {"schemaVersion": 2, "mediaType": MANIFEST, "config": config.descriptor(),
                                         "layers": [b.descriptor() for b in layers],
                                         "annotations": {TITLE: title}})
        configs.append(config)
        manifests.append(manifest)
        listed.append({**manifest.descriptor(), "platform": {"architecture": arch, "os": os_name}})
    index = _json_blob(INDEX, {"schemaVersion": 2, "mediaType": INDEX, "manifests": listed,
                               "annotations": {TITLE: title}})
    return Image(layers, configs, manifests, index, files)


def layout(image: Image, reference: OciReference) -> ArtifactLayout:
    return ArtifactLayout(reference.with_digest(image.digest), dict(image.files))


@contextmanager
def work_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kubectl-triton-oci-") as tmp:
        yield Path(tmp)


class RegistryError(TritonCtlError):
    """The registry refused or could not be reached (exit 1: the repository is fine, the push is not)."""

    exit_code = 1


def _registry(plain_http: bool):  # noqa: ANN202 (oras is imported lazily)
    try:
        import oras.provider
    except ImportError:
        raise InputError("pushing needs the oras package: pip install oras") from None
    return oras.provider.Registry(insecure=plain_http)


def _check(response, what: str, reference: OciReference) -> None:  # noqa: ANN001
    if response.status_code not in (200, 201, 202):
        detail = response.text.strip().splitlines()[0] if response.text.strip() else response.reason
        raise RegistryError(f"{reference.host}/{reference.repository}: {what} refused: HTTP {response.status_code} "
                            f"{detail}")


def push(image: Image, reference: OciReference, plain_http: bool = False) -> None:
    """Upload every blob, the manifests by digest and the index under the tag (or by its digest)."""
    import requests

    registry = _registry(plain_http)
    container = registry.get_container(f"{reference.host}/{reference.repository}:{reference.tag or 'latest'}")
    scheme = "http" if plain_http else "https"
    try:
        # One quick answer first: oras-py retries a refused connection for a minute and more.
        registry.session.get(f"{scheme}://{reference.host}/v2/", timeout=10)
        for blob in image.layers:
            assert blob.path is not None
            _check(registry.upload_blob(str(blob.path), container, blob.descriptor()), f"layer {blob.digest}",
                   reference)
        for blob in image.configs:
            with tempfile.NamedTemporaryFile(prefix="oci-config-") as handle:
                handle.write(blob.data)
                handle.flush()
                _check(registry.upload_blob(handle.name, container, blob.descriptor()), "image config", reference)
        for blob in (*image.manifests, image.index):
            tags = [blob.digest] if blob is not image.index else [reference.tag or image.digest]
            for tag in tags:
                url = f"{scheme}://{container.manifest_url(tag)}"
                response = registry.do_request(url, "PUT", data=blob.data,
                                               headers={"Content-Type": blob.media_type})
                _check(response, f"manifest {tag}", reference)
                served = response.headers.get("Docker-Content-Digest")
                if served and served != blob.digest:
                    raise RegistryError(f"{reference.host}: stored the manifest as {served}, not {blob.digest}")
    except requests.RequestException as err:
        text = str(err)
        why = next((w for w in ("Connection refused", "Name or service not known", "timed out",
                                "CERTIFICATE_VERIFY_FAILED", "wrong version number") if w in text), type(err).__name__)
        hint = " (a plain-HTTP registry needs --plain-http)" if why == "wrong version number" else ""
        raise RegistryError(f"{reference.host}: cannot reach the registry: {why}{hint}") from None
