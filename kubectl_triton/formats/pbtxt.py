"""config.pbtxt through Triton's own protobuf schema (tritonclient's model_config_pb2), and the one span editor
that changes some top-level fields of a config.pbtxt text while keeping every other byte (comments included)."""

from __future__ import annotations

import importlib.util
import os
import re
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from kubectl_triton.errors import InputError


@cache
def schema() -> ModuleType:
    """`tritonclient.grpc.model_config_pb2`, loaded without importing grpc (keeps start-up fast)."""
    name = "tritonclient.grpc.model_config_pb2"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("tritonclient is not installed", hint="pip install 'tritonclient[grpc]'")
    path = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    assert mod_spec and mod_spec.loader
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


class PbtxtError(InputError):
    """A config.pbtxt that Triton's parser refuses; carries file, line and column."""

    def __init__(self, source: str, line: int | None, column: int | None, problem: str) -> None:
        where = f":{line}" + (f":{column}" if column else "") if line else ""
        super().__init__(f"{source}{where}: {problem}")
        self.source, self.line, self.column, self.problem = source, line, column, problem


def parse(text: str, source: str = "config.pbtxt") -> Any:
    """Parse pbtxt text into a ModelConfig message; syntax and unknown fields raise PbtxtError."""
    from google.protobuf import text_format

    message = schema().ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as err:
        line, column = err.GetLine(), err.GetColumn()
        problem = str(err)
        prefix = f"{line}:{column} : "
        if problem.startswith(prefix):
            problem = problem[len(prefix):]
        raise PbtxtError(source, line, column, problem) from None
    return message


def load(path: Path) -> Any:
    """Read and parse a config.pbtxt file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    return parse(text, str(path))


def dumps(message: Any) -> str:
    """ModelConfig as pbtxt text in Triton's usual layout."""
    from google.protobuf import text_format

    return text_format.MessageToString(message, as_utf8=True)


def to_dict(message: Any) -> dict[str, Any]:
    """ModelConfig as a dict with Triton's JSON field names (what /v2/models/M/config returns)."""
    from google.protobuf import json_format

    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def backend_configs(folder: Path, backend: str) -> list[tuple[Path, dict[str, Any]]]:
    """(config.pbtxt, parsed as a dict) of the models in `folder` (a model repository) whose backend is `backend`;
    a config that cannot be read or parsed is left out (the model checks report it)."""
    out = []
    for config in sorted(folder.glob("*/config.pbtxt")):
        try:
            text = config.read_text(encoding="utf-8")
            parsed = to_dict(parse(text, str(config))) if backend in text else {}
        except (OSError, UnicodeDecodeError, PbtxtError):
            continue
        if parsed.get("backend") == backend:
            out.append((config, parsed))
    return out


def write_atomic(path: Path, text: str) -> None:
    """Write text to path through a temporary file and rename, so readers never see half a file. The file keeps
    its permissions (a new one gets the umask's), and a symbolic link is written through, not replaced."""
    if path.is_symlink():
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---- the span editor: change some top-level fields of a config.pbtxt, keep every other byte -----------------

_TOKEN = re.compile(r"""\s+|\#[^\n]*|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|[A-Za-z_][\w.]*|[-+]?[\w.+-]+|.""")
_OPEN, _CLOSE = "{[<", "}]>"


@dataclass(frozen=True)
class FieldSpan:
    """Where one top-level field of a pbtxt text is: `start` at its name, `end` past its value, `stop` past
    a `,` or `;` that follows it."""

    name: str
    start: int
    end: int
    stop: int


def top_level_fields(text: str) -> list[FieldSpan]:
    """Every top-level field of a pbtxt text, in order (comments and strings are skipped as tokens)."""
    sig = [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(text)
           if not m.group().isspace() and not m.group().startswith("#")]
    out: list[FieldSpan] = []
    i = 0
    while i < len(sig):
        start, _, name = sig[i]
        if not re.fullmatch(r"[A-Za-z_][\w.]*", name):
            i += 1  # not a field name: stray token, skip it
            continue
        j = i + 1
        if j < len(sig) and sig[j][2] == ":":
            j += 1
        if j >= len(sig):
            break
        if sig[j][2] in _OPEN:
            depth, k = 0, j
            while k < len(sig):
                tok = sig[k][2]
                depth += tok in _OPEN and len(tok) == 1
                depth -= tok in _CLOSE and len(tok) == 1
                if depth == 0:
                    break
                k += 1
            k = min(k, len(sig) - 1)
        else:
            k = j
            while k + 1 < len(sig) and sig[k][2][:1] in "\"'" and sig[k + 1][2][:1] in "\"'":
                k += 1  # adjacent string literals concatenate
        end = sig[k][1]
        stop = sig[k + 1][1] if k + 1 < len(sig) and sig[k + 1][2] in (",", ";") else end
        out.append(FieldSpan(name, start, end, stop))
        i = k + 1 + (stop != end)
    return out


