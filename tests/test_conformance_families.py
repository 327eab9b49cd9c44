"""The five families where the static checks used to disagree with Triton, each judged by the real tritonserver
(2.51, from the nvidia-pytriton wheel): every case is loaded in one server per family, and the static verdict
(an error for that model, or none) must equal Triton's (failed to load, or READY), with the same message.

1. a model folder without a top-level config.pbtxt (committed under a version folder, or left to auto-complete);
2. ensemble maps onto a composing model that declares no inputs (strict mode: refused);
3. instance_group counts Triton accepts (below 1: the default count);
4. model_warmup samples against the model's inputs;
5. implicit-state initial_state against the state's data type and dims.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks.findings import ERROR
from kubectl_triton.checks.model.modelrepo import check_repository
from kubectl_triton.formats import yamlio
from tests.conftest import REPO

PYMODEL = '''import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.outputs = [o["name"] for o in json.loads(args["model_config"]).get("output", [])]

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(n, np.zeros([1], np.float32)) for n in self.outputs])
                for _ in requests]
'''
CPU = 'backend: "python"\ninstance_group [{kind: KIND_CPU count: 1}]\n'
IO = 'input [{name: "X" data_type: TYPE_FP32 dims: [2]}]\noutput [{name: "Y" data_type: TYPE_FP32 dims: [1]}]\n'


def write_repo(root: Path, models: dict[str, dict[str, str]]) -> Path:
    """models: folder -> {relative file: text}; python models get 1/model.py unless the case says otherwise."""
    for name, files in models.items():
        for rel, text in files.items():
            path = root / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return root


def model(config: str, **extra: str) -> dict[str, str]:
    files = {"config.pbtxt": config}
    if "ensemble" not in config:
        files["1/model.py"] = PYMODEL
    else:
        files["1/.keep"] = ""
    files.update({k.replace("__", "/"): v for k, v in extra.items()})
    return files


def triton_verdicts(install, repo: Path, strict: bool) -> dict[str, str | None]:
    """Model folder -> Triton's failure message (None: READY), from the real server (load_repository: a server
    that dies after refusing models is started again without them)."""
    from kubectl_triton.adapters.tritonserver import load_repository

    loaded = load_repository(repo, exit_on_error=False, strict_model_config=strict, install=install)
    return {p.name: loaded.verdict(p.name) for p in repo.iterdir() if p.is_dir()}


def _norm(message: str, repo: Path) -> str:
    message = message.replace(f"{repo}/", "")
    message = re.sub(r"^(Invalid argument|Internal): ", "", message)
    message = re.sub(r"^\[request id: [^]]*\] ", "", message)
    return message


def _same_meaning(static: str, triton: str, repo: Path) -> bool:
    """Triton's first sentence (instance suffixes `_0_0` and the NOTE dropped) is in the static message."""
    triton = re.sub(r"_0_0'", "'", _norm(triton, repo)).split("; ")[0].split(" NOTE:")[0].strip().rstrip(".")
    return triton in static


def assert_agree(install, repo: Path, strict: bool) -> dict[str, str | None]:
    """Static and Triton verdicts agree for every model of `repo`."""
    verdicts = triton_verdicts(install, repo, strict)
    findings = check_repository(repo, strict=strict)
    errors: dict[str, list[str]] = {}
    for f in findings:
        if f.severity == ERROR:
            errors.setdefault(str(f.model), []).append(f.message)
    disagreements = []
    for name, message in sorted(verdicts.items()):
        ours = errors.get(name, [])
        if message is None and ours:
            disagreements.append(f"{name}: Triton loads it, static says {ours}")
        elif message is not None and not any(_same_meaning(o, message, repo) for o in ours):
            disagreements.append(f"{name}: Triton refuses with {message!r}, static says {ours}")
    assert not disagreements, "\n".join(disagreements)
    return verdicts


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "autocomplete"])
def test_model_folder_without_top_level_config(install, tmp_path: Path, strict: bool):
    config = CPU + IO
    repo = write_repo(tmp_path / "repo", {
        "ok": model(config),
        "under_version": {"1/config.pbtxt": config, "1/model.py": PYMODEL},
        "autocomplete": {"1/model.py": PYMODEL},
        "not_a_model": {"README.md": "notes"},
    })
    verdicts = assert_agree(install, repo, strict)
    assert verdicts["ok"] is None and verdicts["not_a_model"] is not None
    assert (verdicts["under_version"] is not None) is strict and (verdicts["autocomplete"] is not None) is strict
    if not strict:  # loads, but with an auto-completed config, not the committed one: a warning says so
        warned = [f for f in check_repository(repo) if f.model == "under_version"]
        assert [(f.severity, f.code, f.path) for f in warned] == [("warning", "ModelConfigMissing",
                                                                   "under_version/1/config.pbtxt")]


