"""Does a fresh cluster converge? An apply-order simulation per cluster over its Flux Kustomizations.

Flux applies each Kustomization only after the ones it `dependsOn` are Ready, and within one Kustomization it
applies CustomResourceDefinitions and Namespaces before everything else (a server-side dry run of the rest follows).
So an object can rely on what its own Kustomization creates first, on what every ancestor Kustomization created,
on what the Kustomization that applies its Kustomization created (provenance.py), and on what the cluster provides
before Flux runs (kubectl-triton.yaml, `cluster.provides`). From that this module reports namespaces and CRDs that
do not exist yet when an object is applied, references that resolve to nothing in the whole rendered cluster, and
`wait: true` Kustomizations holding objects that can never become healthy.

What the repository cannot show is said so, never an error: CRDs a chart without data here may install (crds.py),
a CRD another Kustomization installs without a dependsOn line to it (Flux retries until it converges), and objects
Helm charts, operators and the kubelet create at run time (runtime.py).

Pure: rendered objects and Flux Kustomization objects in, findings out (`check` is the adapter for validate)."""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.manifests import crds, runtime
from kubectl_triton.checks.manifests.crds import chart_groups
from kubectl_triton.checks.manifests.provenance import (
    Applied,
    Provided,
    Simulation,
    Suspect,
    add_from,
    ancestors,
    cluster_scoped,
    effective_objects,
    generated,
    provisions,
)
from kubectl_triton.checks.registry import register
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops import bootstrap, repo
from kubectl_triton.gitops.layout import ClusterProvides
from kubectl_triton.gitops.model import Repository

__all__ = ["Applied", "Provided", "ancestors", "chart_groups", "check", "check_cluster", "clusters_applied",
           "effective_objects", "provisions"]

NAMESPACE_MISSING = register(
    "NamespaceMissing", "error", "cluster",
    "A namespaced object's Namespace is not created before or with it on a fresh cluster.",
    "Add the Namespace to the same Kustomization, add `dependsOn` on the Kustomization that creates it, or declare "
    "it in kubectl-triton.yaml (cluster.provides.namespaces) when the cluster has it already.")
CRD_MISSING = register(
    "CRDMissing", "error", "cluster",
    "A custom resource whose CRD is not installed before it: Flux's server-side dry run fails on a fresh cluster.",
    "Install the CRD (a CRD object or a HelmRelease of a chart that ships it) in a Kustomization this one "
    "`dependsOn` (with `wait: true`), or declare the API group in kubectl-triton.yaml (cluster.provides.crds).")
CLAIM_MISSING = register(
    "ClaimMissing", "error", "cluster",
    "A pod template mounts a PersistentVolumeClaim that nothing in the cluster creates.",
    "Create the PersistentVolumeClaim in the pod's namespace (e.g. in the platform Kustomization) or fix claimName.")
CONFIGMAP_MISSING = register(
    "ConfigMapMissing", "error", "cluster",
    "A pod template uses a ConfigMap (volume, envFrom, valueFrom) that nothing in the cluster creates.",
    "Create the ConfigMap (a configMapGenerator in the overlay), fix the name, or mark the reference optional.")
SECRET_MISSING = register(
    "SecretMissing", "error", "cluster",
    "A pod template uses a Secret that nothing in the cluster creates and kubectl-triton.yaml does not declare.",
    "Declare the Secret in kubectl-triton.yaml (cluster.provides.secrets, with the reason: SOPS, external-secrets) "
    "or create it (never in plain text in git).")
SERVICE_ACCOUNT_MISSING = register(
    "ServiceAccountMissing", "error", "cluster",
    "A pod template runs as a ServiceAccount that nothing in the cluster creates: its pods are never created.",
    "Add the ServiceAccount to the overlay (base/triton has one) or fix serviceAccountName.")
SERVICE_SELECTS_NOTHING = register(
    "ServiceSelectsNothing", "error", "cluster",
    "A Service's selector matches no pod template in its namespace: it never gets endpoints.",
    "Make the selector a subset of the pod template's labels (kustomize `labels` with includeSelectors).")
SCALE_TARGET_MISSING = register(
    "ScaleTargetMissing", "error", "cluster",
    "A HorizontalPodAutoscaler's scaleTargetRef names no workload in its namespace.",
    "Point scaleTargetRef at the Deployment's rendered name (namePrefix included).")
PDB_SELECTS_NOTHING = register(
    "PodDisruptionBudgetSelectsNothing", "error", "cluster",
    "A PodDisruptionBudget's selector matches no pod template in its namespace: it protects nothing.",
    "Make the selector match the pod template's labels.")
SERVICEMONITOR_SELECTS_NOTHING = register(
    "ServiceMonitorSelectsNothing", "error", "cluster",
    "A ServiceMonitor selects no Service, or no selected Service has the port its endpoints name: nothing is "
    "scraped.",
    "Match the selector to the Service's labels and name an existing Service port in endpoints[].port.")
WAIT_NEVER_HEALTHY = register(
    "WaitNeverHealthy", "error", "cluster",
    "A Kustomization with `wait: true` holds an object that cannot become healthy with what the repository "
    "declares (e.g. a ReadWriteMany PVC without a StorageClass that serves it): it never becomes Ready, and every "
    "Kustomization that dependsOn it waits forever.",
    "Name an RWX-capable storageClassName on the PVC, or declare the cluster's StorageClasses in kubectl-triton.yaml "
    "(cluster.provides.storageClasses, with rwx/default/volumeBindingMode).")

