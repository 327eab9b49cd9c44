"""Round-trip edits of user-maintained YAML (kustomization.yaml files) with ruamel.yaml: comments, key
order, indentation and quoting of everything not edited survive byte for byte."""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import Any

from kubectl_triton.errors import InputError


def _yaml(text: str, source: str) -> tuple[Any, Any]:
    """A configured round-trip YAML instance and the loaded document of `text`."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.util import load_yaml_guess_indent

    try:
        _, indent, block_seq_indent = load_yaml_guess_indent(text)
    except YAMLError as err:
        raise InputError(f"{source}: invalid YAML: {str(err).splitlines()[0]}") from None
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap long lines
    sequence = indent or 2
    offset = block_seq_indent if block_seq_indent is not None else 0
    if indent is None and block_seq_indent is None:  # nothing nested to copy: the style of the Flux examples
        sequence, offset = 4, 2
    yaml.indent(mapping=max(2, sequence - offset) if offset else sequence, sequence=sequence, offset=offset)
    try:
        doc = yaml.load(text)
    except YAMLError as err:
        raise InputError(f"{source}: invalid YAML: {str(err).splitlines()[0]}") from None
    if doc is None:
        from ruamel.yaml.comments import CommentedMap

        doc = CommentedMap()
    if not isinstance(doc, dict):
        raise InputError(f"{source}: expected a mapping at the top level (a kustomization)")
    return yaml, doc


def _dump(yaml: Any, doc: Any) -> str:
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def _split_preamble(text: str) -> tuple[str, str]:
    """(lines up to and including a leading `---`, the rest): comments and directives before the document
    start marker, which the round-trip dumper would drop, are kept verbatim instead."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped == "---":
            return "".join(lines[:i + 1]), "".join(lines[i + 1:])
        if stripped and not stripped.startswith(("#", "%")):
            return "", text
    if text and not text.endswith("\n"):  # comments only: keep them all, the document follows
        text += "\n"
    return text, ""


def edit_resources(text: str, *, add: Iterable[str] = (), remove: Iterable[str] = (),
                   source: str = "kustomization.yaml") -> str:
    """`text` with `add` entries appended to `resources:` (those already listed are skipped) and `remove`
    entries dropped. Returns `text` itself when nothing changes; everything else is kept as written
    (a leading `---` and what precedes it, CRLF line ends)."""
    crlf = "\r\n" in text
    preamble, body = _split_preamble(text.replace("\r\n", "\n") if crlf else text)
    add, remove = list(add), list(remove)
    edited = _edit_resources(body, add=add, remove=remove, source=source)
    if edited is not body:
        by_lines = _edit_lines(body, edited, add, remove, source)
        if by_lines is not None:
            edited = by_lines
    if edited is body:
        return text
    out = preamble + edited
    return out.replace("\n", "\r\n") if crlf else out


_PLAIN = re.compile(r"^[A-Za-z0-9_./-]+$")
_ITEM = re.compile(r"^(\s*)- ")


def _item_value(line: str) -> str:
    """The scalar of a one-line block sequence item (`- x`, `- "x"  # note`)."""
    value = _ITEM.sub("", line, count=1).split(" #", 1)[0].strip()
    return value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value


def _edit_lines(body: str, edited: str, add: list[str], remove: list[str], source: str) -> str | None:
    """The same edit as `edited`, made on `body`'s lines: items of a block-style top-level `resources:` list are
    deleted and appended after its last item in the list's own indentation, so no other line changes. None
    when the list is not of that shape (then the round-trip dump stands)."""
    lines = body.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if re.match(r"^resources:\s*(#.*)?$", ln.rstrip("\r\n"))), None)
    if start is None:
        return _new_list(body, edited, add, remove, source)
    last, indent, items = None, None, []
    for i in range(start + 1, len(lines)):
        text = lines[i].rstrip("\r\n")
        m = _ITEM.match(text)
        if m and (indent is None or m.group(1) == indent):
            last, indent = i, m.group(1)
            items.append(i)
        elif not text.strip() or text.lstrip().startswith("#"):
            continue
        elif last is not None and len(text) - len(text.lstrip()) > len(indent or ""):
            return None  # a multi-line item: leave it to the round trip
        else:
            break
    if last is None:
        return None
    present = resources_of(body, source)
    new = [a for a in dict.fromkeys(add) if a not in present and a not in remove]
    if not all(_PLAIN.match(a) for a in new):
        return None
    if not lines[last].endswith("\n"):
        lines[last] += "\n"
    lines[last + 1:last + 1] = [f"{indent}- {a}\n" for a in new]
    for i in reversed(items):
        if _item_value(lines[i].rstrip("\r\n")) in remove:
            del lines[i]
    out = "".join(lines)
    return out if resources_of(out, source) == resources_of(edited, source) else None


