"""Batched builds (one kustomize process for many folders) give every folder exactly its own build's output, and
exactly its own error, on this repository, on real Flux and kustomize repositories, and on the awkward cases."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks import gate
from kubectl_triton.errors import RenderError
from kubectl_triton.gitops.model import Repository
from tests.conftest import REPO, SHARED

CORPUS = SHARED / "conformance" / "yaml-corpus"


def alone(path: Path) -> kustomize.Rendered | RenderError:
    try:
        return kustomize.build(path, kustomize.kustomize_command())
    except RenderError as err:
        return err


def same(paths: list[Path]) -> None:
    batched = kustomize.build_many(paths)
    assert len(batched) == len(paths)
    with ThreadPoolExecutor(max_workers=4) as pool:  # one kustomize process per folder, as before batching
        wanted = list(pool.map(alone, paths))
    for path, got, want in zip(paths, batched, wanted, strict=True):
        assert type(got) is type(want), path
        if isinstance(want, RenderError):
            assert isinstance(got, RenderError) and got.detail == want.detail, path
        else:
            assert isinstance(got, kustomize.Rendered) and got.yaml == want.yaml, path
            assert got.path == path


def test_this_repository_builds_the_same_batched():
    targets = gate._targets(REPO, Repository.at(REPO).layout, [])
    assert len(targets) >= 10
    same([t.path for t in targets])


@pytest.mark.skipif(not CORPUS.is_dir(), reason="needs ../shared/conformance/yaml-corpus")
def test_real_flux_and_kustomize_repositories_build_the_same_batched():
    """The corpus has folders that fail (files left out of the corpus): each keeps its own error."""
    paths = sorted({p.parent for name in kustomize.KUSTOMIZATION_FILES for p in CORPUS.rglob(name)})
    assert len(paths) >= 30
    results = kustomize.build_many(paths)
    assert any(isinstance(r, RenderError) for r in results) and any(isinstance(r, kustomize.Rendered)
                                                                     for r in results)
    same(paths)


def write(folder: Path, files: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, doc in files.items():
        (folder / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return folder


def kustomization(**fields: object) -> dict:
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", **fields}


def configmap(name: str, **meta: object) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}, "data": {"k": "v"}}


def test_awkward_folders_build_the_same_batched(tmp_path: Path):
    annotated = configmap("annotated", annotations={"a.example.com/first": "1", "z.example.com/last": "2",
                                                    "m.example.com/multi": "line one\nline two\n"})
    folders = [
        write(tmp_path / "plain", {"kustomization.yaml": kustomization(resources=["cm.yaml"]),
                                   "cm.yaml": configmap("plain")}),
        write(tmp_path / "annotated", {"kustomization.yaml": kustomization(resources=["cm.yaml"]),
                                       "cm.yaml": annotated}),
        write(tmp_path / "empty-annotations", {"kustomization.yaml": kustomization(resources=["cm.yaml"]),
                                               "cm.yaml": configmap("empty", annotations={})}),
        write(tmp_path / "nothing", {"kustomization.yaml": kustomization()}),
        write(tmp_path / "generated", {
            "kustomization.yaml": kustomization(
                resources=["pod.yaml"], configMapGenerator=[{"name": "settings", "literals": ["a=b"]}],
                commonAnnotations={"team": "ml"}),
            "pod.yaml": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                         "spec": {"containers": [{"name": "c", "image": "x", "envFrom": [
                             {"configMapRef": {"name": "settings"}}]}]}}}),
        write(tmp_path / "list", {"kustomization.yaml": kustomization(resources=["list.yaml"]),
                                  "list.yaml": {"apiVersion": "v1", "kind": "List",
                                                "items": [configmap("one"), configmap("two")]}}),
        write(tmp_path / "fifo", {"kustomization.yaml": kustomization(resources=["cm.yaml", "ns.yaml"],
                                                                      sortOptions={"order": "fifo"}),
                                  "cm.yaml": configmap("first", namespace="later"),
                                  "ns.yaml": {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": "later"}}}),
        write(tmp_path / "broken", {"kustomization.yaml": kustomization(resources=["missing.yaml"])}),
    ]
    # two folders of one parent declaring the same object: a batch holding both would be refused
    folders += [write(tmp_path / "twins" / side, {"kustomization.yaml": kustomization(resources=["cm.yaml"]),
                                                  "cm.yaml": configmap("twin", labels={"side": side})})
                for side in ("left", "right")]
    same(folders)
    assert not kustomize.batchable(tmp_path / "fifo")
    assert kustomize.batchable(tmp_path / "plain")


def test_same_object_in_two_batch_members_is_no_error(tmp_path: Path):
    """Folders of different parents that declare the same object may share a batch: kustomize refuses the
    batch, and halving it gives each folder its own build."""
    folders = [write(tmp_path / f"team-{n}" / "app", {"kustomization.yaml": kustomization(resources=["cm.yaml"]),
                                                      "cm.yaml": configmap("shared", labels={"member": str(n)})})
               for n in range(4)]
    results = kustomize.build_batch(folders, kustomize.kustomize_command())
    assert all(isinstance(r, kustomize.Rendered) for r in results)
    assert [yaml.safe_load(r.yaml)["metadata"]["labels"]["member"] for r in results
            if isinstance(r, kustomize.Rendered)] == ["0", "1", "2", "3"]


def test_kubectl_errors_read_without_the_klog_header(tmp_path: Path):
    folder = write(tmp_path / "broken", {"kustomization.yaml": kustomization(resources=["missing.yaml"])})
    err = alone(folder)
    assert isinstance(err, RenderError)
    assert "missing.yaml" in err.detail
    assert "run.go" not in err.detail and not err.detail.startswith(("E1", "E0")), err.detail


def test_kustomize_runs_with_a_lazier_garbage_collector_unless_the_user_set_one(monkeypatch):
    monkeypatch.delenv("GOGC", raising=False)
    assert kustomize.go_env()["GOGC"] == "400"
    monkeypatch.setenv("GOGC", "100")
    assert kustomize.go_env()["GOGC"] == "100"