BOOTSTRAP_INSTALLED = register(
    "BootstrapInstalled", "info", "cluster",
    "What the repository's bootstrap files (helmfiles and templates below a bootstrap/ folder) install before Flux "
    "runs: their CRDs and namespaces count as there when Flux applies the cluster.",
    "Nothing to fix; if the cluster is not bootstrapped with those files, declare what it has in kubectl-triton.yaml "
    "(cluster.provides).")

DEPENDENCY_CYCLE = register(
    "FluxDependencyCycle", "error", "cluster",
    "Flux Kustomizations depend on each other in a circle: none of them is ever applied.",
    "Remove one `dependsOn` entry of the circle.")

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod", "LeaderWorkerSet")


def _data() -> dict[str, Any]:
    return crds.data()


def _group(obj: dict) -> str:
    api = str(obj.get("apiVersion", ""))
    return api.rpartition("/")[0] if "/" in api else ""


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _meta(obj: dict) -> dict:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _spec(obj: dict) -> dict:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _ns(obj: dict) -> str | None:
    ns = _meta(obj).get("namespace")
    return str(ns) if ns else None


def _name(obj: dict) -> str:
    return str(_meta(obj).get("name", ""))


def _creates_namespace(release: dict) -> bool:
    install = _spec(release).get("install")
    return isinstance(install, dict) and install.get("createNamespace") is True


# ------------------------------------------------------------------------------------------------ the checks


@dataclass
class _Context:
    """The whole cluster, for the order findings' hints: what every Kustomization provides, who installs each CRD
    group, the HelmReleases of charts without CRD data, the kinds without a namespace."""

    everywhere: Provided
    installers: dict[str, list[Applied]]
    suspects: list[Suspect]
    scoped: set[str]
    by_key: dict[tuple[str, str], Applied]


def _suspects_of(group: str, have: Provided, context: _Context) -> list[Suspect]:
    """The HelmReleases that may install `group` (charts without CRD data here): the most likely first (its
    words in their names), those applied before this Kustomization before the others."""
    pool = [*have.suspects, *(s for s in context.suspects if s not in have.suspects)]
    ranked = sorted(enumerate(pool), key=lambda p: (-crds.suspicion(group, p[1].release, p[1].chart), p[0]))
    return [s for _, s in ranked]


def _crd_finding(group: str, objs: list[str], ks: Applied, have: Provided, context: _Context) -> Finding:
    """CRDMissing for the objects `objs` of group `group`: an error only where nothing in the cluster can be
    installing it."""
    kinds = sorted({o.split("/", 1)[0] for o in objs})
    where = f"Kustomization {ks.name} ({ks.path})"
    head = f"{', '.join(kinds)} ({group}) of {where}"
    missing = (f"{head}: no CRD for {group} is installed before it (\"no matches for kind {kinds[0]}\" in Flux's "
               "dry run on a fresh cluster)")
    maybe = f"; unless {', '.join(have.unknown[:2])} provides it" if have.unknown else ""
    if group in have.unawaited:
        return CRD_MISSING.finding(
            f"{head}: the CRDs come from {have.unawaited[group]}, but that Kustomization neither waits (wait: true) "
            "nor health-checks the HelmRelease, so Flux may apply this before the chart is installed",
            path=ks.file, object=objs[0], severity="warning")
    platform = crds.platform_group(group)
    if platform is not None:
        return CRD_MISSING.finding(
            f"{head}: not checked: {group} is served by {platform}, which nothing in git shows; declare the group "
            "in kubectl-triton.yaml (cluster.provides.crds) once the platform serves it", path=ks.file,
            object=objs[0], severity="warning")
    installers = [i for i in context.installers.get(group, []) if i is not ks]
    if installers or group in context.everywhere.groups or group in context.everywhere.unawaited:
        source = context.everywhere.groups.get(group) or context.everywhere.unawaited.get(group)
        waiting = [i for i in installers if any(a is ks for a in ancestors(i, context.by_key))]
        if waiting and len(waiting) == len(installers):
            return CRD_MISSING.finding(
                f"{missing}; {source} installs it, but {waiting[0].label} dependsOn this Kustomization, so it is "
                "never applied while this one fails: the cluster never converges; install the CRD before this "
                "Kustomization (dependsOn the other way round)", path=ks.file, object=objs[0])
        return CRD_MISSING.finding(
            f"{missing}; {source} installs it without a dependsOn line from this Kustomization: Flux retries until "
            "the CRD exists (the first reconciliations fail); add it to dependsOn (with wait: true) for a clean "
            "first apply", path=ks.file, object=objs[0], severity="warning")
    suspects = _suspects_of(group, have, context)
    if suspects:
        likely = [s for s in suspects if crds.suspicion(group, s.release, s.chart) > 0]
        if likely:
            shown = f"{', '.join(s.describe() for s in likely[:2])} may install it"
        else:
            names = ", ".join(f"{s.release} ({s.chart or 'chart unknown'})" for s in suspects[:3])
            more = f" and {len(suspects) - 3} more" if len(suspects) > 3 else ""
            shown = (f"it may come from one of the {len(suspects)} HelmRelease(s) of charts without CRD data here "
                     f"({names}{more})")
        return CRD_MISSING.finding(
            f"{head}: not checked: no CRD object and no chart known to ship {group} is applied before it, but "
            f"{shown}; declare the group in kubectl-triton.yaml (cluster.provides.crds) or dependsOn the "
            "Kustomization that installs it", path=ks.file, object=objs[0], severity="warning")
    hint = ("; nothing in this repository installs it (no CRD object, no HelmRelease of a chart known to ship "
            "it): install it in a Kustomization this one dependsOn, or declare the group in kubectl-triton.yaml "
            "(cluster.provides.crds)")
    return CRD_MISSING.finding(f"{missing}{hint}{maybe}", path=ks.file, object=objs[0],
                               severity="warning" if have.unknown else None)


