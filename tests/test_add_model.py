"""add-model safety: name rules, one-line input errors, --dry-run, idempotence and --force, all-or-nothing writes
under injected failures, and round-trip edits of the cluster kustomization."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamledit import edit_resources
from kubectl_triton.gitops import scaffold

ONNX = ["--backend", "onnxruntime", "--gpu", "t4", "--gpu", "l4", "--input", "input:FP32:3,224,224",
        "--output", "probs:FP32:1000"]
KUSTOMIZATION = "clusters/production/models/kustomization.yaml"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file and folder under root, with file bytes: the tree, byte for byte."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = p.read_bytes() if p.is_file() else b"<dir>"
    return out


@pytest.fixture
def add(run_cli, repo_copy):
    def run(name: str, *args: str):
        return run_cli("add-model", *args, "--repo", str(repo_copy), "--", name)
    return run


@pytest.mark.parametrize("name, rule", [
    ("", "is empty"),
    ("a/b", "path separator"),
    ("..", "'..'"),
    ("My-Model", "uppercase letters are not allowed in a DNS-1123 label"),
    ("my_model", "not a DNS-1123 label"),
    ("-model", "not a DNS-1123 label"),
    ("model-", "not a DNS-1123 label"),
    ("1model", "must start with a letter"),
    ("x" * 64, "at most 63"),
    ("x" * 57, "at most 56"),
    ("a b", "whitespace"),
])
def test_invalid_names_are_refused_naming_the_rule(add, repo_copy, name, rule):
    before = snapshot(repo_copy)
    result = add(name, *ONNX)
    assert result.exit_code == 2
    assert rule in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(repo_copy) == before


@pytest.mark.parametrize("args, message", [
    (["--backend", "caffe", "--gpu", "t4"], "--backend 'caffe': unknown backend"),
    (["--backend", "onnxruntime", "--gpu", "k80"], "--gpu 'k80': no overlays/gpus/k80/ Component"),
    (["--backend", "onnxruntime", "--gpu", "t4", "--input", "x:FP32"], "expected NAME:TYPE:DIMS"),
    (["--backend", "onnxruntime", "--gpu", "t4", "--input", "x:FLOAT:3"], "unknown data type 'FLOAT'"),
    (["--backend", "onnxruntime", "--gpu", "t4", "--input", "x:FP32:3,a"], "comma-separated integers"),
    (["--backend", "onnxruntime", "--gpu", "t4", "--input", "x:FP32:0"], "positive size or -1"),
    (["--backend", "onnxruntime", "--gpu", "t4", "--cluster", "staging"], "--cluster 'staging'"),
    (["--backend", "onnxruntime", "--gpu", "t4", "--artifact", "../etc"], "--artifact '../etc'"),
    (["--backend", "onnxruntime", "--gpu", "t4", "--max-batch-size", "4", "--preferred-batch-size", "8"],
     "--preferred-batch-size 8"),
    (["--backend", "tensorrtllm", "--gpu", "h200", "--gpu", "h100-80gb"], "takes one GPU type"),
    (["--backend", "tensorrtllm", "--gpu", "h200", "--max-input-len", "9000"], "below --max-seq-len"),
    (["--backend", "tensorrtllm", "--gpu", "h200", "--quantization", "int3"], "--quantization 'int3'"),
    (["--backend", "tensorrtllm", "--gpu", "h200", "--preferred-batch-size", "128"], "--preferred-batch-size 128"),
    (["--backend", "tensorrtllm", "--gpu", "h200", "--max-batch-size", "0"], "in-flight batching"),
    (["--backend", "tensorrtllm", "--gpu", "h200", "--artifact", "s3://b/p"], "not supported for tensorrtllm"),
    (["--backend", "onnxruntime", "--gpu", "l4", "--tp", "2"], "--tp: only for --backend tensorrtllm"),
    (["--backend", "python", "--gpu", "l4", "--step", "classifier"], "--step: only for --backend ensemble"),
    (["--backend", "ensemble", "--gpu", "l4"], "an ensemble needs at least one step"),
    (["--backend", "ensemble", "--gpu", "l4", "--step", "nope"], "--step 'nope': unknown model"),
    (["--backend", "ensemble", "--gpu", "l4", "--step", "llama3-8b/ensemble"], "is an ensemble"),
    (["--backend", "ensemble", "--gpu", "l4", "--step", "classifier:pixels=x"], "has no input 'pixels'"),
    (["--backend", "ensemble", "--gpu", "l4", "--step", "classifier->out=x"], "has no output 'out'"),
    (["--backend", "ensemble", "--gpu", "l4", "--input", "IMG:UINT8:-1", "--step", "preprocessor"],
     "unknown tensor 'IMAGE_BYTES'"),
    (["--backend", "ensemble", "--gpu", "l4", "--step", "preprocessor", "--step", "postprocessor:LOGITS=IMAGE_BYTES"],
     "feeds preprocessor as UINT8 and postprocessor as FP32"),
    (["--backend", "ensemble", "--gpu", "l4", "--step", "postprocessor", "--step", "classifier:input=TOP_CLASSES"],
     "'TOP_CLASSES' is INT32 from postprocessor but input 'input' of classifier takes FP32"),
    (["--backend", "ensemble", "--gpu", "l4", "--step", "preprocessor", "--output", "X:FP32:1"],
     "--output 'X': no step produces"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(add, repo_copy, args, message):
    before = snapshot(repo_copy)
    result = add("new-model", *args)
    assert result.exit_code == 2, result
    assert message in result.stderr, result.stderr
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert snapshot(repo_copy) == before


def test_unknown_gpu_lists_the_available_components(add):
    # (a catalog or kubectl-triton.yaml type without a Component gets one written: test_init.py)
    result = add("new-model", "--backend", "python", "--gpu", "rtx-9999")
    assert "available: a100-40gb, a100-80gb, a10g, h100-80gb, h200, l4, l40s, t4" in result.stderr


def test_dry_run_prints_every_file_and_writes_nothing(add, repo_copy):
    before = snapshot(repo_copy)
    result = add("resnet", *ONNX, "--dry-run")
    assert result.exit_code == 0, result.stderr
    for rel in ("models/resnet/resnet/config.pbtxt", "models/resnet/model.yaml",
                "overlays/resnet/model/kustomization.yaml", "overlays/resnet/t4/kustomization.yaml",
                "overlays/resnet/l4/kustomization.yaml",
                "clusters/production/models/resnet-t4.yaml", KUSTOMIZATION):
        assert f"==> {rel} <==" in result.stdout
    assert 'name: "resnet"' in result.stdout and "  - resnet-t4.yaml" in result.stdout
    # One GPU type per model per cluster: the l4 overlay is written for other clusters, not registered here.
    assert "resnet-l4.yaml" not in result.stdout
    assert snapshot(repo_copy) == before


def test_second_add_is_refused_and_force_rewrites_only_that_model(add, repo_copy):
    assert add("resnet", *ONNX).exit_code == 0
    after_first = snapshot(repo_copy)
    again = add("resnet", *ONNX)
    assert again.exit_code == 2 and "already exists" in again.stderr and "--force" in again.stderr
    assert snapshot(repo_copy) == after_first
    # The same options with --force: nothing changes at all.
    forced = add("resnet", *ONNX, "--force")
    assert forced.exit_code == 0, forced.stderr
    assert snapshot(repo_copy) == after_first
    assert "created" not in forced.stdout and "unchanged models/resnet/model.yaml" in forced.stdout
    # Different options with --force: only this model's files change; the dropped GPU's files go.
    forced = add("resnet", "--backend", "python", "--gpu", "l4", "--force")
    assert forced.exit_code == 0, forced.stderr
    now = snapshot(repo_copy)
    changed = {k for k in set(now) | set(after_first) if now.get(k) != after_first.get(k)}
    mine = ("models/resnet", "overlays/resnet", "clusters/production/models/resnet-", KUSTOMIZATION)
    assert changed and all(k.startswith(mine) for k in changed), changed
    assert not (repo_copy / "overlays/resnet/t4").exists()
    assert not (repo_copy / "clusters/production/models/resnet-t4.yaml").exists()
    assert "resnet-t4.yaml" not in (repo_copy / KUSTOMIZATION).read_text()
    assert "deleted clusters/production/models/resnet-t4.yaml" in forced.stdout
    assert (repo_copy / "models/resnet/resnet/1/model.py").is_file()


def test_a_foreign_flux_file_of_the_same_name_blocks_the_add(add, repo_copy):
    (repo_copy / "clusters/production/models/resnet-t4.yaml").write_text("# someone else's\n")
    before = snapshot(repo_copy)
    result = add("resnet", *ONNX)
    assert result.exit_code == 2 and "resnet-t4.yaml" in result.stderr
    assert snapshot(repo_copy) == before


def test_non_model_overlay_folders_are_not_model_names(add):
    result = add("gpus", *ONNX)
    assert result.exit_code == 2 and "overlays/gpus/ is not a model's overlay folder" in result.stderr


@pytest.mark.parametrize("fail_at", [1, 4, 9, -1])
def test_failure_in_the_middle_of_writing_leaves_the_tree_unchanged(add, repo_copy, monkeypatch, fail_at):
    """The n-th move into place fails (-1: the last one, the cluster kustomization): every earlier move is undone."""
    before = snapshot(repo_copy)
    moves: list[tuple[str, str]] = []
    real = scaffold._replace

    def flaky(src, dst):
        moves.append((str(src), str(dst)))
        if len(moves) == fail_at or (fail_at == -1 and str(dst).endswith(KUSTOMIZATION)):
            raise PermissionError(13, "Permission denied")
        return real(src, dst)

    monkeypatch.setattr(scaffold, "_replace", flaky)
    result = add("chat", "--backend", "tensorrtllm", "--gpu", "h200")
    assert result.exit_code == 2
    assert "Permission denied; nothing was changed" in result.stderr and len(result.stderr.splitlines()) == 1
    assert snapshot(repo_copy) == before  # no new folder, no temporary folder, every byte as it was


def test_failure_while_force_replaces_files_restores_the_old_ones(add, repo_copy, monkeypatch):
    assert add("resnet", *ONNX).exit_code == 0
    before = snapshot(repo_copy)
    calls = []
    real = scaffold._replace

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 7:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(scaffold, "_replace", flaky)
    result = add("resnet", "--backend", "python", "--gpu", "l4", "--force")
    assert result.exit_code == 2 and "No space left on device" in result.stderr
    assert snapshot(repo_copy) == before


def test_a_target_that_is_a_folder_is_refused_before_anything_moves(add, repo_copy):
    (repo_copy / "models/resnet/model.yaml").mkdir(parents=True)
    before = snapshot(repo_copy)
    result = add("resnet", *ONNX, "--force")
    assert result.exit_code == 2 and "models/resnet/model.yaml: is a directory" in result.stderr
    assert snapshot(repo_copy) == before


USER_EDITED = """\
# Models of the production cluster. Keep sorted by team!
kind: Kustomization   # kind first, on purpose
apiVersion: kustomize.config.k8s.io/v1beta1
resources:
    # team vision
    - 'image-classifier-l4.yaml'
    - "ensemble-pipeline-l4.yaml"   # quoted on purpose
    # team language
    - llama3-8b-h100-80gb-engine-build.yaml
    - llama3-8b-h100-80gb.yaml
    - text-embedder-a10g.yaml
