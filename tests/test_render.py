"""`kubectl triton render`: every overlay builds, output is what kustomize (as Flux runs it) produces."""

from __future__ import annotations

import os
from pathlib import Path

from kubectl_triton.formats import yamlio
from kubectl_triton.gitops import repo
from tests.conftest import REPO

MODEL_OVERLAYS = {"overlays/llama3-8b/h100-80gb", "overlays/llama3-8b/h100-80gb-engine-build",
                  "overlays/image-classifier/t4", "overlays/image-classifier/l4",
                  "overlays/text-embedder/a10g", "overlays/ensemble-pipeline/l4"}


def test_discovery_finds_every_model_overlay_and_no_component():
    found = {repo.relative(REPO, p) for p in repo.overlays(REPO)}
    assert found >= MODEL_OVERLAYS
    components = {repo.relative(REPO, p) for p in repo.components(REPO)}
    assert "overlays/gpus/h100-80gb" in components and not components & found


def test_render_all_exits_zero_and_heads_each_group_with_its_source(run_cli, monkeypatch):
    monkeypatch.chdir(REPO / "models")  # found from a sub-folder, as kubectl users expect
    result = run_cli("render", "--all")
    assert result.exit_code == 0, result.stderr
    sources = {line.split(": ", 1)[1] for line in result.stdout.splitlines() if line.startswith("# Source: ")}
    # Every path a Flux Kustomization applies, not only overlays: platform, infrastructure, monitoring.
    assert MODEL_OVERLAYS | {"clusters/production", "base/platform", "clusters/production/infrastructure"} <= sources
    kinds = {d["kind"] for d in yamlio.loads_all(result.stdout)}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "Job", "Kustomization", "GitRepository"} <= kinds


def test_render_one_overlay_matches_kubectl_kustomize(run_cli):
    import subprocess

    result = run_cli("render", "overlays/image-classifier/l4", "--repo", str(REPO))
    assert result.exit_code == 0, result.stderr
    expected = subprocess.run(["kubectl", "kustomize", "--load-restrictor", "LoadRestrictionsNone",
                               str(REPO / "overlays/image-classifier/l4")],
                              capture_output=True, text=True, check=True).stdout
    assert yamlio.loads_all(result.stdout) == yamlio.loads_all(expected)


def test_render_without_arguments_is_a_usage_error(run_cli):
    result = run_cli("render", "--repo", str(REPO))
    assert result.exit_code == 2
    assert "--all" in result.stderr and "Traceback" not in result.stderr


def test_render_missing_overlay_names_it(run_cli):
    result = run_cli("render", "overlays/no-such-model/h100", "--repo", str(REPO))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: overlays/no-such-model/h100: not a kustomization folder (no kustomization.yaml)"]


def test_render_failure_names_the_overlay_and_exits_1(run_cli, repo_copy: Path):
    broken = repo_copy / "overlays/image-classifier/l4/kustomization.yaml"
    broken.write_text(broken.read_text().replace("../../gpus/l4", "../../gpus/no-such-gpu"))
    result = run_cli("render", "overlays/image-classifier/l4", "--repo", str(repo_copy))
    assert result.exit_code == 1
    assert "overlays/image-classifier/l4" in result.stderr and "kustomize build failed" in result.stderr


def test_malformed_kustomization_yaml_is_one_line_naming_the_file(run_cli, repo_copy: Path):
    bad = repo_copy / "overlays/text-embedder/a10g/kustomization.yaml"
    bad.write_text("kind: Kustomization\nresources: [unclosed\n")
    result = run_cli("render", "--all", "--repo", str(repo_copy))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "overlays/text-embedder/a10g/kustomization.yaml:" in lines[0]


def test_neither_kustomize_nor_kubectl_is_a_clear_error(run_cli, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run_cli("render", "--all", "--repo", str(REPO))
    assert result.exit_code == 2
    assert "neither kustomize nor kubectl is on PATH" in result.stderr


def test_kustomize_binary_is_preferred_when_on_path(run_cli, monkeypatch, tmp_path: Path):
    marker = tmp_path / "called"
    fake = tmp_path / "kustomize"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {marker}\necho 'apiVersion: v1'\necho 'kind: List'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    result = run_cli("render", "overlays/image-classifier/l4", "--repo", str(REPO))
    assert result.exit_code == 0
    assert marker.read_text().split()[:3] == ["build", "--load-restrictor", "LoadRestrictionsNone"]