def _order_findings(ks: Applied, objects: list[dict], have: Provided, context: _Context) -> Iterator[Finding]:
    """Namespaces and CRDs `ks`'s objects need, against what exists when Flux applies it."""
    missing_ns: dict[str, list[str]] = defaultdict(list)
    missing_group: dict[str, list[str]] = defaultdict(list)
    for obj in objects:
        ns = _ns(obj) if obj.get("kind") not in context.scoped else None
        if obj.get("kind") == "HelmRelease":
            spec = _spec(obj)
            target = spec.get("targetNamespace")
            if target and not _creates_namespace(obj) and not spec.get("kubeConfig") \
                    and str(target) not in have.namespaces:
                missing_ns[str(target)].append(f"{object_id(obj)} (spec.targetNamespace)")
        if ns and ns not in have.namespaces:
            missing_ns[ns].append(object_id(obj))
        group = _group(obj)
        if group not in have.groups:
            missing_group[group].append(object_id(obj))
    where = f"Kustomization {ks.name} ({ks.path})"
    maybe = f"; unless {', '.join(have.unknown[:2])} provides it" if have.unknown else ""
    elsewhere = context.everywhere
    for ns, objs in sorted(missing_ns.items()):
        hint = (f"; {elsewhere.namespaces[ns]} creates it: add it to dependsOn" if ns in elsewhere.namespaces
                else "; nothing in this cluster creates it: add a Namespace object or declare it in "
                     "kubectl-triton.yaml (cluster.provides.namespaces)")
        yield NAMESPACE_MISSING.finding(
            f"namespace {ns} does not exist when Flux applies {where}: {len(objs)} object(s) fail "
            f"(\"namespaces {ns} not found\"){hint}{maybe}", path=ks.file, object=objs[0],
            severity="warning" if have.unknown else None)
    for group, objs in sorted(missing_group.items()):
        yield _crd_finding(group, objs, ks, have, context)


def pod_templates(obj: dict) -> list[dict]:
    """The pod templates (objects with metadata and spec) of a workload."""
    kind, spec = obj.get("kind"), _spec(obj)
    if kind == "Pod":
        return [{"metadata": _meta(obj), "spec": spec}]
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec") or {}) if isinstance(spec.get("jobTemplate"), dict) \
            else {}
    if kind == "LeaderWorkerSet":
        lwt = _as_dict(spec.get("leaderWorkerTemplate"))
        return [t for t in (lwt.get("leaderTemplate"), lwt.get("workerTemplate")) if isinstance(t, dict)]
    template = spec.get("template")
    return [template] if isinstance(template, dict) else []


def _labels(template: dict) -> dict[str, str]:
    labels = _meta(template).get("labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) against a label set; an empty selector matches all."""
    if not isinstance(selector, dict):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(str(key)) != str(value):
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = str(expr.get("key")), expr.get("operator"), [str(v) for v in expr.get("values") or []]
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values) \
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


@dataclass
class _Cluster:
    """Every object the cluster's Kustomizations render, indexed for reference checks."""

    by_kind: dict[tuple[str, str | None, str], dict] = field(default_factory=dict)  # (kind, ns, name)
    templates: dict[str | None, list[tuple[dict, dict]]] = field(default_factory=lambda: defaultdict(list))
    # (workload, labels of its pod template) per namespace: what Service and PDB selectors are matched against
    pod_labels: dict[str | None, list[tuple[dict, dict[str, str]]]] = field(
        default_factory=lambda: defaultdict(list))
    services: dict[str | None, list[dict]] = field(default_factory=lambda: defaultdict(list))
    service_labels: dict[int, dict[str, str]] = field(default_factory=dict)  # id(Service) -> its labels
    services_by_label: dict[tuple[str | None, str, str], list[dict]] = field(  # (namespace, label, value)
        default_factory=lambda: defaultdict(list))
    # (namespace, workload kind, label, value) -> the pod labels of that kind's templates carrying it
    pods_by_label: dict[tuple[str | None, str, str, str], list[dict[str, str]]] = field(
        default_factory=lambda: defaultdict(list))
    pod_kinds: dict[str | None, set[str]] = field(default_factory=lambda: defaultdict(set))
    claim_templates: set[tuple[str | None, str]] = field(default_factory=set)
    creators: runtime.Creators = field(default_factory=runtime.Creators)  # what creates objects at run time

    def add(self, obj: dict) -> None:
        kind, ns = str(obj.get("kind")), _ns(obj)
        self.creators.add(obj)
        self.by_kind[(kind, ns, _name(obj))] = obj
        if kind in WORKLOADS:
            for template in pod_templates(obj):
                self.templates[ns].append((obj, template))
                labels = _labels(template)
                self.pod_labels[ns].append((obj, labels))
                self.pod_kinds[ns].add(kind)
                for key, value in labels.items():
                    self.pods_by_label[(ns, kind, key, value)].append(labels)
            if kind == "StatefulSet":
                for vct in _spec(obj).get("volumeClaimTemplates") or []:
                    if isinstance(vct, dict):
                        self.claim_templates.add((ns, _name(vct)))
        if kind == "Service" and _group(obj) == "":
            self.services[ns].append(obj)
            self.service_labels[id(obj)] = labels = _labels(obj)
            for key, value in labels.items():
                self.services_by_label[(ns, key, value)].append(obj)
        # Secrets that controllers write from objects of the repository
        spec = _spec(obj)
        if kind == "Certificate" and _group(obj) == "cert-manager.io" and spec.get("secretName"):
            self.by_kind[("Secret", ns, str(spec["secretName"]))] = obj
        elif kind == "ExternalSecret" and _group(obj) == "external-secrets.io":
            target = _as_dict(spec.get("target")).get("name") or _name(obj)
            self.by_kind[("Secret", ns, str(target))] = obj
        elif kind == "SealedSecret" and _group(obj) == "bitnami.com":
            self.by_kind[("Secret", ns, _name(obj))] = obj

    def has(self, kind: str, ns: str | None, name: str) -> bool:
        return (kind, ns, name) in self.by_kind


