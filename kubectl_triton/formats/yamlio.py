"""Reading YAML safely (fast, PyYAML's C loader when present) with errors that name the file."""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from kubectl_triton.errors import InputError

# YAML read as kustomize (kyaml, go-yaml v3) and the API server (sigs.k8s.io/yaml) read it, where PyYAML's safe
# loader refuses what they accept:
# - a plain `=` is the string "=" (PyYAML resolves it to YAML 1.1's value tag and has no constructor for it; real
#   CRDs and kube-prometheus rules carry it, as `matchType: =`);
# - a tag no constructor knows (`!env_var X`, `!secret y`, `!custom {a: b}`) is dropped: the node is read as if
#   untagged, a scalar as its text (`!foo 12` is the string "12", as `kubectl kustomize` renders it), a mapping or
#   a sequence as one;
# - an anchor defined again (`&key one` ... `&key two`) redefines it: later aliases name the latest node
#   (PyYAML's composer raises "found duplicate anchor"; go-yaml v3 accepts it).
# Real syntax errors (an unclosed flow, a bad indent, an undefined alias) stay errors with their file:line.


def _untagged(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_yaml_map(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_yaml_seq(node)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


class _PyLoader(yaml.SafeLoader):
    """The pure-Python safe loader, whose composer lets an anchor be defined again (used for the streams that have
    one: the C composer cannot be told to)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if not self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor
            if anchor is not None:
                self.anchors.pop(anchor, None)  # a redefinition replaces the earlier node for later aliases
        return super().compose_node(parent, index)


class _Loader(getattr(yaml, "CSafeLoader", _PyLoader)):  # type: ignore[misc]
    """The safe loader (PyYAML's C one when present) with kustomize's reading of `=` and of unknown tags."""


for _loader in {_Loader, _PyLoader}:
    _loader.add_constructor("tag:yaml.org,2002:value", yaml.SafeLoader.construct_yaml_str)  # type: ignore[type-var]
    _loader.add_multi_constructor(None, _untagged)  # type: ignore[arg-type]


def _duplicate_anchor(err: yaml.YAMLError) -> bool:
    return isinstance(err, yaml.composer.ComposerError) and "duplicate anchor" in str(err.context or "")


def _load_all(text: str) -> list[Any]:
    try:
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as err:
        if _Loader is _PyLoader or not _duplicate_anchor(err):
            raise
    return [d for d in yaml.load_all(text, Loader=_PyLoader) if d is not None]


def load_data(text: str, source: str = "<data>") -> Any:
    """The first document of a YAML text (None when it has none): for the package's own data files."""
    docs = loads_all(text, source)
    return docs[0] if docs else None


def loads_all(text: str, source: str = "<string>") -> list[Any]:
    """All documents of a YAML stream, empty documents dropped."""
    try:
        return _load_all(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InputError(f"{source}{where}: invalid YAML: {problem}") from None
    except RecursionError:
        raise InputError(f"{source}: invalid YAML: nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as err:  # a value its explicit tag cannot take (`!!int x`)
        raise InputError(f"{source}: invalid YAML: {err}") from None


_PARSED: dict[bytes, list[Any] | str] = {}  # content digest -> documents, or the error after its source name
_USED: set[bytes] = set()  # digests asked for since the last parsed_since_prime


def loads_all_shared(text: str, source: str = "<string>") -> list[Any]:
    """loads_all, memoised by content digest for the process: a file read again (by several checks of one
    validate run, under any name) is parsed once. The documents are shared: callers must not modify them."""
    key = hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=16).digest()
    found = _PARSED.get(key)
    if found is None:
        try:
            found = loads_all(text, source)
        except InputError as err:
            found = err.message.removeprefix(source)
        if len(_PARSED) > 20000:
            _PARSED.clear()
            _USED.clear()
        _PARSED[key] = found
    _USED.add(key)
    if isinstance(found, str):
        raise InputError(f"{source}{found}") from None
    return found


_PRIMED: set[bytes] = set()  # digests the last prime_parsed gave


def prime_parsed(entries: dict[str, Any]) -> None:
    """Add parse results kept from an earlier run (hex content digest -> documents) to the memo."""
    _PRIMED.clear()
    for digest, docs in entries.items():
        try:
            key = bytes.fromhex(digest)
        except ValueError:
            continue
        if isinstance(docs, list):
            _PARSED.setdefault(key, docs)
            _PRIMED.add(key)


def parsed_since_prime() -> dict[str, Any] | None:
    """The documents of every stream parsed or looked up since the memo was primed, as `prime_parsed` takes
    them, leaving out any that JSON would not give back exactly (dates, non-string keys, NaN). None when they
    are exactly the streams it was primed with (nothing new to keep)."""
    if _USED == _PRIMED:
        _USED.clear()
        return None
    out = {}
    for key in _USED:
        docs = _PARSED.get(key)
        if isinstance(docs, list):
            try:
                text = json.dumps(docs)
            except (TypeError, ValueError):
                continue
            if json.loads(text) == docs:
                out[key.hex()] = docs
    _USED.clear()
    return out


_FILES: contextvars.ContextVar[dict[str, list[Any] | InputError] | None] = contextvars.ContextVar(
    "yaml_files", default=None)


@contextlib.contextmanager
def files_unchanged() -> Iterator[None]:
    """Within it, load_all_shared reads each file once (the files must not change meanwhile)."""
    token = _FILES.set({})
    try:
        yield
    finally:
        _FILES.reset(token)


def load_all_shared(path: Path) -> list[Any]:
    """load_all through loads_all_shared (documents shared: do not modify them)."""
    name = str(path)
    files = _FILES.get()
    found = files.get(name) if files is not None else None
    if found is None:
        try:
            text = path.read_text(encoding="utf-8")
            found = loads_all_shared(text, name)
        except (OSError, UnicodeDecodeError) as err:
            found = InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}")
        except InputError as err:
            found = err
        if files is not None:
            files[name] = found
    if isinstance(found, InputError):
        raise InputError(found.message, hint=found.hint) from None
    return found


def load_all(path: Path) -> list[Any]:
    """All documents of a YAML file; unreadable or malformed files raise InputError naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    return loads_all(text, str(path))


def dump_all(docs: list[Any]) -> str:
    """Documents as a YAML stream in kubectl's style (block style, keys in given order)."""
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)


def read_json(path: Path) -> Any:
    """A JSON file; unreadable or malformed files raise InputError naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror or err}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: invalid JSON: {err}") from None
    except RecursionError:
        raise InputError(f"{path}: invalid JSON: nested too deeply") from None
