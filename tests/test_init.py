"""`kubectl triton init`: an empty folder becomes a working repository, real Flux repositories (the Flux example
and multi-tenancy layouts of ../shared/conformance/yaml-corpus) are adopted without a false error and with only
additions, the layout file's own GPU types work end to end, and this repository's bases are init's output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kubectl_triton.compat import catalog
from kubectl_triton.gitops import scaffold
from tests.conftest import REPO, SHARED

CORPUS = SHARED / "conformance" / "yaml-corpus"
ENGINES = Path(__file__).parent / "fixtures" / "engines"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
ONNX = ["--backend", "onnxruntime", "--input", "input:FP32:3,224,224", "--output", "probs:FP32:1000"]
REPO_GPUS = sorted(p.name for p in (REPO / "overlays" / "gpus").iterdir() if p.is_dir())
RTX_PRO = {"product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "computeCapability": "12.0",
           "memoryMiB": 97887, "gpusPerNode": 8, "fp8": True, "fp4": True, "family": "blackwell"}

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) is not on PATH")


@pytest.fixture(autouse=True)
def _catalog_restored():
    """A layout file's GPU types join the process-wide catalog; other tests must not see them."""
    yield
    catalog.register(())


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


def findings(run_cli, root: Path) -> tuple[int, list[dict]]:
    result = run_cli("validate", str(root), "-o", "json")
    doc = json.loads(result.stdout)
    return result.exit_code, doc["findings"] if isinstance(doc, dict) else doc


def test_init_in_an_empty_folder_reproduces_this_repositorys_bases_and_gpu_components(run_cli, tmp_path):
    """One source of truth: base/ and overlays/gpus/ of this repository are `init`'s output, byte for byte."""
    result = run_cli("init", str(tmp_path), *(a for g in REPO_GPUS for a in ("--gpu", g)))
    assert result.exit_code == 0, result.stderr
    for folder in ("base", "overlays/gpus", "overlays/artifacts", "overlays/autoscaling"):
        assert tree(tmp_path / folder) == tree(REPO / folder), folder


def test_empty_folder_to_validated_models(run_cli, tmp_path):
    assert run_cli("init", str(tmp_path)).exit_code == 0
    assert (tmp_path / "kubectl-triton.yaml").is_file()
    assert sorted(p.name for p in (tmp_path / "overlays" / "gpus").iterdir()) == sorted(catalog.bundled())
    first = run_cli("validate", str(tmp_path))
    assert first.exit_code == 0, first.stdout
    assert "no model overlay" in first.stderr  # it says that nothing but the bases was checked
    for name, args in (("resnet", [*ONNX, "--gpu", "l4"]), ("llm", ["--backend", "tensorrtllm", "--gpu", "h100-80gb"])):
        added = run_cli("add-model", name, "--repo", str(tmp_path), *args)
        assert added.exit_code == 0, added.stderr
    code, found = findings(run_cli, tmp_path)
    assert code == 0 and not [f for f in found if f["severity"] == "error"], found
    rendered = run_cli("render", "--all", "--repo", str(tmp_path))
    assert rendered.exit_code == 0, rendered.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(rendered.stdout) if d}
    assert {"Deployment", "Job", "Namespace", "HelmRelease", "PrometheusRule"} <= kinds


def test_init_again_changes_nothing_and_dry_run_writes_nothing(run_cli, tmp_path):
    dry = run_cli("init", str(tmp_path), "--gpu", "l4", "--dry-run")
    assert dry.exit_code == 0 and "==> base/triton/deployment.yaml <==" in dry.stdout
    assert list(tmp_path.iterdir()) == []
    assert run_cli("init", str(tmp_path), "--gpu", "l4").exit_code == 0
    before = tree(tmp_path)
    again = run_cli("init", str(tmp_path), "--gpu", "l4")
    assert again.exit_code == 0 and "nothing to write" in again.stderr
    assert tree(tmp_path) == before


