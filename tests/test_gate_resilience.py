"""The gate never goes silent: a malformed kustomization, Flux file, model.yaml or layout file is a finding with
its repository-relative path and line, and every other finding is still reported, in text, json and github."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _break_two_files(repo: Path) -> None:
    """A syntax error in one kustomization and a config.pbtxt Triton refuses in another model."""
    _edit(repo / "overlays/image-classifier/l4/kustomization.yaml", "components:\n", " components: [\n")
    _edit(repo / "models/text-embedder/text_embedder/config.pbtxt", "max_batch_size: 64", "max_batch_size: -64")


def test_syntax_error_and_wrong_config_are_both_reported_in_every_format(run_cli, repo_copy: Path, tmp_path,
                                                                          monkeypatch):
    _break_two_files(repo_copy)
    kfile, config = "overlays/image-classifier/l4/kustomization.yaml", "models/text-embedder/text_embedder/config.pbtxt"

    text = run_cli("validate", str(repo_copy))
    assert text.exit_code == 1 and "Traceback" not in text.stderr
    lines = text.stdout.splitlines()
    assert any(ln.startswith(f"{kfile}:") and "error [YamlInvalid]" in ln for ln in lines)
    assert any(ln.startswith(f"{config}:4: error") and "max_batch_size" in ln for ln in lines)

    doc = json.loads(run_cli("validate", str(repo_copy), "-o", "json").stdout)
    assert doc["ok"] is False
    syntax = [f for f in doc["findings"] if f["code"] == "YamlInvalid"]
    assert [(f["path"], f["severity"]) for f in syntax] == [(kfile, "error")] and syntax[0]["line"]
    assert any(f["path"] == config and f["line"] == 4 and f["model"] == "text_embedder" for f in doc["findings"])
    # the rest of the repository is still checked: other overlays render and their checks run
    assert not any(f["code"] == "RenderFailed" for f in doc["findings"])
    assert not any(str(REPO) in f["message"] or str(repo_copy) in f["message"] for f in doc["findings"])

    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    github = run_cli("validate", str(repo_copy), "-o", "github")
    assert github.exit_code == 1
    assert any(ln.startswith(f"::error file={kfile},line=") and "title=YamlInvalid" in ln
               for ln in github.stdout.splitlines())
    assert any(ln.startswith(f"::error file={config},line=4,") for ln in github.stdout.splitlines())


def test_malformed_flux_file_is_a_finding_and_the_other_clusters_checks_run(run_cli, repo_copy: Path):
    _edit(repo_copy / "clusters/production/models/text-embedder-a10g.yaml", "  timeout: 15m\n", "  timeout: [15m\n")
    _edit(repo_copy / "models/llama3-8b/ensemble/config.pbtxt", 'value: "_REQUEST_INPUT_LEN" }',
          'value: "_NO_SUCH_TENSOR" }')
    result = run_cli("validate", str(repo_copy), "-o", "json")
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    flux = [f for f in doc["findings"] if f["code"] == "YamlInvalid"]
    assert [f["path"] for f in flux] == ["clusters/production/models/text-embedder-a10g.yaml"]
    assert flux[0]["line"] in (9, 10)
    assert any(f["path"] == "models/llama3-8b/ensemble/config.pbtxt" for f in doc["findings"])
    assert not any(f["code"] == "CheckInputInvalid" for f in doc["findings"])


def test_malformed_model_yaml_has_its_repository_path_and_line(run_cli, repo_copy: Path):
    _edit(repo_copy / "models/image-classifier/model.yaml", "gpus: [t4, l4]", "gpus: [t4, l4")
    doc = json.loads(run_cli("validate", str(repo_copy), "-o", "json").stdout)
    bad = [f for f in doc["findings"] if f["severity"] == "error"]
    assert [(f["code"], f["path"]) for f in bad] == [("YamlInvalid", "models/image-classifier/model.yaml")]
    assert bad[0]["line"] and str(repo_copy) not in bad[0]["message"]


def test_model_yaml_of_the_wrong_shape(run_cli, repo_copy: Path):
    _edit(repo_copy / "models/llama3-8b/model.yaml", "  tp: 1\n", "  tp: one\n")
    doc = json.loads(run_cli("validate", str(repo_copy), "-o", "json").stdout)
    bad = [f for f in doc["findings"] if f["severity"] == "error"]
    assert [(f["code"], f["path"], f["model"]) for f in bad] == [
        ("ModelMetadataInvalid", "models/llama3-8b/model.yaml", "llama3-8b")]
    assert bad[0]["message"].startswith("engine.tp must be a positive integer")


def test_malformed_layout_file_is_a_finding_and_the_gate_goes_on(run_cli, repo_copy: Path):
    """The layout file is part of the repository: validate reports it (exit 1, with its line, in every output
    format), goes on with the default layout and still reports the other problems."""
    _edit(repo_copy / "kubectl-triton.yaml", "        rwx: true\n", "        rwx: yes-please\n")
    _edit(repo_copy / "models/llama3-8b/model.yaml", "  tp: 1\n", "  tp: one\n")
    result = run_cli("validate", str(repo_copy), "-o", "json")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    found = {(f["code"], f["path"]): f for f in json.loads(result.stdout)["findings"] if f["severity"] == "error"}
    layout = found[("LayoutInvalid", "kubectl-triton.yaml")]
    lines = (repo_copy / "kubectl-triton.yaml").read_text().splitlines()
    assert "rwx" in layout["message"] and "yes-please" in lines[layout["line"] - 1]
    assert ("ModelMetadataInvalid", "models/llama3-8b/model.yaml") in found
    github = run_cli("validate", str(repo_copy), "-o", "github")
    assert github.exit_code == 1 and f"::error file=kubectl-triton.yaml,line={layout['line']}" in github.stdout


def test_malformed_layout_file_stops_other_commands_in_one_line(run_cli, repo_copy: Path):
    """Outside the gate the layout file configures the command itself: a bad one is a usage error, exit 2."""
    (repo_copy / "kubectl-triton.yaml").write_text("paths:\n  overlays: [1\n")
    result = run_cli("render", "--all", "--repo", str(repo_copy))
    assert result.exit_code == 2 and "kubectl-triton.yaml" in result.stderr and "invalid YAML" in result.stderr
    assert result.stderr.count("\n") <= 2 and "Traceback" not in result.stderr
    assert run_cli("validate", str(repo_copy)).exit_code == 1


def test_layout_reader_names_the_line(repo_copy: Path):
    from kubectl_triton.gitops.layout import LayoutError, read_cluster_provides

    _edit(repo_copy / "kubectl-triton.yaml", "        rwx: true\n", "        rwx: yes-please\n")
    with pytest.raises(LayoutError) as raised:
        read_cluster_provides(repo_copy)
    lines = (repo_copy / "kubectl-triton.yaml").read_text().splitlines()
    assert raised.value.path == "kubectl-triton.yaml" and "yes-please" in lines[raised.value.line - 1]


def test_usage_errors_stay_exit_2(run_cli, tmp_path):
    result = run_cli("validate", str(tmp_path))
    assert result.exit_code == 2 and "overlays/ folder here or in any parent" in result.stderr
    result = run_cli("validate", str(REPO), "--no-such-flag")
    assert result.exit_code == 2
