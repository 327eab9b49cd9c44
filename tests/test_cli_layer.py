"""The CLI layer: shared options wherever a user puts them, -o yaml beside -o json, one exit path, a closed
pipe, and the check registry as documentation."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kubectl_triton.checks.registry import all_checks
from kubectl_triton.output.checks import print_checks
from tests.apiserver import api  # noqa: F401 - fixture
from tests.conftest import REPO

BIN = Path(sys.executable).parent
PACKAGE = REPO / "kubectl_triton"


@pytest.mark.parametrize("args", [
    ("version",),
    ("validate", "--list-checks"),
    ("compat", str(REPO), "--model", "llama3-8b"),
    ("check-models", str(REPO / "models" / "image-classifier")),
])
def test_yaml_carries_the_same_document_as_json(run_cli, args):
    as_json = run_cli(*args, "-o", "json")
    as_yaml = run_cli(*args, "-o", "yaml")
    assert as_json.exit_code == as_yaml.exit_code, (as_json.stderr, as_yaml.stderr)
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)
    before = run_cli("-o", "yaml", *args)  # the global flag, before the sub-command
    assert before.stdout == as_yaml.stdout


def test_yaml_strings_stay_strings_for_yaml_1_1_and_1_2_readers():
    """kubectl users read -o yaml with PyYAML or Go's yaml.v2 (YAML 1.1) as well as yaml.v3 or ruamel (1.2):
    a string such as "no", "on", "1e3" or "0x1F" must not come back as a boolean or a number in either."""
    from ruamel.yaml import YAML

    from kubectl_triton.output.document import dumps

    doc = {"can_run": "no", "values": ["yes", "on", "off", "1e3", "0x1F", "0o17", "0777", "12", ".5", "-.inf",
                                       "null", "~", "true", "False", "2026-12-03", "text", "multi\nline"],
           "count": 3, "ok": True, "none": None}
    text = dumps(doc, "yaml")
    assert yaml.safe_load(text) == doc
    assert YAML(typ="safe", pure=True).load(text) == doc


def test_validate_yaml_document(run_cli):
    res = run_cli("validate", str(REPO), "-o", "yaml")
    assert res.exit_code == 0, res.stderr
    doc = yaml.safe_load(res.stdout)
    assert doc["ok"] is True and isinstance(doc["findings"], list)


def test_gpus_yaml_and_cluster_flags_after_the_sub_command(run_cli, api):  # noqa: F811
    res = run_cli("gpus", "--kubeconfig", str(api.kubeconfig_path), "--repo", str(REPO), "-o", "yaml")
    assert res.exit_code == 0, res.stderr
    assert set(yaml.safe_load(res.stdout)) == {"gpus", "overlays"}


@pytest.mark.parametrize("where", ["before", "after"])
def test_record_engine_namespace_flag_before_or_after(run_cli, api, tmp_path, where):  # noqa: F811
    flags = ["--kubeconfig", str(api.kubeconfig_path), "-n", "builds"]
    cmd = ["record-engine", "llama3-8b", "--from-job", "engine-build", "--repo", str(REPO)]
    res = run_cli(*(flags + cmd if where == "before" else cmd + flags))
    assert res.exit_code == 2
    assert "no pods in namespace builds" in res.stderr
    assert any(r.namespace == "builds" and r.resource == "pods" for r in api.cluster.requests)


def test_the_sub_command_flag_wins_over_the_global_one(run_cli, api):  # noqa: F811
    res = run_cli("-n", "global", "record-engine", "llama3-8b", "--from-job", "j", "--repo", str(REPO),
                  "--kubeconfig", str(api.kubeconfig_path), "-n", "local")
    assert "no pods in namespace local" in res.stderr


@pytest.mark.parametrize("args,formats", [
    (("-o", "github", "version"), "text, json, yaml"),
    (("-o", "markdown", "gpus"), "text, json, yaml"),
    (("-o", "yaml", "diff", "--base", "HEAD", str(REPO)), None),
])
def test_a_global_format_the_command_lacks_is_a_usage_error(run_cli, args, formats):
    res = run_cli(*args)
    if formats is None:  # diff accepts yaml: no usage error (it may still fail for other reasons)
        assert "is not supported" not in res.stderr
        return
    assert res.exit_code == 2
    assert f"({formats})" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("text,seconds", [("30", 30.0), ("90s", 90.0), ("500ms", 0.5), ("5m", 300.0),
                                          ("1h30m", 5400.0), ("1m30s", 90.0)])
def test_durations(text, seconds):
    from kubectl_triton.cli.options import DURATION

    assert DURATION.convert(text, None, None) == seconds


@pytest.mark.parametrize("text", ["", "5x", "m", "-3s", "0", "1.5.2s"])
def test_bad_durations_are_usage_errors(text):
    import click

    from kubectl_triton.cli.options import DURATION

    with pytest.raises(click.BadParameter):
        DURATION.convert(text, None, None)


def _console(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    if not (BIN / "kubectl-triton").exists():
        pytest.skip("kubectl-triton console script is not installed (run make install)")
    return subprocess.run(["bash", "-c", *args], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})


def test_a_closed_pipe_ends_quietly():
    res = _console("kubectl-triton render --all | head -1; echo \"rc=${PIPESTATUS[0]}\"")
    assert res.stdout.splitlines()[0].startswith("# Source: ")
    assert res.stdout.splitlines()[-1] == "rc=0"
    assert res.stderr == ""


def test_no_python_warning_reaches_stderr():
    res = _console("PYTHONWARNINGS=always kubectl-triton validate --list-checks -o json >/dev/null")
    assert res.returncode == 0 and res.stderr == ""


def test_docs_checks_md_is_generated_from_the_registry():
    doc = (REPO / "docs" / "checks.md").read_text(encoding="utf-8")
    assert doc.rstrip("\n") == print_checks("markdown"), \
        "docs/checks.md is stale: kubectl triton validate --list-checks -o markdown > docs/checks.md"


def test_registry_codes_are_unique_pascal_case_and_documented():
    checks = all_checks()
    codes = [c.code for c in checks]
    assert len(codes) == len(set(codes)) and len(codes) >= 60
    for c in checks:
        assert c.code[0].isupper() and "." not in c.code and "-" not in c.code, c.code
        assert c.description and c.remediation, c.code


def test_list_checks_table_is_kubectl_style(run_cli):
    res = run_cli("validate", "--list-checks")
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["CODE", "SEVERITY", "SCOPE", "DESCRIPTION"]
    assert len(lines) == len(all_checks()) + 1


def test_findings_are_built_only_through_the_registry():
    """No module constructs a Finding with a free-typed code: every code is a registered check."""
    allowed = {PACKAGE / "checks" / "registry.py", PACKAGE / "checks" / "findings.py"}
    bad = []
    for path in PACKAGE.rglob("*.py"):
        if path in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Finding":
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not bad, bad


def test_every_code_the_example_repository_can_report_is_registered(run_cli, tmp_path):
    """Codes of real findings (a broken copy of the repository) are all in the registry."""
    import shutil

    repo = tmp_path / "repo"
    for part in ("base", "overlays", "models", "clusters"):
        shutil.copytree(REPO / part, repo / part)
    cfg = repo / "models" / "image-classifier" / "image_classifier" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("max_batch_size", "max_batch_size: -3 #"))
    res = run_cli("validate", str(repo), "-o", "json")
    codes = {f["code"] for f in json.loads(res.stdout)["findings"]}
    assert codes and codes <= {c.code for c in all_checks()}


@pytest.mark.parametrize("placement", ["before", "after"])
def test_status_yaml_and_namespace_flag_placement(run_cli, api, placement):  # noqa: F811
    from tests.apiserver import healthy_model

    healthy_model(api.cluster, "resnet50", ns="serving")
    flags = ["--kubeconfig", str(api.kubeconfig_path), "-n", "serving"]
    cmd = ["status", "--no-probe"]
    args = flags + cmd if placement == "before" else cmd + flags
    as_json, as_yaml = run_cli(*args, "-o", "json"), run_cli(*args, "-o", "yaml")
    assert as_json.exit_code == as_yaml.exit_code == 0, as_json.stderr
    doc = yaml.safe_load(as_yaml.stdout)
    assert doc == json.loads(as_json.stdout)
    assert [m["model"] for m in doc["models"]] == ["resnet50"] and doc["healthy"] is True


def test_all_namespaces_before_the_sub_command(run_cli, api):  # noqa: F811
    from tests.apiserver import healthy_model

    healthy_model(api.cluster, "a", ns="one")
    healthy_model(api.cluster, "b", ns="two")
    res = run_cli("--kubeconfig", str(api.kubeconfig_path), "-A", "status", "--no-probe", "-o", "json")
    assert res.exit_code == 0, res.stderr
    assert sorted((m["namespace"], m["model"]) for m in json.loads(res.stdout)["models"]) == [("one", "a"),
                                                                                            ("two", "b")]


def test_run_as_a_program_the_output_is_whole_and_exit_handlers_run(tmp_path: Path):
    """Run as a program, the plugin ends without tearing the interpreter down (cli._leave): every byte of its
    output and its exit code still arrive, and exit handlers (a tritonserver it started is stopped by one) run."""
    marker = tmp_path / "handler-ran"
    script = ("import atexit, pathlib, sys; "
              f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'yes'); "
              "sys.argv = ['kubectl-triton', 'validate', '--list-checks', '-o', 'json']; "
              "from kubectl_triton.cli import main; main()")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0 and res.stderr == ""
    assert len(json.loads(res.stdout)["checks"]) > 40 and marker.read_text() == "yes"
    res = subprocess.run([sys.executable, "-m", "kubectl_triton", "validate", "--no-such-flag"], capture_output=True,
                         text=True, timeout=120, cwd=REPO)
    assert res.returncode == 2 and "no-such-flag" in res.stderr
