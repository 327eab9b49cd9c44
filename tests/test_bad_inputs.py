"""Walk tests/bad_inputs/: every bad input, in every format the plugin reads, gives a one-line message naming
the file, the documented exit code (1: findings, 2: bad input or usage) and no traceback; and no failed
command changes a file. Figures are printed and recorded (record_property)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import shlex
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kubectl_triton.cli import main

HERE = Path(__file__).parent
CORPUS = HERE / "bad_inputs"
REPO = HERE.parent
ENGINE = HERE / "fixtures" / "engines" / "llama3-8b-bf16-tp1-h100"
SECRET = "SECRET-TOKEN-DO-NOT-PRINT"  # the token in every corpus kubeconfig; must never be printed

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ok\ndata:\n  a: b\n"


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    crash: str | None


def run(args: list[str], stdin: str = "") -> Outcome:
    """The real entry point in-process; an exception other than SystemExit is a traceback."""
    out, err = io.StringIO(), io.StringIO()
    crash, code = None, 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - exactly what this test hunts
            crash = traceback.format_exc()
            code = -1
    return Outcome(code, out.getvalue(), err.getvalue(), crash)


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


def mini_repo(root: Path) -> Path:
    """A small GitOps repository: one good overlay."""
    (root / "overlays" / "ok").mkdir(parents=True)
    (root / "overlays" / "ok" / "kustomization.yaml").write_text("resources:\n  - cm.yaml\n")
    (root / "overlays" / "ok" / "cm.yaml").write_text(CM)
    return root


# format folder -> (set up the case under `work` and return the command line, the name the message must carry,
#                   the exit codes documented for it)
Setup = Callable[[Path, Path], tuple[list[str], tuple[str, ...], set[int]]]


def _pbtxt(case: Path, work: Path):
    (work / "m").mkdir(parents=True)
    shutil.copy(case, work / "m" / "config.pbtxt")
    return ["check-models", str(work)], ("m/config.pbtxt",), {1, 2}


def _kustomization(case: Path, work: Path):
    root = mini_repo(work)
    (root / "overlays" / "bad").mkdir()
    shutil.copy(case, root / "overlays" / "bad" / "kustomization.yaml")
    (root / "overlays" / "bad" / "ok.yaml").write_text(CM)
    return ["render", "--repo", str(root), str(root / "overlays" / "bad")], ("overlays/bad",), {1, 2}


def _manifest(case: Path, work: Path):
    root = mini_repo(work)
    (root / "overlays" / "bad").mkdir()
    (root / "overlays" / "bad" / "kustomization.yaml").write_text("resources:\n  - manifest.yaml\n")
    shutil.copy(case, root / "overlays" / "bad" / "manifest.yaml")
    return ["validate", str(root), "--no-compat"], ("overlays/bad",), {1, 2}


def _flux(case: Path, work: Path):
    root = mini_repo(work)
    (root / "clusters" / "c").mkdir(parents=True)
    (root / "clusters" / "c" / "kustomization.yaml").write_text("resources:\n  - flux.yaml\n")
    shutil.copy(case, root / "clusters" / "c" / "flux.yaml")
    return ["validate", str(root), "--no-compat"], ("clusters/c",), {1, 2}


def _model_yaml(case: Path, work: Path):
    root = mini_repo(work)
    (root / "models" / "m").mkdir(parents=True)
    shutil.copy(case, root / "models" / "m" / "model.yaml")
    return ["validate", str(root)], ("models/m/model.yaml",), {1, 2}


def _engine_config(case: Path, work: Path):
    shutil.copy(case, work / "config.json")
    return ["compat", "--engine-dir", str(work), "--gpu", "h100-80gb"], ("config.json",), {1, 2}


def _build_info(case: Path, work: Path):
    shutil.copy(ENGINE / "config.json", work / "config.json")
    shutil.copy(case, work / "build-info.json")
    return ["compat", "--engine-dir", str(work), "--gpu", "h100-80gb"], ("build-info.json",), {1, 2}


def _build_log(case: Path, work: Path):
    root = mini_repo(work / "repo")
    (root / "models" / "llama3-8b").mkdir(parents=True)
    log = work / case.name
    shutil.copy(case, log)
    return ["record-engine", "llama3-8b", "--from-log", str(log), "--repo", str(root)], (case.name,), {2}


def _kubeconfig(case: Path, work: Path):
    shutil.copy(case, work / "kubeconfig")
    return (["status", "--kubeconfig", str(work / "kubeconfig"), "--no-probe", "--request-timeout", "2s"],
            ("kubeconfig", "127.0.0.1:1", "context"), {2})


def _hf_config(case: Path, work: Path):
    shutil.copy(case, work / "config.json")
    return ["plan", "--hf-config", str(work / "config.json")], ("config.json",), {2}


SETUPS: dict[str, Setup] = {
    "pbtxt": _pbtxt, "kustomization": _kustomization, "manifest": _manifest, "flux": _flux,
    "model_yaml": _model_yaml, "engine_config": _engine_config, "build_info": _build_info,
    "build_log": _build_log, "kubeconfig": _kubeconfig, "hf_config": _hf_config,
}


def test_bad_inputs(tmp_path, repo_copy, record_property, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config of the machine's
    cases = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.parent != CORPUS)
    problems: list[str] = []
    tracebacks = changed = 0
    per_format: dict[str, int] = {}
    started = time.monotonic()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for i, case in enumerate(cases):
        fmt = case.parent.name
        per_format[fmt] = per_format.get(fmt, 0) + 1
        work = tmp_path / f"case{i}"
        work.mkdir()
        if fmt == "args":
            line = case.read_text().strip().format(repo=repo_copy, engine=ENGINE, tmp=scratch)
            args, names, codes = shlex.split(line), (), {2}
            watched = [repo_copy, scratch]
        else:
            args, names, codes = SETUPS[fmt](case, work)
            watched = [work]
        before = [tree_digest(w) for w in watched]
        res = run(args)
        label = f"{fmt}/{case.name}"
        text = res.out + res.err
        if res.crash:
            tracebacks += 1
            problems.append(f"{label}: TRACEBACK\n{res.crash}")
            continue
        if "Traceback" in text:
            tracebacks += 1
            problems.append(f"{label}: traceback printed\n{text}")
        if res.code not in codes:
            problems.append(f"{label}: exit {res.code}, documented {sorted(codes)}\n{text[-800:]}")
        if names and not any(n in text for n in names):
            problems.append(f"{label}: no line names {' or '.join(names)}\n{text[-800:]}")
        if res.code == 2:
            first = res.err.strip().splitlines()[:1]
            if not first or not (first[0].startswith("error:") or first[0].startswith("Usage:")):
                problems.append(f"{label}: exit 2 without an 'error:' line\n{text[-800:]}")
        if SECRET in text:
            problems.append(f"{label}: printed a credential from the kubeconfig")
        if [tree_digest(w) for w in watched] != before:
            changed += 1
            problems.append(f"{label}: the failed command changed files")
    elapsed = time.monotonic() - started
    figures = {"bad_inputs_tried": len(cases), "tracebacks": tracebacks, "files_changed_by_failed_commands": changed}
    for key, value in figures.items():
        record_property(key, value)
    print(f"\nbad inputs tried: {len(cases)} ({', '.join(f'{k} {v}' for k, v in sorted(per_format.items()))}); "
          f"tracebacks: {tracebacks}; files changed by failed commands: {changed}; {elapsed:.1f}s")
    assert len(cases) >= 150
    assert len(per_format) == len(SETUPS) + 1, per_format
    assert not problems, f"{len(problems)} problem(s):\n\n" + "\n\n".join(problems)
