"""LoRA adapters of TensorRT-LLM models: add-adapter's plan (task ids, the engine's LoRA limits, the cache page
size), the files it writes on the seed's llama3-8b, validate's findings for each mistake, the engine-build Job's
trtllm-build flags, and the wired ensemble in the real tritonserver (the engine shadowed by a python stub): a
request naming a LoRA task id reaches the tensorrt_llm model, and an unwired ensemble refuses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kubectl_triton.adapters.shadow import build_shadow, stub_path
from kubectl_triton.compat.engine import parse_config
from kubectl_triton.errors import InputError
from kubectl_triton.formats import pbtxt, yamlio
from kubectl_triton.formats.yamledit import set_in
from kubectl_triton.gitops import lora_trtllm
from kubectl_triton.gitops.lora import Adapter
from tests.conftest import REPO

MODEL = "models/llama3-8b"
LLAMA3 = "meta-llama/Meta-Llama-3-8B-Instruct"


def _adapter(rank: int, *modules: str) -> Adapter:
    return Adapter(rank, LLAMA3, modules or ("q_proj", "v_proj"))


ENGINE = {"dtype": "bfloat16"}
WITH_LORA = {"dtype": "bfloat16", "lora": {"max_rank": 32, "target_modules": ["attn_k", "attn_q", "attn_v"]}}


@pytest.mark.parametrize(("engine", "adapter", "others", "tasks", "cache_max", "want"), [
    # no LoRA yet: the smallest power of two >= 8 holding the rank; q and v bring k along
    (ENGINE, _adapter(4), {}, {}, None, (1, 8, ("attn_k", "attn_q", "attn_v"), True, None)),
    (ENGINE, _adapter(16, "q_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), {}, {}, None,
     (1, 16, ("attn_dense", "attn_k", "attn_q", "attn_v", "mlp_4h_to_h", "mlp_gate", "mlp_h_to_4h"), True, None)),
    # the engine holds it: no rebuild, the next task id
    (WITH_LORA, _adapter(32), {"a": _adapter(8)}, {"a": 1, "b": 4}, None,
     (5, 32, ("attn_k", "attn_q", "attn_v"), False, None)),
    # a module the engine lacks: rebuild with the union, the rank kept
    (WITH_LORA, _adapter(8, "down_proj"), {}, {}, None,
     (1, 32, ("attn_k", "attn_q", "attn_v", "mlp_4h_to_h"), True, None)),
    # an already reviewed adapter's rank stays held; above the cache's 64-row pages the page size grows
    (WITH_LORA, _adapter(8), {"big": _adapter(100)}, {"big": 1}, None,
     (2, 128, ("attn_k", "attn_q", "attn_v"), True, 100)),
    (WITH_LORA, _adapter(16), {}, {}, 8, (1, 32, ("attn_k", "attn_q", "attn_v"), False, 16)),
])
def test_plan_adapter(engine, adapter, others, tasks, cache_max, want):
    plan = lora_trtllm.plan_adapter(name="new", adapter=adapter, source="a.json", engine=engine, tasks=tasks,
                                    others=others, cache_max=cache_max, force=False)
    assert (plan.task_id, plan.lora.max_rank, plan.lora.target_modules, plan.rebuild, plan.max_adapter_size) == want
    assert plan.tasks == {**tasks, "new": want[0]}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": "bad name"}, "an adapter name is letters"),
    ({"tasks": {"new": 1}}, "adapter 'new' exists already (tasks.json); pass --force"),
    ({"adapter": _adapter(8, "lm_head")}, "a.json: target module 'lm_head' has no TensorRT-LLM LoRA module"),
    ({"engine": {"lora": {"max_rank": 0, "target_modules": ["attn_q"]}}}, "engine.lora.max_rank must be"),
    ({"engine": {"lora": {"max_rank": 8, "target_modules": ["q_proj"]}}}, "engine.lora.target_modules must list"),
])
def test_plan_adapter_refusals(kwargs, message):
    args = {"name": "new", "adapter": _adapter(8), "source": "a.json", "engine": ENGINE, "tasks": {}, "others": {},
            "cache_max": None, "force": False, **kwargs}
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        lora_trtllm.plan_adapter(**args)


def test_task_id_zero_is_the_backends_own_first_id():
    assert lora_trtllm.read_tasks('{"a": 0}', "tasks.json") == {"a": 0}
    plan = lora_trtllm.plan_adapter(name="a", adapter=_adapter(8), source="a.json", engine=WITH_LORA,
                                    tasks={"a": 0}, others={}, cache_max=None, force=True)
    assert plan.task_id == 0


def test_force_keeps_the_task_id():
    plan = lora_trtllm.plan_adapter(name="a", adapter=_adapter(8), source="a.json", engine=WITH_LORA,
                                    tasks={"a": 3, "b": 1}, others={}, cache_max=None, force=True)
    assert plan.task_id == 3


@pytest.mark.parametrize(("text", "message"), [
    ('{"a": 1, "b": 1}', "task id 1 names two adapters"),
    ('{"a": -1}', "the task id must be an integer from 0 to 2147483647"),
    ('{"a": 2147483648}', "the task id must be an integer from 0 to 2147483647"),
    ('{"a": 1, "a": 2}', "adapter 'a' is named twice"),
    ("[1]", "a JSON object of adapter name -> LoRA task id"),
])
def test_tasks_file_refusals(text, message):
    with pytest.raises(InputError, match=message):
        lora_trtllm.read_tasks(text, "tasks.json")


def _write_adapter(tmp_path: Path, rank: int = 16, modules: tuple[str, ...] = ("q_proj", "v_proj"),
                   base: str = LLAMA3) -> Path:
    path = tmp_path / f"adapter-{rank}-{'-'.join(modules)}.json"
    path.write_text(json.dumps({"base_model_name_or_path": base, "r": rank, "lora_alpha": 2 * rank,
                                "target_modules": list(modules), "task_type": "CAUSAL_LM"}))
    return path


def _add(run_cli, root: Path, tmp_path: Path, name: str, *extra: str, **adapter):
    return run_cli("add-adapter", "llama3-8b", name, "--adapter-config", str(_write_adapter(tmp_path, **adapter)),
                   "--repo", str(root), *extra)


def _findings(run_cli, root: Path) -> set[tuple[str, str]]:
    doc = json.loads(run_cli("validate", str(root), "-o", "json").stdout)
    return {(f["code"], f["path"]) for f in doc["findings"]
            if f.get("model") == "llama3-8b" and f["code"].startswith("TrtllmLora")}


def test_add_adapter_wires_the_model_and_asks_for_a_lora_engine(run_cli, repo_copy: Path, tmp_path: Path):
    result = _add(run_cli, repo_copy, tmp_path, "sql")
    assert result.exit_code == 0, result.stderr
    assert "clients select it with lora_task_id 1" in result.stderr
    assert "put OUT's model.lora_config.npy and model.lora_weights.npy in /artifacts/llama3-8b/loras/1" in \
        result.stderr
    assert "engine.lora changed (max_rank 16, attn_k attn_q attn_v)" in result.stderr
    meta = yamlio.load_all(repo_copy / MODEL / "model.yaml")[0]
    assert meta["engine"]["lora"] == {"max_rank": 16, "target_modules": ["attn_k", "attn_q", "attn_v"]}
    seed_meta = (REPO / MODEL / "model.yaml").read_text()
    assert (repo_copy / MODEL / "model.yaml").read_text().startswith(seed_meta.split("engine:")[0])  # comments kept
    core = pbtxt.load(repo_copy / MODEL / "tensorrt_llm/config.pbtxt")
    assert core.parameters["lora_prefetch_dir"].string_value == "/artifacts/llama3-8b/loras"
    assert [i.name for i in core.input][-1] == "lora_task_id"
    ensemble = pbtxt.load(repo_copy / MODEL / "ensemble/config.pbtxt")
    step = next(s for s in ensemble.ensemble_scheduling.step if s.model_name == "tensorrt_llm")
    assert step.input_map["lora_task_id"] == "lora_task_id"
    assert json.loads((repo_copy / MODEL / "adapters/tasks.json").read_text()) == {"sql": 1}
    assert _findings(run_cli, repo_copy) == set()
    # a second adapter the engine holds: the next task id, nothing else changes
    before = {p: (repo_copy / MODEL / p).read_text() for p in ("model.yaml", "tensorrt_llm/config.pbtxt",
                                                              "ensemble/config.pbtxt")}
    result = _add(run_cli, repo_copy, tmp_path, "chat", rank=8)
    assert result.exit_code == 0 and "engine.lora changed" not in result.stderr
    assert {p: (repo_copy / MODEL / p).read_text() for p in before} == before
    assert json.loads((repo_copy / MODEL / "adapters/tasks.json").read_text()) == {"sql": 1, "chat": 2}
    # a refused adapter writes nothing
    again = _add(run_cli, repo_copy, tmp_path, "sql")
    assert again.exit_code == 2 and "adapter 'sql' exists already" in again.stderr
    bad = _add(run_cli, repo_copy, tmp_path, "head", modules=("lm_head",))
    assert bad.exit_code == 2 and "target module 'lm_head' has no TensorRT-LLM LoRA module" in bad.stderr
    assert not (repo_copy / MODEL / "adapters/head").exists()
    (repo_copy / TASKS).write_bytes(b'{"sql": 1, "\xff": 2}')
    unreadable = _add(run_cli, repo_copy, tmp_path, "other")
    assert unreadable.exit_code == 2 and f"{TASKS}: cannot be read" in unreadable.stderr
    assert "Traceback" not in unreadable.stderr
    usage = run_cli("add-adapter", "llama3-8b", "x", "--adapter-config", str(_write_adapter(tmp_path)),
                    "--max-loras", "2", "--repo", str(repo_copy))
    assert usage.exit_code == 2 and "--max-loras: for vLLM-backend models only" in usage.stderr
    usage = run_cli("add-adapter", "llama3-8b", "x", "--adapter-config", str(_write_adapter(tmp_path)),
                    "--artifact", "loras/x", "--repo", str(repo_copy))
    assert usage.exit_code == 2 and "lives in loras/TASK_ID" in usage.stderr


def _set_engine_lora(**lora) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / MODEL / "model.yaml"
        meta = path.read_text()
        path.write_text(set_in(meta, ("engine", "lora"), lora or None))
    return edit


def _edit(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / MODEL / rel
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
    return edit


def _record_engine(plugin: str | None, rank: int = 16) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        config = {"version": "0.16.0",
                  "pretrained_config": {"architecture": "LlamaForCausalLM", "dtype": "bfloat16",
                                        "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
                                        "num_key_value_heads": 8,
                                        "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1}},
                  "build_config": {"max_batch_size": 64, "max_input_len": 4096, "max_seq_len": 8192,
                                   "plugin_config": {"lora_plugin": plugin},
                                   "lora_config": {"max_lora_rank": rank, "lora_target_modules": ["attn_q", "attn_v"]}
                                   if plugin else {}}}
        folder = root / MODEL / "engines/h100-80gb"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(config))
    return edit


CORE = f"{MODEL}/tensorrt_llm/config.pbtxt"
TASKS = f"{MODEL}/adapters/tasks.json"


@pytest.mark.parametrize(("mutate", "expected"), [
    (_set_engine_lora(), {("TrtllmLoraInvalid", f"{MODEL}/model.yaml")}),
    (_set_engine_lora(max_rank=8, target_modules=["attn_q", "attn_k", "attn_v"]),
     {("TrtllmLoraInvalid", f"{MODEL}/model.yaml")}),
    (_set_engine_lora(max_rank=16, target_modules=["attn_q"]), {("TrtllmLoraInvalid", f"{MODEL}/model.yaml")}),
    (_record_engine(None), {("TrtllmLoraInvalid", f"{MODEL}/engines/h100-80gb/config.json")}),
    (_record_engine("auto", rank=8), {("TrtllmLoraInvalid", f"{MODEL}/engines/h100-80gb/config.json")}),
    (_record_engine("auto"), set()),
    (_edit("tensorrt_llm/config.pbtxt", 'parameters { key: "lora_prefetch_dir"', 'parameters { key: "other_dir"'),
     {("TrtllmLoraNotWired", CORE)}),
    (_edit("tensorrt_llm/config.pbtxt", '"lora_task_id"', '"lora_task"'), {("TrtllmLoraNotWired", CORE)}),
    (_edit("ensemble/config.pbtxt", 'input_map { key: "lora_task_id" value: "lora_task_id" }', ""),
     {("TrtllmLoraNotWired", f"{MODEL}/ensemble/config.pbtxt")}),
    (_edit("tensorrt_llm/config.pbtxt", 'key: "executor_worker_path"', 'key: "lora_cache_max_adapter_size" '
           'value { string_value: "8" } }\nparameters { key: "executor_worker_path"'),
     {("TrtllmLoraInvalid", CORE)}),
    (_edit("adapters/tasks.json", '"sql": 1', '"sql": 1, "gone": 1'), {("TrtllmLoraInvalid", TASKS)}),
    (_edit("adapters/tasks.json", '"sql": 1', '"sql": 1, "gone": 2'), {("TrtllmLoraUnreviewed", TASKS)}),
    (_edit("adapters/sql/adapter_config.json", '"r": 16', '"r": "x"'),
     {("TrtllmLoraInvalid", f"{MODEL}/adapters/sql/adapter_config.json"), ("TrtllmLoraUnreviewed", TASKS)}),
    (_edit("adapters/sql/adapter_config.json", '"v_proj"', '"lm_head"'),
     {("TrtllmLoraInvalid", f"{MODEL}/adapters/sql/adapter_config.json")}),
])
def test_each_lora_mistake_is_its_finding(run_cli, repo_copy: Path, tmp_path: Path, mutate, expected):
    assert _add(run_cli, repo_copy, tmp_path, "sql").exit_code == 0
    mutate(repo_copy)
    assert _findings(run_cli, repo_copy) == expected


def test_recorded_engine_lora_fields_are_parsed():
    engine = parse_config({"pretrained_config": {"architecture": "LlamaForCausalLM"},
                           "build_config": {"plugin_config": {"lora_plugin": "bfloat16"},
                                            "lora_config": {"max_lora_rank": 64,
                                                            "lora_target_modules": ["attn_qkv", "attn_dense"]}}})
    assert (engine.lora_plugin, engine.max_lora_rank, engine.lora_target_modules) == \
        ("bfloat16", 64, ("attn_qkv", "attn_dense"))
    plain = parse_config({"pretrained_config": {}, "build_config": {"plugin_config": {"lora_plugin": None}}})
    assert plain.lora_plugin is None and plain.lora_target_modules == ()


def test_engine_build_job_passes_the_lora_options_to_trtllm_build(tmp_path: Path):
    """base/engine-build/build-engine.py with model.yaml engine.lora: trtllm-build gets the LoRA plugin, its rank
    and modules (tensorrt_llm and trtllm-build are stood in for: this machine has no GPU build image)."""
    fake = tmp_path / "fake"
    (fake / "tensorrt_llm" / "models").mkdir(parents=True)
    (fake / "tensorrt_llm" / "__init__.py").write_text("")
    (fake / "tensorrt_llm" / "mapping.py").write_text("class Mapping:\n    def __init__(self, **kw): pass\n")
    (fake / "tensorrt_llm" / "quantization.py").write_text("class QuantAlgo: pass\n")
    (fake / "tensorrt_llm" / "models" / "modeling_utils.py").write_text(
        "class QuantConfig:\n    def __init__(self, **kw): pass\n")
    (fake / "tensorrt_llm" / "models" / "__init__.py").write_text(
        "class LLaMAForCausalLM:\n"
        "    @classmethod\n    def from_hugging_face(cls, *a, **kw): return cls()\n"
        "    def save_checkpoint(self, *a, **kw): pass\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv = tmp_path / "argv.json"
    (bin_dir / "trtllm-build").write_text(f"#!{sys.executable}\nimport json, sys\n"
                                          f"json.dump(sys.argv[1:], open({str(argv)!r}, 'w'))\n")
    (bin_dir / "trtllm-build").chmod(0o755)
    meta = yamlio.load_all(REPO / MODEL / "model.yaml")[0]
    meta["engine"]["lora"] = {"max_rank": 32, "target_modules": ["attn_k", "attn_q", "attn_v", "attn_dense"]}
    model_yaml = tmp_path / "model.yaml"
    model_yaml.write_text(json.dumps(meta))  # YAML is a superset of JSON
    env = {**os.environ, "PYTHONPATH": str(fake), "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp_path)}
    subprocess.run([sys.executable, str(REPO / "base/engine-build/build-engine.py"), "--model", str(model_yaml)],
                   env=env, capture_output=True, text=True, timeout=60)
    args = json.loads(argv.read_text())
    at = args.index("--lora_plugin")
    assert args[at:] == ["--lora_plugin", "auto", "--max_lora_rank", "32",
                         "--lora_target_modules", "attn_k", "attn_q", "attn_v", "attn_dense"]
    assert args[args.index("--max_batch_size") + 1] == "64"


def _shadow(root: Path, overlay: str, tmp_path: Path) -> Path:
    from kubectl_triton.adapters import kustomize
    from tests.test_model_repositories import assemble, point_tokenizers_at, tiny_tokenizer

    docs = yamlio.loads_all(kustomize.build(root / overlay).yaml, overlay)
    models = assemble(docs, tmp_path / "work")
    shadow = tmp_path / "shadow"
    build_shadow(models, shadow, keep_python=True, stubs={"tensorrtllm": str(stub_path("tensorrtllm_echo"))})
    point_tokenizers_at(shadow, tiny_tokenizer(tmp_path / "tokenizer"))
    return shadow


def test_wired_ensemble_takes_a_lora_task_id_in_tritonserver(run_cli, repo_copy: Path, tmp_path: Path, install):
    from kubectl_triton.adapters import tritonserver

    unwired = _shadow(repo_copy, "overlays/llama3-8b/h100-80gb", tmp_path / "before")
    assert _add(run_cli, repo_copy, tmp_path, "sql").exit_code == 0
    wired = _shadow(repo_copy, "overlays/llama3-8b/h100-80gb", tmp_path / "after")
    generate = {"text_input": "hello triton on kubernetes", "max_tokens": 16, "lora_task_id": 1}
    not_an_id = {**generate, "lora_task_id": "sql"}
    with tritonserver.TritonServer(wired).start(timeout=120) as server:
        config = server.request("GET", "/v2/models/tensorrt_llm/config")
        assert config["parameters"]["lora_prefetch_dir"]["string_value"] == "/artifacts/llama3-8b/loras"
        assert server.request("POST", "/v2/models/ensemble/generate", generate)["text_output"] == \
            "hello triton on kubernetes"
        with pytest.raises(Exception, match="non-unsigned-integer as unsigned-integer"):  # an input: typed
            server.request("POST", "/v2/models/ensemble/generate", not_an_id)
    with tritonserver.TritonServer(unwired).start(timeout=120) as server:
        # /generate takes a key that names no input as a request parameter: the base model answers, silently
        for body in (generate, not_an_id):
            assert server.request("POST", "/v2/models/ensemble/generate", body)["text_output"] == \
                "hello triton on kubernetes"
