"""build-info.py (the engine-build Job's capture) and record-engine (metadata into the repo)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from kubectl_triton.cli.commands.record_engine import command as record_engine
from kubectl_triton.compat.engine import BUILD_INFO_KEYS, parse_build_info, read_engine_dir
from kubectl_triton.compat.lookup import lookup
from kubectl_triton.errors import InputError

HERE = Path(__file__).parent
REPO = HERE.parent
ENGINES = HERE / "fixtures" / "engines"
DEVICE_FIXTURE = HERE / "fixtures" / "device" / "h200-build-info.json"


def load_script():
    spec = importlib.util.spec_from_file_location("build_info_script", REPO / "base/engine-build/build-info.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bi = load_script()


def test_parse_smi_real_h200_line():
    assert bi.parse_smi("NVIDIA H200, 9.0, 143771 MiB\n") == [
        {"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "gpu_memory_mib": 143771}]


def test_parse_smi_several_gpus_and_commas_in_names():
    rows = bi.parse_smi("NVIDIA H100 80GB HBM3, 9.0, 81559 MiB\nNVIDIA H100 80GB HBM3, 9.0, 81559 MiB\n")
    assert len(rows) == 2 and bi.pick_gpu(rows)["gpu_memory_mib"] == 81559
    assert bi.parse_smi("Weird, GPU, 8.6, 100 MiB")[0]["gpu_name"] == "Weird, GPU"


@pytest.mark.parametrize("text", ["", "NVIDIA H200, 9, 143771 MiB", "NVIDIA H200, 9.0, [N/A]", "NVIDIA H200"])
def test_parse_smi_refuses_garbage(text):
    with pytest.raises(bi.BuildInfoError):
        bi.parse_smi(text)


def test_mixed_gpus_in_one_build_pod_refused():
    with pytest.raises(bi.BuildInfoError, match="different models"):
        bi.pick_gpu(bi.parse_smi("NVIDIA L4, 8.9, 23034 MiB\nNVIDIA A10G, 8.6, 23028 MiB"))


def test_document_has_exactly_the_documented_keys_and_rfc3339_time():
    doc = bi.build_info({"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "gpu_memory_mib": 143771},
                        {"tensorrt_llm_version": None}, "img:1", datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    assert tuple(doc) == BUILD_INFO_KEYS
    assert doc["built_at"] == "2025-01-02T03:04:05Z" and doc["tensorrt_version"] is None
    parse_build_info(doc)  # what the plugin accepts


@pytest.fixture
def fake_smi(tmp_path):
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\necho 'NVIDIA H200, 9.0, 143771 MiB'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


@pytest.fixture
def engine_dir(tmp_path):
    d = tmp_path / "engine"
    d.mkdir()
    shutil.copy(ENGINES / "llama3-8b-bf16-tp1-h100" / "config.json", d / "config.json")
    with open(d / "rank0.engine", "wb") as fh:
        os.truncate(fh.fileno(), 15 << 30)
    return d


def test_script_writes_file_and_log_lines(engine_dir, fake_smi, capsys, monkeypatch):
    monkeypatch.setenv("TRITON_IMAGE", "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3")
    assert bi.main(["--engine-dir", str(engine_dir), "--nvidia-smi", fake_smi]) == 0
    written = json.loads((engine_dir / "build-info.json").read_text())
    assert written["gpu_name"] == "NVIDIA H200" and written["image"].endswith("24.12-trtllm-python-py3")
    log = capsys.readouterr().out
    assert log.count("\n") == 3 and log.startswith(bi.MARKER)
    assert json.loads(log.splitlines()[0][len(bi.MARKER):]) == written


def test_script_fails_cleanly_without_nvidia_smi(engine_dir, capsys):
    assert bi.main(["--engine-dir", str(engine_dir), "--nvidia-smi", "/nonexistent/nvidia-smi"]) == 1
    assert "not found" in capsys.readouterr().err
    assert not (engine_dir / "build-info.json").exists()


def test_lookup_of_the_capture():
    found = lookup("NVIDIA H200", "9.0", 143771)
    assert (found["key"], found["gfd_product"], found["compute_capability_matches"]) == ("h200", "NVIDIA-H200", True)
    assert lookup("NVIDIA H200", "8.0")["compute_capability_matches"] is False
    assert lookup("NVIDIA RTX 9000")["found"] is False


def test_lookup_runs_without_pyyaml(tmp_path):
    import subprocess

    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from kubectl_triton.compat.lookup import main; "
            "sys.exit(main(['--gpu-name', 'NVIDIA H200', '--compute-capability', '9.0']))")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["key"] == "h200"


@pytest.mark.skipif(not DEVICE_FIXTURE.is_file(), reason="no real-GPU capture in tests/fixtures/device/ yet")
def test_real_h200_capture():
    doc = json.loads(DEVICE_FIXTURE.read_text())
    assert tuple(doc) == BUILD_INFO_KEYS
    info = parse_build_info(doc, str(DEVICE_FIXTURE))
    found = lookup(info.gpu_name, info.compute_capability, info.gpu_memory_mib)
    assert found["key"] == "h200" and found["compute_capability_matches"]


# ---- record-engine ----------------------------------------------------------------------------

@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "overlays").mkdir(parents=True)
    (root / "models" / "llama3-8b").mkdir(parents=True)
    return root


def run_record(root: Path, *args: str, stdin: str | None = None):
    return CliRunner().invoke(record_engine, [*args, "--repo", str(root)], input=stdin, obj={})


def test_record_from_dir_copies_metadata_not_engines(repo, engine_dir, fake_smi, capsys):
    bi.main(["--engine-dir", str(engine_dir), "--nvidia-smi", fake_smi, "--image", "img:24.12-trtllm"])
    result = run_record(repo, "llama3-8b", "--from", str(engine_dir))
    assert result.exit_code == 0, result.output
    dest = repo / "models/llama3-8b/engines/h200"
    assert sorted(p.name for p in dest.iterdir()) == ["build-info.json", "config.json", "engine-files.json"]
    assert read_engine_dir(dest).rank_bytes == {0: 15 << 30}
    assert "models/llama3-8b/engines/h200/" in result.output


def test_record_from_log_then_replace(repo, engine_dir, fake_smi, capsys):
    bi.main(["--engine-dir", str(engine_dir), "--nvidia-smi", fake_smi])
    log = "building...\n[TensorRT-LLM] done\n" + capsys.readouterr().out
    assert run_record(repo, "llama3-8b", "--from-log", "-", "--gpu", "h200", stdin=log).exit_code == 0
    result = run_record(repo, "llama3-8b", "--from-log", "-", "--gpu", "h200", stdin=log)
    assert result.exit_code == 0
    assert sorted(p.name for p in (repo / "models/llama3-8b/engines").iterdir()) == ["h200"]  # no leftovers


def test_record_without_build_info_needs_gpu(repo, tmp_path):
    d = tmp_path / "nobi"
    shutil.copytree(ENGINES / "llama3-8b-bf16-tp1-nobuildinfo", d)
    result = run_record(repo, "llama3-8b", "--from", str(d))
    assert isinstance(result.exception, InputError) and result.exception.exit_code == 2
    assert "--gpu" in result.exception.hint
    assert run_record(repo, "llama3-8b", "--from", str(d), "--gpu", "a100-80gb").exit_code == 0


@pytest.mark.parametrize("model", ["../../etc", "llama3-8b/../../x", ".."])
def test_record_refuses_paths_escaping_the_repo(repo, model):
    result = run_record(repo, model, "--from", str(ENGINES / "llama3-8b-bf16-tp1-h100"))
    assert isinstance(result.exception, InputError)
    assert not (repo.parent / "etc").exists()


def test_record_refuses_symlinked_engines_folder(repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "models/llama3-8b/engines").symlink_to(outside)
    result = run_record(repo, "llama3-8b", "--from", str(ENGINES / "llama3-8b-bf16-tp1-h100"))
    assert result.exit_code != 0 and "outside the repository" in str(result.exception)
    assert list(outside.iterdir()) == []


def test_log_without_marker_is_an_input_error(repo, tmp_path):
    log = tmp_path / "build.log"
    log.write_text("trtllm-build finished\n")
    result = run_record(repo, "llama3-8b", "--from-log", str(log))
    assert result.exit_code != 0 and "KUBECTL_TRITON_BUILD_INFO" in str(result.exception)
