"""The repository's layout: confining paths to the repository (a name or symlink that leads outside it is
refused), and reading what a cluster provides from the layout file (kubectl-triton.yaml, `cluster:`)."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from kubectl_triton.datafiles import data_text
from kubectl_triton.errors import InputError


def confine(root: Path, rel: str | Path) -> Path:
    """`root / rel`, refusing absolute paths, `..` parts, and symlinks (anywhere along the path, the last
    part included) that resolve outside `root`. Returns the unresolved path inside `root`."""
    text = str(rel)
    parts = PurePosixPath(text.replace("\\", "/")).parts
    if not text or text.startswith(("/", "\\")) or ".." in parts or "\x00" in text:
        raise InputError(f"{text!r}: refusing a path outside the repository")
    real_root = root.resolve()
    path = root / text
    real = path.resolve()
    if real != real_root and real_root not in real.parents:
        raise InputError(f"{text}: resolves to {real}, outside the repository {real_root} (symlink escape)")
    return path


def inside(root: Path, path: Path) -> bool:
    """Does `path` (symlinks resolved) lie inside `root`?"""
    real_root, real = root.resolve(), path.resolve()
    return real == real_root or real_root in real.parents


# ---- the layout file's `cluster:` section (what a cluster provides before Flux applies the repository) ----------

LAYOUT_FILE = "kubectl-triton.yaml"
LAYOUT_SCHEMA = "kubectl-triton.schema.json"  # package data: the layout file's JSON Schema


@functools.cache
def layout_validator() -> Any:
    """The JSON Schema validator of the layout file (built once per process)."""
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(data_text(LAYOUT_SCHEMA)))


class LayoutError(InputError):
    """kubectl-triton.yaml cannot be used; `path` is repository-relative, `line` 1-based when known."""

    def __init__(self, path: str, line: int | None, problem: str) -> None:
        super().__init__(f"{path}{f':{line}' if line else ''}: {problem}")
        self.path, self.line, self.problem = path, line, problem


@dataclass(frozen=True)
class StorageClassInfo:
    """A StorageClass the cluster has: can it serve ReadWriteMany, is it the default, how it binds."""

    name: str
    rwx: bool = False
    default: bool = False
    binding_mode: str = "Immediate"


@dataclass(frozen=True)
class ExternalSecret:
    """A Secret created outside git (SOPS, external-secrets), and why."""

    name: str
    namespace: str
    reason: str


@dataclass(frozen=True)
class ClusterProvides:
    """What exists on a cluster before Flux applies anything of this repository."""

    namespaces: frozenset[str] = frozenset()
    crds: frozenset[str] = frozenset()
    storage_classes: tuple[StorageClassInfo, ...] = ()
    secrets: tuple[ExternalSecret, ...] = ()
    file: str | None = None  # the layout file it was read from, when there is one
    # who provides a namespace ("namespace", name) or CRD group ("crd", group) other than the layout file
    providers: tuple[tuple[tuple[str, str], str], ...] = ()

    def default_class(self) -> StorageClassInfo | None:
        return next((c for c in self.storage_classes if c.default), None)


def _node_line(node: Any, path: list[Any]) -> int | None:
    """The 1-based line of the YAML node at `path` (keys and list indexes), or of its nearest parent."""
    import yaml

    line = node.start_mark.line + 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            found = node.value[part]
        else:
            found = None
        if found is None:
            break
        node, line = found, found.start_mark.line + 1
    return line


def _load_layout(root: Path) -> tuple[Any, Any] | None:
    """kubectl-triton.yaml's document and YAML node tree, checked against its schema; None when absent. A
    malformed file raises LayoutError naming the repository-relative path and line."""
    import yaml

    path = root / LAYOUT_FILE
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        node = yaml.compose(text, Loader=loader)
        doc = yaml.load(text, Loader=loader)  # noqa: S506 (a safe loader)
    except (OSError, UnicodeDecodeError) as err:
        raise LayoutError(LAYOUT_FILE, None, f"cannot read: {getattr(err, 'strerror', None) or err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise LayoutError(LAYOUT_FILE, mark.line + 1 if mark else None,
                          f"invalid YAML: {getattr(err, 'problem', None) or err}") from None
    if doc is None:
        return None, node
    errors = sorted(layout_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        raise LayoutError(LAYOUT_FILE, _node_line(node, list(first.absolute_path)) if node is not None else None,
                          f"{where}: {first.message}")
    return doc, node


def read_cluster_provides(root: Path) -> ClusterProvides:
    """The `cluster.provides` section of `root`/kubectl-triton.yaml (empty when the file is absent).
    A malformed file raises LayoutError naming the repository-relative path and line."""
    loaded = _load_layout(root)
    if loaded is None:
        return ClusterProvides()
    doc, node = loaded
    if doc is None:
        return ClusterProvides(file=LAYOUT_FILE)
    provides = (doc.get("cluster") or {}).get("provides") or {}

    def names(items: list[Any] | None, key: str) -> frozenset[str]:
        return frozenset(i if isinstance(i, str) else i[key] for i in items or ())

    classes = tuple(StorageClassInfo(c["name"], bool(c.get("rwx", False)), bool(c.get("default", False)),
                                     c.get("volumeBindingMode", "Immediate"))
                    for c in provides.get("storageClasses") or ())
    defaults = [c.name for c in classes if c.default]
    if len(defaults) > 1:
        raise LayoutError(LAYOUT_FILE, _node_line(node, ["cluster", "provides", "storageClasses"]),
                          f"cluster.provides.storageClasses: {len(defaults)} default classes "
                          f"({', '.join(defaults)}); a cluster has at most one")
    return ClusterProvides(
        namespaces=names(provides.get("namespaces"), "name"), crds=names(provides.get("crds"), "group"),
        storage_classes=classes,
        secrets=tuple(ExternalSecret(s["name"], s["namespace"], s["reason"]) for s in provides.get("secrets") or ()),
        file=LAYOUT_FILE)


# ---- the layout file's `kubernetes:` section (each cluster's version and feature gates) -------------------------

@dataclass(frozen=True)
class KubernetesFacts:
    """A cluster's Kubernetes minor version (None: not declared) and the feature gates it sets."""

    version: str | None = None
    feature_gates: tuple[tuple[str, bool], ...] = ()

    def gate(self, name: str) -> bool | None:
        return dict(self.feature_gates).get(name)


