"""Distribution: the wheel pipx installs, `make dist`'s zip application, the krew manifest template, the
release workflow that fills it, and shell completion."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

PLACEHOLDERS = ("{{VERSION}}", "{{SHA256_LINUX_AMD64}}", "{{SHA256_DARWIN_ARM64}}")
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pipx install .` (pip) builds from this checkout, without its dependencies."""
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                           "-w", str(out), str(REPO)], capture_output=True, text=True, cwd=out)
    assert proc.returncode == 0, proc.stderr
    [whl] = out.glob("kubectl_triton-*.whl")
    return whl


def test_wheel_holds_the_package_data_and_entry_points(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("kubectl_triton/data/metrics.yaml", "kubectl_triton/data/gpus.yaml",
                 "kubectl_triton/data/crds/monitoring.coreos.com/prometheusrule_v1.json",
                 "kubectl_triton/data/crds/LICENSE"):
        assert data in names, data
    assert any(n.startswith("kubectl_triton/data/templates/") for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "kubectl-triton = kubectl_triton.cli:main" in text


PYENV = Path.home() / ".pyenv" / "versions"


def interpreters() -> dict[str, str]:
    """CPython 3.10 ... 3.13 interpreters on this machine (PATH or pyenv), by minor version."""
    found = {}
    for minor in ("3.10", "3.11", "3.12", "3.13"):
        pyenv = sorted(str(p) for p in PYENV.glob(f"{minor}.*/bin/python{minor}"))
        candidates = [shutil.which(f"python{minor}"), *pyenv]
        for exe in filter(None, candidates):
            if subprocess.run([exe, "-c", "pass"], capture_output=True).returncode == 0:
                found[minor] = exe
                break
    return found


def test_zipapp_runs_the_plugin_and_refuses_other_pythons_in_one_line(wheel: Path, tmp_path: Path):
    """tools/zipapp.py as `make dist` runs it, the dependencies left out (the venv provides them) to stay fast."""
    app = tmp_path / "kubectl-triton"
    proc = subprocess.run([sys.executable, str(REPO / "tools/zipapp.py"), "--wheel", str(wheel), "-p", sys.executable,
                           "--no-deps", "-o", str(app)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert os.access(app, os.X_OK) and app.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = {**os.environ, "PYTHONPATH": site, "KUBECTL_TRITON_ROOT": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, str(app), "validate", str(REPO), "--no-compat"], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith("0 error(s), 0 warning(s)")
    # the package ran from the unpacked file, not from the checkout
    major, minor = sys.version_info[:2]
    tag = f"cp{major}{minor}"
    assert list((tmp_path / "cache").glob("*/common/kubectl_triton/data/init/base/triton/deployment.yaml"))
    assert not list((tmp_path / "cache").glob(f"*/{tag}/*"))  # one interpreter: everything is shared
    other = next((exe for version, exe in interpreters().items() if version != f"{major}.{minor}"), None)
    if other is None:
        pytest.skip("no second CPython version on this machine")
    refused = subprocess.run([other, str(app), "version"], capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith(f"error: kubectl-triton needs CPython {major}.{minor}; this is cpython")


def test_make_dist_builds_one_file_for_every_supported_python():
    """Every interpreter of DIST_PYTHONS goes to tools/zipapp.py, found or not: it says which it cannot use."""
    proc = subprocess.run(["make", "-n", "dist"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    build = next(ln for ln in proc.stdout.replace("\\\n", " ").splitlines() if "tools/zipapp.py" in ln)
    assert "-o dist/kubectl-triton" in build
    assert "-p python3.10 -p python3.11 -p python3.12 -p python3.13 " in build
    assert "DIST_PYTHONS ?= python3.10 python3.11 python3.12 python3.13" in (REPO / "Makefile").read_text()


SUPPORTED = ("3.10", "3.11", "3.12", "3.13")
THIS = "{}.{}".format(*sys.version_info[:2])
OTHERS = [v for v in SUPPORTED if v != THIS]
INSTALL = "install them: pyenv install {v}; apt-get install {py} (on Ubuntu from the deadsnakes PPA); brew install " \
          "{brew}; in GitHub Actions, actions/setup-python"
OR_NAME = "or name the interpreters you have: make dist DIST_PYTHONS='python3.11 /opt/python3.12/bin/python3.12'"


def _hint(versions: list[str], pyenv: tuple[str, ...] = ()) -> str:
    ways = [f"select pyenv's: pyenv global $(pyenv global) {' '.join(pyenv)}"] if pyenv else []
    if versions:
        ways.append(INSTALL.format(v=" ".join(versions), py=" ".join(f"python{v}" for v in versions),
                                   brew=" ".join(f"python@{v}" for v in versions)))
    return "hint: " + "; ".join([*ways, OR_NAME])


def _path_with(tmp_path: Path, versions: tuple[str, ...], shims: tuple[str, ...] = ()) -> str:
    """A PATH holding only python<version> for each of `versions`, each running this interpreter (so a name
    other than this version's lies about its version), and for each of `shims` a pyenv shim of a version that
    pyenv has but does not select (what pyenv's shim prints then)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for version in versions:
        wrapper = bin_dir / f"python{version}"
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        wrapper.chmod(0o755)
    for version in shims:
        shim = bin_dir / f"python{version}"
        shim.write_text(f"#!/bin/sh\necho 'pyenv: python{version}: command not found\n\nThe `python{version}'"
                        f"\\'' command exists in these Python versions:\n  {version}.1\n\nNote: See '\\''pyenv help "
                        "global'\\'' for tips on allowing multiple' >&2\nexit 127\n")
        shim.chmod(0o755)
    return str(bin_dir)


def _zipapp(wheel: Path, out: Path, path: str, *args: str, env: dict[str, str] | None = None):
    pythons = [a for v in SUPPORTED for a in ("-p", f"python{v}")]  # as `make dist` passes DIST_PYTHONS
    environ = {k: v for k, v in os.environ.items() if k != "KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS"}
    return subprocess.run([sys.executable, str(REPO / "tools/zipapp.py"), "--wheel", str(wheel), *pythons, "--no-deps",
                           *args, "-o", str(out)], capture_output=True, text=True, timeout=300,
                          env={**environ, "PATH": path, **(env or {})})


def test_dist_says_which_versions_it_built_for_and_which_it_could_not_find(wheel: Path, tmp_path: Path):
    """A PATH with only this interpreter: the file is built for its version, and the others are named, with how
    to get them, after the build (where it is read); the file then refuses them."""
    app = tmp_path / "kubectl-triton"
    proc = _zipapp(wheel, app, _path_with(tmp_path, (THIS,)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"building for CPython {THIS} (python{THIS})"
    missing = ", ".join(f"python{v} (not found)" for v in OTHERS)
    assert proc.stderr.splitlines() == [
        f"warning: not built for {missing}: {app} refuses to run on those versions",
        f"{_hint(OTHERS)}; KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS=1 (or --require-all) makes this an error"]
    launcher = zipfile.ZipFile(app).read("__main__.py").decode()
    assert f"TAGS = ('cp{THIS.replace('.', '')}',)" in launcher


NOT_FOUND = "error: cannot build for " + ", ".join(f"python{v} (not found)" for v in OTHERS)


@pytest.mark.parametrize("versions, shims, args, env, error, hint", [
    pytest.param((THIS,), (), [], {"KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS": "1"}, NOT_FOUND, _hint(OTHERS), id="ci"),
    pytest.param((THIS,), (), ["--require-all"], {}, NOT_FOUND, _hint(OTHERS), id="require-all"),
    pytest.param((), (), [], {}, "error: cannot build for " + ", ".join(f"python{v} (not found)" for v in SUPPORTED),
                 _hint(list(SUPPORTED)), id="none-found"),
    pytest.param(SUPPORTED, (), ["--require-all"], {},
                 "error: cannot build for " + ", ".join(f"python{v} (is CPython {THIS})" for v in OTHERS),
                 _hint(OTHERS), id="a-name-that-lies"),
    pytest.param((THIS,), tuple(OTHERS), ["--require-all"], {},
                 "error: cannot build for " + ", ".join(f"python{v} (pyenv's {v}.1, not selected)" for v in OTHERS),
                 _hint([], tuple(f"{v}.1" for v in OTHERS)), id="pyenv-shims"),
])
def test_dist_fails_before_building_when_versions_are_required(wheel: Path, tmp_path: Path, versions, shims, args,
                                                               env, error, hint):
    """Under CI (KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS=1, as .ci/run sets for system-deps) or --require-all a missing
    interpreter fails the build, as no interpreter at all always does: two lines, no file, no traceback."""
    app = tmp_path / "kubectl-triton"
    proc = _zipapp(wheel, app, _path_with(tmp_path, versions, shims), *args, env=env)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [error, hint]
    assert not app.exists()


@pytest.mark.skipif(not (REPO / "dist/kubectl-triton").exists(), reason="run `make dist` to test the release file")
@pytest.mark.parametrize("minor", ["3.10", "3.11", "3.12", "3.13"])
def test_built_release_file_runs_on_every_supported_python(minor: str, tmp_path: Path):
    exe = interpreters().get(minor)
    if exe is None:
        pytest.skip(f"no python{minor} here")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["KUBECTL_TRITON_ROOT"] = str(tmp_path / "cache")
    work = tmp_path / "new"
    work.mkdir()
    for args in (["init", "--gpu", "l4"], ["add-model", "m", "--backend", "onnxruntime", "--gpu", "l4", "--input",
                                          "x:FP32:4", "--output", "y:FP32:4"], ["validate"]):
        proc = subprocess.run([exe, str(REPO / "dist/kubectl-triton"), *args], capture_output=True, text=True,
                              env=env, cwd=work, timeout=300)
        assert proc.returncode == 0, (minor, args, proc.stderr[-2000:])


def test_krew_manifest_template_is_complete_once_the_workflow_fills_it():
    template = (REPO / "plugins/triton.yaml").read_text()
    for placeholder in PLACEHOLDERS:
        assert placeholder in template
    filled = template.replace("{{VERSION}}", "0.1.0")
    for placeholder in PLACEHOLDERS[1:]:
        filled = filled.replace(placeholder, "a" * 64)
    assert "{{" not in filled
    plugin = yaml.safe_load(filled)
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2" and plugin["kind"] == "Plugin"
    assert plugin["metadata"]["name"] == "triton"  # `kubectl krew install triton` -> `kubectl triton`
    spec = plugin["spec"]
    assert spec["version"] == "v0.1.0"
    assert len(spec["shortDescription"]) <= 50 and spec["description"].strip() and spec["caveats"].strip()
    for platform in spec["platforms"]:
        assert platform["bin"] == "kubectl-triton" and platform["sha256"] == "a" * 64
        assert platform["uri"].endswith(".tar.gz")
        # krew-index refuses archives without the licence
        assert {"from": "LICENSE", "to": "."} in platform["files"]


def test_the_licence_is_apache_2_in_the_checkout_the_wheel_and_the_release_archive(wheel: Path):
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"] and "END OF TERMS AND CONDITIONS" in text
    assert "license = Apache-2.0" in (REPO / "setup.cfg").read_text()
    names = zipfile.ZipFile(wheel).namelist()
    [licence] = [n for n in names if n.endswith("LICENSE") and ".dist-info/" in n]
    assert zipfile.ZipFile(wheel).read(licence).decode() == text
    workflow = yaml.safe_load((REPO / ".github/workflows/release.yaml").read_text())
    package = next(s["run"] for s in workflow["jobs"]["build"]["steps"] if s.get("name") == "Package for krew")
    assert "kubectl-triton README.md LICENSE" in package


def test_wheel_holds_what_init_writes(wheel: Path):
    """`init` outside this checkout: the bases, the infrastructure, the CI workflow and the layout schema."""
    names = set(zipfile.ZipFile(wheel).namelist())
    for rel in sorted(p.relative_to(REPO).as_posix() for p in (REPO / "base").rglob("*") if p.is_file()):
        assert f"kubectl_triton/data/init/{rel}" in names, rel
    for data in ("kubectl_triton/data/init/workflow.yaml", "kubectl_triton/data/kubectl-triton.schema.json",
                 "kubectl_triton/data/init/infrastructure/kustomization.yaml"):
        assert data in names, data


def test_release_workflow_builds_fills_every_placeholder_and_publishes():
    workflow = yaml.safe_load((REPO / ".github/workflows/release.yaml").read_text())
    assert workflow[True]["push"]["tags"] == ["v*"]
    build_runs = "\n".join(s.get("run", "") for s in workflow["jobs"]["build"]["steps"])
    assert "make dist" in build_runs and "tar -C pkg -czf" in build_runs
    platforms = {m["platform"] for m in workflow["jobs"]["build"]["strategy"]["matrix"]["include"]}
    template = yaml.safe_load((REPO / "plugins/triton.yaml").read_text())
    uris = {p["uri"].rsplit("/", 1)[1] for p in template["spec"]["platforms"]}
    assert uris == {f"kubectl-triton-{p}.tar.gz" for p in platforms}
    release_runs = "\n".join(s.get("run", "") for s in workflow["jobs"]["release"]["steps"])
    for placeholder in PLACEHOLDERS:
        assert placeholder.replace("{{", "s/{{") in release_runs, placeholder
    assert "gh release create" in release_runs


@pytest.mark.parametrize(("shell", "marker"), [("bash", "complete -o nosort -F _kubectl_triton_completion "
                                                         "kubectl-triton"),
                                                ("zsh", "compdef _kubectl_triton_completion kubectl-triton"),
                                                ("fish", "complete --no-files --command kubectl-triton")])
def test_shell_completion_scripts(shell: str, marker: str):
    proc = subprocess.run([str(VENV_BIN / "kubectl-triton")], capture_output=True, text=True,
                          env={**os.environ, "_KUBECTL_TRITON_COMPLETE": f"{shell}_source"})
    assert proc.returncode == 0 and marker in proc.stdout


def test_completion_completes_commands_and_options():
    env = {**os.environ, "_KUBECTL_TRITON_COMPLETE": "bash_complete", "COMP_WORDS": "kubectl-triton di",
           "COMP_CWORD": "1"}
    proc = subprocess.run([str(VENV_BIN / "kubectl-triton")], capture_output=True, text=True, env=env)
    assert "plain,diff" in proc.stdout.split()
    env.update(COMP_WORDS="kubectl-triton --color ", COMP_CWORD="2")
    proc = subprocess.run([str(VENV_BIN / "kubectl-triton")], capture_output=True, text=True, env=env)
    assert proc.stdout.split() == ["plain,auto", "plain,always", "plain,never"]
