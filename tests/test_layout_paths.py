"""A repository whose layout file names other folders: every command reads and writes where it says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kubectl_triton.gitops.model import Layout, Repository
from tests.conftest import REPO

PATHS = {"bases": "deploy/base", "gpus": "deploy/overlays/gpus", "overlays": "deploy/overlays",
         "models": "deploy/models", "clusters": "fleet"}


@pytest.fixture
def moved(tmp_path: Path) -> Path:
    """This repository with base/, overlays/ and models/ under deploy/ and clusters/ renamed fleet/ (the Flux
    Kustomizations' paths follow), described by a layout file."""
    root = tmp_path / "repo"
    for part in ("base", "overlays", "models"):
        shutil.copytree(REPO / part, root / "deploy" / part)
    shutil.copytree(REPO / "clusters", root / "fleet")
    for f in (root / "fleet").rglob("*.yaml"):
        text = f.read_text()
        text = text.replace("path: ./overlays/", "path: ./deploy/overlays/").replace("path: ./base/",
                                                                                      "path: ./deploy/base/")
        text = text.replace("path: ./clusters/", "path: ./fleet/")
        f.write_text(text)
    lines = ["paths:", *[f"  {k}: {v}" for k, v in PATHS.items()]]
    own = (REPO / "kubectl-triton.yaml").read_text()  # what the clusters provide (validate's apply-order checks)
    (root / "kubectl-triton.yaml").write_text("\n".join(lines) + "\n" + own[own.index("cluster:"):])
    return root


def errors(run_cli, root: Path) -> list[dict]:
    res = run_cli("validate", str(root), "-o", "json", "--no-compat")
    assert res.exit_code in (0, 1), res.stderr
    return [f for f in json.loads(res.stdout)["findings"] if f["severity"] == "error"]


def test_the_model_reads_the_layout_file(moved: Path):
    repo = Repository.at(moved)
    assert repo.layout.overlays == "deploy/overlays" and repo.layout.clusters == "fleet"
    assert {o.model for o in repo.overlays} >= {"image-classifier", "llama3-8b"}
    assert "l4" in repo.gpu_components and [c.name for c in repo.clusters] == ["production"]
    assert repo.model("image-classifier") is not None


def test_add_model_and_canary_write_where_the_layout_says(run_cli, moved: Path):
    assert errors(run_cli, moved) == []
    res = run_cli("add-model", "resnet", "--backend", "onnxruntime", "--gpu", "l4", "--repo", str(moved),
                  "--input", "input:FP32:3,224,224", "--output", "probs:FP32:1000")
    assert res.exit_code == 0, res.stderr
    assert (moved / "deploy/models/resnet/resnet/config.pbtxt").is_file()
    assert (moved / "deploy/overlays/resnet/l4/kustomization.yaml").is_file()
    assert (moved / "fleet/production/models/resnet-l4.yaml").is_file()
    assert not (moved / "models").exists() and not (moved / "overlays").exists() and not (moved / "clusters").exists()
    flux = (moved / "fleet/production/models/resnet-l4.yaml").read_text()
    assert "path: ./deploy/overlays/resnet/l4" in flux
    assert errors(run_cli, moved) == []
    res = run_cli("render", "--repo", str(moved), str(moved / "deploy/overlays/resnet/l4"))
    assert res.exit_code == 0, res.stderr

    version = moved / "deploy/models/image-classifier/image_classifier/2"
    version.mkdir()
    (version / ".gitkeep").write_text("")
    res = run_cli("canary", "image-classifier", "--version", "2", "--weight", "10", "--repo", str(moved))
    assert res.exit_code == 0, res.stderr
    assert (moved / "deploy/overlays/image-classifier/t4-canary/kustomization.yaml").is_file() or \
        (moved / "deploy/overlays/image-classifier/l4-canary/kustomization.yaml").is_file()
    assert (moved / "deploy/overlays/image-classifier/route/httproute.yaml").is_file()
    assert errors(run_cli, moved) == []


def test_layout_references_are_relative_to_the_writing_folder():
    layout = Layout(**{k: v for k, v in PATHS.items()})
    assert Layout.reference(layout.overlay_dir("m", "l4"), layout.gpu_component("l4")) == "../../gpus/l4"
    assert Layout.reference(layout.overlay_dir("m", "l4"), layout.base("triton")) == "../../../base/triton"
    assert Layout.reference("overlays/m/l4", "platform/bases/triton") == "../../../platform/bases/triton"


def test_validate_points_findings_at_the_moved_model_files(run_cli, moved: Path):
    config = moved / "deploy/models/image-classifier/image_classifier/config.pbtxt"
    config.write_text(config.read_text().replace("preferred_batch_size: [ 8, 16, 32 ]",
                                                 "preferred_batch_size: [ 8, 16, 64 ]"))
    found = [f for f in errors(run_cli, moved) if f["code"] == "DynamicBatching"]
    assert found, "a preferred batch size above max_batch_size must be an error"
    assert {f["path"] for f in found} == {"deploy/models/image-classifier/image_classifier/config.pbtxt"}
    assert all(f["line"] == 12 for f in found)