ENSEMBLE = '''name: "{name}"
platform: "ensemble"
max_batch_size: 0
input [{{name: "IN" data_type: TYPE_FP32 dims: [2]}}]
output [{{name: "OUT" data_type: TYPE_FP32 dims: [1]}}]
ensemble_scheduling {{ step [{{model_name: "{step}" model_version: -1 input_map {{key: "X" value: "IN"}}
  output_map {{key: "Y" value: "OUT"}}}}] }}
'''


def test_ensemble_onto_a_composing_model_without_declared_inputs(install, tmp_path: Path):
    repo = write_repo(tmp_path / "repo", {
        "e_bare": model(ENSEMBLE.format(name="e_bare", step="bare")),
        "bare": model(CPU),
        "e_outputs_only": model(ENSEMBLE.format(name="e_outputs_only", step="outputs_only")),
        "outputs_only": model(CPU + 'output [{name: "Y" data_type: TYPE_FP32 dims: [1]}]\n'),
        "e_ok": model(ENSEMBLE.format(name="e_ok", step="declared")),
        "declared": model(CPU + IO),
    })
    verdicts = assert_agree(install, repo, strict=True)
    assert verdicts["e_bare"] is not None and "non-existing input X in model bare" in verdicts["e_bare"]
    assert verdicts["e_ok"] is None and verdicts["bare"] is None


def test_platforms_version_folders_and_an_empty_version_policy(install, tmp_path: Path):
    """Found by reading core's model_config_utils.cc and model_lifecycle.cc, judged here by the real server: a
    python model may name any platform (GetBackendType knows no python type); a folder "01" is no version (leading
    zeros are skipped); `version_policy {}` serves every version, so an ensemble may use version 1 of two."""
    step = 'ensemble_scheduling {{ step [{{model_name: "{m}" model_version: 1 input_map {{key: "X" value: "IN"}} ' \
        'output_map {{key: "Y" value: "OUT"}}}}] }}\n'
    ens = 'platform: "ensemble"\ninput [{name: "IN" data_type: TYPE_FP32 dims: [2]}]\n' \
        'output [{name: "OUT" data_type: TYPE_FP32 dims: [1]}]\n'
    repo = write_repo(tmp_path / "repo", {
        "python_with_platform": model(CPU + IO + 'platform: "pytorch"\n'),
        "leading_zero": {"config.pbtxt": CPU + IO, "01/model.py": PYMODEL},
        "all_versions": model(CPU + IO + "version_policy {}\n", **{"2__model.py": PYMODEL}),
        "e_all": model(f'name: "e_all"\n{ens}' + step.format(m="all_versions")),
        "latest_only": model(CPU + IO, **{"2__model.py": PYMODEL}),
        "e_latest": model(f'name: "e_latest"\n{ens}' + step.format(m="latest_only")),
    })
    verdicts = assert_agree(install, repo, strict=True)
    assert verdicts["python_with_platform"] is None and verdicts["leading_zero"] is not None
    assert verdicts["e_all"] is None and verdicts["e_latest"] is not None  # latest 1 serves version 2 only


def test_instance_group_counts_triton_accepts(install, tmp_path: Path):
    models = {}
    for kind in ("KIND_CPU", "KIND_MODEL", "KIND_AUTO"):
        for count in (-2147483648, -5, -1, 0, 1, 2):
            name = f"{kind.lower()}_{str(count).replace('-', 'minus')}"
            models[name] = model(f'backend: "python"\n{IO}instance_group [{{kind: {kind} count: {count}}}]\n')
    repo = write_repo(tmp_path / "repo", models)
    verdicts = assert_agree(install, repo, strict=True)
    assert all(message is None for message in verdicts.values())
    warned = {f.model for f in check_repository(repo, strict=True) if f.code == "InstanceGroup"}
    assert warned == {n for n in models if "minus" in n}  # accepted, but the count is not what it says


def _warmup(inputs: str, batch: int = 1) -> str:
    return f'model_warmup [{{name: "w" batch_size: {batch} {inputs}}}]\n'


def _input(name: str, data_type: str = "TYPE_FP32", dims: str = "[2]", data: str = "zero_data: true") -> str:
    return f'inputs {{key: "{name}" value: {{data_type: {data_type} dims: {dims} {data}}}}}'