def whole_lines(text: str, start: int, stop: int) -> tuple[int, int]:
    """(start, stop) widened to whole lines where nothing else stands on them."""
    line_start = text.rfind("\n", 0, start) + 1
    if text[line_start:start].strip() == "":
        start = line_start
    nl = text.find("\n", stop)
    if text[stop:nl if nl >= 0 else len(text)].strip() == "":
        stop = nl + 1 if nl >= 0 else len(text)
    return start, stop


HEADER_FIELDS = ("name", "platform", "backend", "max_batch_size")


def splice(text: str, names: tuple[str, ...], block: str, *, lines: bool = False,
           after: tuple[str, ...] = ()) -> str:
    """`text` with its top-level fields named in `names` replaced by `block` (at the first one's place; the
    others removed). `lines` replaces the lines those fields stand on (then `block` ends with a newline).
    Without such a field, `block` goes on a line after the last top-level field named in `after`, else at the end.
    Callers check the result by parsing it: this edits text, it does not know the schema."""
    spans = [f for f in top_level_fields(text) if f.name in names]
    if spans:
        pieces, last = [], 0
        for index, f in enumerate(spans):
            s, e = whole_lines(text, f.start, f.stop) if lines else (f.start, f.end)
            pieces.append(text[last:s])
            if index == 0:
                pieces.append(block)
            last = e
        return "".join(pieces) + text[last:]
    line = block if block.endswith("\n") else block + "\n"
    heads = [f.end for f in top_level_fields(text) if f.name in after]
    at = text.find("\n", max(heads)) if heads else -1
    if at < 0:
        return text + ("" if text.endswith("\n") or not text else "\n") + line
    return text[:at + 1] + line + text[at + 1:]


def one_line(message: Any) -> str:
    """A protobuf message's fields on one line, as `{ ... }` (the value of a repeated message field)."""
    from google.protobuf import text_format

    return "{ " + text_format.MessageToString(message, as_utf8=True, as_one_line=True) + " }"


def _line_indent(text: str, offset: int) -> str:
    start = text.rfind("\n", 0, offset) + 1
    line = text[start:offset]
    return line[:len(line) - len(line.lstrip())]


def add_message(text: str, name: str, value: str, within: Node | None = None) -> str:
    """`text` with one more occurrence of the repeated message field `name` (`value` from `one_line`), after its
    last occurrence among the top-level fields or `within`'s: inside its `[ ... ]` list where it is written as
    one, else on a line of its own. Where the field is absent it goes last (inside `within`). Callers parse the
    result."""
    level = within.children if within is not None else tree(text)
    found = [n for n in level if n.name == name]
    if found:
        last = found[-1]
        at = last.end + 1
        indent = _line_indent(text, last.start)
        if text[last.start] in "{<":  # an element of `name [ {...}, {...} ]`
            return text[:at] + ",\n" + indent + value + text[at:]
        return text[:at] + "\n" + indent + f"{name} {value}" + text[at:]
    if within is not None:
        indent = _line_indent(text, within.start) + "  "
        at = text.rfind("\n", 0, within.end) + 1 if text[:within.end].rstrip(" ").endswith("\n") else within.end
        return text[:at] + indent + f"{name} {value}\n" + text[at:]
    return text + ("" if text.endswith("\n") or not text else "\n") + f"{name} [\n  {value}\n]\n"


def set_parameter(text: str, key: str, value: str) -> str:
    """`text` with the top-level `parameters` entry `key` set to the string `value`: replaced where it stands,
    else added after the last entry. Callers parse the result."""
    entry = "{ key: " + _quote(key) + " value { string_value: " + _quote(value) + " } }"
    for node in tree(text):
        if node.name == "parameters" and node.child_value("key") == key:
            start = node.start if text[node.start] in "{<" else text.find("{", node.start)
            return text[:start] + entry + text[node.end + 1:]
    return add_message(text, "parameters", entry)


def _quote(value: str) -> str:
    from google.protobuf import text_encoding

    return '"' + text_encoding.CEscape(value, as_utf8=True) + '"'


# ---- positions: where a field of a pbtxt text stands, from the same tokens the span editor reads ---------------

