"""Writing YAML files from data with ruamel.yaml: the one dumper for every manifest the plugin writes.

Documents are ruamel's CommentedMap/CommentedSeq (key order kept), dumped in kubectl's block style with
2-space mappings and sequences indented under their key (`  - item`). Quoting is ruamel's decision (a value is
quoted exactly when it would not read back as the same string), in double quotes. `flow` marks a list or mapping
to be written on one line; `comment` puts full-line comments above a key or item; `literal` writes a `|-` block.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.emitter import Emitter
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.scalarstring import LiteralScalarString


class _DoubleQuoting(Emitter):
    """ruamel's emitter, writing double quotes where it would write single ones (JSON strings are YAML)."""

    def choose_scalar_style(self) -> Any:
        style = super().choose_scalar_style()
        if style == "" and self.flow_level and ":" in str(self.event.value):
            return '"'  # `[s3://b/p:q]`: ruamel's own reader refuses a ':' in a plain scalar inside flow style
        return '"' if style == "'" else style


_STR = "tag:yaml.org,2002:str"


class _StrictResolver(VersionedResolver):
    """Decides quoting by YAML 1.1 and 1.2 rules together (PyYAML reads 1.1, where `no`, `on`, `y` are booleans;
    Go's YAML readers read `0o17` as a number): a string either would read as something else is quoted. No
    `%YAML` directive is written."""

    _version: Any = (1, 2)

    @property
    def processing_version(self) -> Any:
        return self._version

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        tags = []
        for version in ((1, 1), (1, 2)):
            self._version = version
            tags.append(super().resolve(kind, value, implicit))
        self._version = (1, 2)
        return next((t for t in tags if t != _STR), tags[0])


class _NullRepresenter(RoundTripRepresenter):
    """Writes None as `null` (ruamel writes nothing after the colon), as kustomize's own patches read best."""


_NullRepresenter.add_representer(
    type(None), lambda representer, _value: representer.represent_scalar("tag:yaml.org,2002:null", "null"))


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.Emitter = _DoubleQuoting
    yaml.Resolver = _StrictResolver
    yaml.Representer = _NullRepresenter
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096  # never wrap
    return yaml


def mapping(pairs: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), /, **more: Any) -> CommentedMap:
    """An ordered mapping (None values are left out, so optional keys can be written inline)."""
    items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
    return CommentedMap((k, v) for k, v in [*items, *more.items()] if v is not None)


def seq(items: Iterable[Any] = ()) -> CommentedSeq:
    """A block sequence."""
    return CommentedSeq(items)


def flow(value: Any) -> Any:
    """`value` (a list or mapping) written on one line: `[a, b]`, `{k: v}`."""
    out = CommentedSeq(value) if isinstance(value, list | tuple) else mapping(value)
    out.fa.set_flow_style()
    return out


def literal(text: str) -> LiteralScalarString:
    """A multi-line string written as a `|-` block (no trailing newline)."""
    return LiteralScalarString(text.rstrip("\n"))


def comment(container: CommentedMap | CommentedSeq, key: Any, text: str, indent: int) -> None:
    """Full-line comments (one per line of `text`) above `key` of a mapping, or item `key` of a sequence,
    at column `indent`."""
    container.yaml_set_comment_before_after_key(key, before=text, indent=indent)


def dumps(doc: Any, header: str | None = None) -> str:
    """`doc` as YAML text; `header` becomes `# ` comment lines at the top."""
    if header:
        if not isinstance(doc, CommentedMap):
            doc = mapping(doc)
        doc.yaml_set_start_comment(header)
    out = io.StringIO()
    _yaml().dump(doc, out)
    text = out.getvalue()
    # A top-level sequence starts at column 0 (`- op: ...`), not at the offset nested sequences get.
    return textwrap.dedent(text) if isinstance(doc, list) else text
