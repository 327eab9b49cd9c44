"""`--color auto|always|never` and NO_COLOR: colour only when asked or on a terminal; plain text unchanged."""

from __future__ import annotations

import io
import re

import pytest

from kubectl_triton.checks.findings import ERROR, WARNING, Finding
from kubectl_triton.output import color as style
from kubectl_triton.output.findings import to_text
from tests.conftest import REPO

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("mode", "no_color", "tty", "expected"), [
    ("always", "1", False, True), ("never", None, True, False), ("auto", None, True, True),
    ("auto", None, False, False), ("auto", "1", True, False), ("auto", "", True, True)])
def test_enabled(monkeypatch, mode, no_color, tty, expected):
    monkeypatch.delenv("TERM", raising=False)
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    assert style.enabled(Tty() if tty else io.StringIO(), mode) is expected


def test_plain_findings_text_is_byte_identical_and_colour_only_adds_codes():
    findings = [Finding(ERROR, "EnsembleGraph", "bad", path="models/m/config.pbtxt", line=3, model="m"),
                Finding(WARNING, "practice.X", "meh", path="overlays/m/l4", object="Deployment/triton/m")]
    plain = to_text(findings)
    assert plain == ("models/m/config.pbtxt:3: error [EnsembleGraph] m: bad\n"
                     "overlays/m/l4: warning [practice.X] Deployment/triton/m: meh\n"
                     "1 error(s), 1 warning(s)")
    coloured = to_text(findings, color=True)
    assert "\x1b[31merror\x1b[0m" in coloured and "\x1b[33mwarning\x1b[0m" in coloured
    assert ANSI.sub("", coloured) == plain


def test_global_option_and_no_color_on_a_command(run_cli, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    target = str(REPO / "models/image-classifier")
    always = run_cli("--color", "always", "check-models", target)
    assert always.exit_code == 0 and "\x1b[32m0 error(s), 0 warning(s)\x1b[0m" in always.stdout
    assert "\x1b[" not in run_cli("--color", "never", "check-models", target).stdout
    assert "\x1b[" not in run_cli("check-models", target).stdout  # auto, and captured output is no terminal
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in run_cli("--color", "auto", "check-models", target).stdout
    assert run_cli("--color", "sometimes", "version").exit_code == 2


def test_compat_table_stays_aligned_in_colour(run_cli):
    plain = run_cli("--color", "never", "compat", "--gpu", "l4")
    coloured = run_cli("--color", "always", "compat", "--gpu", "l4")
    assert plain.exit_code == coloured.exit_code
    assert "\x1b[1mMODEL" in coloured.stdout
    assert ANSI.sub("", coloured.stdout) == plain.stdout
