"""Objects created at run time, which no file of the repository renders: what Helm renders from a HelmRelease's
chart, what operators create for their custom resources (CloudNativePG's pods, Services and Secrets, an
ObjectBucketClaim's Secret), and the pods the platform runs in kube-system (the control plane's static pods,
CoreDNS).

A Service, ServiceMonitor, PodDisruptionBudget or HTTPRoute whose target is none of the rendered objects may
still be right when one of those creates it: the reference checks then say "not checked" (a warning naming the
likely creator), never an error. They stay errors where the target is the repository's own: a selector sharing a
label with a rendered workload (or Service) of its namespace that no longer matches it, as a mistyped Triton
selector does. data/chart_crds.yaml holds the platform pods' labels and the operator kinds.

Pure: objects in, facts out."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kubectl_triton.checks.manifests.crds import data


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _name(obj: dict) -> str:
    return str(_dict(obj.get("metadata")).get("name", ""))


def _ns(obj: dict) -> str | None:
    ns = _dict(obj.get("metadata")).get("namespace")
    return str(ns) if ns else None


def _group(obj: dict) -> str:
    api = str(obj.get("apiVersion", ""))
    return api.rpartition("/")[0] if "/" in api else ""


def release_namespace(release: dict) -> str | None:
    """Where a HelmRelease's objects go: spec.targetNamespace, else its own namespace."""
    spec = _dict(release.get("spec"))
    return str(spec.get("targetNamespace") or _ns(release) or "") or None


@dataclass
class Creators:
    """Per namespace, what creates objects there at run time: HelmReleases (by name) and operator custom
    resources (as Kind/name), with the Secrets and ConfigMaps operators are known to write."""

    releases: dict[str | None, list[str]] = field(default_factory=lambda: defaultdict(list))
    operators: dict[str | None, list[str]] = field(default_factory=lambda: defaultdict(list))
    written: set[tuple[str, str | None, str]] = field(default_factory=set)  # (kind, namespace, name)

    def add(self, obj: dict) -> None:
        kind, group = str(obj.get("kind")), _group(obj)
        if kind == "HelmRelease" and group == "helm.toolkit.fluxcd.io":
            remote = _dict(_dict(obj.get("spec")).get("kubeConfig"))
            if not remote:  # a HelmRelease with spec.kubeConfig installs into another cluster
                self.releases[release_namespace(obj)].append(_name(obj))
            return
        for entry in data().get("operator_kinds") or []:
            if entry.get("group") == group and entry.get("kind") == kind:
                # a cluster-scoped resource creates its objects in the namespace its spec names
                where = entry.get("creates_in")
                ns = str(_dict(obj.get("spec")).get(where["field"]) or where["default"]) if where else _ns(obj)
                self.operators[ns].append(f"{kind} {_name(obj)}")
                for key, written in (("secrets", "Secret"), ("configmaps", "ConfigMap")):
                    for pattern in entry.get(key) or []:
                        self.written.add((written, ns, str(pattern).replace("{name}", _name(obj))))
                return

    def in_namespace(self, ns: str | None, hint: str = "") -> list[str]:
        """Who may create objects in `ns` at run time, the likeliest first (a HelmRelease whose name `hint` — a
        selector value or a backend name — contains, or that contains it). Those rendered without a namespace
        (it comes from where they are applied, which the render does not show) may be in any."""
        here = [(r, 0) for r in self.releases.get(ns, [])]
        anywhere = [(r, 1) for r in self.releases.get(None, [])] if ns is not None else []
        releases = sorted(dict.fromkeys([*here, *anywhere]), key=lambda r: (not _related(r[0], hint), r[1], r[0]))
        operators = [*sorted(self.operators.get(ns, [])),
                     *(sorted(self.operators.get(None, [])) if ns is not None else [])]
        return list(dict.fromkeys([f"HelmRelease {r}" for r, _ in releases] + operators))

    def cluster_wide(self, hint: str = "") -> list[str]:
        """Who may create cluster-scoped objects (a StorageClass, say) at run time: every HelmRelease of the cluster,
        the likeliest first, and the operators known to write such objects are not tracked."""
        releases = sorted({r for names in self.releases.values() for r in names},
                          key=lambda r: (not _related(r, hint), r))
        return [f"HelmRelease {r}" for r in releases]

    def writes(self, kind: str, ns: str | None, name: str) -> bool:
        return (kind, ns, name) in self.written


def _related(release: str, hint: str) -> bool:
    return bool(hint) and (release in hint or hint in release)


def creators(objects: list[dict]) -> Creators:
    out = Creators()
    for obj in objects:
        if isinstance(obj, dict):
            out.add(obj)
    return out


def platform_pods(selector: Any, ns: str | None) -> bool:
    """Does a selector (a plain label map, or a LabelSelector of matchLabels only) pick pods the platform runs
    in kube-system (the control plane's static pods, CoreDNS, kube-proxy)?"""
    spec = data()["platform_pods"]
    if isinstance(selector, dict) and ("matchLabels" in selector or "matchExpressions" in selector):
        if selector.get("matchExpressions"):
            return False
        selector = selector.get("matchLabels")
    if ns != spec["namespace"] or not isinstance(selector, dict) or not selector:
        return False
    labels = spec["labels"]
    return all(str(v) in [str(x) for x in labels.get(str(k), [])] for k, v in selector.items())


def not_checked(who: list[str], what: str) -> str:
    """The message tail of a reference left unchecked because `who` creates objects at run time."""
    shown = ", ".join(who[:2]) + (f" and {len(who) - 2} more" if len(who) > 2 else "")
    return f"not checked: {what} may be created at run time by {shown}"
