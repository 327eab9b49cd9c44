"""The writers under the plan commands: YAML dumped from data (formats/yamldump) reads back as the same data in
both YAML dialects the files meet (PyYAML's 1.1, ruamel's 1.2), and the one pbtxt span editor
(formats/pbtxt.splice) changes only the fields it is asked to, whatever the comments and strings hold."""

from __future__ import annotations

import pytest
import yaml as pyyaml
from ruamel.yaml import YAML

from kubectl_triton.formats import pbtxt
from kubectl_triton.formats import yamldump as Y

TRICKY = ["no", "on", "y", "null", "~", "1.5", "0o17", "0x1F", "017", "1_000", "2024-01-01", "#tok", "a: b", "- x",
          "/ck/{a}", "s3://b/p:q", "true", "", " lead", "trail ", "1e3", ".inf", "@x", "`x", "x # y", "[a]", "'q'"]


@pytest.mark.parametrize("value", TRICKY)
def test_strings_read_back_as_the_same_string_in_yaml_1_1_and_1_2(value):
    text = Y.dumps(Y.mapping(key=value, items=Y.flow([value, "plain"])))
    assert pyyaml.safe_load(text) == {"key": value, "items": [value, "plain"]}, text
    assert YAML(typ="safe").load(text) == {"key": value, "items": [value, "plain"]}, text
    assert "'" not in text.replace("'q'", "") or value == "'q'"  # quoted values use double quotes


def test_comments_literal_blocks_and_layout():
    patches = Y.seq([Y.mapping(target=Y.mapping(kind="Job"), patch=Y.literal(Y.dumps(Y.seq([Y.mapping(op="add")]))))])
    Y.comment(patches, 0, "why", 2)
    text = Y.dumps(Y.mapping(kind="K", patches=patches), "head\nline two")
    assert text == ("# head\n# line two\nkind: K\npatches:\n  # why\n  - target:\n      kind: Job\n"
                    "    patch: |-\n      - op: add\n")
    assert Y.mapping(a=1, b=None) == {"a": 1}


CONFIG = '''# head { not a brace
name: "m" # name: "x" {
max_batch_size: 8
parameters { key: "k" value: { string_value: "a } b { version_policy" } }
version_policy: { latest: { num_versions: 2 } };
instance_group [ { count: 1, kind: KIND_GPU } ]
dynamic_batching { }  # trailing
'''


def test_splice_replaces_only_the_named_top_level_fields():
    names = [f.name for f in pbtxt.top_level_fields(CONFIG)]
    assert names == ["name", "max_batch_size", "parameters", "version_policy", "instance_group", "dynamic_batching"]
    new = pbtxt.splice(CONFIG, ("version_policy",), "version_policy: { specific: { versions: [ 3 ] } }")
    before, after = pbtxt.parse(CONFIG), pbtxt.parse(new)
    assert list(after.version_policy.specific.versions) == [3]
    after.ClearField("version_policy")
    before.ClearField("version_policy")
    assert after == before
    assert new.replace("version_policy: { specific: { versions: [ 3 ] } }",
                       "version_policy: { latest: { num_versions: 2 } }") == CONFIG
    # whole lines: both fields go, the block takes the first one's line; the comment that shared the second
    # one's line stays; everything before is untouched
    block = "instance_group [ { count: 4 } ]\n"
    lines = pbtxt.splice(CONFIG, ("instance_group", "dynamic_batching"), block, lines=True)
    assert lines == CONFIG[:CONFIG.index("instance_group")] + block + "  # trailing\n"
    config = pbtxt.parse(lines)
    assert config.instance_group[0].count == 4 and not config.HasField("dynamic_batching")


def test_splice_inserts_after_the_header_fields_when_absent():
    text = 'name: "m"\nbackend: "python"\n# keep\ninput [ ]\n'
    new = pbtxt.splice(text, ("version_policy",), "version_policy: { all { } }", after=pbtxt.HEADER_FIELDS)
    assert new == 'name: "m"\nbackend: "python"\nversion_policy: { all { } }\n# keep\ninput [ ]\n'
    assert pbtxt.splice("", ("x",), "x: 1") == "x: 1\n"
