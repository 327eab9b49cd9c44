"""TensorRT-LLM engine metadata: config.json (current and pre-0.8 formats), rank engine sizes and
the build-info.json the engine-build Job writes. Pure parsers plus one thin directory reader."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kubectl_triton.compat.data import load
from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import read_json

CONFIG = "config.json"
BUILD_INFO = "build-info.json"
# Rank file sizes, for metadata-only copies (record-engine) that carry no engine files.
ENGINE_FILES = "engine-files.json"
BUILD_INFO_KEYS = ("gpu_name", "compute_capability", "gpu_memory_mib", "tensorrt_llm_version",
                   "tensorrt_version", "image", "built_at")
_RANK = re.compile(r"(?:^|_)rank(\d+)\.engine$")
_LEGACY_RANK = re.compile(
    r"^(?P<name>.+)_(?P<dtype>[a-z0-9]+)_tp(?P<tp>\d+)(?:_pp(?P<pp>\d+))?_rank(?P<r>\d+)\.engine$")


@dataclass(frozen=True)
class BuildInfo:
    """build-info.json: where and with what the engine was built."""

    gpu_name: str
    compute_capability: str
    gpu_memory_mib: int | None
    tensorrt_llm_version: str | None
    tensorrt_version: str | None
    image: str | None
    built_at: str | None


@dataclass(frozen=True)
class EngineInfo:
    """What the compatibility rules need to know about one engine."""

    source: str
    format: str                      # "current" (TensorRT-LLM >= 0.8) or "legacy"
    version: str | None              # TensorRT-LLM version that built it (current format only)
    tensorrt_version: str | None     # pre-0.8 builder_config.tensorrt, when recorded
    architecture: str | None
    dtype: str | None
    quant_algo: str | None
    kv_cache_quant_algo: str | None
    tp: int
    pp: int
    max_batch_size: int | None
    max_input_len: int | None
    max_seq_len: int | None
    max_num_tokens: int | None
    num_layers: int | None
    num_kv_heads: int | None
    head_size: int | None
    rank_bytes: dict[int, int] = field(default_factory=dict)
    cluster_key: str | None = None   # build_config.auto_parallel_config.cluster_key: a hint only
    build_info: BuildInfo | None = None
    lora_plugin: str | None = None   # build_config.plugin_config.lora_plugin: None when built without LoRA
    max_lora_rank: int | None = None  # build_config.lora_config
    lora_target_modules: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    @property
    def largest_rank_bytes(self) -> int | None:
        return max(self.rank_bytes.values()) if self.rank_bytes else None


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _none_if_null(value: Any) -> str | None:
    return None if value in (None, "", "null", "None", "NO_QUANT") else str(value)


def parse_config(doc: dict[str, Any], source: str = CONFIG) -> EngineInfo:
    """An engine's config.json, either format; anything else raises InputError naming `source`."""
    if not isinstance(doc, dict):
        raise InputError(f"{source}: not a TensorRT-LLM engine config (expected a JSON object)")
    if "pretrained_config" in doc and "build_config" in doc:
        return _parse_current(doc, source)
    if "builder_config" in doc:
        return _parse_legacy(doc, source)
    raise InputError(f"{source}: not a TensorRT-LLM engine config "
                     "(neither pretrained_config/build_config nor builder_config)")


