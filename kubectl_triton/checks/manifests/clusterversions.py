"""Which clusters apply each rendered folder, and the Kubernetes version and feature gates each declares
(kubectl-triton.yaml `kubernetes:`): what the schema check and version-dependent checks judge a folder against."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats import schemas
from kubectl_triton.gitops import repo
from kubectl_triton.gitops.layout import KubernetesFacts, KubernetesVersions, read_kubernetes
from kubectl_triton.gitops.model import Repository


@dataclass(frozen=True)
class Placement:
    """A cluster a folder reaches, with what it runs (`declared`: the version comes from the layout file)."""

    cluster: str | None
    facts: KubernetesFacts
    version: str
    declared: bool


def declared_versions(root: Path) -> KubernetesVersions:
    """The layout file's `kubernetes:`; a malformed file is reported by the gate's layout check: nothing here."""
    try:
        return read_kubernetes(root)
    except InputError:
        return KubernetesVersions()


def target_clusters(root: Path, targets: list[Any]) -> dict[Path, list[str]]:
    """target.path -> the names of the cluster folders whose Flux Kustomizations apply it (a cluster folder
    applies itself)."""
    out: dict[Path, list[str]] = defaultdict(list)
    for cluster in Repository.at(root, tolerant=True).clusters:
        own = repo.resolved(cluster.path)
        keys = {(ks.file, ks.namespace, ks.name) for ks in cluster.kustomizations}
        for target in targets:
            if target.path == own or any((k.file, k.namespace, k.name) in keys for k in target.kustomizations):
                out[target.path].append(cluster.name)
    return out


def placements(root: Path, targets: list[Any], fallback: str | None = None) -> dict[Path, list[Placement]]:
    """Per target, one Placement per cluster applying it (one without a cluster when none does). `fallback`:
    the version given on the command line, which overrides the layout file."""
    versions = declared_versions(root)
    clusters = target_clusters(root, targets)
    out = {}
    for target in targets:
        names: list[str | None] = [*clusters.get(target.path, [])] or [None]
        found = []
        for name in names:
            facts = versions.of(name) if name is not None else versions.default
            version = fallback or facts.version
            found.append(Placement(name, facts, version or schemas.DEFAULT_KUBERNETES_VERSION,
                                   fallback is None and facts.version is not None))
        out[target.path] = found
    return out
