"""Property-based tests (hypothesis): the readers, add-model's arguments and compat over random engine
configurations never raise anything but the plugin's own errors (no traceback).

A few hundred examples per test by default; KUBECTL_TRITON_FUZZ_EXAMPLES sets the count (`make fuzz` runs
10,000). The examples run are printed and recorded (record_property) as `fuzz_examples`."""

from __future__ import annotations

import contextlib
import copy
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubectl_triton.checks.manifests.security import check_model_metadata, check_objects
from kubectl_triton.compat import catalog, engine, record, rules
from kubectl_triton.compat.repo_check import check_metadata
from kubectl_triton.errors import TritonCtlError
from kubectl_triton.formats import pbtxt, yamlio
from kubectl_triton.gitops.scaffold import parse_step, parse_tensor, validate_name

EXAMPLES = int(os.environ.get("KUBECTL_TRITON_FUZZ_EXAMPLES", "200"))
FIXTURE = Path(__file__).parent / "fixtures" / "engines" / "llama3-8b-bf16-tp1-h100"
ENGINE = json.loads((FIXTURE / "config.json").read_text())
BUILD = json.loads((FIXTURE / "build-info.json").read_text())
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
                    suppress_health_check=list(HealthCheck))
COUNTS: dict[str, int] = {}


def counted(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20)
yaml_text = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(["a: 1", "- x", "  b: [1, 2", "&a x", "*a", "---", "key: {", "'q", "\t- t",
                              "!!python/object:os.system", "? k", ": v", "%YAML 1.1", "|", ">-", "#c", "",
                              "x: !!binary AAAA", "n: .nan", "b: yes", "<<: *a"]), max_size=12).map("\n".join))


@SETTINGS
@given(yaml_text)
def test_yaml_reader(text):
    counted("yaml reader")
    try:
        yamlio.loads_all(text, "fuzz.yaml")
    except TritonCtlError as err:
        assert "fuzz.yaml" in err.message


pbtxt_tokens = st.sampled_from(['name: "m"', 'backend: "onnxruntime"', "max_batch_size: 8", "max_batch_size: -1",
                                "input [", "]", "{", "}", 'name: "x"', "data_type: TYPE_FP32", "dims: [ 4 ]",
                                "dims: [ -1, 3 ]", "instance_group [ { kind: KIND_GPU count: 2 } ]",
                                "dynamic_batching { }", 'parameters { key: "k" value: { string_value: "v" } }',
                                "output [", "#", '"', "\x00", "reshape: { shape: [ ] }", ",", ":",
                                "99999999999999999999"])


@SETTINGS
@given(st.one_of(st.text(max_size=200), st.lists(pbtxt_tokens, max_size=25).map(" ".join)))
def test_pbtxt_reader(text):
    counted("pbtxt reader")
    try:
        pbtxt.parse(text, "fuzz.pbtxt")
    except TritonCtlError as err:
        assert err.message.startswith("fuzz.pbtxt")


def _mutate(doc: dict, paths: list[tuple[str, ...]], values: list) -> dict:
    doc = copy.deepcopy(doc)
    for path, value in zip(paths, values, strict=False):
        cur = doc
        for key in path[:-1]:
            if not isinstance(cur.get(key), dict):
                cur[key] = {}
            cur = cur[key]
        cur[path[-1]] = value
    return doc


ENGINE_PATHS = [("version",), ("pretrained_config",), ("build_config",), ("pretrained_config", "dtype"),
                ("pretrained_config", "mapping"), ("pretrained_config", "mapping", "tp_size"),
                ("pretrained_config", "mapping", "pp_size"), ("pretrained_config", "quantization", "quant_algo"),
                ("pretrained_config", "quantization", "kv_cache_quant_algo"),
                ("pretrained_config", "num_hidden_layers"),
                ("pretrained_config", "num_key_value_heads"), ("pretrained_config", "head_size"),
                ("pretrained_config", "hidden_size"), ("pretrained_config", "num_attention_heads"),
                ("build_config", "max_batch_size"), ("build_config", "max_seq_len"), ("build_config", "max_input_len"),
                ("build_config", "max_num_tokens"), ("build_config", "auto_parallel_config"), ("builder_config",)]
engine_values = st.one_of(json_values, st.integers(min_value=-4, max_value=1 << 20),
                          st.sampled_from(["bfloat16", "float16", "fp8", "FP8", "W4A16_AWQ", "NVFP4", "int8", None,
                                           "0.16.0", "0.7.1", "1.0.0rc1", "x"]))


@SETTINGS
@given(st.lists(st.sampled_from(ENGINE_PATHS), max_size=6), st.lists(engine_values, max_size=6),
       st.sampled_from(sorted(catalog.gpus())), st.one_of(st.none(), st.integers(0, 16)),
       st.sampled_from([None, "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3",
                        "nvcr.io/nvidia/tritonserver:23.10-trtllm-python-py3", "custom:latest"]))
