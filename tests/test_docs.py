"""Every command block in docs/ runs: `sh` blocks are executed in order in a scratch git copy of the repository
and must exit 0; `console` blocks (live cluster, sample sessions) are not run, but every `kubectl triton
COMMAND` in any block must name a command that exists. The convention is written down in docs/README.md."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kubectl_triton.cli import COMMANDS
from tests.conftest import REPO

DOCS = REPO / "docs"
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```\s*$", re.M | re.S)
EXECUTED = "sh"
LANGUAGES = {"sh", "console", "yaml", "json", "text", "promql", "pbtxt", ""}
# README fragments the lead merges: their `sh` blocks are synopses, not steps
REFERENCE = {"bench-tune.md", "security.md"}
GIT_ENV = {"GIT_AUTHOR_NAME": "docs", "GIT_AUTHOR_EMAIL": "docs@example.com", "GIT_COMMITTER_NAME": "docs",
           "GIT_COMMITTER_EMAIL": "docs@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def blocks(path: Path) -> list[tuple[str, int, str]]:
    """(language, line, body) of every fenced block."""
    text = path.read_text(encoding="utf-8")
    return [(m["lang"], text.count("\n", 0, m.start()) + 1, m["body"]) for m in FENCE.finditer(text)]


def guides() -> list[Path]:
    return [p for p in sorted(DOCS.glob("*.md")) if p.name not in REFERENCE and not p.name.startswith("README-")]


def test_every_fence_language_is_known_and_guides_have_executed_steps():
    for doc in sorted(DOCS.glob("*.md")):
        for lang, line, _ in blocks(doc):
            assert lang in LANGUAGES, f"{doc.name}:{line}: unknown fence language {lang!r} (sh runs, console not)"
    executed = [d.name for d in guides() if any(lang == EXECUTED for lang, _, _ in blocks(d))]
    assert {"add-an-onnx-model.md", "add-an-llm.md", "upgrade-triton-image.md",
            "debug-a-failed-rollout.md", "completion.md"} <= set(executed)


def test_every_kubectl_triton_command_in_the_docs_exists():
    for doc in sorted(DOCS.glob("*.md")):
        for lang, line, body in blocks(doc):
            if lang not in ("sh", "console"):
                continue
            for name in re.findall(r"kubectl[ -]triton(?: --?[\w-]+(?: [\w-]+)?)* ([a-z][\w-]*)", body):
                assert name in COMMANDS, f"{doc.name}:{line}: `kubectl triton {name}` is no command"


@pytest.fixture
def scratch(repo_copy: Path) -> Path:
    """The repository's GitOps folders as a fresh git repository on `main` with one commit."""
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "seed"]):
        subprocess.run(["git", *args], cwd=repo_copy, check=True, capture_output=True, env={**os.environ, **GIT_ENV})
    return repo_copy


@pytest.mark.parametrize("doc", [d.name for d in guides() if any(b[0] == EXECUTED for b in blocks(d))])
def test_guide_commands_run(doc: str, scratch: Path):
    if not shutil.which("kubectl"):
        pytest.skip("kubectl is not on PATH")
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, **GIT_ENV, "PATH": bindir + os.pathsep + os.environ["PATH"], "NO_COLOR": "1"}
    env.pop("GITHUB_BASE_REF", None)
    for lang, line, body in blocks(DOCS / doc):
        if lang != EXECUTED:
            continue
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=scratch, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (f"docs/{doc}:{line}: exit {proc.returncode}\n{body}\n"
                                      f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
