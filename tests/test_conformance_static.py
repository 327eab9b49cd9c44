"""Triton's own model-config conformance cases, run through the static checker as Triton's harness
runs them (qa/L0_model_config/test.sh), plus real-world repositories that must pass."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubectl_triton.checks.findings import ERROR
from kubectl_triton.checks.model.modelrepo import check_repository

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CASES = SHARED / "conformance" / "triton-model-config"
REAL_WORLD = SHARED / "conformance" / "real-world"
# Platforms the harness writes into single-model cases; `ensemble` uses the expected_ensemble files.
TRIALS = ("onnxruntime_onnx", "tensorrt_plan", "pytorch_libtorch", "ensemble")
TARGET = 0.95

pytestmark = pytest.mark.skipif(not CASES.is_dir(), reason="../shared/conformance is not available")


@dataclass
class Run:
    case: str
    expected: list[str]
    errors: list[str]

    @property
    def agrees(self) -> bool:
        """Refused with a message carrying Triton's (the expected text is a grep pattern), or
        accepted when Triton accepts."""
        if not self.expected:
            return not self.errors
        return any(re.search(pattern, message) for pattern in self.expected for message in self.errors)


def _patterns(files: list[Path]) -> list[str]:
    return [f.read_text(encoding="utf-8").strip() for f in files]


def _errors(repo: Path) -> list[str]:
    return [f.message for f in check_repository(repo) if f.severity == ERROR]


def _single_model_runs(tmp: Path) -> list[Run]:
    runs = []
    for case in sorted(p for p in (CASES / "noautofill_platform").iterdir() if p.is_dir()):
        for trial in TRIALS:
            if trial == "ensemble":
                expected = sorted(case.glob("expected_ensemble*"))
                if not expected:
                    continue  # Triton's suite defines no outcome for this platform
            else:
                expected = [p for p in sorted(case.glob("expected*")) if "ensemble" not in p.name]
            repo = tmp / f"{case.name}-{trial}"
            shutil.copytree(case, repo / case.name)
            config = repo / case.name / "config.pbtxt"
            lines = [ln for ln in config.read_text(encoding="utf-8").splitlines() if "platform:" not in ln]
            config.write_text("\n".join([*lines, f'platform: "{trial}"', ""]), encoding="utf-8")
            runs.append(Run(f"noautofill_platform/{case.name} [{trial}]", _patterns(expected), _errors(repo)))
    return runs


def _ensemble_runs(tmp: Path) -> list[Run]:
    runs = []
    for case in sorted(p for p in (CASES / "autofill_noplatform" / "ensemble").iterdir() if p.is_dir()):
        repo = tmp / f"ensemble-{case.name}"
        if (case / "config.pbtxt").is_file():  # the case folder is one model
            shutil.copytree(case, repo / case.name)
        else:  # the case folder is a whole model repository
            shutil.copytree(case, repo)
        for model in repo.iterdir():
            if (model / "config.pbtxt").is_file():
                (model / "1").mkdir(exist_ok=True)  # the harness gives every model a version folder
        runs.append(Run(f"ensemble/{case.name}", _patterns(sorted(case.glob("expected*"))), _errors(repo)))
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Run]:
    tmp = tmp_path_factory.mktemp("conformance")
    return _single_model_runs(tmp) + _ensemble_runs(tmp)


def test_conformance_share(runs: list[Run], record_property, capsys) -> None:
    agreed = [r for r in runs if r.agrees]
    share = len(agreed) / len(runs)
    figures = (f"static conformance: {len(agreed)}/{len(runs)} runs agree with Triton "
               f"({share:.1%}; target {TARGET:.0%}); single-model "
               f"{sum(r.agrees for r in runs if not r.case.startswith('ensemble/'))}/"
               f"{sum(not r.case.startswith('ensemble/') for r in runs)}, ensemble "
               f"{sum(r.agrees for r in runs if r.case.startswith('ensemble/'))}/"
               f"{sum(r.case.startswith('ensemble/') for r in runs)}")
    misses = [f"  {r.case}: expected {r.expected!r}, got {r.errors!r}" for r in runs if not r.agrees]
    with capsys.disabled():  # the figures belong in every test run's output
        print("\n" + figures + ("\n" + "\n".join(misses) if misses else ""))
    record_property("conformance_static", figures)
    assert len(runs) > 150, "the conformance set looks truncated"
    assert share >= TARGET, figures + "\n" + "\n".join(misses)


def test_every_refused_case_is_refused(runs: list[Run]) -> None:
    """The verdict alone: the checker never passes a configuration Triton refuses."""
    passed = [r.case for r in runs if r.expected and not r.errors]
    assert not passed, f"accepted although Triton refuses: {passed}"


@pytest.mark.parametrize("repo", sorted(p.name for p in REAL_WORLD.iterdir()) if REAL_WORLD.is_dir() else [])
def test_real_world_repositories(repo: str) -> None:
    findings = check_repository(REAL_WORLD / repo)
    errors = [f for f in findings if f.severity == ERROR]
    if repo == "tutorials-HuggingFace-ensemblemodelrepository":
        assert [(f.model, f.code) for f in errors] == [("ensemble_model", "EnsembleModelMissing")]
        assert "vit" in errors[0].message
        assert errors[0].path == "ensemble_model/config.pbtxt" and errors[0].line
    else:
        assert errors == [], "\n".join(f"{f.path}:{f.line} {f.message}" for f in errors)
