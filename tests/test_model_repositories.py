"""Each example overlay's model repository, assembled the way the pod's init container assembles it (the
real script, from the rendered ConfigMap), loads READY in the real tritonserver — heavy models replaced by
python stubs with the same inputs and outputs — and the llama3-8b text pipeline answers /generate."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kubectl_triton.adapters.shadow import build_shadow, stub_path
from kubectl_triton.checks.manifests.vllm import vllm_version
from kubectl_triton.compat.data import load
from kubectl_triton.formats import pbtxt
from tests.conftest import REPO

tritonserver = pytest.importorskip("kubectl_triton.adapters.tritonserver")
SERVING = ["overlays/llama3-8b/h100-80gb", "overlays/image-classifier/t4", "overlays/image-classifier/l4",
           "overlays/text-embedder/a10g", "overlays/ensemble-pipeline/l4", "overlays/qwen25-7b/l40s"]


def assemble(docs: list[dict], workdir: Path) -> Path:
    """Run base/triton/assemble-model-repository.sh on the overlay's model-config ConfigMap."""
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    cm_name = next(v["configMap"]["name"] for v in volumes if v["name"] == "model-config")
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == cm_name)
    config_dir, models = workdir / "config", workdir / "models"
    config_dir.mkdir(parents=True)
    for key, value in cm["data"].items():
        (config_dir / key).write_text(value)
    env = {**os.environ, "CONFIG_DIR": str(config_dir), "ARTIFACTS_DIR": str(workdir / "artifacts"),
           "MODEL_REPOSITORY": str(models)}
    subprocess.run(["bash", str(REPO / "base/triton/assemble-model-repository.sh")], env=env, check=True,
                   capture_output=True)
    return models


