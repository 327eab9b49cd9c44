"""The log signatures as data (kubectl_triton/data/log_signatures.yaml): every signature carries its sources and
real excerpts, each excerpt is recognised as its own code, advice and INFO lines are not failures, Triton's model
table is read, and docs/status-signatures.md is what the data generates."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_triton.status import signatures

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "status-signatures.md"
SIGS = signatures.load()


def test_every_signature_has_sources_examples_components_and_levels():
    assert len({s.code for s in SIGS}) == len(SIGS)
    for s in SIGS:
        assert s.sources and all(u.startswith("https://") for u in s.sources), s.code
        assert s.examples, f"{s.code}: at least one real excerpt"
        assert s.components and s.levels, s.code


@pytest.mark.parametrize("code, example", [(s.code, e) for s in SIGS for e in s.examples])
def test_each_real_excerpt_is_recognised_as_its_code(code, example):
    assert code in [r.code for r in signatures.match(example)]


def test_info_and_warning_lines_never_count():
    """Level filter: the same words at INFO level (TensorRT-LLM, glog, Python logging) are not a failure."""
    for line in ("[TensorRT-LLM][INFO] CUDA out of memory is handled by lowering kv_cache_free_gpu_mem_fraction",
                 "I1202 11:13:01.104118 1 model_lifecycle.cc:472] failed to load 'x' version 1: retrying",
                 "INFO 10-10 17:37:03 [model_runner.py:1512] If out-of-memory error occurs during cudagraph "
                 "capture, consider decreasing `gpu_memory_utilization`"):
        assert signatures.match(line) == [], line


def test_negative_list_excludes_advice_at_any_level():
    # a line without a level that only gives advice about out-of-memory errors
    assert signatures.match("Note: if out-of-memory errors occur during capture, consider decreasing the batch") \
        == []


def test_glog_levels_and_components_are_read():
    line = signatures.classify("E0608 21:12:28.408634 1 model_repository_manager.cc:2063] Poll failed")
    assert (line.level, line.component) == ("E", "triton")
    assert signatures.classify("0804 00:10:29.919358 56 pb_stub.cc:639] x").component == "python-backend"
    assert signatures.classify("[TensorRT-LLM][WARNING] x").level == "W"
    assert signatures.classify("Segmentation fault (core dumped)").level == "?"


def test_wrapped_model_table_rows_are_joined():
    table = [  # tensorrtllm_backend#363, the status column cut to 80 characters here
        "| tensorrt_llm  | 1 | UNAVAILABLE: Internal: cudaDeviceGetDefaultMemPool(&memPool, device): operation no |",
        "|               |   | t supported (/app/tensorrt_llm/cpp/tensorrt_llm/runtime/bufferManager.cpp:170)     |",
        "| preprocessing | 1 | READY                                                                              |",
    ]
    assert signatures.model_state_lines(table) == [
        "model 'tensorrt_llm' version 1 is UNAVAILABLE: Internal: cudaDeviceGetDefaultMemPool(&memPool, device): "
        "operation not supported (/app/tensorrt_llm/cpp/tensorrt_llm/runtime/bufferManager.cpp:170)"]


def test_error_lines_quoted_when_nothing_matches():
    log = "I0120 08:28:13.508038 2049 server.cc:305] \"Waiting\"\nCleaning up...\nerror: creating server: Internal - " \
          "failed to load all models\n"
    assert signatures.match(log) == []
    assert signatures.error_lines(log) == ["error: creating server: Internal - failed to load all models"]


def test_docs_page_is_generated_from_the_data():
    """docs/status-signatures.md is stale when this fails: regenerate it with
    `python -m kubectl_triton.status.signatures > docs/status-signatures.md`."""
    assert DOC.read_text() == signatures.render_markdown()
    for s in SIGS:
        assert f"## `{s.code}`" in DOC.read_text()
