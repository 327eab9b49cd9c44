"""Loading the knowledge files under kubectl_triton/data/ (PyYAML when present, else a tiny reader)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


@cache
def load(name: str) -> dict[str, Any]:
    """The parsed data file `name` (e.g. "gpus.yaml"), cached for the process."""
    text = (DATA_DIR / name).read_text(encoding="utf-8")
    try:
        import yaml
    except ImportError:  # GPU machines may lack PyYAML: the catalog is kept in a plain subset
        return parse_plain_yaml(text)
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (a safe loader)


_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+)$")


def _scalar(token: str) -> Any:
    token = token.strip()
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "\"'":
        return token[1:-1]
    if token in ("null", "~", ""):
        return None
    if token in ("true", "false"):
        return token == "true"
    if _INT.match(token):
        return int(token)
    if _FLOAT.match(token):
        return float(token)
    return token


def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _value(text: str) -> Any:
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_scalar(t) for t in inner.split(",")] if inner else []
    return _scalar(text)


def parse_plain_yaml(text: str) -> dict[str, Any]:
    """Parse the subset of YAML the catalog uses: nested block mappings whose values are scalars or
    [flow, lists] of scalars, plus comments. Anything else raises ValueError."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, rest = line.strip().partition(":")
        if not sep or key.startswith(("-", "{")):
            raise ValueError(f"line {number}: outside the plain YAML subset: {raw.strip()}")
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        key = _scalar(key)
        if rest.strip():
            parent[key] = _value(rest.strip())
        else:
            parent[key] = {}
            stack.append((indent, parent[key]))
    return root
