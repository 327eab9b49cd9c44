"""Traffic-split routes (Gateway API HTTPRoutes) in the rendered repository, for `validate`.

- RouteWeights: the weights of a canary route's rule (one kubectl-triton manages: its triton-model annotation)
  sum to 100 (a rule with one backend and no weight is all of the traffic); any other route's weights are
  proportions (Gateway API), so only a rule whose weights are all 0 is reported (a warning);
- RouteBackendMissing: every Service backend is rendered, with that port, by an overlay that the route's
  cluster applies (any overlay when the route is registered nowhere: RouteNotRegistered); a backend in a
  namespace where a HelmRelease or an operator creates Services at run time is "not checked" (a warning), as
  runtime.py says;
- RouteVersionMismatch: the versions the route records (annotations triton.kubectl.io/stable-version and
  canary-version) are the one version each track's config.pbtxt version_policy serves, and differ;
- CanaryConfigDrift: the canary's config equals the stable one but for version_policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import ERROR, INFO, WARNING, Finding
from kubectl_triton.checks.manifests import runtime
from kubectl_triton.checks.model.base import served_versions, without_policy
from kubectl_triton.checks.registry import Severity, register
from kubectl_triton.errors import TritonCtlError
from kubectl_triton.formats import pbtxt
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops import assembly, repo
from kubectl_triton.gitops.labels import ANN_CANARY_VERSION, ANN_STABLE_VERSION, ANN_TRITON_MODEL
from kubectl_triton.gitops.model import CANARY_SUFFIX as SUFFIX
from kubectl_triton.gitops.model import Repository

_DECLARED: tuple[tuple[str, Severity, str, str], ...] = (
    ("RouteBackendMissing", "error", "an HTTPRoute backend names a Service (or port) the cluster does not render",
     "point backendRefs at the model's stable/canary Services and their http port"),
    ("RouteVersionMismatch", "error", "a canary route's tracks serve other model versions than the route says",
     "re-run `kubectl triton canary` (or promote/abort) instead of editing the route by hand"),
    ("RouteWeights", "error", "the backend weights of a canary route do not add up to 100",
     "set the stable and canary weights so they sum to 100"),
    ("CanaryConfigDrift", "warning", "the canary's config.pbtxt differs from the stable one beyond the version",
     "keep the canary to a version change, or promote it to make the change stable"),
    ("RouteNotRegistered", "warning", "no Flux Kustomization applies the route", "register the overlay in a cluster"),
)
CHECKS = {code: register(code, sev, "cluster", desc, fix) for code, sev, desc, fix in _DECLARED}

GATEWAY_GROUP = "gateway.networking.k8s.io/"


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _weight(ref: dict) -> int | None:
    """A backendRef's weight (Gateway API: 0 to 1,000,000, default 1; the API server drops a null); None when it
    is no such integer."""
    w = ref.get("weight")
    if w is None:
        return 1
    return w if isinstance(w, int) and not isinstance(w, bool) and 0 <= w <= 1_000_000 else None


def check(root: Path, targets: list[Any]) -> list[Finding]:
    """Findings for every HTTPRoute among the rendered targets."""
    out: list[Finding] = []
    by_path = {t.path: t for t in targets}
    flux = repo.flux_kustomizations(root, tolerant=True)  # malformed Flux files are reported by the gate
    namespaces = _target_namespaces(root, flux)
    seen: dict[tuple[Path, ...], tuple[dict, runtime.Creators]] = {}  # per set of deployed folders
    applied = [{repo.resolved(root / ks.path) for ks in cluster.kustomizations}
               for cluster in Repository.at(root, tolerant=True).clusters]
    for target in targets:
        for obj in target.objects:
            if obj.get("kind") == "HTTPRoute" and str(obj.get("apiVersion", "")).startswith(GATEWAY_GROUP):
                out += _check_route(root, target, obj, targets, by_path, flux, namespaces, seen, applied)
    return out


def _deployed(root: Path, target: Any, targets: list[Any], by_path: dict, flux: list,
              applied: list[set[Path]]) -> tuple[list[Any], bool]:
    """Targets applied to the same clusters as `target` (every path the Flux Kustomizations of a cluster that
    applies it apply, nested ones included: `applied`, per cluster; else those declared beside its own), and
    whether it is registered."""
    mine = [paths for paths in applied if target.path in paths]
    if mine:
        return [by_path[p] for p in sorted(set().union(*mine)) if p in by_path], True
    clusters = {ks.file.parent for ks in flux if repo.resolved(root / ks.path) == target.path}
    if not clusters:
        overlays = Repository.at(root, tolerant=True).layout.overlays + "/"
        return [t for t in targets if t.rel.startswith(overlays)], False
    paths = {repo.resolved(root / ks.path) for ks in flux if any(c in ks.file.parents or c == ks.file.parent
                                                             for c in clusters)}
    return [by_path[p] for p in paths if p in by_path], True


def _target_namespaces(root: Path, flux: list) -> dict[Path, str | None]:
    """Folder -> the spec.targetNamespace the Flux Kustomizations applying it agree on (None: none, or several)."""
    found: dict[Path, set[str]] = {}
    for ks in flux:
        if ks.spec.get("targetNamespace"):
            found.setdefault(repo.resolved(root / ks.path), set()).add(str(ks.spec["targetNamespace"]))
    return {path: names.pop() if len(names) == 1 else None for path, names in found.items()}


def _namespace(obj: dict, target_ns: str | None) -> str:
    """Where Flux puts a namespaced object: the Kustomization's targetNamespace, else its own (or default)."""
    return target_ns or str(_meta(obj).get("namespace") or "default")


