"""Triton's vLLM backend: a scaffolded model passes the gate, each mistake in its model.json (or in its fit on
the GPU type) is the finding a user needs, and the argument check agrees with a tritonserver whose vLLM backend
is replaced by a stub that checks the engine arguments it receives."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kubectl_triton.adapters.shadow import build_shadow, stub_path
from kubectl_triton.checks.manifests.vllm import argument_problems, vllm_version
from kubectl_triton.compat.data import load
from kubectl_triton.formats import pbtxt
from kubectl_triton.gitops import scaffold_vllm
from tests.conftest import REPO

CONFIG = REPO / "tests/fixtures/qwen2.5-7b-config.json"
ARGS = "models/qwen/qwen/1/model.json"


def _add(run_cli, root: Path, *extra: str) -> None:
    result = run_cli("add-model", "qwen", "--backend", "vllm", "--gpu", "l40s", "--hf-config", str(CONFIG),
                     "--max-seq-len", "16384", "--repo", str(root), *extra)
    assert result.exit_code == 0, result.stderr


def _edit_args(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / ARGS
        args = json.loads(path.read_text())
        change(args)
        path.write_text(json.dumps(args))
    return edit


def _drop_args(root: Path) -> None:
    """model.json deleted, and its entry with it (else kustomize refuses the overlay)."""
    (root / ARGS).unlink()
    kfile = root / "overlays/qwen/model/kustomization.yaml"
    kfile.write_text("".join(line for line in kfile.read_text().splitlines(keepends=True) if "model.json" not in line))


def _edit_config(root: Path, old: str, new: str) -> None:
    path = root / "models/qwen/qwen/config.pbtxt"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def _gpus(root: Path, count: int) -> None:
    """The serving overlay asks for `count` GPUs, as add-model --tp N writes it."""
    kfile = root / "overlays/qwen/l40s/kustomization.yaml"
    kfile.write_text(kfile.read_text() + "patches:\n  - target:\n      kind: Deployment\n    patch: |\n"
                     "      - op: replace\n        path: /spec/template/spec/containers/0/resources/limits/"
                     f"nvidia.com~1gpu\n        value: {count}\n")


def _on_t4(root: Path) -> None:
    kfile = root / "overlays/qwen/l40s/kustomization.yaml"
    kfile.write_text(kfile.read_text().replace("../../gpus/l40s", "../../gpus/t4"))


def _yarn(root: Path) -> None:
    path = root / "models/qwen/config.json"
    doc = json.loads(path.read_text())
    doc["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    path.write_text(json.dumps(doc))


def _findings(run_cli, root: Path) -> set[tuple[str, str]]:
    doc = json.loads(run_cli("validate", str(root), "-o", "json").stdout)
    return {(f["code"], f["severity"]) for f in doc["findings"] if f.get("model") == "qwen"}


def test_a_scaffolded_vllm_model_passes_the_gate(run_cli, repo_copy: Path):
    _add(run_cli, repo_copy)
    assert _findings(run_cli, repo_copy) == set()
    plan = json.loads(run_cli("plan", "--hf-config", str(CONFIG), "--backend", "vllm", "--gpu", "l40s",
                              "--max-seq-len", "16384", "-o", "json").stdout)
    assert plan["gpus"][0]["status"] == "fits" and plan["gpus"][0]["kv_bytes_per_token"] == 28 * 2 * 4 * 128 * 2


MUTATIONS: dict[str, tuple[Callable[[Path], None], set[tuple[str, str]]]] = {
    "unknown engine argument": (_edit_args(lambda a: a.update(max_num_sequences=64)),
                                {("VllmEngineArgsInvalid", "error")}),
    "wrong JSON type": (_edit_args(lambda a: a.update(max_num_seqs="64")), {("VllmEngineArgsInvalid", "error")}),
    # a plain dataclass field: vLLM loads, but takes "no" as true
    "boolean as a string": (_edit_args(lambda a: a.update(enforce_eager="no")),
                            {("VllmEngineArgsInvalid", "warning")}),
    "value outside the choices": (_edit_args(lambda a: a.update(kv_cache_dtype="fp4")),
                                  {("VllmEngineArgsInvalid", "error")}),
    "no model": (_edit_args(lambda a: a.pop("model")), {("VllmEngineArgsInvalid", "error")}),
    "model.json missing": (lambda root: _drop_args(root), {("VllmEngineArgsInvalid", "error")}),
    "tp above the GPUs requested": (_edit_args(lambda a: a.update(tensor_parallel_size=2)),
                                    {("VllmParallelismMismatch", "error")}),
    "max_model_len beyond the context": (_edit_args(lambda a: a.update(max_model_len=65536)),
                                         {("VllmMaxModelLenTooLong", "error")}),
    "not decoupled": (lambda root: _edit_config(root, "  decoupled: true\n", "  decoupled: false\n"),
                      {("VllmConfigRefused", "error")}),
    "KIND_GPU for two GPUs": (lambda root: (_edit_config(root, "KIND_MODEL", "KIND_GPU"), _edit_args(
        lambda a: a.update(tensor_parallel_size=2))(root), _gpus(root, 2)), {("VllmConfigRefused", "error")}),
    # the capacity is then not checked (a warning); vLLM's own limits are the engine arguments' business
    "memory share out of range": (_edit_args(lambda a: a.update(gpu_memory_utilization=1.5)),
                                  {("CapacityConfigInvalid", "warning")}),
    "tp null": (_edit_args(lambda a: a.update(tensor_parallel_size=None)),
                {("CapacityConfigInvalid", "warning"), ("VllmEngineArgsInvalid", "error")}),
    "a dtype that is no activation dtype": (_edit_args(lambda a: a.update(dtype="fp8")),
                                            {("CapacityConfigInvalid", "warning"), ("VllmEngineArgsInvalid", "error")}),
    "tp not dividing the attention heads": (lambda root: (_edit_args(lambda a: a.update(tensor_parallel_size=3))(root),
                                                          _gpus(root, 3)), {("VllmParallelismMismatch", "error")}),
    "bfloat16 on a T4": (lambda root: (_edit_args(lambda a: a.update(dtype="bfloat16"))(root), _on_t4(root)),
                         {("VllmDtypeUnsupported", "error"), ("KvCacheDoesNotFit", "error")}),
    # Qwen's documented yarn setting stretches the context to 131,072: 65,536 is allowed
    "max_model_len within rope scaling": (lambda root: (_edit_args(lambda a: a.update(max_model_len=65536))(root),
                                                        _yarn(root)), set()),
    # 0.3 of an L40S holds the 14 GiB of weights but no KV cache: vLLM would not start
    "weights fill the memory share": (_edit_args(lambda a: a.update(gpu_memory_utilization=0.3)),
                                      {("KvCacheDoesNotFit", "error")}),
    # 0.43: a cache of a few thousand tokens, estimated short of one 16k sequence; with the smallest reserve
    # seen in logs it might fit, so a warning
    "short of one sequence by the estimate": (_edit_args(lambda a: a.update(gpu_memory_utilization=0.43)),
                                              {("KvCacheLowConcurrency", "warning")}),
}


@pytest.mark.parametrize("mutate, expected", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_each_mistake_is_its_finding(run_cli, repo_copy: Path, mutate, expected):
    _add(run_cli, repo_copy)
    mutate(repo_copy)
    assert _findings(run_cli, repo_copy) == expected


def test_an_image_without_a_bundled_schema_says_so(run_cli, repo_copy: Path):
    _add(run_cli, repo_copy, "--image-tag", "26.06")
    assert _findings(run_cli, repo_copy) == {("VllmEngineArgsNotChecked", "info")}


@pytest.mark.parametrize("args", [{"model": "m", "max_num_sequences": 8}, {"model": "m", "enforce_eager": "yes"},
                                  {"model": "m", "tensor_parallel_size": 1.5}, {"model": "m", "seed": 3}, {}])
def test_the_gate_and_the_backend_stub_agree_on_engine_arguments(install, tmp_path: Path, args: dict):
    """The same model.json judged by the gate (argument_problems) and by a tritonserver whose vLLM backend is the
    stub that checks its engine arguments as AsyncEngineArgs(**model_json) would."""
    from kubectl_triton.adapters import tritonserver

    fields = load("vllm_engine_args.yaml")["versions"][vllm_version("24.12")]["fields"]
    src = tmp_path / "repo"
    (src / "m" / "1").mkdir(parents=True)

    (src / "m" / "config.pbtxt").write_text(pbtxt.dumps(scaffold_vllm.config("m", pbtxt.schema())))
    (src / "m" / "1" / "model.json").write_text(json.dumps(args))
    shadow = tmp_path / "shadow"
    build_shadow(src, shadow, stubs={"vllm": str(stub_path("vllm_args"))})
    (shadow / "m" / "1" / "engine_args.json").write_text(json.dumps({k: v["json_types"] for k, v in fields.items()}))
    verdict = tritonserver.load_repository(shadow, timeout=120).verdict("m")
    errors = [m for severity, m in argument_problems(args, fields) if severity == "error"]
    assert (verdict is not None) == bool(errors), verdict


def test_every_triton_vllm_image_has_its_engine_arguments():
    """data/vllm_engine_args.yaml holds the vLLM of every Triton release that names one (triton_images.yaml)."""
    releases = load("triton_images.yaml")["releases"]
    versions = load("vllm_engine_args.yaml")["versions"]
    missing = {r: e["vllm"] for r, e in releases.items() if "vllm" in e and e["vllm"] not in versions}
    assert missing == {}


@pytest.mark.parametrize(("tag", "key", "accepted"), [
    ("24.12", "cpu_offload_gb", True),          # vLLM 0.5.5
    ("24.05", "cpu_offload_gb", False),         # vLLM 0.4.0.post1 had no CPU offload
    ("25.09", "compilation_config", True),      # vLLM 0.10.1.1
    ("24.12", "compilation_config", False),
    # the vllm_backend README's sample model.json sets it; vLLM 0.19.0 (Triton 26.04) no longer has it
    ("24.12", "disable_log_requests", True),
    ("26.04", "disable_log_requests", False),
])
def test_arguments_are_judged_by_the_images_own_vllm(run_cli, repo_copy: Path, tag: str, key: str, accepted: bool):
    _add(run_cli, repo_copy, "--image-tag", tag)
    value = {"compilation_config": {}, "cpu_offload_gb": 4}.get(key, True)
    _edit_args(lambda a: a.update({key: value}))(repo_copy)
    found = _findings(run_cli, repo_copy)
    assert (("VllmEngineArgsInvalid", "error") not in found) == accepted, found