def tiny_tokenizer(directory: Path) -> Path:
    """A word-level tokenizer.json standing in for Llama 3's (same file format, tiny vocabulary)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<unk>", "<|eot_id|>", "hello", "triton", "world", "on", "kubernetes"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory


def point_tokenizers_at(shadow: Path, tokenizer_dir: Path) -> None:
    for model in ("preprocessing", "postprocessing"):
        path = shadow / model / "config.pbtxt"
        config = pbtxt.load(path)
        config.parameters["tokenizer_dir"].string_value = str(tokenizer_dir)
        path.write_text(pbtxt.dumps(config))


@pytest.mark.parametrize("overlay", SERVING)
def test_assembled_repository_holds_every_model_of_the_overlay(rendered, tmp_path, overlay):
    models = assemble(rendered[overlay], tmp_path)
    name = overlay.split("/")[1]
    expected = sorted(p.parent.name for p in (REPO / "models" / name).glob("*/config.pbtxt"))
    assert sorted(p.parent.name for p in models.glob("*/config.pbtxt")) == expected
    for model_dir in models.iterdir():
        assert any(p.name.isdigit() for p in model_dir.iterdir()), f"{model_dir.name} has no version folder"
    # Files of the Triton models arrive byte-for-byte as committed in models/ (model.yaml and the checkpoint's
    # config.json, beside them, are metadata: they stay in git).
    for path in (REPO / "models" / name).rglob("*"):
        if path.is_file() and path.parent != REPO / "models" / name:
            rel = path.relative_to(REPO / "models" / name)
            assert (models / rel).read_bytes() == path.read_bytes()


def _serve(install, repository: Path):
    return tritonserver.TritonServer(repository).start(timeout=120)


def _states(server) -> dict[str, str]:
    return {m["name"]: m.get("state") for m in tritonserver.repository_index(server)}


@pytest.mark.parametrize("overlay", ["overlays/image-classifier/l4", "overlays/text-embedder/a10g"])
def test_single_model_overlays_load_ready(install, rendered, tmp_path, overlay):
    shadow = tmp_path / "shadow"
    build_shadow(assemble(rendered[overlay], tmp_path), shadow)
    with _serve(install, shadow) as server:
        states = _states(server)
        assert states and set(states.values()) == {"READY"}, states
        for model in states:
            config = server.request("GET", f"/v2/models/{model}/config")
            committed = pbtxt.to_dict(pbtxt.load(next((REPO / "models").glob(f"*/{model}/config.pbtxt"))))
            assert config["max_batch_size"] == committed.get("max_batch_size", 0)
            assert [i["name"] for i in config["input"]] == [i["name"] for i in committed["input"]]


def test_ensemble_pipeline_loads_ready_and_classifies(install, rendered, tmp_path):
    shadow = tmp_path / "shadow"
    build_shadow(assemble(rendered["overlays/ensemble-pipeline/l4"], tmp_path), shadow, keep_python=True)
    with _serve(install, shadow) as server:
        assert _states(server) == {m: "READY" for m in
                                   ("classifier", "ensemble_pipeline", "postprocessor", "preprocessor")}
        image = np.random.default_rng(0).integers(0, 255, size=224 * 224 * 3, dtype=np.uint8)
        body = {"inputs": [{"name": "IMAGE", "shape": [1, image.size], "datatype": "UINT8",
                            "data": image.tolist()}]}
        result = server.request("POST", "/v2/models/ensemble_pipeline/infer", body)
        outputs = {o["name"]: o for o in result["outputs"]}
        assert outputs["CLASSES"]["shape"] == [1, 5] and outputs["SCORES"]["shape"] == [1, 5]
        # Stub logits are all zero, so the real postprocessor's softmax gives 1/1000 to every class.
        assert outputs["SCORES"]["data"] == pytest.approx([0.001] * 5, rel=1e-3)


def test_llama3_text_pipeline_answers_generate(install, rendered, tmp_path):
    pytest.importorskip("tokenizers")
    shadow = tmp_path / "shadow"
    repository = assemble(rendered["overlays/llama3-8b/h100-80gb"], tmp_path)
    build_shadow(repository, shadow, keep_python=True, stubs={"tensorrtllm": str(stub_path("tensorrtllm_echo"))})
    point_tokenizers_at(shadow, tiny_tokenizer(tmp_path / "tokenizer"))
    with _serve(install, shadow) as server:
        assert _states(server) == {m: "READY" for m in ("ensemble", "postprocessing", "preprocessing",
                                                        "tensorrt_llm")}
        answer = server.request("POST", "/v2/models/ensemble/generate",
                                {"text_input": "hello triton on kubernetes", "max_tokens": 16})
        # The stub engine echoes the prompt's token ids: the real pre- and postprocessing round-trip it.
        assert answer["text_output"] == "hello triton on kubernetes"
        config = server.request("GET", "/v2/models/tensorrt_llm/config")
        assert config["model_transaction_policy"]["decoupled"] is True
        assert json.dumps(config["parameters"]["gpt_model_type"]) == json.dumps(
            {"string_value": "inflight_fused_batching"})


def test_vllm_model_loads_with_the_engine_arguments_its_image_accepts(install, rendered, tmp_path):
    """qwen25-7b: the vLLM backend replaced by the stub that checks its engine arguments (those of the image's
    vLLM, from the bundled data) loads READY, received model.json from where the backend reads it, and streams."""
    shadow = tmp_path / "shadow"
    build_shadow(assemble(rendered["overlays/qwen25-7b/l40s"], tmp_path), shadow,
                 stubs={"vllm": str(stub_path("vllm_args"))})
    fields = load("vllm_engine_args.yaml")["versions"][vllm_version("24.12")]["fields"]
    (shadow / "qwen25_7b" / "1" / "engine_args.json").write_text(
        json.dumps({k: v["json_types"] for k, v in fields.items()}))
    with _serve(install, shadow) as server:
        assert _states(server) == {"qwen25_7b": "READY"}, server.log[-3000:]
        received = json.loads((shadow / "qwen25_7b" / "1" / "received.json").read_text())
        assert received["engine_args"] == json.loads((REPO / "models/qwen25-7b/qwen25_7b/1/model.json").read_text())
        answer = server.request("POST", "/v2/models/qwen25_7b/generate", {"text_input": "hello l40s"})
        assert answer["text_output"] == "hello l40s"
