"""Put a tuned setting into a config.pbtxt: through Triton's schema, changing only the top-level
`dynamic_batching` and `instance_group` fields and keeping every other line (comments included)."""

from __future__ import annotations

import re
from typing import Any

from kubectl_triton.formats import pbtxt

FIELDS = ("dynamic_batching", "instance_group")
_TOKEN = re.compile(r"""\s+|\#[^\n]*|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|[A-Za-z_][\w.]*|-?[\w.+-]+|.""")


def top_level_spans(text: str, names: tuple[str, ...] = FIELDS) -> list[tuple[int, int]]:
    """(start, end) of every top-level field named in `names`, whole lines where the field has them alone."""
    tokens = [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(text)]
    sig = [t for t in tokens if not t[2].isspace() and not t[2].startswith("#")]
    spans, depth, i = [], 0, 0
    while i < len(sig):
        start, end, tok = sig[i]
        if tok in "{[<" and len(tok) == 1:
            depth += 1
        elif tok in "}]>" and len(tok) == 1:
            depth -= 1
        elif depth == 0 and tok in names and (i == 0 or sig[i - 1][2] != ":"):
            j = i + 1
            if j < len(sig) and sig[j][2] == ":":
                j += 1
            if j < len(sig) and sig[j][2] in ("{", "[", "<"):
                level, k = 0, j
                while k < len(sig):
                    if sig[k][2] in ("{", "[", "<"):
                        level += 1
                    elif sig[k][2] in ("}", "]", ">"):
                        level -= 1
                        if level == 0:
                            break
                    k += 1
                stop = sig[k][1] if k < len(sig) else len(text)
                if k + 1 < len(sig) and sig[k + 1][2] in (",", ";"):
                    stop = sig[k + 1][1]
                spans.append(_whole_lines(text, start, stop))
                i = k + 1
                continue
        i += 1
    return spans


def _whole_lines(text: str, start: int, stop: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, start) + 1
    if text[line_start:start].strip() == "":
        start = line_start
    nl = text.find("\n", stop)
    rest = text[stop:nl if nl >= 0 else len(text)]
    if rest.strip() == "":
        stop = nl + 1 if nl >= 0 else len(text)
    return start, stop


def updated(config: Any, instance_count: int, dynamic_batching: dict | None) -> Any:
    """A copy of the ModelConfig message with the setting applied (other dynamic_batching fields kept)."""
    out = type(config)()
    out.CopyFrom(config)
    if dynamic_batching is None:
        out.ClearField("dynamic_batching")
    else:
        db = out.dynamic_batching
        del db.preferred_batch_size[:]
        db.preferred_batch_size.extend(int(x) for x in dynamic_batching.get("preferred_batch_size") or [])
        db.max_queue_delay_microseconds = int(dynamic_batching.get("max_queue_delay_microseconds") or 0)
    if len(out.instance_group) == 0:
        out.instance_group.add()
    for group in out.instance_group:
        group.count = instance_count
    return out


def edit(text: str, source: str, instance_count: int, dynamic_batching: dict | None) -> str:
    """The new config.pbtxt text. Raises PbtxtError when `text` does not parse."""
    from google.protobuf import text_format

    before = pbtxt.parse(text, source)
    after = updated(before, instance_count, dynamic_batching)
    if after == before:
        return text
    part = type(after)()
    if after.HasField("dynamic_batching"):
        part.dynamic_batching.CopyFrom(after.dynamic_batching)
    part.instance_group.extend(after.instance_group)
    block = text_format.MessageToString(part, as_utf8=True)
    spans = top_level_spans(text)
    if spans:
        pieces, last = [], 0
        for i, (s, e) in enumerate(spans):
            pieces.append(text[last:s])
            if i == 0:
                pieces.append(block)
            last = e
        pieces.append(text[last:])
        new = "".join(pieces)
    else:
        new = text + ("" if text.endswith("\n") or not text else "\n") + block
    try:
        if pbtxt.parse(new, source) == after:
            return new
    except pbtxt.PbtxtError:
        pass
    return pbtxt.dumps(after)  # the splice failed to reproduce the message: write it whole