def test_a_failed_init_leaves_the_tree_as_it_was(run_cli, tmp_path, monkeypatch):
    (tmp_path / "README.md").write_text("mine\n")
    before = tree(tmp_path)
    calls = []

    def failing(src, dst):
        calls.append(dst)
        if len(calls) == 20:
            raise OSError(28, "No space left on device")
        os.replace(src, dst)

    monkeypatch.setattr(scaffold, "_replace", failing)
    result = run_cli("init", str(tmp_path), "--gpu", "l4")
    assert result.exit_code == 2 and "nothing was changed" in result.stderr
    assert tree(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]


def adopt(example: str, tmp_path: Path) -> Path:
    """The Flux example repository rebuilt from the conformance corpus, committed."""
    src = CORPUS / example
    if not src.is_dir():
        pytest.skip(f"{src} is not beside this checkout")
    root = tmp_path / example
    shutil.copytree(src, root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "upstream")
    return root


@pytest.mark.parametrize("example,infra", [("flux2-kustomize-helm-example", "infra-configs"),
                                           ("flux2-multi-tenancy", "kyverno-policies")])
def test_adopting_a_real_flux_repository(run_cli, tmp_path, example, infra):
    root = adopt(example, tmp_path)
    result = run_cli("init", str(root), "--gpu", "l4", "--gpu", "h100-80gb")
    assert result.exit_code == 0, result.stderr
    assert f"models wait for: {infra}, platform" in result.stderr
    for name, args in (("resnet", [*ONNX, "--gpu", "l4"]), ("llm", ["--backend", "tensorrtllm", "--gpu", "h100-80gb"])):
        added = run_cli("add-model", name, "--repo", str(root), *args)
        assert added.exit_code == 0, added.stderr
    flux = yaml.safe_load((root / "clusters/production/models/llm-h100-80gb.yaml").read_text())
    assert [d["name"] for d in flux["spec"]["dependsOn"]] == [infra, "platform", "llm-h100-80gb-engine-build"]
    code, found = findings(run_cli, root)
    assert code == 0, found
    assert not [f for f in found if f["severity"] == "error"], found
    assert not [f for f in found if f["code"] in ("FluxPathInvalid", "FluxDependencyMissing")]
    # every upstream file is as it was: the change is additions only
    assert git(root, "diff", "--stat") == ""
    added = git(root, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert added and all(line.startswith("?? ") for line in added)
    assert "?? clusters/production/platform.yaml" in added


def test_external_artifact_paths_are_reported_not_checked(run_cli, tmp_path):
    """Flux >= 2.7's example applies ExternalArtifacts: their paths are not this repository's, never an error."""
    root = adopt("flux2-kustomize-helm-example", tmp_path)
    assert run_cli("init", str(root), "--gpu", "l4").exit_code == 0
    _, found = findings(run_cli, root)
    skipped = {f["object"] for f in found if f["code"] == "FluxSourceNotChecked"}
    assert "Kustomization/flux-system/apps" in skipped and "Kustomization/flux-system/infra-configs" in skipped
    assert all(f["severity"] == "info" for f in found if f["code"] == "FluxSourceNotChecked")


def test_several_sources_ask_for_source(run_cli, tmp_path):
    root = adopt("flux2-multi-tenancy", tmp_path)
    for name in ("tenants.yaml", "infrastructure.yaml"):  # the repository split in two sources
        path = root / "clusters/production" / name
        path.write_text(path.read_text().replace("name: flux-system\n  serviceAccountName",
                                                 f"name: {name.split('.')[0]}-repo\n  serviceAccountName")
                        .replace("kind: GitRepository\n    name: flux-system",
                                 f"kind: GitRepository\n    name: {name.split('.')[0]}-repo"))
    before = tree(root)
    asked = run_cli("init", str(root), "--gpu", "l4")
    assert asked.exit_code == 2
    assert "GitRepository/tenants-repo" in asked.stderr and "GitRepository/infrastructure-repo" in asked.stderr
    assert "--source KIND/NAME" in asked.stderr and tree(root) == before
    chosen = run_cli("init", str(root), "--gpu", "l4", "--source", "GitRepository/tenants-repo")
    assert chosen.exit_code == 0, chosen.stderr
    layout = yaml.safe_load((root / "kubectl-triton.yaml").read_text())
    assert layout["flux"]["sourceRef"] == {"kind": "GitRepository", "name": "tenants-repo"}
    assert run_cli("add-model", "resnet", "--repo", str(root), *ONNX, "--gpu", "l4").exit_code == 0
    flux = yaml.safe_load((root / "clusters/production/models/resnet-l4.yaml").read_text())
    assert flux["spec"]["sourceRef"] == {"kind": "GitRepository", "name": "tenants-repo"}
    _, found = findings(run_cli, root)
    skipped = {(f["path"], f["object"]) for f in found if f["code"] == "FluxSourceNotChecked"}
    production = {s for s in skipped if s[0].startswith("clusters/production/")}
    assert production == {("clusters/production/infrastructure.yaml", "Kustomization/flux-system/kyverno"),
                          ("clusters/production/infrastructure.yaml", "Kustomization/flux-system/kyverno-policies")}


def test_a_gpu_type_declared_in_the_layout_file_works_end_to_end(run_cli, tmp_path):
    assert run_cli("init", str(tmp_path), "--gpu", "l4").exit_code == 0
    layout_path = tmp_path / "kubectl-triton.yaml"
    layout = yaml.safe_load(layout_path.read_text())
    layout["gpus"] = {"rtx-pro-6000": RTX_PRO}
    layout_path.write_text(yaml.safe_dump(layout, sort_keys=False))
    # b200: a catalog type without a Component yet; rtx-pro-6000: only in the layout file
    added = run_cli("add-model", "resnet", "--repo", str(tmp_path), *ONNX, "--gpu", "b200")
    assert added.exit_code == 0, added.stderr
    added = run_cli("add-model", "llm", "--repo", str(tmp_path), "--backend", "tensorrtllm", "--gpu", "rtx-pro-6000")
    assert added.exit_code == 0, added.stderr
    patch = yaml.safe_load((tmp_path / "overlays/gpus/rtx-pro-6000/gpu.yaml").read_text())
    assert patch["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": RTX_PRO["product"]}
    assert (tmp_path / "overlays/gpus/b200/kustomization.yaml").read_text().startswith("# NVIDIA B200")
    code, found = findings(run_cli, tmp_path)
    assert code == 0 and not [f for f in found if f["severity"] == "error"], found
    rendered = run_cli("render", "--repo", str(tmp_path), str(tmp_path / "overlays/llm/rtx-pro-6000"))
    assert rendered.exit_code == 0 and RTX_PRO["product"] in rendered.stdout
    # compat knows its compute capability: an engine built on an H100 cannot load there
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        verdict = run_cli("compat", "--engine-dir", str(ENGINES / "llama3-8b-bf16-tp1-h100"), "--gpu", "rtx-pro-6000")
    finally:
        os.chdir(cwd)
    assert verdict.exit_code == 1 and "ArchMismatch" in verdict.stdout and "12.0" in verdict.stdout
    recorded = run_cli("record-engine", "llm", "--from", str(ENGINES / "llama3-8b-bf16-tp1-h100"), "--gpu",
                       "rtx-pro-6000", "--repo", str(tmp_path))
    assert recorded.exit_code == 0, recorded.stderr
    matrix = run_cli("compat", str(tmp_path), "-o", "json")
    [result] = json.loads(matrix.stdout)["results"]
    assert (result["gpu"], result["compatible"]) == ("rtx-pro-6000", False)


@pytest.mark.parametrize("gpus,message", [
    ({"x1": {"product": "NVIDIA-X1", "computeCapability": "9", "memoryMiB": 1}}, "gpus/x1/computeCapability"),
    ({"x1": {"product": "NVIDIA-X1", "memoryMiB": 1}}, "'computeCapability' is a required property"),
    ({"x1": {**RTX_PRO, "computeCapability": "8.0"}}, "gpus/x1/fp8: true disagrees with computeCapability 8.0"),
])
def test_a_bad_layout_file_is_one_line_naming_it(run_cli, tmp_path, gpus, message):
    assert run_cli("init", str(tmp_path), "--gpu", "l4").exit_code == 0
    layout_path = tmp_path / "kubectl-triton.yaml"
    layout_path.write_text(layout_path.read_text() + yaml.safe_dump({"gpus": gpus}))
    result = run_cli("validate", str(tmp_path), "-o", "json")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert [f["message"] for f in json.loads(result.stdout)["findings"]
            if f["code"] == "LayoutInvalid" and message in f["message"]]
    result = run_cli("add-model", "m", "--backend", "onnxruntime", "--gpu", "l4", "--repo", str(tmp_path),
                     "--input", "x:FP32:3", "--output", "y:FP32:3")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: kubectl-triton.yaml: ") and message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    """The wheel of this checkout installed into a new virtualenv without test extras (pip's wheel cache
    and the local package index make it a minute)."""
    out = tmp_path_factory.mktemp("fresh")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out / "whl"), str(REPO)],
                   check=True, capture_output=True, cwd=out, timeout=300)
    [wheel] = (out / "whl").glob("kubectl_triton-*.whl")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # not this checkout
    subprocess.run([sys.executable, "-m", "venv", str(out / "venv")], check=True, timeout=120, env=env)
    proc = subprocess.run([str(out / "venv/bin/python"), "-m", "pip", "install", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / "venv/bin"


def test_installed_wheel_without_extras_runs_init_to_render(fresh_venv, tmp_path):
    """As a new user would: the installed package only (no checkout on sys.path), outside this repository."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = str(fresh_venv) + os.pathsep + env["PATH"]
    work = tmp_path / "new"
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["kubectl-triton", *args], cwd=work, env=env, capture_output=True, text=True,
                              timeout=300)

    pip = subprocess.run([str(fresh_venv / "python"), "-m", "pip", "list", "--format=json"], capture_output=True,
                         text=True, env=env, check=True)
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(pip.stdout)}
    assert "kubectl-triton" in installed and not {"nvidia-pytriton", "pytest"} & installed
    for args in (["init", "--gpu", "l4", "--gpu", "h100-80gb"], ["validate"],
                 ["add-model", "resnet", *ONNX, "--gpu", "l4"],
                 ["add-model", "llm", "--backend", "tensorrtllm", "--gpu", "h100-80gb"], ["validate"]):
        proc = run(*args)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    assert tree(work / "base") == tree(REPO / "base")
    triton = run("validate", "--triton")
    assert triton.returncode == 0, triton.stderr
    assert "pip install 'kubectl-triton[triton]'" in triton.stderr and "static checks only" in triton.stderr
    rendered = run("render", "--all")
    assert rendered.returncode == 0, rendered.stderr
    assert "kind: Deployment" in rendered.stdout and "resnet-triton" in rendered.stdout


def test_the_layout_files_namespace_reaches_the_platform_and_the_overlays(run_cli, tmp_path):
    (tmp_path / "kubectl-triton.yaml").write_text(  # with the RWX class the platform's PVC needs (validate)
        "namespace: inference\ncluster:\n  provides:\n    storageClasses:\n"
        "      - {name: nfs, default: true, rwx: true}\n")
    assert run_cli("init", str(tmp_path), "--gpu", "l4").exit_code == 0
    platform = yaml.safe_load((tmp_path / "base/platform/namespace.yaml").read_text())
    assert platform["metadata"]["name"] == "inference"
    assert "# Every pod here meets Pod Security Standards" in (tmp_path / "base/platform/namespace.yaml").read_text()
    assert run_cli("add-model", "resnet", "--repo", str(tmp_path), *ONNX, "--gpu", "l4").exit_code == 0
    rendered = run_cli("render", "--repo", str(tmp_path), str(tmp_path / "overlays/resnet/l4"))
    namespaces = {d["metadata"].get("namespace") for d in yaml.safe_load_all(rendered.stdout) if d}
    assert namespaces == {"inference"}
    code, found = findings(run_cli, tmp_path)
    assert code == 0 and not [f for f in found if f["severity"] == "error"], found
