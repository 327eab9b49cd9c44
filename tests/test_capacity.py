"""KV-cache capacity: the estimate against real startup logs of TensorRT-LLM and vLLM (tests/fixtures/
kv_capacity_cases.yaml, each case with its public source and the lines it quotes), the config.json reader on the
families people serve, and the table docs/capacity.md shows."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pytest

from kubectl_triton.checks.manifests import kvcapacity
from kubectl_triton.compat import capacity
from kubectl_triton.compat.hfconfig import architecture, load_architecture
from kubectl_triton.errors import InputError
from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("capacity_cases", REPO / "tools" / "capacity_cases.py")
assert _spec and _spec.loader
cases_tool = importlib.util.module_from_spec(_spec)
sys.modules["capacity_cases"] = cases_tool  # dataclasses look their module up
_spec.loader.exec_module(cases_tool)

CASES = cases_tool.load_cases()


def test_the_table_holds_at_least_fifteen_sourced_cases_of_both_backends():
    assert len(CASES) >= 15
    assert {c["backend"] for c in CASES} == {"tensorrtllm", "vllm"}
    assert len({c["id"] for c in CASES}) == len(CASES)
    for case in CASES:
        assert case["source"].startswith("https://"), case["id"]
        assert case["quote"], case["id"]
        missed = case.get("within_10pct") is False or case.get("end_to_end") is False
        assert not missed or case.get("why"), f"{case['id']}: a case outside ±10% says why"


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_estimate_against_the_logged_capacity(case):
    """End to end (catalog memory, documented reserve, nothing from the log): within ±10% exactly where the table
    says so, so a formula change that moves a case either way fails here and the table must be redone."""
    row = cases_tool.compare(case)
    if row.end_to_end:
        assert (abs(row.error) <= 0.10) == bool(case["within_10pct"]), (
            f"{case['id']}: estimate {row.estimated:,.2f} vs logged {row.logged:,.2f} {row.measure} "
            f"({row.error:+.1%}); the table says within_10pct: {case['within_10pct']}")
    started = case["logged"].get("started")
    if started is not None and not case.get("verdict_differs"):
        assert (row.plan.status == "fits") == started, (case["id"], row.plan.status)


@pytest.mark.parametrize("case", [c for c in CASES if "started" in c["logged"]], ids=lambda c: c["id"])
def test_the_gate_never_errs_on_a_logged_start_and_speaks_on_every_logged_refusal(case):
    """KvCacheDoesNotFit (an error) is judged with the smallest reserve seen in real logs, so no logged start is
    refused; every logged refusal gets at least the warning of the central estimate."""
    best = cases_tool.compare(case, reserve_mib=kvcapacity.LOWEST_RESERVE_MIB).plan
    central = cases_tool.compare(case).plan
    error = best.status == "no-memory" or (best.status == "short" and case["backend"] == "vllm")
    if case["logged"]["started"]:
        assert not error, (case["id"], best.status, best.kv_tokens)
    else:
        assert error or central.status != "fits", (case["id"], central.status, central.kv_tokens)


@pytest.mark.parametrize("case", [c for c in CASES if cases_tool.compare(c).per_token_tokens is not None],
                         ids=lambda c: c["id"])
def test_kv_bytes_per_token_reproduce_the_logged_tokens(case):
    """Where a log states both the KV memory and the tokens it holds, that memory divided by our bytes per token
    gives the logged tokens: the per-token formula (layers, KV heads per rank, head_dim, dtype) is exact."""
    row = cases_tool.compare(case)
    assert row.per_token_tokens == pytest.approx(row.logged, rel=0.02), case["id"]


def test_the_docs_table_is_the_one_the_cases_give():
    rows = [cases_tool.compare(c) for c in CASES]
    doc = (REPO / "docs" / "capacity.md").read_text(encoding="utf-8")
    assert cases_tool.replace_table(doc, cases_tool.markdown(rows)) == doc, \
        "docs/capacity.md is stale: run python tools/capacity_cases.py --write"


# The families' published config.json fields and their published parameter counts (model cards).
FAMILIES = [
    ("llama-3.1-8b", {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                      "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                      "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": False},
     8.03e9, 131072),
    ("mistral-7b-v0.3", {"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
                         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                         "vocab_size": 32768, "max_position_embeddings": 32768}, 7.25e9, 131072),
    ("qwen2.5-7b", {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
                    "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
                    "tie_word_embeddings": False}, 7.62e9, 57344),
    ("gemma-2-9b", {"model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584, "num_attention_heads": 16,
                    "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000},
     9.24e9, 344064),
    ("mixtral-8x7b", {"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096,
                      "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                      "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}, 46.7e9, 131072),
    ("gpt2", {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257,
              "n_positions": 1024}, 0.124e9, 2 * 12 * 768 * 2),
]


@pytest.mark.parametrize(("name", "doc", "params", "kv_bytes"), FAMILIES, ids=[f[0] for f in FAMILIES])
def test_parameters_and_kv_bytes_of_published_families(name, doc, params, kv_bytes):
    arch = architecture(doc, name)
    assert arch.parameters == pytest.approx(params, rel=0.03)
    assert capacity.kv_bytes_per_token(arch, tp=1, pp=1, kv_bytes=2.0) == kv_bytes


def test_deepseek_v3_latent_attention_keeps_the_compressed_kv_on_every_rank():
    arch = architecture({"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
                         "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
                         "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
                         "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512,
                         "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                         "vocab_size": 129280, "max_position_embeddings": 163840})
    assert arch.attention_kind == "MLA"
    assert arch.parameters == pytest.approx(671e9, rel=0.03)
    assert arch.active_parameters == pytest.approx(37e9, rel=0.05)
    # 576 latent elements per token and layer, the same on each of 8 ranks
    assert capacity.kv_bytes_per_token(arch, tp=8, pp=1, kv_bytes=1.0) == 61 * 576


def test_fewer_kv_heads_than_ranks_replicate_them():
    arch = architecture(FAMILIES[0][1])
    # 8 KV heads over tp 16: each rank keeps one head, not half of one
    assert capacity.kv_bytes_per_token(arch, tp=16, pp=1, kv_bytes=2.0) == 32 * 2 * 1 * 128 * 2


def test_pipeline_stages_split_layers_and_the_heaviest_stage_counts():
    arch = architecture(FAMILIES[0][1])
    one = capacity.stage_weight_bytes(arch, tp=1, pp=1, weight_bytes=2, activation_bytes=2, parallel_embedding=False)
    two = capacity.stage_weight_bytes(arch, tp=1, pp=2, weight_bytes=2, activation_bytes=2, parallel_embedding=False)
    assert one == pytest.approx(arch.parameters * 2, rel=0.001)
    assert one / 2 <= two < one  # half of the layers plus the embedding (first stage) or the head (last)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"backend": "onnx"}, "unknown backend 'onnx'"),
    ({"dtype": "int8"}, "dtype 'int8' is no activation dtype"),
    ({"kv_cache_dtype": "fp6"}, "unknown KV-cache dtype 'fp6'"),
    ({"memory_fraction": 1.5}, "kv_cache_free_gpu_mem_fraction must be in (0, 1]"),
    ({"tp": 0}, "tp and pp must be positive"),
    ({"pp": 64}, "pp 64 exceeds the model's 32 layers"),
])
def test_bad_parameters_are_one_line_errors(kwargs, message):
    arch = architecture(FAMILIES[0][1])
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        capacity.estimate(arch, gpu="h100-80gb", gpu_memory_mib=81559, **kwargs)


def test_a_model_too_big_for_the_gpu_and_one_that_holds_no_full_sequence():
    big = architecture({**FAMILIES[0][1], "num_hidden_layers": 320})  # ~75 B parameters, 150 GB in bf16
    plan = capacity.estimate(big, gpu="h100-80gb", gpu_memory_mib=81559)
    assert plan.status == "no-memory" and plan.kv_tokens == 0 and not plan.fits
    arch = architecture(FAMILIES[0][1])
    short = capacity.estimate(arch, gpu="l4", gpu_memory_mib=23034, sequence_len=131072)
    assert short.status == "short" and 0 < short.kv_tokens < 131072 and short.concurrent_sequences == 0
    ok = capacity.estimate(arch, gpu="h100-80gb", gpu_memory_mib=81559, sequence_len=8192)
    assert ok.fits and ok.concurrent_sequences == ok.kv_tokens // 8192 and ok.kv_tokens % ok.block_tokens == 0
    assert math.isclose(ok.max_concurrency, ok.kv_tokens / 8192)


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not valid JSON"),
    ("[]", "is a JSON object, got list"),
    (json.dumps({"model_type": "llama"}), "none of num_hidden_layers, n_layer, num_layers is set"),
    (json.dumps({**FAMILIES[0][1], "num_key_value_heads": 5}), "num_key_value_heads 5 must divide"),
    (json.dumps({**FAMILIES[0][1], "hidden_size": "4096"}), "hidden_size must be a positive integer"),
    (json.dumps({**FAMILIES[0][1], "rope_scaling": {"type": "linear", "factor": float("inf")}}),
     "rope_scaling.factor must be a number above 0"),
    (json.dumps({**FAMILIES[0][1], "num_hidden_layers": 10**9}), "is not a real model's"),
])
def test_config_json_errors_name_the_file(tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_architecture(path)
    assert str(path) in err.value.message and message in err.value.message
    assert "\n" not in err.value.message


@pytest.mark.parametrize(("quantization_config", "weights"), [
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4"),
    ({"quant_method": "gptq", "bits": 8}, "int8"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}}}, "fp8"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}}}, "int4"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "int4"),
    ({"quant_method": "something-new"}, None),
    ({"quant_method": "compressed-tensors", "config_groups": [1, 2]}, None),  # not a mapping: no precision from it
])
def test_a_checkpoints_own_quantization_sizes_its_weights(quantization_config, weights):
    """vLLM reads quantization_config from config.json when model.json names no quantization: so does the plan."""
    arch = architecture({**FAMILIES[0][1], "quantization_config": quantization_config})
    assert arch.quantization == weights


@pytest.mark.parametrize(("rope_scaling", "context"), [
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
    ({"rope_type": "linear", "factor": 2.0}, 65536),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 32768),  # already stated
    (None, 32768),
])
def test_the_context_length_vllm_derives_with_rope_scaling(rope_scaling, context):
    arch = architecture({**FAMILIES[0][1], "max_position_embeddings": 32768, "rope_scaling": rope_scaling})
    assert arch.max_context == context


def test_llama4_interleaved_experts_count_once():
    """Llama 4 Maverick (published: 400B parameters, 17B active): MoE only every second layer, dense MLP between."""
    arch = architecture({"model_type": "llama4", "text_config": {
        "model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 202048,
        "max_position_embeddings": 1048576}})
    assert arch.parameters == pytest.approx(400e9, rel=0.05)
    assert arch.active_parameters == pytest.approx(17e9, rel=0.1)