def _services(deployed: list[Any], namespaces: dict[Path, str | None]
              ) -> tuple[dict[tuple[str, str], tuple[dict, Any]], runtime.Creators]:
    """The Services the deployed targets render, by (namespace, name), and what creates more at run time (Helm
    charts, operators), each object in the namespace Flux applies it to."""
    services: dict[tuple[str, str], tuple[dict, Any]] = {}
    creators = runtime.Creators()
    for t in deployed:
        target_ns = namespaces.get(t.path)
        for obj in t.objects:
            if not isinstance(obj, dict):
                continue
            if obj.get("kind") == "Service" and obj.get("apiVersion") == "v1":
                services[(_namespace(obj, target_ns), str(_meta(obj).get("name")))] = (obj, t)
            else:
                creators.add({**obj, "metadata": {**_meta(obj), "namespace": target_ns}} if target_ns else obj)
    return services, creators


def _check_route(root: Path, target: Any, route: dict, targets: list[Any], by_path: dict,
                 flux: list, namespaces: dict[Path, str | None],
                 seen: dict[tuple[Path, ...], tuple[dict, runtime.Creators]],
                 applied: list[set[Path]]) -> list[Finding]:
    oid = object_id(route)
    ns = _namespace(route, namespaces.get(target.path))

    def finding(severity: Severity, code: str, message: str) -> Finding:
        return CHECKS[code].finding(message, path=target.rel, object=oid, severity=severity)

    out = []
    deployed, registered = _deployed(root, target, targets, by_path, flux, applied)
    if not registered:
        out.append(finding(WARNING, "RouteNotRegistered", "no Flux Kustomization applies this route"))
    folders = tuple(sorted(t.path for t in deployed))
    if folders not in seen:
        seen[folders] = _services(deployed, namespaces)
    services, creators = seen[folders]
    tracks: dict[str, tuple[dict, Any]] = {}
    managed = bool((_meta(route).get("annotations") or {}).get(ANN_TRITON_MODEL))
    spec = route.get("spec")
    rules = spec.get("rules") if isinstance(spec, dict) else None
    rules = rules if isinstance(rules, list) else []
    for i, rule in enumerate(r for r in rules if isinstance(r, dict)):
        refs = [b for b in rule.get("backendRefs") or [] if isinstance(b, dict)]
        weights = [_weight(b) for b in refs]
        odd = [b for b, w in zip(refs, weights, strict=True) if w is None]
        if odd:
            out.append(finding(ERROR, "RouteWeights", f"rules[{i}]: backendRef {odd[0].get('name')} has weight "
                               f"{odd[0].get('weight')!r}, not an integer from 0 to 1000000"))
        elif refs and not (len(refs) == 1 and refs[0].get("weight") is None):
            total = sum(w or 0 for w in weights)
            shown = ", ".join(f"{b.get('name')}={w}" for b, w in zip(refs, weights, strict=True))
            if managed and total != 100:  # a canary split: percentages, as canary/promote/abort write them
                out.append(finding(ERROR, "RouteWeights", f"rules[{i}]: backendRef weights sum to {total}, not "
                                   f"100 ({shown})"))
            elif total == 0:  # Gateway API weights are proportions; all zero sends every request an error
                out.append(finding(WARNING, "RouteWeights", f"rules[{i}]: every backendRef has weight 0 ({shown}): "
                                   "the gateway answers every request of this rule with an error"))
        for b in refs:
            if b.get("kind", "Service") != "Service" or b.get("group", "") not in ("", "core"):
                continue
            key = (str(b.get("namespace") or ns), str(b.get("name")))
            found = services.get(key)
            where = "an overlay this route's cluster applies" if registered else "any overlay"
            if found is None:
                who = creators.in_namespace(key[0], key[1])
                missing = f"rules[{i}]: backend Service {key[0]}/{key[1]} is not rendered by {where}"
                out.append(finding(INFO, "RouteBackendMissing", f"{missing}; {runtime.not_checked(who, 'it')}")
                           if who else finding(ERROR, "RouteBackendMissing", missing))
                continue
            ports = {p.get("port") for p in (found[0].get("spec") or {}).get("ports") or []}
            if b.get("port") not in ports:
                out.append(finding(ERROR, "RouteBackendMissing", f"rules[{i}]: Service {key[1]} has no port "
                                   f"{b.get('port')} (ports: {', '.join(str(p) for p in sorted(ports))})"))
            tracks["canary" if str(key[1]).endswith(SUFFIX) else "stable"] = found
    out += _versions(route, tracks, finding)
    return out


