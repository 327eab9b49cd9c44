"""model_warmup: when Triton 2.51 refuses a model for its warmup, and when it loads it anyway (issue 24).

What Triton does (triton-inference-server/core r24.10, src/backend_model_instance.cc):
- each instance that is not passive prepares every sample when it is created (TritonModelInstance::
  ConstructAndInitializeInstance -> GenerateWarmupData): a sample with batch_size 0 is skipped ("Skipping batch 0
  warmup sample", verbose log) before anything of it is looked at; for the others every input needs fixed dims
  and a data source (an input_data_file must open and hold enough bytes), and each request goes through
  InferenceRequest::PrepareForInference -> Normalize (infer_request.cc): the inputs that are model inputs must
  number between the required and all inputs and match data type and shape (TYPE_STRING data is walked
  element by element; inputs are counted, not named, so optional ones may stand in for a required one). Names
  that are no model input become override inputs: not counted, not checked. Any error fails the instance, and so
  the model.
- then it runs the samples (WarmUp, count times each, at least once); an error response fails the model: the
  python backend answers a batch above max_batch_size (1 without batching) with one. Decoupled models are warmed
  up the same way.
The static rule (checks.model.config.check_warmup) says so: an error where Triton refuses, a warning where it
loads the model without running or checking the sample. Every case below is judged by the static rule alone and,
in one server, by the real tritonserver; the two verdicts must be the same.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kubectl_triton.adapters.shadow import stub_path
from kubectl_triton.checks.findings import ERROR, WARNING
from kubectl_triton.checks.model.base import DataFile
from kubectl_triton.checks.model.modelrepo import check_repository
from tests.test_conformance_families import _same_meaning, triton_verdicts, write_repo

CODE = "WarmupInvalid"
OUT = 'output [{name: "Y" data_type: TYPE_FP32 dims: [1]}]\n'
DECOUPLED = "model_transaction_policy { decoupled: true }\n"


def _groups(passive: tuple[bool, ...] = (False,)) -> str:
    groups = ", ".join(f"{{kind: KIND_CPU count: 1{' passive: true' if p else ''}}}" for p in passive)
    return f'backend: "python"\ninstance_group [{groups}]\n'


def one(mbs: int = 4, dims: str = "[2]", data_type: str = "TYPE_FP32") -> str:
    return f'max_batch_size: {mbs}\ninput [{{name: "X" data_type: {data_type} dims: {dims}}}]\n' + OUT


def three(mbs: int = 4, optional: bool = False) -> str:
    return (f'max_batch_size: {mbs}\ninput [{{name: "A" data_type: TYPE_FP32 dims: [2]}}, '
            '{name: "B" data_type: TYPE_FP32 dims: [2]}, '
            f'{{name: "C" data_type: TYPE_INT32 dims: [2] optional: {str(optional).lower()}}}]\n' + OUT)


def value(name: str, data_type: str = "TYPE_FP32", dims: str = "[2]", data: str = "zero_data: true") -> str:
    return f'inputs {{key: "{name}" value: {{data_type: {data_type} dims: {dims} {data}}}}}'


ALL3 = value("A") + value("B") + value("C", "TYPE_INT32")


def warmup(*samples: str) -> str:
    return f"model_warmup [{', '.join(samples)}]\n"


def sample(inputs: str, batch: int = 1, name: str = "w", extra: str = "") -> str:
    return f'{{name: "{name}" batch_size: {batch} {extra} {inputs}}}'


def strings(*items: bytes) -> bytes:
    """TYPE_STRING data as Triton reads it: each element a 4-byte little-endian length, then its bytes."""
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


@dataclass
class Case:
    name: str
    config: str  # everything but the name
    level: str | None  # the static verdict: "error" (Triton refuses), "warning" (Triton loads), None (clean)
    fragment: str = ""  # in the finding's message
    files: dict[str, bytes] = field(default_factory=dict)  # under warmup/


CASES = [
    # Triton refuses the model: an error
    Case("omit_one_of_three", _groups() + three() + warmup(sample(value("A") + value("B"))), ERROR,
         "expected 3 inputs but got 2 inputs"),
    Case("omit_one_of_three_decoupled", _groups() + three() + DECOUPLED + warmup(sample(value("A") + value("B"))),
         ERROR, "missing required input(s) ['C']"),
    Case("omit_one_of_three_non_batching", _groups() + three(0) + warmup(sample(value("A") + value("B"))), ERROR,
         "expected 3 inputs but got 2 inputs"),
    Case("omit_one_plus_unknown", _groups() + three() + warmup(sample(value("A") + value("B") + value("Z"))), ERROR,
         "expected 3 inputs but got 2 inputs"),
    Case("only_unknown_decoupled", _groups() + one() + DECOUPLED + warmup(sample(value("Z"))), ERROR,
         "expected 1 inputs but got 0 inputs"),
    Case("no_inputs", _groups() + one() + warmup(sample("")), ERROR, "Got input(s) []"),
    Case("count_0_omits", _groups() + three() + warmup(sample(value("A"), extra="count: 0")), ERROR,
         "missing required input(s) ['B','C']"),
    Case("variable_dims", _groups() + one() + warmup(sample(value("X", dims="[-1]"))), ERROR,
         "all variable-size dimensions are specified for input 'X'"),
    Case("unknown_variable_dims", _groups() + one() + warmup(sample(value("X") + value("Z", dims="[-1]"))), ERROR,
         "for input 'Z'"),
    Case("no_data", _groups() + one() + DECOUPLED + warmup(sample(value("X", data=""))), ERROR,
         "expects input 'X' to have input_data_type set"),
    Case("unknown_without_data", _groups() + one() + warmup(sample(value("X") + value("Z", data=""))), ERROR,
         "expects input 'Z' to have input_data_type set"),
    Case("wrong_type", _groups() + one() + DECOUPLED + warmup(sample(value("X", "TYPE_INT32"))), ERROR,
         "data-type is 'INT32', but model 'wrong_type' expects 'FP32'"),
    Case("wrong_dims", _groups() + one() + warmup(sample(value("X", dims="[3]"))), ERROR,
         "Expected [-1,2], got [1,3]"),
    Case("batch_dim_on_non_batching", _groups() + one(0) + warmup(sample(value("X", dims="[1,2]"))), ERROR,
         "Expected [2], got [1,2]"),
    Case("negative_dim", _groups() + one(dims="[-1]") + warmup(sample(value("X", dims="[-2]"))), ERROR,
         "input byte size mismatch for input 'X'"),
    Case("batch_above_max", _groups() + one() + warmup(sample(value("X"), 8)), ERROR, "batch size 8"),
    Case("batch_above_max_decoupled", _groups() + one() + DECOUPLED + warmup(sample(value("X"), 5)), ERROR,
         "max allowed is 4"),
    Case("batch_2_non_batching", _groups() + one(0) + warmup(sample(value("X"), 2)), ERROR, "max allowed is 0"),
    Case("missing_file", _groups() + one() + warmup(sample(value("X", data='input_data_file: "nope.bin"'))), ERROR,
         "failed to open text file for read missing_file/warmup/nope.bin"),
    Case("short_file", _groups() + one() + warmup(sample(value("X", data='input_data_file: "x.bin"'))), ERROR,
         "warmup setting expects 8 bytes", {"x.bin": b"\0" * 4}),
    Case("string_file_too_few", _groups() + one(data_type="TYPE_STRING")
         + warmup(sample(value("X", "TYPE_STRING", data='input_data_file: "s.bin"'))), ERROR,
         "expected 2 string elements", {"s.bin": strings(b"ab")}),
    Case("string_file_too_many", _groups() + one(data_type="TYPE_STRING")
         + warmup(sample(value("X", "TYPE_STRING", data='input_data_file: "s.bin"'))), ERROR,
         "unexpected number of string elements 3", {"s.bin": strings(b"a", b"b", b"c")}),
    Case("string_file_cut_indicator", _groups() + one(data_type="TYPE_STRING")
         + warmup(sample(value("X", "TYPE_STRING", data='input_data_file: "s.bin"'))), ERROR,
         "incomplete string length indicator", {"s.bin": b"\0\0"}),
    Case("second_sample_bad", _groups() + one() + warmup(sample(value("X"), name="a"),
                                                         sample(value("X", dims="[3]"), name="b")), ERROR,
         "unexpected shape"),
    Case("passive_and_active", _groups((True, False)) + three() + warmup(sample(value("A") + value("B"))), ERROR,
         "expected 3 inputs"),
    # Triton loads the model without running or checking the sample, or passes a name on unchecked: a warning
    Case("batch_0_omits", _groups() + three() + warmup(sample(value("A"), 0)), WARNING,
         "Triton 2.51 skips it"),
    Case("batch_0_variable_dims", _groups() + one() + DECOUPLED + warmup(sample(value("X", dims="[-1]"), 0)),
         WARNING, "with batch_size 1 Triton would refuse batch_0_variable_dims"),
    Case("batch_0_before_good", _groups() + one() + warmup(sample(value("X", data=""), 0, "a"),
                                                           sample(value("X"), name="b")), WARNING,
         "warmup sample 'a' has batch_size 0"),
    Case("passive_omits", _groups((True,)) + three() + warmup(sample(value("A") + value("B"))), WARNING,
         "runs no model_warmup on passive instances"),
    Case("passive_batch_above_max", _groups((True,)) + one() + warmup(sample(value("X"), 8)), WARNING, "passive"),
    Case("passive_missing_file", _groups((True,)) + one()
         + warmup(sample(value("X", data='input_data_file: "nope.bin"'))), WARNING, "failed to open text file"),
    Case("all_plus_unknown", _groups() + three() + warmup(sample(ALL3 + value("Z"))), WARNING,
         "names 'Z', which is not an input of all_plus_unknown"),
    Case("all_plus_unknown_decoupled", _groups() + three() + DECOUPLED + warmup(sample(ALL3 + value("Z"))),
         WARNING, "extra (override) input"),
    Case("required_left_out_for_optional", _groups() + three(optional=True)
         + warmup(sample(value("A") + value("C", "TYPE_INT32"))), WARNING, "lacks required input(s) ['B']"),
    Case("required_left_out_for_optional_decoupled", _groups() + three(0, optional=True) + DECOUPLED
         + warmup(sample(value("B") + value("C", "TYPE_INT32"))), WARNING, "only counts a request's model inputs"),
    # Triton warms the model up: no finding
    Case("all_three", _groups() + three() + warmup(sample(ALL3)), None),
    Case("all_three_decoupled_non_batching", _groups() + three(0) + DECOUPLED + warmup(sample(ALL3)), None),
    Case("optional_omitted", _groups() + three(optional=True) + warmup(sample(value("A") + value("B"))), None),
    Case("random_data", _groups() + one() + warmup(sample(value("X", data="random_data: true"))), None),
    Case("count_0_runs_once", _groups() + one() + warmup(sample(value("X"), extra="count: 0")), None),
    Case("batch_at_max", _groups() + one() + DECOUPLED + warmup(sample(value("X"), 4)), None),
    Case("file_long_enough", _groups() + one() + warmup(sample(value("X", data='input_data_file: "x.bin"'))), None,
         files={"x.bin": b"\0" * 64}),
    Case("string_file", _groups() + one(data_type="TYPE_STRING")
         + warmup(sample(value("X", "TYPE_STRING", data='input_data_file: "s.bin"'))), None,
         files={"s.bin": strings(b"ab", b"")}),
    Case("string_zero_data", _groups() + one(data_type="TYPE_STRING") + warmup(sample(value("X", "TYPE_STRING"))),
         None),
    Case("variable_model_dims", _groups() + one(dims="[-1]") + warmup(sample(value("X", dims="[5]"))), None),
    Case("sequence_control", _groups() + one() + 'sequence_batching { control_input [{name: "START" control '
         '[{kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1]}]}] }\n'
         + warmup(sample(value("X") + value("START", dims="[1]"))), None),
]
BY_NAME = {case.name: case for case in CASES}


def build(root: Path, cases: list[Case]) -> Path:
    """One python-backend model per case (the shadow's generic stub: it answers decoupled models too)."""
    stub = stub_path("generic").read_text(encoding="utf-8")
    repo = write_repo(root, {c.name: {"config.pbtxt": f'name: "{c.name}"\n' + c.config, "1/model.py": stub}
                             for c in cases})
    for case in cases:
        for rel, data in case.files.items():
            (repo / case.name / "warmup" / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / case.name / "warmup" / rel).write_bytes(data)
    return repo


def test_case_names_are_unique():
    assert len(BY_NAME) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_static_verdict(tmp_path: Path, case: Case):
    findings = check_repository(build(tmp_path / "repo", [case]), strict=True)
    assert all(f.code == CODE for f in findings), findings
    levels = {f.severity for f in findings}
    if case.level is None:
        assert findings == []
        return
    assert levels == {case.level}, findings
    assert any(case.fragment in f.message for f in findings), [f.message for f in findings]
    assert all(f.line for f in findings), "every finding points at a line of config.pbtxt"
    if case.level == WARNING:
        assert all("Triton 2.51" in f.message for f in findings), "a warning says what Triton does"


def test_a_string_file_cut_inside_its_last_element_is_an_error(tmp_path: Path):
    """Triton 2.51's ValidateBytesInputs lets it through; running the sample fails (the python backend's
    tritonserver crashed on it, so it is not in the server run below)."""
    case = Case("cut", _groups() + one(data_type="TYPE_STRING")
                + warmup(sample(value("X", "TYPE_STRING", data='input_data_file: "s.bin"'))), ERROR,
                files={"s.bin": strings(b"ab") + struct.pack("<I", 9) + b"x"})
    [finding] = check_repository(build(tmp_path / "repo", [case]), strict=True)
    assert finding.severity == ERROR and "is cut short" in finding.message


@pytest.mark.parametrize(("data", "expected"), [
    (b"", DataFile(0, 0)),
    (strings(b"ab", b""), DataFile(10, 2)),
    (strings(b"ab") + b"\1\0", DataFile(8, 1, "indicator", 2)),
    (strings(b"ab") + struct.pack("<I", 9) + b"x", DataFile(11, 2, "truncated")),
])
def test_data_file_walks_string_elements_as_triton_does(data: bytes, expected: DataFile):
    assert DataFile.read(data) == expected


def _agree(static: str, triton: str, repo: Path) -> bool:
    """Triton names the inputs it got in no fixed order: compare the lists sorted."""
    def ordered(text: str) -> str:
        return re.sub(r"\[('[^]]*')\]", lambda m: "[" + ",".join(sorted(m.group(1).split(","))) + "]", text)
    return _same_meaning(ordered(static), ordered(triton), repo)


def test_static_verdict_is_tritons(install, tmp_path: Path):
    """Every case in one tritonserver 2.51 (auto-complete off, as the static run): refused exactly where the static
    rule says error, with Triton's message in it; loaded where it says warning or nothing."""
    repo = build(tmp_path / "repo", CASES)
    verdicts = triton_verdicts(install, repo, strict=True)
    findings = check_repository(repo, strict=True)
    errors: dict[str, list[str]] = {}
    for f in findings:
        if f.severity == ERROR:
            errors.setdefault(str(f.model), []).append(f.message)
    disagreements = []
    for case in CASES:
        message, ours = verdicts[case.name], errors.get(case.name, [])
        if (message is not None) != (case.level == ERROR):
            disagreements.append(f"{case.name}: the table says {case.level}, Triton says {message or 'READY'}")
        if message is None and ours:
            disagreements.append(f"{case.name}: Triton loads it, static says {ours}")
        elif message is not None and not any(_agree(o, message, repo) for o in ours):
            disagreements.append(f"{case.name}: Triton refuses with {message!r}, static says {ours}")
    assert not disagreements, "\n".join(disagreements)
