"""Conformance of `--triton` with Triton's own model-configuration test cases (qa/L0_model_config).

Runs `check_repository_with_triton` over every case in ../shared/conformance/triton-model-config the way
Triton's harness assembles them, and compares verdict and message with the case's `expected*` files:
- noautofill_platform/<case>: one model; the harness prepends a platform line. Each case runs twice:
  with `platform: "onnxruntime_onnx"` (the shadow turns it into a python-backend model; `expected`,
  or `expected_unsupported` for backends that reject the feature, applies) and, where the case has
  `expected_ensemble`, with `platform: "ensemble"` (copied unchanged; `expected_ensemble` applies).
- autofill_noplatform/ensemble/<case>: a whole repository (or one model when config.pbtxt is at the
  top); sub-models use `backend: "identity"`, which the shadow turns into python. Any `expected*`
  applies; cases without one must load.
Cases are packed into a few repositories whose model names (declared and referenced) never clash, so
a handful of servers judge everything; two run at a time (2 cores).

Host-dependent case: noautofill_platform/invalid_gpu (gpu id 42 exists or not depending on the node;
the shadow runs GPU groups on CPU, so it is accepted here). invalid_cpu (KIND_CPU with gpus) and
negative_gpu (id -1) are host-independent and must agree.
"""

from __future__ import annotations

import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CASES = SHARED / "conformance" / "triton-model-config"
HOST_DEPENDENT = {"noautofill_platform/invalid_gpu"}
TARGET = 1.0  # share of (non host-dependent) cases that must agree


@dataclass
class Case:
    """One conformance case as Triton's harness loads it: model dirs and the messages allowed."""

    name: str  # e.g. "noautofill_platform/negative_max_batch_size[onnxruntime_onnx]"
    key: str  # case folder relative to CASES (for HOST_DEPENDENT)
    models: dict[str, str]  # model dir name -> config.pbtxt text
    expected: list[str]  # alternatives; empty: must load
    primary: bool = True  # False: the extra `platform: "ensemble"` run of a single-model case
    verdict: bool | None = None  # True: refused
    messages: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        if not self.expected:
            return self.verdict is False
        return bool(self.verdict) and any(message_matches(e, m) for e in self.expected for m in self.messages)


def message_matches(expected: str, message: str) -> bool:
    """Triton's harness greps the log for the expected text (escaped brackets are literal)."""
    plain = expected.replace("\\[", "[").replace("\\]", "]")
    if plain in message:
        return True
    try:
        return re.search(expected, message) is not None
    except re.error:
        return False


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8").strip()


_PLATFORM_LINE = re.compile(r'^(platform|backend)\s*:\s*"[^"]*"\s*$', flags=re.M)


def with_platform(text: str, platform: str) -> str:
    """The harness's platform line: prepended, or replacing the case's own platform/backend line
    (a second `platform:` would be a syntax error, not the case's subject)."""
    if _PLATFORM_LINE.search(text):
        return _PLATFORM_LINE.sub(f'platform: "{platform}"', text, count=1)
    return f'platform: "{platform}"\n' + text


def load_cases() -> list[Case]:
    cases: list[Case] = []
    for case_dir in sorted((CASES / "noautofill_platform").iterdir()):
        text = (case_dir / "config.pbtxt").read_text(encoding="utf-8")
        key = f"noautofill_platform/{case_dir.name}"
        plain = [_read(p) for p in (case_dir / "expected", case_dir / "expected_unsupported") if p.exists()]
        cases.append(Case(f"{key}[onnxruntime_onnx]", key,
                          {case_dir.name: with_platform(text, "onnxruntime_onnx")}, plain))
        if (case_dir / "expected_ensemble").exists():
            cases.append(Case(f"{key}[ensemble]", key, {case_dir.name: with_platform(text, "ensemble")},
                              [_read(case_dir / "expected_ensemble")], primary=False))
    for case_dir in sorted((CASES / "autofill_noplatform" / "ensemble").iterdir()):
        key = f"autofill_noplatform/ensemble/{case_dir.name}"
        expected = [_read(p) for p in sorted(case_dir.glob("expected*"))]
        if (case_dir / "config.pbtxt").exists():
            models = {case_dir.name: (case_dir / "config.pbtxt").read_text(encoding="utf-8")}
        else:
            models = {p.parent.name: p.read_text(encoding="utf-8")
                      for p in sorted(case_dir.glob("*/config.pbtxt"))}
        cases.append(Case(key, key, models, expected))
    return cases