@dataclass
class Node:
    """One field occurrence: its name token's offset, the offsets of its scalar values (several for a list
    value `[4, 8]`), the string values, and the fields inside a message value."""

    name: str
    start: int
    end: int = 0
    values: list[tuple[int, str]] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)

    def child_value(self, name: str) -> str | None:
        """The unquoted value of this message's first scalar field `name`."""
        for c in self.children:
            if c.name == name and c.values:
                return c.values[0][1].strip("\"'")
        return None


def tree(text: str) -> list[Node]:
    """The fields of a pbtxt text as nodes with offsets (tolerant: stray tokens are skipped)."""
    sig = [(m.start(), m.group()) for m in _TOKEN.finditer(text)
           if not m.group().isspace() and not m.group().startswith("#")]
    nodes, _ = _fields(sig, 0, "")
    return nodes


def _fields(sig: list[tuple[int, str]], i: int, closer: str) -> tuple[list[Node], int]:
    out: list[Node] = []
    while i < len(sig):
        start, tok = sig[i]
        if closer and tok == closer:
            return out, i + 1
        if not re.fullmatch(r"[A-Za-z_][\w.]*", tok):
            i += 1
            continue
        node = Node(tok, start)
        out.append(node)
        i += 1
        if i < len(sig) and sig[i][1] == ":":
            i += 1
        if i >= len(sig):
            break
        tok = sig[i][1]
        if tok in ("{", "<"):
            node.children, i = _fields(sig, i + 1, "}" if tok == "{" else ">")
        elif tok == "[":
            i += 1
            while i < len(sig) and sig[i][1] != "]":
                if sig[i][1] in ("{", "<"):  # a list of messages: each element is an occurrence of the field
                    if out and out[-1] is node:
                        out.pop()
                    child = Node(node.name, sig[i][0])
                    child.children, i = _fields(sig, i + 1, "}" if sig[i][1] == "{" else ">")
                    child.end = sig[i - 1][0]
                    out.append(child)
                    continue
                if sig[i][1] != ",":
                    node.values.append(sig[i])
                i += 1
            i += 1
        else:
            node.values.append(sig[i])
            i += 1
        node.end = sig[i - 1][0] if i - 1 < len(sig) else start
        if i < len(sig) and sig[i][1] in (",", ";"):
            i += 1
    return out, i


_OBJECT = re.compile(r"(?P<path>[a-z_][\w.]*)(?:\[(?P<index>\d+)\])?(?: '(?P<name>[^']*)')?$")


def locate(text: str, obj: str | None, needle: str | None = None, index: int = 0) -> int | None:
    """The 1-based line a finding about `obj` points at, from the parsed positions: `obj` is a dotted field path
    (`dynamic_batching.preferred_batch_size`), optionally with a repeated field's index
    (`ensemble_scheduling.step[2]`) or a message's `name` (`input 'INPUT0'`, `parameters 'gpt_model_path'`
    matches a `key`); `index` picks among repeated occurrences or list values of the last field; `needle`, a field
    name or a quoted value inside the located field, narrows it further. None when nothing matches."""
    nodes = tree(text)
    found = _find(nodes, obj, index) if obj else None
    if found is None:
        return _needle(text, nodes, needle, None)
    node, offset = found
    inner = _needle(text, node.children, needle, node) if needle and node.children else None
    return inner or _line(text, offset)


def _find(nodes: list[Node], obj: str, index: int) -> tuple[Node, int] | None:
    m = _OBJECT.match(obj.strip())
    if not m:
        return None
    parts = m["path"].split(".")
    level, node = nodes, None
    for depth, part in enumerate(parts):
        matches = [n for n in level if n.name == part]
        last = depth == len(parts) - 1
        if not matches:
            return None
        if last and m["name"] is not None:
            key = "key" if part == "parameters" else "name"
            matches = [n for n in matches if n.child_value(key) == m["name"]] or matches[:0]
            if not matches:
                return None
        if last and m["index"] is not None:
            position = int(m["index"])
            if position >= len(matches):
                return None
            node = matches[position]
        elif last:
            values = [(n, off) for n in matches for off, _ in n.values] or [(n, n.start) for n in matches]
            chosen = values[min(index, len(values) - 1)]
            return chosen
        else:
            node = matches[0]
        level = node.children
    return (node, node.start) if node else None


def _needle(text: str, nodes: list[Node], needle: str | None, within: Node | None) -> int | None:
    """A field named `needle`, or a value equal to it (quoted needles are values), among `nodes`, depth first."""
    if not needle:
        return None
    want = needle.strip("\"'")
    for n in nodes:
        if n.name == want and not needle.startswith(("'", '"')):
            return _line(text, n.start)
        for off, value in n.values:
            if value.strip("\"'") == want:
                return _line(text, off)
        inner = _needle(text, n.children, needle, n)
        if inner:
            return inner
    return None


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1
