"""`--triton`: let the real tritonserver judge a model repository, through a CPU-only shadow of it.

The repository is shadowed (see kubectl_triton.adapters.shadow: every non-ensemble model becomes a
python-backend model with the same configuration I/O, on CPU; ensembles unchanged), one server is
started on the shadow with strict model configuration (started again without the models it refused,
should it die after refusing them), and every model that is not READY becomes one `TritonLoadFailed`
error carrying Triton's own message.

Host-dependent failures are not reported as user errors: the shadow runs KIND_GPU/KIND_AUTO
instance groups on CPU, so "no GPUs available", "server does not support GPUs" and "invalid or
unsupported gpu id N" (N >= 0: whether GPU N exists depends on the target node, not on the config)
cannot arise from a correct config; should such a message still appear it is dropped. Negative gpu
ids are invalid on every host and stay errors. Raises ToolMissing when no tritonserver exists (the
caller falls back to the static checks) and TritonServerError when the server cannot run at all.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from kubectl_triton.adapters.shadow import build_shadow, model_dirs
from kubectl_triton.adapters.tritonserver import find_install, load_repository
from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.model.base import TRITON_LOAD
from kubectl_triton.gitops.repo import relative

CODE = TRITON_LOAD.code

_HOST_GPU = (re.compile(r"has kind KIND_GPU but (server does not support GPUs|no GPUs are available)"),
             re.compile(r"invalid or unsupported gpu id \d+\b"),
             re.compile(r"CUDA driver version is insufficient|no CUDA-capable device"))


def host_dependent(message: str) -> bool:
    """True when a load failure is caused by the shadow host lacking GPUs, not by the config."""
    return any(p.search(message) for p in _HOST_GPU)


def findings_from_states(failures: dict[str, str], repo_dir: Path,
                         display_root: Path | None = None) -> list[Finding]:
    """One error Finding per failed model (pure: model -> Triton's message)."""
    root = display_root or repo_dir
    out = []
    for model in sorted(failures):
        message = failures[model]
        if host_dependent(message):
            continue
        path = relative(root, repo_dir / model / "config.pbtxt")
        out.append(TRITON_LOAD.finding(message, path=path, model=model))
    return out


def run_shadow(shadow_dir: Path, timeout: float = 120) -> dict[str, str]:
    """Load a prepared shadow repository in tritonserver; model -> Triton's failure message for every model that
    is not READY."""
    loaded = load_repository(shadow_dir, timeout=timeout, exit_on_error=False)
    verdicts = {d.name: loaded.verdict(d.name) for d in model_dirs(shadow_dir)}
    return {name: message for name, message in verdicts.items() if message is not None}


def check_repository_with_triton(repo_dir: Path, *, display_root: Path | None = None,
                                 timeout: float = 120) -> list[Finding]:
    """Load a shadow of `repo_dir` in the real tritonserver and report every model that fails."""
    repo_dir = Path(repo_dir)
    if not model_dirs(repo_dir):
        return []
    find_install()  # ToolMissing before any work when there is no server
    with tempfile.TemporaryDirectory(prefix="kubectl-triton-shadow-") as tmp:
        shadow = Path(tmp) / "models"
        build_shadow(repo_dir, shadow, max_instances=1)
        failures = run_shadow(shadow, timeout=timeout)
    return findings_from_states(failures, repo_dir, display_root)
