"""tensorrtllm-backend models against the TensorRT-LLM release of the image that serves them: what the C++ backend
of that release reads without a default, and the settings it refuses (data/tensorrtllm.yaml, `releases`; the
image's release from data/triton_images.yaml). A config written for one release may not load under another: the
backend of TensorRT-LLM 0.19 (Triton 25.05) and later reads three guided-decoding parameters that the earlier
templates did not have. Pure over parsed files; gpufacts calls it per workload."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.model.tensorrtllm import PLACEHOLDER, catalog
from kubectl_triton.checks.registry import register
from kubectl_triton.compat.data import load
from kubectl_triton.compat.rules import version_key
from kubectl_triton.formats import pbtxt

REFUSED = register(
    "TRTLLMReleaseParameters", "error", "overlay",
    "A tensorrtllm model's parameters are not what the TensorRT-LLM release of the image that serves it reads: a "
    "parameter that release reads without a default is missing (TensorRT-LLM 0.19, Triton 25.05, and later: "
    "tokenizer_dir, xgrammar_tokenizer_info_path, guided_decoding_backend; before 0.11: gpt_model_path), neither "
    "engine path is set, decoding_mode lookahead without its three sizes, or a guided decoding backend other than "
    "xgrammar. The model does not load.",
    "Add the parameters the image's release reads (empty values keep guided decoding off), as the tensorrtllm_backend "
    "template of that release has them (all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt); check them "
    "again when the image is upgraded.")
NOT_CHECKED = register(
    "TRTLLMReleaseNotChecked", "info", "overlay",
    "The image's Triton release is not in the bundled table (data/triton_images.yaml), so the tensorrtllm models it "
    "serves are not checked against that release's backend.",
    "Use an image tag of a Triton release (YY.MM-trtllm-python-py3) that the table knows.")


def trtllm_version(release: str | None) -> str | None:
    """The TensorRT-LLM version of the `<release>-trtllm-python-py3` image, None if unknown."""
    entry = (load("triton_images.yaml").get("releases") or {}).get(release or "") or {}
    return entry.get("tensorrt_llm")


def tensorrtllm_models(model_dir: Path) -> list[tuple[Path, dict[str, str]]]:
    """(config.pbtxt, its parameters as strings) of the tensorrtllm-backend models in `model_dir`."""
    return [(config, {str(k): str((v or {}).get("string_value", "")) for k, v in
                      (parsed.get("parameters") or {}).items()})
            for config, parsed in pbtxt.backend_configs(model_dir, "tensorrtllm")]


def _holds(rule: dict[str, Any], version: tuple[int, ...]) -> bool:
    since, until = version_key(rule.get("since")), version_key(rule.get("until"))
    return (since is None or version >= since) and (until is None or version < until)


def _filled(value: str | None) -> bool:
    return bool(value and value.strip() and not PLACEHOLDER.search(value))


def problems(params: dict[str, str], version: tuple[int, ...]) -> list[str]:
    """What the backend of TensorRT-LLM `version` refuses in a model's parameters, each with its own words."""
    rules = catalog()["releases"]
    out = []
    for rule in rules["required"]:
        if not _holds(rule, version):
            continue
        missing = [k for k in rule["keys"] if k not in params or (rule.get("filled") and not _filled(params[k]))]
        if missing:
            what = f" ({rule['what']})" if rule.get("what") else ""
            out.append(f"no parameter {', '.join(missing)}{what}: \"{rule['error'].format(key=missing[0])}\"")
    either = rules["decoder_or_encoder"]
    if _holds(either, version) and not any(_filled(params.get(k)) for k in either["keys"]):
        out.append(f"neither {' nor '.join(either['keys'])} is set (an unfilled ${{...}} is no path): "
                   f"\"{either['error']}\"")
    look = rules["lookahead"]
    if _holds(look, version) and params.get("decoding_mode", "").strip() == look["mode"]:
        bad = [k for k in look["keys"] if not params.get(k, "").strip().isdigit()]
        if bad:
            out.append(f"decoding_mode {look['mode']} without an integer {', '.join(bad)}: \"{look['error']}\"")
    guided = rules["guided_decoding"]
    backend = params.get(guided["backend"])
    if _holds(guided, version) and _filled(backend) and _filled(params.get(guided["info_path"])) \
            and str(backend).strip() not in guided["values"]:
        out.append(f"{guided['backend']} '{backend}' (only {', '.join(guided['values'])}): \"{guided['error']}\"")
    return out


def check(root: Path, model_dir: Path, release: str | None, where: str, object_id: str,
          model: str) -> Iterator[Finding]:
    """The findings of the tensorrtllm models in `model_dir` served by one workload of image release `release`."""
    found = tensorrtllm_models(model_dir)
    version = trtllm_version(release)
    key = version_key(version)
    if found and key is None:
        yield NOT_CHECKED.finding(f"the image of {where} (Triton {release or 'unknown'}) has no TensorRT-LLM release "
                                  "in the bundled table: its tensorrtllm models are not checked against it",
                                  path=where, model=model, object=object_id)
        return
    for config, params in found:
        for problem in problems(params, key or ()):
            yield REFUSED.finding(f"{config.parent.name}: {problem} (TensorRT-LLM {version}, the image of {where})",
                                  path=config.relative_to(root).as_posix(), model=model, object=object_id)
