"""Put a tuned setting into a config.pbtxt: through Triton's schema, changing only the top-level
`dynamic_batching` and `instance_group` fields (and `max_batch_size` when tuned) and keeping every other line
(comments included)."""

from __future__ import annotations

import re
from typing import Any

from kubectl_triton.formats import pbtxt

FIELDS = ("dynamic_batching", "instance_group")
_MAX_BATCH = re.compile(r"(?m)^(\s*max_batch_size\s*:?\s*)\d+")


def updated(config: Any, instance_count: int, dynamic_batching: dict | None,
            max_batch_size: int | None = None) -> Any:
    """A copy of the ModelConfig message with the setting applied (other dynamic_batching fields kept)."""
    out = type(config)()
    out.CopyFrom(config)
    if max_batch_size is not None:
        out.max_batch_size = max_batch_size
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


def edit(text: str, source: str, instance_count: int, dynamic_batching: dict | None, *,
         max_batch_size: int | None = None) -> str:
    """The new config.pbtxt text (max_batch_size changed too when given). Raises PbtxtError when `text` does not
    parse."""
    from google.protobuf import text_format

    before = pbtxt.parse(text, source)
    after = updated(before, instance_count, dynamic_batching, max_batch_size)
    if after == before:
        return text
    if after.max_batch_size != before.max_batch_size:
        text, n = _MAX_BATCH.subn(lambda m: f"{m.group(1)}{after.max_batch_size}", text, count=1)
        if n == 0:
            text = f"max_batch_size: {after.max_batch_size}\n" + text
    part = type(after)()
    if after.HasField("dynamic_batching"):
        part.dynamic_batching.CopyFrom(after.dynamic_batching)
    part.instance_group.extend(after.instance_group)
    block = text_format.MessageToString(part, as_utf8=True)
    new = pbtxt.splice(text, FIELDS, block, lines=True)
    try:
        if pbtxt.parse(new, source) == after:
            return new
    except pbtxt.PbtxtError:
        pass
    return pbtxt.dumps(after)  # the splice failed to reproduce the message: write it whole
