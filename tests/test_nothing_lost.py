"""Nothing lost: a failure injected at every write of `add-model` and `record-engine` leaves the tree byte for
byte as it was; and round-trip edits (kubectl_triton/yamledit.py) of real-world kustomization and Flux files
(comments, anchors, flow style, several documents, CRLF) change nothing but the intended lines."""

from __future__ import annotations

import difflib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from kubectl_triton.compat import record
from kubectl_triton.errors import InputError
from kubectl_triton.formats import yamledit
from kubectl_triton.gitops import scaffold
from tests.conftest import SHARED
from tests.test_bad_inputs import run, tree_digest

ENGINE = Path(__file__).parent / "fixtures" / "engines" / "llama3-8b-bf16-tp1-h100"
ADD = ["add-model", "fresh", "--backend", "onnxruntime", "--gpu", "l4", "--gpu", "t4",
       "--input", "x:FP32:3,224,224", "--output", "y:FP32:1000"]
FIGURES = {"injected_failures": 0, "files_changed_by_failed_commands": 0}


class Injected(OSError):
    pass


def fail_at(n: int, real: Callable, counter: list[int]) -> Callable:
    """`real`, except that its n-th call (1-based) raises an OSError."""
    def wrapper(*args, **kwargs):
        counter[0] += 1
        if counter[0] == n:
            raise Injected(28, "No space left on device (injected)")
        return real(*args, **kwargs)
    return wrapper


def _calls(monkeypatch, target: object, name: str, args: list[str]) -> int:
    counter = [0]
    real = getattr(target, name)
    with monkeypatch.context() as m:
        m.setattr(target, name, fail_at(-1, real, counter))
        res = run(args)
    assert res.code == 0 and res.crash is None, res.err
    return counter[0]


def _inject_everywhere(monkeypatch, root: Path, args: list[str], points: list[tuple[object, str]],
                       reset: Callable[[], None]) -> int:
    tried = 0
    for target, name in points:
        reset()
        total = _calls(monkeypatch, target, name, args)
        assert total > 0, name
        for n in range(1, total + 1):
            reset()
            before = tree_digest(root)
            counter = [0]
            with monkeypatch.context() as m:
                m.setattr(target, name, fail_at(n, getattr(target, name), counter))
                res = run(args)
            tried += 1
            FIGURES["injected_failures"] += 1
            assert res.crash is None, res.crash
            assert res.code == 2, (name, n, res.err)
            assert res.err.startswith("error: ") and "injected" in res.err, res.err
            if tree_digest(root) != before:
                FIGURES["files_changed_by_failed_commands"] += 1
                pytest.fail(f"{name} failing at call {n}: the tree changed")
    return tried


def restorer(root: Path) -> Callable[[], None]:
    """A function that puts `root` back as it is now (the counting runs succeed and write)."""
    saved = root.parent / f"{root.name}.saved"
    shutil.copytree(root, saved, symlinks=True)

    def reset() -> None:
        shutil.rmtree(root)
        shutil.copytree(saved, root, symlinks=True)

    return reset


def test_add_model_every_write_can_fail(repo_copy, monkeypatch):
    import builtins

    reset = restorer(repo_copy)
    args = [*ADD, "--repo", str(repo_copy)]
    # staging writes (open), folder creation, and every move into place or aside
    monkeypatch.setattr(scaffold, "open", builtins.open, raising=False)
    tried = _inject_everywhere(monkeypatch, repo_copy, args,
                               [(scaffold, "_replace"), (scaffold, "open"), (Path, "mkdir")], reset)
    assert tried >= 20
    res = run(args)  # and without a failure it writes
    assert res.code == 0 and (repo_copy / "models" / "fresh" / "model.yaml").is_file()


