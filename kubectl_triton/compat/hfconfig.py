"""A model's architecture from its Hugging Face `config.json`: the numbers that decide weight memory and KV-cache
bytes per token (layers, hidden size, attention and KV heads, head_dim, vocabulary, MLP and MoE sizes).

Reads the field spellings of the families people serve: Llama, Mistral, Qwen2/Qwen3, Gemma/Gemma 2/3 (also as a
multimodal config's `text_config`), Phi-3, Mixtral and Qwen-MoE experts, GPT-2 (`n_layer`/`n_head`/`n_embd`),
Falcon (`multi_query`, `new_decoder_architecture`) and DeepSeek-V2/V3 multi-head latent attention (MLA). Bad input
is one `InputError` line naming the file; `architecture` is the pure part (a dict in, an Architecture out)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError

# Families whose MLP is two matrices (up, down) rather than the gated three (gate, up, down).
# sanity bounds: a config.json beyond them is a typo, not a model (the largest public ones: 126 layers, factor 40)
MAX_LAYERS = 10_000
MAX_ROPE_FACTOR = 1024.0
_UNGATED = frozenset({"gpt2", "gpt_bigcode", "falcon", "gpt_neox", "gptj", "opt", "bloom", "starcoder2", "phi"})
# HF's default of tie_word_embeddings where the config omits it: PretrainedConfig says True, these families False.
_UNTIED_BY_DEFAULT = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3",
                                "deepseek_v2", "deepseek_v3", "gpt_neox", "starcoder2", "cohere", "olmo", "olmo2"})


@dataclass(frozen=True)
class Architecture:
    """The memory-relevant shape of one decoder-only transformer.

    KV cache: `kv_elements_per_token_layer` elements per token per layer (2 x num_kv_heads x head_dim; for MLA the
    compressed latent kv_lora_rank + qk_rope_head_dim, shared by all heads). `num_experts` is 0 for a dense model;
    `intermediate_size` is the dense MLP's, `moe_intermediate_size` one expert's."""

    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    max_position_embeddings: int | None
    tie_word_embeddings: bool
    num_experts: int = 0
    num_experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0  # all shared experts together (0: none)
    dense_layers: int = 0  # layers of a MoE model that keep the dense MLP (DeepSeek first_k_dense_replace)
    gated_mlp: bool = True
    kv_lora_rank: int = 0  # MLA only
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    q_lora_rank: int = 0
    torch_dtype: str | None = None
    quantization: str | None = None  # the checkpoint's quantization_config as a weight precision (int4, fp8, ...)
    max_context: int | None = None  # the longest sequence vLLM derives: max_position_embeddings with rope scaling
    moe_layer_step: int = 1  # MoE every this many layers, dense MLP between (Llama 4 interleave_moe_layer_step)
    dense_intermediate_size: int = 0  # the MLP of the dense layers between MoE ones (Llama 4 intermediate_size_mlp)

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def kv_elements_per_token_layer(self) -> int:
        if self.mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def attention_kind(self) -> str:
        if self.mla:
            return "MLA"
        if self.num_kv_heads == 1:
            return "MQA"
        return "GQA" if self.num_kv_heads < self.num_attention_heads else "MHA"

    def attention_params(self) -> int:
        """Weights of one layer's attention projections (biases and norms left out)."""
        h, heads = self.hidden_size, self.num_attention_heads
        if self.mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = h * self.q_lora_rank + self.q_lora_rank * heads * qk if self.q_lora_rank else h * heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) \
                + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + heads * self.v_head_dim * h
        q_out, kv_out = heads * self.head_dim, self.num_kv_heads * self.head_dim
        return h * q_out + 2 * h * kv_out + q_out * h

    def mlp_params(self, intermediate: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden_size * intermediate

    def layer_params(self, layer: int) -> int:
        """Weights of decoder layer `layer` (0-based): attention, MLP or experts (+ router), norms."""
        mlp = self.mlp_params(self.intermediate_size)
        if self.num_experts and self.moe_layer_step > 1 and (layer + 1) % self.moe_layer_step:
            mlp = self.mlp_params(self.dense_intermediate_size or self.intermediate_size)
        elif self.num_experts and layer >= self.dense_layers:
            mlp = (self.num_experts * self.mlp_params(self.moe_intermediate_size)
                   + self.mlp_params(self.shared_expert_intermediate_size) + self.hidden_size * self.num_experts)
        return self.attention_params() + mlp + 2 * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def parameters(self) -> int:
        """Estimated parameter count: embeddings, every layer, the final norm and (untied) LM head."""
        layers = sum(self.layer_params(i) for i in range(self.num_layers))
        return self.embedding_params + layers + self.hidden_size + self.lm_head_params

    @property
    def active_parameters(self) -> int:
        """Parameters one token passes through (MoE: only num_experts_per_token experts)."""
        if not self.num_experts:
            return self.parameters
        unused = (self.num_experts - self.num_experts_per_token) * self.mlp_params(self.moe_intermediate_size)
        moe_layers = sum(1 for i in range(self.dense_layers, self.num_layers)
                         if self.moe_layer_step <= 1 or (i + 1) % self.moe_layer_step == 0)
        return self.parameters - unused * moe_layers


def load_architecture(path: Path, name: str | None = None) -> Architecture:
    """The Architecture of the config.json at `path`; one-line InputError naming the file (as `name`, default the
    path) for bad input."""
    path_name = name or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path_name}: no such file (expected a Hugging Face config.json)") from None
    except IsADirectoryError:
        raise InputError(f"{path_name}: is a folder (expected a Hugging Face config.json)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path_name}: cannot be read: {getattr(err, 'strerror', None) or err}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path_name}:{err.lineno}: not valid JSON: {err.msg}") from None
    return architecture(doc, path_name)


