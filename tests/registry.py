"""The CNCF distribution registry (Debian's docker-registry) served on loopback for the OCI artifact tests; skips
without it, except where KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS=1 (.ci/run installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

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