def _config_of(service: dict, target: Any, triton_model: str) -> Any:
    """The Triton model's config in the model-config ConfigMap of the overlay that renders `service`."""
    cm = assembly.model_config_map(target.objects)
    text = ((cm or {}).get("data") or {}).get(f"{triton_model}__config.pbtxt")
    if text is None:
        return None
    try:
        return pbtxt.parse(text, f"{target.rel} ({triton_model}/config.pbtxt)")
    except TritonCtlError:
        return None  # the model checks report the syntax error


def _versions(route: dict, tracks: dict[str, tuple[dict, Any]], finding: Any) -> list[Finding]:
    ann = _meta(route).get("annotations") or {}
    tm = ann.get(ANN_TRITON_MODEL)
    if not tm:
        return []
    out = []
    claimed = {"stable": ann.get(ANN_STABLE_VERSION), "canary": ann.get(ANN_CANARY_VERSION)}
    configs = {}
    for track, (service, target) in tracks.items():
        config = _config_of(service, target, tm)
        if config is None:
            out.append(finding(ERROR, "RouteVersionMismatch", f"{track} Service {_meta(service).get('name')}: its "
                               f"overlay {target.rel} has no Triton model {tm}"))
            continue
        configs[track] = config
        kind, versions = served_versions(config)
        want = claimed.get(track)
        name = _meta(service).get("name")
        if kind != "specific" or len(versions) != 1:
            out.append(finding(ERROR, "RouteVersionMismatch", f"{track} Service {name} ({target.rel}): {tm}'s "
                               f"version_policy ({kind}) does not pin one version; the route's split needs it"))
        elif want is not None and str(versions[0]) != str(want):
            out.append(finding(ERROR, "RouteVersionMismatch", f"{track} Service {name} ({target.rel}) serves {tm} "
                               f"version {versions[0]}, but the route records version {want}"))
    if "canary" in tracks and claimed["canary"] is None:
        out.append(finding(ERROR, "RouteVersionMismatch", f"the route sends traffic to a canary but records no "
                           f"{ANN_CANARY_VERSION}"))
    if claimed["canary"] is not None and str(claimed["canary"]) == str(claimed["stable"]):
        out.append(finding(ERROR, "RouteVersionMismatch", f"stable and canary both serve version {claimed['stable']}"))
    if "stable" in configs and "canary" in configs and without_policy(configs["stable"]) != \
            without_policy(configs["canary"]):
        out.append(finding(WARNING, "CanaryConfigDrift", f"the canary's {tm} config differs from the stable one "
                           "beyond version_policy: copy the change into the canary overlay's config (or abort "
                           "and start the canary again)"))
    return out