def _int(doc: dict[str, Any], source: str, *keys: str, default: int | None = None, required: bool = True,
         positive: bool = True) -> int | None:
    for key in keys:
        if key in doc and doc[key] is not None:
            value = doc[key]
            if isinstance(value, bool) or not isinstance(value, int) or (positive and value <= 0) or value < 0:
                raise InputError(f"{source}: {key} must be a positive integer, got {value!r}")
            return value
    if default is not None or not required:
        return default
    raise InputError(f"{source}: none of {', '.join(keys)} is set: not a decoder-only transformer config.json")


def _req(doc: dict[str, Any], source: str, *keys: str, default: int | None = None) -> int:
    value = _int(doc, source, *keys, default=default)
    assert value is not None  # _int raises when required and absent
    return value


def _opt(doc: dict[str, Any], source: str, *keys: str) -> int:
    return _int(doc, source, *keys, required=False, positive=False) or 0


def architecture(doc: Any, source: str = "config.json") -> Architecture:
    """The Architecture a parsed config.json describes (`source` names it in errors)."""
    if not isinstance(doc, dict):
        raise InputError(f"{source}: a Hugging Face config.json is a JSON object, got {type(doc).__name__}")
    outer = doc
    outer_type = str(doc.get("model_type") or "")
    if "num_hidden_layers" not in doc and "n_layer" not in doc and isinstance(doc.get("text_config"), dict):
        inner = doc["text_config"]  # multimodal wrappers (Gemma 3, Llama 4, LLaVA): the language model's config
        doc = {"tie_word_embeddings": doc.get("tie_word_embeddings"), **inner}
    model_type = str(doc.get("model_type") or outer_type or "unknown")
    base_type = model_type.removesuffix("_text")
    layers = _req(doc, source, "num_hidden_layers", "n_layer", "num_layers")
    if layers > MAX_LAYERS:
        raise InputError(f"{source}: num_hidden_layers {layers} is not a real model's (at most {MAX_LAYERS:,})")
    hidden = _req(doc, source, "hidden_size", "n_embd", "d_model")
    heads = _req(doc, source, "num_attention_heads", "n_head", "num_heads")
    if base_type == "falcon" and "num_kv_heads" not in doc:
        kv_default = heads if doc.get("new_decoder_architecture") or doc.get("multi_query") is False else 1
    else:
        kv_default = 1 if doc.get("multi_query") is True else heads
    kv_heads = _req(doc, source, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=kv_default)
    if kv_heads > heads or heads % kv_heads:
        raise InputError(f"{source}: num_key_value_heads {kv_heads} must divide num_attention_heads {heads}")
    head_dim = _req(doc, source, "head_dim", default=hidden // heads if hidden % heads == 0 else None)
    vocab = _req(doc, source, "vocab_size", "padded_vocab_size")
    gated = base_type not in _UNGATED
    intermediate = _req(doc, source, "intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim",
                        default=4 * hidden)
    experts = _opt(doc, source, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    moe_inter = _opt(doc, source, "moe_intermediate_size") or (intermediate if experts else 0)
    shared = _opt(doc, source, "shared_expert_intermediate_size")
    if not shared and experts:
        shared = _opt(doc, source, "n_shared_experts") * moe_inter
    if not shared and experts and base_type == "llama4":
        shared = moe_inter  # one shared expert beside the routed ones in every MoE layer (Llama4TextMoe)
    dense = _opt(doc, source, "first_k_dense_replace") if experts else 0
    tie = doc.get("tie_word_embeddings")
    if tie is None:
        tie = base_type not in _UNTIED_BY_DEFAULT
    if not isinstance(tie, bool):
        raise InputError(f"{source}: tie_word_embeddings must be true or false, got {tie!r}")
    kv_lora = _opt(doc, source, "kv_lora_rank")
    dtype = doc.get("torch_dtype") or doc.get("dtype")
    max_pos = _int(doc, source, "max_position_embeddings", "n_positions", "seq_length", required=False)
    return Architecture(
        model_type=model_type, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_kv_heads=kv_heads, head_dim=head_dim, vocab_size=vocab, intermediate_size=intermediate,
        max_position_embeddings=max_pos, max_context=_max_context(doc, max_pos, source),
        quantization=_checkpoint_quantization(outer.get("quantization_config") or doc.get("quantization_config")),
        moe_layer_step=_opt(doc, source, "interleave_moe_layer_step") or 1 if experts else 1,
        dense_intermediate_size=_opt(doc, source, "intermediate_size_mlp") if experts else 0,
        tie_word_embeddings=tie, num_experts=experts,
        num_experts_per_token=_opt(doc, source, "num_experts_per_tok", "moe_topk", "top_k") if experts else 0,
        moe_intermediate_size=moe_inter, shared_expert_intermediate_size=shared, dense_layers=dense,
        gated_mlp=gated, kv_lora_rank=kv_lora,
        qk_rope_head_dim=_opt(doc, source, "qk_rope_head_dim") if kv_lora else 0,
        qk_nope_head_dim=_opt(doc, source, "qk_nope_head_dim") if kv_lora else 0,
        v_head_dim=_opt(doc, source, "v_head_dim") if kv_lora else 0,
        q_lora_rank=_opt(doc, source, "q_lora_rank") if kv_lora else 0,
        torch_dtype=str(dtype) if isinstance(dtype, str) else None)


# quantization_config.quant_method -> the weight precision of compat/capacity.py (bits decide for the integer ones)
_CHECKPOINT_METHODS = {"fp8": "fp8", "fbgemm_fp8": "fp8", "modelopt": "fp8", "mxfp4": "nvfp4", "nvfp4": "nvfp4"}


def _checkpoint_quantization(config: Any) -> str | None:
    """The weight precision a checkpoint's quantization_config stores (vLLM reads it when model.json names none);
    None when absent or not known."""
    if not isinstance(config, dict):
        return None
    method = str(config.get("quant_method") or "").lower()
    if method in _CHECKPOINT_METHODS:
        return _CHECKPOINT_METHODS[method]
    bits = config.get("bits") or config.get("w_bit")
    if method in ("awq", "gptq", "marlin", "awq_marlin", "gptq_marlin") and bits in (4, 8):
        return "int4" if bits == 4 else "int8"
    if method == "bitsandbytes":
        return "int4" if config.get("load_in_4bit") else "int8" if config.get("load_in_8bit") else None
    if method == "compressed-tensors":
        groups = config.get("config_groups")
        for group in (groups.values() if isinstance(groups, dict) else ()):
            weights = group.get("weights") if isinstance(group, dict) else None
            if isinstance(weights, dict):
                if weights.get("type") == "float" and weights.get("num_bits") == 8:
                    return "fp8"
                if weights.get("num_bits") in (4, 8):
                    return "int4" if weights.get("num_bits") == 4 else "int8"
    return None


def _max_context(doc: dict[str, Any], max_pos: int | None, source: str) -> int | None:
    """The longest sequence vLLM derives from the config (its _get_and_verify_max_len): max_position_embeddings,
    times rope_scaling.factor for the scaling types that stretch it (yarn from original_max_position_embeddings);
    llama3, su and longrope configs already state their length."""
    scaling = doc.get("rope_scaling")
    if not isinstance(scaling, dict) or max_pos is None:
        return max_pos
    kind = str(scaling.get("rope_type") or scaling.get("type") or "")
    factor = scaling.get("factor")
    if kind in ("su", "longrope", "llama3", "mrope", "default", "") or not isinstance(factor, (int, float)):
        return max_pos
    if isinstance(factor, bool) or not math.isfinite(factor) or not 0 < factor <= MAX_ROPE_FACTOR:
        raise InputError(f"{source}: rope_scaling.factor must be a number above 0 (at most {MAX_ROPE_FACTOR:g}), "
                         f"got {factor!r}")
    base = scaling.get("original_max_position_embeddings") if kind == "yarn" else None
    return int((base if isinstance(base, int) else max_pos) * factor)
