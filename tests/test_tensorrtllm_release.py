"""tensorrtllm models against the TensorRT-LLM release of their image (checks/manifests/tensorrtllm_release.py):
the rules table-driven, then the backend's own template of each release (exported by tools/trtllm_templates.py into
../shared/conformance/trtllm-templates), then `validate` on this repository after an image upgrade."""

from __future__ import annotations

import json

import pytest

from kubectl_triton.checks import gate
from kubectl_triton.checks.manifests import tensorrtllm_release as rel
from kubectl_triton.checks.model.base import TRTLLM_PARAMETER, TRTLLM_PLACEHOLDER
from kubectl_triton.checks.model.tensorrtllm import check_parameters
from kubectl_triton.compat.rules import version_key
from kubectl_triton.formats import pbtxt
from tests.conftest import SHARED

TEMPLATES = SHARED / "conformance" / "trtllm-templates"
GUIDED = {"tokenizer_dir": "", "xgrammar_tokenizer_info_path": "", "guided_decoding_backend": ""}
BASE = {"gpt_model_type": "inflight_fused_batching", "gpt_model_path": "/engines/llama"}


@pytest.mark.parametrize("params, version, found", [
    (BASE, "0.18.2", []),
    (BASE, "0.19.0", ["no parameter tokenizer_dir, xgrammar_tokenizer_info_path, guided_decoding_backend"]),
    (BASE, "1.2.1", ["Cannot find parameter with name: tokenizer_dir"]),  # later releases keep 0.19's reads
    ({**BASE, **GUIDED}, "0.19.0", []),
    ({**BASE, **GUIDED, "guided_decoding_backend": "${guided_decoding_backend}",
      "xgrammar_tokenizer_info_path": "${xgrammar_tokenizer_info_path}"}, "0.19.0", []),  # the template: off
    ({**BASE, **GUIDED, "guided_decoding_backend": "outlines", "xgrammar_tokenizer_info_path": "/t/info.json"},
     "0.19.0", ["guided_decoding_backend 'outlines' (only xgrammar)"]),
    ({**BASE, **GUIDED, "guided_decoding_backend": "outlines"}, "0.19.0", []),  # no info path: guided decoding off
    ({"gpt_model_type": "v1", "encoder_model_path": "/engines/t5-encoder"}, "0.11.0", []),
    ({"gpt_model_type": "v1", "encoder_model_path": "/engines/t5-encoder"}, "0.10.0",
     ["Cannot find parameter with name: gpt_model_path"]),
    ({"gpt_model_type": "v1", "gpt_model_path": "${engine_dir}", "encoder_model_path": "/engines/enc"}, "0.10.0",
     ["Cannot find parameter with name: gpt_model_path"]),  # no encoder support before 0.11: an engine to open
    ({"gpt_model_type": "v1", "gpt_model_path": "${engine_dir}"}, "0.16.0",
     ["Both encoder and decoder model paths are empty"]),
    ({**BASE, **GUIDED, "decoding_mode": "lookahead", "lookahead_window_size": "4"}, "0.19.0",
     ["without an integer lookahead_ngram_size, lookahead_verification_set_size"]),
    ({**BASE, "decoding_mode": "lookahead"}, "0.18.0", []),  # read from 0.19 on only
])
def test_release_rules(params, version, found):
    got = rel.problems(params, version_key(version) or ())
    assert len(got) == len(found), got
    for text, expected in zip(got, found, strict=True):
        assert expected in text, got


@pytest.mark.parametrize("params, found", [
    ({"gpt_model_type": "v1", "encoder_model_path": "/engines/enc"}, []),  # encoder-only: no finding
    ({"gpt_model_type": "v1", "encoder_model_path": "/engines/enc", "gpt_model_path": "${engine_dir}"},
     [("TRTLLMPlaceholder", "warning", "loads as encoder-only")]),  # a half-filled encoder-decoder template
    ({"gpt_model_type": "v1", "gpt_model_path": "${engine_dir}"}, [("TRTLLMPlaceholder", None, "unfilled")]),
    ({"gpt_model_type": "v1"}, [("TRTLLMParameter", None, "missing mandatory parameter 'gpt_model_path'")]),
])
def test_model_level_engine_paths(params, found):
    text = 'name: "tensorrt_llm"\nbackend: "tensorrtllm"\n' + "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in params.items())
    issues = list(check_parameters(pbtxt.parse(text, "config.pbtxt")))
    assert [(i.check.code, i.severity) for i in issues] == [(c, s) for c, s, _ in found], [i.message for i in issues]
    for issue, (_, _, words) in zip(issues, found, strict=True):
        assert words in issue.message


