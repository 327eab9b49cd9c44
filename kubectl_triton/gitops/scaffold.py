"""`add-model` core: options in, {repository-relative path: file content} out.

The pure part (`validate_name`, `parse_tensor`, `parse_step`, `render`, `plan`) builds every file in memory:
config.pbtxt through Triton's protobuf schema; models/NAME/model.yaml, the model Component, one overlay per
GPU (plus the engine-build overlay for TensorRT-LLM) and one Flux Kustomization per overlay as data dumped by
ruamel.yaml (`formats.yamldump`); the cluster's models/kustomization.yaml with the new entries appended (ruamel.yaml
round trip, `yamledit`). The I/O part
(`read_facts`, `write_plan`) reads what the options refer to and writes a plan all or nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubectl_triton.compat.catalog import gpus
from kubectl_triton.datafiles import data_text
from kubectl_triton.errors import InputError
from kubectl_triton.formats import pbtxt
from kubectl_triton.formats import yamldump as Y
from kubectl_triton.formats.yamledit import edit_resources
from kubectl_triton.gitops import artifacts as artifacts_mod
from kubectl_triton.gitops import inferencepool, nodecache, scaffold_vllm
from kubectl_triton.gitops.artifacts import ARTIFACTS_CLAIM, parse_artifact
from kubectl_triton.gitops.inferencepool import platform_picker
from kubectl_triton.gitops.layout import confine
from kubectl_triton.gitops.model import (
    ENGINE_BUILD_SUFFIX,
    LAYOUT_FILE,
    MODEL_COMPONENT,
    MODEL_METADATA,
    ROUTE_DIR,
    Layout,
    Repository,
)
from kubectl_triton.gitops.package import volume_patch
from kubectl_triton.gitops.repo import flux_kustomizations

BACKENDS = ("tensorrtllm", "vllm", "onnxruntime", "pytorch", "tensorflow", "python", "ensemble")
DATA_TYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
              "FP16", "FP32", "FP64", "STRING", "BF16")
MODEL_FAMILIES = ("llama", "mistral", "qwen", "gemma", "phi3", "gpt", "falcon")  # base/engine-build
QUANTIZATIONS = ("none", "w8a16", "w4a16", "fp8", "int4_awq", "int8_sq", "nvfp4")
DTYPES = ("bfloat16", "float16", "float32")
SCHEDULER_POLICIES = ("max_utilization", "guaranteed_no_evict")
IMAGE_REPOSITORY = "nvcr.io/nvidia/tritonserver"
DEFAULT_IMAGE_TAG = "24.12"
BASE_ENGINE_BUILD_IMAGE = f"{IMAGE_REPOSITORY}:{DEFAULT_IMAGE_TAG}-trtllm-python-py3"  # base/engine-build/job.yaml
S3_SECRET = "model-store-credentials"
EXECUTOR_WORKER = "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"
LLM_MODELS = ("ensemble", "preprocessing", "tensorrt_llm", "postprocessing")
# Longest NAME: the Service "NAME-triton" must be a DNS-1035 label (63 characters at most).
MAX_NAME = 63 - len("-triton")
# Multi-node: the LeaderWorkerSet NAME-triton-group makes StatefulSets NAME-triton-group-G whose pods carry the
# label controller-revision-hash=<StatefulSet>-<10 characters>, a label value of 63 characters at most.
LWS_SUFFIX = "-triton-group"
MAX_MULTINODE_NAME = 63 - len(LWS_SUFFIX) - len("-0-") - 10
MULTINODE_BASE = "triton-multinode"  # a base (Layout.base)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_TENSOR_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_IMAGE_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,100}")

TRITON_MODELS_ANNOTATION = "triton.kubectl.io/triton-models"
HF_CONFIG = "config.json"  # the checkpoint's config.json in models/NAME/ (model.yaml capacity.hf_config)
DEFAULT_LAYOUT = Layout()  # the layout without a layout file


# ---- options -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tensor:
    """One input or output: name, Triton data type without TYPE_ (FP32, STRING) and dims (batch excluded)."""

    name: str
    data_type: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class Step:
    """One ensemble step: an existing model and explicit tensor maps (model tensor -> ensemble tensor)."""

    model: str
    inputs: tuple[tuple[str, str], ...] = ()
    outputs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LlmOptions:
    """TensorRT-LLM settings; paths default to the model's artifact folder."""

    model_family: str = "llama"
    hf_model: str | None = None
    tokenizer_dir: str | None = None
    engine_dir: str | None = None
    tp: int = 1
    pp: int = 1
    dtype: str = "bfloat16"
    quantization: str = "none"
    max_input_len: int = 4096
    max_seq_len: int = 8192
    max_num_tokens: int = 8192
    kv_cache_free_gpu_mem_fraction: float = 0.85
    batch_scheduler_policy: str = "max_utilization"
    streaming: bool = True
    nodes: int = 1  # > 1: a LeaderWorkerSet group of this many pods (base/triton-multinode)
    gpus_per_node: int | None = None  # None: the GPU catalog's gpus_per_node for the GPU type


@dataclass(frozen=True)
class Options:
    """Everything `add-model` was asked for. None means "the backend's default"."""

    name: str
    backend: str
    gpus: tuple[str, ...]
    max_batch_size: int | None = None
    dynamic_batching: bool | None = None
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int | None = None
    instances: int = 1
    version: int = 1
    artifact: str | None = None
    inputs: tuple[Tensor, ...] = ()
    outputs: tuple[Tensor, ...] = ()
    image_tag: str = DEFAULT_IMAGE_TAG
    llm: LlmOptions = field(default_factory=LlmOptions)
    steps: tuple[Step, ...] = ()
    autoscaler: str = "hpa"  # "keda": the overlays include overlays/autoscaling/keda (scale to zero)
    frontend: str = "kserve"  # kserve (Triton's v2 HTTP/gRPC) or openai (the OpenAI-compatible frontend too)
    route: str = "none"  # none, or inferencepool: an InferencePool + HTTPRoute under overlays/NAME/route/
    gateway: str = "triton-gateway"  # [NAMESPACE/]NAME of the Gateway the route attaches to
    vllm: scaffold_vllm.VllmOptions = field(default_factory=scaffold_vllm.VllmOptions)
    hf_config: str | None = None  # text of the checkpoint's config.json: models/NAME/config.json + capacity:
    node_cache: nodecache.Request | None = None  # --node-cache: the S3 files kept on the nodes (docs/node-cache.md)


@dataclass(frozen=True)
class Member:
    """An existing Triton model an ensemble step uses, read from models/<dir>/<model>/."""

    name: str
    source: str  # repository-relative folder, e.g. models/image-classifier/image_classifier
    config: Any  # ModelConfig
    files: dict[str, str]  # path inside the folder -> text


@dataclass(frozen=True)
class RepoFacts:
    """What the pure core needs to know about the repository."""

    gpus: tuple[str, ...]  # keys of overlays/gpus/<key>/
    cluster: str  # folder name under clusters/
    cluster_kustomization: str  # text of clusters/<cluster>/models/kustomization.yaml
    members: dict[str, Member] = field(default_factory=dict)  # step model spelling -> member
    model_files: tuple[str, ...] = ()  # existing files of this model (models/NAME, overlays/NAME, its Flux files)
    flux_entries: tuple[str, ...] = ()  # kustomization entries of this model's existing Flux files
    picker: Any = None  # inferencepool.EndpointPicker the platform provides (layout file), else None
    layout: Layout = field(default_factory=Layout)  # namespace, Flux sourceRef and dependsOn names


@dataclass(frozen=True)
class Plan:
    """Files to write (path -> text) and files to delete, all relative to the repository root."""

    files: dict[str, str]
    delete: tuple[str, ...] = ()


def triton_name(name: str) -> str:
    """The Triton model name inside models/NAME/: NAME with '-' written '_' (image-classifier ->
    image_classifier), as the seed models do."""
    return name.replace("-", "_")


def validate_name(name: str) -> None:
    """NAME must be a Triton model name (a plain folder name) and a DNS-1123 label; the error names the rule."""
    def bad(rule: str) -> InputError:
        return InputError(f"NAME {name!r}: {rule}")

    if not name:
        raise bad("is empty")
    if "/" in name or "\\" in name:
        raise bad("contains a path separator; a Triton model name is a single folder name")
    if name in (".", "..") or ".." in name:
        raise bad("'.' and '..' are not model names")
    if any(c.isspace() or not c.isprintable() for c in name):
        raise bad("contains whitespace or control characters, which Triton model names and "
                  "Kubernetes names refuse")
    if any(c.isupper() for c in name) and _DNS_LABEL.fullmatch(name.lower()):
        raise bad(f"uppercase letters are not allowed in a DNS-1123 label (Kubernetes object names); "
                  f"use {name.lower()!r}")
    if len(name) > 63:
        raise bad(f"is {len(name)} characters; a DNS-1123 label has at most 63")
    if not _DNS_LABEL.fullmatch(name):
        raise bad("is not a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a "
                  "letter or digit")
    if not name[0].isalpha():
        raise bad(f"must start with a letter: the Service '{name}-triton' must be a DNS-1035 label")
    if len(name) > MAX_NAME:
        raise bad(f"is {len(name)} characters; at most {MAX_NAME} so that '{name}-triton' fits in 63")


INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def parse_tensor(text: str, option: str = "--input") -> Tensor:
    """`NAME:TYPE:DIMS`, e.g. `input:FP32:3,224,224` or `text:STRING:-1` (dims exclude the batch dimension)."""
    parts = text.split(":")
    if len(parts) != 3:
        raise InputError(f"{option} {text!r}: expected NAME:TYPE:DIMS, e.g. input:FP32:3,224,224")
    name, data_type, dims_text = (p.strip() for p in parts)
    if not _TENSOR_NAME.fullmatch(name):
        raise InputError(f"{option} {text!r}: tensor name {name!r} must be letters, digits, '_', '-' or '.'")
    data_type = data_type.upper().removeprefix("TYPE_")
    if data_type not in DATA_TYPES:
        raise InputError(f"{option} {text!r}: unknown data type {parts[1]!r}; one of {', '.join(DATA_TYPES)}")
    try:
        dims = tuple(int(d) for d in dims_text.split(","))
    except ValueError:
        raise InputError(f"{option} {text!r}: dims {dims_text!r} must be comma-separated integers, "
                         "e.g. 3,224,224 or -1") from None
    if any(d == 0 or d < -1 or d > INT64_MAX for d in dims):
        raise InputError(f"{option} {text!r}: each dimension is a positive size or -1 (variable), at most "
                         f"{INT64_MAX} (int64)")
    return Tensor(name, data_type, dims)


