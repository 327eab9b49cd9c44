"""Terminal colour: `--color auto|always|never` and the NO_COLOR convention (https://no-color.org)."""

from __future__ import annotations

import os
import sys
from typing import IO

CHOICES = ("auto", "always", "never")
_CODES = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}
_mode = "auto"


def set_mode(mode: str | None) -> None:
    """Remember the global `--color` choice for this process (None keeps auto)."""
    global _mode
    _mode = mode or "auto"


def enabled(stream: IO | None = None, mode: str | None = None) -> bool:
    """always: yes; never: no; auto: only on a terminal, and never when NO_COLOR is set (to anything but "")."""
    mode = mode or _mode
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Style:
    """Wraps text in ANSI SGR codes when `on`; identity otherwise, so plain output is byte-identical."""

    def __init__(self, on: bool | None = None) -> None:
        self.on = enabled() if on is None else on

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.on and text else text

    def red(self, text: str) -> str:
        return self._wrap(_CODES["red"], text)

    def green(self, text: str) -> str:
        return self._wrap(_CODES["green"], text)

    def yellow(self, text: str) -> str:
        return self._wrap(_CODES["yellow"], text)

    def bold(self, text: str) -> str:
        return self._wrap(_CODES["bold"], text)

    def dim(self, text: str) -> str:
        return self._wrap(_CODES["dim"], text)

    def severity(self, severity: str) -> str:
        """error in red, warning in yellow."""
        return self.red(severity) if severity == "error" else self.yellow(severity) if severity == "warning" \
            else severity

    def verdict(self, text: str, good: bool | None) -> str:
        """A ✓/✗/? cell or a phase: green when good, red when bad, yellow when unknown."""
        return self.green(text) if good is True else self.red(text) if good is False else self.yellow(text)


def current() -> Style:
    """A Style for stdout under the process-wide `--color` mode."""
    return Style(enabled())
