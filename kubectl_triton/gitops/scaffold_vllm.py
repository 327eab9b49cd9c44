"""add-model --backend vllm: Triton's vLLM backend (a config.pbtxt and the engine arguments in `1/model.json`).

The backend (triton-inference-server/vllm_backend, src/model.py) reads `<model>/<version>/model.json` and passes it
to vLLM as `AsyncEngineArgs(**model_json)`; it needs the decoupled transaction policy, leaves batching to vLLM
(max_batch_size 0) and wants KIND_MODEL instances when tensor_parallel_size x pipeline_parallel_size > 1 (it
refuses KIND_GPU then). Its auto-complete adds the same text in/out tensors this config declares; declaring them
lets validate and ensembles see them. Served by the `<release>-vllm-python-py3` image of the Triton release."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubectl_triton.errors import InputError

IMAGE_FLAVOUR = "vllm-python-py3"
MODEL_JSON = "model.json"
# text in, text out: the tensors of the backend's auto_complete_config that a client of text generation uses
INPUTS = (("text_input", "STRING", (1,), False), ("stream", "BOOL", (1,), True),
          ("sampling_parameters", "STRING", (1,), True), ("exclude_input_in_output", "BOOL", (1,), True))
OUTPUTS = (("text_output", "STRING", (-1,)),)
DTYPES = ("auto", "bfloat16", "float16", "float32", "half", "float")


@dataclass(frozen=True)
class VllmOptions:
    """vLLM engine arguments add-model writes into model.json (None: vLLM's default, left out)."""

    gpu_memory_utilization: float = 0.9
    kv_cache_dtype: str | None = None
    enforce_eager: bool = False
    dtype: str = "auto"  # vLLM's default: the checkpoint's, float16 where bfloat16 cannot run
    max_model_len: int | None = None  # None: vLLM derives the model's context length


def check(tp: int, pp: int, quantization: str, vllm: VllmOptions, nodes: int) -> None:
    """The vLLM options add-model can refuse before writing; one InputError each."""
    if tp < 1 or pp < 1:
        raise InputError(f"--tp {tp} --pp {pp}: must be at least 1")
    if nodes != 1:
        raise InputError("--nodes: a vLLM model is served by one pod here (tp x pp GPUs of one node)")
    if vllm.dtype not in DTYPES:
        raise InputError(f"--dtype {vllm.dtype!r}: one of {', '.join(DTYPES)} for --backend vllm")
    if vllm.max_model_len is not None and vllm.max_model_len < 1:
        raise InputError(f"--max-seq-len {vllm.max_model_len}: must be at least 1")
    if not 0 < vllm.gpu_memory_utilization <= 1:
        raise InputError(f"--gpu-memory-utilization {vllm.gpu_memory_utilization}: must be in (0, 1]")
    if quantization != "none" and not quantization.replace("_", "").isalnum():
        raise InputError(f"--quantization {quantization!r}: a vLLM quantization method (awq, gptq, fp8, ...)")


def engine_args(model_path: str, tp: int, pp: int, quantization: str, vllm: VllmOptions) -> dict[str, Any]:
    """The model.json document: only what differs from vLLM's defaults, besides the model and the memory knob."""
    args: dict[str, Any] = {"model": model_path, "gpu_memory_utilization": vllm.gpu_memory_utilization}
    if tp != 1:
        args["tensor_parallel_size"] = tp
    if pp != 1:
        args["pipeline_parallel_size"] = pp
    if vllm.dtype != "auto":
        args["dtype"] = vllm.dtype
    if quantization != "none":
        args["quantization"] = quantization
    if vllm.kv_cache_dtype:
        args["kv_cache_dtype"] = vllm.kv_cache_dtype
    if vllm.max_model_len:
        args["max_model_len"] = vllm.max_model_len
    if vllm.enforce_eager:
        args["enforce_eager"] = True
    return args


def model_json(args: dict[str, Any]) -> str:
    return json.dumps(args, indent=2) + "\n"


def config(name: str, schema: Any) -> Any:
    """The ModelConfig of a vLLM model (`schema`: Triton's model_config_pb2 module)."""
    cfg = schema.ModelConfig()
    cfg.name = name
    cfg.backend = "vllm"
    cfg.max_batch_size = 0
    cfg.model_transaction_policy.decoupled = True
    for tname, dtype, dims, optional in INPUTS:
        io = cfg.input.add()
        io.name, io.data_type, io.optional = tname, schema.DataType.Value("TYPE_" + dtype), optional
        io.dims.extend(dims)
    for tname, dtype, dims in OUTPUTS:
        io = cfg.output.add()
        io.name, io.data_type = tname, schema.DataType.Value("TYPE_" + dtype)
        io.dims.extend(dims)
    group = cfg.instance_group.add()
    group.count = 1
    # KIND_MODEL: vLLM places its workers on the pod's GPUs itself (the backend refuses KIND_GPU beyond one GPU)
    group.kind = schema.ModelInstanceGroup.Kind.Value("KIND_MODEL")
    return cfg
