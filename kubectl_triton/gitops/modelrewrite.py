"""InferenceModelRewrite objects (Gateway API Inference Extension, `inference.networking.x-k8s.io/v1alpha2`) and
the model names Triton's OpenAI-compatible frontend serves: what `canary --adapter` writes and validate reads.

The endpoint picker of an InferencePool (from EPP v1.3.1) reads the `model` of each request's JSON body and, when
a rewrite of its pool has a rule matching that name exactly, replaces it with one of the rule's targets, picked by
weight (weights are relative; a target without one counts as 0 unless no target has one, then they share
equally). A rule without matches applies to every request of the pool; where rules overlap, an exact match wins
and among those the oldest object (pkg/epp/datastore/modelrewritestore.go).

Triton's OpenAI-compatible frontend (server python/openai, `--lora-separator=SEP`, Triton 25.05 and later) serves
each Triton model under its own name and, for each LoRA adapter its latest version folder's multi_lora.json
lists (a vLLM model only with enable_lora in model.json), under `<triton model><SEP><adapter>`; /v1/models lists
them all. So a rewrite of `qwen_lora_sql` to `qwen_lora_sql-v2` sends that share of the adapter's traffic to the
new adapter while clients keep naming the old one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GROUP = "inference.networking.x-k8s.io"
API_VERSION = f"{GROUP}/v1alpha2"
KIND = "InferenceModelRewrite"
FILE = "inferencemodelrewrite.yaml"  # under overlays/MODEL/route/
POOL_GROUP = "inference.networking.k8s.io"  # poolRef.group's default; the only group the picker serves
POOL_KIND = "InferencePool"
OPENAI_FRONTEND = "openai_frontend/main.py"
SEPARATOR_FLAG = "--lora-separator"
MAX_WEIGHT = 1_000_000  # the CRD's bound on a target's weight (minimum 1)


@dataclass(frozen=True)
class Frontend:
    """What a serving container runs in front of Triton."""

    openai: bool  # Triton's OpenAI-compatible frontend
    separator: str | None  # its --lora-separator (None: not given, so no adapter has a name of its own)


def frontend(container: dict | None) -> Frontend:
    """The frontend of a tritonserver container (command and args as the pod spec gives them)."""
    words = [str(w) for key in ("command", "args") for w in ((container or {}).get(key) or [])]
    openai = any(OPENAI_FRONTEND in w for w in words)
    separator = None
    for i, word in enumerate(words):
        if word.startswith(SEPARATOR_FLAG + "="):
            separator = word.split("=", 1)[1]
        elif word == SEPARATOR_FLAG and i + 1 < len(words):
            separator = words[i + 1]
    # The frontend ignores an empty separator (engine/triton_engine.py: `len(self.lora_separator) > 0`).
    return Frontend(openai, separator or None)


def client_name(triton_model: str, separator: str, adapter: str) -> str:
    """The name an OpenAI client sends to select `adapter` of `triton_model`."""
    return f"{triton_model}{separator}{adapter}"


def served_names(models: Mapping[str, Iterable[str]], separator: str | None) -> set[str]:
    """Every model name the frontend answers: each Triton model, and with a separator each of its adapters whose
    name splits back into exactly (model, adapter) (engine/triton_engine.py `_get_model_and_lora_name`: a name
    holding the separator twice is taken as a model name, which no model has)."""
    out = set(models)
    if separator:
        out |= {client_name(m, separator, a) for m, adapters in models.items() for a in adapters
                if separator not in m and separator not in a}
    return out


@dataclass(frozen=True)
class Target:
    model: str
    weight: int | None


@dataclass(frozen=True)
class Rule:
    """One rule of a rewrite: the exact names it matches (empty: every request) and its targets."""

    matches: tuple[str, ...]
    targets: tuple[Target, ...]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def is_rewrite(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("apiVersion") == API_VERSION and obj.get("kind") == KIND


def pool_ref(obj: dict) -> tuple[str, str, str]:
    """(group, kind, name) of spec.poolRef, with the CRD's defaults."""
    ref = _dict(_dict(obj.get("spec")).get("poolRef"))
    return (str(ref.get("group", POOL_GROUP)), str(ref.get("kind") or POOL_KIND), str(ref.get("name") or ""))


def rules(obj: dict) -> list[Rule]:
    """The rules of a rewrite object, as data."""
    out = []
    for rule in _dict(obj.get("spec")).get("rules") or []:
        rule = _dict(rule)
        matches = tuple(str(_dict(m.get("model")).get("value", "")) for m in rule.get("matches") or []
                        if isinstance(m, dict))
        targets = tuple(Target(str(t.get("modelRewrite", "")),
                               t["weight"] if isinstance(t.get("weight"), int) and not isinstance(t.get("weight"), bool)
                               else None)
                        for t in rule.get("targets") or [] if isinstance(t, dict))
        out.append(Rule(matches, targets))
    return out
