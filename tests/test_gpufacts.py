"""GPU facts before an engine exists: each rule with a passing and a failing case, from add-model as a new user
runs it and from mutated copies of this repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubectl_triton.checks.manifests.gpufacts import ModelMeta, check_placement, parameters_billion, release
from kubectl_triton.compat.catalog import gpus
from kubectl_triton.compat.data import load
from kubectl_triton.compat.repo_check import Placement


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _errors(run_cli, repo: Path, code: str) -> list[dict]:
    result = run_cli("validate", str(repo), "-o", "json")
    assert result.exit_code in (0, 1), result.stderr
    return [f for f in json.loads(result.stdout)["findings"] if f["code"] == code]


def test_fp8_on_t4_is_refused_before_any_engine_exists(run_cli, repo_copy: Path):
    assert run_cli("add-model", "qwen-7b", "--backend", "tensorrtllm", "--gpu", "t4", "--quantization", "fp8",
                   "--dtype", "float16", "--repo", str(repo_copy)).exit_code == 0
    found = _errors(run_cli, repo_copy, "QuantizationUnsupported")
    assert [(f["path"], f["model"], f["object"]) for f in found] == [
        ("models/qwen-7b/model.yaml", "qwen-7b", "Deployment/triton/qwen-7b-triton")]
    assert "FP8" in found[0]["message"] and "8.9" in found[0]["message"] and "7.5" in found[0]["message"]
    lines = (repo_copy / "models/qwen-7b/model.yaml").read_text().splitlines()
    assert lines[found[0]["line"] - 1].strip() == "quantization: fp8"


def test_fp8_on_l4_passes(run_cli, repo_copy: Path):
    assert run_cli("add-model", "qwen-7b", "--backend", "tensorrtllm", "--gpu", "l4", "--quantization", "fp8",
                   "--repo", str(repo_copy)).exit_code == 0
    assert _errors(run_cli, repo_copy, "QuantizationUnsupported") == []


def test_tp16_on_h200_asks_for_more_gpus_than_a_node_has(run_cli, repo_copy: Path):
    assert run_cli("add-model", "big-70b", "--backend", "tensorrtllm", "--gpu", "h200", "--tp", "16",
                   "--repo", str(repo_copy)).exit_code == 0
    found = _errors(run_cli, repo_copy, "GPUsPerNodeExceeded")
    assert [(f["path"], f["object"], f["severity"]) for f in found] == [
        ("overlays/big-70b/h200", "Deployment/triton/big-70b-triton", "error")]
    assert "16" in found[0]["message"] and "8" in found[0]["message"]
    # tp 8 fits one node, and tp x pp matches the GPUs requested (add-model writes that patch)
    (repo_copy / "models/big-70b/model.yaml").write_text(
        (repo_copy / "models/big-70b/model.yaml").read_text().replace("tp: 16", "tp: 8"))
    _edit(repo_copy / "overlays/big-70b/h200/kustomization.yaml", "value: 16", "value: 8")
    assert _errors(run_cli, repo_copy, "GPUsPerNodeExceeded") == []
    assert _errors(run_cli, repo_copy, "ParallelismMismatch") == []


def test_tp_times_pp_must_match_the_gpus_requested(run_cli, repo_copy: Path):
    _edit(repo_copy / "models/llama3-8b/model.yaml", "  tp: 1\n", "  tp: 2\n")
    found = _errors(run_cli, repo_copy, "ParallelismMismatch")
    assert [(f["path"], f["object"]) for f in found] == [("models/llama3-8b/model.yaml",
                                                          "Deployment/triton/llama3-8b-triton")]
    assert "tp 2 x pp 1 = 2" in found[0]["message"] and "nvidia.com/gpu: 1" in found[0]["message"]


def test_image_upgrade_must_update_the_model_metadata(run_cli, repo_copy: Path):
    for path in [*repo_copy.glob("overlays/*/model/deployment.yaml"), repo_copy / "base/triton/deployment.yaml",
                 repo_copy / "base/engine-build/job.yaml"]:
        path.write_text(path.read_text().replace("tritonserver:24.12-", "tritonserver:25.01-"))
    found = _errors(run_cli, repo_copy, "TritonReleaseMismatch")
    assert {f["path"] for f in found} == {f"models/{p.parent.name}/model.yaml"
                                          for p in repo_copy.glob("models/*/model.yaml")}
    assert all("24.12" in f["message"] and "25.01" in f["message"] and f["line"] for f in found)
    for path in repo_copy.glob("models/*/model.yaml"):  # the guide's step includes models/ now
        path.write_text(path.read_text().replace("tritonserver:24.12-", "tritonserver:25.01-"))
    assert _errors(run_cli, repo_copy, "TritonReleaseMismatch") == []


# ---- the pure rules ----------------------------------------------------------------------------------------


def _meta(size: str, quant: str = "none", dtype: str = "bfloat16", tp: int = 1) -> ModelMeta:
    meta = {"name": f"m-{size}", "backend": "tensorrtllm",
            "image": "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3",
            "engine": {"tp": tp, "pp": 1, "dtype": dtype, "quantization": quant}}
    return ModelMeta(f"m-{size}", "models/m/model.yaml", "", meta)


def _placement(gpu: str, count: int) -> Placement:
    return Placement("m", "m-triton", "overlays/m/x", frozenset({gpus()[gpu].label}),
                     "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3", count)


def test_memory_fit_is_a_warning_and_scales_with_tp():
    found = list(check_placement(_placement("l4", 1), _meta("70b"), "Deployment/t/m"))
    assert [(f.code, f.severity) for f in found] == [("MemoryFit", "warning")]
    assert "133,514 MiB of weights" in found[0].message  # 70e9 x 2 bytes / 2^20
    assert list(check_placement(_placement("h200", 2), _meta("70b", tp=2), "Deployment/t/m")) == []
    assert list(check_placement(_placement("h100-80gb", 1), _meta("8b"), "Deployment/t/m")) == []


@pytest.mark.parametrize("gpu, quant, refused", [
    ("t4", "fp8", True), ("l4", "fp8", False), ("h100-80gb", "nvfp4", True), ("b200", "nvfp4", False),
    ("b200", "int8_sq", True), ("a100-80gb", "int4_awq", False),
])
def test_quantization_against_compute_capability(gpu, quant, refused):
    found = [f.code for f in check_placement(_placement(gpu, 1), _meta("1b", quant, "float16"), "D/t/m")]
    assert ("QuantizationUnsupported" in found) is refused


def test_every_gpu_type_has_an_upper_bound_on_gpus_per_node_with_its_source():
    catalog = load("gpus.yaml")["gpus"]
    for key, entry in catalog.items():
        bound = entry.get("max_gpus_per_node")
        assert isinstance(bound, int) and bound >= 1, key
        assert str(entry.get("max_gpus_per_node_source", "")).startswith("https://"), key
        assert bound >= entry.get("gpus_per_node", 1), key  # the usual server never exceeds the largest
    assert [f.code for f in check_placement(_placement("h200", 9), None, "D/t/m")] == ["GPUsPerNodeExceeded"]
    pcie = [k for k, e in catalog.items() if "gpus_per_node" not in e]  # servers vary: the largest one bounds
    assert pcie and all(
        [f.code for f in check_placement(_placement(k, catalog[k]["max_gpus_per_node"] + 1), None, "D/t/m")]
        == ["GPUsPerNodeExceeded"] for k in pcie)
    assert all(list(check_placement(_placement(k, catalog[k]["max_gpus_per_node"]), None, "D/t/m")) == []
               for k in pcie)


def test_sixteen_l4_per_pod_is_refused_and_the_layout_file_sets_the_clusters_node_size(run_cli, repo_copy: Path):
    # The reproduction: overlays/gpus/l4/gpu.yaml asking for 16 GPUs passed the gate.
    _edit(repo_copy / "overlays/gpus/l4/gpu.yaml", "nvidia.com/gpu: 1", "nvidia.com/gpu: 16")
    found = _errors(run_cli, repo_copy, "GPUsPerNodeExceeded")
    assert {(f["path"], f["object"]) for f in found} >= {("overlays/image-classifier/l4",
                                                          "Deployment/triton/image-classifier-triton")}
    message = found[0]["message"]
    assert "nvidia.com/gpu: 16" in message and "at most 8 GPUs (https://" in message
    assert "gpus/l4/gpusPerNode in kubectl-triton.yaml" in message
    layout = repo_copy / "kubectl-triton.yaml"
    original = layout.read_text()
    layout.write_text(original + "gpus:\n  l4:\n    gpusPerNode: 16\n")  # this fleet's own (hypothetical) nodes
    assert _errors(run_cli, repo_copy, "GPUsPerNodeExceeded") == []
    layout.write_text(original + "gpus:\n  l4:\n    gpusPerNode: 4\n")  # smaller than the largest cloud node
    _edit(repo_copy / "overlays/gpus/l4/gpu.yaml", "nvidia.com/gpu: 16", "nvidia.com/gpu: 6")
    found = _errors(run_cli, repo_copy, "GPUsPerNodeExceeded")
    assert found and "at most 4 GPUs (kubectl-triton.yaml gpus/l4/gpusPerNode)" in found[0]["message"]


def test_a_partial_entry_for_an_unknown_gpu_type_is_a_layout_error(run_cli, repo_copy: Path):
    layout = repo_copy / "kubectl-triton.yaml"
    layout.write_text(layout.read_text() + "gpus:\n  mi300x:\n    gpusPerNode: 8\n")
    result = run_cli("validate", str(repo_copy), "-o", "json")
    found = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "LayoutInvalid"]
    assert found and "gpus/mi300x: 'product' is a required property" in found[0]["message"], result.stdout[:500]


def test_helpers():
    assert release("nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3") == "24.12"
    assert release("nvcr.io/nvidia/tritonserver:latest") is None
    assert parameters_billion({}, "llama3-8b") == 8 and parameters_billion({}, "mistral-nemo-12b") == 12
    assert parameters_billion({"engine": {"parameters_billion": 1.5}}, "x") == 1.5
    assert parameters_billion({}, "image-classifier") is None