@dataclass(frozen=True)
class KubernetesVersions:
    """`kubernetes:`: the version every cluster runs unless `clusters.<name>` says otherwise."""

    default: KubernetesFacts = KubernetesFacts()
    clusters: tuple[tuple[str, KubernetesFacts], ...] = ()

    def of(self, cluster: str) -> KubernetesFacts:
        own = dict(self.clusters).get(cluster)
        if own is None:
            return self.default
        gates = {**dict(self.default.feature_gates), **dict(own.feature_gates)}
        return KubernetesFacts(own.version or self.default.version, tuple(sorted(gates.items())))


def _facts(entry: dict[str, Any]) -> KubernetesFacts:
    gates = entry.get("featureGates") or {}
    return KubernetesFacts(entry.get("version"), tuple(sorted((str(k), bool(v)) for k, v in gates.items())))


def read_kubernetes(root: Path) -> KubernetesVersions:
    """kubectl-triton.yaml's `kubernetes:` (nothing declared when the file or section is absent); LayoutError for
    a malformed file."""
    loaded = _load_layout(root)
    doc = loaded[0] if loaded is not None else None
    section = (doc or {}).get("kubernetes") or {}
    clusters = tuple(sorted((name, _facts(entry or {})) for name, entry in (section.get("clusters") or {}).items()))
    return KubernetesVersions(_facts(section), clusters)


# ---- the layout file's `nodeCache:` section (the node-local cache of model weights, docs/node-cache.md) ----------