@pytest.mark.parametrize("existing", [False, True], ids=["first-record", "re-record"])
def test_record_engine_every_write_can_fail(repo_copy, monkeypatch, existing):
    args = ["record-engine", "llama3-8b", "--from", str(ENGINE), "--repo", str(repo_copy)]
    if existing:
        assert run(args).code == 0
    reset = restorer(repo_copy)
    tried = _inject_everywhere(monkeypatch, repo_copy, args,
                               [(record.os, "replace"), (Path, "write_text"), (Path, "mkdir"), (record.os, "chmod")],
                               reset)
    assert tried >= 4


# -- round-trip edits of real-world YAML -----------------------------------------------------------------------

def corpus() -> list[Path]:
    """The kustomization and Flux files of the corpus (what kubectl-triton edits)."""
    import re

    top = SHARED / "conformance" / "yaml-corpus"
    if not top.is_dir():
        return []
    flux = re.compile(r"^apiVersion: \S*toolkit\.fluxcd\.io/", re.MULTILINE)
    return sorted(p for p in top.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()
                  and (p.name == "kustomization.yaml" or flux.search(p.read_text(encoding="utf-8"))))


def variants(text: str) -> dict[str, str]:
    """The file as written, with CRLF line ends, and with a comment/anchor/flow-style header."""
    return {"as-is": text, "crlf": text.replace("\r\n", "\n").replace("\n", "\r\n"),
            "decorated": "# kept: a leading comment\n" + text.rstrip("\n") + "\n# kept: a trailing comment\n"}


def only_intended(before: str, after: str, entry: str) -> list[str]:
    """Lines changed other than those naming `entry` (and a `resources:` key added for it)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    stray = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        removed, added = a[i1:i2], b[j1:j2]
        stray += [f"-{x!r}" for x in removed]
        stray += [f"+{x!r}" for x in added if entry not in x and x.strip() not in ("resources:",)]
    return stray


CASES: list[Path] = corpus()


@pytest.mark.skipif(not CASES, reason="../shared/conformance/yaml-corpus is not beside this checkout")
def test_round_trip_edits_change_only_intended_lines(record_property):
    entry = "added-by-kubectl-triton.yaml"
    edited = refused = reindented = 0
    problems = []
    for path in CASES:
        raw = path.read_bytes().decode("utf-8")
        for name, text in variants(raw).items():
            label = f"{path.relative_to(SHARED)} ({name})"
            try:
                after = yamledit.edit_resources(text, add=[entry], source=label)
            except InputError as err:
                assert label in err.message
                refused += 1  # several documents, or not a mapping: refused, nothing written
                continue
            edited += 1
            # a last line without its newline gets one when a line follows it: that is the intended edit
            nl = "\r\n" if "\r\n" in text else "\n"
            stray = min(only_intended(text, after, entry), only_intended(text + nl, after, entry), key=len)
            if stray:
                problems.append(f"{label}: {stray[:4]}")
                continue
            if "\r\n" in text and after.replace("\r\n", "").count("\n"):
                problems.append(f"{label}: mixed line ends after the edit")
            back = yamledit.edit_resources(after, remove=[entry], source=label)
            moved = [x for x in only_intended(back, after, entry) if not x[2:].lstrip().startswith("#")]
            if entry in back:
                problems.append(f"{label}: removing the entry again left it in place")
            elif "resources:" in text and moved:
                reindented += 1
                problems.append(f"{label}: removing the entry again changed other lines: {moved[:4]}")
            if yamledit.edit_resources(text, add=[], source=label) != text:
                problems.append(f"{label}: an edit with nothing to do changed the text")
    record_property("round_trip_files", len(CASES))
    print(f"\nround-trip: {len(CASES)} files x 3 variants: {edited} edited, {refused} refused; "
          f"{len(problems)} with stray changes; removal re-indented other blocks in {reindented}")
    assert edited >= len(CASES)
    assert not problems, "\n".join(problems)
    assert reindented == 0


def test_zz_nothing_lost_figures(record_property):
    for key, value in FIGURES.items():
        record_property(key, value)
    print(f"\ninjected write failures: {FIGURES['injected_failures']}; files changed by failed commands: "
          f"{FIGURES['files_changed_by_failed_commands']}")
    assert FIGURES["files_changed_by_failed_commands"] == 0