def test_compat_random_engine_configs(paths, values, gpu_key, gpus_per_pod, image):
    counted("compat engine configs")
    doc = _mutate(ENGINE, paths, values)
    try:
        info = engine.parse_config(doc, "config.json")
    except TritonCtlError:
        return
    gpu = catalog.gpus()[gpu_key]
    target = rules.Target(name=gpu.key, gpus=(gpu,), image=image,
                          gpus_per_pod=info.world_size if gpus_per_pod is None else gpus_per_pod)
    result = rules.evaluate(info, target, model="fuzz")
    assert result.compatible in (True, False, None)
    json.dumps(result.as_dict())


@SETTINGS
@given(st.lists(st.sampled_from(list(BUILD) + ["extra"]), max_size=4), st.lists(json_values, max_size=4))
def test_build_info(keys, values):
    counted("build-info")
    doc = _mutate(BUILD, [(k,) for k in keys], values)
    try:
        engine.parse_build_info(doc, "build-info.json")
    except TritonCtlError as err:
        assert "build-info.json" in err.message


markers = st.sampled_from(list(record.MARKERS.values()))


@SETTINGS
@given(st.lists(st.one_of(st.text(max_size=40), st.tuples(markers, json_values).map(
    lambda t: t[0] + json.dumps(t[1])), st.just(record.MARKERS["build_info"] + json.dumps(BUILD)),
    st.just(record.MARKERS["config"] + json.dumps(ENGINE))), max_size=6))
def test_build_log(lines):
    counted("build log")
    try:
        record.from_log("\n".join(lines), "job.log")
    except TritonCtlError as err:
        assert "job.log" in err.message


@SETTINGS
@given(st.text(max_size=80), st.text(max_size=80), st.text(max_size=80))
def test_add_model_argument_parsers(name, tensor, step):
    counted("add-model argument parsers")
    for fn, arg in ((validate_name, name), (parse_tensor, tensor), (parse_step, step)):
        with contextlib.suppress(TritonCtlError):
            fn(arg)


@SETTINGS
@given(st.dictionaries(st.sampled_from(["name", "backend", "gpus", "image", "engine", "artifacts", "annotations",
                                        "password", "token"]), json_values, max_size=6) | json_values)
def test_model_metadata(meta):
    counted("model metadata")
    with contextlib.suppress(TritonCtlError):
        check_metadata(meta, Path("models/m/model.yaml"))


k8s_object = st.fixed_dictionaries({"kind": st.sampled_from(["Deployment", "Job", "Pod", "CronJob", "Secret",
                                                             "ConfigMap", "NetworkPolicy", "Service"]),
                                    "metadata": json_values, "spec": json_values, "data": json_values})


@SETTINGS
@given(st.lists(k8s_object | json_values, max_size=4))
def test_security_check_on_random_objects(objects):
    counted("security check objects")
    check_objects("fuzz", objects)


ADD_MODEL_ARGS = st.lists(st.sampled_from([
    ["--backend", "onnxruntime"], ["--backend", "tensorrtllm"], ["--backend", "python"], ["--backend", "x"],
    ["--backend", "ensemble"], ["--gpu", "l4"], ["--gpu", "h100-80gb"], ["--gpu", "nope"], ["--max-batch-size", "0"],
    ["--max-batch-size", "-3"], ["--preferred-batch-size", "64"], ["--instances", "0"], ["--version", "0"],
    ["--input", "x:FP32:3,224,224"], ["--input", "x:FP32:"], ["--output", "y:INT8:-1"], ["--tp", "3"],
    ["--step", "image_classifier"], ["--artifact", "s3://b/p"], ["--artifact", "/abs"], ["--dtype", "fp8"],
    ["--quantization", "fp8"], ["--max-seq-len", "1"], ["--image-tag", "x y"], ["--no-dynamic-batching"],
    ["--cluster", "production"], ["--max-queue-delay-us", "-1"]]), max_size=6)


@settings(max_examples=max(20, EXAMPLES // 10), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.sampled_from(["fuzzed", "m1", "a", "image-classifier"]), st.text(max_size=20)), ADD_MODEL_ARGS)
def test_add_model_cli_dry_run(fuzz_repo, name, options):
    counted("add-model command lines")
    from tests.test_bad_inputs import run

    args = ["add-model", name, *[a for opt in options for a in opt], "--dry-run", "--repo", str(fuzz_repo)]
    res = run(args)
    assert res.crash is None, f"{args}\n{res.crash}"
    assert res.code in (0, 2), (args, res.err)


@pytest.fixture(scope="module")
def fuzz_repo(tmp_path_factory) -> Path:
    import shutil

    from tests.conftest import REPO

    dest = tmp_path_factory.mktemp("fuzz") / "repo"
    for part in ("base", "overlays", "models", "clusters"):
        shutil.copytree(REPO / part, dest / part)
    return dest


def test_model_metadata_of_the_example_repo_is_clean():
    assert check_model_metadata(Path(__file__).resolve().parents[1]) == []


def test_zz_fuzz_figures(record_property):
    total = sum(COUNTS.values())
    record_property("fuzz_examples", total)
    print(f"\nfuzz examples run: {total} ({', '.join(f'{k} {v}' for k, v in sorted(COUNTS.items()))}); "
          f"KUBECTL_TRITON_FUZZ_EXAMPLES={EXAMPLES}")
