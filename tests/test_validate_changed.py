"""`validate --changed-from REF` and the render cache: the cache never serves a stale render, and a run narrowed
to what a change can affect reports the same errors as a full, cold run of the same tree."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.gitops import repo
from kubectl_triton.gitops.inputs import build_inputs

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}


def test_editing_a_shared_base_file_rerenders_every_overlay(repo_copy: Path, tmp_path: Path):
    overlays = repo.overlays(repo_copy)
    cache = kustomize.RenderCache(tmp_path / "cache")
    first = kustomize.build_many(overlays, cache)
    assert cache.misses == len(overlays) and cache.hits == 0
    again = kustomize.RenderCache(tmp_path / "cache")
    assert [r.yaml for r in kustomize.build_many(overlays, again)] == [r.yaml for r in first]
    assert again.hits == len(overlays) and again.misses == 0

    service = repo_copy / "base/triton/service.yaml"
    service.write_text(service.read_text().replace("port: 8000", "port: 8080"))
    users = [o for o in overlays if service.resolve() in build_inputs(o).files]
    assert len(users) >= 5  # every serving overlay builds on base/triton
    after = kustomize.RenderCache(tmp_path / "cache")
    results = kustomize.build_many(overlays, after)
    assert after.misses == len(users) and after.hits == len(overlays) - len(users)
    for overlay, result in zip(overlays, results, strict=True):
        assert ("port: 8080" in result.yaml) is (overlay in users)

    # a file two levels away (a model's config.pbtxt, through the model Component's configMapGenerator) too
    config = repo_copy / "models/image-classifier/image_classifier/config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 32", "max_batch_size: 16"))
    last = kustomize.RenderCache(tmp_path / "cache")
    results = kustomize.build_many(overlays, last)
    assert last.misses == 2  # image-classifier/l4 and /t4
    assert all("max_batch_size: 16" in r.yaml for o, r in zip(overlays, results, strict=True)
               if "image-classifier" in str(o))


@pytest.fixture
def git_copy(repo_copy: Path) -> Path:
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "seed"]):
        subprocess.run(["git", *args], cwd=repo_copy, check=True, env={**GIT_ENV, "PATH": "/usr/bin:/bin"})
    return repo_copy


# Single-file edits a pull request makes, each reaching a different part of the repository.
EDITS = [
    ("models/image-classifier/image_classifier/config.pbtxt", "max_batch_size: 32", "max_batch_size: 0"),
    ("models/llama3-8b/ensemble/config.pbtxt", 'value: "_REQUEST_INPUT_LEN" }', 'value: "_NOPE" }'),
    ("base/platform/namespace.yaml", "  name: triton\n", "  name: triton-x\n"),
    ("base/triton/service.yaml", "  type: ClusterIP\n", "  type: ClusterIP\n  clusterIPs2: []\n"),
    ("overlays/text-embedder/a10g/kustomization.yaml", "  - ../../gpus/a10g\n", ""),
    ("clusters/production/models/text-embedder-a10g.yaml", "timeout: 15m", "timeout: 5m"),
    ("models/llama3-8b/model.yaml", "  tp: 1\n", "  tp: 2\n"),
    ("overlays/llama3-8b/model/deployment.yaml", "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3\n"
     "          startupProbe", "nvcr.io/nvidia/tritonserver:25.01-trtllm-python-py3\n          startupProbe"),
    ("kubectl-triton.yaml", "        rwx: true\n", "        rwx: false\n"),
    ("overlays/gpus/l4/gpu.yaml", "nvidia.com/gpu: 1", "nvidia.com/gpu: 12"),
]


def _errors(run_cli, *args: str) -> set[tuple]:
    result = run_cli("validate", *args, "-o", "json")
    assert result.exit_code in (0, 1), result.stderr
    return {(f["code"], f["path"], f["line"], f["object"], f["model"], f["message"])
            for f in json.loads(result.stdout)["findings"] if f["severity"] == "error"}


@pytest.mark.parametrize("seed", [15])
def test_changed_from_reports_what_a_full_cold_run_reports(run_cli, git_copy: Path, seed: int):
    rng = random.Random(seed)
    assert _errors(run_cli, str(git_copy), "--no-cache") == set()
    _errors(run_cli, str(git_copy))  # warm the cache on the base tree, as a previous CI run would
    for path, old, new in rng.sample(EDITS, 6):
        file = git_copy / path
        text = file.read_text()
        assert old in text, (path, old)
        file.write_text(text.replace(old, new, 1))
        full = _errors(run_cli, str(git_copy), "--no-cache")
        assert full, f"the edit of {path} should fail the gate"
        assert _errors(run_cli, str(git_copy), "--changed-from", "HEAD") == full, path
        file.write_text(text)


def test_changed_from_a_ref_git_does_not_know_is_a_usage_error(run_cli, git_copy: Path):
    result = run_cli("validate", str(git_copy), "--changed-from", "no-such-ref")
    assert result.exit_code == 2 and "not a commit" in result.stderr


def test_parse_results_kept_between_runs_are_never_stale(run_cli, repo_copy: Path, tmp_path: Path, monkeypatch):
    """validate keeps what it parsed (by content digest) for the next run; an edited file is parsed anew."""
    from kubectl_triton.formats import yamlio

    monkeypatch.setenv("KUBECTL_TRITON_CACHE_DIR", str(tmp_path / "cache"))
    assert run_cli("validate", str(repo_copy), "-o", "json").exit_code == 0
    stores = list((tmp_path / "cache").glob("parsed-*.json"))
    assert len(stores) == 1 and len(json.loads(stores[0].read_text())) >= 20

    yamlio._PARSED.clear()  # a new process: only the kept results are known
    flux = repo_copy / "clusters/production/models/text-embedder-a10g.yaml"
    flux.write_text(flux.read_text().replace("timeout: 15m", "timeout: [15m"))
    result = run_cli("validate", str(repo_copy), "-o", "json")
    found = [(f["code"], f["path"]) for f in json.loads(result.stdout)["findings"] if f["severity"] == "error"]
    assert result.exit_code == 1 and ("YamlInvalid", "clusters/production/models/text-embedder-a10g.yaml") in found


def test_only_what_json_gives_back_exactly_is_kept():
    from kubectl_triton.formats import yamlio

    yamlio.parsed_since_prime()
    dated = yamlio.loads_all_shared("when: 2026-12-03\n", "dated.yaml")
    keyed = yamlio.loads_all_shared("1: one\n", "keyed.yaml")
    plain = yamlio.loads_all_shared("name: x\nitems: [1, 2.5, true, null]\n", "plain.yaml")
    kept = yamlio.parsed_since_prime()
    assert kept is not None and plain in kept.values() and dated not in kept.values() and keyed not in kept.values()


def test_inputs_through_symlinked_folders_are_the_files_kustomize_reads(tmp_path: Path):
    """A folder reached through a symlink, and `..` after it: the files are those of the link's target, as
    kustomize (which resolves each root's symlinks, then joins paths lexically) reads them."""
    tmp_path = tmp_path.resolve()
    real = tmp_path / "shared" / "base"
    real.mkdir(parents=True)
    (real / "kustomization.yaml").write_text("resources:\n- cm.yaml\n- ../extra\n")
    (real / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n")
    (tmp_path / "shared" / "extra").mkdir()
    (tmp_path / "shared" / "extra" / "kustomization.yaml").write_text("resources: []\n")
    overlay = tmp_path / "repo" / "overlay"
    overlay.mkdir(parents=True)
    (tmp_path / "repo" / "base").symlink_to(real)
    (overlay / "kustomization.yaml").write_text("resources:\n- ../base\n")
    files = build_inputs(overlay).files
    assert real / "cm.yaml" in files and tmp_path / "shared" / "extra" / "kustomization.yaml" in files
    cache = kustomize.RenderCache(tmp_path / "cache")
    first = cache.key(overlay, kustomize.kustomize_command())
    (real / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n")
    assert kustomize.RenderCache(tmp_path / "cache").key(overlay, kustomize.kustomize_command()) != first
    assert "name: b" in kustomize.build_many([overlay], kustomize.RenderCache(tmp_path / "cache"))[0].yaml


@pytest.mark.parametrize("path,old,new", [
    # the overlays of the model are rebuilt: the early builds are adopted
    ("models/image-classifier/image_classifier/config.pbtxt", "max_batch_size: 32", "max_batch_size: 0"),
    ("overlays/llama3-8b/model/deployment.yaml", "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3\n"
     "          startupProbe", "nvcr.io/nvidia/tritonserver:25.01-trtllm-python-py3\n          startupProbe"),
    # a file of the model that no build reads: the early builds are dropped, the cached renders serve
    ("models/image-classifier/NOTES.md", "", "notes\n"),
])
def test_a_models_overlays_built_early_give_what_a_full_run_gives(run_cli, git_copy: Path, path: str, old: str,
                                                                  new: str):
    """`--changed-from` starts building the overlays of a changed model before the cache lookups; whether a
    lookup then adopts or drops such a build, the findings are a full cold run's."""
    _errors(run_cli, str(git_copy))  # the base tree's run fills the cache
    file = git_copy / path
    text = file.read_text() if file.exists() else ""
    assert old in text
    file.write_text(text.replace(old, new, 1))
    full = _errors(run_cli, str(git_copy), "--no-cache")
    assert _errors(run_cli, str(git_copy), "--changed-from", "HEAD") == full
    assert bool(full) == (path != "models/image-classifier/NOTES.md")