def _new_list(body: str, edited: str, add: list[str], remove: list[str], source: str) -> str | None:
    """A `resources:` list the document lacks, appended after its last line in the file's own sequence
    indentation, so no other line changes. None when that would not give what the round trip gives."""
    from ruamel.yaml.util import load_yaml_guess_indent

    new = [a for a in dict.fromkeys(add) if a not in remove]
    if not new or not all(_PLAIN.match(a) for a in new) or re.match(r"^\s*\{", body.split("\n#", 1)[0].strip()):
        return None
    _, _, offset = load_yaml_guess_indent(body)
    out = body if not body or body.endswith("\n") else body + "\n"
    out += "resources:\n" + "".join(f"{' ' * (offset or 0)}- {a}\n" for a in new)
    try:
        _, want = _yaml(edited, source)
        _, got = _yaml(out, source)
    except InputError:
        return None
    return out if got == want else None


def _edit_resources(text: str, *, add: Iterable[str], remove: Iterable[str], source: str) -> str:
    add, remove = [a for a in add], set(remove)
    yaml, doc = _yaml(text, source)
    resources = doc.get("resources")
    if resources is None:
        if not add:
            return text
        from ruamel.yaml.comments import CommentedSeq

        resources = CommentedSeq()
        doc["resources"] = resources
    if not isinstance(resources, list):
        raise InputError(f"{source}: 'resources' is not a list")
    present = [str(r) for r in resources]
    missing = [a for a in dict.fromkeys(add) if a not in present]
    drop = [i for i, r in enumerate(present) if r in remove]
    if not missing and not drop:
        return text
    for i in reversed(drop):
        del resources[i]
    for entry in missing:
        _append(resources, entry)
    return _dump(yaml, doc)


def _append(seq: Any, entry: str) -> None:
    """Append to a block sequence; full-line comments that followed the old last item stay below the list."""
    last = len(seq) - 1
    seq.append(entry)
    if last < 0 or getattr(seq.fa, "flow_style", lambda: False)():
        return
    slot = seq.ca.items.get(last)
    token = slot[0] if slot else None
    value = getattr(token, "value", None)
    if token is None or not value or "\n" not in value.rstrip("\n"):
        return
    eol, rest = value.split("\n", 1)
    from ruamel.yaml.tokens import CommentToken

    token.value = eol + "\n"
    seq.ca.items[last + 1] = [CommentToken("\n" + rest, token.start_mark, None), None, None, None]


def resources_of(text: str, source: str = "kustomization.yaml") -> list[str]:
    """The `resources:` entries of a kustomization text."""
    _, doc = _yaml(text, source)
    return [str(r) for r in doc.get("resources") or []]


def add_generator_file(text: str, generator: str, entry: str, source: str = "kustomization.yaml") -> str:
    """`text` with `entry` (KEY=PATH) appended to the `files` of its configMapGenerator named `generator`
    (unchanged when already there); round trip, so everything else stays as written."""
    preamble, body = _split_preamble(text)
    yaml, doc = _yaml(body, source)
    generators = doc.get("configMapGenerator")
    found = next((g for g in generators or [] if isinstance(g, dict) and g.get("name") == generator), None)
    if found is None:
        raise InputError(f"{source}: no configMapGenerator named {generator!r}")
    files = found.get("files")
    if files is None:
        from ruamel.yaml.comments import CommentedSeq

        files = found["files"] = CommentedSeq()
    if entry in [str(f) for f in files]:
        return text
    files.append(entry)
    return preamble + _dump(yaml, doc)


def set_key(text: str, key: str, value: Any, source: str = "model.yaml") -> str:
    """`text` with the top-level `key` set to `value` (a mapping or scalar); round trip, so everything else stays
    as written."""
    preamble, body = _split_preamble(text)
    yaml, doc = _yaml(body, source)
    old = doc.get(key)
    if old == value:
        return text
    if isinstance(old, dict) and isinstance(value, dict) and old and value and hasattr(old, "ca") \
            and hasattr(value, "ca"):
        # Comment lines after the old mapping belong to the key that follows it: they stay.
        trailing = old.ca.items.get(list(old)[-1])
        if trailing:
            value.ca.items[list(value)[-1]] = trailing
    doc[key] = value
    return preamble + _dump(yaml, doc)


def set_in(text: str, path: tuple[str, ...], value: Any, source: str = "model.yaml") -> str:
    """`text` with the mapping entry at `path` (e.g. ("engine", "lora")) set to `value`; every mapping above it must
    exist. Round trip, so everything else stays as written."""
    preamble, body = _split_preamble(text)
    yaml, doc = _yaml(body, source)
    parent = doc
    for key in path[:-1]:
        parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            raise InputError(f"{source}: no {'.'.join(path[:-1])} mapping to set {path[-1]} in")
    if parent.get(path[-1]) == value:
        return text
    parent[path[-1]] = value
    return preamble + _dump(yaml, doc)


def add_patch(text: str, path: str, kind: str, source: str = "kustomization.yaml") -> str:
    """`text` with a `patches` entry for the file `path` targeting `kind` (unchanged when one names the file)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    preamble, body = _split_preamble(text)
    yaml, doc = _yaml(body, source)
    patches = doc.get("patches")
    if patches is None:
        patches = doc["patches"] = CommentedSeq()
    if not isinstance(patches, list):
        raise InputError(f"{source}: patches must be a list")
    if any(isinstance(p, dict) and p.get("path") == path for p in patches):
        return text
    entry = CommentedMap([("path", path), ("target", CommentedMap([("kind", kind)]))])
    patches.append(entry)
    return preamble + _dump(yaml, doc)
