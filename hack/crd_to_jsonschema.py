#!/usr/bin/env python3
"""Convert one version of a CustomResourceDefinition's openAPIV3Schema into the strict JSON Schema that
kubectl_triton/formats/schemas.py validates rendered objects with (kubectl_triton/data/crds/<group>/<kind>_<v>.json).

    python hack/crd_to_jsonschema.py CRD.yaml VERSION > kubectl_triton/data/crds/GROUP/KIND_VERSION.json

Strict as datreeio/CRDs-catalog's schemas are: every object that lists its properties refuses others
(`additionalProperties: false`) unless it says `x-kubernetes-preserve-unknown-fields`; int-or-string fields take
either; `nullable` admits null. Descriptions and the other x-kubernetes-* annotations are dropped (they do not
validate); CEL rules (x-kubernetes-validations) cannot be expressed and are dropped too.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml


def strict(node: Any) -> Any:
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items() if k != "description" and not k.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable"):
        out.pop("nullable")
        if "type" in out:
            out["type"] = [out["type"], "null"]
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


def convert(crd: dict, version: str) -> dict:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema = strict(v["schema"]["openAPIV3Schema"])
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            schema.setdefault("properties", {})["apiVersion"] = {"type": "string", "enum": [f"{group}/{version}"]}
            schema["properties"]["kind"] = {"type": "string", "enum": [kind]}
            schema["properties"]["metadata"] = {"type": "object"}
            return schema
    raise SystemExit(f"no version {version} in {crd['metadata']['name']}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    json.dump(convert(docs[0], sys.argv[2]), sys.stdout, separators=(",", ":"), sort_keys=True)
    sys.stdout.write("\n")
