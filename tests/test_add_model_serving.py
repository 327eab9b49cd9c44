"""add-model end to end, one model per backend in one repository copy: the new overlays render, every rendered
object passes its strict schema, the static checker finds no error, and each new overlay's model repository
(assembled by the real init script from the rendered ConfigMap, heavy models shadowed by python stubs) loads
READY in one real tritonserver; the TensorRT-LLM model answers /generate with text_output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.adapters.shadow import build_shadow, stub_path
from kubectl_triton.checks.findings import ERROR
from kubectl_triton.checks.manifests.vllm import vllm_version
from kubectl_triton.checks.model.modelrepo import check_repository
from kubectl_triton.cli import main
from kubectl_triton.compat.data import load
from kubectl_triton.formats import schemas, yamlio
from kubectl_triton.gitops import repo
from tests.conftest import REPO
from tests.test_model_repositories import assemble, point_tokenizers_at, tiny_tokenizer

tritonserver = pytest.importorskip("kubectl_triton.adapters.tritonserver")

# NAME -> (add-model arguments, GPU overlays, Triton models its repository serves)
MODELS = {
    "chat-llm": (["--backend", "tensorrtllm", "--gpu", "h200", "--tp", "2",
                  "--hf-config", str(REPO / "models/llama3-8b/config.json")], ["h200", "h200-engine-build"],
                 ["ensemble", "preprocessing", "tensorrt_llm", "postprocessing"]),
    "qwen-chat": (["--backend", "vllm", "--gpu", "l40s", "--tp", "2", "--max-seq-len", "16384",
                   "--hf-config", str(REPO / "tests/fixtures/qwen2.5-7b-config.json")], ["l40s"], ["qwen_chat"]),
    "resnet": (["--backend", "onnxruntime", "--gpu", "t4", "--gpu", "l4", "--input", "input:FP32:3,224,224",
                "--output", "probabilities:FP32:1000", "--preferred-batch-size", "8", "--max-batch-size", "16"],
               ["t4", "l4"], ["resnet"]),
    "embedder": (["--backend", "pytorch", "--gpu", "a10g", "--artifact", "s3://models/embedder",
                  "--input", "INPUT__0:INT64:-1", "--output", "OUTPUT__0:FP32:384"], ["a10g"], ["embedder"]),
    "tf-ranker": (["--backend", "tensorflow", "--gpu", "l40s", "--version", "2", "--no-dynamic-batching"],
                  ["l40s"], ["tf_ranker"]),
    "scorer": (["--backend", "python", "--gpu", "l4", "--input", "TEXT:STRING:1", "--output", "SCORE:FP32:2",
                "--instances", "2"], ["l4"], ["scorer"]),
    "vision": (["--backend", "ensemble", "--gpu", "l4", "--step", "preprocessor:IMAGE_BYTES=IMAGE",
                "--step", "image-classifier/image_classifier:input=PIXELS->probabilities=PROBS"],
               ["l4"], ["vision", "preprocessor", "image_classifier"]),
}


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory):
    """A repository copy with every MODELS entry added through the CLI, and its new overlays rendered."""
    root = tmp_path_factory.mktemp("add-model") / "repo"
    for part in ("base", "overlays", "models", "clusters"):
        shutil.copytree(REPO / part, root / part)
    for name, (args, _, _) in MODELS.items():
        with pytest.raises(SystemExit) as exc:
            main(["add-model", name, *args, "--repo", str(root)])
        assert exc.value.code == 0, name
    targets = [root / "overlays" / name / overlay for name, (_, overlays, _) in MODELS.items() for overlay in overlays]
    rendered = {}
    for result in kustomize.build_many([*targets, *repo.clusters(root)]):
        assert not isinstance(result, Exception), result
        rendered[repo.relative(root, result.path)] = yamlio.loads_all(result.yaml, str(result.path))
    return root, rendered


def test_new_overlays_render_and_pass_strict_schemas(scaffolded):
    root, rendered = scaffolded
    issues = [f"{src}: {i.object}: {i.message}" for src, docs in rendered.items() for d in docs
              for i in schemas.validate_object(d)]
    assert issues == []
    flux = {d["metadata"]["name"]: d for d in rendered["clusters/production"] if d["kind"] == "Kustomization"
            and d["apiVersion"].startswith("kustomize.toolkit.fluxcd.io/")}
    for name, (_, overlays, _) in MODELS.items():
        # The first GPU type is registered with the cluster; further ones are overlays for other clusters.
        first = next(o for o in overlays if not o.endswith("-engine-build"))
        assert flux[f"{name}-{first}"]["spec"]["path"] == f"./overlays/{name}/{first}"
        for overlay in overlays:
            assert f"overlays/{name}/{overlay}" in rendered
    assert {"name": "chat-llm-h200-engine-build"} in flux["chat-llm-h200"]["spec"]["dependsOn"]
    # tp=2: the serving pod asks for two GPUs; S3 artifacts: the fetch init container is there.
    llm = next(d for d in rendered["overlays/chat-llm/h200"] if d["kind"] == "Deployment")
    assert llm["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    job = next(d for d in rendered["overlays/chat-llm/h200-engine-build"] if d["kind"] == "Job")
    assert job["metadata"]["name"] == "chat-llm-h200-engine-build"
    s3 = next(d for d in rendered["overlays/embedder/a10g"] if d["kind"] == "Deployment")
    assert [c["name"] for c in s3["spec"]["template"]["spec"]["initContainers"]][0] == "fetch-artifacts"


def test_generated_configs_have_no_static_error_findings(scaffolded):
    root, _ = scaffolded
    for name in MODELS:
        errors = [f for f in check_repository(root / "models" / name) if f.severity == ERROR]
        assert errors == [], name
    assert "${" not in "".join(p.read_text() for p in (root / "models" / "chat-llm").rglob("config.pbtxt"))


def test_every_backend_loads_ready_in_one_tritonserver(scaffolded, tmp_path):
    try:
        tritonserver.find_install()
    except Exception as exc:  # ToolMissing
        pytest.skip(f"no tritonserver: {exc}")
    root, rendered = scaffolded
    shadow = tmp_path / "shadow"
    for name, (_, overlays, expected) in MODELS.items():
        overlay = f"overlays/{name}/{overlays[0]}"
        work = tmp_path / name
        if name == "tf-ranker":  # the pinned version folder comes with the artifacts
            (work / "artifacts" / "tf_ranker" / "2").mkdir(parents=True)
        models = assemble(rendered[overlay], work)
        assert sorted(p.name for p in models.iterdir()) == sorted(expected), overlay
        build_shadow(models, shadow, keep_python=True, stubs={"tensorrtllm": str(stub_path("tensorrtllm_echo")),
                                                              "vllm": str(stub_path("vllm_args"))})
    # the vLLM stub checks model.json against the engine arguments of the image's vLLM (24.12: vLLM 0.5.5)
    fields = load("vllm_engine_args.yaml")["versions"][vllm_version("24.12")]["fields"]
    (shadow / "qwen_chat" / "1" / "engine_args.json").write_text(
        json.dumps({k: v["json_types"] for k, v in fields.items()}), encoding="utf-8")
    point_tokenizers_at(shadow, tiny_tokenizer(tmp_path / "tokenizer"))
    with tritonserver.TritonServer(shadow).start(timeout=120) as server:
        states = {m["name"]: m.get("state") for m in tritonserver.repository_index(server)}
        assert states == {m: "READY" for _, _, models in MODELS.values() for m in models}, server.log[-3000:]
        answer = server.request("POST", "/v2/models/ensemble/generate",
                                {"text_input": "hello triton on kubernetes", "max_tokens": 16})
        assert answer["text_output"] == "hello triton on kubernetes"
        config = server.request("GET", "/v2/models/tensorrt_llm/config")
        assert config["parameters"]["gpt_model_path"]["string_value"] == "/artifacts/chat-llm/engines/h200"
        # The python template answers zeros shaped as configured.
        body = {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["hi"]}]}
        result = server.request("POST", "/v2/models/scorer/infer", body)
        assert result["outputs"][0]["shape"] == [1, 2] and result["outputs"][0]["data"] == [0.0, 0.0]
        # The ensemble wires the real preprocessor into the (stubbed) classifier under its mapped names.
        image = np.zeros(224 * 224 * 3, dtype=np.uint8)
        body = {"inputs": [{"name": "IMAGE", "shape": [1, image.size], "datatype": "UINT8", "data": image.tolist()}]}
        result = server.request("POST", "/v2/models/vision/infer", body)
        assert [(o["name"], o["shape"]) for o in result["outputs"]] == [("PROBS", [1, 1000])]
        assert server.request("GET", "/v2/models/tf_ranker/config")["version_policy"] == {"specific": {"versions": [2]}}
        # vLLM: the engine arguments reached the backend where it reads them, on a KIND_MODEL instance
        received = json.loads((shadow / "qwen_chat" / "1" / "received.json").read_text())
        assert received == {"engine_args": {"model": "/artifacts/qwen-chat/hf", "gpu_memory_utilization": 0.9,
                                            "tensor_parallel_size": 2, "max_model_len": 16384},
                            "instance_kind": "MODEL", "loras": None}
        answer = server.request("POST", "/v2/models/qwen_chat/generate", {"text_input": "hello vllm", "stream": False})
        assert answer["text_output"] == "hello vllm"


def test_generated_layout_matches_the_seed_models(scaffolded):
    root, _ = scaffolded

    def shape(top: Path) -> set[str]:
        return {p.relative_to(top).as_posix() for p in top.rglob("*") if p.is_file()}

    assert shape(root / "models" / "chat-llm") == shape(REPO / "models" / "llama3-8b")
    assert shape(root / "overlays" / "chat-llm") == {p.replace("h100-80gb", "h200") for p in
                                                      shape(REPO / "overlays" / "llama3-8b")}
    for part in ("preprocessing", "postprocessing"):
        rel = f"{part}/1/model.py"
        assert (root / "models" / "chat-llm" / rel).read_bytes() == (REPO / "models" / "llama3-8b" / rel).read_bytes()
    assert shape(root / "overlays" / "resnet") == shape(REPO / "overlays" / "image-classifier")
    meta = yamlio.load_all(root / "models" / "chat-llm" / "model.yaml")[0]
    seed = yamlio.load_all(REPO / "models" / "llama3-8b" / "model.yaml")[0]
    assert list(meta) == list(seed) and list(meta["engine"]) == list(seed["engine"])
    assert meta["engine"]["tp"] == 2 and meta["gpus"] == ["h200"]
