"""Machine-readable documents: one dumper for `-o json` and `-o yaml`, so both carry the same data."""

from __future__ import annotations

import functools
import json
import re
from typing import Any


def dumps(doc: Any, fmt: str) -> str:
    """`doc` (plain dicts, lists, scalars) as indented JSON or block-style YAML, without a trailing newline."""
    if fmt == "json":
        return json.dumps(doc, indent=2, ensure_ascii=False)
    if fmt == "yaml":
        import yaml

        plain = json.loads(json.dumps(doc))  # through JSON: tuples, dataclass dicts -> plain types
        return str(yaml.dump(plain, Dumper=_dumper(), sort_keys=False, default_flow_style=False,
                             allow_unicode=True, width=4096)).rstrip("\n")
    raise ValueError(f"not a document format: {fmt}")


# Plain scalars that YAML 1.2 (Go's yaml.v3, ruamel) reads as a number, boolean or null; PyYAML already quotes
# those that YAML 1.1 (itself, Go's yaml.v2) reads so, such as "no", "on" or "0777".
_NOT_A_STRING_1_2 = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|0o[0-7]+|0x[0-9a-fA-F]+"
                               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)|true|True|TRUE|false|False|FALSE"
                               r"|null|Null|NULL|~)$")


@functools.cache
def _dumper() -> Any:
    """PyYAML's safe dumper (block style, lists unindented under their key as kubectl writes them) that quotes
    every string a YAML 1.1 or 1.2 reader would take for another type."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "'" if _NOT_A_STRING_1_2.match(value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, string)
    return Dumper