def _pod_refs(template: dict) -> Iterator[tuple[str, str, str]]:
    """(kind, name, where) of every ConfigMap, Secret, PVC and ServiceAccount a pod template needs."""
    spec = _spec(template)
    for vol in spec.get("volumes") or []:
        if not isinstance(vol, dict):
            continue
        where = f"volume {vol.get('name')}"
        if isinstance(vol.get("persistentVolumeClaim"), dict):
            yield "PersistentVolumeClaim", str(vol["persistentVolumeClaim"].get("claimName")), where
        cm = vol.get("configMap")
        if isinstance(cm, dict) and not cm.get("optional"):
            yield "ConfigMap", str(cm.get("name")), where
        secret = vol.get("secret")
        if isinstance(secret, dict) and not secret.get("optional"):
            yield "Secret", str(secret.get("secretName")), where
        projected = vol.get("projected")
        for source in (projected.get("sources") or []) if isinstance(projected, dict) else []:
            for key, kind in (("configMap", "ConfigMap"), ("secret", "Secret")):
                ref = source.get(key) if isinstance(source, dict) else None
                if isinstance(ref, dict) and not ref.get("optional"):
                    yield kind, str(ref.get("name")), where
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if not isinstance(container, dict):
            continue
        where = f"container {container.get('name')}"
        for env_from in container.get("envFrom") or []:
            for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                ref = env_from.get(key) if isinstance(env_from, dict) else None
                if isinstance(ref, dict) and not ref.get("optional"):
                    yield kind, str(ref.get("name")), f"{where} envFrom"
        for env in container.get("env") or []:
            value_from = env.get("valueFrom") if isinstance(env, dict) else None
            for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                ref = value_from.get(key) if isinstance(value_from, dict) else None
                if isinstance(ref, dict) and not ref.get("optional"):
                    yield kind, str(ref.get("name")), f"{where} env {env.get('name')}"
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if account and account != "default":
        yield "ServiceAccount", str(account), "serviceAccountName"


_REF_CHECKS = {"PersistentVolumeClaim": CLAIM_MISSING, "ConfigMap": CONFIGMAP_MISSING, "Secret": SECRET_MISSING,
               "ServiceAccount": SERVICE_ACCOUNT_MISSING}


def _unchecked(cluster: _Cluster, namespaces: list[str | None], hint: str) -> list[str]:
    """Who may create, at run time, what a reference in `namespaces` points at (empty: nothing, so a reference
    that resolves to no rendered object is an error)."""
    return [who for ns in dict.fromkeys(namespaces) for who in cluster.creators.in_namespace(ns, hint)]


def _hint(labels: Any) -> str:
    """A selector's likeliest release name (app.kubernetes.io/instance, else any value), for ranking creators."""
    labels = labels if isinstance(labels, dict) else {}
    return str(labels.get("app.kubernetes.io/instance") or labels.get("app.kubernetes.io/name")
               or next(iter(labels.values()), ""))


