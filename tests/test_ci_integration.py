"""The repository's CI integration: the GitHub workflow and the pre-commit hooks."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from kubectl_triton.cli.precommit import main as changed_models
from tests.conftest import REPO


def test_workflow_installs_and_runs_validate_with_github_output_and_triton():
    workflow = yaml.safe_load((REPO / ".github/workflows/validate.yaml").read_text())
    steps = workflow["jobs"]["validate"]["steps"]
    runs = [s.get("run", "") for s in steps]
    assert "make install" in runs
    assert any("kubectl-triton validate -o github --triton" in r for r in runs)
    assert "pull_request" in workflow[True]  # YAML 1.1 reads the key `on` as True


def test_hook_definitions_point_at_installed_entry_points():
    hooks = {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    assert hooks["kubectl-triton-validate"]["entry"] == "kubectl-triton validate"
    assert hooks["kubectl-triton-validate"]["pass_filenames"] is False
    assert hooks["kubectl-triton-check-models"]["entry"] == "triton-check-changed-models"
    assert "triton-check-changed-models = kubectl_triton.cli.precommit:entry" in (REPO / "setup.cfg").read_text()


def test_changed_models_hook_passes_clean_files_and_fails_broken_ones(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(REPO / "models/llama3-8b", tmp_path / "models/llama3-8b")
    changed = ["models/llama3-8b/ensemble/config.pbtxt", "models/llama3-8b/tensorrt_llm/config.pbtxt"]
    assert changed_models(changed) == 0
    config = tmp_path / "models/llama3-8b/tensorrt_llm/config.pbtxt"
    config.write_text(config.read_text().replace('key: "gpt_model_path"', 'key: "gpt_model_pth"'))
    assert changed_models(changed) == 1
    out = capsys.readouterr().out
    assert "models/llama3-8b/tensorrt_llm/config.pbtxt" in out and "gpt_model_path" in out
