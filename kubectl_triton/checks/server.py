"""`validate --server`: every cluster folder's rendered objects applied to a real Kubernetes API server, in Flux's
order, and the server's own refusals reported as findings.

For each cluster folder the Flux Kustomizations are taken in `dependsOn` order; within one, CustomResourceDefinitions
and Namespaces go first, then every other object (kustomize-controller's order). Each object is sent as a
server-side apply with strict field validation, as kustomize-controller sends it, so the API server judges it
whole: its schema (unknown fields included), admission (PodSecurity, LimitRanger, webhooks, ValidatingAdmissionPolicy)
and immutable fields against what the cluster holds.

Two targets (`Target`):
- a user's cluster (a kube context): everything is a dry run (`dryRun=All`); nothing is written. A namespace or
  CRD that this repository creates but the cluster does not have yet cannot be judged there (`ServerNotChecked`).
- an ephemeral control plane (`adapters.controlplane`), one per cluster folder: CRDs and Namespaces are really
  applied (as Flux does first), everything else is a dry run. Before the first Kustomization the CRDs Flux
  bootstrap installs are applied; before each Kustomization those that the HelmReleases of its `dependsOn` line
  install (charts from `chart_crds.yaml`, manifests from the control-plane build cache).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubectl_triton.adapters import kube as kube_adapter
from kubectl_triton.adapters.controlplane import ControlPlane
from kubectl_triton.adapters.kube import HttpError, Kube
from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.manifests import convergence
from kubectl_triton.checks.registry import register
from kubectl_triton.errors import ClusterError, InputError
from kubectl_triton.formats import yamlio
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops.layout import ClusterProvides

SERVER_REJECTED = register(
    "ServerRejected", "error", "cluster",
    "The Kubernetes API server refuses an object as Flux applies it (server-side apply with strict field "
    "validation): an unknown or invalid field, a CRD schema violation, an immutable field, an admission refusal "
    "(PodSecurity, quotas, webhooks), or a namespace or CRD that does not exist yet at that point of the order.",
    "Fix the object as the API server's message says; for a missing namespace or CRD, create it in the same "
    "Kustomization or one this Kustomization `dependsOn`.")
SERVER_NOT_CHECKED = register(
    "ServerNotChecked", "info", "cluster",
    "An object `validate --server` could not put to the API server: its CRD's manifest is not at hand, or (on a "
    "real cluster, dry run only) its namespace or CRD is created by this repository and absent from the cluster.",
    "Nothing to fix in the repository; run `validate --server` against the ephemeral control plane (no context) "
    "to judge it from a fresh cluster.")

SERVER_WARNING = register(
    "ServerWarning", "warning", "cluster",
    "The API server accepts an object with a warning: a deprecated API or field, or a pod template that a "
    "namespace's PodSecurity `warn`/`audit` level (not `enforce`) would flag.",
    "Do as the warning says (move to the API version it names, or bring the pod template within the policy).")
POD_SECURITY_REFUSED = register(
    "PodSecurityRefused", "error", "cluster",
    "A workload's pod template violates the PodSecurity level its namespace enforces: the API server accepts "
    "the Deployment (or Job, StatefulSet, LeaderWorkerSet) with a warning and then refuses every pod of it.",
    "Bring the pod template within the enforced level (securityContext: runAsNonRoot, drop ALL capabilities, "
    "no privilege escalation, seccompProfile RuntimeDefault), or lower the namespace's "
    "pod-security.kubernetes.io/enforce label with a reviewed reason.")

FIELD_MANAGER = "kustomize-controller"  # the field manager Flux applies with
CRD_ESTABLISH_TIMEOUT = 30.0
FIRST = ("CustomResourceDefinition", "Namespace")


@dataclass
class Target:
    """Where --server applies: a connected user cluster (dry run only), or a factory of ephemeral clusters."""

    kube: Kube | None = None  # a user's cluster
    ephemeral: Callable[[], Any] | None = None  # returns a context manager yielding a Kube (real writes allowed)
    crds: dict[str, list[dict]] = field(default_factory=dict)  # group -> CRD manifests at hand

    @property
    def dry_run_only(self) -> bool:
        return self.kube is not None


def load_crds(folder: Path | None) -> dict[str, list[dict]]:
    """CRD manifests under `folder` (--crds, or the control-plane build cache's crds/), by API group."""
    out: dict[str, list[dict]] = {}
    if folder is None:
        return out
    for path in sorted([*folder.rglob("*.yaml"), *folder.rglob("*.yml")]):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"{path}: cannot read CRD manifests: {getattr(err, 'strerror', None) or err}") from None
        for doc in yamlio.loads_all(text, str(path)):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                group = str((doc.get("spec") or {}).get("group") or "")
                out.setdefault(group, []).append(doc)
    return out