def _reference_findings(ks: Applied, objects: list[dict], cluster: _Cluster,
                        provides: ClusterProvides) -> Iterator[Finding]:
    external = [(s.namespace, s.name) for s in provides.secrets]
    for obj in objects:
        kind, ns = obj.get("kind"), _ns(obj)
        if kind in WORKLOADS:
            seen: set[tuple[str, str]] = set()
            for template in pod_templates(obj):
                for ref_kind, name, where in _pod_refs(template):
                    if (ref_kind, name) in seen or cluster.has(ref_kind, ns, name) \
                            or cluster.creators.writes(ref_kind, ns, name):
                        continue
                    if ref_kind == "Secret" and any(fnmatch.fnmatchcase(str(ns), n) and fnmatch.fnmatchcase(name, s)
                                                    for n, s in external):
                        continue
                    if [ref_kind, name] in _data()["builtin_namespace_objects"]["objects"]:
                        continue
                    if ref_kind == "PersistentVolumeClaim" and any(
                            n == ns and name.startswith(f"{t}-") for n, t in cluster.claim_templates):
                        continue
                    seen.add((ref_kind, name))
                    extra = (" and kubectl-triton.yaml does not declare it external (cluster.provides.secrets)"
                             if ref_kind == "Secret" else "")
                    yield _REF_CHECKS[ref_kind].finding(
                        f"{where} uses {ref_kind} {ns}/{name}, which no Kustomization of this cluster "
                        f"creates{extra}: the pods never start", path=ks.path, object=object_id(obj))
        elif kind == "Service" and _group(obj) == "":
            selector = _spec(obj).get("selector")
            if isinstance(selector, dict) and selector and not _selects_a_pod(selector, cluster, ns):
                text = f"selector {_fmt_labels(selector)} matches no pod template in namespace {ns}"
                if runtime.platform_pods(selector, ns):
                    yield SERVICE_SELECTS_NOTHING.finding(
                        f"{text}; not checked: it selects pods the platform runs (the control plane's static pods, "
                        "CoreDNS; no file renders them)", path=ks.path, object=object_id(obj), severity="info")
                    continue
                who = [] if _shares_pod_label(selector, cluster, ns) else _unchecked(cluster, [ns], _hint(selector))
                yield SERVICE_SELECTS_NOTHING.finding(
                    f"{text}; {runtime.not_checked(who, 'the pods')}" if who else
                    f"{text}: the Service never gets endpoints", path=ks.path, object=object_id(obj),
                    severity="info" if who else None)
        elif kind == "HorizontalPodAutoscaler":
            ref = _spec(obj).get("scaleTargetRef")
            if isinstance(ref, dict) and not cluster.has(str(ref.get("kind")), ns, str(ref.get("name"))):
                text = f"scaleTargetRef {ref.get('kind')}/{ref.get('name')} does not exist in namespace {ns}"
                who = _unchecked(cluster, [ns], str(ref.get("name")))
                yield SCALE_TARGET_MISSING.finding(
                    f"{text}; {runtime.not_checked(who, 'it')}" if who else text, path=ks.path,
                    object=object_id(obj), severity="info" if who else None)
        elif kind == "PodDisruptionBudget":
            selector = _spec(obj).get("selector")
            if not _selects_pods(selector, cluster, ns):
                if runtime.platform_pods(selector, ns):
                    yield PDB_SELECTS_NOTHING.finding(
                        f"selector {_fmt_selector(selector)} matches no pod template in namespace {ns}; not checked: "
                        "it selects pods the platform runs (the control plane's static pods, CoreDNS; no file "
                        "renders them)", path=ks.path, object=object_id(obj), severity="info")
                    continue
                match = _as_dict(_as_dict(selector).get("matchLabels"))
                who = [] if _shares_pod_label(match, cluster, ns) else _unchecked(cluster, [ns], _hint(match))
                text = f"selector {_fmt_selector(selector)} matches no pod template in namespace {ns}"
                yield PDB_SELECTS_NOTHING.finding(
                    f"{text}; {runtime.not_checked(who, 'the pods')}" if who else text, path=ks.path,
                    object=object_id(obj), severity="info" if who else None)
        elif kind == "ServiceMonitor":
            yield from _service_monitor(ks, obj, cluster)
        # HTTPRoute backends (Service and port, in the clusters that apply the route): checks/manifests/routes.py


def _shares_pod_label(selector: Any, cluster: _Cluster, ns: str | None) -> bool:
    """Does a selector name a label (key and value) that a rendered pod template of `ns` carries? Then it is
    meant for the repository's own workloads, and matching none of them is a mistake, not a run-time object."""
    labels = selector if isinstance(selector, dict) else {}
    return any(cluster.pods_by_label.get((ns, kind, str(k), str(v))) for k, v in labels.items()
               for kind in cluster.pod_kinds[ns])


def _selects_pods(selector: Any, cluster: _Cluster, ns: str | None) -> bool:
    """Whether a LabelSelector matches a pod template of namespace `ns`, looked up through one of its
    matchLabels rather than against every template."""
    match = selector.get("matchLabels") if isinstance(selector, dict) else None
    if isinstance(match, dict) and match:
        key, value = next(iter(match.items()))
        candidates = [labels for kind in cluster.pod_kinds[ns]
                      for labels in cluster.pods_by_label.get((ns, kind, str(key), str(value)), [])]
    else:
        candidates = [labels for _, labels in cluster.pod_labels[ns]]
    return any(selector_matches(selector, labels) for labels in candidates)


def _selects_a_pod(selector: dict, cluster: _Cluster, ns: str | None) -> bool:
    """Whether a Service's selector matches a pod template of namespace `ns` (less, for each workload kind, the
    labels its controller sets), looked up through one of its labels rather than against every template."""
    for kind in cluster.pod_kinds[ns]:
        wanted = {str(k): str(v) for k, v in _without_controller_labels(selector, kind).items()}
        if not wanted:
            return True  # nothing left to match: every pod of that kind
        key, value = next(iter(wanted.items()))
        if any(selector_matches({"matchLabels": wanted}, labels)
               for labels in cluster.pods_by_label.get((ns, kind, key, value), [])):
            return True
    return False


def _without_controller_labels(selector: dict, kind: str) -> dict:
    """`selector` less the keys the controller of a `kind` workload sets on its pods (their values are not in
    git)."""
    keys = _data()["controller_pod_labels"].get(kind, [])
    return {k: v for k, v in selector.items()
            if not any(k == key or (key.endswith("/") and str(k).startswith(key)) for key in keys)}


