"""Adapter for the kustomize binary (or `kubectl kustomize`): the only place that runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kubectl_triton.errors import RenderError, ToolMissing

# kustomize-controller builds with the repository root as the only boundary, so overlays may load
# files from elsewhere in the repo (here: models/). The same flag makes local renders match Flux.
FLUX_FLAGS = ("--load-restrictor", "LoadRestrictionsNone")


@dataclass(frozen=True)
class Rendered:
    """One kustomization directory and the multi-document YAML it built into."""

    path: Path
    yaml: str


def kustomize_command() -> list[str]:
    """The build command: `kustomize build` when on PATH, else `kubectl kustomize`."""
    if exe := shutil.which("kustomize"):
        return [exe, "build"]
    if exe := shutil.which("kubectl"):
        return [exe, "kustomize"]
    raise ToolMissing("neither kustomize nor kubectl is on PATH",
                      hint="install kubectl (it embeds kustomize) or the kustomize binary")


def build(path: Path, command: Sequence[str] | None = None) -> Rendered:
    """Build one kustomization directory; a kustomize failure becomes RenderError naming the path."""
    cmd = [*(command or kustomize_command()), *FLUX_FLAGS, str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RenderError(path, _first_error_line(proc.stderr))
    return Rendered(path, proc.stdout)


def build_many(paths: Iterable[Path]) -> list[Rendered | RenderError]:
    """Build several directories in parallel, keeping order; failures are returned, not raised."""
    cmd = kustomize_command()
    paths = list(paths)

    def one(p: Path) -> Rendered | RenderError:
        try:
            return build(p, cmd)
        except RenderError as err:
            return err

    workers = max(1, min(len(paths), (os.cpu_count() or 2) * 2))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, paths))


def _first_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    for ln in lines:
        if ln.lower().startswith("error:"):
            return ln[len("error:"):].strip()
    return lines[-1] if lines else "no output"
