"""Schema validation of rendered objects: kubernetes-validate's strict schemas for built-in kinds, the
bundled strict JSON Schemas (datreeio/CRDs-catalog, MIT) for Flux, Prometheus Operator, KEDA and Gateway API, and
those converted from the projects' own CRDs (hack/crd_to_jsonschema.py, Apache-2.0, LICENSE and SOURCE.yaml beside
each) for LeaderWorkerSet (data/crds/leaderworkerset.x-k8s.io) and the Gateway API Inference Extension's
InferencePool (data/crds/inference.networking.k8s.io). A schema is found by apiVersion and kind:
data/crds/<group>/<kind>_<version>.json."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from kubectl_triton.datafiles import data_file

DEFAULT_KUBERNETES_VERSION = "1.32"


@dataclass(frozen=True)
class SchemaIssue:
    """One schema violation (or a missing schema) of one object."""

    object: str
    message: str
    missing_schema: bool = False


def object_id(obj: dict) -> str:
    """`Kind/namespace/name` (namespace omitted when unset), as messages name objects."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    ns = meta.get("namespace")
    return "/".join(str(p) for p in (obj.get("kind", "?"), ns, meta.get("name", "?")) if p not in (None, ""))


def _crd_file(api_version: str, kind: str) -> str | None:
    group, _, version = api_version.rpartition("/")
    if not group or "." not in group:
        return None
    return f"{group}/{kind.lower()}_{version}.json"


@cache
def _crd_validator(rel: str) -> Any:
    import jsonschema

    ref = data_file("crds", *rel.split("/"))
    if not ref.is_file():
        return None
    schema = json.loads(ref.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


@cache
def _builtin_validator(version: str, kind: str, api_version: str) -> Any:
    import jsonschema
    import kubernetes_validate.utils as kv
    from referencing import Registry, Resource

    bundled = sorted(kv.all_versions(), key=kv.major_minor)
    versions = [v for v in bundled if kv.major_minor(v) <= kv.major_minor(version)] or bundled[:1]  # the nearest
    schema_dir = f"v{versions[-1]}-local-strict"
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv.schema_contents(f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{group_version}.json",
                                    version)
    except FileNotFoundError:
        return None
    definitions = _definitions(schema_dir, version)
    registry = Resource.from_contents(schema) @ Registry()
    registry = definitions @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@cache
def _definitions(schema_dir: str, version: str) -> Any:
    import kubernetes_validate.utils as kv
    from referencing import Resource

    return Resource.from_contents(kv.schema_contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json",
                                                     version))


@cache
def served_elsewhere(version: str, kind: str, api_version: str) -> tuple[str, ...]:
    """The other versions of `api_version`'s group in which Kubernetes `version` serves the built-in `kind` (those
    of the nearest bundled schemas): a kind its group moved on from (policy/v1beta1 PodDisruptionBudget in 1.25+)."""
    wanted = _major_minor(version)
    bundled = _bundled_versions()
    if wanted is None or not bundled:
        return ()
    full = api_version.rpartition("/")[0]
    if "." in full and not full.endswith(".k8s.io"):  # a custom resource's group (built-in ones are *.k8s.io)
        return ()
    near = max((v for v in bundled if v <= wanted), default=bundled[0])
    group = full.split(".")[0]  # the short group kubernetes-validate names files by
    served = []
    for name in _schema_names(f"v{near[0]}.{near[1]}.0-local-strict"):
        rest = name.removesuffix(".json").removeprefix(f"{kind.lower()}-") if name.startswith(f"{kind.lower()}-") \
            else None
        if rest is None or not re.fullmatch(r"(?:[a-z0-9]+-)?v\d+(?:(?:alpha|beta)\d+)?", rest):
            continue
        file_group, _, file_version = rest.rpartition("-")
        if file_group == group:
            served.append(f"{full}/{file_version}" if full else file_version)
    return tuple(v for v in sorted(served) if v != api_version)


@cache
def _schema_names(folder: str = "") -> tuple[str, ...]:
    """The names in kubernetes-validate's schema folder (its sub-folder `folder`), found without importing it."""
    spec = importlib.util.find_spec("kubernetes_validate")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        with contextlib.suppress(OSError):
            return tuple(os.listdir(os.path.join(location, "kubernetes-json-schema", folder)))
    return ()


def supported_version(version: str) -> bool:
    """Whether kubernetes-validate bundles schemas for Kubernetes `version` (major.minor compared as numbers),
    told from its schema folders without importing it (that import is left to the first validation)."""
    wanted = _major_minor(version)
    bundled = _bundled_versions()
    return wanted is not None and bool(bundled) and min(bundled) <= wanted <= max(bundled)


def supported_range() -> str:
    """The bundled schema versions, as "1.25-1.37"."""
    bundled = _bundled_versions()
    return f"{bundled[0][0]}.{bundled[0][1]}-{bundled[-1][0]}.{bundled[-1][1]}" if bundled else "none"


def _major_minor(version: str) -> tuple[int, int] | None:
    found = re.match(r"^v?(\d+)\.(\d+)(?:$|\.)", version)
    return (int(found[1]), int(found[2])) if found else None


@cache
def _bundled_versions() -> list[tuple[int, int]]:
    return sorted({v for n in _schema_names() if (v := _major_minor(n.split("-", 1)[0])) is not None})


def sops_encrypted(obj: Any) -> bool:
    """Whether `obj` is a SOPS-encrypted file's object: a top-level `sops` mapping with the `mac` or `lastmodified`
    that sops writes. Flux's kustomize-controller (spec.decryption.provider: sops) decrypts it and drops that key
    before it applies the object."""
    meta = obj.get("sops") if isinstance(obj, dict) else None
    return isinstance(meta, dict) and ("mac" in meta or "lastmodified" in meta)


def _encrypted(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("ENC[") and value.endswith("]")


def validate_object(obj: Any, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> list[SchemaIssue]:
    """Every schema violation of one rendered object; unknown kinds give one `missing_schema` issue. A
    SOPS-encrypted object is judged as Flux applies it: without its `sops` key, and an encrypted value (`ENC[...]`,
    a string whatever the plain value's type) is not judged."""
    encrypted = sops_encrypted(obj)
    if encrypted:
        obj = {k: v for k, v in obj.items() if k != "sops"}
    if not isinstance(obj, dict) or not obj.get("apiVersion") or not obj.get("kind"):
        return [SchemaIssue(object_id(obj) if isinstance(obj, dict) else "?", "not a Kubernetes object "
                            "(apiVersion and kind are required)")]
    oid = object_id(obj)
    api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
    rel = _crd_file(api_version, kind)
    validator = _crd_validator(rel) if rel else None
    if validator is None:
        validator = _builtin_validator(kubernetes_version, kind, api_version)
    if validator is None:
        served = served_elsewhere(kubernetes_version, kind, api_version)
        if served:
            return [SchemaIssue(oid, f"{kind} {api_version} is not served by Kubernetes {kubernetes_version}, "
                                f"which serves {kind} as {', '.join(served)}: the API server refuses it (no matches "
                                f"for kind {kind} in version {api_version})")]
        return [SchemaIssue(oid, f"no schema for {kind} ({api_version}): not a built-in kind of Kubernetes "
                            f"{kubernetes_version} and not a bundled custom resource", missing_schema=True)]
    issues = []
    for err in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
        if encrypted and _encrypted(err.instance):
            continue
        where = ".".join(str(p) for p in err.absolute_path) or "(root)"
        issues.append(SchemaIssue(oid, f"{where}: {_short(err.message)}"))
    return issues


def _short(message: str, limit: int = 300) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 3] + "..."