def _params(text: str) -> dict[str, str]:
    parsed = pbtxt.to_dict(pbtxt.parse(text, "config.pbtxt"))
    return {k: str((v or {}).get("string_value", "")) for k, v in (parsed.get("parameters") or {}).items()}


def _filled(text: str) -> str:
    """The template as fill_template.py leaves it for a decoder engine: the mandatory variables set, the rest
    placeholders (the backend's defaults)."""
    for var, value in {"engine_dir": "/engines/llama", "batching_strategy": "inflight_fused_batching",
                       "triton_backend": "tensorrtllm", "triton_max_batch_size": "64", "decoupled_mode": "true",
                       "max_queue_delay_microseconds": "0", "max_queue_size": "0",
                       "encoder_input_features_data_type": "TYPE_FP16", "logits_datatype": "TYPE_FP32"}.items():
        text = text.replace("${" + var + "}", value)
    return text


def _templates() -> list[tuple[str, str]]:
    if not (TEMPLATES / "SOURCES.json").is_file():
        pytest.skip(f"{TEMPLATES} is missing: python tools/trtllm_templates.py --git-root DIR --out {TEMPLATES}")
    rows = json.loads((TEMPLATES / "SOURCES.json").read_text())
    return [(r["tag"], (TEMPLATES / r["tag"] / "config.pbtxt").read_text()) for r in rows]


def test_each_release_template_passes_for_its_own_release():
    """The tensorrtllm_backend's template of every release from 0.9 to 0.19, filled as its docs say, loads under that
    release: validate refuses none of them (at model level or for the release)."""
    templates = _templates()
    assert len(templates) >= 12
    for tag, text in templates:
        filled = _filled(text)
        config = pbtxt.parse(filled, f"{tag}/config.pbtxt")
        issues = [i for i in check_parameters(config) if i.check in (TRTLLM_PARAMETER, TRTLLM_PLACEHOLDER)
                  and i.severity != "warning"]
        assert issues == [], (tag, [i.message for i in issues])
        assert rel.problems(_params(filled), version_key(tag) or ()) == [], tag


def test_templates_before_0_19_do_not_load_under_0_19():
    """The upgrade finding: a config from an earlier template lacks the three parameters 0.19 reads without a default
    (the v0.19.0 template is the first to have them)."""
    by_tag = dict(_templates())
    for tag, text in by_tag.items():
        got = rel.problems(_params(_filled(text)), (0, 19, 0))
        if version_key(tag) < (0, 19, 0):  # type: ignore[operator]
            assert len(got) == 1 and "Cannot find parameter with name: tokenizer_dir" in got[0], (tag, got)
        else:
            assert got == [], (tag, got)


def test_validate_names_the_parameters_an_upgraded_image_reads(repo_copy):
    """This repository's llama3-8b (written for 24.12, TensorRT-LLM 0.16) served by a 25.05 image (0.19)."""
    deployment = repo_copy / "overlays" / "llama3-8b" / "model" / "deployment.yaml"
    deployment.write_text(deployment.read_text().replace("24.12-trtllm", "25.05-trtllm"))
    found = [f for f in gate.validate_repo(repo_copy) if f.code == "TRTLLMReleaseParameters"]
    assert found and {f.path for f in found} == {"models/llama3-8b/tensorrt_llm/config.pbtxt"}, found
    assert "TensorRT-LLM 0.19.0" in found[0].message and "guided_decoding_backend" in found[0].message
    config = repo_copy / "models" / "llama3-8b" / "tensorrt_llm" / "config.pbtxt"
    config.write_text(config.read_text() + "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "" }} }}\n' for k in GUIDED))
    assert [f for f in gate.validate_repo(repo_copy) if f.code == "TRTLLMReleaseParameters"] == []