NODE_CACHE_LABEL = "triton.kubectl.io/node-cache"  # the default node selector of the cache's local volumes
_BYTE_UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
               "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def byte_quantity(value: Any) -> int | None:
    """A Kubernetes storage quantity (500Gi, 1.5Ti, 40G, or a byte count) in bytes, rounded up; None when `value`
    is not one (or is not positive)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    text = str(value).strip() if isinstance(value, str) else ""
    number = text.rstrip("KMGTPEikmgtpe")
    unit = text[len(number):]
    if unit not in _BYTE_UNITS or not number or number.count(".") > 1 or not number.isascii() \
            or not number.replace(".", "").isdigit() or number.startswith(".") or number.endswith("."):
        return None
    whole, _, fraction = number.partition(".")
    scale = _BYTE_UNITS[unit]
    exact = int(whole) * scale + (int(fraction) * scale + 10 ** len(fraction) - 1) // 10 ** len(fraction) \
        if fraction else int(whole) * scale
    return exact if exact > 0 else None


# Folders of the node that the cache must not be (or be inside): kubelet makes a local volume's root group-writable
# for the pods' fsGroup on its first mount, and the cache's pruning deletes what it finds there.
_SYSTEM_FOLDERS = re.compile(
    r"/(proc|sys|dev|etc|boot|bin|sbin|lib|lib32|lib64|libx32|usr|root|run|snap|tmp)(/.*)?"
    r"|/var(/(lib|cache|log|run|tmp|spool|mail))?"
    r"|/var/(lib/(kubelet|containerd|docker|etcd|cni|calico|rancher|crio|containers)|log|run)(/.*)?"
    r"|/(home|opt|srv|mnt|media)")


class NodeCacheLayoutError(LayoutError):
    """`nodeCache:` follows the schema but cannot be used (a system folder as its path, a zero budget)."""


@dataclass(frozen=True)
class NodeCacheSettings:
    """`nodeCache:`: the folder every cache node holds for the local volumes (`path`), the nodes that hold it
    (`node_selector`, matchLabels), and the bytes of cached models one node of each GPU type may keep."""

    path: str
    budget: int
    budget_text: str
    node_selector: tuple[tuple[str, str], ...] = ((NODE_CACHE_LABEL, "true"),)
    gpus: tuple[tuple[str, int, str], ...] = ()  # GPU type, its budget in bytes, as written

    def budget_of(self, gpu: str | None) -> tuple[int, str, str]:
        """(bytes, as written, where it is declared) of one node of GPU type `gpu`."""
        for key, size, text in self.gpus:
            if key == gpu:
                return size, text, f"nodeCache.gpus.{key}.budget"
        return self.budget, self.budget_text, "nodeCache.budget"


def read_node_cache(root: Path) -> NodeCacheSettings | None:
    """kubectl-triton.yaml's `nodeCache:` (None when the file or section is absent); LayoutError for a malformed
    file (the schema refuses a relative path, system folders and malformed quantities)."""
    loaded = _load_layout(root)
    doc = loaded[0] if loaded is not None else None
    section = (doc or {}).get("nodeCache")
    if not isinstance(section, dict):
        return None
    node = loaded[1] if loaded is not None else None

    def size(value: Any, where: list[Any]) -> tuple[int, str]:
        found = byte_quantity(value)
        if found is None:  # the schema's pattern admits it; a zero is the one thing left
            line = _node_line(node, where) if node is not None else None
            raise NodeCacheLayoutError(LAYOUT_FILE, line, f"{'/'.join(map(str, where))}: {value!r} is not a "
                                       "positive size")
        return found, str(value)

    path = str(section["path"]).rstrip("/")
    if _SYSTEM_FOLDERS.fullmatch(path):
        raise NodeCacheLayoutError(
            LAYOUT_FILE, _node_line(node, ["nodeCache", "path"]) if node is not None else None,
            f"nodeCache/path {path}: a system folder of the node; kubelet would hand it to the pods' group (fsGroup "
            "1000): give the cache a folder of its own, e.g. /mnt/nvme/triton-node-cache")

    budget, text = size(section["budget"], ["nodeCache", "budget"])
    gpus = tuple((str(key), *size(entry["budget"], ["nodeCache", "gpus", key, "budget"]))
                 for key, entry in sorted((section.get("gpus") or {}).items()))
    selector = section.get("nodeSelector") or {NODE_CACHE_LABEL: "true"}
    return NodeCacheSettings(path, budget, text,
                             tuple(sorted((str(k), str(v)) for k, v in selector.items())), gpus)