def _maps(text: str, step: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not _TENSOR_NAME.fullmatch(key) or not _TENSOR_NAME.fullmatch(value):
            raise InputError(f"--step {step!r}: {item!r} is not MODEL_TENSOR=ENSEMBLE_TENSOR")
        out.append((key, value))
    return tuple(out)


def parse_step(text: str) -> Step:
    """`MODEL[:INPUT=TENSOR,…][->OUTPUT=TENSOR,…]`; MODEL is a Triton model under models/ (DIR/MODEL when
    the name is not unique). Unmapped tensors keep their own names."""
    left, arrow, right = text.partition("->")
    model, _, inputs = left.partition(":")
    model = model.strip()
    if not model or not re.fullmatch(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)?", model) or ".." in model:
        raise InputError(f"--step {text!r}: expected MODEL[:INPUT=TENSOR,...][->OUTPUT=TENSOR,...]")
    if arrow and not right.strip():
        raise InputError(f"--step {text!r}: nothing after '->'")
    return Step(model, _maps(inputs, text), _maps(right, text))


# ---- validation against the repository ------------------------------------------------------------

def check_options(opts: Options, facts: RepoFacts) -> None:
    """Everything about the options that can be refused before rendering; one InputError per problem."""
    validate_name(opts.name)
    if opts.backend not in BACKENDS:
        raise InputError(f"--backend {opts.backend!r}: unknown backend; one of {', '.join(BACKENDS)}")
    if not opts.gpus:
        raise InputError("--gpu: at least one GPU type is required; available: " + ", ".join(facts.gpus))
    for gpu in opts.gpus:
        if gpu not in facts.gpus:
            raise InputError(f"--gpu {gpu!r}: no {facts.layout.gpu_component(gpu)}/ Component in this repository; "
                             f"available: {', '.join(facts.gpus) or 'none'}")
    if not _IMAGE_TAG.fullmatch(opts.image_tag):
        raise InputError(f"--image-tag {opts.image_tag!r}: not a container image tag (e.g. 24.12)")
    if opts.image_tag.endswith("-py3"):
        release = opts.image_tag.split("-", 1)[0]
        raise InputError(f"--image-tag {opts.image_tag!r}: give the release ({release}); add-model appends the "
                         f"backend's flavour (the image would be {image(opts)})")
    for option, value, low, high in (("--instances", opts.instances, 1, INT32_MAX),
                                     ("--version", opts.version, 1, INT64_MAX),
                                     ("--max-batch-size", opts.max_batch_size, 0, INT32_MAX),
                                     ("--max-queue-delay-us", opts.max_queue_delay_us, 0, INT64_MAX)):
        if value is not None and value < low:
            raise InputError(f"{option} {value}: must be at least {low}")
        if value is not None and value > high:  # the field's width in Triton's model_config.proto
            raise InputError(f"{option} {value}: must be at most {high}")
    mbs = opts.max_batch_size
    if mbs is None and opts.backend != "ensemble":
        mbs = 64 if opts.backend == "tensorrtllm" else 8
    for size in opts.preferred_batch_sizes:
        if size < 1 or (mbs is not None and size > mbs):
            raise InputError(f"--preferred-batch-size {size}: must be between 1 and --max-batch-size "
                             f"({mbs if mbs is not None else 'the default'})")
    if mbs == 0 and (opts.dynamic_batching or opts.preferred_batch_sizes):
        raise InputError("--dynamic-batching: needs --max-batch-size above 0 (Triton batches only then)")
    for option, tensors in (("--input", opts.inputs), ("--output", opts.outputs)):
        names = [t.name for t in tensors]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InputError(f"{option} {dup[0]!r}: given more than once")
    if opts.backend == "tensorrtllm":
        _check_llm(opts)
    elif opts.backend == "vllm":
        _check_vllm(opts)
    elif opts.llm != LlmOptions():
        changed = next(f for f in LlmOptions.__dataclass_fields__ if getattr(opts.llm, f) != getattr(LlmOptions(), f))
        option = "--no-streaming" if changed == "streaming" else "--" + changed.replace("_", "-")
        raise InputError(f"{option}: only for --backend tensorrtllm")
    if opts.steps and opts.backend != "ensemble":
        raise InputError("--step: only for --backend ensemble")
    if opts.backend == "ensemble" and not opts.steps:
        raise InputError("--step: an ensemble needs at least one step (an existing model)")
    if opts.backend != "vllm" and opts.vllm != scaffold_vllm.VllmOptions():
        raise InputError("--gpu-memory-utilization, --kv-cache-dtype, --enforce-eager: only for --backend vllm")
    if opts.hf_config is not None and opts.backend not in ("tensorrtllm", "vllm"):
        raise InputError("--hf-config: only for --backend tensorrtllm or vllm (KV-cache capacity)")
    if opts.backend in ("tensorrtllm", "ensemble", "vllm") and opts.version != 1:
        raise InputError(f"--version: {opts.backend} models have no model files to version")
    source = parse_artifact(opts.artifact, opts.name).source
    if opts.node_cache is not None:
        nodecache.check_source(source, opts.artifact)
    if opts.frontend not in FRONTENDS:
        raise InputError(f"--frontend {opts.frontend!r}: one of {', '.join(FRONTENDS)}")
    if opts.frontend == "openai" and opts.backend not in ("tensorrtllm", "vllm"):
        raise InputError("--frontend openai: only for --backend tensorrtllm or vllm (the frontend turns chat and "
                         "completion requests into their text_input/text_output)")
    if opts.frontend == "openai" and opts.backend == "tensorrtllm" and not opts.llm.streaming:
        raise InputError("--frontend openai: needs --streaming (the frontend sends the `stream` input with every "
                         "request)")
    if opts.route not in ROUTES:
        raise InputError(f"--route {opts.route!r}: one of {', '.join(ROUTES)}")
    if opts.route == "inferencepool":
        gateway_ref(opts.gateway)


ROUTES = ("none", "inferencepool")
FRONTENDS = ("kserve", "openai")


def gateway_ref(gateway: str) -> tuple[str | None, str]:
    """--gateway [NAMESPACE/]NAME as (namespace or None, name)."""
    ns, _, name = gateway.rpartition("/")
    if not _DNS_LABEL.fullmatch(name) or (ns and not _DNS_LABEL.fullmatch(ns)):
        raise InputError(f"--gateway {gateway!r}: expected [NAMESPACE/]NAME of a Gateway (DNS labels)")
    return ns or None, name


# LlmOptions fields a vLLM model uses too: --tp, --pp, --quantization, --hf-model (vLLM's `model`), --nodes
# (refused above 1); --dtype and --max-seq-len (max_model_len) reach it through VllmOptions (vLLM's defaults differ)
_VLLM_SHARED = ("tp", "pp", "quantization", "hf_model", "nodes")


def _check_vllm(opts: Options) -> None:
    llm = opts.llm
    default = LlmOptions()
    for f in LlmOptions.__dataclass_fields__:
        if f not in _VLLM_SHARED and getattr(llm, f) != getattr(default, f):
            option = "--no-streaming" if f == "streaming" else "--" + f.replace("_", "-")
            raise InputError(f"{option}: only for --backend tensorrtllm (vLLM streams when a request asks)")
    if opts.inputs or opts.outputs:
        raise InputError("--input/--output: a vllm model's tensors are the backend's (text_input, stream, "
                         "sampling_parameters, exclude_input_in_output -> text_output)")
    if opts.max_batch_size not in (None, 0) or opts.dynamic_batching or opts.preferred_batch_sizes:
        raise InputError("--max-batch-size/--dynamic-batching: vLLM batches requests itself (max_batch_size 0)")
    if opts.instances != 1:
        raise InputError("--instances: one vLLM engine per pod (scale with replicas)")
    scaffold_vllm.check(llm.tp, llm.pp, llm.quantization, opts.vllm, llm.nodes)


def _check_llm(opts: Options) -> None:
    llm = opts.llm
    if len(opts.gpus) > 1:
        raise InputError("--gpu: a tensorrtllm model takes one GPU type: its engine (tensorrt_llm "
                         "gpt_model_path, model.yaml engine_dir) is built for one GPU; add one model per GPU type")
    if opts.inputs or opts.outputs:
        raise InputError("--input/--output: a tensorrtllm model's tensors are fixed (text_input, max_tokens, "
                         "... -> text_output)")
    source = parse_artifact(opts.artifact, opts.name).source
    if source == "s3":
        raise InputError(f"--artifact {opts.artifact!r}: tensorrtllm engines are built onto the "
                         f"{ARTIFACTS_CLAIM} PVC or come prebuilt in an oci:// image; s3 is not supported for "
                         "tensorrtllm")
    if source == "oci" and (llm.nodes > 1 or llm.gpus_per_node is not None):
        raise InputError(f"--artifact {opts.artifact!r}: a multi-node (LeaderWorkerSet) model reads its engines "
                         f"from the {ARTIFACTS_CLAIM} PVC; oci:// images are mounted by single-node Deployments")
    if len(f"{opts.name}-{opts.gpus[0]}-engine-build") > 63:
        raise InputError(f"NAME {opts.name!r}: the Job '{opts.name}-{opts.gpus[0]}-engine-build' would exceed "
                         "63 characters (a label value); use a shorter NAME")
    if opts.max_batch_size == 0:
        raise InputError("--max-batch-size 0: in-flight batching needs a tensorrtllm max_batch_size of at least 1")
    for option, word, allowed in (("--model-family", llm.model_family, MODEL_FAMILIES),
                                  ("--dtype", llm.dtype, DTYPES),
                                  ("--quantization", llm.quantization, QUANTIZATIONS),
                                  ("--batch-scheduler-policy", llm.batch_scheduler_policy, SCHEDULER_POLICIES)):
        if word not in allowed:
            raise InputError(f"{option} {word!r}: one of {', '.join(allowed)}")
    for option, number in (("--tp", llm.tp), ("--pp", llm.pp), ("--max-input-len", llm.max_input_len),
                          ("--max-seq-len", llm.max_seq_len), ("--max-num-tokens", llm.max_num_tokens)):
        if number < 1:
            raise InputError(f"{option} {number}: must be at least 1")
    if llm.max_input_len >= llm.max_seq_len:
        raise InputError(f"--max-input-len {llm.max_input_len}: must be below --max-seq-len {llm.max_seq_len} "
                         "(the sequence holds the prompt and the generated tokens)")
    if not 0 < llm.kv_cache_free_gpu_mem_fraction <= 1:
        raise InputError(f"--kv-cache-free-gpu-mem-fraction {llm.kv_cache_free_gpu_mem_fraction}: "
                         "must be in (0, 1]")
    if llm.nodes != 1 or llm.gpus_per_node is not None:
        _check_nodes(opts)
    for option, path in (("--hf-model", llm.hf_model), ("--tokenizer-dir", llm.tokenizer_dir),
                         ("--engine-dir", llm.engine_dir)):
        if path is not None and (not path.strip() or any(c.isspace() for c in path) or "${" in path):
            raise InputError(f"--{option.lstrip('-')} {path!r}: expected a path without spaces or ${{...}}")


def gpus_per_node(opts: Options) -> int:
    """GPUs each pod of a multi-node group requests: --gpus-per-node, else the catalog's node shape."""
    if opts.llm.gpus_per_node is not None:
        return opts.llm.gpus_per_node
    entry = gpus().get(opts.gpus[0]) if opts.gpus else None
    if entry is None or entry.gpus_per_node is None:
        raise InputError(f"--nodes {opts.llm.nodes}: the GPU catalog has no node shape for {opts.gpus[0]!r}; "
                         "pass --gpus-per-node")
    return entry.gpus_per_node


def _check_nodes(opts: Options) -> None:
    """--nodes/--gpus-per-node: tp x pp must fill the group exactly, each pod fits the node shape."""
    llm = opts.llm
    if llm.nodes < 1:
        raise InputError(f"--nodes {llm.nodes}: must be at least 1")
    if llm.gpus_per_node is not None and llm.gpus_per_node < 1:
        raise InputError(f"--gpus-per-node {llm.gpus_per_node}: must be at least 1")
    if llm.nodes == 1:
        raise InputError("--gpus-per-node: only with --nodes 2 or more (one node asks for tp x pp GPUs)")
    if len(opts.name) > MAX_MULTINODE_NAME:
        raise InputError(f"NAME {opts.name!r}: a multi-node model's name has at most {MAX_MULTINODE_NAME} "
                         f"characters ('{opts.name}{LWS_SUFFIX}-0-1' pods and their StatefulSet labels)")
    per_node = gpus_per_node(opts)
    world = llm.tp * llm.pp
    if world != llm.nodes * per_node:
        raise InputError(f"--nodes {llm.nodes}: tp {llm.tp} x pp {llm.pp} = {world} GPUs, but {llm.nodes} nodes x "
                         f"{per_node} GPUs per node = {llm.nodes * per_node}; the engine's world size must fill "
                         "the group exactly")
    shape = gpus().get(opts.gpus[0])
    if shape is not None and shape.gpus_per_node is not None and per_node > shape.gpus_per_node:
        raise InputError(f"--gpus-per-node {per_node}: a {opts.gpus[0]} node has {shape.gpus_per_node} GPUs; "
                         "no node could host a pod of the group")
    if opts.frontend != "kserve":
        raise InputError(f"--frontend {opts.frontend}: Triton's OpenAI-compatible frontend serves TensorRT-LLM "
                         "only in single-node orchestrator mode (docs/openai.md); use --nodes 1")


# ---- config.pbtxt through Triton's schema ----------------------------------------------------------

def _schema() -> Any:
    return pbtxt.schema()


def _io(field_: Any, tensor: Tensor, **extra: Any) -> Any:
    io = field_.add()
    io.name = tensor.name
    io.data_type = _schema().DataType.Value("TYPE_" + tensor.data_type)
    io.dims.extend(tensor.dims)
    for key, value in extra.items():
        if key == "reshape":
            io.reshape.shape.extend(value)
        else:
            setattr(io, key, value)
    return io


def _instances(config: Any, count: int, kind: str) -> None:
    group = config.instance_group.add()
    group.count = count
    group.kind = _schema().ModelInstanceGroup.Kind.Value(kind)


def _params(config: Any, values: dict[str, str]) -> None:
    for key, value in values.items():
        config.parameters[key].string_value = value


_FIELD_ORDER = ("name", "platform", "backend", "max_batch_size", "version_policy", "model_transaction_policy",
                "input", "output", "dynamic_batching", "sequence_batching", "ensemble_scheduling", "instance_group",
                "parameters")
_ONE_LINE_LISTS = ("input", "output", "instance_group")


def format_config(config: Any) -> str:
    """pbtxt text of a ModelConfig in the seed models' layout (name and backend first, one line per tensor),
    checked to parse back into the same message with Triton's schema."""
    from google.protobuf import text_format


    present = [f.name for f, _ in config.ListFields()]
    order = [f for f in _FIELD_ORDER if f in present] + [f for f in present if f not in _FIELD_ORDER]
    out = []
    for name in order:
        if name in _ONE_LINE_LISTS:
            rows = [text_format.MessageToString(item, as_utf8=True, as_one_line=True) for item in getattr(config, name)]
            out.append(f"{name} [\n" + ",\n".join(f"  {{ {row} }}" for row in rows) + "\n]\n")
        elif name == "ensemble_scheduling" and [f.name for f, _ in config.ensemble_scheduling.ListFields()] == ["step"]:
            out.append("ensemble_scheduling {\n  step [\n" + ",\n".join(
                _step_text(step) for step in config.ensemble_scheduling.step) + "\n  ]\n}\n")
        elif name == "parameters":
            first = ("gpt_model_type", "gpt_model_path")
            for key in sorted(config.parameters, key=lambda k: (k not in first, first.index(k) if k in first else 0,
                                                                 k.lower())):
                value = text_format.MessageToString(config.parameters[key], as_utf8=True, as_one_line=True)
                out.append(f'parameters {{ key: "{key}" value: {{ {value} }} }}\n')
        else:
            part = type(config)()
            part.CopyFrom(config)
            for other in present:
                if other != name:
                    part.ClearField(other)
            out.append(text_format.MessageToString(part, as_utf8=True))
    text = "".join(out)
    if pbtxt.parse(text) != config:
        return pbtxt.dumps(config)
    return text


def _step_text(step: Any) -> str:
    lines = ["    {", f'      model_name: "{step.model_name}"', f"      model_version: {step.model_version}"]
    for field_name in ("input_map", "output_map"):
        mapping = getattr(step, field_name)
        lines += [f'      {field_name} {{ key: "{k}" value: "{mapping[k]}" }}' for k in sorted(mapping)]
    return "\n".join(lines) + "\n    }"


def _dump(config: Any, comment: str) -> str:
    return "".join(f"# {line}\n" for line in comment.splitlines()) + format_config(config)


def _batching(config: Any, opts: Options, mbs: int, default_delay: int) -> None:
    enabled = opts.dynamic_batching if opts.dynamic_batching is not None else mbs > 0
    if enabled and mbs > 0:
        config.dynamic_batching.preferred_batch_size.extend(opts.preferred_batch_sizes)
        config.dynamic_batching.max_queue_delay_microseconds = (
            opts.max_queue_delay_us if opts.max_queue_delay_us is not None else default_delay)


DEFAULT_IO = {
    "pytorch": ((Tensor("INPUT__0", "FP32", (-1,)),), (Tensor("OUTPUT__0", "FP32", (-1,)),)),
    "onnxruntime": ((Tensor("input", "FP32", (-1,)),), (Tensor("output", "FP32", (-1,)),)),
    "tensorflow": ((Tensor("input", "FP32", (-1,)),), (Tensor("output", "FP32", (-1,)),)),
    "python": ((Tensor("INPUT0", "FP32", (-1,)),), (Tensor("OUTPUT0", "FP32", (-1,)),)),
}
MODEL_FILES = {"onnxruntime": "model.onnx", "pytorch": "model.pt", "tensorflow": "model.savedmodel/",
               "python": "model.py"}


def single_config(opts: Options) -> Any:
    """The config of an onnxruntime, pytorch, tensorflow or python model."""
    config = _schema().ModelConfig()
    config.name = triton_name(opts.name)
    config.backend = opts.backend
    if opts.backend == "tensorflow":
        config.platform = "tensorflow_savedmodel"
    mbs = opts.max_batch_size if opts.max_batch_size is not None else 8
    config.max_batch_size = mbs
    inputs, outputs = DEFAULT_IO[opts.backend]
    for tensor in opts.inputs or inputs:
        _io(config.input, tensor)
    for tensor in opts.outputs or outputs:
        _io(config.output, tensor)
    _batching(config, opts, mbs, 100)
    _instances(config, opts.instances, "KIND_GPU")
    if opts.version != 1:
        config.version_policy.specific.versions.append(opts.version)
    return config


def llm_paths(opts: Options) -> dict[str, str]:
    """checkpoint, tokenizer_dir and engine_dir of a tensorrtllm model."""
    base = parse_artifact(opts.artifact, opts.name).pod_dir
    checkpoint = opts.llm.hf_model or f"{base}/hf"
    return {"checkpoint": checkpoint, "tokenizer_dir": opts.llm.tokenizer_dir or checkpoint,
            "engine_dir": opts.llm.engine_dir or f"{base}/engines/{opts.gpus[0]}"}


# Optional inputs the OpenAI-compatible frontend (server python/openai, Triton 24.12: engine/utils/triton.py
# _create_trtllm_inference_request) sends to a TensorRT-LLM model besides text_input, stream and max_tokens; the
# tensorrt_llm model takes them under the same names. (`stop_words` needs a tokenizing step: not scaffolded.)
OPENAI_SAMPLING = {"frequency_penalty": "FP32", "presence_penalty": "FP32", "random_seed": "UINT64"}
OPENAI_PORT = 9000  # inferencepool.OPENAI_PORT
OPENAI_MAIN = "/opt/tritonserver/python/openai/openai_frontend/main.py"
# The frontend's --lora-separator (server v2.58.0 = Triton 25.05; the 24.12 frontend's argparse refuses it): clients
# select adapter A of Triton model M with "model": "M_lora_A" (gitops/modelrewrite.py, docs/inferencepool.md).
LORA_SEPARATOR, LORA_SEPARATOR_SINCE = "_lora_", (25, 5)


def llm_configs(opts: Options) -> dict[str, Any]:
    """preprocessing -> tensorrt_llm -> postprocessing as `ensemble`, like models/llama3-8b."""
    llm, paths = opts.llm, llm_paths(opts)
    mbs = opts.max_batch_size if opts.max_batch_size is not None else 64
    s = _schema()
    i32, fp32, string, boolean = "INT32", "FP32", "STRING", "BOOL"

    ensemble = s.ModelConfig(name="ensemble", platform="ensemble", max_batch_size=mbs)
    _io(ensemble.input, Tensor("text_input", string, (1,)))
    _io(ensemble.input, Tensor("max_tokens", i32, (1,)))
    _io(ensemble.input, Tensor("temperature", fp32, (1,)), optional=True)
    _io(ensemble.input, Tensor("top_p", fp32, (1,)), optional=True)
    if llm.streaming:
        _io(ensemble.input, Tensor("stream", boolean, (1,)), optional=True)
    # The OpenAI-compatible frontend passes these sampling parameters through when a client sets them.
    openai = tuple(OPENAI_SAMPLING.items()) if opts.frontend == "openai" else ()
    for name, dtype in openai:
        _io(ensemble.input, Tensor(name, dtype, (1,)), optional=True)
    _io(ensemble.output, Tensor("text_output", string, (-1,)))
    steps = ensemble.ensemble_scheduling.step
    pre = steps.add(model_name="preprocessing", model_version=-1)
    pre.input_map.update({"QUERY": "text_input", "REQUEST_OUTPUT_LEN": "max_tokens"})
    pre.output_map.update({"INPUT_ID": "_INPUT_ID", "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN",
                           "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN", "OUT_END_ID": "_END_ID",
                           "OUT_PAD_ID": "_PAD_ID"})
    core = steps.add(model_name="tensorrt_llm", model_version=-1)
    core.input_map.update({"input_ids": "_INPUT_ID", "input_lengths": "_REQUEST_INPUT_LEN",
                           "request_output_len": "_REQUEST_OUTPUT_LEN", "end_id": "_END_ID", "pad_id": "_PAD_ID",
                           "temperature": "temperature", "runtime_top_p": "top_p"})
    if llm.streaming:
        core.input_map["streaming"] = "stream"
    core.input_map.update({name: name for name, _ in openai})
    core.output_map.update({"output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH"})
    post = steps.add(model_name="postprocessing", model_version=-1)
    post.input_map.update({"TOKENS_BATCH": "_TOKENS_BATCH", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"})
    post.output_map["OUTPUT"] = "text_output"

    preprocessing = s.ModelConfig(name="preprocessing", backend="python", max_batch_size=mbs)
    _io(preprocessing.input, Tensor("QUERY", string, (1,)))
    _io(preprocessing.input, Tensor("REQUEST_OUTPUT_LEN", i32, (1,)))
    for name, dims in (("INPUT_ID", (-1,)), ("REQUEST_INPUT_LEN", (1,)), ("REQUEST_OUTPUT_LEN", (1,)),
                       ("OUT_END_ID", (1,)), ("OUT_PAD_ID", (1,))):
        _io(preprocessing.output, Tensor(name, i32, dims))
    _params(preprocessing, {"tokenizer_dir": paths["tokenizer_dir"]})
    _instances(preprocessing, opts.instances, "KIND_CPU")

    core_cfg = s.ModelConfig(name="tensorrt_llm", backend="tensorrtllm", max_batch_size=mbs)
    core_cfg.model_transaction_policy.decoupled = llm.streaming
    if opts.dynamic_batching is not False:
        core_cfg.dynamic_batching.preferred_batch_size.extend(opts.preferred_batch_sizes or (mbs,))
        core_cfg.dynamic_batching.max_queue_delay_microseconds = opts.max_queue_delay_us or 0
    _io(core_cfg.input, Tensor("input_ids", i32, (-1,)), allow_ragged_batch=True)
    _io(core_cfg.input, Tensor("input_lengths", i32, (1,)), reshape=())
    _io(core_cfg.input, Tensor("request_output_len", i32, (1,)), reshape=())
    for name, dtype in (("end_id", i32), ("pad_id", i32), ("temperature", fp32), ("runtime_top_p", fp32)) + (
            (("streaming", boolean),) if llm.streaming else ()) + openai:
        _io(core_cfg.input, Tensor(name, dtype, (1,)), reshape=(), optional=True)
    _io(core_cfg.output, Tensor("output_ids", i32, (-1, -1)))
    _io(core_cfg.output, Tensor("sequence_length", i32, (-1,)))
    _instances(core_cfg, 1, "KIND_CPU")
    _params(core_cfg, {
        "max_beam_width": "1",
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": paths["engine_dir"],
        "batch_scheduler_policy": llm.batch_scheduler_policy,
        "kv_cache_free_gpu_mem_fraction": f"{llm.kv_cache_free_gpu_mem_fraction:g}",
        "exclude_input_in_output": "true",
        "enable_kv_cache_reuse": "false",
        "executor_worker_path": EXECUTOR_WORKER,
        # read without a default from TensorRT-LLM 0.19 (Triton 25.05) on; empty keeps guided decoding off, and a
        # config written for an earlier image then still loads after an upgrade
        "tokenizer_dir": paths["tokenizer_dir"],
        "xgrammar_tokenizer_info_path": "",
        "guided_decoding_backend": "",
    })

    postprocessing = s.ModelConfig(name="postprocessing", backend="python", max_batch_size=mbs)
    _io(postprocessing.input, Tensor("TOKENS_BATCH", i32, (-1, -1)))
    _io(postprocessing.input, Tensor("SEQUENCE_LENGTH", i32, (-1,)))
    _io(postprocessing.output, Tensor("OUTPUT", string, (-1,)))
    _params(postprocessing, {"tokenizer_dir": paths["tokenizer_dir"], "skip_special_tokens": "true"})
    _instances(postprocessing, opts.instances, "KIND_CPU")
    return {"ensemble": ensemble, "preprocessing": preprocessing, "tensorrt_llm": core_cfg,
            "postprocessing": postprocessing}


# ---- ensembles of existing models -----------------------------------------------------------------

def _dtype_name(value: int) -> str:
    return _schema().DataType.Name(value).removeprefix("TYPE_")


def ensemble_config(opts: Options, members: dict[str, Member]) -> Any:
    """An ensemble wiring existing models; unknown models, tensors and mismatched types are refused."""
    s = _schema()
    ens_name = triton_name(opts.name)
    used: dict[str, Member] = {}
    for step in opts.steps:
        member = members.get(step.model)
        if member is None:
            raise InputError(f"--step {step.model!r}: unknown model (no models/*/{step.model}/config.pbtxt)")
        if member.config.platform == "ensemble":
            raise InputError(f"--step {step.model!r}: {member.source} is an ensemble; nested ensembles are not "
                             "scaffolded, name its models as steps instead")
        if member.name == ens_name:
            raise InputError(f"--step {step.model!r}: the ensemble itself is named {ens_name!r}; pick another NAME")
        if member.name in used and used[member.name].source != member.source:
            raise InputError(f"--step {step.model!r}: two different models named {member.name!r} "
                             f"({used[member.name].source}, {member.source}) cannot share one repository")
        used[member.name] = member
    member_mbs = [m.config.max_batch_size for m in used.values()]
    mbs = opts.max_batch_size if opts.max_batch_size is not None else min(member_mbs)
    if mbs > min(member_mbs):
        raise InputError(f"--max-batch-size {mbs}: above a step model's max_batch_size ({min(member_mbs)}); "
                         "an ensemble batches no more than its models")

    def dims_of(member: Member, io: Any) -> tuple[int, ...]:
        dims = tuple(io.dims)
        return (-1, *dims) if mbs == 0 and member.config.max_batch_size > 0 else dims

    produced: dict[str, tuple[str, str, tuple[int, ...]]] = {}  # tensor -> (producer, type, dims)
    consumed: dict[str, tuple[str, str, tuple[int, ...]]] = {}  # ensemble inputs: tensor -> (consumer, ...)
    declared_in = {t.name: t for t in opts.inputs}
    declared_out = {t.name: t for t in opts.outputs}
    config = s.ModelConfig(name=ens_name, platform="ensemble", max_batch_size=mbs)
    steps = []
    for index, step in enumerate(opts.steps):
        member = members[step.model]
        cfg = member.config
        where = f"--step {step.model!r}"
        ins, outs = {i.name: i for i in cfg.input}, {o.name: o for o in cfg.output}
        in_map, out_map = dict(step.inputs), dict(step.outputs)
        for key, known, kind in ((in_map, ins, "input"), (out_map, outs, "output")):
            for tensor in key:
                if tensor not in known:
                    raise InputError(f"{where}: model {member.name!r} has no {kind} {tensor!r} "
                                     f"(its {kind}s: {', '.join(known) or 'none'})")
        pb = config.ensemble_scheduling.step.add(model_name=member.name, model_version=-1)
        for name, io in ins.items():
            tensor = in_map.get(name, name)
            if name not in in_map and io.optional and tensor not in produced and tensor not in declared_in:
                continue
            dtype, dims = _dtype_name(io.data_type), dims_of(member, io)
            if tensor in produced:
                source, p_type, _ = produced[tensor]
                if p_type != dtype:
                    raise InputError(f"{where}: tensor {tensor!r} is {p_type} from {source} but input {name!r} of "
                                     f"{member.name} takes {dtype}")
            elif declared_in and tensor not in declared_in:
                raise InputError(f"{where}: unknown tensor {tensor!r} for input {name!r}: no earlier step produces "
                                 f"it and it is not an ensemble --input ({', '.join(declared_in)})")
            elif tensor in consumed and consumed[tensor][1] != dtype:
                raise InputError(f"{where}: ensemble input {tensor!r} feeds {consumed[tensor][0]} as "
                                 f"{consumed[tensor][1]} and {member.name} as {dtype}")
            elif tensor in declared_in and declared_in[tensor].data_type != dtype:
                raise InputError(f"{where}: --input {tensor!r} is {declared_in[tensor].data_type} but input "
                                 f"{name!r} of {member.name} takes {dtype}")
            else:
                consumed.setdefault(tensor, (member.name, dtype, dims))
            pb.input_map[name] = tensor
        later = {in_map_name for st in opts.steps[index + 1:] for in_map_name in
                 [dict(st.inputs).get(i.name, i.name) for i in members[st.model].config.input]}
        for name, io in outs.items():
            tensor = out_map.get(name, name)
            if name not in out_map and declared_out and tensor not in declared_out and tensor not in later:
                continue  # neither used later nor exposed
            if tensor in produced or tensor in consumed:
                raise InputError(f"{where}: tensor {tensor!r} is already "
                                 f"{'produced by ' + produced[tensor][0] if tensor in produced else 'an input'}; "
                                 "map the output to another name (OUTPUT=TENSOR)")
            produced[tensor] = (member.name, _dtype_name(io.data_type), dims_of(member, io))
            pb.output_map[name] = tensor
        steps.append(pb)
    for name in declared_in:
        if name not in consumed:
            raise InputError(f"--input {name!r}: no step consumes an ensemble tensor of that name")
    for name in declared_out:
        if name not in produced:
            raise InputError(f"--output {name!r}: no step produces a tensor of that name "
                             f"(produced: {', '.join(produced) or 'none'})")
    read = {v for st in config.ensemble_scheduling.step for v in st.input_map.values()}
    for tensor, (_, dtype, dims) in consumed.items():
        t = declared_in.get(tensor)
        _io(config.input, Tensor(tensor, dtype, t.dims if t else dims))
    outputs: dict[str, Tensor | None] = dict(declared_out) or {t: None for t in produced if t not in read}
    if not outputs:
        raise InputError("--step: every produced tensor is consumed again; name the ensemble outputs with --output")
    for tensor in outputs:
        _, dtype, dims = produced[tensor]
        t = declared_out.get(tensor)
        if t is not None and t.data_type != dtype:
            raise InputError(f"--output {tensor!r}: declared {t.data_type} but {produced[tensor][0]} produces {dtype}")
        _io(config.output, Tensor(tensor, dtype, t.dims if t else dims))
    return config


# ---- YAML files: data dumped by ruamel.yaml (formats/yamldump), in the seed models' shape -------------

def image(opts: Options) -> str:
    flavour = {"tensorrtllm": "trtllm-python-py3", "vllm": scaffold_vllm.IMAGE_FLAVOUR}.get(opts.backend, "py3")
    return f"{IMAGE_REPOSITORY}:{opts.image_tag}-{flavour}"


def artifacts_dir(opts: Options) -> str:
    return parse_artifact(opts.artifact, opts.name).pod_dir


def model_yaml(opts: Options) -> str:
    """models/NAME/model.yaml: what the overlays, the engine-build Job and `validate` read."""
    art = parse_artifact(opts.artifact, opts.name)
    if art.source == "pvc":
        artifacts = Y.mapping(source="pvc", claim=ARTIFACTS_CLAIM, path=art.path)
    elif art.source == "oci":
        artifacts = Y.mapping(**artifacts_mod.metadata_entry(art))
        Y.comment(artifacts, "reference", "Mounted read-only at /artifacts as an image volume (docs/oci-artifacts.md), "
                  f"the model's files under path/;\n{artifacts_mod.LAYOUT_FILE} lists them (kubectl triton "
                  "package-model writes it).", 2)
    else:
        artifacts = Y.mapping(source="s3", uri=art.uri, secret=S3_SECRET)
        if opts.node_cache is not None:
            artifacts.update(nodecache.metadata_entries(opts.node_cache))
            Y.comment(artifacts, "size", nodecache.METADATA_COMMENT, 2)
    doc = Y.mapping(name=opts.name, backend=opts.backend, gpus=Y.flow(list(opts.gpus)), image=image(opts),
                    artifacts=artifacts, version=opts.version if opts.version != 1 else None)
    header = "kubectl-triton model metadata."
    if opts.backend == "tensorrtllm":
        header = "kubectl-triton model metadata: what the overlays, the engine-build Job and `kubectl triton " \
                 "validate` read."
        llm, paths = opts.llm, llm_paths(opts)
        mbs = opts.max_batch_size if opts.max_batch_size is not None else 64
        doc["engine"] = Y.mapping(
            model_family=llm.model_family, checkpoint=paths["checkpoint"], tokenizer_dir=paths["tokenizer_dir"],
            engine_dir=paths["engine_dir"], tp=llm.tp, pp=llm.pp, dtype=llm.dtype, quantization=llm.quantization,
            max_batch_size=mbs, max_input_len=llm.max_input_len, max_seq_len=llm.max_seq_len,
            max_num_tokens=llm.max_num_tokens)
        if llm.nodes > 1:
            doc["engine"]["nodes"] = llm.nodes
            doc["engine"]["gpus_per_node"] = gpus_per_node(opts)
            Y.comment(doc["engine"], "nodes", "Served by a LeaderWorkerSet group: tp x pp = nodes x gpus_per_node.", 2)
    elif opts.backend == "vllm":
        header = "kubectl-triton model metadata; the vLLM engine arguments are in the Triton model's 1/model.json."
    if opts.hf_config is not None:
        doc["capacity"] = Y.mapping(hf_config=HF_CONFIG)
        Y.comment(doc, "capacity", "KV-cache capacity per GPU overlay (docs/capacity.md): validate and `kubectl triton "
                  "plan`\nread the checkpoint's config.json; add sequence_len and min_concurrent_sequences.", 0)
    return Y.dumps(doc, header)


def deployment_patch(opts: Options, triton_models: list[str]) -> str:
    """overlays/NAME/model/deployment.yaml: the strategic-merge patch of the base Deployment."""
    llm = opts.backend in ("tensorrtllm", "vllm")
    shm = "16Gi" if llm else "2Gi" if opts.backend in ("python", "ensemble") else "1Gi"
    img = image(opts)
    annotations = Y.mapping([(TRITON_MODELS_ANNOTATION, ",".join(sorted(triton_models)))])
    Y.comment(annotations, TRITON_MODELS_ANNOTATION,
              "The Triton models this Deployment serves: what `kubectl triton status` probes.", 4)
    spec = Y.mapping(progressDeadlineSeconds=1500 if llm else None)
    if llm:
        Y.comment(spec, "progressDeadlineSeconds",
                  "Engine loading takes longer than the base's 10 minutes; stays below the Flux timeout (30m).", 2)
    multinode = llm and opts.llm.nodes > 1
    minutes = 25 if multinode else 15 if llm else 5
    probe = Y.mapping(failureThreshold=minutes * 6)
    Y.comment(probe, "failureThreshold", f"{minutes} minutes to load the model(s) before liveness checks begin"
              + (" (the leader first waits up to 10 for its workers)." if multinode else "."), 12)
    init = Y.mapping(name="assemble-model-repository", image=img,
                     env=Y.seq([Y.mapping(name="ARTIFACTS_DIR", value=artifacts_dir(opts))]))
    server = Y.mapping(name="tritonserver", image=img)
    if opts.frontend == "openai":
        paths = llm_paths(opts)
        server["command"] = Y.flow(["python3", OPENAI_MAIN])
        server["args"] = Y.seq(["--model-repository=/models", f"--tokenizer={paths['tokenizer_dir']}",
                                f"--openai-port={OPENAI_PORT}", "--enable-kserve-frontends", "--kserve-http-port=8000",
                                "--kserve-grpc-port=8001"])
        release = re.match(r"(\d{2})\.(\d{2})(?:$|[-.])", opts.image_tag)
        if release and (int(release[1]), int(release[2])) >= LORA_SEPARATOR_SINCE:
            server["args"].append(f"--lora-separator={LORA_SEPARATOR}")
        Y.comment(server, "command", "Triton in-process behind the OpenAI-compatible frontend (docs/openai.md); KServe "
                  "v2 HTTP/gRPC stay on 8000/8001 for probes and status.", 10)
        if opts.backend == "tensorrtllm":
            server["env"] = Y.seq([Y.mapping(name="TRTLLM_ORCHESTRATOR", value="1")])
        server["ports"] = Y.seq([Y.mapping(name="openai", containerPort=OPENAI_PORT)])
    server.update(startupProbe=probe, resources=Y.mapping(
        requests=Y.mapping(memory="32Gi" if llm else "4Gi"), limits=Y.mapping(memory="64Gi" if llm else "8Gi")))
    dshm = Y.mapping(name="dshm", emptyDir=Y.mapping(medium="Memory", sizeLimit=shm))
    spec["template"] = Y.mapping(spec=Y.mapping(initContainers=Y.seq([init]), containers=Y.seq([server]),
                                                volumes=Y.seq([dshm])))
    doc = Y.mapping(apiVersion="apps/v1", kind="Deployment", metadata=Y.mapping(name="any", annotations=annotations),
                    spec=spec)
    return Y.dumps(doc)


def artifact_volume_patch(opts: Options) -> str:
    """overlays/NAME/model/artifact-volume.yaml: the artifacts volume as the model's OCI image, read-only."""
    return volume_patch(opts.name, parse_artifact(opts.artifact, opts.name))


def component_kustomization(opts: Options, model_files: list[str], layout: Layout = DEFAULT_LAYOUT) -> str:
    """overlays/NAME/model/kustomization.yaml: the model Component (model-config ConfigMap, Deployment patch)."""
    name = opts.name
    models = Layout.reference(layout.overlay_dir(name, MODEL_COMPONENT), layout.model_dir(name))
    header = (f"{name}: its Triton model repository (config.pbtxt and python model files from models/{name}/) "
              "and the\nsettings every GPU overlay of it shares. ConfigMap keys are repository paths with \"/\" "
              "written as \"__\".")
    generators = Y.seq([Y.mapping(name="model-config", files=Y.seq(
        f"{rel.replace('/', '__')}={models}/{rel}" for rel in model_files))])
    art = parse_artifact(opts.artifact, name)
    if art.source == "s3":
        generators.append(Y.mapping(name="artifact-source", literals=Y.seq(
            [f"ARTIFACTS_URI={art.uri}", f"ARTIFACTS_DIR={artifacts_dir(opts)}",
             *(nodecache.source_literals(name, opts.node_cache) if opts.node_cache else [])])))
    patches = Y.seq([Y.mapping(path="deployment.yaml", target=Y.mapping(kind="Deployment"))])
    if art.source == "oci":
        patches.append(Y.mapping(path=artifacts_mod.VOLUME_PATCH, target=Y.mapping(kind="Deployment")))
    if opts.frontend == "openai":
        port = Y.mapping(op="add", path="/spec/ports/-",
                         value=Y.mapping(name="openai", port=OPENAI_PORT, targetPort="openai"))
        clients = Y.mapping(namespaceSelector=Y.mapping(matchLabels=Y.mapping([("triton.kubectl.io/client", "true")])))
        rule = Y.mapping(op="add", path="/spec/ingress/-",
                         value=Y.mapping(**{"from": Y.seq([clients])}, ports=Y.seq([Y.mapping(port="openai")])))
        patches += [Y.mapping(target=Y.mapping(kind="Service"), patch=Y.literal(Y.dumps(Y.seq([port])))),
                    Y.mapping(target=Y.mapping(kind="NetworkPolicy"), patch=Y.literal(Y.dumps(Y.seq([rule]))))]
        Y.comment(patches, 1, f"The OpenAI-compatible frontend's port ({OPENAI_PORT}), for the clients of 8000.", 2)
    doc = Y.mapping(apiVersion="kustomize.config.k8s.io/v1alpha1", kind="Component",
                    resources=Y.seq([nodecache.VOLUME_FILE]) if opts.node_cache else None,
                    configMapGenerator=generators, patches=patches)
    return Y.dumps(doc, header)


def _instance_labels(name: str, multinode: bool = False) -> Any:
    """The labels transformer every serving overlay uses (selectors included, ServiceMonitor's created; a
    LeaderWorkerSet's pod templates, which kustomize does not know, named)."""
    pairs = Y.mapping([("app.kubernetes.io/name", "triton-inference-server"), ("app.kubernetes.io/instance", name)])
    fields = Y.seq([Y.mapping(path="spec/selector/matchLabels", kind="ServiceMonitor", create=True)])
    if multinode:
        fields += [Y.mapping(path=f"spec/leaderWorkerTemplate/{t}/metadata/labels", kind="LeaderWorkerSet",
                             create=True) for t in ("leaderTemplate", "workerTemplate")]
    return Y.seq([Y.mapping(pairs=pairs, includeSelectors=True, fields=fields)])


def serving_kustomization(opts: Options, gpu: str, layout: Layout = DEFAULT_LAYOUT,
                          triton_models: Sequence[str] = ()) -> str:
    """overlays/NAME/GPU/kustomization.yaml: base + model Component + GPU Component (+ S3, + tp x pp GPUs; for a
    group, the LeaderWorkerSet's shape and the `triton_models` annotation the deleted Deployment carried)."""
    here = layout.overlay_dir(opts.name, gpu)

    def ref(to: str) -> str:
        return Layout.reference(here, to)

    components = Y.seq([ref(layout.overlay_dir(opts.name, MODEL_COMPONENT)), ref(layout.gpu_component(gpu))])
    if parse_artifact(opts.artifact, opts.name).source == "s3":
        components.append(ref(layout.shared_component("artifacts/s3")))
        if opts.node_cache is not None:  # after the S3 Component, whose sync it wraps
            components.append(ref(layout.shared_component(nodecache.COMPONENT)))
    if opts.autoscaler == "keda":  # scale to zero: a KEDA ScaledObject instead of the base HPA
        components.append(ref(layout.shared_component("autoscaling/keda")))
    doc = Y.mapping(apiVersion="kustomize.config.k8s.io/v1beta1", kind="Kustomization", namespace=layout.namespace,
                    namePrefix=f"{opts.name}-",
                    labels=_instance_labels(opts.name, opts.backend == "tensorrtllm" and opts.llm.nodes > 1),
                    resources=Y.seq([ref(layout.base("triton"))]), components=components)
    if opts.autoscaler == "keda":
        doc["replacements"] = Y.seq([Y.mapping(path=ref(layout.shared_component("autoscaling/keda")) +
                                               "/replacements.yaml")])
    world = opts.llm.tp * opts.llm.pp if opts.backend in ("tensorrtllm", "vllm") else 1
    patches = Y.seq()
    if opts.route == "inferencepool":
        # The pool's endpoint pickers (same namespace) read Triton's metrics port; the base admits only monitoring.
        picker = Y.mapping(podSelector=Y.mapping(matchExpressions=Y.seq([Y.mapping(
            key="triton.kubectl.io/inference-pool", operator="Exists")])))
        rule = Y.mapping(op="add", path="/spec/ingress/-", value=Y.mapping(
            **{"from": Y.seq([picker])}, ports=Y.seq([Y.mapping(port="metrics")])))
        exempt = Y.mapping(op="add", path="/metadata/annotations", value=Y.mapping(
            [("triton.kubectl.io/security-exempt", "MetricsExposed: the InferencePool's endpoint picker, in this "
              "namespace, scores pods by their queue and KV-cache metrics")]))
        patches.append(Y.mapping(target=Y.mapping(kind="NetworkPolicy"),
                                 patch=Y.literal(Y.dumps(Y.seq([rule, exempt])))))
        Y.comment(patches, 0, "The InferencePool's endpoint picker scrapes Triton's metrics (queue, KV cache).", 2)
    if opts.backend == "tensorrtllm" and opts.llm.nodes > 1:
        components.append(ref(layout.base(MULTINODE_BASE)))
        group = group_patch(opts, triton_models)
        patches.append(Y.mapping(target=Y.mapping(kind="LeaderWorkerSet"), patch=Y.literal(Y.dumps(group))))
        Y.comment(patches, len(patches) - 1, f"{opts.llm.nodes} nodes x {gpus_per_node(opts)} GPUs = tp x pp = "
                  f"{world} ranks (docs/multinode.md).", 2)
    elif world > 1:
        op = Y.seq([Y.mapping(op="replace", path="/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu",
                              value=world)])
        patches.append(Y.mapping(target=Y.mapping(kind="Deployment"), patch=Y.literal(Y.dumps(op))))
        Y.comment(patches, len(patches) - 1, f"tp x pp = {world} GPUs per pod (the GPU Component asks for 1).", 2)
    if patches:
        doc["patches"] = patches
    return Y.dumps(doc)


def mpi_secret(name: str) -> str:
    """The SSH key Secret of a multi-node model's group (created out of git: docs/multinode.md)."""
    return f"{name}-mpi-ssh"


def group_patch(opts: Options, triton_models: Sequence[str] = ()) -> Any:
    """The serving overlay's JSON patch of the LeaderWorkerSet: group size, GPUs per pod, world size and the SSH
    key Secret (both templates hold the one tritonserver container of the base), and the triton-models annotation
    (the model Component puts it on the Deployment, which base/triton-multinode replaces by the group)."""
    per_node = gpus_per_node(opts)
    group = "/spec/leaderWorkerTemplate"
    ops = Y.seq([Y.mapping(op="replace", path=f"{group}/size", value=opts.llm.nodes)])
    if triton_models:
        ops.append(Y.mapping(op="add", path="/metadata/annotations", value=Y.mapping(
            [(TRITON_MODELS_ANNOTATION, ",".join(sorted(triton_models)))])))
    for template, key in (("leaderTemplate", "id_ed25519"), ("workerTemplate", "authorized_keys")):
        pod = f"{group}/{template}/spec"
        ops.append(Y.mapping(op="replace", path=f"{pod}/containers/0/resources/limits/nvidia.com~1gpu",
                             value=per_node))
        for name, value in (("WORLD_SIZE", opts.llm.tp * opts.llm.pp), ("GPUS_PER_NODE", per_node)):
            ops.append(Y.mapping(op="add", path=f"{pod}/containers/0/env/-",
                                 value=Y.mapping(name=name, value=str(value))))
        secret = Y.mapping(secretName=mpi_secret(opts.name), defaultMode=0o400,
                           items=Y.seq([Y.mapping(key=key, path=key)]))
        ops.append(Y.mapping(op="add", path=f"{pod}/volumes/-", value=Y.mapping(name="mpi-ssh", secret=secret)))
    return ops


def engine_build_kustomization(opts: Options, gpu: str, layout: Layout = DEFAULT_LAYOUT) -> str:
    """overlays/NAME/GPU-engine-build/kustomization.yaml: the engine-build Job for this model and GPU."""
    name = opts.name
    here = layout.overlay_dir(name, f"{gpu}{ENGINE_BUILD_SUFFIX}")
    meta = Layout.reference(here, f"{layout.model_dir(name)}/{MODEL_METADATA}")
    doc = Y.mapping(apiVersion="kustomize.config.k8s.io/v1beta1", kind="Kustomization", namespace=layout.namespace,
                    namePrefix=f"{name}-{gpu}-",
                    labels=Y.seq([Y.mapping(pairs=Y.mapping([("app.kubernetes.io/instance", name)]))]),
                    resources=Y.seq([Layout.reference(here, layout.base("engine-build"))]),
                    components=Y.seq([Layout.reference(here, layout.gpu_component(gpu))]),
                    configMapGenerator=Y.seq([Y.mapping(name="engine-build-model", files=Y.seq(
                        [f"model.yaml={meta}"]))]))
    img = image(opts)
    if img != BASE_ENGINE_BUILD_IMAGE:
        container = Y.mapping(name="engine-build", image=img,
                              env=Y.seq([Y.mapping(name="TRITON_IMAGE", value=img)]))
        job = Y.mapping(apiVersion="batch/v1", kind="Job", metadata=Y.mapping(name="any"), spec=Y.mapping(
            template=Y.mapping(spec=Y.mapping(containers=Y.seq([container])))))
        patches = Y.seq([Y.mapping(target=Y.mapping(kind="Job"), patch=Y.literal(Y.dumps(job)))])
        Y.comment(patches, 0, "The same image as serving: TensorRT-LLM versions must match at load time.", 2)
        doc["patches"] = patches
    return Y.dumps(doc)


def flux_kustomization(name: str, path: str, *, timeout: str, depends: tuple[str, ...] = (),
                       force: bool = False, layout: Layout = DEFAULT_LAYOUT) -> str:
    """clusters/CLUSTER/models/NAME.yaml: the Flux Kustomization that applies one overlay (dependsOn and sourceRef:
    the layout file's names)."""
    spec = Y.mapping(interval="10m", retryInterval="1m", timeout=timeout, path=layout.flux_path(path), prune=True,
                     wait=True, force=True if force else None)
    if force:
        Y.comment(spec, "force", "A Job's pod template is immutable: recreate it when the build options change.", 2)
    needs = (*layout.depends_on, *depends)
    if needs:
        spec["dependsOn"] = Y.seq(Y.mapping(name=d) for d in needs)
    source = Y.mapping(kind=layout.source_kind, name=layout.source_name)
    if layout.source_namespace != "flux-system":
        source["namespace"] = layout.source_namespace
    spec["sourceRef"] = source
    doc = Y.mapping(apiVersion="kustomize.toolkit.fluxcd.io/v1", kind="Kustomization",
                    metadata=Y.mapping(name=name, namespace="flux-system"), spec=spec)
    return Y.dumps(doc)


def _template(name: str) -> str:
    return data_text("templates", name)


# ---- the whole model --------------------------------------------------------------------------------

def model_files(opts: Options, facts: RepoFacts) -> dict[str, str]:
    """models/NAME/<triton model>/... files (config.pbtxt and python model files), keyed by path inside
    models/NAME/, in the order the model Component lists them."""
    files: dict[str, str] = {}
    if opts.backend == "tensorrtllm":
        configs = llm_configs(opts)
        comments = {
            "ensemble": "What clients call: text in, text out (POST /v2/models/ensemble/generate or "
                        "generate_stream).",
            "preprocessing": "Text -> token ids for the tensorrt_llm model (tokenizer from the model's Hugging "
                             "Face checkpoint).",
            "tensorrt_llm": "The TensorRT-LLM engine, in-flight batching. Takes token ids, not text: clients call "
                            "the \"ensemble\" model.",
            "postprocessing": "Token ids -> text.",
        }
        for model in LLM_MODELS:
            files[f"{model}/config.pbtxt"] = _dump(configs[model], comments[model])
            if model in ("preprocessing", "postprocessing"):  # llama3-8b's model.py, as .tmpl: not linted
                files[f"{model}/1/model.py"] = _template(f"tensorrtllm_{model}.py.tmpl")
        return files
    if opts.backend == "vllm":
        name = triton_name(opts.name)
        path = opts.llm.hf_model or f"{parse_artifact(opts.artifact, opts.name).pod_dir}/hf"
        files[f"{name}/config.pbtxt"] = _dump(scaffold_vllm.config(name, _schema()),
                                              f"vLLM backend: the engine arguments are in {opts.version}/"
                                              f"{scaffold_vllm.MODEL_JSON}; weights from {path}.")
        files[f"{name}/{opts.version}/{scaffold_vllm.MODEL_JSON}"] = scaffold_vllm.model_json(
            scaffold_vllm.engine_args(path, opts.llm.tp, opts.llm.pp, opts.llm.quantization, opts.vllm))
        return files
    if opts.backend == "ensemble":
        config = ensemble_config(opts, facts.members)
        chain = " -> ".join(f"{s.model_name}" for s in config.ensemble_scheduling.step)
        files[f"{config.name}/config.pbtxt"] = _dump(config, f"Ensemble: {chain}.")
        seen = set()
        for step in opts.steps:
            member = facts.members[step.model]
            if member.name in seen:
                continue
            seen.add(member.name)
            ordered = sorted(member.files, key=lambda p: (p != "config.pbtxt", p))
            for rel in ordered:
                files[f"{member.name}/{rel}"] = member.files[rel]
        return files
    config = single_config(opts)
    name = config.name
    art = parse_artifact(opts.artifact, opts.name)
    where = f"{art.uri}/{name}" if art.source == "s3" else f"the image {art.reference}: {art.path}/{name}" \
        if art.source == "oci" else f"/artifacts/{art.path}/{name}"
    comment = {
        "python": f"Python backend model: {opts.version}/model.py below (a starting point that answers zeros).",
    }.get(opts.backend, f"{opts.backend} model; the model file ({opts.version}/{MODEL_FILES[opts.backend]}) "
                        f"comes from the artifact store ({where}/).")
    files[f"{name}/config.pbtxt"] = _dump(config, comment)
    if opts.backend == "python":
        files[f"{name}/{opts.version}/model.py"] = _template("python_model.py")
    return files


def render(opts: Options, facts: RepoFacts) -> dict[str, str]:
    """Every file add-model writes, repository-relative path -> content (the cluster kustomization included)."""
    check_options(opts, facts)
    name, layout = opts.name, facts.layout
    inner = model_files(opts, facts)
    mdir = layout.model_dir(name)
    files = {f"{mdir}/{rel}": text for rel, text in inner.items()}
    files[f"{mdir}/{MODEL_METADATA}"] = model_yaml(opts)
    if opts.hf_config is not None:
        files[f"{mdir}/{HF_CONFIG}"] = opts.hf_config
    component = layout.overlay_dir(name, MODEL_COMPONENT)
    files[f"{component}/kustomization.yaml"] = component_kustomization(opts, list(inner), layout)
    triton_models = {rel.split("/", 1)[0] for rel in inner if rel.endswith("/config.pbtxt")}
    files[f"{component}/deployment.yaml"] = deployment_patch(opts, sorted(triton_models))
    oci = parse_artifact(opts.artifact, name).source == "oci"
    if oci:
        files[f"{component}/{artifacts_mod.VOLUME_PATCH}"] = artifact_volume_patch(opts)
    if opts.node_cache is not None:
        files[f"{component}/{nodecache.VOLUME_FILE}"] = nodecache.volume_file(name, opts.node_cache)
    flux_dir = layout.cluster_models_dir(facts.cluster)
    entries = []
    for index, gpu in enumerate(opts.gpus):
        files[f"{layout.overlay_dir(name, gpu)}/kustomization.yaml"] = serving_kustomization(opts, gpu, layout,
                                                                                         sorted(triton_models))
        if index:
            # One GPU type per model per cluster: the overlays render the same object names, so a second one
            # registered here would fight the first. Further --gpu overlays are for other clusters.
            continue
        depends: tuple[str, ...] = ()
        if opts.backend == "tensorrtllm" and not oci:  # an image carries its engines prebuilt
            build = f"{name}-{gpu}{ENGINE_BUILD_SUFFIX}"
            build_dir = layout.overlay_dir(name, f"{gpu}{ENGINE_BUILD_SUFFIX}")
            files[f"{build_dir}/kustomization.yaml"] = engine_build_kustomization(opts, gpu, layout)
            files[f"{flux_dir}/{build}.yaml"] = flux_kustomization(build, build_dir, timeout="2h", force=True,
                                                                   layout=layout)
            entries.append(f"{build}.yaml")
            depends = (build,)
        files[f"{flux_dir}/{name}-{gpu}.yaml"] = flux_kustomization(
            f"{name}-{gpu}", layout.overlay_dir(name, gpu),
            timeout="30m" if depends or opts.backend == "vllm" else "15m", depends=depends,
            layout=layout)
        entries.append(f"{name}-{gpu}.yaml")
    if opts.route == "inferencepool":
        multinode = opts.backend == "tensorrtllm" and opts.llm.nodes > 1
        for rel, text in inferencepool.route_files(name, sorted(triton_models), gateway=gateway_ref(opts.gateway),
                                                   multinode=multinode, picker=facts.picker,
                                                   openai=opts.frontend == "openai", layout=layout).items():
            files[f"{layout.overlay_dir(name, ROUTE_DIR)}/{rel}"] = text
        files[f"{flux_dir}/{name}-route.yaml"] = flux_kustomization(
            f"{name}-route", layout.overlay_dir(name, ROUTE_DIR), timeout="5m", depends=(f"{name}-{opts.gpus[0]}",),
            layout=layout)
        entries.append(f"{name}-route.yaml")
    source = f"{flux_dir}/kustomization.yaml"
    stale = [e for e in facts.flux_entries if e not in entries]
    updated = edit_resources(facts.cluster_kustomization, add=entries, remove=stale, source=source)
    if updated != facts.cluster_kustomization:
        files[source] = updated
    return files


def plan(opts: Options, facts: RepoFacts, *, force: bool = False) -> Plan:
    """The files to write and, with `force`, this model's old files that the new set no longer has.
    Without `force` an existing model is refused."""
    files = render(opts, facts)
    if facts.model_files and not force:
        shown = ", ".join(sorted({"/".join(p.split("/")[:2]) if not p.startswith(f"{facts.layout.clusters}/") else p
                                  for p in facts.model_files})[:3])
        raise InputError(f"{opts.name}: the model already exists ({shown}); pass --force to rewrite its files")
    delete = tuple(p for p in sorted(facts.model_files) if p not in files)
    return Plan(files, delete)


# ---- I/O: reading the repository --------------------------------------------------------------------

def gpu_keys(repo: Repository) -> tuple[str, ...]:
    """GPU types this repository has a Component for (<gpus>/<key>/kustomization.yaml)."""
    return tuple(repo.gpu_components)


def resolve_cluster(root: Path, cluster: str | None) -> str:
    """--cluster, or the only cluster folder; it must hold models/kustomization.yaml."""
    layout = Repository.at(root).layout
    top = root / layout.clusters
    names = sorted(p.name for p in top.iterdir()
                   if (root / layout.cluster_models_dir(p.name) / "kustomization.yaml").is_file()) \
        if top.is_dir() else []
    if cluster is None:
        if len(names) == 1:
            return names[0]
        if not names:
            raise InputError(f"{top}: no cluster folder with models/kustomization.yaml")
        raise InputError(f"--cluster: this repository has several clusters ({', '.join(names)}); name one")
    if cluster not in names:
        raise InputError(f"--cluster {cluster!r}: no {layout.cluster_models_dir(cluster)}/kustomization.yaml; "
                         f"available: {', '.join(names) or 'none'}")
    return cluster


def _files_under(root: Path, rel: str) -> list[str]:
    top = root / rel
    if not top.is_dir():
        return []
    return sorted(p.relative_to(root).as_posix() for p in top.rglob("*") if p.is_file() or p.is_symlink())


def find_members(root: Path, steps: tuple[Step, ...], exclude: str, layout: Layout) -> dict[str, Member]:
    """The models ensemble steps name: models/*/MODEL/ (or models/DIR/MODEL/), models/`exclude` skipped."""
    out: dict[str, Member] = {}
    models = root / layout.models
    for step in steps:
        if step.model in out:
            continue
        if "/" in step.model:
            candidates = [models / step.model / "config.pbtxt"]
        else:
            candidates = sorted(models.glob(f"*/{step.model}/config.pbtxt"))
        found = [c for c in candidates if c.is_file() and c.parent.parent.name != exclude]
        if not found:
            raise InputError(f"--step {step.model!r}: unknown model (no {layout.models}/*/{step.model}/config.pbtxt)")
        if len(found) > 1:
            where = ", ".join(c.parent.relative_to(root).as_posix() for c in found)
            raise InputError(f"--step {step.model!r}: several models of that name ({where}); write DIR/MODEL")
        folder = found[0].parent
        config = pbtxt.load(found[0])
        files = {}
        for p in sorted(folder.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                try:
                    files[p.relative_to(folder).as_posix()] = p.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as err:
                    raise InputError(f"{p}: cannot read: {getattr(err, 'strerror', None) or err}") from None
        out[step.model] = Member(folder.name, folder.relative_to(root).as_posix(), config, files)
    return out


def read_facts(root: Path, opts: Options, cluster: str | None) -> RepoFacts:
    """Everything `render`/`plan` need from the repository at `root`."""
    validate_name(opts.name)
    name = opts.name
    repo = Repository.at(root)
    layout = repo.layout
    overlay_dir = root / layout.overlay_dir(name)
    if overlay_dir.is_dir() and not (overlay_dir / MODEL_COMPONENT).is_dir() \
            and not (root / layout.model_dir(name)).is_dir():
        raise InputError(f"NAME {name!r}: {layout.overlay_dir(name)}/ is not a model's overlay folder (no "
                         f"{MODEL_COMPONENT}/ Component); pick another NAME")
    cluster_name = resolve_cluster(root, cluster)
    flux_dir = layout.cluster_models_dir(cluster_name)
    kfile = root / flux_dir / "kustomization.yaml"
    try:
        ktext = kfile.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{kfile}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    existing = _files_under(root, layout.model_dir(name)) + _files_under(root, layout.overlay_dir(name))
    flux_entries = []
    prefix = f"./{layout.overlay_dir(name)}/"
    for fk in flux_kustomizations(root, root / layout.cluster_dir(cluster_name)):
        if fk.path.rstrip("/").startswith(prefix) or fk.path.rstrip("/") == prefix.rstrip("/"):
            rel = fk.file.relative_to(root).as_posix()
            if rel not in existing and fk.file.parent == kfile.parent:
                existing.append(rel)
                flux_entries.append(fk.file.name)
    for gpu in opts.gpus:  # a Flux file we would write that belongs to nobody yet still counts as existing
        for fname in (f"{name}-{gpu}.yaml", f"{name}-{gpu}-engine-build.yaml"):
            rel = f"{flux_dir}/{fname}"
            if (root / rel).exists() and rel not in existing:
                existing.append(rel)
    members = find_members(root, opts.steps, exclude=name, layout=layout) if opts.backend == "ensemble" else {}
    picker = None
    if opts.route == "inferencepool":
        picker = platform_picker(root, LAYOUT_FILE)
    rel = f"{flux_dir}/{name}-route.yaml"
    if (root / rel).exists() and rel not in existing:
        existing.append(rel)
    return RepoFacts(gpus=gpu_keys(repo), cluster=cluster_name, cluster_kustomization=ktext, members=members,
                     model_files=tuple(sorted(existing)), flux_entries=tuple(flux_entries), picker=picker,
                     layout=layout)


# ---- I/O: writing all or nothing --------------------------------------------------------------------

_replace = os.replace  # tests patch this to inject failures in the middle of a write


def write_plan(root: Path, todo: Plan) -> None:
    """Write every file of `todo` into a temporary folder inside `root`, then move them into place; on any
    failure undo every move, so the tree is byte-for-byte as before. Raises InputError naming the file."""
    root = root.resolve()

    for rel in [*todo.files, *todo.delete]:
        if rel.startswith("/") or ".." in rel.split("/"):
            raise InputError(f"{rel}: refusing a path outside the repository")
        confine(root, rel.rsplit("/", 1)[0] if "/" in rel else ".")  # no folder may be a symlink out of root
    for rel in todo.files:
        target = root / rel
        if target.is_dir() and not target.is_symlink():
            raise InputError(f"{rel}: is a directory; remove it first")
        for parent in target.relative_to(root).parents:
            p = root / parent
            if str(parent) != "." and p.exists() and not p.is_dir():
                raise InputError(f"{parent.as_posix()}: is a file, but {rel} needs it to be a folder")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".kubectl-triton-add-model.", dir=root))
    except OSError as err:
        raise InputError(f"{root}: cannot write: {err.strerror or err}; nothing was changed") from None
    journal: list[tuple[str, Path, Path | None]] = []
    current = ""
    try:
        for rel, text in todo.files.items():
            current = rel
            staged = tmp / "new" / rel
            staged.parent.mkdir(parents=True, exist_ok=True)
            with open(staged, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
        for rel in [*todo.delete, *todo.files]:
            current = rel
            target = root / rel
            if target.exists() or target.is_symlink():
                backup = tmp / "old" / rel
                backup.parent.mkdir(parents=True, exist_ok=True)
                _replace(target, backup)
                journal.append(("moved", target, backup))
            if rel not in todo.files:
                continue
            missing = [p for p in reversed(target.parents) if not p.exists()]
            for p in missing:
                p.mkdir()
                journal.append(("mkdir", p, None))
            _replace(tmp / "new" / rel, target)
            journal.append(("placed", target, None))
    except (OSError, InputError) as err:
        leftover = _rollback(journal)
        if not leftover:
            shutil.rmtree(tmp, ignore_errors=True)
        reason = getattr(err, "strerror", None) or getattr(err, "message", None) or str(err)
        extra = f"; could not restore {len(leftover)} file(s), backups kept in {tmp}" if leftover else \
            "; nothing was changed"
        raise InputError(f"{current}: cannot write: {reason}{extra}") from None
    except BaseException:
        leftover = _rollback(journal)
        if not leftover:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    for rel in todo.delete:  # folders the deletions emptied
        for parent in (root / rel).parents:
            if parent == root or not parent.is_dir() or any(parent.iterdir()):
                break
            parent.rmdir()


def _rollback(journal: list[tuple[str, Path, Path | None]]) -> list[Path]:
    """Undo the journal in reverse; returns the paths that could not be restored."""
    failed = []
    for action, path, backup in reversed(journal):
        try:
            if action == "placed":
                path.unlink()
            elif action == "mkdir":
                path.rmdir()
            elif backup is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                os.replace(backup, path)
        except OSError:
            failed.append(path)
    return failed
