"""What `validate --server` costs on top of plain `validate`, on this repository (one cluster folder, 11 Flux
Kustomizations, about 90 objects): the median of three alternating pairs, each a fresh process with an empty
render cache; --server starts its ephemeral etcd + kube-apiserver (the `make controlplane` build) each run.
Reported: both medians, the extra seconds, and how they split between starting the control plane and applying.
No goal: the figure is for deciding where in CI to run it (docs/validate-server.md)."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PAIRS = 3


def _copy(dest: Path) -> Path:
    for part in ("base", "overlays", "models", "clusters"):
        shutil.copytree(ROOT / part, dest / part)
    shutil.copy(ROOT / "kubectl-triton.yaml", dest / "kubectl-triton.yaml")
    return dest


def _timed(repo: Path, *args: str) -> float:
    env = {**os.environ, "KUBECTL_TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="bench-render-"),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    start = time.perf_counter()
    proc = subprocess.run([str(BIN / "kubectl-triton"), "validate", str(repo), "-o", "json", *args],
                          capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"validate {' '.join(args)} failed: {proc.stderr.strip()}")
    return elapsed


def _start_only() -> float:
    from kubectl_triton.adapters.controlplane import ControlPlane, find_assets

    start = time.perf_counter()
    with ControlPlane(find_assets()):
        return time.perf_counter() - start


def main() -> dict:
    from kubectl_triton.adapters.controlplane import find_assets
    from kubectl_triton.errors import ToolMissing

    try:
        find_assets()
    except ToolMissing as err:
        print(f"validate --server: skipped ({err.message})")
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = _copy(Path(tmp) / "repo")
        _timed(repo)  # compile and page in once, unmeasured
        plain, server = [], []
        for _ in range(PAIRS):
            plain.append(_timed(repo))
            server.append(_timed(repo, "--server"))
        startup = statistics.median(_start_only() for _ in range(PAIRS))
    p, s = statistics.median(plain), statistics.median(server)
    print(f"validate --server: plain median {p:.2f} s, --server median {s:.2f} s (pairs "
          f"{', '.join(f'{a:.2f}/{b:.2f}' for a, b in zip(plain, server, strict=True))})")
    print(f"validate --server: +{s - p:.2f} s, of which {startup:.2f} s start etcd + kube-apiserver and "
          f"{s - p - startup:.2f} s apply; ratio --server / plain = {s / p:.2f}")
    return {"plain_s": p, "server_s": s, "startup_s": startup}


if __name__ == "__main__":
    main()
