"""What every model-configuration rule shares: the Issue it yields, the folder facts, Triton's defaults table,
and the model checks' declarations in the registry. Rule modules import this one, never each other's entry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kubectl_triton.checks.registry import Check, Severity, register
from kubectl_triton.datafiles import data_text
from kubectl_triton.formats import yamlio
from kubectl_triton.formats.pbtxt import schema

WILDCARD = -1

CONFIG_SYNTAX = register("ConfigSyntax", "error", "model", "config.pbtxt does not parse with Triton's protobuf schema",
                         "fix the syntax or the unknown field at the line and column named")
MODEL_NAME = register("ModelName", "error", "model", "the model name differs from its folder name",
                      "set `name` to the folder name, or drop it (Triton then uses the folder name)")
PLATFORM = register("Platform", "error", "model", "platform and backend are missing, unknown or contradict each other",
                    "name a backend Triton knows (or the platform matching it) and the model file it expects")
MAX_BATCH_SIZE = register("MaxBatchSize", "error", "model", "max_batch_size is negative or contradicts the batcher",
                          "set max_batch_size >= 0; > 0 is needed for dynamic or sequence batching")
DYNAMIC_BATCHING = register("DynamicBatching", "error", "model", "dynamic_batching settings Triton refuses",
                            "preferred batch sizes must be positive and <= max_batch_size; keep max_batch_size > 0")
PRIORITY = register("PriorityLevels", "error", "model", "priority levels and queue policies that do not match",
                    "keep default_priority_level and priority_queue_policy keys within 1..priority_levels")
PRESERVE_ORDERING = register("PreserveOrdering", "error", "model",
                             "preserve_ordering on a decoupled model, or with a batcher that forbids it",
                             "drop preserve_ordering or the conflicting setting")
SEQUENCE_BATCHING = register("SequenceBatching", "error", "model",
                             "sequence batcher controls, states or strategy that Triton refuses",
                             "one control per kind, typed tensors for the controls, states with valid dims")
RESPONSE_CACHE = register("ResponseCache", "error", "model", "response cache on a model that cannot use it",
                          "disable response_cache on decoupled and sequence models")
ENSEMBLE_SCHEDULING = register("EnsembleScheduling", "error", "model",
                               "ensemble_scheduling on a non-ensemble model, or an ensemble without it",
                               "use ensemble_scheduling only with platform \"ensemble\", and always there")
MODEL_METRICS = register("ModelMetrics", "error", "model", "model_metrics settings Triton refuses",
                         "give each metric_control a family and valid histogram buckets")
MODEL_IO = register("ModelIO", "error", "model", "inputs or outputs with bad names, types, dims or reshapes",
                    "every tensor needs a unique name, a data type and dims (-1 for variable) that fit reshape")
BATCH_IO = register("BatchIO", "error", "model", "batch_input / batch_output entries that name unknown tensors",
                    "point source_input and target_name at tensors the model declares")
INSTANCE_GROUP = register("InstanceGroup", "error", "model", "instance groups Triton refuses",
                          "use a valid kind and count, and GPU ids the node has")
VERSION_POLICY = register("VersionPolicy", "error", "model", "the version policy selects no version folder",
                          "add the version folder, or change version_policy to select an existing one")
ENSEMBLE = register("EnsembleGraph", "error", "model",
                    "ensemble steps whose tensors are unused, unwritten, written twice or mismatched",
                    "map every ensemble input to a step input and every ensemble output from one step output")
ENSEMBLE_MODEL = register("EnsembleModelMissing", "error", "model",
                          "an ensemble step names a model that the repository does not hold or that fails",
                          "add the model folder, fix the failing model, or correct model_name in the step")
ENSEMBLE_CYCLE = register("EnsembleCycle", "error", "model", "ensembles that include each other",
                          "break the cycle: an ensemble may not reach itself through its steps")
ENSEMBLE_BATCH = register("EnsembleBatchSize", "error", "model",
                          "an ensemble's max_batch_size exceeds one of its composing models'",
                          "lower the ensemble's max_batch_size to the smallest of its steps")
ENSEMBLE_DECOUPLED = register("EnsembleDecoupled", "error", "model",
                              "a decoupled step inside an ensemble that is not decoupled",
                              "set model_transaction_policy { decoupled: true } on the ensemble")
TRTLLM_PARAMETER = register("TRTLLMParameter", "error", "model",
                            "a tensorrtllm parameter is missing or holds a value the backend refuses",
                            "set the parameter as TensorRT-LLM's in-flight batcher documents it")
TRTLLM_PLACEHOLDER = register("TRTLLMPlaceholder", "error", "model",
                              "a mandatory parameter is still a ${...} placeholder of the TensorRT-LLM template",
                              "fill it (tools/fill_template.py); optional placeholders may stay")
TRTLLM_DECOUPLED = register("TRTLLMDecoupled", "error", "model",
                            "streaming is requested from a tensorrtllm model that is not decoupled",
                            "set model_transaction_policy { decoupled: true } on the tensorrtllm model")
TRTLLM_TEXT_INPUT = register("TRTLLMTextInput", "error", "model",
                             "a tensorrtllm model is fed text instead of token ids",
                             "put the preprocessing model (tokenizer) in front of it, as the ensemble does")
WARMUP = register(
    "WarmupInvalid", "error", "model",
    "A model_warmup sample that makes Triton refuse the model when it loads (variable or negative dims, no data "
    "source, a missing or too short input_data_file, too few or many model inputs, another data type or shape, a "
    "batch size above max_batch_size); a warning where Triton loads the model anyway: a batch_size 0 sample (skipped "
    "unchecked), only passive instances (no warmup at all), a sample input the model does not declare (passed on "
    "unchecked), a required input left out where optional ones make up the count.",
    "Give every sample input fixed dims, a data type and zero_data/random_data/input_data_file matching the "
    "model's inputs, and a batch_size from 1 to max_batch_size (1 without batching); drop or rename inputs the "
    "model does not declare.")
INITIAL_STATE = register(
    "InitialStateInvalid", "error", "model",
    "An implicit state's initial_state does not match the state (data type, number and size of dims, name, data).",
    "Give initial_state the state's data type and fixed dims of the state's shape, a name and zero_data or "
    "data_file.")
MODEL_CONFIG_MISSING = register(
    "ModelConfigMissing", "error", "model",
    "A folder of the model repository has no config.pbtxt at its top level (committed under a version folder, or "
    "left to auto-complete): Triton treats every folder as a model, and with auto-complete disabled it fails.",
    "Put config.pbtxt directly in the model's folder (models/<model>/<triton model>/config.pbtxt), or remove the "
    "folder.")
TRITON_LOAD = register("TritonLoadFailed", "error", "model",
                       "the real tritonserver (validate --triton) refused to load the model",
                       "read Triton's message; it names the field or file to fix")


@dataclass(frozen=True)
class Issue:
    """One problem in one model's configuration, before it is tied to a file and line. `object` is the field
    (`dynamic_batching.preferred_batch_size`, `input 'x'`, `ensemble_scheduling.step[2]`) and `needle` a field
    name or quoted value inside it, both located in the parsed text (formats.pbtxt.locate); `severity` overrides
    the check's own where a rule grades a case."""

    check: Check
    message: str
    object: str | None = None
    needle: str | None = None
    severity: Severity | None = None
    index: int = 0  # which occurrence of a repeated field (or list value) the issue is about

    @property
    def code(self) -> str:
        return self.check.code

    @property
    def level(self) -> Severity:
        return self.severity or self.check.severity


