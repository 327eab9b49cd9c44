"""Request inputs generated from a model's configuration (shapes, data types), or read from a file.

The config is Triton's JSON form (GET /v2/models/M/config); int64 fields may be strings (gRPC JSON)."""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError

# Triton config data type -> (wire datatype, numpy dtype name)
DTYPES: dict[str, tuple[str, str]] = {
    "TYPE_BOOL": ("BOOL", "bool"), "TYPE_UINT8": ("UINT8", "uint8"), "TYPE_UINT16": ("UINT16", "uint16"),
    "TYPE_UINT32": ("UINT32", "uint32"), "TYPE_UINT64": ("UINT64", "uint64"), "TYPE_INT8": ("INT8", "int8"),
    "TYPE_INT16": ("INT16", "int16"), "TYPE_INT32": ("INT32", "int32"), "TYPE_INT64": ("INT64", "int64"),
    "TYPE_FP16": ("FP16", "float16"), "TYPE_FP32": ("FP32", "float32"), "TYPE_FP64": ("FP64", "float64"),
    "TYPE_STRING": ("BYTES", "object"), "TYPE_BF16": ("BF16", "float32"),
}
CORPUS = (
    "The quick brown fox jumps over the lazy dog.",
    "Triton batches requests that arrive close together.",
    "What is the capital of France?",
    "Summarize the following paragraph in one sentence.",
    "GPUs are fastest when they are kept busy.",
    "A short prompt.",
    "Translate to German: good morning, how are you?",
    "Kubernetes schedules pods onto nodes.",
)


@dataclass(frozen=True)
class Tensor:
    """One input of one request: name, wire datatype, shape and the raw little-endian payload."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: bytes


def _dims(raw: Any) -> list[int]:
    return [int(d) for d in raw or []]


def input_specs(config: dict) -> list[dict]:
    """The inputs a request must carry: {name, datatype, np, shape} with the batch dimension (1) added
    when max_batch_size > 0 and variable dims (-1) set to 1. Optional inputs are left out."""
    batched = int(config.get("max_batch_size") or 0) > 0
    specs = []
    for inp in config.get("input") or []:
        if inp.get("optional"):
            continue
        dtype = inp.get("data_type", "TYPE_FP32")
        if dtype not in DTYPES:
            raise InputError(f"input {inp.get('name')!r}: data type {dtype} is not supported by bench")
        dims = [d if d > 0 else 1 for d in _dims(inp.get("dims"))]
        shape = ([1] if batched else []) + dims
        wire, npname = DTYPES[dtype]
        specs.append({"name": inp["name"], "datatype": wire, "np": npname, "shape": tuple(shape)})
    if not specs:
        raise InputError(f"model {config.get('name')!r} has no required inputs to send")
    return specs


def encode(array: Any, datatype: str) -> bytes:
    """Triton's binary tensor encoding: raw little-endian values; BYTES as 4-byte length + bytes each."""
    import numpy as np

    if datatype == "BYTES":
        out = bytearray()
        for item in np.asarray(array, dtype=object).reshape(-1):
            raw = item if isinstance(item, bytes) else str(item).encode()
            out += len(raw).to_bytes(4, "little") + raw
        return bytes(out)
    if datatype == "BF16":
        f32 = np.asarray(array, dtype="<f4").reshape(-1)
        return (f32.view("<u4") >> 16).astype("<u2").tobytes()
    arr = np.asarray(array)
    return arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


def generate(specs: list[dict], variants: int = 4, seed: int = 0) -> list[list[Tensor]]:
    """`variants` different requests of random values (strings from a small corpus)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for v in range(variants):
        tensors = []
        for s in specs:
            shape, npname = s["shape"], s["np"]
            if s["datatype"] == "BYTES":
                n = int(np.prod(shape)) if shape else 1
                arr = np.array([CORPUS[(v + i) % len(CORPUS)].encode() for i in range(n)],
                               dtype=object).reshape(shape)
            elif npname == "bool":
                arr = rng.integers(0, 2, size=shape).astype(bool)
            elif npname.startswith(("int", "uint")):
                arr = rng.integers(0, 10, size=shape).astype(npname)
            else:
                arr = rng.random(size=shape).astype(npname)
            tensors.append(Tensor(s["name"], s["datatype"], tuple(shape), encode(arr, s["datatype"])))
        out.append(tensors)
    return out


def from_file(path: Path, specs: list[dict]) -> list[list[Tensor]]:
    """Requests from a JSON file: `{"INPUT": [values…]}`, or perf_analyzer's `{"data": [{…}, …]}` where a
    value may also be `{"content": [...], "shape": [...]}`. Missing inputs are refused; flat lists are
    reshaped to the config's shape."""
    import numpy as np

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    except ValueError as err:
        raise InputError(f"{path}: not JSON: {err}") from None
    entries = doc.get("data") if isinstance(doc, dict) and "data" in doc else [doc]
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise InputError(f"{path}: expected {{\"INPUT\": [...]}} or {{\"data\": [{{...}}]}}")
    out = []
    for i, entry in enumerate(entries):
        tensors = []
        for s in specs:
            if s["name"] not in entry:
                raise InputError(f"{path}: entry {i}: input {s['name']!r} is missing")
            value = entry[s["name"]]
            shape = s["shape"]
            where = f"{path}: entry {i}: input {s['name']!r}"
            dtype = object if s["datatype"] == "BYTES" else s["np"]
            try:
                if isinstance(value, dict):
                    shape = tuple(int(d) for d in value.get("shape") or shape)
                    if "content" not in value and "b64" in value:
                        raw = _b64(value["b64"], s["datatype"], shape, np.dtype(dtype).itemsize, where)
                        tensors.append(Tensor(s["name"], s["datatype"], tuple(shape), raw))
                        continue
                    value = value.get("content")
                arr = np.array(value, dtype=dtype).reshape(shape)
            except (ValueError, TypeError) as err:
                raise InputError(f"{where}: {err}") from None
            tensors.append(Tensor(s["name"], s["datatype"], tuple(shape), encode(arr, s["datatype"])))
        out.append(tensors)
    return out


def _b64(text: Any, datatype: str, shape: tuple[int, ...], itemsize: int, where: str) -> bytes:
    """perf_analyzer's `{"b64": ...}`: the tensor's binary form (Triton's wire encoding), base64-encoded; its
    size must match the shape."""
    try:
        raw = base64.b64decode(str(text), validate=True)
    except binascii.Error as err:
        raise InputError(f"{where}: b64 is not base64: {err}") from None
    count = math.prod(shape)
    if datatype == "BYTES":  # 4-byte little-endian length, then the bytes, per element
        seen, at = 0, 0
        while at + 4 <= len(raw):
            at += 4 + int.from_bytes(raw[at:at + 4], "little")
            seen += 1
        if at != len(raw) or seen != count:
            raise InputError(f"{where}: b64 holds no {count} length-prefixed BYTES elements for shape {list(shape)}")
    elif len(raw) != count * (2 if datatype == "BF16" else itemsize):
        raise InputError(f"{where}: b64 holds {len(raw)} bytes, shape {list(shape)} of {datatype} needs "
                         f"{count * (2 if datatype == 'BF16' else itemsize)}")
    return raw


def for_target(target: Any, input_data: str | None) -> list[list[Tensor]]:
    """The requests to send to a served model: from an --input-data file, else generated from its config."""
    specs = input_specs(target.config())
    return from_file(Path(input_data), specs) if input_data else generate(specs)
