"""`kubectl triton validate`: the pull-request gate over the whole GitOps repository."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from kubectl_triton.gitops import assembly
from tests.conftest import REPO


def _json(result) -> dict:
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


def _codes(doc: dict) -> set[str]:
    return {f["code"] for f in doc["findings"] if f["severity"] == "error"}


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_example_repository_passes(run_cli):
    result = run_cli("validate", str(REPO), "-o", "json")
    doc = _json(result)
    assert result.exit_code == 0 and doc["ok"] is True
    assert _codes(doc) == set()
    for f in doc["findings"]:
        assert set(f) == {"severity", "code", "path", "line", "model", "object", "message"}


def test_text_output_is_one_line_per_finding_with_a_summary(run_cli, repo_copy: Path):
    _edit(repo_copy / "base/triton/horizontalpodautoscaler.yaml", """    - type: Pods
      pods:
        metric:
          name: triton_queue_compute_ratio
        target:
          type: AverageValue
          averageValue: "1"
""", """    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: 80
""")
    result = run_cli("validate", str(repo_copy))
    assert result.exit_code == 0  # warnings only
    lines = result.stdout.strip().splitlines()
    assert any(line.startswith("overlays/image-classifier/l4: warning [HPAOnCPU] "
                               "HorizontalPodAutoscaler/triton/image-classifier-triton:") for line in lines)
    assert lines[-1].startswith("0 error(s), ")


def test_broken_ensemble_wiring_points_at_the_committed_file_and_line(run_cli, repo_copy: Path):
    ensemble = repo_copy / "models/llama3-8b/ensemble/config.pbtxt"
    _edit(ensemble, 'input_map { key: "input_lengths" value: "_REQUEST_INPUT_LEN" }',
          'input_map { key: "input_lengths" value: "_NO_SUCH_TENSOR" }')
    result = run_cli("validate", str(repo_copy), "-o", "json")
    assert result.exit_code == 1
    errors = [f for f in _json(result)["findings"] if f["severity"] == "error"]
    assert errors and all(f["path"] == "models/llama3-8b/ensemble/config.pbtxt" for f in errors)
    assert any("_NO_SUCH_TENSOR" in f["message"] and f["model"] == "ensemble" for f in errors)
    lines = ensemble.read_text().splitlines()
    # The line shown is one that declares or uses a tensor the message names.
    assert all(f["line"] and any(f"'{name}'" in f["message"] for name in
                                 re.findall(r'"(\w+)"', lines[f["line"] - 1])) for f in errors)


def test_malformed_pbtxt_is_an_error_with_line_and_column(run_cli, repo_copy: Path):
    _edit(repo_copy / "models/image-classifier/image_classifier/config.pbtxt", "max_batch_size: 32",
          "max_batch_size: thirty-two")
    doc = _json(run_cli("validate", str(repo_copy), "-o", "json"))
    bad = [f for f in doc["findings"] if f["path"] == "models/image-classifier/image_classifier/config.pbtxt"]
    assert bad and bad[0]["severity"] == "error" and bad[0]["line"] == 4
    assert doc["ok"] is False


def test_wrong_max_batch_size_for_dynamic_batching_is_refused_like_triton(run_cli, repo_copy: Path):
    _edit(repo_copy / "models/image-classifier/image_classifier/config.pbtxt", "max_batch_size: 32",
          "max_batch_size: 0")
    doc = _json(run_cli("validate", str(repo_copy), "-o", "json"))
    assert any(f["model"] == "image_classifier" and "max_batch_size" in f["message"]
               for f in doc["findings"] if f["severity"] == "error")


def test_unknown_manifest_field_is_a_schema_error(run_cli, repo_copy: Path):
    _edit(repo_copy / "base/triton/service.yaml", "  type: ClusterIP\n", "  type: ClusterIP\n  clusterIPs2: []\n")
    doc = _json(run_cli("validate", str(repo_copy), "-o", "json"))
    schema = [f for f in doc["findings"] if f["code"] == "SchemaInvalid"]
    assert schema and all("clusterIPs2" in f["message"] for f in schema)
    assert {f["object"] for f in schema} >= {"Service/triton/llama3-8b-triton", "Service/triton/text-embedder-triton"}


def test_an_api_version_the_cluster_no_longer_serves_is_an_error(run_cli, repo_copy: Path):
    _edit(repo_copy / "base/triton/poddisruptionbudget.yaml", "apiVersion: policy/v1\n", "apiVersion: policy/v1beta1\n")
    found = [f for f in _json(run_cli("validate", str(repo_copy), "-o", "json"))["findings"]
             if "policy/v1beta1" in f["message"]]
    assert found and all(f["code"] == "SchemaInvalid" and f["severity"] == "error" for f in found), found
    assert "is not served by Kubernetes 1.35, which serves PodDisruptionBudget as policy/v1" in found[0]["message"]


def test_a_kubernetes_version_older_than_the_bundled_schemas_is_checked_against_the_nearest(run_cli, repo_copy: Path):
    _edit(repo_copy / "kubectl-triton.yaml", 'version: "1.35"', 'version: "1.20"')
    _edit(repo_copy / "base/triton/service.yaml", "  type: ClusterIP\n", "  type: ClusterIP\n  clusterIPs2: []\n")
    result = run_cli("validate", str(repo_copy), "-o", "json")
    assert result.exit_code == 1 and "Traceback" not in result.stderr, result.stderr
    found = _json(result)["findings"]
    assert any(f["code"] == "LayoutInvalid" and f["severity"] == "warning" and "version 1.20" in f["message"]
               and "checked against the nearest" in f["message"] for f in found)
    assert any(f["code"] == "SchemaInvalid" and "clusterIPs2" in f["message"] for f in found)


def test_nulls_the_api_server_accepts_are_no_traceback(run_cli, repo_copy: Path):
    """null is "unset" to the API server (the schemas allow it): the gate goes on with the defaults."""
    deployment = repo_copy / "base/triton/deployment.yaml"
    _edit(deployment, "  progressDeadlineSeconds: 600\n", "  progressDeadlineSeconds: null\n")
    text = deployment.read_text()
    start = text.index("          volumeMounts:\n            - name: model-repository")
    end = text.index("      volumes:\n")
    deployment.write_text(text[:start] + "          volumeMounts: null\n" + text[end:])
    result = run_cli("validate", str(repo_copy), "-o", "json")
    assert result.exit_code in (0, 1) and "Traceback" not in result.stderr, result.stderr
    assert any(f["code"] == "SharedMemory" for f in _json(result)["findings"])  # /dev/shm is no longer mounted


def test_a_version_folder_of_unicode_digits_is_no_version(tmp_path: Path):
    from kubectl_triton.checks.model.modelrepo import load_repository

    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "\u00b2").mkdir()  # '²'.isdigit() is True, int('²') raises
    (tmp_path / "m" / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n')
    load_repository(tmp_path)  # no ValueError


@pytest.mark.parametrize("edit, code", [
    (("overlays/llama3-8b/model/deployment.yaml", "image: nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3\n"
      "          startupProbe", "image: nvcr.io/nvidia/tritonserver:latest\n          startupProbe"),
     "ImageTagNotPinned"),
    (("overlays/llama3-8b/model/deployment.yaml", "image: nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3\n"
      "          startupProbe", "image: nvcr.io/nvidia/tritonserver:24.12-py3\n          startupProbe"),
     "TRTLLMImage"),
    (("clusters/production/models/text-embedder-a10g.yaml", "timeout: 15m", "timeout: 5m"),
     "ProgressDeadline"),
    # a Go duration with milliseconds (600.5 s, not above the Deployment's 600 s deadline)
    (("clusters/production/models/text-embedder-a10g.yaml", "timeout: 15m", "timeout: 10m0s500ms"),
     "ProgressDeadline"),
    (("overlays/text-embedder/a10g/kustomization.yaml", "  - ../../gpus/a10g\n", ""), "GPULimitMissing"),
    (("clusters/production/models/image-classifier-l4.yaml", "    - name: platform\n",
      "    - name: platfrom\n"), "FluxDependencyMissing"),
    (("clusters/production/models/image-classifier-l4.yaml", "./overlays/image-classifier/l4",
      "./overlays/image-classifier/l5"), "FluxPathInvalid"),
    (("overlays/ensemble-pipeline/l4/kustomization.yaml", "../../gpus/l4", "../../gpus/l5"), "RenderFailed"),
    (("overlays/llama3-8b/model/deployment.yaml", "image: nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3\n"
      "          startupProbe", "image: nvcr.io/nvidia/tritonserver:25.01-trtllm-python-py3\n          startupProbe"),
     "EngineBuildImageMismatch"),
    (("models/llama3-8b/model.yaml", "engine_dir: /artifacts/llama3-8b/engines/h100-80gb",
      "engine_dir: /artifacts/llama3-8b/engines/h100"), "EngineDirMismatch"),
    (("overlays/image-classifier/model/deployment.yaml", "triton-models: image_classifier",
      "triton-models: image_classifer"), "ModelsAnnotation"),
])
def test_each_rule_fails_the_gate(run_cli, repo_copy: Path, edit, code):
    _edit(repo_copy / edit[0], edit[1], edit[2])
    result = run_cli("validate", str(repo_copy), "-o", "json")
    assert result.exit_code == 1
    assert code in _codes(_json(result))


def test_depends_on_resolves_in_the_kustomizations_own_cluster(run_cli, repo_copy: Path):
    """A staging cluster whose model Kustomizations wait for `platform`, which only production has."""
    staging = repo_copy / "clusters/staging"
    staging.mkdir()
    (staging / "flux-system").mkdir()
    for name in ("gitrepository.yaml", "kustomization.yaml", "sync.yaml"):
        text = (repo_copy / "clusters/production/flux-system" / name).read_text()
        (staging / "flux-system" / name).write_text(text.replace("./clusters/production", "./clusters/staging"))
    model = (repo_copy / "clusters/production/models/image-classifier-l4.yaml").read_text()
    (staging / "image-classifier-l4.yaml").write_text(model)
    (staging / "kustomization.yaml").write_text("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
                                                "resources:\n  - flux-system\n  - image-classifier-l4.yaml\n")
    found = [f for f in _json(run_cli("validate", str(repo_copy), "-o", "json"))["findings"]
             if f["code"] == "FluxDependencyMissing"]
    assert {(f["path"], f["severity"]) for f in found} == {("clusters/staging/image-classifier-l4.yaml", "error")}
    assert sorted(f["message"].split(" is ")[0] for f in found) == ["dependsOn flux-system/infrastructure",
                                                                    "dependsOn flux-system/platform"]
    assert all("of another cluster, not of cluster staging" in f["message"] for f in found)


def test_two_overlays_of_one_model_in_one_cluster_collide(run_cli, repo_copy: Path):
    models = repo_copy / "clusters/production/models"
    (models / "image-classifier-t4.yaml").write_text(
        (models / "image-classifier-l4.yaml").read_text().replace("l4", "t4"))
    _edit(models / "kustomization.yaml", "  - image-classifier-l4.yaml\n",
          "  - image-classifier-l4.yaml\n  - image-classifier-t4.yaml\n")
    doc = _json(run_cli("validate", str(repo_copy), "-o", "json"))
    dup = [f for f in doc["findings"] if f["code"] == "DuplicateObject"]
    assert any(f["object"] == "Deployment/triton/image-classifier-triton" for f in dup)


def test_github_output_annotates_files_and_writes_the_step_summary(run_cli, repo_copy: Path, tmp_path, monkeypatch):
    _edit(repo_copy / "models/llama3-8b/ensemble/config.pbtxt", 'value: "_REQUEST_INPUT_LEN" }',
          'value: "_NO_SUCH_TENSOR" }')
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run_cli("validate", str(repo_copy), "-o", "github")
    assert result.exit_code == 1
    errors = [ln for ln in result.stdout.splitlines() if ln.startswith("::error ")]
    assert errors and errors[0].startswith("::error file=models/llama3-8b/ensemble/config.pbtxt,line=")
    table = summary.read_text()
    assert "kubectl triton validate: failed" in table and "| error |" in table


def test_missing_repository_is_a_usage_error(run_cli, tmp_path):
    result = run_cli("validate", str(tmp_path / "nope"))
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and "nope" in result.stderr
    result = run_cli("validate", str(REPO), "--kubernetes-version", "0.9")
    assert result.exit_code == 2


def test_triton_flag_reports_tritons_own_message(run_cli, repo_copy: Path):
    pytest.importorskip("kubectl_triton.adapters.tritonserver").find_install()
    _edit(repo_copy / "models/text-embedder/text_embedder/config.pbtxt", "dims: [ 384 ]", "dims: [ 384, 0 ]")
    doc = _json(run_cli("validate", str(repo_copy), "--triton", "-o", "json"))
    triton = [f for f in doc["findings"] if f["code"] == "TritonLoadFailed"]
    assert triton and triton[0]["model"] == "text_embedder"
    assert "dimension" in triton[0]["message"].lower()


def test_python_assembly_matches_the_pod_script(rendered, tmp_path):
    docs = rendered["overlays/llama3-8b/h100-80gb"]
    data = assembly.model_config_map(docs)["data"]
    config = tmp_path / "config"
    config.mkdir()
    for key, value in data.items():
        (config / key).write_text(value)
    env = {**os.environ, "CONFIG_DIR": str(config), "ARTIFACTS_DIR": str(tmp_path / "none"),
           "MODEL_REPOSITORY": str(tmp_path / "script")}
    subprocess.run(["bash", str(REPO / "base/triton/assemble-model-repository.sh")], env=env, check=True,
                   capture_output=True)
    assembly.assemble(data, tmp_path / "python")

    def tree(root: Path) -> dict[str, bytes | None]:
        return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in root.rglob("*")}

    assert tree(tmp_path / "script") == tree(tmp_path / "python")


def test_config_map_keys_cannot_escape_the_repository():
    from kubectl_triton.errors import InputError

    with pytest.raises(InputError):
        assembly.key_to_path("..__..__etc__passwd")


@pytest.mark.parametrize("version,supported", [("1.32", True), ("1.32.0", True), ("v1.30", True), ("1.25", True),
                                               ("1.24", False), ("1.9", False), ("0.9", False), ("1.99", False),
                                               ("latest", False), ("", False)])
def test_kubernetes_versions_with_bundled_schemas(version, supported):
    """Versions compare as numbers (1.9 is older than 1.25), read from kubernetes-validate's schema folders."""
    from kubectl_triton.formats import schemas

    assert schemas.supported_version(version) is supported
