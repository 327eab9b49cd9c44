"""Machine-readable documents: one dumper for `-o json` and `-o yaml`, so both carry the same data."""

from __future__ import annotations

import io
import json
from typing import Any


def dumps(doc: Any, fmt: str) -> str:
    """`doc` (plain dicts, lists, scalars) as indented JSON or block-style YAML, without a trailing newline."""
    if fmt == "json":
        return json.dumps(doc, indent=2, ensure_ascii=False)
    if fmt == "yaml":
        from ruamel.yaml import YAML

        yaml = YAML(typ="safe", pure=True)
        yaml.default_flow_style = False
        yaml.allow_unicode = True
        yaml.width = 4096
        buf = io.StringIO()
        yaml.dump(json.loads(json.dumps(doc)), buf)  # through JSON: tuples, dataclass dicts -> plain types
        return buf.getvalue().rstrip("\n")
    raise ValueError(f"not a document format: {fmt}")
