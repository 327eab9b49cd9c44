"""A python model folder without config.pbtxt, judged statically and by the real tritonserver 2.51, in both of
Triton's modes: with auto-complete on (Triton's default) it loads — as a model without inputs or outputs unless
model.py's auto_complete_config adds them, so the gate warns; with --disable-auto-complete-config (the base
Deployment's flag) Triton refuses it, and so does the gate."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest

from kubectl_triton.adapters.tritonserver import TritonServer

PLAIN = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
AUTO = """class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [1]})
        config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]})
        return config

    def execute(self, requests):
        return []
"""


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    for name, source in (("plain", PLAIN), ("auto", AUTO)):
        (tmp_path / "models" / name / "1").mkdir(parents=True)
        (tmp_path / "models" / name / "1" / "model.py").write_text(source)
    return tmp_path / "models"


def _triton_states(repo: Path, strict: bool) -> dict[str, str]:
    """Each model folder's state in the real server's log: READY, or the poll error."""
    with TritonServer(repo, strict_model_config=strict) as server:
        with contextlib.suppress(Exception):  # a repository Triton refuses fails the start; its log says why
            server.start(timeout=90)
        deadline = time.monotonic() + 20
        states: dict[str, str] = {}
        while time.monotonic() < deadline and len(states) < 2:
            for line in server.log.splitlines():
                for name in ("plain", "auto"):
                    if f"Poll failed for model directory '{name}'" in line:
                        states[name] = line
                    elif line.replace(" ", "").startswith(f"|{name}|1|READY"):
                        states[name] = "READY"
            time.sleep(0.5)
    return states


@pytest.mark.parametrize("strict", [False, True], ids=["auto-complete", "disable-auto-complete-config"])
def test_static_verdict_is_tritons(run_cli, install, repository: Path, strict: bool):
    args = ["check-models", str(repository), "-o", "json"] + (["--disable-auto-complete-config"] if strict else [])
    result = run_cli(*args)
    assert result.exit_code == (1 if strict else 0), result.stderr
    findings = {f["model"]: f for f in json.loads(result.stdout)["findings"] if f["code"] == "ModelConfigMissing"}
    states = _triton_states(repository, strict)
    assert set(findings) == set(states) == {"plain", "auto"}, (findings, states)
    for name, state in states.items():
        if strict:
            assert "failed to open text file for read" in state and findings[name]["severity"] == "error"
        else:
            assert state == "READY" and findings[name]["severity"] == "warning"
            assert "--disable-auto-complete-config" in findings[name]["message"]
    if not strict:
        assert "no inputs or outputs" in findings["plain"]["message"]
        assert "auto_complete_config is all it gets" in findings["auto"]["message"]