# end of list
commonAnnotations: {owner: platform}
"""


def test_comments_key_order_and_quoting_of_the_cluster_kustomization_survive(add, repo_copy):
    (repo_copy / KUSTOMIZATION).write_text(USER_EDITED)
    assert add("resnet", *ONNX).exit_code == 0
    expected = USER_EDITED.replace("    - text-embedder-a10g.yaml\n",
                                   "    - text-embedder-a10g.yaml\n    - resnet-t4.yaml\n")
    assert (repo_copy / KUSTOMIZATION).read_text() == expected


def test_edit_resources_is_a_no_op_when_entries_are_listed():
    assert edit_resources(USER_EDITED, add=["image-classifier-l4.yaml"]) == USER_EDITED
    with pytest.raises(InputError, match="x.yaml: 'resources' is not a list"):
        edit_resources("resources: a\n", add=["b"], source="x.yaml")


def test_generated_configs_round_trip_through_tritons_schema():
    from kubectl_triton.formats import pbtxt

    opts = scaffold.Options(name="chat", backend="tensorrtllm", gpus=("h200",),
                            llm=scaffold.LlmOptions(streaming=False, tp=2))
    for config in scaffold.llm_configs(opts).values():
        text = scaffold.format_config(config)
        assert pbtxt.parse(text) == config and text != pbtxt.dumps(config)
    core = scaffold.llm_configs(opts)["tensorrt_llm"]
    assert not core.model_transaction_policy.decoupled
    assert "streaming" not in [i.name for i in core.input]
    assert core.parameters["gpt_model_path"].string_value == "/artifacts/chat/engines/h200"


def test_several_clusters_need_cluster_and_the_named_one_is_edited(add, repo_copy):
    import shutil

    shutil.copytree(repo_copy / "clusters/production", repo_copy / "clusters/staging")
    result = add("resnet", *ONNX)
    assert result.exit_code == 2 and "several clusters (production, staging)" in result.stderr
    production = (repo_copy / KUSTOMIZATION).read_bytes()
    assert add("resnet", *ONNX, "--cluster", "staging").exit_code == 0
    assert (repo_copy / KUSTOMIZATION).read_bytes() == production
    assert "- resnet-t4.yaml" in (repo_copy / "clusters/staging/models/kustomization.yaml").read_text()
    assert not (repo_copy / "clusters/staging/models/resnet-l4.yaml").exists()


def test_a_model_on_two_gpu_types_passes_validate(add, repo_copy, run_cli):
    """Both overlays render the same object names: only the first --gpu is registered in the cluster."""
    assert add("resnet", *ONNX).exit_code == 0
    assert (repo_copy / "overlays/resnet/l4/kustomization.yaml").is_file()
    result = run_cli("validate", str(repo_copy), "--no-compat")
    assert result.exit_code == 0, result.stdout


def test_failure_while_staging_leaves_no_temporary_folder(add, repo_copy, monkeypatch):
    before = snapshot(repo_copy)
    opened = []

    def flaky_open(path, *args, **kwargs):
        opened.append(path)
        if len(opened) == 3:
            raise OSError(30, "Read-only file system")
        return open(path, *args, **kwargs)

    monkeypatch.setattr(scaffold, "open", flaky_open, raising=False)
    result = add("resnet", *ONNX)
    assert result.exit_code == 2 and "Read-only file system; nothing was changed" in result.stderr
    assert snapshot(repo_copy) == before