@dataclass(frozen=True)
class DataFile:
    """One data file of a model folder as Triton 2.51 reads it for a warmup input (backend_model_instance.cc
    GenerateWarmupData reads the whole file; infer_request.cc ValidateBytesInputs walks TYPE_STRING data as
    elements of a 4-byte little-endian length and that many bytes). `elements`: the length indicators the walk
    reads before the data ends; `tail`: how it ends: "" at an element boundary, "indicator" with `left` (1-3) bytes
    too few for a length, "truncated" inside the last element. `elements` is None for a file too large to walk."""

    size: int
    elements: int | None = None
    tail: str = ""
    left: int = 0

    @classmethod
    def read(cls, data: bytes) -> DataFile:
        pos = elements = 0
        while pos < len(data):
            if len(data) - pos < 4:
                return cls(len(data), elements, "indicator", len(data) - pos)
            length = int.from_bytes(data[pos:pos + 4], "little")
            elements += 1
            pos += 4 + length
        return cls(len(data), elements, "truncated" if pos > len(data) else "")


@dataclass(frozen=True)
class ModelFolder:
    """What the checks know of a model's folder besides its config.pbtxt."""

    name: str
    versions: tuple[int, ...] = ()
    version_files: frozenset[str] = field(default_factory=frozenset)
    # files under warmup/ and initial_state/ ("warmup/input.bin"); None: not known (only the config was read)
    data_files: frozenset[str] | None = None
    # what is known of each of those files (size, layout as TYPE_STRING data); a file missing here: not known
    data: Mapping[str, DataFile] = field(default_factory=dict, hash=False)
    # folders Triton skips though they look like versions: numbers with a leading zero ("01")
    skipped: tuple[str, ...] = ()


@cache
def table() -> dict[str, Any]:
    """kubectl_triton/data/model_config.yaml."""
    return yamlio.load_data(data_text("model_config.yaml"), "model_config.yaml")


def pb_schema() -> Any:
    """Triton's model_config_pb2 module."""
    return schema()


def is_ensemble(config: Any) -> bool:
    return bool(config.platform == table()["ensemble_platform"])


def policy_kind(config: Any) -> str:
    """`latest`, `specific` or `all`, as Triton reads version_policy: no field is latest 1 (NormalizeModelConfig),
    an empty one (`version_policy {}`) is all (VersionsToLoad in model_lifecycle.cc)."""
    if not config.HasField("version_policy"):
        return "latest"
    return config.version_policy.WhichOneof("policy_choice") or "all"


def selected_versions(config: Any, available: tuple[int, ...]) -> set[int]:
    """The versions Triton loads from `available` under the model's version_policy."""
    which = policy_kind(config)
    policy = config.version_policy
    if which == "all":
        return set(available)
    if which == "specific":
        return set(policy.specific.versions) & set(available)
    latest = policy.latest.num_versions if policy.HasField("latest") else 1
    return set(sorted(available)[-latest:]) if latest > 0 else set()


def served_versions(config: Any, available: list[int] | None = None) -> tuple[str, list[int]]:
    """The policy kind (`specific`, `latest`, `all`) and the versions it names (`latest`: its count;
    with `available` version folders known, the versions it would serve)."""
    policy = config.version_policy
    kind = policy_kind(config)
    if kind == "specific":
        return kind, sorted(policy.specific.versions)
    if kind == "all":
        return kind, sorted(available or [])
    count = policy.latest.num_versions if policy.HasField("latest") else 1
    return kind, sorted(available or [])[-max(count, 1):] if available else [count]


def without_policy(config: Any) -> Any:
    out = type(config)()
    out.CopyFrom(config)
    out.ClearField("version_policy")
    return out
