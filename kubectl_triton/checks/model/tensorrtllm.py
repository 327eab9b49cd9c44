"""Rules for models served by the `tensorrtllm` backend (TensorRT-LLM's in-flight batcher).

The parameter catalog lives in kubectl_triton/data/tensorrtllm.yaml: mandatory parameters must be
present, filled and typed (or stood in for by their `or`: an encoder-only model's encoder_model_path); optional
ones may stay an unfilled `${...}` template placeholder (the backend then uses its default) but a filled value of
the wrong type is a warning. What depends on the image's release: checks/manifests/tensorrtllm_release.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import WARNING
from kubectl_triton.checks.model.base import (
    TRTLLM_DECOUPLED,
    TRTLLM_PARAMETER,
    TRTLLM_PLACEHOLDER,
    TRTLLM_TEXT_INPUT,
    Issue,
)
from kubectl_triton.formats import yamlio

PLACEHOLDER = re.compile(r"\$\{[^}]*\}")
_BOOLS = {"true", "false", "1", "0", "yes", "no", "on", "off"}
_TRUE = {"true", "1", "yes", "on"}


@cache
def catalog() -> dict[str, Any]:
    """kubectl_triton/data/tensorrtllm.yaml."""
    path = Path(__file__).resolve().parents[2] / "data" / "tensorrtllm.yaml"
    return yamlio.load_data(path.read_text(encoding="utf-8"), str(path))


def streaming_inputs() -> list[str]:
    return list(catalog()["streaming_inputs"])


def type_problem(value: str, spec: dict[str, Any]) -> str | None:
    """Why `value` is not of the parameter's type, or None."""
    kind = spec["type"]
    text = value.strip()
    if kind == "path":
        return None if text else "must be a non-empty path"
    if kind == "string":
        return None
    if kind == "enum":
        values = spec["values"]
        return None if text in values else "must be one of " + ", ".join(values)
    if kind == "bool":
        return None if text.lower() in _BOOLS else "must be true or false"
    if kind == "int_lists":
        ok = text.isascii() and all(part.strip().lstrip("-").isdigit()
                 for group in text.split(";") for part in group.split(",") if group)
        return None if text and ok else "must be comma-separated integers"
    try:
        number = int(text) if kind == "int" else float(text)
    except ValueError:
        return "must be an integer" if kind == "int" else "must be a number"
    if kind == "fraction" and not 0.0 <= number <= 1.0:
        return "must be a number between 0 and 1"
    return None


def _param(name: str) -> str:
    return f"parameters '{name}'"


def check_parameters(config: Any) -> Iterator[Issue]:
    """Mandatory parameters present, filled and typed; optional filled ones typed."""
    data = catalog()
    name = config.name
    params = {key: p.string_value for key, p in config.parameters.items()}
    for key, spec in data["mandatory"].items():
        hint = f"(fill_template.py variable '{spec['template']}', {spec['what']})"
        other = params.get(spec.get("or", ""))
        if (key not in params or PLACEHOLDER.search(params[key])) and other and not PLACEHOLDER.search(other):
            # an encoder-only model (the image's release decides whether it loads: manifests/tensorrtllm_release.py)
            if key in params:  # but a template left half-filled is more likely an encoder-decoder model
                yield Issue(TRTLLM_PLACEHOLDER,
                            f"parameter '{key}' of tensorrtllm model {name} is an unfilled template placeholder "
                            f"'{params[key]}' {hint}: with '{spec['or']}' set the model loads as encoder-only; fill "
                            "it for an encoder-decoder model, or remove it", _param(key), params[key], WARNING)
            continue
        if key not in params:
            yield Issue(TRTLLM_PARAMETER,
                        f"tensorrtllm model {name} is missing mandatory parameter '{key}' {hint}",
                        _param(key), "parameters")
            continue
        value = params[key]
        if PLACEHOLDER.search(value):
            yield Issue(TRTLLM_PLACEHOLDER,
                        f"mandatory parameter '{key}' of tensorrtllm model {name} is an unfilled template "
                        f"placeholder '{value}' {hint}", _param(key), value)
            continue
        problem = type_problem(value, spec)
        if problem:
            yield Issue(TRTLLM_PARAMETER,
                        f"mandatory parameter '{key}' of tensorrtllm model {name} {problem}, got '{value}'",
                        _param(key), f'"{key}"')
    for key, spec in data["optional"].items():
        value = params.get(key)
        if value is None or PLACEHOLDER.search(value):
            continue
        problem = type_problem(value, spec)
        if problem:
            yield Issue(TRTLLM_PARAMETER,
                        f"parameter '{key}' of tensorrtllm model {name} {problem}, got '{value}'; the "
                        "backend ignores it and uses its default", _param(key), f'"{key}"', WARNING)


def check_streaming(config: Any) -> Iterator[Issue]:
    """A streaming request needs a decoupled model."""
    if config.model_transaction_policy.decoupled:
        return
    for key in catalog()["streaming_parameters"]:
        param = config.parameters.get(key)
        if param is not None and param.string_value.strip().lower() in _TRUE:
            yield Issue(TRTLLM_DECOUPLED,
                        f"tensorrtllm model {config.name} requests streaming (parameter '{key}') but is not "
                        "decoupled; set model_transaction_policy { decoupled: true }",
                        "model_transaction_policy", f'"{key}"')


def check_text_input(config: Any, ensembles: Iterable[str] = ()) -> Iterator[Issue]:
    """The backend takes token ids; text goes to an ensemble that tokenizes it."""
    users = sorted(ensembles)
    for io in config.input:
        if io.name in catalog()["text_inputs"]:
            where = (f"send text to ensemble {', '.join(repr(u) for u in users)} instead" if users else
                     "send text to an ensemble (preprocessing -> tensorrt_llm -> postprocessing) instead")
            yield Issue(TRTLLM_TEXT_INPUT,
                        f"tensorrtllm model {config.name} declares input '{io.name}', but the tensorrtllm "
                        f"backend takes token ids ('input_ids'), not text; {where}",
                        f"input '{io.name}'", f'"{io.name}"')


def check_tensorrtllm(config: Any, ensembles: Iterable[str] = ()) -> list[Issue]:
    """Every tensorrtllm rule for one (autofilled) model config."""
    return [*check_parameters(config), *check_streaming(config), *check_text_input(config, ensembles)]
