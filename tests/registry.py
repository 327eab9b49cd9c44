"""The CNCF distribution registry (Debian's docker-registry) served on loopback for the OCI artifact tests; skips
without it, except where KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS=1 (.ci/run installs it)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from kubectl_triton.adapters.tritonserver import free_ports


@contextmanager
def registry(workdir: Path) -> Iterator[str]:
    """host:port of a registry storing under `workdir`, stopped on exit."""
    binary = shutil.which("docker-registry")
    if binary is None:
        if os.environ.get("KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS") == "1":
            pytest.fail("docker-registry is required here (make install installs Debian's docker-registry)")
        pytest.skip("no docker-registry (Debian package docker-registry; make install installs it)")
    (port,) = free_ports(1)
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "registry.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {workdir}/data\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n", encoding="utf-8")
    log = (workdir / "registry.log").open("wb")
    process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"docker-registry did not start: {(workdir / 'registry.log').read_text()[-500:]}")
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def helm_package(chart_dir: Path, version: str, dest: Path) -> tuple[Path, dict]:
    """`chart_dir` packaged as `helm package --version VERSION --app-version vVERSION` lays it out (NAME-VERSION.tgz
    holding NAME/...); the archive and its Chart.yaml."""
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text(encoding="utf-8"))
    chart.update(version=version, appVersion=f"v{version}")
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / f"{chart['name']}-{version}.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(p for p in chart_dir.rglob("*") if p.is_file()):
            name = f"{chart['name']}/{path.relative_to(chart_dir).as_posix()}"
            data = yaml.safe_dump(chart).encode() if path == chart_dir / "Chart.yaml" else path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return archive, chart


def _upload(host: str, repository: str, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = urllib.request.Request(f"http://{host}/v2/{repository}/blobs/uploads/", method="POST", data=b"")
    with urllib.request.urlopen(start, timeout=30) as answer:
        location = urllib.parse.urljoin(f"http://{host}", answer.headers["Location"])
    sep = "&" if "?" in location else "?"
    put = urllib.request.Request(f"{location}{sep}digest={digest}", method="PUT", data=data,
                                 headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(put, timeout=60):
        pass
    return {"digest": digest, "size": len(data)}


def push_helm_chart(host: str, repository: str, archive: Path, chart: dict) -> str:
    """Push a packaged chart to the registry at `host` as `helm push` does (an OCI manifest with Helm's config and
    chart-content media types), tagged with its version; the reference oci://HOST/REPOSITORY/NAME:VERSION."""
    name = f"{repository}/{chart['name']}"
    config = _upload(host, name, json.dumps(chart).encode())
    layer = _upload(host, name, archive.read_bytes())
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {"mediaType": HELM_CONFIG, **config},
                "layers": [{"mediaType": HELM_CHART, **layer}]}
    put = urllib.request.Request(f"http://{host}/v2/{name}/manifests/{chart['version']}", method="PUT",
                                 data=json.dumps(manifest).encode(), headers={"Content-Type": OCI_MANIFEST})
    with urllib.request.urlopen(put, timeout=30):
        pass
    return f"oci://{host}/{name}:{chart['version']}"
