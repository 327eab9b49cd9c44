"""`kubectl triton diff`: base ref rendered in a temporary worktree, per-cluster changes, rolls, three outputs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.gitops import diff
from kubectl_triton.gitops.diff import Entry, Key

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


@pytest.fixture
def git_repo(repo_copy: Path, monkeypatch) -> Path:
    """The example repository committed once on `main` in a fresh git repository; diff's temporary folders go to a
    folder of this test's own (`_temp_dirs` then sees no other test's)."""
    private = repo_copy.parent / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    git(repo_copy, "init", "-q", "-b", "main")
    git(repo_copy, "add", ".")
    git(repo_copy, "commit", "-q", "-m", "seed")
    monkeypatch.delenv("GITHUB_BASE_REF", raising=False)
    return repo_copy


def _worktrees(root: Path) -> list[str]:
    return [ln for ln in git(root, "worktree", "list", "--porcelain").splitlines() if ln.startswith("worktree ")]


def _temp_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("kubectl-triton-diff-*")}


# ------------------------------------------------------------------------------------------------ pure core

def _obj(kind: str, name: str, ns: str = "triton", **spec) -> dict:
    return {"apiVersion": "apps/v1" if kind == "Deployment" else "v1", "kind": kind,
            "metadata": {"name": name, "namespace": ns}, **spec}


def _dep(cm: str, image: str = "nvcr.io/nvidia/tritonserver:24.12-py3", replicas: int = 1) -> dict:
    return _obj("Deployment", "m-triton", spec={"replicas": replicas, "template": {"spec": {
        "containers": [{"name": "tritonserver", "image": image}, {"name": "sidecar", "image": "busybox"}],
        "volumes": [{"name": "model-config", "configMap": {"name": cm}}]}}})


def _snap(*objs: dict) -> dict[Key, Entry]:
    return {Key.of(o): Entry(o, "overlays/m/l4") for o in objs}


def test_field_changes_match_named_list_items_and_report_absent_sides():
    before = {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "args": ["1"]}]}}
    after = {"spec": {"containers": [{"name": "b", "args": ["1"]}, {"name": "a", "image": "y"}], "new": 1}}
    changes = diff.field_changes(before, after)
    assert [(c.path, c.before, c.after) for c in changes] == [
        ("spec.containers[a].image", "x", "y"), ("spec.new", None, 1)]


def test_config_hash_change_is_one_renamed_configmap_and_a_roll():
    base = _snap(_dep("m-config-aaaaaaaaaa"), _obj("ConfigMap", "m-config-aaaaaaaaaa", data={"k": "1"}))
    head = _snap(_dep("m-config-bbbbbbbbbb"), _obj("ConfigMap", "m-config-bbbbbbbbbb", data={"k": "2"}))
    out = diff.diff_cluster("production", base, head)
    assert out.added == [] and out.removed == []
    cm = next(c for c in out.changed if c.object.startswith("ConfigMap"))
    assert cm.renamed_from == "m-config-aaaaaaaaaa" and [x.path for x in cm.changes] == ["data.k"]
    [roll] = out.rolls
    assert roll.object == "Deployment/triton/m-triton"
    assert roll.reasons == ["ConfigMap m-config changed (m-config-aaaaaaaaaa → m-config-bbbbbbbbbb)"]


def test_image_change_rolls_but_replicas_do_not():
    base = _snap(_dep("c"))
    assert diff.diff_cluster("p", base, _snap(_dep("c", replicas=3))).rolls == []
    out = diff.diff_cluster("p", base, _snap(_dep("c", image="nvcr.io/nvidia/tritonserver:25.01-py3")))
    assert out.rolls[0].reasons == ["template.spec.containers[tritonserver].image: "
                                    "nvcr.io/nvidia/tritonserver:24.12-py3 → nvcr.io/nvidia/tritonserver:25.01-py3"]


def _lws(cm: str, worker_image: str = "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3") -> dict:
    def pod(image: str) -> dict:
        return {"spec": {"containers": [{"name": "tritonserver", "image": image}],
                         "volumes": [{"name": "model-config", "configMap": {"name": cm}}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "m-triton-group", "namespace": "triton"},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {
                "size": 2, "leaderTemplate": pod("nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3"),
                "workerTemplate": pod(worker_image)}}}


def test_a_leaderworkerset_rolls_with_either_pod_template():
    """A multi-node model's group is recreated when its leader's or its workers' template changes."""
    base = _snap(_lws("m-config-aaaaaaaaaa"), _obj("ConfigMap", "m-config-aaaaaaaaaa", data={"k": "1"}))
    head = _snap(_lws("m-config-bbbbbbbbbb"), _obj("ConfigMap", "m-config-bbbbbbbbbb", data={"k": "2"}))
    [roll] = diff.diff_cluster("production", base, head).rolls
    assert roll.object == "LeaderWorkerSet/triton/m-triton-group"
    assert roll.reasons == ["ConfigMap m-config changed (m-config-aaaaaaaaaa → m-config-bbbbbbbbbb)"] * 2
    out = diff.diff_cluster("p", _snap(_lws("c")), _snap(_lws("c", worker_image="x:2")))
    assert out.rolls[0].reasons == ["leaderWorkerTemplate.workerTemplate.spec.containers[tritonserver].image: "
                                    "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3 → x:2"]