def _obj(parent: dict[str, Any], key: str, source: str, where: str = "") -> dict[str, Any]:
    """`parent[key]` as a JSON object ({} when absent or null); anything else raises InputError."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{source}: {where}{key} must be a JSON object, got {type(value).__name__}")
    return value


_MAX_INT = 2**31 - 1
_POSITIVE = {"pretrained_config": ("num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                   "hidden_size", "head_size", "vocab_size"),
             "build_config": ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens",
                              "max_output_len", "max_beam_width"),
             "mapping": ("tp_size", "pp_size", "world_size")}
_STRINGS = {"": ("version",), "pretrained_config": ("architecture", "dtype"),
            "quantization": ("quant_algo", "kv_cache_quant_algo")}


def _check_types(sections: dict[str, dict[str, Any]], source: str) -> None:
    """Fields the rules read must be positive integers (or null) and strings (or null)."""
    for section, keys in _POSITIVE.items():
        for key in keys:
            value = sections[section].get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 < value <= _MAX_INT):
                raise InputError(f"{source}: {section}.{key} must be a positive integer, got {value!r}")
    for section, keys in _STRINGS.items():
        for key in keys:
            value = sections[section].get(key)
            if value is not None and not isinstance(value, str):
                where = f"{section}.{key}" if section else key
                raise InputError(f"{source}: {where} must be a string, got {value!r}")


def _parse_current(doc: dict[str, Any], source: str) -> EngineInfo:
    pre = _obj(doc, "pretrained_config", source)
    build = _obj(doc, "build_config", source)
    mapping = _obj(pre, "mapping", source, "pretrained_config.")
    quant = _obj(pre, "quantization", source, "pretrained_config.")
    _check_types({"": doc, "pretrained_config": pre, "build_config": build, "mapping": mapping,
                  "quantization": quant}, source)
    heads = _int(pre.get("num_attention_heads"))
    hidden = _int(pre.get("hidden_size"))
    head_size = _int(pre.get("head_size")) or (hidden // heads if hidden and heads else None)
    max_input = _int(build.get("max_input_len"))
    max_seq = _int(build.get("max_seq_len"))
    max_output = _int(build.get("max_output_len"))
    if max_seq is None and max_input is not None and max_output is not None:
        max_seq = max_input + max_output  # 0.8-0.10 wrote max_output_len
    auto = _obj(build, "auto_parallel_config", source, "build_config.")
    plugins = _obj(build, "plugin_config", source, "build_config.")
    lora = _obj(build, "lora_config", source, "build_config.")
    modules = lora.get("lora_target_modules")
    return EngineInfo(
        source=source, format="current", version=_none_if_null(doc.get("version")),
        tensorrt_version=None, architecture=_none_if_null(pre.get("architecture")),
        dtype=_none_if_null(pre.get("dtype")),
        quant_algo=_none_if_null(quant.get("quant_algo")),
        kv_cache_quant_algo=_none_if_null(quant.get("kv_cache_quant_algo")),
        tp=_int(mapping.get("tp_size")) or 1, pp=_int(mapping.get("pp_size")) or 1,
        max_batch_size=_int(build.get("max_batch_size")), max_input_len=max_input,
        max_seq_len=max_seq, max_num_tokens=_int(build.get("max_num_tokens")),
        num_layers=_int(pre.get("num_hidden_layers")),
        num_kv_heads=_int(pre.get("num_key_value_heads")) or heads, head_size=head_size,
        cluster_key=_none_if_null(auto.get("cluster_key")),
        lora_plugin=_none_if_null(plugins.get("lora_plugin")), max_lora_rank=_int(lora.get("max_lora_rank")),
        lora_target_modules=tuple(m for m in modules if isinstance(m, str)) if isinstance(modules, list) else ())


def legacy_quant(quant_mode: int, int8: bool = False) -> tuple[str | None, str | None]:
    """(quant_algo, kv_cache_quant_algo) implied by a pre-0.8 QuantMode bit set."""
    bits = load("precisions.yaml")["legacy_quant_mode_bits"]

    def has(name: str) -> bool:
        return bool(quant_mode & bits[name])

    kv = "FP8" if has("FP8_KV_CACHE") else "INT8" if has("INT8_KV_CACHE") else None
    if has("FP8_QDQ"):
        algo = "FP8"
    elif has("ACTIVATIONS") and has("INT8_WEIGHTS"):
        algo = "W8A8_SQ_PER_CHANNEL"
    elif has("INT4_WEIGHTS"):
        algo = "W4A16_AWQ" if has("PER_GROUP") else "W4A16"
    elif has("INT8_WEIGHTS"):
        algo = "W8A16"
    else:
        return ("W8A8_SQ_PER_CHANNEL" if int8 else None), kv
    return algo, kv


def _parse_legacy(doc: dict[str, Any], source: str) -> EngineInfo:
    b = _obj(doc, "builder_config", source)
    heads = _int(b.get("num_heads"))
    hidden = _int(b.get("hidden_size"))
    algo, kv = legacy_quant(_int(b.get("quant_mode")) or 0, bool(b.get("int8")))
    max_input, max_output = _int(b.get("max_input_len")), _int(b.get("max_output_len"))
    return EngineInfo(
        source=source, format="legacy", version=None,
        tensorrt_version=_none_if_null(b.get("tensorrt")), architecture=_none_if_null(b.get("name")),
        dtype=_none_if_null(b.get("precision")), quant_algo=algo, kv_cache_quant_algo=kv,
        tp=_int(b.get("tensor_parallel")) or 1, pp=_int(b.get("pipeline_parallel")) or 1,
        max_batch_size=_int(b.get("max_batch_size")), max_input_len=max_input,
        max_seq_len=(max_input + max_output) if max_input is not None and max_output is not None else None,
        max_num_tokens=_int(b.get("max_num_tokens")), num_layers=_int(b.get("num_layers")),
        num_kv_heads=_int(b.get("num_kv_heads")) or heads,
        head_size=(hidden // heads) if hidden and heads else None)


def parse_build_info(doc: Any, source: str = BUILD_INFO) -> BuildInfo:
    """build-info.json as the engine-build Job writes it; missing GPU fields raise InputError."""
    if not isinstance(doc, dict):
        raise InputError(f"{source}: build info must be a JSON object")
    name, cc = doc.get("gpu_name"), doc.get("compute_capability")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{source}: gpu_name is missing")
    if not isinstance(cc, str) or not re.fullmatch(r"\d+\.\d+", cc.strip()):
        raise InputError(f"{source}: compute_capability must be \"major.minor\", got {cc!r}")
    unknown = sorted(set(doc) - set(BUILD_INFO_KEYS))
    if unknown:
        raise InputError(f"{source}: unknown key(s) {', '.join(unknown)}; "
                         f"expected {', '.join(BUILD_INFO_KEYS)}")
    memory = doc.get("gpu_memory_mib")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0):
        raise InputError(f"{source}: gpu_memory_mib must be a positive integer, got {memory!r}")
    for key in ("tensorrt_llm_version", "tensorrt_version", "image", "built_at"):
        if doc.get(key) is not None and not isinstance(doc.get(key), str):
            raise InputError(f"{source}: {key} must be a string or null, got {doc.get(key)!r}")
    return BuildInfo(gpu_name=name.strip(), compute_capability=cc.strip(),
                     gpu_memory_mib=_int(doc.get("gpu_memory_mib")),
                     tensorrt_llm_version=_none_if_null(doc.get("tensorrt_llm_version")),
                     tensorrt_version=_none_if_null(doc.get("tensorrt_version")),
                     image=_none_if_null(doc.get("image")), built_at=_none_if_null(doc.get("built_at")))


def rank_index(filename: str) -> int | None:
    """The rank of an engine file name (rank0.engine, gptj_float16_tp1_rank0.engine), else None."""
    m = _RANK.search(filename)
    return int(m.group(1)) if m else None


def rank_files(directory: Path) -> dict[int, Path]:
    """Engine files of a directory by rank."""
    out = {}
    for p in sorted(directory.glob("*.engine")):
        r = rank_index(p.name)
        if r is not None and p.is_file():
            out[r] = p
    return out


def read_engine_dir(directory: Path) -> EngineInfo:
    """Read an engine directory (or a metadata-only copy of one) into an EngineInfo."""
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory")
    config = directory / CONFIG
    if not config.is_file():
        raise InputError(f"{directory}: no {CONFIG} (not a TensorRT-LLM engine directory)")
    info = parse_config(read_json(config), str(config))
    sizes = {r: p.stat().st_size for r, p in rank_files(directory).items()}
    if not sizes and (directory / ENGINE_FILES).is_file():
        listed = read_json(directory / ENGINE_FILES)
        if not isinstance(listed, dict):
            raise InputError(f"{directory / ENGINE_FILES}: expected an object of file name -> bytes")
        sizes = {r: int(n) for name, n in listed.items()
                 if (r := rank_index(name)) is not None and _int(n) is not None}
    build_info = None
    if (directory / BUILD_INFO).is_file():
        build_info = parse_build_info(read_json(directory / BUILD_INFO), str(directory / BUILD_INFO))
    return replace(info, rank_bytes=sizes, build_info=build_info)


def legacy_rank_name(filename: str) -> dict[str, Any] | None:
    """The parts of a pre-0.8 rank file name (model, dtype, tp, pp, rank), else None."""
    m = _LEGACY_RANK.match(filename)
    if not m:
        return None
    return {"name": m.group("name"), "dtype": m.group("dtype"), "tp": int(m.group("tp")),
            "pp": int(m.group("pp") or 1), "rank": int(m.group("r"))}
