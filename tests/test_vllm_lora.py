"""LoRA adapters of a vLLM-backend model as git objects: `add-adapter` writes them consistently, the gate names
each way the backend or vLLM would refuse one, and a tritonserver whose vLLM backend is the stub that does what
the backend does with enable_lora and multi_lora.json serves the scaffolded adapter and refuses an unknown one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.adapters.shadow import build_shadow, stub_path
from kubectl_triton.formats import yamlio
from tests.test_model_repositories import assemble

MODEL_DIR = "models/qwen25-7b/qwen25_7b/1"


def _adapter(tmp_path: Path, rank: int = 32, base: str = "Qwen/Qwen2.5-7B-Instruct", name: str = "a.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"base_model_name_or_path": base, "peft_type": "LORA", "r": rank, "lora_alpha": 64,
                                "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}))
    return path


def _add(run_cli, root: Path, tmp_path: Path, name: str = "sql", *extra: str, rank: int = 32):
    return run_cli("add-adapter", "qwen25-7b", name, "--adapter-config", str(_adapter(tmp_path, rank)),
                   "--repo", str(root), *extra)


def _in_image(root: Path, *names: str) -> None:
    """The adapters' weights packaged into qwen25-7b's image (as package-model records them in its layout)."""
    layout = root / "models/qwen25-7b/artifact-layout.yaml"
    layout.write_text(layout.read_text() + "".join(f"  qwen25-7b/loras/{n}/adapter_model.safetensors: 4096\n"
                                                   for n in names))


def _json(root: Path, rel: str) -> dict:
    return json.loads((root / rel).read_text())


def _findings(run_cli, root: Path) -> set[tuple[str, str]]:
    doc = json.loads(run_cli("validate", str(root), "-o", "json").stdout)
    return {(f["code"], f["severity"]) for f in doc["findings"] if f.get("model") == "qwen25-7b"}


def test_add_adapter_writes_a_consistent_set(run_cli, repo_copy: Path, tmp_path: Path):
    assert _add(run_cli, repo_copy, tmp_path).exit_code == 0
    assert _add(run_cli, repo_copy, tmp_path, "chat", rank=8).exit_code == 0
    args = _json(repo_copy, f"{MODEL_DIR}/model.json")
    assert args["enable_lora"] is True and args["max_lora_rank"] == 32  # holds both; one vLLM 0.5.5 accepts
    assert _json(repo_copy, f"{MODEL_DIR}/multi_lora.json") == {"sql": "/artifacts/qwen25-7b/loras/sql",
                                                                  "chat": "/artifacts/qwen25-7b/loras/chat"}
    assert _json(repo_copy, "models/qwen25-7b/adapters/sql/adapter_config.json")["r"] == 32
    # qwen25-7b's files are an OCI image: the adapters' weights must be in it (package-model), and the gate says so.
    result = run_cli("validate", str(repo_copy), "-o", "json")
    missing = sorted(f["message"].split(" (")[0] for f in json.loads(result.stdout)["findings"]
                     if f["code"] == "OciArtifactPathMissing")
    assert missing == ["qwen25_7b needs qwen25-7b/loras/chat", "qwen25_7b needs qwen25-7b/loras/sql"]
    _in_image(repo_copy, "chat", "sql")
    assert _findings(run_cli, repo_copy) == set()
    # a rank 40 adapter: the next rank vLLM accepts
    assert _add(run_cli, repo_copy, tmp_path, "big", rank=40).exit_code == 0
    assert _json(repo_copy, f"{MODEL_DIR}/model.json")["max_lora_rank"] == 64


@pytest.mark.parametrize(("extra", "rank", "message"), [
    ((), 512, "rank 512: above the largest max_lora_rank this vLLM accepts (256)"),
    (("--max-loras", "0"), 8, "--max-loras 0: must be at least 1"),
])
def test_add_adapter_refuses_what_vllm_cannot_serve(run_cli, repo_copy: Path, tmp_path: Path, extra, rank, message):
    before = (repo_copy / f"{MODEL_DIR}/model.json").read_text()
    result = _add(run_cli, repo_copy, tmp_path, "x", *extra, rank=rank)
    assert result.exit_code == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert (repo_copy / f"{MODEL_DIR}/model.json").read_text() == before
    assert not (repo_copy / "models/qwen25-7b/adapters/x").exists()


def test_add_adapter_input_errors_name_the_file(run_cli, repo_copy: Path, tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"r": "eight"}')
    result = run_cli("add-adapter", "qwen25-7b", "x", "--adapter-config", str(bad), "--repo", str(repo_copy))
    assert result.exit_code == 2 and f"{bad}: r (the LoRA rank) must be a positive integer" in result.stderr
    result = run_cli("add-adapter", "image-classifier", "x", "--adapter-config", str(_adapter(tmp_path)),
                     "--repo", str(repo_copy))
    assert result.exit_code == 2 and "models/image-classifier/model.yaml: backend 'onnxruntime': add-adapter " \
        "scaffolds adapters for Triton's vLLM and TensorRT-LLM backends" in result.stderr
    for outside in ("/etc/lora", "../other/loras/x", "s3://bucket/x"):
        result = _add(run_cli, repo_copy, tmp_path, "x", "--artifact", outside)
        assert result.exit_code == 2 and f"--artifact {outside!r}: the adapter's folder relative" in result.stderr
    assert _add(run_cli, repo_copy, tmp_path, "y", "--artifact", "adapters/y-v2").exit_code == 0
    assert _json(repo_copy, f"{MODEL_DIR}/multi_lora.json")["y"] == "/artifacts/qwen25-7b/adapters/y-v2"
    assert _add(run_cli, repo_copy, tmp_path).exit_code == 0
    again = _add(run_cli, repo_copy, tmp_path)
    assert again.exit_code == 2 and "adapter 'sql' exists already" in again.stderr


def _set_args(**values) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / MODEL_DIR / "model.json"
        args = json.loads(path.read_text())
        for key, value in values.items():
            if value is None:
                args.pop(key, None)
            else:
                args[key] = value
        path.write_text(json.dumps(args))
    return edit


def _write(rel: str, text: str) -> Callable[[Path], None]:
    return lambda root: (root / rel).write_text(text)


def _drop_multi_lora(root: Path) -> None:
    (root / MODEL_DIR / "multi_lora.json").unlink()
    kfile = root / "overlays/qwen25-7b/model/kustomization.yaml"
    kfile.write_text("".join(line for line in kfile.read_text().splitlines(keepends=True) if "multi_lora" not in line))


MUTATIONS: dict[str, tuple[Callable[[Path], None], set[tuple[str, str]]]] = {
    "rank above max_lora_rank": (_set_args(max_lora_rank=16), {("VllmLoraInvalid", "error")}),
    "a rank vLLM does not accept": (_set_args(max_lora_rank=48), {("VllmLoraInvalid", "error")}),
    "adapters without enable_lora": (_set_args(enable_lora=None), {("VllmLoraNotEnabled", "error")}),
    "enable_lora without multi_lora.json": (_drop_multi_lora, {("VllmLoraInvalid", "error")}),
    "an adapter named twice": (_write(f"{MODEL_DIR}/multi_lora.json", '{"sql": "/a", "sql": "/b"}'),
                               {("VllmLoraInvalid", "error")}),
    "served without review": (_write(f"{MODEL_DIR}/multi_lora.json", '{"sql": "/a", "other": "/b"}'),
                              {("VllmLoraUnreviewed", "warning")}),
    "reviewed but not served": (_write(f"{MODEL_DIR}/multi_lora.json", '{}'),
                                {("VllmLoraUnreviewed", "warning")}),
    "another base model": (lambda root: (root / "models/qwen25-7b/model.yaml").write_text(
        (root / "models/qwen25-7b/model.yaml").read_text() + "base_model: mistralai/Mistral-7B-v0.3\n"),
        {("VllmLoraUnreviewed", "warning")}),
    "enable_lora as a string": (_set_args(enable_lora="true"), {("VllmEngineArgsInvalid", "warning")}),
}


@pytest.mark.parametrize("mutate, expected", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_each_lora_mistake_is_its_finding(run_cli, repo_copy: Path, tmp_path: Path, mutate, expected):
    assert _add(run_cli, repo_copy, tmp_path).exit_code == 0
    _in_image(repo_copy, "sql")
    mutate(repo_copy)
    assert _findings(run_cli, repo_copy) == expected


def _serve(root: Path, tmp_path: Path, install):
    from kubectl_triton.adapters import tritonserver
    from kubectl_triton.checks.manifests.vllm import vllm_version
    from kubectl_triton.compat.data import load

    [result] = kustomize.build_many([root / "overlays/qwen25-7b/l40s"])
    assert not isinstance(result, Exception), result
    shadow = tmp_path / "shadow"
    build_shadow(assemble(yamlio.loads_all(result.yaml, "render"), tmp_path / "work"), shadow,
                 stubs={"vllm": str(stub_path("vllm_args"))})
    fields = load("vllm_engine_args.yaml")["versions"][vllm_version("24.12")]["fields"]
    (shadow / "qwen25_7b" / "1" / "engine_args.json").write_text(
        json.dumps({k: v["json_types"] for k, v in fields.items()}))
    return tritonserver.TritonServer(shadow).start(timeout=120), shadow


def _generate(server, lora_name: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    body = json.dumps({"text_input": "hello adapter",
                       "sampling_parameters": json.dumps({"lora_name": lora_name})}).encode()
    url = f"http://127.0.0.1:{server.http_port}/v2/models/qwen25_7b/generate"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, method="POST"), timeout=30) as reply:
            return reply.status, json.loads(reply.read())["text_output"]
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()).get("error", "")


def test_the_scaffolded_adapter_is_served_and_an_unknown_one_refused(run_cli, repo_copy, tmp_path, install):
    assert _add(run_cli, repo_copy, tmp_path).exit_code == 0
    with _serve(repo_copy, tmp_path, install)[0] as server:
        assert _generate(server, "sql") == (200, "hello adapter")
        status, error = _generate(server, "nope")
        assert status >= 400 and "LoRA nope is not supported" in error


def test_adapters_without_enable_lora_fail_at_request_time_as_the_gate_says(run_cli, repo_copy, tmp_path, install):
    assert _add(run_cli, repo_copy, tmp_path).exit_code == 0
    _set_args(enable_lora=None)(repo_copy)
    assert ("VllmLoraNotEnabled", "error") in _findings(run_cli, repo_copy)
    with _serve(repo_copy, tmp_path, install)[0] as server:
        status, error = _generate(server, "sql")
        assert status >= 400 and "LoRA feature is not enabled" in error