def _fmt_labels(labels: Any) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) + "}" if isinstance(labels, dict) \
        else str(labels)


def _fmt_selector(selector: Any) -> str:
    """A LabelSelector as Kubernetes writes one: {a=b, c in (x,y), d notin (z), e, !f}; {} selects all."""
    if not isinstance(selector, dict):
        return "{}" if selector is None else str(selector)
    parts = [f"{k}={v}" for k, v in sorted(_as_dict(selector.get("matchLabels")).items())]
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            continue
        key, op = str(expr.get("key")), str(expr.get("operator"))
        values = ",".join(str(v) for v in expr.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key,
                      "DoesNotExist": f"!{key}"}.get(op, f"{key} {op} ({values})"))
    return "{" + ", ".join(parts) + "}"


def _service_monitor(ks: Applied, obj: dict, cluster: _Cluster) -> Iterator[Finding]:
    spec, ns, oid = _spec(obj), _ns(obj), object_id(obj)
    nsel = _as_dict(spec.get("namespaceSelector"))
    selector = spec.get("selector") or {}
    names = nsel.get("matchNames")
    namespaces: list[str | None] = list(cluster.services) if nsel.get("any") else \
        [str(n) for n in names] if isinstance(names, list) and names else [ns]
    match = selector.get("matchLabels") if isinstance(selector, dict) else None
    if isinstance(match, dict) and match:  # looked up through one of its labels rather than against every Service
        key, value = next(iter(match.items()))
        candidates = [s for n in namespaces for s in cluster.services_by_label.get((n, str(key), str(value)), [])]
    else:
        candidates = [s for n in namespaces for s in cluster.services.get(n, [])]
    selected = [s for s in candidates if selector_matches(selector, cluster.service_labels[id(s)])]
    if not selected:
        scope = "any namespace" if nsel.get("any") else \
            "namespace " + ", ".join(map(str, nsel.get("matchNames") or [ns]))
        text = f"selector {_fmt_selector(spec.get('selector') or {})} matches no Service in {scope}"
        match = _as_dict(_as_dict(selector).get("matchLabels"))
        ours = any(cluster.services_by_label.get((n, str(k), str(v))) for n in namespaces for k, v in match.items())
        who = [] if ours or nsel.get("any") else _unchecked(cluster, list(namespaces), _hint(match))
        yield SERVICEMONITOR_SELECTS_NOTHING.finding(
            f"{text}; {runtime.not_checked(who, 'the Service')}" if who else f"{text}: Prometheus scrapes nothing",
            path=ks.path, object=oid, severity="info" if who else None)
        return
    for endpoint in spec.get("endpoints") or []:
        port = endpoint.get("port") if isinstance(endpoint, dict) else None
        if port and not any(p.get("name") == port for s in selected for p in _spec(s).get("ports") or []
                            if isinstance(p, dict)):
            yield SERVICEMONITOR_SELECTS_NOTHING.finding(
                f"endpoint port {port!r} is not a named port of the selected Service(s) "
                f"({', '.join(object_id(s) for s in selected)}): that endpoint is never scraped",
                path=ks.path, object=oid)


def _storage_classes(provides: ClusterProvides, all_objects: Iterable[dict]) -> tuple[dict[str, Any], str | None]:
    """name -> (rwx or None when unknown, binding mode), and the default class name."""
    classes: dict[str, Any] = {c.name: (c.rwx, c.binding_mode) for c in provides.storage_classes}
    declared = provides.default_class()
    default = declared.name if declared else None
    for obj in all_objects:
        if obj.get("kind") == "StorageClass":
            mode = str(obj.get("volumeBindingMode") or "Immediate")
            known = classes.get(_name(obj))
            classes[_name(obj)] = (known[0] if known else None, mode)
            annotations = _meta(obj).get("annotations") or {}
            if str(annotations.get("storageclass.kubernetes.io/is-default-class")) == "true":
                default = default or _name(obj)
    return classes, default


def _wait_findings(ks: Applied, objects: list[dict], provides: ClusterProvides,
                   storage: tuple[dict[str, Any], str | None], cluster: _Cluster) -> Iterator[Finding]:
    """`wait: true` Kustomizations: PersistentVolumeClaims that never bind with the StorageClasses `storage`
    (`_storage_classes` of the cluster)."""
    if not ks.waits:
        return
    classes, default = storage
    mounted = {str((v.get("persistentVolumeClaim") or {}).get("claimName"))
               for o in objects if o.get("kind") in WORKLOADS for t in pod_templates(o)
               for v in _spec(t).get("volumes") or [] if isinstance(v, dict) and v.get("persistentVolumeClaim")}
    for obj in objects:
        if obj.get("kind") != "PersistentVolumeClaim" or _group(obj) != "":
            continue
        spec, oid = _spec(obj), object_id(obj)
        modes = [str(m) for m in spec.get("accessModes") or []]
        rwx = "ReadWriteMany" in modes
        named = spec.get("storageClassName")
        if named == "" or spec.get("volumeName"):
            continue  # bound statically to a PersistentVolume
        where = f"Kustomization {ks.name} waits for it (wait: true)"
        cls = named or default
        if cls is None:
            if rwx:
                yield WAIT_NEVER_HEALTHY.finding(
                    f"ReadWriteMany PVC without storageClassName binds only through the cluster's default "
                    "StorageClass, and kubectl-triton.yaml declares none (cluster.provides.storageClasses with "
                    f"default: true, rwx: true): on a default class that is ReadWriteOnce it stays Pending and "
                    f"{where} forever", path=ks.path, object=oid)
            continue
        if cls not in classes:
            if provides.storage_classes:
                text = f"storageClassName {cls} is neither a StorageClass of this repository nor declared in " \
                       "kubectl-triton.yaml"
                who = cluster.creators.cluster_wide(cls)
                yield WAIT_NEVER_HEALTHY.finding(
                    f"{text}; {runtime.not_checked(who, 'the StorageClass')}" if who else
                    f"{text}: the PVC stays Pending and {where} forever", path=ks.path, object=oid,
                    severity="info" if who else None)
            continue
        can_rwx, mode = classes[cls]
        if rwx and can_rwx is False:
            yield WAIT_NEVER_HEALTHY.finding(
                f"ReadWriteMany PVC on StorageClass {cls}, which kubectl-triton.yaml declares without rwx: it never "
                f"binds and {where} forever", path=ks.path, object=oid)
        elif mode == "WaitForFirstConsumer" and _name(obj) not in mounted:
            yield WAIT_NEVER_HEALTHY.finding(
                f"StorageClass {cls} binds on first consumer (WaitForFirstConsumer) and no pod of this "
                f"Kustomization mounts the PVC: it stays Pending and {where} forever", path=ks.path, object=oid)


