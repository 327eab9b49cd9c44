"""Repository-level compatibility: overlays rendered with kustomize, the matrix, validate's findings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kubectl_triton.cli import cli
from kubectl_triton.compat.repo_check import admitted_labels, check_repo, matrix, placements

ENGINES = Path(__file__).parent / "fixtures" / "engines"
IMAGE = "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3"
CONFIG = """name: "tensorrt_llm"
backend: "tensorrtllm"
max_batch_size: 8
model_transaction_policy { decoupled: true }
input [ { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] } ]
parameters: { key: "kv_cache_free_gpu_mem_fraction" value: { string_value: "0.85" } }
parameters: { key: "max_tokens_in_paged_kv_cache" value: { string_value: "${max_tokens_in_paged_kv_cache}" } }
"""


def deployment(model: str, pod_extra: dict, gpus: int | None = 1) -> dict:
    container = {"name": "tritonserver", "image": IMAGE}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    labels = {"app.kubernetes.io/name": "triton-inference-server", "app.kubernetes.io/instance": model}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": f"triton-{model}", "labels": labels},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [container], **pod_extra}}}}


def selector(label: str) -> dict:
    return {"nodeSelector": {"nvidia.com/gpu.product": label}}


def affinity(*labels: str) -> dict:
    expr = {"key": "nvidia.com/gpu.product", "operator": "In", "values": list(labels)}
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}}


def overlay(root: Path, rel: str, doc: dict) -> None:
    d = root / "overlays" / rel
    d.mkdir(parents=True)
    (d / "deployment.yaml").write_text(yaml.safe_dump(doc))
    (d / "kustomization.yaml").write_text("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
                                          "resources: [deployment.yaml]\n")


def model(root: Path, name: str, engine: str | None, key: str = "h100-80gb", max_seq_len: int = 8192) -> None:
    d = root / "models" / name
    (d / "tensorrt_llm").mkdir(parents=True)
    (d / "model.yaml").write_text(yaml.safe_dump({"name": name, "backend": "tensorrtllm", "image": IMAGE,
                                                  "engine": {"max_seq_len": max_seq_len}}))
    (d / "tensorrt_llm" / "config.pbtxt").write_text(CONFIG)
    if engine:
        shutil.copytree(ENGINES / engine, d / "engines" / key)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    model(root, "llama", "llama3-8b-bf16-tp1-h100")
    model(root, "other", None)
    overlay(root, "llama/h100-80gb", deployment("llama", selector("NVIDIA-H100-80GB-HBM3")))
    overlay(root, "llama/a100-80gb", deployment("llama", selector("NVIDIA-A100-SXM4-80GB")))
    overlay(root, "llama/mixed", deployment("llama", affinity("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3")))
    overlay(root, "other/l4", deployment("other", selector("NVIDIA-L4"), gpus=None))
    return root


def test_matrix_verdicts(repo):
    results, failures = matrix(repo)
    assert failures == []
    got = {(r.model, r.gpu): (r.compatible, [x.code for x in r.reasons]) for r in results}
    assert got[("llama", "h100-80gb")] == (True, [])
    assert got[("llama", "a100-80gb")] == (False, ["ArchMismatch"])
    assert got[("llama", "mixed")][0] is False and "AmbiguousTarget" in got[("llama", "mixed")][1]
    assert got[("other", "l4")] == (None, ["EngineNotRecorded"])


def test_hypothetical_gpu_without_overlay(repo):
    results, _ = matrix(repo, model="llama", gpu="h200")
    assert [(r.gpu, r.overlay, r.compatible) for r in results] == [("h200", None, True)]
    assert [x.code for x in results[0].reasons] == ["DeviceModelDiffers"]


def test_check_repo_findings_name_the_overlay(repo):
    findings = check_repo(repo)
    arch = [f for f in findings if f.code == "ArchMismatch"]
    assert {f.path for f in arch} == {"overlays/llama/a100-80gb", "overlays/llama/mixed"}
    assert all(f.severity == "error" and f.model == "llama" for f in arch)


def test_seq_len_from_model_yaml(tmp_path):
    model(tmp_path, "long", "llama3-8b-bf16-tp1-h100", max_seq_len=32768)
    overlay(tmp_path, "long/h100-80gb", deployment("long", selector("NVIDIA-H100-80GB-HBM3")))
    results, _ = matrix(tmp_path)
    assert [x.code for x in results[0].reasons] == ["SeqLenExceedsEngine"]


def test_compat_command_matrix_and_exit_code(repo):
    result = CliRunner().invoke(cli, ["compat", str(repo)], obj={})
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].split() == ["MODEL", "A100-80GB", "L4", "H100-80GB", "MIXED"]  # catalog order
    assert lines[1].split() == ["llama", "✗", "ArchMismatch", "-", "✓", "✗", "AmbiguousTarget"]
    assert lines[2].split() == ["other", "-", "?", "EngineNotRecorded", "-", "-"]
    assert any(ln.startswith("llama on a100-80gb (overlays/llama/a100-80gb): error [ArchMismatch]") for ln in lines)


def test_compat_command_json_filtered(repo):
    result = CliRunner().invoke(cli, ["compat", str(repo), "--model", "llama", "--gpu", "NVIDIA-H100-80GB-HBM3",
                                      "-o", "json"], obj={})
    assert result.exit_code == 1  # the mixed overlay admits H100s too, and is ambiguous
    doc = json.loads(result.output)
    assert doc["results"][0] == {"model": "llama", "gpu": "h100-80gb", "compatible": True, "reasons": []}
    assert [r["gpu"] for r in doc["results"]] == ["h100-80gb", "mixed"]
    assert set(doc["results"][1]) == {"model", "gpu", "compatible", "reasons"}


def test_compat_command_engine_dir(tmp_path):
    engine = str(ENGINES / "llama3-70b-fp8-tp4-h100")
    ok = CliRunner().invoke(cli, ["compat", "--engine-dir", engine, "--gpu", "NVIDIA-H100-80GB-HBM3",
                                  "--image", IMAGE, "-o", "json"], obj={})
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["results"][0]["compatible"] is True
    bad = CliRunner().invoke(cli, ["compat", "--engine-dir", engine, "--gpu", "l40s", "--gpus-per-pod", "2"], obj={})
    assert bad.exit_code == 1
    assert "ArchMismatch" in bad.output and "GPUCountMismatch" in bad.output


def test_compat_command_usage_errors(tmp_path):
    runner = CliRunner()
    assert runner.invoke(cli, ["compat", "--engine-dir", str(tmp_path)], obj={}).exit_code == 2  # no --gpu
    assert runner.invoke(cli, ["compat", "--image", IMAGE, str(tmp_path)], obj={}).exit_code == 2


@pytest.mark.parametrize("spec,expected", [
    ({}, None),
    (selector("NVIDIA-L4"), {"NVIDIA-L4"}),
    (affinity("NVIDIA-L4", "NVIDIA-L40S"), {"NVIDIA-L4", "NVIDIA-L40S"}),
    ({**selector("NVIDIA-L4"), **affinity("NVIDIA-L4", "NVIDIA-L40S")}, {"NVIDIA-L4"}),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "Exists"}]}]}}}}, None),
])
def test_admitted_labels(spec, expected):
    got = admitted_labels(spec)
    assert (set(got) if got is not None else None) == expected


def test_placement_reads_gpu_count_and_image():
    [p] = placements([deployment("m", selector("NVIDIA-L4"), gpus=2)], "overlays/m/l4")
    assert (p.model, p.gpus_per_pod, p.image, p.overlay) == ("m", 2, IMAGE, "overlays/m/l4")
