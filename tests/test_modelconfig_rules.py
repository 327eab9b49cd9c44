"""Static model-config rules, through the public entry point check_repository on small repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_triton.checks.findings import ERROR, WARNING
from kubectl_triton.checks.model.modelrepo import check_repository, load_repository
from kubectl_triton.errors import InputError


def write_repo(root: Path, models: dict[str, str], versions: dict[str, list[int]] | None = None) -> Path:
    for name, text in models.items():
        (root / name).mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(text, encoding="utf-8")
        for v in (versions or {}).get(name, []):
            (root / name / str(v)).mkdir()
    return root


def errors(findings):
    return [f for f in findings if f.severity == ERROR]


def model(name: str, *, mbs: int = 8, extra: str = "", inputs: str | None = None, outputs: str | None = None,
          platform: str = 'backend: "python"') -> str:
    inputs = inputs if inputs is not None else '{ name: "IN" data_type: TYPE_FP32 dims: [ 16 ] }'
    outputs = outputs if outputs is not None else '{ name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] }'
    return (f'name: "{name}"\n{platform}\nmax_batch_size: {mbs}\n'
            f"input [ {inputs} ]\noutput [ {outputs} ]\n{extra}\n")


def ensemble(name: str, steps: str, *, mbs: int = 8, inputs: str | None = None,
             outputs: str | None = None) -> str:
    return model(name, mbs=mbs, platform='platform: "ensemble"', inputs=inputs, outputs=outputs,
                 extra=f"ensemble_scheduling {{ step [ {steps} ] }}")


def step(model_name: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model_name}" model_version: {version} {ins} {outs} }}'


# --------------------------------------------------------------------------- single model


def test_valid_model_has_no_findings(tmp_path: Path) -> None:
    text = model("m", extra="dynamic_batching { preferred_batch_size: [ 4, 8 ] }")
    repo = write_repo(tmp_path, {"m": text})
    assert check_repository(repo) == []


def test_preferred_batch_size_above_max_batch_size_names_model_file_and_line(tmp_path: Path) -> None:
    text = model("m", mbs=4, extra="dynamic_batching {\n  preferred_batch_size: [ 8 ]\n}")
    findings = check_repository(write_repo(tmp_path, {"m": text}))
    assert len(findings) == 1
    f = findings[0]
    assert (f.severity, f.model, f.path) == (ERROR, "m", "m/config.pbtxt")
    assert "preferred size must be <= max batch size for m" in f.message
    assert text.splitlines()[f.line - 1].strip().startswith("preferred_batch_size")


def test_display_root_makes_paths_relative_to_it(tmp_path: Path) -> None:
    repo = write_repo(tmp_path / "overlay" / "models", {"m": model("m", mbs=-1)})
    findings = check_repository(repo, display_root=tmp_path)
    assert [f.path for f in findings] == ["overlay/models/m/config.pbtxt"]


@pytest.mark.parametrize(("platform", "fragment"), [
    ('platform: "onnxruntime"', "unexpected platform type 'onnxruntime' for m"),
    ('platform: "tensorrt_plan"\nbackend: "onnxruntime"', "unexpected 'platform' and 'backend' pair"),
    ('platform: "ensemble"\nbackend: "python"', "Ensemble model 'm' must have platform type 'ensemble'"),
    # GetBackendTypeFromPlatform knows neither (core's model_config_utils.cc); torch_aoti's backend name,
    # "pytorch", is answered with the libtorch type first
    ('platform: "pytorch_torchscript"', "unexpected platform type 'pytorch_torchscript' for m"),
    ('platform: "torch_aoti"', "unexpected 'platform' and 'backend' pair, got:torch_aoti, pytorch"),
    ('platform: "libtorch"', "unexpected 'platform' and 'backend' pair, got:libtorch, pytorch"),
])
def test_platform_and_backend_must_fit(tmp_path: Path, platform: str, fragment: str) -> None:
    findings = errors(check_repository(write_repo(tmp_path, {"m": model("m", platform=platform)})))
    assert any(fragment in f.message for f in findings), findings


def test_platform_only_and_custom_backend_are_accepted(tmp_path: Path) -> None:
    repo = write_repo(tmp_path, {"a": model("a", platform='platform: "onnxruntime_onnx"'),
                                 "b": model("b", platform='backend: "my_custom_backend"')})
    assert check_repository(repo) == []


def test_a_known_backend_gets_its_platform_as_triton_fills_it(tmp_path: Path) -> None:
    """backend tensorrt without a platform is tensorrt_plan to Triton (AutoCompleteBackendFields): its shape tensors
    and profiles are allowed; a python model may name any platform (no python type in GetBackendType)."""
    shape = '{ name: "S" data_type: TYPE_INT32 dims: [ 1 ] is_shape_tensor: true }'
    repo = write_repo(tmp_path, {"trt": model("trt", platform='backend: "tensorrt"', inputs=shape),
                                 "py": model("py", platform='backend: "python"\nplatform: "pytorch"')})
    assert errors(check_repository(repo)) == []


def test_the_first_model_file_in_tritons_order_decides_the_backend(tmp_path: Path) -> None:
    repo = write_repo(tmp_path, {"m": model("m", platform="",
                                            inputs='{ name: "S" data_type: TYPE_INT32 dims: [ 1 ] '
                                                   'is_shape_tensor: true }')}, {"m": [1]})
    for name in ("model.onnx", "model.plan"):  # Triton looks for model.plan before model.onnx
        (repo / "m" / "1" / name).write_bytes(b"")
    assert errors(check_repository(repo)) == []  # tensorrt: its shape tensor is allowed


def test_backend_is_inferred_from_version_files_as_triton_does(tmp_path: Path) -> None:
    text = model("m", platform="")
    (f,) = check_repository(write_repo(tmp_path / "none", {"m": text}))
    assert f.severity == WARNING and "'platform' or 'backend'" in f.message
    (f,) = check_repository(write_repo(tmp_path / "empty", {"m": text}, {"m": [1]}))
    assert f.severity == ERROR and "Could not determine backend for model 'm'" in f.message
    repo = write_repo(tmp_path / "onnx", {"m": text}, {"m": [1]})
    (repo / "m" / "1" / "model.onnx").write_bytes(b"")
    assert check_repository(repo) == []


def test_folder_name_must_equal_model_name(tmp_path: Path) -> None:
    findings = check_repository(write_repo(tmp_path, {"folder": model("other")}))
    assert [f.code for f in findings] == ["ModelName"]
    assert "'folder'" in findings[0].message and "'other'" in findings[0].message


def test_empty_name_takes_the_folder_name(tmp_path: Path) -> None:
    text = model("x").replace('name: "x"\n', "")
    assert check_repository(write_repo(tmp_path, {"x": text})) == []


def test_cpu_instance_group_with_gpus_is_refused(tmp_path: Path) -> None:
    text = model("m", extra="instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]")
    (f,) = check_repository(write_repo(tmp_path, {"m": text}))
    assert f.message == "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs"


def test_gpu_instance_group_on_gpu_zero_is_fine(tmp_path: Path) -> None:
    text = model("m", extra="instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]")
    assert check_repository(write_repo(tmp_path, {"m": text})) == []


def test_corrid_control_must_have_an_integer_or_string_type(tmp_path: Path) -> None:
    text = model("m", extra="""sequence_batching { control_input [ { name: "CORRID"
        control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ] }""")
    (f,) = check_repository(write_repo(tmp_path, {"m": text}))
    assert "unexpected data type for control CONTROL_SEQUENCE_CORRID for m" in f.message


def test_scalar_reshape_is_fine_for_batching_models_only(tmp_path: Path) -> None:
    inputs = '{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] reshape: { shape: [ ] } }'
    assert check_repository(write_repo(tmp_path / "a", {"m": model("m", inputs=inputs)})) == []
    (f,) = check_repository(write_repo(tmp_path / "b", {"m": model("m", mbs=0, inputs=inputs)}))
    assert "cannot have empty reshape for non-batching model" in f.message


def test_variable_reshape_with_matching_trunks_is_accepted(tmp_path: Path) -> None:
    inputs = '{ name: "IN" data_type: TYPE_FP32 dims: [ 2, 4, -1, 6 ] reshape: { shape: [ 8, -1, 1, 6 ] } }'
    assert check_repository(write_repo(tmp_path, {"m": model("m", inputs=inputs)})) == []


def test_version_policy_that_selects_no_version_folder(tmp_path: Path) -> None:
    text = model("m", extra="version_policy: { specific: { versions: [ 3 ] } }")
    (f,) = check_repository(write_repo(tmp_path, {"m": text}, {"m": [1, 2]}))
    assert f.code == "VersionPolicy" and "'m'" in f.message


def test_syntax_error_is_a_finding_with_file_line_and_column(tmp_path: Path) -> None:
    repo = write_repo(tmp_path, {"bad": 'name: "bad"\nmax_batch_size: eight\n', "good": model("good")})
    (f,) = check_repository(repo)
    assert (f.code, f.model, f.line) == ("ConfigSyntax", "bad", 2)
    assert f.message.startswith("bad/config.pbtxt:2:")
    with pytest.raises(InputError, match=r"bad/config.pbtxt:2:\d+"):
        load_repository(repo)


def test_load_repository_maps_folder_names_to_configs(tmp_path: Path) -> None:
    repo = write_repo(tmp_path, {"a": model("a"), "b": model("b", mbs=0)})
    (tmp_path / "notes").mkdir()
    loaded = load_repository(repo)
    assert sorted(loaded) == ["a", "b"] and loaded["b"].max_batch_size == 0


# --------------------------------------------------------------------------- ensembles


def pipeline(tmp_path: Path, first: str, second: str, **ens) -> Path:
    steps = step("first", {"IN": "IN"}, {"OUT": "mid"}) + ", " + step("second", {"IN": "mid"}, {"OUT": "OUT"})
    return write_repo(tmp_path, {"ens": ensemble("ens", steps, **ens), "first": first, "second": second})


def test_well_wired_ensemble_passes(tmp_path: Path) -> None:
    assert check_repository(pipeline(tmp_path, model("first"), model("second"))) == []


def test_ensemble_data_type_mismatch_between_steps(tmp_path: Path) -> None:
    second = model("second", inputs='{ name: "IN" data_type: TYPE_INT32 dims: [ 16 ] }')
    (f,) = check_repository(pipeline(tmp_path, model("first"), second))
    assert (f.model, f.code) == ("ens", "EnsembleGraph")
    assert ("ensemble tensor mid: inconsistent data type: TYPE_FP32 is inferred from model first while "
            "TYPE_INT32 is inferred from model second") in f.message


def test_ensemble_shape_mismatch_between_steps(tmp_path: Path) -> None:
    second = model("second", inputs='{ name: "IN" data_type: TYPE_FP32 dims: [ 4, 4 ] }')
    (f,) = check_repository(pipeline(tmp_path, model("first"), second))
    assert ("inconsistent shape: [-1,16] is inferred from model first while [-1,4,4] is inferred from "
            "model second") in f.message


def test_non_batching_step_with_explicit_batch_dimension_is_consistent(tmp_path: Path) -> None:
    second = model("second", mbs=0, inputs='{ name: "IN" data_type: TYPE_FP32 dims: [ -1, 16 ] }',
                   outputs='{ name: "OUT" data_type: TYPE_FP32 dims: [ -1, 16 ] }')
    assert check_repository(pipeline(tmp_path, model("first"), second)) == []


def test_step_model_with_smaller_max_batch_size(tmp_path: Path) -> None:
    (f,) = check_repository(pipeline(tmp_path, model("first"), model("second", mbs=2)))
    assert f.message == ("ensemble ens allows maximum batch size 8, but it contains model second "
                         "which only allows maximum batch size to be 2")


def test_missing_step_model_unless_known_elsewhere(tmp_path: Path) -> None:
    steps = step("first", {"IN": "IN"}, {"OUT": "OUT"})
    repo = write_repo(tmp_path, {"ens": ensemble("ens", steps)})
    (f,) = check_repository(repo)
    assert f.message == "ensemble ens contains models that are not available or ambiguous: first"
    assert check_repository(repo, known_models={"first"}) == []


def test_unmapped_step_input_unless_optional(tmp_path: Path) -> None:
    two = ('{ name: "IN" data_type: TYPE_FP32 dims: [ 16 ] }, '
           '{ name: "EXTRA" data_type: TYPE_FP32 dims: [ 16 ] %s }')
    first = model("first", inputs=two % "")
    (f,) = check_repository(pipeline(tmp_path / "a", first, model("second")))
    assert f.message == "in ensemble ens, input EXTRA in model first is not mapped to any ensemble tensors"
    assert check_repository(pipeline(tmp_path / "b", model("first", inputs=two % "optional: true"),
                                     model("second"))) == []


def test_tensor_used_before_it_is_produced(tmp_path: Path) -> None:
    steps = (step("first", {"IN": "later"}, {"OUT": "OUT"}) + ", "
             + step("second", {"IN": "OUT"}, {"OUT": "later"}))
    repo = write_repo(tmp_path, {"ens": ensemble("ens", steps), "first": model("first"),
                                 "second": model("second")})
    messages = [f.message for f in errors(check_repository(repo))]
    assert any("ensemble input 'IN' for ensemble ens' is not used" in m for m in messages), messages


def test_nested_ensembles_in_a_cycle(tmp_path: Path) -> None:
    repo = write_repo(tmp_path, {"a": ensemble("a", step("b", {"IN": "IN"}, {"OUT": "OUT"})),
                                 "b": ensemble("b", step("a", {"IN": "IN"}, {"OUT": "OUT"}))})
    messages = sorted(f.message for f in check_repository(repo))
    assert messages == ["circular dependency between ensembles: a -> ... -> b -> a",
                        "circular dependency between ensembles: b -> ... -> a -> b"]


def test_required_step_version_must_be_present(tmp_path: Path) -> None:
    steps = step("first", {"IN": "IN"}, {"OUT": "OUT"}, version=2)
    repo = write_repo(tmp_path, {"ens": ensemble("ens", steps), "first": model("first")}, {"first": [1]})
    (f,) = check_repository(repo)
    assert f.message == "ensemble 'ens' depends on 'first' whose required version 2 is not loaded"
    (tmp_path / "first" / "2").mkdir()  # the default policy (latest 1) now loads version 2
    assert check_repository(repo) == []


def test_decoupled_branches_must_not_merge(tmp_path: Path) -> None:
    two_in = ('{ name: "A" data_type: TYPE_FP32 dims: [ 16 ] }, '
              '{ name: "B" data_type: TYPE_FP32 dims: [ 16 ] }')
    steps = ", ".join([step("stream", {"IN": "IN"}, {"OUT": "x"}), step("plain", {"IN": "IN"}, {"OUT": "y"}),
                       step("join", {"A": "x", "B": "y"}, {"OUT": "OUT"})])
    repo = write_repo(tmp_path, {
        "ens": ensemble("ens", steps),
        "stream": model("stream", extra="model_transaction_policy { decoupled: true }"),
        "plain": model("plain"),
        "join": model("join", inputs=two_in)})
    (f,) = check_repository(repo)
    # Triton names the tensor's first owner (here the ensemble output); the step that merges follows
    assert f.message == ("in ensemble ens, step of model 'ens' receives inputs originated from different "
                         "decoupled models: step 2 (model join)")


# --------------------------------------------------------------------------- tensorrtllm

TRTLLM = '''name: "tensorrt_llm"
backend: "tensorrtllm"
max_batch_size: 64
model_transaction_policy { decoupled: true }
input [ { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "streaming" data_type: TYPE_BOOL dims: [ 1 ] optional: true } ]
output [ { name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] } ]
parameters: { key: "gpt_model_path" value: { string_value: "%(path)s" } }
parameters: { key: "gpt_model_type" value: { string_value: "%(kind)s" } }
parameters: { key: "max_beam_width" value: { string_value: "%(beam)s" } }
'''


def trtllm(path: str = "/engines/llama", kind: str = "inflight_fused_batching",
           beam: str = "${max_beam_width}", decoupled: bool = True) -> str:
    text = TRTLLM % {"path": path, "kind": kind, "beam": beam}
    return text if decoupled else text.replace("decoupled: true", "decoupled: false")


def test_filled_tensorrtllm_model_with_optional_placeholders_passes(tmp_path: Path) -> None:
    assert check_repository(write_repo(tmp_path, {"tensorrt_llm": trtllm()})) == []


def test_unfilled_engine_path_placeholder_is_an_error(tmp_path: Path) -> None:
    text = trtllm(path="${engine_dir}")
    (f,) = check_repository(write_repo(tmp_path, {"tensorrt_llm": text}))
    assert (f.code, f.severity) == ("TRTLLMPlaceholder", ERROR)
    assert "gpt_model_path" in f.message and "engine_dir" in f.message
    assert "${engine_dir}" in text.splitlines()[f.line - 1]


def test_missing_mandatory_parameter_and_bad_batching_strategy(tmp_path: Path) -> None:
    text = "\n".join(ln for ln in trtllm(kind="continuous").splitlines() if "gpt_model_path" not in ln)
    messages = sorted(f.message for f in check_repository(write_repo(tmp_path, {"tensorrt_llm": text})))
    assert len(messages) == 2
    assert "must be one of inflight_fused_batching" in messages[0] and "'continuous'" in messages[0]
    assert "missing mandatory parameter 'gpt_model_path'" in messages[1]


def test_mistyped_optional_parameter_is_only_a_warning(tmp_path: Path) -> None:
    (f,) = check_repository(write_repo(tmp_path, {"tensorrt_llm": trtllm(beam="wide")}))
    assert (f.severity, f.code) == (WARNING, "TRTLLMParameter") and "max_beam_width" in f.message


def test_text_input_on_tensorrtllm_points_to_the_ensemble(tmp_path: Path) -> None:
    text = trtllm().replace('name: "input_ids"', 'name: "text_input"')
    steps = step("tensorrt_llm", {"text_input": "IN"}, {"output_ids": "OUT"})
    repo = write_repo(tmp_path, {"tensorrt_llm": text, "ensemble": ensemble(
        "ensemble", steps, mbs=64, inputs='{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }',
        outputs='{ name: "OUT" data_type: TYPE_INT32 dims: [ -1, -1 ] }')})
    (f,) = errors(check_repository(repo))
    assert (f.model, f.code) == ("tensorrt_llm", "TRTLLMTextInput")
    assert "'ensemble'" in f.message


def test_streaming_into_a_non_decoupled_tensorrtllm_model_is_flagged(tmp_path: Path) -> None:
    steps = step("tensorrt_llm", {"input_ids": "IN", "streaming": "stream"}, {"output_ids": "OUT"})
    repo = write_repo(tmp_path, {"tensorrt_llm": trtllm(decoupled=False), "ensemble": ensemble(
        "ensemble", steps, mbs=64,
        inputs='{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }, '
               '{ name: "stream" data_type: TYPE_BOOL dims: [ 1 ] }',
        outputs='{ name: "OUT" data_type: TYPE_INT32 dims: [ -1, -1 ] }')})
    (f,) = check_repository(repo)
    assert (f.model, f.code, f.severity) == ("ensemble", "TRTLLMDecoupled", WARNING)
    assert check_repository(write_repo(tmp_path / "ok", {"tensorrt_llm": trtllm()})) == []


def test_streaming_parameter_requires_decoupled(tmp_path: Path) -> None:
    text = trtllm(decoupled=False) + 'parameters: { key: "streaming" value: { string_value: "true" } }\n'
    (f,) = check_repository(write_repo(tmp_path, {"tensorrt_llm": text}))
    assert (f.code, f.severity) == ("TRTLLMDecoupled", ERROR)