def cycles(applied: list[Applied]) -> list[list[Applied]]:
    """Each dependsOn circle once (as the Kustomizations along it, starting from the smallest key)."""
    by_key = {ks.key: ks for ks in applied}
    found: dict[tuple[tuple[str, str], ...], list[Applied]] = {}

    def walk(ks: Applied, path: list[Applied]) -> None:
        if ks in path:
            circle = path[path.index(ks):]
            start = min(range(len(circle)), key=lambda i: circle[i].key)
            circle = circle[start:] + circle[:start]
            found.setdefault(tuple(k.key for k in circle), circle)
            return
        if len(path) > len(applied):
            return
        for dep in ks.depends:
            if dep in by_key:
                walk(by_key[dep], [*path, ks])

    for ks in applied:
        walk(ks, [])
    return list(found.values())


def _context(applied: list[Applied], effective: dict[int, list[dict]], all_objects: list[dict]) -> _Context:
    """What each Kustomization of the cluster provides, as the order findings' hints need it."""
    everywhere = Provided()
    installers: dict[str, list[Applied]] = defaultdict(list)
    for ks in applied:
        own = Provided()
        add_from(own, ks, effective[id(ks)], True, all_objects)
        for group in {*own.groups, *own.unawaited}:
            installers[group].append(ks)
        everywhere.merge(own)
    return _Context(everywhere, dict(installers), list(everywhere.suspects), cluster_scoped(all_objects),
                    {ks.key: ks for ks in applied})


def check_cluster(applied: list[Applied], provides: ClusterProvides, flux_namespace: str = "flux-system",
                  outside: Iterable[Applied] = ()) -> list[Finding]:
    """Every convergence finding of one cluster's Flux Kustomizations (`outside`: Kustomizations that apply some
    of them without being of this cluster folder, e.g. the cluster folder itself as flux bootstrap applies it)."""
    out_cycles = [DEPENDENCY_CYCLE.finding(
        "dependsOn circle " + " -> ".join(k.name for k in [*circle, circle[0]]) + ": Flux waits on it forever",
        path=circle[0].file, object=f"Kustomization/{circle[0].namespace}/{circle[0].name}")
        for circle in cycles(applied)]
    sim = Simulation(applied, provides, flux_namespace, outside=outside)
    effective = {id(ks): sim.objects(ks) for ks in applied}
    all_objects = sim.all_objects
    cluster = _Cluster()
    for obj in all_objects:
        cluster.add(obj)
    context = _context(applied, effective, all_objects)
    out: list[Finding] = out_cycles
    storage = _storage_classes(provides, all_objects)
    for ks in applied:
        if ks.objects is None:
            continue
        objects = effective[id(ks)]
        have = sim.have(ks)
        if have is not None:
            order = _order_findings(ks, objects, have, context)
            out.extend(replace(f, severity="warning", message=f"{f.message}; not checked further: it applies to "
                               "another cluster (spec.kubeConfig), whose CRDs and namespaces are not simulated")
                       if ks.remote and f.severity == "error" else f for f in order)
        out.extend(_reference_findings(ks, objects, cluster, provides))
        out.extend(_wait_findings(ks, objects, provides, storage, cluster))
    return out


@dataclass
class ClusterApplied:
    """One cluster folder and the Flux Kustomizations it holds, with what each applies. `root`: the cluster
    folder itself, when no Flux Kustomization of the repository applies it (flux bootstrap's, or the
    FluxInstance's sync, does): what it holds exists before the Kustomizations it declares run."""

    folder: Path
    applied: list[Applied]
    flux_namespace: str
    root: Applied | None = None


def _objects_at(root: Path, path: Path, target: Any, rendered: dict[Path, list[dict] | None]
                ) -> tuple[list[dict] | None, list[dict] | None, tuple[str, ...]]:
    """(rendered objects, objects Flux would generate, unread sub-folders) of a folder of this repository
    (`target`: its render, if any)."""
    if target is not None and target.result is not None:
        return target.objects, None, ()
    top = repo.resolved(root)
    if path.is_dir() and (path == top or top in path.parents) and repo.kustomization_file(path) is None:
        objects, unread = generated(root, path, rendered)
        return None, objects, tuple(unread)
    return None, None, ()