def test_added_and_removed_objects_and_api_version_bump_is_a_change():
    old = {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"}}
    new = {**old, "apiVersion": "autoscaling/v2"}
    out = diff.diff_cluster("p", _snap(old, _obj("Service", "gone")), _snap(new, _obj("Service", "new")))
    assert out.added == [("Service/triton/new", "overlays/m/l4")]
    assert out.removed == [("Service/triton/gone", "overlays/m/l4")]
    assert [c.object for c in out.changed] == ["HorizontalPodAutoscaler/h"]


def test_short_values_fit_one_line():
    assert diff.short(None) == "(none)"
    assert diff.short("a\nb\nc\n") == "(3 lines)"
    assert len(diff.short("x" * 200)) == 60


# ---------------------------------------------------------------------------------------- the real thing

def test_no_change_and_the_worktree_is_removed(git_repo: Path, run_cli):
    before = _temp_dirs()
    res = run_cli("diff", str(git_repo))
    assert res.exit_code == 0, res.stderr
    assert "No changes." in res.stdout
    assert len(_worktrees(git_repo)) == 1 and _temp_dirs() <= before


def test_config_edit_rolls_the_deployment_of_every_cluster_that_runs_it(git_repo: Path, run_cli):
    config = git_repo / "models/image-classifier/image_classifier/config.pbtxt"
    config.write_text(config.read_text().replace("max_queue_delay_microseconds: 200",
                                                 "max_queue_delay_microseconds: 500"))
    res = run_cli("diff", str(git_repo), "-o", "json", "--exit-code")
    assert res.exit_code == 1, res.stderr  # --exit-code: something changed
    doc = json.loads(res.stdout)
    assert doc["changed"] is True and doc["base"]["ref"] == "HEAD" and doc["errors"] == []
    clusters = {c["cluster"]: c for c in doc["clusters"]}
    assert set(clusters) == {"production", diff.UNAPPLIED}  # t4 is an overlay no cluster applies
    prod = clusters["production"]
    assert prod["added"] == [] and prod["removed"] == []
    cm = next(c for c in prod["changed"] if c["object"].startswith("ConfigMap/triton/image-classifier-model-config"))
    assert cm["renamed_from"].startswith("image-classifier-model-config-")
    assert [x["path"] for x in cm["changes"]] == ["data.image_classifier__config.pbtxt"]
    [roll] = prod["rolls"]
    assert roll["object"] == "Deployment/triton/image-classifier-triton"
    assert roll["source"] == "overlays/image-classifier/l4"
    assert roll["reasons"][0].startswith("ConfigMap image-classifier-model-config changed")
    assert len(_worktrees(git_repo)) == 1


def test_new_model_and_removed_flux_kustomization_in_text_and_markdown(git_repo: Path, run_cli):
    added = run_cli("add-model", "resnet50", "--backend", "onnxruntime", "--gpu", "t4", "--repo", str(git_repo))
    assert added.exit_code == 0, added.stderr
    kfile = git_repo / "clusters/production/models/kustomization.yaml"
    kfile.write_text(kfile.read_text().replace("  - text-embedder-a10g.yaml\n", ""))
    text = run_cli("diff", str(git_repo))
    assert text.exit_code == 0, text.stderr
    assert "- Kustomization/flux-system/text-embedder-a10g  (clusters/production)" in text.stdout
    # Flux prunes what the removed Kustomization applied; the overlay is now one that no cluster applies
    assert "- Deployment/triton/text-embedder-triton  (overlays/text-embedder/a10g)" in text.stdout
    assert "+ Deployment/triton/text-embedder-triton  (overlays/text-embedder/a10g)" in text.stdout
    assert "+ Deployment/triton/resnet50-triton  (overlays/resnet50/t4)" in text.stdout
    assert "+ Kustomization/flux-system/resnet50-t4  (clusters/production)" in text.stdout
    assert "\x1b[" not in text.stdout
    md = diff.to_markdown(diff.compare(git_repo, "HEAD"))
    assert md.startswith("## kubectl triton diff\n")
    assert "### cluster production: " in md
    assert "| ➖ removed | `Kustomization/flux-system/text-embedder-a10g` | clusters/production | |" in md


def test_base_is_the_merge_base_of_a_branch(git_repo: Path, run_cli):
    git(git_repo, "checkout", "-q", "-b", "feature")
    dep = git_repo / "overlays/image-classifier/model/deployment.yaml"
    dep.write_text(dep.read_text().replace("24.12-py3", "25.01-py3"))
    git(git_repo, "commit", "-qam", "new image")
    git(git_repo, "checkout", "-q", "main")
    other = git_repo / "base/platform/namespace.yaml"
    other.write_text(other.read_text() + "# main moved on\n")
    git(git_repo, "commit", "-qam", "main moves")
    git(git_repo, "checkout", "-q", "feature")
    res = run_cli("diff", str(git_repo), "--base", "main", "-o", "json")
    doc = json.loads(res.stdout)
    assert doc["base"]["commit"] == git(git_repo, "merge-base", "main", "feature")
    rolls = [r for c in doc["clusters"] for r in c["rolls"]]
    assert any("25.01-py3" in reason for r in rolls for reason in r["reasons"])


def test_a_kustomization_of_another_source_is_compared_not_built(git_repo: Path, run_cli):
    """Its spec.path is a folder of another artifact (validate: FluxSourceNotChecked): the diff shows the object and
    goes on, instead of refusing the whole repository."""
    models = git_repo / "clusters" / "production" / "models"
    (models / "shared-infra.yaml").write_text(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: shared-infra\n"
        "  namespace: flux-system\nspec:\n  interval: 10m\n  path: ./deploy/prod\n  prune: true\n"
        "  sourceRef:\n    kind: GitRepository\n    name: platform-repo\n")
    kust = models / "kustomization.yaml"
    kust.write_text(kust.read_text() + "  - shared-infra.yaml\n")
    res = run_cli("diff", str(git_repo), "-o", "json")
    assert res.exit_code == 0, res.stderr
    added = [a["object"] for c in json.loads(res.stdout)["clusters"] for a in c["added"]]
    assert "Kustomization/flux-system/shared-infra" in added, added


def test_bad_ref_is_one_line_and_leaves_nothing_behind(git_repo: Path, run_cli):
    res = run_cli("diff", str(git_repo), "--base", "no-such-branch")
    assert res.exit_code == 2
    assert res.stderr.startswith("error: --base no-such-branch: not a commit") and "Traceback" not in res.stderr
    assert len(_worktrees(git_repo)) == 1


def test_render_failure_refuses_to_compare_and_worktree_removed(git_repo: Path, run_cli):
    """A side that does not render would read as removals: diff refuses (exit 2) and names the render error."""
    (git_repo / "overlays/image-classifier/l4/kustomization.yaml").write_text("resources: [missing.yaml]\n")
    res = run_cli("diff", str(git_repo), "-o", "json")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("error: cannot compare: head: overlays/image-classifier/l4: kustomize build failed")
    assert "Traceback" not in res.stderr
    assert len(_worktrees(git_repo)) == 1


@pytest.mark.parametrize("flux_file, old, new", [
    ("clusters/production/models/text-embedder-a10g.yaml", "  timeout: 15m\n", "  timeout: [15m\n"),
    ("clusters/production/models/image-classifier-l4.yaml", "./overlays/image-classifier/l4",
     "./overlays/image-classifier/l5"),
])
def test_broken_flux_file_refuses_instead_of_inventing_changes(git_repo: Path, run_cli, flux_file, old, new):
    path = git_repo / flux_file
    path.write_text(path.read_text().replace(old, new, 1))
    res = run_cli("diff", str(git_repo))
    assert res.exit_code == 2 and "removed" not in res.stdout
    assert res.stderr.startswith("error: cannot compare: head: clusters/production")


# A file that does not render: (file, its whole broken text, the one line diff prints after "error: cannot compare:
# <side>: "). kustomize names a broken file by its bare name (`in File: platform.yaml`) inside a chain of folders;
# diff names it from the repository root, on the side it is broken on, a file that is no YAML as validate does
# (YamlInvalid: line and column). Each is run with the break in the working tree (head); the first four also with
# it in the base (a temporary worktree, whose paths must not leak), as the kustomize wording is the same there.
FLUX = "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: platform\n" \
       "  namespace: flux-system\nspec:\n  path: ./base/platform\n"
BOTH_SIDES = [
    pytest.param("clusters/production/platform.yaml", FLUX + "  extra:\n    - [a,\n",
                 "clusters/production/platform.yaml:10:1: invalid YAML: did not find expected node content",
                 id="flux-file"),
    pytest.param("clusters/production/models/text-embedder-a10g.yaml", FLUX + "  timeout: [15m\n",
                 "clusters/production/models/text-embedder-a10g.yaml:9:1: invalid YAML: did not find expected ',' or "
                 "']'", id="flux-file-in-a-sub-folder"),
    pytest.param("overlays/image-classifier/l4/kustomization.yaml",
                 "kind: Kustomization\nresources:\n  - ../../../base/triton\n  - [a,\n",
                 "overlays/image-classifier/l4/kustomization.yaml:5:1: invalid YAML: did not find expected node "
                 "content", id="overlay-kustomization"),
    pytest.param("kubectl-triton.yaml", "paths: [\n",
                 "kubectl-triton.yaml:2:1: invalid YAML: did not find expected node content", id="layout-file"),
]
HEAD_ONLY = [
    pytest.param("clusters/production/platform.yaml", FLUX + "spec: {}\n",
                 'clusters/production: kustomize build failed: yaml: unmarshal errors: line 8: mapping key "spec" '
                 "already defined at line 6", id="flux-file-duplicate-key"),  # kustomize names no file here
    pytest.param("overlays/image-classifier/l4/kustomization.yaml", "kind: Kustomization\nresourcez: [a]\n",
                 'overlays/image-classifier/l4/kustomization.yaml: invalid Kustomization: unknown field "resourcez"',
                 id="overlay-kustomization-unknown-field"),
    pytest.param("overlays/image-classifier/model/kustomization.yaml",
                 "kind: Component\npatches:\n  - [a,\n",
                 "overlays/image-classifier/model/kustomization.yaml:4:1: invalid YAML: did not find expected node "
                 "content", id="component"),
    pytest.param("overlays/image-classifier/model/deployment.yaml", "spec: [\n",
                 "overlays/image-classifier/model/deployment.yaml:2:1: invalid YAML: did not find expected node "
                 "content", id="patch"),
    pytest.param("overlays/image-classifier/model/deployment.yaml", "- a\n",
                 "overlays/image-classifier/model/deployment.yaml: not a patch kustomize can read (invalid YAML, or "
                 "neither a strategic-merge nor a JSON patch)", id="patch-not-a-patch"),
    pytest.param("base/triton/service.yaml", "kind: Service\nspec:\n  ports: [\n",  # every overlay: said once
                 "base/triton/service.yaml:4:1: invalid YAML: did not find expected node content", id="base-resource"),
]
BROKEN = [pytest.param(side, *case.values, id=f"{case.id}-{side}")
          for case in BOTH_SIDES for side in ("head", "base")] + \
         [pytest.param("head", *case.values, id=f"{case.id}-head") for case in HEAD_ONLY]


@pytest.mark.parametrize("side, rel, text, line", BROKEN)
def test_a_broken_file_on_either_side_is_one_line_naming_the_side_and_the_file(git_repo: Path, run_cli, side: str,
                                                                              rel: str, text: str, line: str):
    path = git_repo / rel
    good = path.read_text()
    path.write_text(text)
    if side == "base":  # the break committed, the working tree repaired: the base (HEAD) is the broken side
        git(git_repo, "commit", "-qam", "break")
        path.write_text(good)
    res = run_cli("diff", str(git_repo))
    assert res.exit_code == 2 and res.stdout == "", res.stderr
    first, *rest = res.stderr.splitlines()
    assert first == f"error: cannot compare: {side}: {line}"
    assert rest == ["hint: fix the render error (kubectl triton validate shows every one), then diff again"] \
        or (rel == "kubectl-triton.yaml" and rest == [])
    assert len(_worktrees(git_repo)) == 1


@pytest.mark.parametrize("side", ["head", "base"])
def test_a_broken_model_yaml_is_data_to_diff_not_a_render_error(git_repo: Path, run_cli, side: str):
    """model.yaml is kubectl-triton's metadata, which Flux never parses: an engine-build overlay ships it as
    ConfigMap data (a change like any other), the others do not read it (validate reports it: YamlInvalid)."""
    path = git_repo / "models/llama3-8b/model.yaml"
    good = path.read_text()
    path.write_text(good + "gpus: [h100-80gb,\n")
    if side == "base":
        git(git_repo, "commit", "-qam", "break")
        path.write_text(good)
    res = run_cli("diff", str(git_repo))
    assert res.exit_code == 0 and res.stderr == ""
    assert re.fullmatch(r"base HEAD \([0-9a-f]{12}\) → working tree", res.stdout.splitlines()[0])
    assert "~ ConfigMap/triton/llama3-8b-h100-80gb-engine-build-model-" in res.stdout


RAW = "/repo/overlays/m/l4"
LOCATED = [  # kustomize's reason (RenderError.detail) for a build of RAW -> (file, line, problem)
    pytest.param("accumulating resources: accumulating resources from 'platform.yaml': MalformedYAMLError: yaml: "
                 "line 17: did not find expected node content in File: platform.yaml",
                 f"{RAW}/platform.yaml", 17, "invalid YAML: did not find expected node content", id="kustomize-5"),
    pytest.param("accumulating resources: accumulation err='accumulating resources from 'models': read "
                 "/repo/c/models: is a directory': recursed accumulation of path '/repo/c/models': accumulating "
                 "resources: accumulating resources from 'a.yaml': MalformedYAMLError: yaml: line 18: did not find "
                 "expected ',' or ']' in File: a.yaml", "/repo/c/models/a.yaml", 18,
                 "invalid YAML: did not find expected ',' or ']'", id="kustomize-5-sub-folder"),
    pytest.param("accumulating resources: accumulation err='accumulating resources from 'p.yaml': MalformedYAMLError: "
                 "yaml: line 3: could not find expected ':' in File: p.yaml': must build at directory: not a valid "
                 "directory: evalsymlink failure on '/repo/overlays/m/l4/p.yaml'", f"{RAW}/p.yaml", 3,
                 "invalid YAML: could not find expected ':'", id="kustomize-5.4-both-errors"),
    pytest.param("accumulation err='accumulating resources from '../base': '/repo/overlays/m/base' must resolve to a "
                 "file': recursed accumulation of path '/repo/overlays/m/base': accumulating resources: accumulation "
                 "err='accumulating resources from 'b.yaml': yaml: line 2: mapping values are not allowed in this "
                 "context': got file 'b.yaml', but '/repo/overlays/m/base/b.yaml' must be a directory to be a root",
                 "/repo/overlays/m/base/b.yaml", 2, "invalid YAML: mapping values are not allowed in this context",
                 id="kustomize-4"),
    pytest.param("invalid Kustomization: yaml: line 18: did not find expected '-' indicator",
                 f"{RAW}/kustomization.yaml", 18, "invalid YAML: did not find expected '-' indicator",
                 id="kustomization"),
    pytest.param("accumulating components: accumulateDirectory: \"couldn't make target for path "
                 "'/repo/overlays/m/model': invalid Kustomization: yaml: line 12: did not find expected '-' "
                 "indicator\"",
                 "/repo/overlays/m/model/kustomization.yaml", 12, "invalid YAML: did not find expected '-' indicator",
                 id="component-go-quoted"),
    pytest.param('accumulating components: accumulateDirectory: "couldn\'t make target for path '
                 '\'/repo/overlays/m/x\': invalid Kustomization: json: unknown field \\"resourcez\\""',
                 "/repo/overlays/m/x/kustomization.yaml", None, 'invalid Kustomization: unknown field "resourcez"',
                 id="component-unknown-field"),
    pytest.param("accumulating components: accumulateDirectory: \"recursed accumulation of path "
                 "'/repo/overlays/m/model': trouble configuring builtin PatchTransformer with config: "
                 "`\\npath: d.yaml\\n`: unable to parse SM or JSON patch from "
                 '[path: \\"d.yaml\\"]"', "/repo/overlays/m/model/d.yaml", None,
                 "not a patch kustomize can read (invalid YAML, or neither a strategic-merge nor a JSON patch)",
                 id="patch"),
]


@pytest.mark.parametrize("detail, file, line, problem", LOCATED)
def test_kustomize_reasons_traced_to_the_file(detail: str, file: str, line: int | None, problem: str):
    found = kustomize.locate(detail, Path(RAW))
    assert found == kustomize.Located(Path(file), problem, line)


def test_kustomize_reason_that_names_no_file_is_not_located():
    assert kustomize.locate("accumulating resources: accumulation err='accumulating resources from 'missing.yaml': "
                            "evalsymlink failure on '/repo/missing.yaml'", Path(RAW)) is None


@pytest.mark.parametrize("stderr, reason", [
    pytest.param('E1204 02:51:58.771373    9204 run.go:72] "command failed" err="invalid Kustomization: yaml: line 9"',
                 "invalid Kustomization: yaml: line 9", id="klog"),
    pytest.param('E1204 02:56:55.320331   24269 run.go:72] "command failed" err=<\n\tmap[string]interface {}(nil): '
                 'yaml: unmarshal errors:\n\t  line 16: mapping key "spec" already defined at line 6\n\t  line 17: '
                 'mapping key "spec" already defined at line 16\n >\n',
                 'yaml: unmarshal errors: line 16: mapping key "spec" already defined at line 6; line 17: mapping key '
                 '"spec" already defined at line 16', id="klog-several-lines"),
    pytest.param('Error: map[string]interface {}(nil): yaml: unmarshal errors:\n  line 16: mapping key "spec" '
                 "already defined at line 6\n", 'yaml: unmarshal errors: line 16: mapping key "spec" already defined '
                 "at line 6", id="kustomize-binary-several-lines"),
])
def test_kustomize_reason_is_one_line(stderr: str, reason: str):
    assert kustomize._first_error_line(stderr) == reason


def test_not_a_git_repository(repo_copy: Path, run_cli, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(repo_copy.parent))
    res = run_cli("diff", str(repo_copy))
    assert res.exit_code == 2 and res.stderr.count("\n") <= 2 and "Traceback" not in res.stderr
    assert "not a git repository" in res.stderr and "fetch-depth" not in res.stderr, res.stderr


def test_a_repository_without_a_commit(repo_copy: Path, run_cli, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(repo_copy.parent))
    git(repo_copy, "init", "-q", "-b", "main")
    res = run_cli("diff", str(repo_copy))
    assert res.exit_code == 2 and "no commit yet" in res.stderr and "Traceback" not in res.stderr, res.stderr
