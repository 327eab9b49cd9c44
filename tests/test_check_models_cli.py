"""`kubectl triton check-models` as a user runs it: exit codes, text and JSON output, bad input."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from kubectl_triton.cli import main

GOOD = '''name: "%s"
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]
'''


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def repo_with(tmp_path: Path, **configs: str) -> Path:
    for name, text in configs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(text, encoding="utf-8")
    return tmp_path


def test_clean_repository_exits_0(tmp_path: Path, capsys) -> None:
    code, out, _ = run(["check-models", str(repo_with(tmp_path, a=GOOD % "a"))], capsys)
    assert code == 0
    assert "0 error(s), 0 warning(s)" in out


def test_error_findings_exit_1_with_compiler_style_lines(tmp_path: Path, capsys) -> None:
    bad = (GOOD % "b").replace("max_batch_size: 8", "max_batch_size: -2")
    repo = repo_with(tmp_path, a=GOOD % "a", b=bad)
    code, out, _ = run(["check-models", str(repo)], capsys)
    assert code == 1
    assert "b/config.pbtxt:3: error [MaxBatchSize] b: 'max_batch_size' must be non-negative" in out
    assert "1 error(s)" in out


def test_json_output_shape(tmp_path: Path, capsys) -> None:
    repo = repo_with(tmp_path, a=(GOOD % "a").replace("TYPE_FP32 dims: [ 16 ] } ]\noutput",
                                                      "TYPE_FP32 dims: [ 0 ] } ]\noutput"))
    code, out, _ = run(["check-models", str(repo), "-o", "json"], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False
    (finding,) = doc["findings"]
    assert set(finding) == {"severity", "code", "path", "line", "model", "object", "message"}
    assert (finding["severity"], finding["path"], finding["line"], finding["model"]) == \
        ("error", "a/config.pbtxt", 4, "a")
    assert finding["object"] == "input 'IN'"
    assert "model input 'IN' dimension must be integer >= 1" in finding["message"]


def test_json_ok_true_when_only_warnings(tmp_path: Path, capsys) -> None:
    text = ('name: "t"\nbackend: "tensorrtllm"\nmax_batch_size: 8\n'
            'input [ { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
            'output [ { name: "output_ids" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
            'parameters: { key: "gpt_model_path" value: { string_value: "/engines/x" } }\n'
            'parameters: { key: "gpt_model_type" value: { string_value: "inflight_fused_batching" } }\n'
            'parameters: { key: "kv_cache_free_gpu_mem_fraction" value: { string_value: "1.5" } }\n')
    code, out, _ = run(["check-models", str(repo_with(tmp_path, t=text)), "-o", "json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True
    assert [f["severity"] for f in doc["findings"]] == ["warning"]


def test_malformed_pbtxt_is_one_line_with_file_line_column(tmp_path: Path, capsys) -> None:
    text = 'name: "m"\nmax_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP33 } ]\n'
    repo = repo_with(tmp_path, m=text)
    code, out, err = run(["check-models", str(repo)], capsys)
    assert code == 1
    assert "Traceback" not in out + err
    lines = [ln for ln in out.splitlines() if "ConfigSyntax" in ln]
    assert len(lines) == 1 and "m/config.pbtxt:3:" in lines[0] and "TYPE_FP33" in lines[0]
    assert "m/config.pbtxt:3:" in lines[0].split("m: ", 1)[1]  # the message itself carries file:line:column


@pytest.mark.parametrize("make", ["missing", "file", "empty", "model-folder"])
def test_unusable_folder_exits_2_without_traceback(tmp_path: Path, capsys, make: str) -> None:
    target = tmp_path / "x"
    if make == "file":
        target.write_text("not a folder")
    elif make == "empty":
        target.mkdir()
    elif make == "model-folder":
        target.mkdir()
        (target / "config.pbtxt").write_text(GOOD % "x")
    code, out, err = run(["check-models", str(target)], capsys)
    assert code == 2
    assert err.startswith("error: ") and str(target) in err and "Traceback" not in err
    if make == "model-folder":
        assert "hint:" in err


def test_triton_flag_without_server_warns_and_keeps_static_results(tmp_path: Path, capsys,
                                                                   monkeypatch) -> None:
    from kubectl_triton.errors import ToolMissing

    fake = types.ModuleType("kubectl_triton.checks.model.triton")

    def missing(repo_dir, *, display_root=None):
        raise ToolMissing("tritonserver not found")

    fake.check_repository_with_triton = missing
    monkeypatch.setitem(sys.modules, "kubectl_triton.checks.model.triton", fake)
    repo = repo_with(tmp_path, a=(GOOD % "a").replace("max_batch_size: 8", "max_batch_size: -1"))
    code, out, err = run(["check-models", str(repo), "--triton"], capsys)
    assert code == 1 and "max_batch_size" in out
    assert len(err.strip().splitlines()) == 1 and err.startswith("warning:") and "tritonserver" in err


def test_triton_flag_merges_server_findings(tmp_path: Path, capsys, monkeypatch) -> None:
    from kubectl_triton.checks.findings import Finding

    fake = types.ModuleType("kubectl_triton.checks.model.triton")
    seen = {}

    def server(repo_dir, *, display_root=None):
        seen["dir"] = repo_dir
        return [Finding("error", "triton.load", "failed to load 'a'", "a/config.pbtxt", None, "a")]

    fake.check_repository_with_triton = server
    monkeypatch.setitem(sys.modules, "kubectl_triton.checks.model.triton", fake)
    repo = repo_with(tmp_path, a=GOOD % "a")
    code, out, _ = run(["check-models", str(repo), "--triton", "-o", "json"], capsys)
    assert code == 1 and seen["dir"] == repo
    assert [f["code"] for f in json.loads(out)["findings"]] == ["triton.load"]
