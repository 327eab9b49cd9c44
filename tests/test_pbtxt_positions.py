"""Finding lines come from the parsed position of the field, not from the first text that looks like it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_triton.checks.model.modelrepo import check_repository
from kubectl_triton.formats.pbtxt import locate

CONFIG = """\
# preferred_batch_size in a comment must not be matched
name: "m"
backend: "python"
max_batch_size: 8
input [
  { name: "A", data_type: TYPE_FP32, dims: [ 4 ] },
  {
    name: "B"
    data_type: TYPE_FP32
    dims: [ -1 ]
  }
]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 4 ] } ]
dynamic_batching {
  preferred_batch_size: 4
  preferred_batch_size: 64
}
sequence_batching {
  oldest {
    preferred_batch_size: [ 2, 32 ]
  }
}
parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }
"""


@pytest.mark.parametrize("obj,needle,index,line", [
    ("dynamic_batching.preferred_batch_size", None, 0, 15),
    ("dynamic_batching.preferred_batch_size", None, 1, 16),
    ("sequence_batching.oldest.preferred_batch_size", None, 1, 20),
    ("input 'B'", None, 0, 7),
    ("input 'B'", "dims", 0, 10),
    ("input[0]", None, 0, 6),
    ("parameters 'EXECUTION_ENV_PATH'", None, 0, 23),
    ("max_batch_size", None, 0, 4),
    ("no_such_field", None, 0, None),
    (None, '"OUT"', 0, 13),
])
def test_locate(obj, needle, index, line):
    assert locate(CONFIG, obj, needle, index) == line


def _model(root: Path, name: str, text: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.py").write_text("")
    (root / name / "config.pbtxt").write_text(text.replace('name: "m"', f'name: "{name}"'))


def test_preferred_batch_size_findings_point_at_their_own_lines(tmp_path: Path):
    dynamic = CONFIG[:CONFIG.index("sequence_batching")]
    sequence = CONFIG.replace(CONFIG[CONFIG.index("dynamic_batching"):CONFIG.index("sequence_batching")], "")
    _model(tmp_path, "dyn", dynamic)
    _model(tmp_path, "seq", sequence)
    found = {(f.model, f.code, f.line) for f in check_repository(tmp_path)}
    assert ("dyn", "DynamicBatching", 16) in found  # 64 > max_batch_size 8: the second entry, not the first
    assert ("seq", "SequenceBatching", 16) in found  # [2, 32]: 32 is the offending value, after dynamic's lines
