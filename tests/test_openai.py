"""`add-model --frontend openai`: the Deployment runs Triton's OpenAI-compatible frontend (port 9000, KServe v2 on
8000/8001 kept), and the generated TensorRT-LLM ensemble takes exactly what that frontend sends.

The frontend itself cannot run here (docs/openai.md): it drives Triton through the in-process Python API
(`import tritonserver`, the `tritonserver._c` bindings), which ships only as a wheel inside NGC's Triton
containers; PyPI's `tritonserver` is a placeholder whose install fails on purpose, and nvidia-pytriton ships the
server binary and libtritonserver.so without those bindings. So its request contract is tested at schema level
instead: the tensors its TensorRT-LLM request converter creates (tests/fixtures/openai/trtllm_request.yaml,
transcribed from the pinned release with source and commit) against the generated config, and then sent to a
real tritonserver serving the generated ensemble (TensorRT-LLM shadowed by the python stand-in)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kubectl_triton.adapters import kustomize
from kubectl_triton.adapters.shadow import build_shadow, stub_path
from kubectl_triton.checks.manifests import multinode
from kubectl_triton.formats import pbtxt, schemas, yamlio
from tests.test_model_repositories import assemble, point_tokenizers_at, tiny_tokenizer

CONTRACT = yaml.safe_load((Path(__file__).parent / "fixtures" / "openai" / "trtllm_request.yaml").read_text())
TYPES = {"BYTES": "TYPE_STRING", "BOOL": "TYPE_BOOL", "INT32": "TYPE_INT32", "FP32": "TYPE_FP32",
         "UINT64": "TYPE_UINT64"}
NOT_SCAFFOLDED = {"stop_words"}  # needs a tokenizing step in preprocessing (docs/openai.md)
LLM = ["--backend", "tensorrtllm", "--gpu", "h200", "--tp", "2", "--frontend", "openai"]


@pytest.fixture
def openai_repo(run_cli, repo_copy):
    res = run_cli("add-model", "chat", *LLM, "--repo", str(repo_copy))
    assert res.exit_code == 0, res.stderr
    return repo_copy


def test_the_deployment_serves_the_openai_frontend_next_to_kserve(openai_repo):
    objs = yamlio.loads_all(kustomize.build(openai_repo / "overlays/chat/h200").yaml, "chat")
    assert [i for o in objs for i in schemas.validate_object(o)] == []
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    (server,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "tritonserver"]
    assert server["command"] == ["python3", "/opt/tritonserver/python/openai/openai_frontend/main.py"]
    meta = yamlio.load_all(openai_repo / "models/chat/model.yaml")[0]
    assert server["args"] == ["--model-repository=/models", f"--tokenizer={meta['engine']['tokenizer_dir']}",
                              "--openai-port=9000", "--enable-kserve-frontends", "--kserve-http-port=8000",
                              "--kserve-grpc-port=8001"]
    assert {"name": "TRTLLM_ORCHESTRATOR", "value": "1"} in server["env"]
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert ports["openai"] == 9000 and ports["http"] == 8000  # the probes keep using KServe's /v2/health
    assert server["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    (svc,) = [o for o in objs if o["kind"] == "Service"]
    assert {"name": "openai", "port": 9000, "targetPort": "openai"} in svc["spec"]["ports"]
    (policy,) = [o for o in objs if o["kind"] == "NetworkPolicy"]
    assert {"from": [{"namespaceSelector": {"matchLabels": {"triton.kubectl.io/client": "true"}}}],
            "ports": [{"port": "openai"}]} in policy["spec"]["ingress"]


def test_the_ensemble_declares_what_the_frontend_sends(openai_repo):
    config = pbtxt.load(openai_repo / "models/chat/ensemble/config.pbtxt")
    inputs = {i.name: i for i in config.input}
    for tensor in CONTRACT["inputs"]:
        if tensor["name"] in NOT_SCAFFOLDED:
            assert tensor["name"] not in inputs
            continue
        declared = inputs.get(tensor["name"])
        assert declared is not None, f"the frontend sends {tensor['name']}; the ensemble does not declare it"
        assert pbtxt.schema().DataType.Name(declared.data_type) == TYPES[tensor["datatype"]], tensor["name"]
        # batch dimension + one value, as the frontend shapes it ([[value]])
        assert config.max_batch_size > 0 and list(declared.dims) == [1], tensor["name"]
        if tensor["sent"] != "always" and tensor["name"] != "max_tokens":  # max_tokens: clients must send it
            assert declared.optional, f"the frontend may leave out {tensor['name']}; the ensemble requires it"
    assert not inputs["max_tokens"].optional and not inputs["text_input"].optional
    assert {o.name: pbtxt.schema().DataType.Name(o.data_type) for o in config.output} == {
        o["name"]: TYPES[o["datatype"]] for o in CONTRACT["outputs"]}
    # every sampling input reaches the engine model under its own name
    core = pbtxt.load(openai_repo / "models/chat/tensorrt_llm/config.pbtxt")
    step = next(s for s in config.ensemble_scheduling.step if s.model_name == "tensorrt_llm")
    for name in ("frequency_penalty", "presence_penalty", "random_seed"):
        assert step.input_map[name] == name and name in {i.name for i in core.input}


def test_the_default_frontend_keeps_the_seed_layout(run_cli, repo_copy):
    assert run_cli("add-model", "plain", "--backend", "tensorrtllm", "--gpu", "h200", "--repo",
                   str(repo_copy)).exit_code == 0
    ours = (repo_copy / "models/plain/ensemble/config.pbtxt").read_text()
    seed = (repo_copy / "models/llama3-8b/ensemble/config.pbtxt").read_text()
    assert pbtxt.parse(ours).input == pbtxt.parse(seed).input


def test_a_real_tritonserver_takes_the_frontends_request(openai_repo, tmp_path, install):
    from kubectl_triton.adapters import tritonserver

    objs = yamlio.loads_all(kustomize.build(openai_repo / "overlays/chat/h200").yaml, "chat")
    models = assemble(objs, tmp_path / "work")
    shadow = tmp_path / "shadow"
    build_shadow(models, shadow, keep_python=True, stubs={"tensorrtllm": str(stub_path("tensorrtllm_echo"))})
    point_tokenizers_at(shadow, tiny_tokenizer(tmp_path / "tokenizer"))
    values = {"text_input": "hello triton on kubernetes", "stream": False, "max_tokens": 16, "top_p": 0.9,
              "temperature": 0.5, "frequency_penalty": 0.1, "presence_penalty": 0.2, "random_seed": 7}
    sent = {t["name"] for t in CONTRACT["inputs"]} - NOT_SCAFFOLDED
    assert set(values) == sent  # everything the converter can send except stop_words
    with tritonserver.TritonServer(shadow, install=install).start(timeout=120) as server:
        server.wait_ready(60)
        answer = server.request("POST", "/v2/models/ensemble/generate", values)
        assert answer["text_output"] == "hello triton on kubernetes"
        with pytest.raises(Exception) as refused:  # the documented limit: `stop` is not scaffolded
            server.request("POST", "/v2/models/ensemble/generate", {**values, "stop_words": ["triton"]})
        assert "stop_words" in str(refused.value)


def test_openai_frontend_is_refused_where_it_cannot_serve(run_cli, repo_copy):
    for args, message in ((["--backend", "onnxruntime", "--gpu", "l4", "--frontend", "openai"],
                           "--frontend openai: only for --backend tensorrtllm or vllm"),
                          ([*LLM, "--no-streaming"], "--frontend openai: needs --streaming"),
                          (["--backend", "tensorrtllm", "--gpu", "h100-80gb", "--tp", "8", "--pp", "2", "--nodes", "2",
                            "--frontend", "openai"], "single-node orchestrator mode")):
        res = run_cli("add-model", "x", *args, "--repo", str(repo_copy))
        assert res.exit_code == 2 and message in res.stderr, res.stderr


def test_validate_refuses_the_frontend_in_a_group():
    from tests.conftest import REPO

    objs = yamlio.loads_all(kustomize.build(REPO / "overlays/llama3-70b/h100-80gb").yaml, "g")
    lws = next(o for o in objs if o["kind"] == "LeaderWorkerSet")
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    leader["command"] = ["python3", "/opt/tritonserver/python/openai/openai_frontend/main.py"]

    class T:
        rel, objects = "overlays/x", objs

    found = [f for f in multinode.check_groups(REPO, [T()]) if f.code == "MultinodeOpenAIFrontend"]
    assert len(found) == 1 and "single-node orchestrator mode" in found[0].message


def test_vllm_model_behind_the_frontend(run_cli, repo_copy):
    """vLLM: the frontend reads the checkpoint as its tokenizer, no TensorRT-LLM orchestrator, the LoRA separator
    from 25.05 (the first frontend that takes it)."""
    res = run_cli("add-model", "assistant", "--backend", "vllm", "--gpu", "l40s", "--frontend", "openai",
                  "--image-tag", "25.08", "--repo", str(repo_copy))
    assert res.exit_code == 0, res.stderr
    container = yamlio.load_all(repo_copy / "overlays/assistant/model/deployment.yaml")[0][
        "spec"]["template"]["spec"]["containers"][0]
    assert "--tokenizer=/artifacts/assistant/hf" in container["args"]
    assert "--lora-separator=_lora_" in container["args"] and "env" not in container
    assert json.loads((repo_copy / "models/assistant/assistant/1/model.json").read_text())["model"] == \
        "/artifacts/assistant/hf"
    assert container["image"] == "nvcr.io/nvidia/tritonserver:25.08-vllm-python-py3"
    flavoured = run_cli("add-model", "other", "--backend", "vllm", "--gpu", "l40s", "--image-tag",
                        "25.08-vllm-python-py3", "--repo", str(repo_copy))
    assert flavoured.exit_code == 2 and "give the release (25.08)" in flavoured.stderr
