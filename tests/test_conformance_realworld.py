"""Static checks against the real tritonserver on real model repositories from public projects and on single-point
mutations of them (tests/realworld.py says how each case is judged and what a python shadow cannot judge).

`make test` runs a fixed subset: one repository of each of 16 projects (the smallest one holding an ensemble, else
the smallest; at most 4 models) with up to two seeded mutations each, in one server (about 55 s on 2 cores). The
whole corpus (every repository, up to four mutations each) runs with KUBECTL_TRITON_REALWORLD=all (`make realworld`,
about 8 minutes on 2 cores for the 94 repositories of tests/fixtures/realworld-sources.json).
Both record their figures (`conformance_realworld`) and require ≥ 99% agreement and no false error on an
unmutated repository.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests import realworld as rw
from tests.test_conformance_families import CPU, ENSEMBLE, IO, assert_agree, model, triton_verdicts, write_repo

FULL = os.environ.get("KUBECTL_TRITON_REALWORLD") == "all"
TARGET = 0.99


SUBSET_PROJECTS = 16  # `make test` stays well under 10 minutes on 2 cores (61 projects took 118 s)


def subset(repos: list[rw.Repo]) -> list[rw.Repo]:
    """One repository per project (the smallest holding an ensemble, else the smallest, of at most 4 models), for
    SUBSET_PROJECTS projects: those with an ensemble first, then by name."""
    by_project: dict[str, list[rw.Repo]] = {}
    for repo in repos:
        if len(repo.models()) <= 4:
            by_project.setdefault(repo.project, []).append(repo)

    def has_ensemble(repo: rw.Repo) -> bool:
        return any('"ensemble"' in (repo.path / m / rw.CONFIG).read_text(errors="replace") for m in repo.models())

    chosen = []
    for _, members in sorted(by_project.items()):
        pool = [r for r in members if has_ensemble(r)] or members
        chosen.append((not has_ensemble(pool[0]), min(pool, key=lambda r: (len(r.models()), r.slug))))
    return [repo for _, repo in sorted(chosen, key=lambda c: (c[0], c[1].project))[:SUBSET_PROJECTS]]


@pytest.fixture(scope="module")
def judged(install, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[rw.Case], list[rw.Case], float]:
    if not (rw.CORPUS / "sources.json").is_file():
        pytest.skip(f"no real-world corpus at {rw.CORPUS} (tools/realworld_corpus.py builds it; "
                    "KUBECTL_TRITON_REALWORLD_CORPUS names another folder)")
    repos = rw.load_corpus()
    if not FULL:
        repos = subset(repos)
    originals = [rw.Case(r) for r in repos]
    mutated = rw.mutations(repos, 4 if FULL else 2)
    cases = originals + mutated
    work = tmp_path_factory.mktemp("realworld")
    start = time.monotonic()
    batch = 160  # cases per server: about 260 python stubs
    for i in range(0, len(cases), batch):
        part = work / f"batch{i}"
        part.mkdir()
        rw.judge(cases[i:i + batch], install, part)
    elapsed = time.monotonic() - start
    shutil.rmtree(work, ignore_errors=True)
    return originals, mutated, elapsed


def test_every_case_is_judged(judged: tuple[list[rw.Case], list[rw.Case], float]) -> None:
    originals, mutated, _ = judged
    assert len({c.repo.project for c in originals}) >= 15
    assert len(mutated) >= len(originals) * (2 if FULL else 0.8)
    for case in originals + mutated:
        assert case.triton and set(case.triton) == set(case.triton) | set(case.static), case.name
    # the mutations reach the shadow: most of them make Triton refuse a model
    refused = [c for c in mutated if any(m is not None for m in c.triton.values())]
    assert len(refused) >= 0.75 * len(mutated)  # the 94-repository corpus: 281/352 (the rest Triton accepts too)


def test_realworld_agreement(judged: tuple[list[rw.Case], list[rw.Case], float], record_property,
                             capsys: pytest.CaptureFixture[str]) -> None:
    originals, mutated, elapsed = judged
    line, misses = rw.summary(originals, mutated)
    scope = "whole corpus" if FULL else "make-test subset (KUBECTL_TRITON_REALWORLD=all: whole corpus)"
    figures = f"{line}; {scope}; {elapsed:.0f} s"
    families = rw.families(originals + mutated)
    with capsys.disabled():
        print("\n" + figures + (f"\n  disagreements per family: {families}\n" + "\n".join(misses) if misses else ""))
    record_property("conformance_realworld", figures)
    cases = originals + mutated
    false_errors = [d for c in originals for d in c.disagreements() if "Triton loads it" in d]
    assert not false_errors, "\n".join(false_errors)
    assert sum(c.agrees for c in cases) / len(cases) >= TARGET, figures + "\n" + "\n".join(misses)


# -- the disagreement families found on the corpus, each against the real server ----------------------------------

def test_ensemble_over_a_failing_step_is_refused(install, tmp_path: Path) -> None:
    """Triton refuses an ensemble whose step model it refuses (and an ensemble of that ensemble); the static
    checks report each, pointing at the step."""
    from kubectl_triton.checks.model.modelrepo import check_repository

    outer = ENSEMBLE.format(name="outer", step="e_broken").replace('key: "X"', 'key: "IN"').replace(
        'key: "Y"', 'key: "OUT"')
    repo = write_repo(tmp_path / "repo", {
        "e_broken": model(ENSEMBLE.format(name="e_broken", step="broken")),
        "broken": model(CPU + "max_batch_size: 4\ndynamic_batching {preferred_batch_size: [8]}\n" + IO),
        "outer": model(outer),
        "e_gpu_on_cpu": model(ENSEMBLE.format(name="e_gpu_on_cpu", step="cpu_with_gpus")),
        "cpu_with_gpus": model('backend: "python"\ninstance_group [{kind: KIND_CPU count: 1 gpus: [0]}]\n' + IO),
        "e_ok": model(ENSEMBLE.format(name="e_ok", step="ok")),
        "ok": model(CPU + IO),
    })
    refused = {"e_broken", "broken", "outer", "e_gpu_on_cpu", "cpu_with_gpus"}
    for strict in (False, True):
        verdicts = triton_verdicts(install, repo, strict)
        assert {n for n, m in verdicts.items() if m is not None} == refused
        # Triton names the failing step whatever the stage it fails at (config check or load)
        assert "broken" in str(verdicts["e_broken"]) and "e_broken" in str(verdicts["outer"])
        static = {str(f.model) for f in check_repository(repo, strict=strict) if f.severity == "error"}
        assert static == refused
    cascade = {f.model: f for f in check_repository(repo) if f.model in ("e_broken", "outer")}
    assert cascade["e_broken"].code == "EnsembleModelMissing"
    assert "depends on 'broken' which is not valid" in cascade["e_broken"].message
    assert "preferred size must be <= max batch size" in cascade["e_broken"].message
    assert "depends on 'e_broken'" in cascade["outer"].message
    assert cascade["outer"].line == 6  # the step naming the failing model


def test_shadow_keeps_a_platform_no_backend_serves(install, tmp_path: Path) -> None:
    """`platform: "custom"` (Triton 1's custom backends) is refused by Triton on every host; the shadow keeps it
    so --triton says so too, as the static checks do."""
    from kubectl_triton.checks.model.modelrepo import check_repository
    from kubectl_triton.checks.model.triton import check_repository_with_triton

    repo = write_repo(tmp_path / "repo", {
        "legacy": {"config.pbtxt": 'platform: "custom"\ndefault_model_filename: "libcustom.so"\n' + IO,
                   "1/libcustom.so": ""},
        "fine": {"config.pbtxt": 'platform: "onnxruntime_onnx"\n' + IO, "1/model.onnx": ""},
    })
    triton = check_repository_with_triton(repo)
    static = [f for f in check_repository(repo) if f.severity == "error"]
    assert [(f.model, f.message) for f in triton] == [("legacy", "unexpected platform type 'custom' for legacy")]
    assert [(f.model, f.message) for f in static] == [("legacy", "unexpected platform type 'custom' for legacy")]


def test_shadow_gives_an_uncommitted_model_the_versions_its_policy_names(install, tmp_path: Path) -> None:
    """Repositories commit configs without weights; a deployment mounts the version folders the policy names.
    The shadow creates those (not `1/`), so a `specific` policy is judged as deployed; with version folders
    committed, Triton and the static checks judge the policy against them."""
    from kubectl_triton.checks.model.modelrepo import check_repository
    from kubectl_triton.checks.model.triton import check_repository_with_triton

    policy = 'version_policy: {specific: {versions: [2, 3]}}\n'
    repo = write_repo(tmp_path / "repo", {
        "uncommitted": {"config.pbtxt": 'backend: "python"\n' + policy + IO},
        "committed_elsewhere": {"config.pbtxt": 'backend: "python"\n' + policy + IO, "1/model.py": ""},
        "one_of_two": {"config.pbtxt": 'backend: "python"\n' + policy + IO, "3/model.py": ""},
    })
    triton = {f.model: f.message for f in check_repository_with_triton(repo)}
    static = {f.model: f.message for f in check_repository(repo) if f.severity == "error"}
    assert set(triton) == set(static) == {"committed_elsewhere"}
    assert "at least one version must be available under the version policy" in triton["committed_elsewhere"]


def test_two_outputs_of_one_name_with_label_files(install, tmp_path: Path) -> None:
    """Triton loads a config that declares an output name twice, unless both declarations name a label file
    ("multiple label files for 'Y'"); the static checks say the same, on the second declaration."""
    from kubectl_triton.checks.model.modelrepo import check_repository

    def outputs(first: str, second: str) -> str:
        return (CPU + 'input [{name: "X" data_type: TYPE_FP32 dims: [2]}]\n'
                f'output [{{name: "Y" data_type: TYPE_FP32 dims: [1] {first}}}, '
                f'{{name: "Y" data_type: TYPE_FP32 dims: [1] {second}}}]\n')

    labels = 'label_filename: "labels.txt"'
    repo = write_repo(tmp_path / "repo", {
        "both_labeled": {**model(outputs(labels, labels)), "labels.txt": "a\n"},
        "one_labeled": {**model(outputs(labels, "")), "labels.txt": "a\n"},
        "none_labeled": model(outputs("", "")),
    })
    verdicts = assert_agree(install, repo, strict=True)
    assert {n for n, m in verdicts.items() if m is not None} == {"both_labeled"}
    (found,) = [f for f in check_repository(repo) if f.model == "both_labeled"]
    assert (found.code, found.line) == ("ModelIO", 4)


def test_an_output_declared_twice_and_mapped_by_an_ensemble_is_refused(install, tmp_path: Path) -> None:
    """Triton loads a model that declares an output name twice, but refuses an ensemble whose step maps that
    output ("multiple outputs in model M are mapped to the same ensemble tensor T"); the static checks agree."""
    from kubectl_triton.checks.model.modelrepo import check_repository

    twice = CPU + ('input [{name: "X" data_type: TYPE_FP32 dims: [2]}]\n'
                   'output [{name: "Y" data_type: TYPE_FP32 dims: [1]}, {name: "Y" data_type: TYPE_FP32 dims: [1]}]\n')
    repo = write_repo(tmp_path / "repo", {
        "twice": model(twice),
        "e_twice": model(ENSEMBLE.format(name="e_twice", step="twice")),
        "once": model(CPU + IO),
        "e_once": model(ENSEMBLE.format(name="e_once", step="once")),
    })
    for strict in (False, True):
        verdicts = assert_agree(install, repo, strict=strict)
        assert {n for n, m in verdicts.items() if m is not None} == {"e_twice"}
        assert "mapped to the same ensemble tensor OUT" in str(verdicts["e_twice"])
    (found,) = [f for f in check_repository(repo) if f.severity == "error"]
    assert (found.model, found.code) == ("e_twice", "EnsembleGraph")


def test_an_ensemble_whose_version_policy_selects_no_version_folder_is_refused(install, tmp_path: Path) -> None:
    """An ensemble needs a version folder its version_policy selects, as every model does."""
    policy = 'version_policy: {specific: {versions: [7]}}\n'
    repo = write_repo(tmp_path / "repo", {
        "step": model(CPU + IO),
        "e_seven": model(ENSEMBLE.format(name="e_seven", step="step") + policy),
        "e_latest": model(ENSEMBLE.format(name="e_latest", step="step")),
    })
    verdicts = assert_agree(install, repo, strict=False)
    assert {n for n, m in verdicts.items() if m is not None} == {"e_seven"}
    assert "at least one version must be available under the version policy" in str(verdicts["e_seven"])
