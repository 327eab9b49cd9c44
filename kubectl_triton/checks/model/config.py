"""Single-model rules: what Triton's core refuses when it loads one model configuration.

Each rule restates a check of Triton's model_config_utils.cc (ValidateModelConfig, ValidateModelIOConfig,
ValidateInstanceGroup, ...) and words its message the way Triton does, so a finding reads like the
server log line the user would otherwise meet after deploying. Rules are pure: a parsed ModelConfig
(and what is known of its folder) in, `Issue`s out; `checks.modelrepo` turns them into Findings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubectl_triton.checks.findings import WARNING
from kubectl_triton.checks.model.base import (
    BATCH_IO,
    DYNAMIC_BATCHING,
    ENSEMBLE_SCHEDULING,
    INITIAL_STATE,
    INSTANCE_GROUP,
    MAX_BATCH_SIZE,
    MODEL_IO,
    MODEL_METRICS,
    MODEL_NAME,
    PLATFORM,
    PRESERVE_ORDERING,
    PRIORITY,
    RESPONSE_CACHE,
    SEQUENCE_BATCHING,
    VERSION_POLICY,
    WARMUP,
    WILDCARD,
    DataFile,
    Issue,
    ModelFolder,
    is_ensemble,
    pb_schema,
    selected_versions,
    table,
)
from kubectl_triton.checks.model.ensemble import check_ensemble_scheduling
from kubectl_triton.checks.model.tensorrtllm import check_tensorrtllm

# --------------------------------------------------------------------------- autofill


def _platform(config: Any, data: dict) -> Any:
    """The platform a known backend gets when none is given (tensorrt: tensorrt_plan, ...)."""
    if not config.platform and config.backend in data["backend_platform"]:
        config.platform = data["backend_platform"][config.backend]
    return config


def autofill(config: Any, folder: ModelFolder) -> tuple[Any, list[Issue]]:
    """A copy of `config` with name, backend and platform filled in as Triton's server-side
    autocomplete does (AutoCompleteBackendFields); issues when the backend cannot be determined."""
    data = table()
    filled = type(config)()
    filled.CopyFrom(config)
    issues: list[Issue] = []
    if not filled.name:
        filled.name = folder.name
    if filled.backend or filled.platform == data["ensemble_platform"]:
        if not filled.backend and filled.platform in data["platform_backend"]:
            filled.backend = data["platform_backend"][filled.platform]
        return _platform(filled, data), issues
    if filled.platform in data["platform_backend"]:
        filled.backend = data["platform_backend"][filled.platform]
        return _platform(filled, data), issues
    by_file = data["default_filenames"]
    if filled.default_model_filename in by_file:
        filled.backend = by_file[filled.default_model_filename]
        return _platform(filled, data), issues
    if not filled.platform and not filled.default_model_filename:
        for fname in by_file:  # in Triton's order, not the folder's
            if fname in folder.version_files:
                filled.backend = by_file[fname]
                return _platform(filled, data), issues
        if "." in folder.name:
            filled.backend = folder.name.split(".", 1)[1]
            return filled, issues
        if folder.versions:
            issues.append(Issue(PLATFORM,
                f"Invalid model name: Could not determine backend for model '{folder.name}' with no "
                "backend in model configuration. Expected model name of the form "
                "'model.<backend_name>'.", "backend"))
        else:
            issues.append(Issue(PLATFORM,
                f"must specify 'platform' or 'backend' for '{filled.name}': without them Triton guesses "
                "the backend from the model files of the first version folder, and there is none here",
                "backend", None, WARNING))
    return filled, issues


# --------------------------------------------------------------------------- top-level rules


def check_name_and_platform(config: Any, folder: ModelFolder) -> Iterator[Issue]:
    """Folder name equals model name; platform/backend pair is one Triton knows."""
    data = table()
    name = config.name
    if name != folder.name:
        yield Issue(MODEL_NAME,
                    f"unexpected directory name '{folder.name}' for model '{name}', directory name "
                    "must equal model name", "name", f'"{name}"')
    ensemble = data["ensemble_platform"]
    if config.platform == ensemble and config.backend:
        yield Issue(PLATFORM,
                    f"Ensemble model '{name}' must have platform type '{ensemble}' and empty backend type",
                    "backend", "backend")
        return
    if not config.backend and config.platform and config.platform != ensemble:
        yield Issue(PLATFORM, f"unexpected platform type '{config.platform}' for {name}",
                    "platform", "platform")
        return
    allowed = data["backends"].get(config.backend)
    if allowed is not None and config.platform not in allowed:
        yield Issue(PLATFORM,
                    f"unexpected 'platform' and 'backend' pair, got:{config.platform}, {config.backend}",
                    "platform", "platform")


def check_batching(config: Any) -> Iterator[Issue]:
    """max_batch_size, dynamic batching sizes, priority levels and preserve_ordering."""
    name = config.name
    if config.max_batch_size < 0:
        yield Issue(MAX_BATCH_SIZE, f"'max_batch_size' must be non-negative value for {name}",
                    "max_batch_size", "max_batch_size")
    if not config.HasField("dynamic_batching"):
        return
    db = config.dynamic_batching
    for index, size in enumerate(db.preferred_batch_size):
        if size <= 0:
            yield Issue(DYNAMIC_BATCHING,
                        f"dynamic batching preferred size must be positive for {name}",
                        "dynamic_batching.preferred_batch_size", "preferred_batch_size", index=index)
            break
        if size > config.max_batch_size:
            yield Issue(DYNAMIC_BATCHING,
                        f"dynamic batching preferred size must be <= max batch size for {name} "
                        f"(preferred {size}, max_batch_size {config.max_batch_size})",
                        "dynamic_batching.preferred_batch_size", "preferred_batch_size", index=index)
            break
    levels = db.priority_levels
    if levels:
        if db.default_priority_level == 0 or db.default_priority_level > levels:
            yield Issue(PRIORITY,
                        f"default priority level must be in range [1, {levels}] for {name}",
                        "dynamic_batching.default_priority_level", "default_priority_level")
        for level in db.priority_queue_policy:
            if level == 0 or level > levels:
                yield Issue(PRIORITY,
                            f"priority queue policy must have priority level in range [1, {levels}] "
                            f"for {name}", "dynamic_batching.priority_queue_policy", "priority_queue_policy")
                break
    if db.preserve_ordering:
        if levels > 1:
            yield Issue(PRESERVE_ORDERING,
                        f"Only one priority level is allowed when 'preserve_ordering' is true for {name}",
                        "dynamic_batching.preserve_ordering", "preserve_ordering")
        delay = pb_schema().ModelQueuePolicy.DELAY
        policies = [db.default_queue_policy, *db.priority_queue_policy.values()]
        if any(p.default_timeout_microseconds != 0 and p.timeout_action == delay for p in policies):
            yield Issue(PRESERVE_ORDERING,
                        "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is "
                        f"true for {name}", "dynamic_batching.default_queue_policy", "timeout_action")


def _control_issues(batcher: Any, name: str, kind: int, typed: bool) -> Iterator[Issue]:
    """One sequence-batching control kind (GetBooleanSequenceControlProperties and its typed twin)."""
    s = pb_schema()
    kind_name = s.ModelSequenceBatching.Control.Kind.Name(kind)
    seen_tensors: set[str] = set()
    seen = False
    for control_input in batcher.control_input:
        tensor = control_input.name
        obj = f"sequence_batching.control_input '{tensor}'"
        if not tensor:
            yield Issue(SEQUENCE_BATCHING,
                        f"sequence batching control tensor must have a name for {name}",
                        "sequence_batching.control_input", "control_input")
            return
        if tensor in seen_tensors:
            yield Issue(SEQUENCE_BATCHING,
                        f"sequence batching control tensor '{tensor}' is specified for multiple control "
                        f"kinds for {name}", obj, f'"{tensor}"')
            return
        seen_tensors.add(tensor)
        for c in control_input.control:
            if c.kind != kind:
                continue
            if seen:
                yield Issue(SEQUENCE_BATCHING,
                            f"sequence batching specifies multiple {kind_name} tensors for {name}",
                            obj, kind_name)
                return
            seen = True
            given = [f for f in ("int32_false_true", "fp32_false_true", "bool_false_true")
                     if len(getattr(c, f))]
            if typed:
                if given:
                    yield Issue(SEQUENCE_BATCHING,
                                "sequence batching must not specify either 'int32_false_true', "
                                f"'fp32_false_true' or 'bool_false_true' for {kind_name} for {name}",
                                obj, kind_name)
                    return
                allowed = table()["corrid_data_types"]
                type_name = s.DataType.Name(c.data_type)
                if type_name not in allowed:
                    yield Issue(SEQUENCE_BATCHING,
                                f"unexpected data type for control {kind_name} for {name}. Allowed data "
                                "types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and "
                                "TYPE_STRING", obj, kind_name)
                    return
                continue
            if not given:
                yield Issue(SEQUENCE_BATCHING,
                            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' "
                            f"or 'bool_false_true' for {kind_name} for {name}", obj, kind_name)
                return
            if len(given) > 1:
                yield Issue(SEQUENCE_BATCHING,
                            "sequence batching specifies more than one from 'int32_false_true', "
                            f"'fp32_false_true' and 'bool_false_true' for {kind_name} for {name}",
                            obj, kind_name)
                return
            if len(getattr(c, given[0])) != 2:
                yield Issue(SEQUENCE_BATCHING,
                            f"sequence batching control '{given[0]}' must have exactly 2 entries for "
                            f"{kind_name} for {name}", obj, given[0])
                return


def check_sequence_batching(config: Any) -> Iterator[Issue]:
    """Sequence batcher controls, oldest-first preferred sizes, direct slot utilization."""
    if not config.HasField("sequence_batching"):
        return
    name = config.name
    if config.response_cache.enable:
        yield Issue(RESPONSE_CACHE,
                    f"Response Cache does not currently support model {name} with sequence batching "
                    "scheduler. Please disable the response cache.", "response_cache", "response_cache")
    sb = config.sequence_batching
    kinds = pb_schema().ModelSequenceBatching.Control
    for kind in (kinds.CONTROL_SEQUENCE_START, kinds.CONTROL_SEQUENCE_END, kinds.CONTROL_SEQUENCE_READY):
        problems = list(_control_issues(sb, name, kind, typed=False))
        yield from problems
        if problems:
            return
    yield from _control_issues(sb, name, kinds.CONTROL_SEQUENCE_CORRID, typed=True)
    if sb.HasField("oldest"):
        for index, size in enumerate(sb.oldest.preferred_batch_size):
            if size <= 0:
                yield Issue(SEQUENCE_BATCHING,
                            f"sequence batching preferred batch size must be positive for {name}",
                            "sequence_batching.oldest.preferred_batch_size", "preferred_batch_size", index=index)
                break
            if size > config.max_batch_size:
                yield Issue(SEQUENCE_BATCHING,
                            f"sequence batching preferred batch size must be <= max batch size for {name}",
                            "sequence_batching.oldest.preferred_batch_size", "preferred_batch_size", index=index)
                break
    if sb.HasField("direct") and not 0.0 <= sb.direct.minimum_slot_utilization <= 1.0:
        yield Issue(SEQUENCE_BATCHING,
                    f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}",
                    "sequence_batching.direct", "minimum_slot_utilization")


def check_scheduling_kind(config: Any) -> Iterator[Issue]:
    """ensemble_scheduling only with platform ensemble, and required by it; decoupled vs cache;
    model metrics complete."""
    name = config.name
    ensemble = table()["ensemble_platform"]
    if config.HasField("ensemble_scheduling") and config.platform != ensemble:
        yield Issue(ENSEMBLE_SCHEDULING,
                    f"ensemble scheduling cannot be set for model '{name}' whose platform is not {ensemble}",
                    "ensemble_scheduling", "ensemble_scheduling")
    elif not config.HasField("ensemble_scheduling") and config.platform == ensemble:
        yield Issue(ENSEMBLE_SCHEDULING,
                    f"ensemble scheduling must be set for ensemble {name} whose platform is {ensemble}",
                    "ensemble_scheduling", "platform")
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        yield Issue(RESPONSE_CACHE,
                    f"Response Cache does not currently support model {name} with 'decoupled' transaction "
                    "policy. Please disable the response cache.", "response_cache", "response_cache")
    for mc in config.model_metrics.metric_control:
        problem = None
        if not mc.HasField("metric_identifier"):
            problem = "metric control must specify 'metric_identifier'"
        elif not mc.metric_identifier.family:
            problem = "metric identifier must specify non-empty 'family'"
        elif not mc.HasField("histogram_options"):
            problem = "metric control must specify 'histogram_options'"
        elif not mc.histogram_options.buckets:
            problem = "histogram options must specify non-empty 'buckets'"
        if problem:
            yield Issue(MODEL_METRICS, f"{problem} for {name}", "model_metrics", "metric_control")
            break


# --------------------------------------------------------------------------- inputs and outputs


def _element_count(dims: Any) -> int:
    """Product of dims; -1 when any is variable (Triton's GetElementCount)."""
    count = 1
    for d in dims:
        if d == WILDCARD:
            return WILDCARD
        count *= d
    return count


def _trunks(dims: Any) -> list[int]:
    """Element counts of the runs separated by variable-size dimensions."""
    counts, current = [], 1
    for d in dims:
        if d == WILDCARD:
            counts.append(current)
            current = 1
        else:
            current *= d
    counts.append(current)
    return counts


def io_shape_problem(io: Any, max_batch_size: int) -> str | None:
    """Triton's ValidateIOShape: the first problem with one tensor's name, type, dims and reshape."""
    if not io.name:
        return "must specify 'name'"
    prefix = f"'{io.name}' "
    if io.data_type == 0:  # TYPE_INVALID
        return prefix + "must specify 'data_type'"
    if not io.dims:
        return prefix + "must specify 'dims'"
    has_reshape = io.HasField("reshape")
    if has_reshape and not io.reshape.shape and max_batch_size == 0:
        return prefix + ("cannot have empty reshape for non-batching model as scalar tensors are not "
                         "supported")
    if any(d < 1 and d != WILDCARD for d in io.dims):
        return prefix + "dimension must be integer >= 1, or -1 to indicate a variable-size dimension"
    if not has_reshape:
        return None
    shape = io.reshape.shape
    if any(d < 1 and d != WILDCARD for d in shape):
        return prefix + ("reshape dimensions must be integer >= 1, or -1 to indicate a variable-size "
                         "dimension")
    dims_size, reshape_size = _element_count(io.dims), (_element_count(shape) if shape else 0)
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        return prefix + "has different size for dims and reshape"
    if dims_size == WILDCARD:
        a, b = _trunks(io.dims), _trunks(shape)
        if len(a) != len(b):
            return prefix + "has different number of variable-size dimensions for dims and reshape"
        if a != b:
            return prefix + "has different size for dims and reshape"
    return None


def check_io(config: Any) -> Iterator[Issue]:
    """Every input and output (ValidateModelInput/Output), then batch inputs and outputs."""
    s = pb_schema()
    name, mbs = config.name, config.max_batch_size
    trt = config.platform == table()["tensorrt_platform"]
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for io in tensors:
            obj = f"{kind} '{io.name}'"
            needle = f'"{io.name}"' if io.name else kind
            problem = io_shape_problem(io, mbs)
            if problem is None and kind == "input" and io.format in (
                    s.ModelInput.FORMAT_NHWC, s.ModelInput.FORMAT_NCHW) and len(io.dims) != 3:
                problem = "NHWC/NCHW require 3 dims"
                obj = f"input '{io.name}'"
            if problem is None and io.is_shape_tensor and not trt:
                yield Issue(MODEL_IO, f"shape tensors are only supported for TensorRT platform "
                            f"({kind} '{io.name}') for {name}", obj, needle)
                continue
            if problem is None and io.is_non_linear_format_io:
                if not trt:
                    problem = "Non-linear IO format is only supported for the TensorRT platform"
                elif len(io.dims) != 3:
                    problem = f"Non-linear IO format {kind} requires 3 dims"
                if problem:
                    yield Issue(MODEL_IO, f"{problem} ({kind} '{io.name}') for {name}", obj, needle)
                    continue
            if problem is not None:
                yield Issue(MODEL_IO, f"model {kind} {problem} for {name}", obj, needle)
                continue
    yield from check_labels(config)
    yield from check_batch_io(config)


def check_labels(config: Any) -> Iterator[Issue]:
    """Triton reads each output's label_filename into one table keyed by output name when it loads the model:
    a second output of the same name with a label file fails the load (LabelProvider::AddLabels). Outputs of
    the same name without label files load."""
    labeled: dict[str, int] = {}
    for io in config.output:
        if not io.label_filename:
            continue
        seen = labeled.get(io.name, 0)
        if seen:
            yield Issue(MODEL_IO,
                        f"multiple label files for '{io.name}': model {config.name} declares output '{io.name}' "
                        f"more than once with a label_filename; Triton keeps one label file per output name",
                        f"output '{io.name}'", "label_filename", index=seen)
        labeled[io.name] = seen + 1


def check_batch_io(config: Any) -> Iterator[Issue]:
    """ValidateBatchIO: batch inputs/outputs refer to declared tensors, right counts and types."""
    s = pb_schema()
    name = config.name
    inputs = {io.name for io in config.input}
    outputs = {io.name for io in config.output}
    allowed_types = table()["batch_input_data_types"]
    for bi in config.batch_input:
        kind = s.BatchInput.Kind.Name(bi.kind)
        obj = f"batch_input '{bi.target_name}'"
        needle = f'"{bi.target_name}"' if bi.target_name else "batch_input"
        if len(bi.source_input) != 1:
            yield Issue(BATCH_IO, f"batch input kind '{kind}' expects 1 source input, got "
                        f"{len(bi.source_input)} for {name}", obj, needle)
            continue
        if s.DataType.Name(bi.data_type) not in allowed_types:
            yield Issue(BATCH_IO,
                        f"batch input data type must be TYPE_INT32 or TYPE_FP32 for {name}", obj, needle)
            continue
        for src in bi.source_input:
            if src not in inputs:
                yield Issue(BATCH_IO, f"unknown source input name '{src}' for {name}", obj,
                            f'"{src}"')
    for bo in config.batch_output:
        kind = s.BatchOutput.Kind.Name(bo.kind)
        obj = f"batch_output {list(bo.target_name)}"
        if len(bo.source_input) != 1:
            yield Issue(BATCH_IO, f"batch output kind '{kind}' expects 1 source input, got "
                        f"{len(bo.source_input)} for {name}", obj, "batch_output")
            continue
        bad = [src for src in bo.source_input if src not in inputs]
        if bad:
            yield Issue(BATCH_IO, f"unknown source input name '{bad[0]}' for {name}", obj,
                        f'"{bad[0]}"')
            continue
        targets: set[str] = set()
        for target in bo.target_name:
            if target not in outputs:
                yield Issue(BATCH_IO, f"unknown target output name '{target}' for {name}", obj,
                            f'"{target}"')
                break
            if target in targets:
                yield Issue(BATCH_IO, f"target output name '{target}' can only be specified once "
                            f"for {name}", obj, f'"{target}"')
                break
            targets.add(target)


# --------------------------------------------------------------------------- instance groups


def check_instance_groups(config: Any) -> Iterator[Issue]:
    """ValidateInstanceGroup, without the host's GPUs: kinds vs gpus, impossible GPU ids, profiles."""
    if config.HasField("ensemble_scheduling"):
        return
    s = pb_schema()
    kinds = s.ModelInstanceGroup
    name = config.name
    trt = config.platform == table()["tensorrt_platform"]
    max_gpus = int(table()["max_gpus_per_node"])
    for index, group in enumerate(config.instance_group):
        gname = group.name or f"{name}_{index}"
        obj = f"instance_group '{gname}'"
        if group.count < 0:
            # Triton 2.51 loads it: NormalizeInstanceGroup replaces a count below 1 with the default count.
            yield Issue(INSTANCE_GROUP, f"instance group {gname} of model {name} has count {group.count}: Triton "
                        "replaces a count below 1 with its default instance count, so write the count you mean (or "
                        "leave count out)", obj, "count", WARNING)
        if group.kind in (kinds.KIND_MODEL, kinds.KIND_CPU) and group.gpus:
            kname = kinds.Kind.Name(group.kind)
            yield Issue(INSTANCE_GROUP, f"instance group {gname} of model {name} has kind {kname} "
                        "but specifies one or more GPUs", obj, "gpus")
            continue
        if group.kind == kinds.KIND_GPU:
            for gid in group.gpus:
                if gid < 0 or gid >= max_gpus:
                    yield Issue(INSTANCE_GROUP,
                                f"instance group {gname} of model {name} specifies invalid or unsupported "
                                f"gpu id {gid}. GPUs with at least the minimum required CUDA compute "
                                f"compatibility are numbered 0 to {max_gpus - 1} at most", obj, "gpus")
                    break
        elif group.kind == kinds.KIND_AUTO and any(g < 0 for g in group.gpus):
            yield Issue(INSTANCE_GROUP, f"instance group {gname} of model {name} specifies invalid "
                        f"gpu id {min(group.gpus)}", obj, "gpus")
        if group.profile and not trt:
            yield Issue(INSTANCE_GROUP,
                        f"instance group {gname} of model {name} and platform {config.platform} specifies "
                        "profile field which is only supported for TensorRT models", obj, "profile")
        elif group.profile:
            for profile in group.profile:
                if not (profile.isascii() and profile.isdigit()):
                    yield Issue(INSTANCE_GROUP,
                                f"instance group {gname} of model {name} and platform {config.platform} "
                                f"specifies invalid profile {profile}. The field should contain the string "
                                "representation of a non-negative integer.", obj, "profile")
                    break


# --------------------------------------------------------------------------- warmup and implicit state


def _type_name(data_type: int) -> str:
    """The data type as Triton's messages name it (DataTypeToProtocolString: TYPE_STRING is BYTES)."""
    name = pb_schema().DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def _shape(dims: Any) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


# triton::common::GetDataTypeByteSize; TYPE_STRING (and TYPE_INVALID) have none
_BYTE_SIZE = {"BOOL": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8, "INT8": 1, "INT16": 2, "INT32": 4,
              "INT64": 8, "FP16": 2, "FP32": 4, "FP64": 8, "BF16": 2}


def _names(names: list[str]) -> str:
    """A list of tensor names as Triton writes it: ['A','B']."""
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _warmup_problem(sample: Any, config: Any, folder: ModelFolder) -> tuple[str, str, str] | None:
    """The error with which Triton 2.51 refuses the model for one sample while it prepares the warmup requests
    (backend_model_instance.cc TritonModelInstance::GenerateWarmupData, then InferenceRequest::PrepareForInference
    -> Normalize in infer_request.cc), as (message, object, needle); None when the sample's requests are prepared.
    The sample's batch_size does not matter here (each of its requests holds one batch-1 sample)."""
    name, mbs = config.name, config.max_batch_size
    obj = f"model_warmup '{sample.name}'"
    declared = {io.name: io for io in config.input}
    keys = sorted(sample.inputs)
    for key in keys:  # first pass: the size of the synthetic data
        if WILDCARD in sample.inputs[key].dims:
            return (f"warmup setting expects all variable-size dimensions are specified for input '{key}'", obj,
                    f'"{key}"')
    for key in keys:  # second pass: each input's data
        value = sample.inputs[key]
        which = value.WhichOneof("input_data_type")
        if which is None:
            return f"warmup setting expects input '{key}' to have input_data_type set", obj, f'"{key}"'
        if which != "input_data_file":
            continue
        rel = f"warmup/{value.input_data_file}"
        if folder.data_files is not None and rel not in folder.data_files:
            return (f"failed to open text file for read {folder.name}/{rel}: No such file or directory", obj,
                    "input_data_file")
        size = _BYTE_SIZE.get(_type_name(value.data_type), 0)
        info = folder.data.get(rel)
        if info is not None and size:
            needed = _element_count(value.dims) * size
            if needed % 2**64 > info.size:  # compared as size_t
                return (f"warmup setting expects {needed} bytes, but the data provided from "
                        f"{value.input_data_file}only has {info.size} bytes", obj, "input_data_file")
    known = [k for k in keys if k in declared]
    required = [io.name for io in config.input if not io.optional]
    if not len(required) <= len(known) <= len(declared):  # InferenceRequest::ValidateRequestInputs
        expected = (f"{len(required)} inputs" if len(required) == len(declared)
                    else f"number of inputs between {len(required)} and {len(declared)}")
        missing = [r for r in required if r not in known]
        return (f"expected {expected} but got {len(known)} inputs for model '{name}'. Got input(s) {_names(known)}, "
                f"but missing required input(s) {_names(missing)}. Please provide all required input(s).", obj,
                "model_warmup")
    for key in known:
        value, io = sample.inputs[key], declared[key]
        if value.data_type != io.data_type:
            return (f"inference input '{key}' data-type is '{_type_name(value.data_type)}', but model '{name}' "
                    f"expects '{_type_name(io.data_type)}'", obj, f'"{key}"')
        dims, want = tuple(value.dims), tuple(io.dims)
        batch = (1,) if mbs > 0 else ()
        if len(dims) != len(want) or any(w not in (WILDCARD, d) for d, w in zip(dims, want, strict=True)):
            full = (WILDCARD,) if mbs > 0 else ()
            return (f"unexpected shape for input '{key}' for model '{name}'. Expected {_shape(full + want)}, got "
                    f"{_shape(batch + dims)}.", obj, f'"{key}"')
        if any(d < WILDCARD for d in dims):
            count = _element_count(dims)
            if count < 0:
                expected_bytes = count * (_BYTE_SIZE.get(_type_name(value.data_type), 0) or 4)
                return (f"input byte size mismatch for input '{key}' for model '{name}'. Expected {expected_bytes}, "
                        f"got {expected_bytes % 2**64} (warmup sample '{sample.name}' input '{key}' has dims "
                        f"{_shape(dims)}: a dimension below -1)", obj, f'"{key}"')
            return (f"warmup sample '{sample.name}' input '{key}' has dims {_shape(dims)}: a dimension below -1 "
                    f"crashes tritonserver 2.51 while it loads {name}", obj, f'"{key}"')
        info = folder.data.get(f"warmup/{value.input_data_file}") \
            if value.WhichOneof("input_data_type") == "input_data_file" else None
        if _type_name(io.data_type) == "BYTES" and info is not None and info.elements is not None:
            problem = _string_problem(key, name, _element_count(dims), info, value.input_data_file)
            if problem:
                return problem, obj, "input_data_file"
    return None


def _string_problem(key: str, name: str, count: int, info: DataFile, file: str) -> str | None:
    """InferenceRequest::ValidateBytesInputs over a TYPE_STRING warmup file of `count` elements."""
    where = f"for inference input '{key}' for model '{name}'"
    if info.elements is not None and info.elements > count:
        return f"unexpected number of string elements {count + 1} {where}, expecting {count}"
    if info.tail == "indicator":
        return (f"incomplete string length indicator {where}, expecting 4 bytes but only {info.left} bytes "
                "available. Please make sure the string length indicator is in one buffer.")
    if info.elements != count:
        return f"expected {count} string elements {where}, got {info.elements}"
    if info.tail == "truncated":
        return (f"the last string element of warmup/{file} {where} is cut short (the file ends before the length "
                "its indicator gives): Triton 2.51's input checks let it through, but running the warmup sample fails "
                "(\"failed to run warmup sample\") and so does the model; tritonserver 2.51 crashed on it with the "
                "python backend")
    return None


def _extra_inputs(config: Any) -> set[str]:
    """Tensors a warmup sample may name besides the model inputs: sequence control inputs, implicit-state inputs
    and batch inputs (Triton adds them to the request as override inputs, like any name it does not know)."""
    seq = config.sequence_batching
    return ({c.name for c in seq.control_input} | {st.input_name for st in seq.state}
            | {target for b in config.batch_input for target in b.target_name})


def check_warmup(config: Any, folder: ModelFolder) -> Iterator[Issue]:
    """What Triton 2.51 does with model_warmup when the model loads (backend_model_instance.cc).

    Refused (error): each instance that is not passive prepares every sample with batch_size >= 1 when it is
    created (GenerateWarmupData): every sample input needs fixed dims and a data source (an input_data_file must
    exist and hold the bytes); the inputs that name model inputs must number between the required and all inputs
    and match their data type and dims. The first problem of the first such sample fails the model. Then it runs
    the samples in order (WarmUp), and the first error response fails the model: the python backend answers a
    batch of warmup requests above max_batch_size (1 without batching) with one.

    Loaded (warning): a batch_size 0 sample is skipped before anything of it is checked ("Skipping batch 0 warmup
    sample" at --log-verbose=1); passive instances prepare and run no warmup at all; a name that is no model input
    is added as an override input whose data type and dims nobody checks; a required input may be left out where
    optional ones make up the count (Triton counts inputs, it does not name them). Decoupled models are warmed up
    the same way (their responses go to the same callback)."""
    if is_ensemble(config) or not config.model_warmup:
        return  # check_ensemble_scheduling refuses any model_warmup on an ensemble
    name, mbs = config.name, config.max_batch_size
    samples = list(config.model_warmup)
    if config.instance_group and all(group.passive for group in config.instance_group):
        problem = next((p for s in samples if s.batch_size and (p := _warmup_problem(s, config, folder))), None)
        also = f"; were an instance not passive, Triton would refuse {name}: {problem[0]}" if problem else ""
        yield Issue(WARMUP, f"every instance group of {name} is passive: Triton 2.51 prepares and runs no "
                    f"model_warmup on passive instances, so no sample is checked or run{also}", "model_warmup",
                    "model_warmup", WARNING)
        return
    for sample in samples:
        if sample.batch_size == 0:
            problem = _warmup_problem(sample, config, folder)
            also = f"; with batch_size 1 Triton would refuse {name}: {problem[0]}" if problem else ""
            yield Issue(WARMUP, f"warmup sample '{sample.name}' has batch_size 0: Triton 2.51 skips it (\"Skipping "
                        f"batch 0 warmup sample '{sample.name}'\" at --log-verbose=1), so it neither checks nor runs "
                        f"it{also}", f"model_warmup '{sample.name}'", "batch_size", WARNING)
    for sample in samples:
        problem = _warmup_problem(sample, config, folder) if sample.batch_size else None
        if problem:
            yield Issue(WARMUP, *problem)
            return
    for sample in samples:
        if sample.batch_size > max(mbs, 1):
            yield Issue(WARMUP, f"failed to run warmup sample '{sample.name}': batch size {sample.batch_size} for "
                        f"'{name}', max allowed is {mbs} (the backend answers the sample's {sample.batch_size} "
                        "batch-1 requests with this error and Triton refuses the model; tritonserver 2.51 may crash "
                        "right after)", f"model_warmup '{sample.name}'", "batch_size")
            return
    declared, extra = {io.name for io in config.input}, _extra_inputs(config)
    required = [io.name for io in config.input if not io.optional]
    for sample in samples:
        if not sample.batch_size:
            continue
        obj = f"model_warmup '{sample.name}'"
        lacking = [r for r in required if r not in sample.inputs]
        if lacking:  # optional inputs make up the count
            given = sum(k in declared for k in sample.inputs)
            yield Issue(WARMUP, f"warmup sample '{sample.name}' lacks required input(s) {_names(lacking)} of {name}: "
                        f"Triton 2.51 only counts a request's model inputs ({given}, between {len(required)} and "
                        f"{len(declared)}), so it loads the model and the backend runs the sample without them; a "
                        "model that reads them fails the warmup sample, and then Triton refuses it", obj,
                        "model_warmup", WARNING)
        unknown = sorted(k for k in sample.inputs if k not in declared and k not in extra)
        if unknown:
            yield Issue(WARMUP, f"warmup sample '{sample.name}' names {', '.join(repr(k) for k in unknown)}, which "
                        f"{'is not an input' if len(unknown) == 1 else 'are not inputs'} of {name}: Triton 2.51 "
                        "loads the model and adds such a tensor to the warmup requests as an extra (override) input, "
                        "without counting it or checking its data type and dims", obj, f'"{unknown[0]}"', WARNING)


def check_state(config: Any, folder: ModelFolder) -> Iterator[Issue]:
    """Implicit state (sequence_batching.state): each initial_state against its state, in the order Triton 2.51
    checks them (data type, rank, variable dims, each dim, name, data)."""
    if not config.HasField("sequence_batching"):
        return
    for state in config.sequence_batching.state:
        obj = f"sequence_batching.state '{state.input_name}'"
        needle = f'"{state.input_name}"'
        for init in state.initial_state:
            problem = None
            if init.data_type != state.data_type:
                problem = (f"The data type used for 'initial_state' field of state '{state.input_name}' does not "
                           "match the state data type.")
            elif len(init.dims) != len(state.dims):
                problem = (f"Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions "
                           f"for state input '{state.input_name}'. {len(init.dims)} != {len(state.dims)}")
            elif WILDCARD in init.dims:
                problem = (f"'initial_state' field for state input name '{state.input_name}' contains variable "
                           "dimensions.")
            else:
                bad = next(((i, s) for i, s in zip(init.dims, state.dims, strict=True)
                            if s != WILDCARD and i != s), None)
                if bad:
                    problem = (f"'initial_state' dim for input name '{state.input_name}' doesn't match 'state' dim "
                               f"description. {bad[0]} != {bad[1]}")
                elif not init.name:
                    problem = (f"Field 'name' must be set when using initial_state for state input "
                               f"'{state.input_name}'.")
                elif init.WhichOneof("state_data") is None:
                    problem = f"initial_state setting expects state'{state.input_name}' to have state_data set"
                elif init.WhichOneof("state_data") == "data_file" and folder.data_files is not None \
                        and f"initial_state/{init.data_file}" not in folder.data_files:
                    problem = (f"failed to open text file for read {folder.name}/initial_state/{init.data_file}: "
                               "No such file or directory")
            if problem:
                yield Issue(INITIAL_STATE, problem, obj, needle)
                return


# --------------------------------------------------------------------------- versions


def check_versions(config: Any, folder: ModelFolder) -> Iterator[Issue]:
    """At least one version folder is selected by the version policy (only when versions exist, or folders that
    look like ones but that Triton skips; ensembles too)."""
    if not folder.versions and folder.skipped:
        yield Issue(VERSION_POLICY,
                    f"at least one version must be available under the version policy of model '{config.name}' "
                    f"(Triton skips version folders with leading zeros: {', '.join(folder.skipped)})",
                    "version_policy", "version_policy")
        return
    if not folder.versions:
        return
    if not selected_versions(config, folder.versions):
        yield Issue(VERSION_POLICY,
                    f"at least one version must be available under the version policy of model "
                    f"'{config.name}' (version folders: {', '.join(map(str, sorted(folder.versions)))})",
                    "version_policy", "version_policy")


# --------------------------------------------------------------------------- entry point


def check_model(config: Any, folder: ModelFolder, *, ensembles: tuple[str, ...] = ()) -> list[Issue]:
    """All single-model rules for one parsed config.pbtxt (after Triton's autofill); `ensembles`
    names the ensembles of the repository that use this model (for hints)."""
    filled, issues = autofill(config, folder)
    for rule in (check_name_and_platform, check_versions, check_warmup, check_state):
        issues.extend(rule(filled, folder))
    for single in (check_batching, check_sequence_batching, check_scheduling_kind, check_io,
                   check_instance_groups):
        issues.extend(single(filled))
    if filled.HasField("ensemble_scheduling") and is_ensemble(filled):
        issues.extend(check_ensemble_scheduling(filled))
    if filled.backend == "tensorrtllm":
        issues.extend(check_tensorrtllm(filled, ensembles))
    return issues