def names_used(case: Case) -> set[str]:
    """Model names a case declares or references (ensemble steps), so packed cases never interact."""
    names = set(case.models)
    for text in case.models.values():
        names |= set(re.findall(r'model_name\s*:\s*"([^"]*)"', text))
        names |= set(re.findall(r'^\s*name\s*:\s*"([^"]*)"', text, flags=re.M)[:1])
    return names


def pack(cases: list[Case]) -> list[list[Case]]:
    """Greedy packing of cases into repositories with pairwise disjoint model names."""
    buckets: list[tuple[set[str], list[Case]]] = []
    for case in cases:
        used = names_used(case)
        for names, members in buckets:
            if not names & used:
                names |= used
                members.append(case)
                break
        else:
            buckets.append((set(used), [case]))
    return [members for _, members in buckets]


def judge(bucket: list[Case], workdir: Path) -> None:
    """Write one repository for the bucket, run the --triton check once, attribute findings to cases."""
    from kubectl_triton.checks.model.triton import check_repository_with_triton

    repo = workdir / "repo"
    for case in bucket:
        for model, text in case.models.items():
            (repo / model).mkdir(parents=True)
            (repo / model / "config.pbtxt").write_text(text, encoding="utf-8")
    findings = check_repository_with_triton(repo)
    for case in bucket:
        mine = [f for f in findings if f.model in case.models]
        case.verdict = bool(mine)
        case.messages = [f.message for f in mine]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Case], float, int]:
    if not CASES.is_dir():
        pytest.skip("../shared/conformance/triton-model-config is not available")
    from kubectl_triton.adapters.tritonserver import find_install
    from kubectl_triton.errors import ToolMissing

    try:
        find_install()
    except ToolMissing as err:
        pytest.skip(err.message)
    cases = load_cases()
    buckets = pack(cases)
    base = tmp_path_factory.mktemp("conformance")
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda ib: judge(ib[1], base / f"bucket{ib[0]}"), enumerate(buckets)))
    elapsed = time.monotonic() - start
    shutil.rmtree(base, ignore_errors=True)
    return cases, elapsed, len(buckets)


def test_every_case_was_judged(results: tuple[list[Case], float, int]) -> None:
    cases, _, _ = results
    assert len(cases) >= 90  # 58 single-model cases (+ ensemble variants) and 32 ensemble repositories
    assert all(case.verdict is not None for case in cases)