# ------------------------------------------------------------------------------------------------ the API server


class _Server:
    """One API server: resource discovery per group version, applies, and CRDs installed for real."""

    def __init__(self, kube: Kube, dry_run_only: bool) -> None:
        self.kube = kube
        self.dry_run_only = dry_run_only
        self._resources: dict[str, dict[str, tuple[str, bool]] | None] = {}
        self.namespaces_applied: set[str] = set()  # created here (ephemeral) or dry-run applied (user cluster)
        self.groups_installed: set[str] = set()

    def resource(self, api_version: str, kind: str) -> tuple[str, bool] | None:
        """(plural, namespaced) of a kind the server serves now; None when it serves no such kind."""
        if api_version not in self._resources:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            doc = self.kube.get_path(path, f"discovery {api_version}")
            if isinstance(doc, HttpError):
                if doc.status not in (404, 503):
                    raise ClusterError(f"discovery of {api_version} failed: API server answered {doc.status}")
                self._resources[api_version] = None
            else:
                self._resources[api_version] = {
                    str(r["kind"]): (str(r["name"]), bool(r.get("namespaced")))
                    for r in doc.get("resources") or [] if "/" not in str(r.get("name", ""))}
        kinds = self._resources[api_version]
        return None if kinds is None else kinds.get(kind)

    def forget(self, group: str) -> None:
        for api_version in [v for v in self._resources if v.rsplit("/", 1)[0] == group and "/" in v]:
            del self._resources[api_version]

    def path(self, obj: dict, plural: str, namespaced: bool) -> str:
        api_version = str(obj.get("apiVersion"))
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        meta = obj.get("metadata") or {}
        if namespaced:
            base += f"/namespaces/{meta.get('namespace') or 'default'}"
        return f"{base}/{plural}/{meta.get('name')}"

    def apply(self, obj: dict, *, dry_run: bool) -> tuple[dict, list[str]] | HttpError | None:
        """Apply `obj`: the result and the server's warnings, or its refusal; None when the server serves no such
        kind (the caller says why)."""
        found = self.resource(str(obj.get("apiVersion")), str(obj.get("kind")))
        if found is None:
            return None
        result = self.kube.apply(self.path(obj, *found), obj, dry_run=dry_run or self.dry_run_only,
                                 field_manager=FIELD_MANAGER, what=object_id(obj))
        if isinstance(result, HttpError) and result.status == 403 and _rbac_denial(result):
            raise ClusterError(f"forbidden: dry-run apply of {object_id(obj)}: {_message(result)}",
                               hint="bind the validate-server ClusterRole of rbac/ to your user")
        return result

    def enforced_level(self, namespace: str) -> str | None:
        """The PodSecurity level a namespace enforces on the server (None: privileged, or no such namespace)."""
        doc = self.kube.get_path(f"/api/v1/namespaces/{namespace}", f"namespace {namespace}")
        if isinstance(doc, HttpError):
            return None
        level = ((doc.get("metadata") or {}).get("labels") or {}).get("pod-security.kubernetes.io/enforce")
        return None if level in (None, "privileged") else str(level)

    def install_crd(self, crd: dict) -> HttpError | None:
        """Apply a CRD for real (ephemeral clusters only) and wait until the server serves its kinds."""
        return self.install_crds([crd]).get(str((crd.get("metadata") or {}).get("name")))

    def install_crds(self, crds: list[dict]) -> dict[str, HttpError]:
        """Apply CRDs for real, all first, then wait until the server serves each; the refused ones by name."""
        refused: dict[str, HttpError] = {}
        applied = []
        for crd in crds:
            result = self.apply(crd, dry_run=False)
            if isinstance(result, HttpError):
                refused[str((crd.get("metadata") or {}).get("name"))] = result
            elif result is not None:
                applied.append(crd)
        deadline = time.monotonic() + CRD_ESTABLISH_TIMEOUT
        for crd in applied:
            group = str((crd.get("spec") or {}).get("group"))
            name = str((crd.get("metadata") or {}).get("name"))
            while time.monotonic() < deadline:
                doc = self.kube.get_path(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", name)
                conditions = {} if isinstance(doc, HttpError) else {
                    c.get("type"): c.get("status") for c in (doc.get("status") or {}).get("conditions") or []}
                if conditions.get("Established") == "True":
                    break
                time.sleep(0.05)
            self.forget(group)
            kind = str(((crd.get("spec") or {}).get("names") or {}).get("kind"))
            served = [v["name"] for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served")]
            while served and time.monotonic() < deadline and self.resource(f"{group}/{served[0]}", kind) is None:
                self.forget(group)
                time.sleep(0.05)
            self.groups_installed.add(group)
        return refused


def _message(err: HttpError) -> str:
    body = err.body.decode("utf-8", "replace") if isinstance(err.body, bytes) else str(err.body or "")
    try:
        doc = json.loads(body)
    except ValueError:
        return (body.strip().splitlines() or [err.reason or str(err.status)])[0]
    return str(doc.get("message") or err.reason or err.status) if isinstance(doc, dict) else body


def _rbac_denial(err: HttpError) -> bool:
    """A 403 from the authorizer (the user may not patch), not from an admission plugin or webhook."""
    text = _message(err)
    return " cannot " in text and "User " in text and "admission" not in text


def _missing_namespace(err: HttpError) -> str | None:
    if err.status != 404:
        return None
    match = re.search(r'namespaces "([^"]+)" not found', _message(err))
    return match[1] if match else None


# ------------------------------------------------------------------------------------------------ the check


def _order(applied: list[convergence.Applied]) -> list[convergence.Applied]:
    """Kustomizations in dependsOn order (ties by file and name); members of a cycle are left out (reported
    as FluxDependencyCycle)."""
    by_key = {ks.key: ks for ks in applied}
    done: list[convergence.Applied] = []
    placed: set[tuple[str, str]] = set()
    pending = sorted(applied, key=lambda k: (k.file, k.namespace, k.name))
    while pending:
        ready = [ks for ks in pending if all(d in placed or d not in by_key for d in ks.depends)]
        if not ready:
            break
        for ks in ready:
            done.append(ks)
            placed.add(ks.key)
        pending = [ks for ks in pending if ks.key not in placed]
    return done


def _where(ks: convergence.Applied) -> str:
    return f"Kustomization {ks.namespace}/{ks.name} ({ks.file})"


def check_cluster(server: _Server, applied: list[convergence.Applied], provides: ClusterProvides,
                  flux_namespace: str, crds: dict[str, list[dict]]) -> list[Finding]:
    """Apply one cluster folder's Kustomizations to `server`, in order; the server's refusals as findings."""
    out: list[Finding] = []
    before = convergence.provisions(applied, provides, flux_namespace)
    created_here: dict[str, str] = {}  # namespace or group -> what creates it (this repository, flux bootstrap)
    if not server.dry_run_only:
        _ensure_namespace(server, flux_namespace)
        for ns in provides.namespaces:
            _ensure_namespace(server, ns)
    for ks in _order(applied):
        if ks.objects is None:
            continue  # unrendered, or another source's files: reported elsewhere
        objects = convergence.effective_objects(ks)
        unavailable: dict[str, str] = {}  # group -> why its CRD could not be installed
        own = f"Kustomization {ks.name} ("  # its own CRDs are applied with its objects
        wanted: dict[str, str] = {}  # group -> who installs it, for the CRDs installed before this Kustomization
        have = before.get(ks.key, convergence.Provided())
        if not server.dry_run_only:
            for ns, source in sorted(have.namespaces.items()):
                if source.startswith("HelmRelease "):  # install.createNamespace: Helm creates it
                    _ensure_namespace(server, ns)
            for group, source in sorted(have.groups.items()):
                if group in server.groups_installed or source == "Kubernetes" or source.startswith(own):
                    continue
                if group not in crds:
                    unavailable[group] = source
                    continue
                wanted[group] = source
            for name, refusal in server.install_crds([c for g in wanted for c in crds[g]]).items():
                group = name.split(".", 1)[1] if "." in name else name
                unavailable[group] = f"{wanted.get(group, group)}; its CRD {name} was refused: {_message(refusal)}"
        first = [o for o in objects if o.get("kind") in FIRST]
        rest = [o for o in objects if o.get("kind") not in FIRST]
        if server.dry_run_only:  # what the repository (or flux bootstrap) makes that this cluster may lack yet
            for ns, source in have.namespaces.items():
                if source != "Kubernetes":
                    created_here.setdefault(ns, source)
            for group, source in have.groups.items():
                if source != "Kubernetes":
                    created_here.setdefault(group, source)
        for obj in first + rest:
            out.extend(_judge(server, ks, obj, unavailable, created_here))
            if obj.get("kind") == "Namespace":
                created_here.setdefault(str((obj.get("metadata") or {}).get("name")), _where(ks))
            elif obj.get("kind") == "CustomResourceDefinition":
                created_here.setdefault(str((obj.get("spec") or {}).get("group")), _where(ks))
    return out


def _ensure_namespace(server: _Server, name: str) -> None:
    if name in server.namespaces_applied:
        return
    result = server.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, dry_run=False)
    if isinstance(result, HttpError):
        raise ClusterError(f"ephemeral control plane: cannot create namespace {name}: {_message(result)}")
    server.namespaces_applied.add(name)


def _judge(server: _Server, ks: convergence.Applied, obj: dict, unavailable: dict[str, str],
           created_here: dict[str, str]) -> Iterator[Finding]:
    oid = object_id(obj)
    api_version = str(obj.get("apiVersion", ""))
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    first = obj.get("kind") in FIRST
    result: tuple[dict, list[str]] | HttpError | None
    if obj.get("kind") == "CustomResourceDefinition" and not server.dry_run_only:
        refused = server.install_crd(obj)
        result = refused if refused is not None else ({}, [])
    else:
        result = server.apply(obj, dry_run=not first)
    if result is None:
        if group in unavailable:
            yield SERVER_NOT_CHECKED.finding(
                f"{_where(ks)}: {oid} not put to the API server: no manifest of its CRD ({group}) is at hand "
                f"(installed by {unavailable[group]})", path=ks.path, object=oid)
        elif server.dry_run_only and group in created_here:
            yield SERVER_NOT_CHECKED.finding(
                f"{_where(ks)}: {oid} not put to the API server: the cluster has no {group} CRD yet "
                f"(installed by {created_here[group]})", path=ks.path, object=oid)
        else:
            yield SERVER_REJECTED.finding(
                f"{_where(ks)}: the API server serves no {obj.get('kind')} in {api_version}: no CRD of that "
                "kind is installed before this Kustomization is applied", path=ks.path, object=oid)
        return
    if isinstance(result, tuple):
        if obj.get("kind") == "Namespace":
            server.namespaces_applied.add(str((obj.get("metadata") or {}).get("name")))
        yield from _warnings(server, ks, obj, result[1])
        return
    namespace = _missing_namespace(result)
    if namespace is not None and server.dry_run_only and namespace in created_here:
        yield SERVER_NOT_CHECKED.finding(
            f"{_where(ks)}: {oid} not put to the API server: namespace {namespace} does not exist on the cluster "
            f"yet (created by {created_here[namespace]})", path=ks.path, object=oid)
        return
    message = _message(result)
    if namespace is not None:
        message = f"namespace {namespace} does not exist when this Kustomization is applied ({message})"
    yield SERVER_REJECTED.finding(f"{_where(ks)}: the API server refuses {oid}: {message}",
                                  path=ks.path, object=oid)


@contextmanager
def ephemeral_cluster(assets: Any) -> Iterator[Kube]:
    """A fresh etcd and kube-apiserver from `assets` (adapters.controlplane.Assets), connected as an admin."""
    with ControlPlane(assets) as plane:
        yield kube_adapter.connect(str(plane.kubeconfig_for("validate-server", ["system:masters"])))


def _warnings(server: _Server, ks: convergence.Applied, obj: dict, warnings: list[str]) -> Iterator[Finding]:
    oid = object_id(obj)
    for text in warnings:
        policy = re.match(r'would violate PodSecurity "([a-z]+):[^"]*"', text)
        namespace = str((obj.get("metadata") or {}).get("namespace") or "default")
        if policy and obj.get("kind") != "Pod" and server.enforced_level(namespace) == policy[1]:
            yield POD_SECURITY_REFUSED.finding(
                f"{_where(ks)}: namespace {namespace} enforces PodSecurity {policy[1]!r}: every pod of {oid} "
                f"would be refused ({text})", path=ks.path, object=oid)
        else:
            yield SERVER_WARNING.finding(f"{_where(ks)}: {oid}: {text}", path=ks.path, object=oid)


def check(root: Path, targets: list[Any], provides: ClusterProvides, target: Target) -> list[Finding]:
    """validate's hook: every cluster folder against the API server of `target`."""
    out: list[Finding] = []
    for cluster in convergence.clusters_applied(root, targets):
        if target.kube is not None:
            out.extend(check_cluster(_Server(target.kube, True), cluster.applied, provides, cluster.flux_namespace,
                                     target.crds))
            continue
        assert target.ephemeral is not None
        with target.ephemeral() as kube:
            out.extend(check_cluster(_Server(kube, False), cluster.applied, provides, cluster.flux_namespace,
                                     target.crds))
    return out