def test_warmup_inputs_against_the_model_inputs(install, tmp_path: Path):
    batching = CPU + 'max_batch_size: 4\ninput [{name: "X" data_type: TYPE_FP32 dims: [2]}, ' \
        '{name: "O" data_type: TYPE_FP32 dims: [2] optional: true}]\noutput [{name: "Y" data_type: TYPE_FP32 ' \
        'dims: [1]}]\n'
    plain = CPU + IO
    cases = {
        "ok": batching + _warmup(_input("X")),
        "ok_random_and_optional": batching + _warmup(_input("X", data="random_data: true") + _input("O")),
        "ok_unknown_input_dropped": batching + _warmup(_input("X") + _input("Z")),
        "ok_only_optional": batching + _warmup(_input("O")),  # Triton counts inputs, it does not name them
        "ok_batch_zero": batching + _warmup(_input("X"), 0),
        "no_inputs": batching + _warmup(""),
        "only_unknown": plain + _warmup(_input("Z")),
        "variable_dims": batching + _warmup(_input("X", dims="[-1]")),
        "unknown_without_data": batching + _warmup(_input("X") + _input("Z", data="")),
        "no_data": plain + _warmup(_input("X", data="")),
        "wrong_dims": batching + _warmup(_input("X", dims="[3]")),
        "batch_dim_on_non_batching": plain + _warmup(_input("X", dims="[1,2]")),
        "wrong_type": batching + _warmup(_input("X", data_type="TYPE_INT32")),
        "batch_above_max": batching + _warmup(_input("X"), 8),
        "batch_2_non_batching": plain + _warmup(_input("X"), 2),
        "missing_file": plain + _warmup(_input("X", data='input_data_file: "nope.bin"')),
        "file_present": plain + _warmup(_input("X", data='input_data_file: "x.bin"')),
    }
    models = {name: model(config) for name, config in cases.items()}
    models["file_present"]["warmup/x.bin"] = "\0" * 8
    repo = write_repo(tmp_path / "repo", models)
    verdicts = assert_agree(install, repo, strict=True)
    assert {n for n, m in verdicts.items() if m is None} == \
        {n for n in cases if n.startswith("ok") or n == "file_present"}


STATEFUL = CPU + 'max_batch_size: 4\n' + IO + '''sequence_batching {
  control_input [{name: "START" control [{kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1]}]}]
  state [{input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: %s %s}]
}
'''


def _initial(dims: str, data_type: str = "TYPE_INT32", data: str = "zero_data: true", name: str = 'name: "i"') -> str:
    return f"initial_state: {{ {name} data_type: {data_type} dims: {dims} {data} }}"


def test_initial_state_against_the_state(install, tmp_path: Path):
    cases = {
        "ok_variable_state": ("[-1]", _initial("[3]")),
        "ok_fixed": ("[3]", _initial("[3]")),
        "ok_partly_variable": ("[-1, 4]", _initial("[2, 4]")),
        "ok_no_initial_state": ("[3]", ""),
        "other_size": ("[3]", _initial("[4]")),
        "other_rank": ("[3]", _initial("[1,3]")),
        "variable_initial": ("[-1]", _initial("[-1]")),
        "variable_and_mismatch": ("[3, 3]", _initial("[-1, 4]")),
        "zero": ("[3]", _initial("[0]")),
        "other_type": ("[3]", _initial("[3]", data_type="TYPE_FP32")),
        "type_before_name": ("[3]", _initial("[3]", data_type="TYPE_FP32", name="")),
        "no_data": ("[3]", _initial("[3]", data="")),
        "size_before_data": ("[3]", _initial("[4]", data="")),
        "no_name": ("[3]", _initial("[3]", name="")),
        "missing_file": ("[3]", _initial("[3]", data='data_file: "nope.bin"')),
    }
    repo = write_repo(tmp_path / "repo", {name: model(STATEFUL % case) for name, case in cases.items()})
    verdicts = assert_agree(install, repo, strict=True)
    assert {n for n, m in verdicts.items() if m is None} == {n for n in cases if n.startswith("ok")}


def test_validate_takes_strictness_from_the_servers_arguments():
    """validate checks each overlay's model repository the way its tritonserver runs: auto-complete off with
    --disable-auto-complete-config (or the deprecated --strict-model-config=true), Triton's default otherwise."""
    from kubectl_triton.checks.gate import strict_model_config

    def deployment(*args: str) -> list[dict]:
        return [{"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
            {"name": "tritonserver", "command": ["tritonserver"], "args": list(args)}]}}}}]

    assert strict_model_config(deployment("--model-repository=/models", "--disable-auto-complete-config"))
    assert strict_model_config(deployment("--strict-model-config=true"))
    assert not strict_model_config(deployment("--strict-model-config=false"))
    assert not strict_model_config(deployment("--model-repository=/models"))

    # a server started through the overlay's scripts (base/triton-multinode: leader.sh runs rank.sh on each rank)
    leader = {"kind": "LeaderWorkerSet", "spec": {"leaderWorkerTemplate": {"size": 2, "leaderTemplate": {"spec": {
        "containers": [{"name": "tritonserver", "command": ["sh", "/multinode/leader.sh"]}]}}}}}

    def scripts(rank: str) -> dict:
        return {"kind": "ConfigMap", "data": {"leader.sh": 'exec mpirun -np 8 sh "$SCRIPTS_DIR/rank.sh"\n',
                                              "rank.sh": rank}}

    assert strict_model_config([leader, scripts('set -- --disable-auto-complete-config\nexec tritonserver "$@"\n')])
    assert not strict_model_config([leader, scripts('exec tritonserver --model-repository=/models\n')])
    rendered = yamlio.loads_all(kustomize.build(REPO / "overlays/llama3-70b/h100-80gb").yaml, "llama3-70b")
    assert strict_model_config(rendered)  # the repository's own multi-node overlay