def test_triton_conformance_figures(results: tuple[list[Case], float, int],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Every case as Triton's harness runs it (non-ensemble platform for single-model cases) agrees."""
    cases, elapsed, servers = results
    primary = [c for c in cases if c.primary]
    scored = [c for c in primary if c.key not in HOST_DEPENDENT]
    agreeing = [c for c in scored if c.agrees]
    share = len(agreeing) / len(scored)
    extra = [c for c in cases if not c.primary]
    lines = [f"--triton conformance: {len(agreeing)}/{len(scored)} cases agree ({share:.1%}) in verdict and "
             f"message; excluded as host-dependent: {', '.join(sorted(HOST_DEPENDENT))}; "
             f"{servers} servers, {elapsed:.1f} s"]
    for group in ("noautofill_platform", "autofill_noplatform"):
        members = [c for c in scored if c.key.startswith(group)]
        lines.append(f"  {group}: {sum(c.agrees for c in members)}/{len(members)}")
    refused = sum(bool(c.verdict) for c in extra)
    lines.append(f"  extra platform \"ensemble\" runs: verdict {refused}/{len(extra)}, "
                 "expected_ensemble text "
                 f"{sum(c.agrees for c in extra)}/{len(extra)} (Triton 2.51 reports the faulty field before "
                 "the missing ensemble scheduling; the newer expected texts check it first)")
    for case in scored:
        if not case.agrees:
            lines.append(f"  DISAGREE {case.name}: expected {case.expected!r}, got {case.messages!r}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert share >= TARGET, "\n".join(lines)


def test_ensemble_platform_runs_are_refused_naming_the_model(results: tuple[list[Case], float, int]) -> None:
    """With `platform: "ensemble"` every case is refused; where Triton 2.51's message differs from the
    newer `expected_ensemble` text it is its own validation error for the same model."""
    cases, _, _ = results
    extra = [c for c in cases if not c.primary]
    assert extra
    for case in extra:
        assert case.verdict, case.name
        model = next(iter(case.models))
        assert case.agrees or any(model in m for m in case.messages), (case.name, case.messages)


def test_host_dependent_cases_are_the_gpu_ids_only(results: tuple[list[Case], float, int]) -> None:
    """The excluded case is accepted only because the shadow has no GPUs; its siblings still fail."""
    cases, _, _ = results
    by_name = {c.name: c for c in cases}
    assert by_name["noautofill_platform/invalid_gpu[onnxruntime_onnx]"].verdict is False
    assert by_name["noautofill_platform/negative_gpu[onnxruntime_onnx]"].agrees
    assert by_name["noautofill_platform/invalid_cpu[onnxruntime_onnx]"].agrees


REAL_WORLD = SHARED / "conformance" / "real-world"


def test_real_world_repositories_have_only_true_errors() -> None:
    """Real repositories load; the one true error (an ensemble step naming a model that is not in the
    folder) is reported with Triton's message, on the ensemble's config, relative to display_root."""
    if not REAL_WORLD.is_dir():
        pytest.skip("../shared/conformance/real-world is not available")
    from kubectl_triton.checks.model.triton import check_repository_with_triton
    from kubectl_triton.errors import ToolMissing

    repos = sorted(p for p in REAL_WORLD.iterdir() if p.is_dir())
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            found = list(pool.map(lambda r: check_repository_with_triton(r, display_root=REAL_WORLD), repos))
    except ToolMissing as err:
        pytest.skip(err.message)
    findings = [f for per_repo in found for f in per_repo]
    assert len(repos) >= 5
    assert [(f.severity, f.code, f.model, f.path) for f in findings] == [
        ("error", "TritonLoadFailed", "ensemble_model",
         "tutorials-HuggingFace-ensemblemodelrepository/ensemble_model/config.pbtxt")]
    assert "not available or ambiguous: vit" in findings[0].message


def test_unparsable_config_is_reported_by_triton(tmp_path: Path) -> None:
    from kubectl_triton.checks.model.triton import check_repository_with_triton
    from kubectl_triton.errors import ToolMissing

    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "config.pbtxt").write_text(
        'name: "good"\nbackend: "onnxruntime"\nmax_batch_size: 2\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'instance_group [ { kind: KIND_GPU count: 2 } ]\n')
    (tmp_path / "typo").mkdir()
    (tmp_path / "typo" / "config.pbtxt").write_text('name: "typo"\nmax_batch_sise: 4\n')
    try:
        findings = check_repository_with_triton(tmp_path)
    except ToolMissing as err:
        pytest.skip(err.message)
    assert [(f.model, f.path) for f in findings] == [("typo", "typo/config.pbtxt")]
    assert "failed to read text proto" in findings[0].message


def test_empty_repository_needs_no_server(tmp_path: Path) -> None:
    from kubectl_triton.checks.model.triton import check_repository_with_triton

    assert check_repository_with_triton(tmp_path) == []


def test_host_dependent_messages_are_not_user_errors(tmp_path: Path) -> None:
    from kubectl_triton.checks.model.triton import findings_from_states

    failures = {
        "a": "instance group a_0 of model a specifies invalid or unsupported gpu id 3. GPUs with at least ...",
        "b": "instance group b_0 of model b specifies invalid or unsupported gpu id -1. GPUs with at least ...",
        "c": "instance group c_0 of model c has kind KIND_GPU but no GPUs are available",
        "d": "'max_batch_size' must be non-negative value for d",
    }
    findings = findings_from_states(failures, tmp_path / "models", display_root=tmp_path)
    assert [(f.model, f.path) for f in findings] == [("b", "models/b/config.pbtxt"), ("d", "models/d/config.pbtxt")]