def clusters_applied(root: Path, targets: list[Any]) -> list[ClusterApplied]:
    """Every cluster folder's Flux Kustomizations over the rendered targets of a validate run."""
    by_path: dict[Path, Any] = {}
    by_ks: dict[tuple[str, str, str], Any] = {}  # (file, namespace, name) -> the target built as it applies it
    for t in targets:
        known = by_path.get(t.path)
        if known is None or (known.result is None and t.result is not None):
            by_path[t.path] = t  # one render of the folder (a rendered one, where there is one)
        for applying in getattr(t, "kustomizations", None) or []:
            by_ks[(str(applying.file), applying.namespace, applying.name)] = t
    rendered = {p: t.objects for p, t in by_path.items() if t.result is not None}
    layout = Repository.at(root, tolerant=True).layout
    own = (layout.source_kind, layout.source_name)
    out: list[ClusterApplied] = []
    applied_paths: set[Path] = set()
    for cluster_dir in repo.clusters(root, tolerant=True):
        applied = []
        flux_ns = _data()["flux"]["namespace"]
        for ks in repo.flux_kustomizations(root, cluster_dir, tolerant=True):
            path = repo.resolved(root / ks.path)
            spec = _as_dict(ks.obj.get("spec"))
            if path == repo.resolved(cluster_dir):
                flux_ns = ks.namespace
            foreign = ks.source_ref[:2] != own and ks.source_ref[0] != ""  # applies another source's files
            target = by_ks.get((str(ks.file), ks.namespace, ks.name)) or by_path.get(path)
            objects, made, unread = (None, None, ()) if foreign else _objects_at(root, path, target, rendered)
            if not foreign:
                applied_paths.add(path)
            applied.append(Applied(ks.name, ks.namespace, repo.relative(root, ks.file), repo.relative(root, path),
                                   spec, objects, made, unread, foreign=foreign))
        out.append(ClusterApplied(cluster_dir, applied, flux_ns))
    for cluster in out:
        folder = repo.resolved(cluster.folder)
        if folder not in applied_paths:
            objects, made, unread = _objects_at(root, folder, by_path.get(folder), rendered)
            rel = repo.relative(root, folder)
            cluster.root = Applied(f"cluster folder {rel}", cluster.flux_namespace, rel, rel, {}, objects, made,
                                   unread, root=True)
    return out


def check(root: Path, targets: list[Any], provides: ClusterProvides) -> list[Finding]:
    """validate's hook: one simulation per cluster folder, over the rendered Flux Kustomization paths. A
    Kustomization may be applied by one of another cluster folder (a layout whose cluster folders are the
    repository's top folders: kubernetes/flux applies kubernetes/apps): those count as its parents."""
    clusters = clusters_applied(root, targets)
    installed = bootstrap.releases(root)
    names = [repo.relative(root, c.folder) for c in clusters]
    flux_clusters = [n for c, n in zip(clusters, names, strict=True) if c.applied] or names
    out: list[Finding] = []
    for cluster, name in zip(clusters, names, strict=True):
        outside = [*([cluster.root] if cluster.root is not None else []),
                   *(ks for other in clusters if other is not cluster for ks in other.applied)]
        here, added = with_bootstrap(provides, bootstrap.for_cluster(installed, name, flux_clusters))
        if cluster.applied and added:
            out.append(_bootstrap_finding(name, added))
        out.extend(check_cluster(cluster.applied, here, cluster.flux_namespace, outside))
    return out


def with_bootstrap(provides: ClusterProvides, releases: list[bootstrap.Release]
                   ) -> tuple[ClusterProvides, dict[tuple[str, str], bootstrap.Release]]:
    """`provides` and what the cluster's bootstrap installs before Flux runs: the namespaces of its helmfile
    releases and templates, and the CRDs of its charts (those this plugin has data on, as their inline values
    switch them); with what the bootstrap added, ("namespace" or "crd", name) -> the release that installs it."""
    namespaces, groups = set(provides.namespaces), set(provides.crds)
    added: dict[tuple[str, str], bootstrap.Release] = {}
    for release in releases:
        if release.creates_namespace and release.namespace and release.namespace not in namespaces:
            namespaces.add(release.namespace)
            added[("namespace", release.namespace)] = release
        for group in crds.chart_crds_with(release.chart, release.values) if release.chart else ():
            if group not in groups:
                groups.add(group)
                added[("crd", group)] = release
    who = {**dict(provides.providers), **{what: release.provider for what, release in added.items()}}
    return replace(provides, namespaces=frozenset(namespaces), crds=frozenset(groups),
                   providers=tuple(sorted(who.items()))), added


def _bootstrap_finding(cluster: str, added: dict[tuple[str, str], bootstrap.Release]) -> Finding:
    files = sorted({release.file for release in added.values()})
    groups = sorted(name for kind, name in added if kind == "crd")
    spaces = sorted(name for kind, name in added if kind == "namespace")
    parts = ([f"the CRDs of {', '.join(groups)}"] if groups else []) + \
        ([f"namespaces {', '.join(spaces)}"] if spaces else [])
    return BOOTSTRAP_INSTALLED.finding(f"counted as there before Flux runs, installed by the bootstrap "
                                      f"({', '.join(files)}): {'; '.join(parts)}", path=cluster)
