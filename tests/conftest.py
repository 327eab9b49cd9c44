"""Shared fixtures: the repository, ../shared, rendered overlays, and running the CLI in-process."""

from __future__ import annotations

import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.cli import main
from kubectl_triton.formats import yamlio
from kubectl_triton.gitops import repo

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


# as the process began: Python's own handler, or SIG_IGN where a shell started the run in the background
SESSION_SIGINT = signal.getsignal(signal.SIGINT)


@pytest.fixture(autouse=True)
def _sigint_handler_left_as_found(request):
    """Every test begins with Ctrl-C handled as the process began and leaves it so (a handler left behind swallows
    a later test's Ctrl-C and that test would fail without a word on the handler): restored, and reported."""
    before = signal.getsignal(signal.SIGINT)
    if before is not SESSION_SIGINT:  # left by a fixture, or by the teardown of an earlier test
        signal.signal(signal.SIGINT, SESSION_SIGINT)
        pytest.fail(f"SIGINT was handled by {before!r} when {request.node.nodeid} began (restored)")
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"{request.node.nodeid} left the SIGINT handler {after!r} (was {before!r})")


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(capsys):
    """Run `kubectl triton ARGS` in-process through the real entry point (exit-code translation included)."""

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)

    return run


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared (conformance data, CRD schemas) is not beside this checkout")
    return SHARED


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict]]:
    """Every overlay and cluster folder of this repository, rendered once: relative path -> objects."""
    targets = [*repo.overlays(REPO), *repo.clusters(REPO)]
    out = {}
    for result in kustomize.build_many(targets):
        assert not isinstance(result, Exception), result
        out[repo.relative(REPO, result.path)] = yamlio.loads_all(result.yaml, str(result.path))
    return out


@pytest.fixture(autouse=True, scope="session")
def _render_cache(tmp_path_factory: pytest.TempPathFactory):
    """validate's render cache lives in the test session's temporary folder, not in the user's ~/.cache."""
    old = os.environ.get("KUBECTL_TRITON_CACHE_DIR")
    os.environ["KUBECTL_TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("render-cache"))
    yield
    if old is None:
        os.environ.pop("KUBECTL_TRITON_CACHE_DIR", None)
    else:
        os.environ["KUBECTL_TRITON_CACHE_DIR"] = old


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A scratch copy of the example repository's GitOps folders."""
    dest = tmp_path / "repo"
    for part in ("base", "overlays", "models", "clusters"):
        shutil.copytree(REPO / part, dest / part)
    shutil.copy(REPO / "kubectl-triton.yaml", dest / "kubectl-triton.yaml")  # what the clusters provide
    return dest


@pytest.fixture(scope="session")
def install():
    """The tritonserver installation (the nvidia-pytriton wheel or one on PATH); skips the test without one."""
    from kubectl_triton.adapters.tritonserver import find_install
    from kubectl_triton.errors import ToolMissing

    try:
        return find_install()
    except ToolMissing as exc:
        pytest.skip(f"no tritonserver: {exc.message}")


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's hook signature
    """Show the figures tests record with `record_property` (the status corpus agreement, fault cases) at the end
    of `make test`, where a captured print would be hidden."""
    reports = [rep for outcome in ("passed", "failed") for rep in terminalreporter.stats.get(outcome, [])]
    rows = [(rep.nodeid, key, value) for rep in reports if rep.when == "call" for key, value in rep.user_properties]
    if rows:
        terminalreporter.section("recorded figures")
        for nodeid, key, value in rows:
            terminalreporter.line(f"{key} = {value}   ({nodeid})")
