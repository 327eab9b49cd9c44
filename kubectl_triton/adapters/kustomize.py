"""Adapter for the kustomize binary (or `kubectl kustomize`): the only place that runs it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.errors import RenderError, ToolMissing
from kubectl_triton.gitops.inputs import Inputs, build_inputs

# kustomize-controller builds with the repository root as the only boundary, so overlays may load
# files from elsewhere in the repo (here: models/). The same flag makes local renders match Flux.
FLUX_FLAGS = ("--load-restrictor", "LoadRestrictionsNone")


@dataclass(frozen=True)
class Rendered:
    """One kustomization directory and the multi-document YAML it built into (with the cache key it is stored
    under and, when the cache had them, its documents already parsed)."""

    path: Path
    yaml: str
    key: str | None = None
    docs: list[Any] | None = None


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


class RenderCache:
    """Renders on disk, keyed by the content of every file the build can read (gitops.inputs), the kustomize
    binary and the flags: an edit to any input is a new key, so a stale render is never served. Failed builds
    and builds with remote inputs are never cached. Writes are atomic (temporary file, then rename)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or default_cache_dir()
        self.hits = 0
        self.misses = 0
        self._digests: dict[Path, str] = {}
        self.inputs: dict[Path, Inputs] = {}  # build inputs of each folder keyed this run (files read once)

    def _digest(self, path: Path) -> str:
        if path not in self._digests:
            try:
                self._digests[path] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                self._digests[path] = "missing"
        return self._digests[path]

    def key(self, path: Path, command: Sequence[str]) -> str | None:
        """The content key of a build of `path`, or None when its inputs cannot all be known."""
        inputs = self.inputs[path] = build_inputs(path)
        if not inputs.complete:
            return None
        h = hashlib.sha256()
        for part in (*command, *FLUX_FLAGS, str(path.resolve())):
            h.update(part.encode() + b"\0")
        exe = Path(command[0])
        if exe.is_file():
            st = exe.stat()
            h.update(f"{st.st_size}:{st.st_mtime_ns}\0".encode())
        for file in sorted(inputs.files):
            h.update(f"{file}\0{self._digest(file)}\0".encode())
        return h.hexdigest()

    def get(self, key: str) -> tuple[str, list[Any] | None] | None:
        """The cached render and, when stored, its parsed documents."""
        try:
            text = (self.directory / f"{key}.yaml").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        docs = None
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads((self.directory / f"{key}.json").read_text(encoding="utf-8"))
            docs = loaded if isinstance(loaded, list) else None
        self.hits += 1
        return text, docs

    def put_docs(self, key: str, docs: list[Any]) -> None:
        """Store a render's parsed documents beside it (JSON parses far faster than YAML), when JSON holds them
        exactly (no dates, no non-string keys)."""
        try:
            text = json.dumps(docs, separators=(",", ":"))
        except (TypeError, ValueError):
            return
        if json.loads(text) == docs:
            self._write(f"{key}.json", text)

    def prune(self, keep: int = 2048) -> None:
        """Keep the `keep` most recently written renders."""
        with contextlib.suppress(OSError):
            entries = sorted(self.directory.glob("*.yaml"), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in entries[keep:]:
                old.unlink(missing_ok=True)
                old.with_suffix(".json").unlink(missing_ok=True)

    def put(self, key: str, text: str) -> None:
        self._write(f"{key}.yaml", text)

    def _write(self, name: str, text: str) -> None:
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs speed
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, self.directory / name)


def default_cache_dir() -> Path:
    """$KUBECTL_TRITON_CACHE_DIR, else $XDG_CACHE_HOME/kubectl-triton/renders (~/.cache by default)."""
    if os.environ.get("KUBECTL_TRITON_CACHE_DIR"):
        return Path(os.environ["KUBECTL_TRITON_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kubectl-triton" / "renders"


def build_many(paths: Iterable[Path], cache: RenderCache | None = None) -> list[Rendered | RenderError]:
    """Build several directories in parallel, keeping order; failures are returned, not raised. With `cache`,
    a build whose inputs are unchanged is read from it instead of run."""
    cmd = kustomize_command()
    paths = list(paths)

    def one(p: Path) -> Rendered | RenderError:
        key = cache.key(p, cmd) if cache is not None else None
        if cache is not None and key is not None:
            found = cache.get(key)
            if found is not None:
                return Rendered(p, found[0], key, found[1])
            cache.misses += 1
        try:
            result = build(p, cmd)
        except RenderError as err:
            return err
        if cache is not None and key is not None:
            cache.put(key, result.yaml)
            return Rendered(p, result.yaml, key)
        return result

    workers = max(1, min(len(paths), (os.cpu_count() or 2) * 2))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, paths))


def _first_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    for ln in lines:
        if ln.lower().startswith("error:"):
            return ln[len("error:"):].strip()
    return lines[-1] if lines else "no output"
