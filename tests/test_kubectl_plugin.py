"""The real kubectl finds the installed plugin and runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kubectl_triton import __version__

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


def _kubectl(*args: str) -> subprocess.CompletedProcess:
    if not (BIN / "kubectl-triton").exists():
        pytest.skip("kubectl-triton console script is not installed in this environment (run make install)")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["kubectl", *args], capture_output=True, text=True, env=env, timeout=60)


def test_kubectl_plugin_list_finds_kubectl_triton_and_nothing_else_of_ours():
    result = _kubectl("plugin", "list")
    assert str(BIN / "kubectl-triton") in result.stdout
    ours = [line for line in result.stdout.splitlines() if line.startswith(str(BIN))]
    assert ours == [str(BIN / "kubectl-triton")], "internal entry points must not look like kubectl plugins"


def test_kubectl_triton_help_runs_through_kubectl():
    result = _kubectl("triton", "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: kubectl triton" in result.stdout
    for command in ("render", "version"):
        assert command in result.stdout


def test_kubectl_triton_version_through_kubectl():
    result = _kubectl("triton", "version")
    assert result.returncode == 0 and result.stdout.strip() == f"kubectl-triton {__version__}"


def test_help_does_not_import_heavy_libraries():
    code = ("import sys; from kubectl_triton.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('kubernetes', 'tritonclient', 'ruamel.yaml', 'jsonschema', 'google.protobuf')"
            " if m in sys.modules]\nprint('HEAVY=' + ','.join(heavy))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "HEAVY="
