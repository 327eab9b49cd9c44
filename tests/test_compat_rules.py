"""Table-driven compatibility rules: engine fixtures x GPU types, every code, the verdicts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kubectl_triton.compat.catalog import resolve
from kubectl_triton.compat.engine import BuildInfo, read_engine_dir
from kubectl_triton.compat.rules import CODES, Target, evaluate, image_versions, version_key

ENGINES = Path(__file__).parent / "fixtures" / "engines"
IMG = "nvcr.io/nvidia/tritonserver:{}-trtllm-python-py3"
B200_BUILD = BuildInfo("NVIDIA B200", "10.0", 183359, "0.16.0", "10.7.0", IMG.format("24.12"), None)
H20_BUILD = BuildInfo("NVIDIA H20", "9.0", 97871, "0.16.0", "10.7.0", IMG.format("24.12"), None)

LLAMA, FP8_TP4, AWQ_TP2 = "llama3-8b-bf16-tp1-h100", "llama3-70b-fp8-tp4-h100", "llama3-8b-int4awq-tp2-a100"
NEMO, LEGACY, NOBI = "mistral-nemo-12b-fp16-tp1-l40s", "gptj-6b-fp16-tp1-legacy", "llama3-8b-bf16-tp1-nobuildinfo"

# id, engine fixture, GPU keys the target admits, target fields, engine patch, codes, verdict
CASES = [
    ("clean", LLAMA, ["h100-80gb"], {"image": IMG.format("24.12"), "triton_max_batch_size": 8}, {}, set(), True),
    ("same-cc-other-model", LLAMA, ["h200"], {"triton_max_batch_size": 8}, {}, {"DeviceModelDiffers"}, True),
    ("l40s-engine-on-l4-too-big", NEMO, ["l4"], {}, {}, {"DeviceModelDiffers", "InsufficientMemory"}, False),
    ("a100-vs-h100", LLAMA, ["a100-80gb"], {"triton_max_batch_size": 8}, {}, {"ArchMismatch"}, False),
    ("a100-engine-on-a10g-same-major", AWQ_TP2, ["a10g"], {}, {}, {"ArchMismatch"}, False),
    ("ada-engine-on-a10", NEMO, ["a10"], {}, {}, {"ArchMismatch", "InsufficientMemory"}, False),
    ("bf16-on-turing", LLAMA, ["t4"], {"triton_max_batch_size": 8}, {},
     {"ArchMismatch", "PrecisionUnsupported", "InsufficientMemory"}, False),
    ("fp8-on-ampere", FP8_TP4, ["a100-80gb"], {"triton_max_batch_size": 8}, {},
     {"ArchMismatch", "PrecisionUnsupported"}, False),
    ("awq-on-turing", AWQ_TP2, ["t4"], {}, {}, {"ArchMismatch", "PrecisionUnsupported"}, False),
    ("smoothquant-on-blackwell", LLAMA, ["b200"], {"triton_max_batch_size": 8},
     {"quant_algo": "W8A8_SQ_PER_CHANNEL", "build_info": B200_BUILD}, {"PrecisionUnsupported"}, False),
    ("tp4-in-1-gpu-pod", FP8_TP4, ["h100-80gb"], {"gpus_per_pod": 1, "triton_max_batch_size": 8}, {},
     {"GPUCountMismatch"}, False),
    ("no-gpu-limit", AWQ_TP2, ["a100-80gb"], {"gpus_per_pod": None}, {}, {"GPUCountMismatch"}, False),
    ("tp2-clean", AWQ_TP2, ["a100-80gb"], {"image": IMG.format("24.08")}, {}, set(), True),
    ("old-image", LLAMA, ["h100-80gb"], {"image": IMG.format("24.08"), "triton_max_batch_size": 8}, {},
     {"VersionMismatch"}, False),
    ("not-a-trtllm-image", AWQ_TP2, ["a100-80gb"], {"image": "nvcr.io/nvidia/tritonserver:24.08-py3"}, {},
     {"VersionMismatch"}, False),
    ("unlisted-release", AWQ_TP2, ["a100-80gb"], {"image": IMG.format("23.10")}, {}, {"UnknownImage"}, True),
    ("legacy-engine-new-image", LEGACY, ["a10g"], {"image": IMG.format("24.12")}, {}, {"VersionMismatch"}, False),
    ("legacy-engine-no-image", LEGACY, ["a10g"], {}, {}, set(), True),
    ("legacy-on-a10-same-cc", LEGACY, ["a10"], {}, {}, {"DeviceModelDiffers"}, True),
    ("kv-cache-too-small", LLAMA, ["h100-80gb"], {"triton_max_batch_size": 64}, {}, {"InsufficientMemory"}, True),
    ("kv-capped-by-max-tokens", AWQ_TP2, ["a100-80gb"], {"max_tokens_in_paged_kv_cache": 4096}, {},
     {"InsufficientMemory"}, True),
    ("triton-batch-too-big", AWQ_TP2, ["a100-80gb"], {"triton_max_batch_size": 64}, {},
     {"BatchSizeExceedsEngine"}, False),
    ("seq-too-long", AWQ_TP2, ["a100-80gb"], {"max_seq_len": 8192, "max_input_len": 4096}, {},
     {"SeqLenExceedsEngine"}, False),
    ("ambiguous-selection", LLAMA, ["a100-80gb", "h100-80gb"], {"triton_max_batch_size": 8}, {},
     {"AmbiguousTarget", "ArchMismatch"}, False),
    ("no-selection", LLAMA, [], {"unselected": True}, {}, {"AmbiguousTarget"}, False),
    ("unknown-target", LLAMA, [], {"unknown_labels": ("NVIDIA-RTX-9000",)}, {}, {"UnknownGPU"}, None),
    ("no-build-info", NOBI, ["h100-80gb"], {"triton_max_batch_size": 8}, {}, {"UnknownBuildGPU"}, None),
    ("build-gpu-not-in-catalog", LLAMA, ["h100-80gb"], {"triton_max_batch_size": 8}, {"build_info": H20_BUILD},
     {"UnknownBuildGPU"}, True),
]


def _target(keys: list[str], engine, fields: dict) -> Target:
    gpus = tuple(resolve(k) for k in keys)
    fields = {"gpus_per_pod": engine.world_size, **fields}
    return Target(name=keys[0] if len(keys) == 1 else "overlay", gpus=gpus, **fields)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rule_table(case):
    _, fixture, keys, fields, patch, codes, verdict = case
    engine = replace(read_engine_dir(ENGINES / fixture), **patch)
    result = evaluate(engine, _target(keys, engine, fields), model="m")
    assert {r.code for r in result.reasons} == codes, [r.message for r in result.reasons]
    assert result.compatible is verdict
    errors = [r for r in result.reasons if r.severity == "error"]
    assert result.reasons[: len(errors)] == errors  # errors are listed first (the matrix shows the first)


def test_table_covers_every_code_but_the_repo_level_one():
    seen = set().union(*(c[5] for c in CASES))
    assert set(CODES) - seen == {"EngineNotRecorded"}


def test_device_model_differs_is_a_warning_and_arch_mismatch_an_error():
    engine = read_engine_dir(ENGINES / LLAMA)
    ok = evaluate(engine, _target(["h200"], engine, {"triton_max_batch_size": 8}))
    bad = evaluate(engine, _target(["a100-80gb"], engine, {"triton_max_batch_size": 8}))
    assert [r.severity for r in ok.reasons] == ["warning"]
    assert "performance may differ" in ok.reasons[0].message
    assert [r.severity for r in bad.reasons] == ["error"]
    assert "9.0" in bad.reasons[0].message and "8.0" in bad.reasons[0].message


def test_cluster_key_is_only_a_labelled_hint():
    engine = read_engine_dir(ENGINES / NOBI)
    result = evaluate(engine, _target(["a100-80gb"], engine, {"triton_max_batch_size": 8}))
    assert result.compatible is None  # the hint says A100, but it is not evidence
    assert "hint" in result.reasons[0].message and "A100-SXM-80GB" in result.reasons[0].message


def test_memory_error_names_the_sizes():
    engine = read_engine_dir(ENGINES / NEMO)
    result = evaluate(engine, _target(["l4"], engine, {}))
    message = next(r.message for r in result.reasons if r.code == "InsufficientMemory")
    assert "22.8 GiB" in message and "l4" in message


@pytest.mark.parametrize("release,trtllm,trt", [("24.08", "0.12.0", "10.3.0"), ("24.12", "0.16.0", "10.7.0"),
                                                ("25.01", "0.17.0", None), ("25.03", "0.18.0", None)])
def test_image_table_matches_published_versions(release, trtllm, trt):
    versions = image_versions(IMG.format(release))
    assert versions["tensorrt_llm"] == trtllm
    if trt:
        assert versions["tensorrt"] == trt


def test_post_releases_match_their_base_version():
    assert version_key("0.17.0.post1") == version_key("0.17.0")
    assert version_key("0.17.0") != version_key("0.18.0")
    assert image_versions("nvcr.io/nvidia/tritonserver@sha256:abc") is None
