"""The apply-order simulation on the layouts real Flux fleets use (issue 28): who installs a CRD (charts through
spec.chartRef, the values that switch their CRDs, a CRD installed elsewhere, the platform's), the namespaces a
parent Kustomization or the cluster folder creates before the child runs, and objects created at run time (by Helm
charts, operators, the platform) said "not checked" instead of reported as errors. Synthetic fixtures written here,
table-driven: each case asserts the findings' codes, objects and severities."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubectl_triton.checks.manifests import crds, runtime
from kubectl_triton.checks.manifests.convergence import Applied, check_cluster
from kubectl_triton.gitops.layout import ClusterProvides

CODES = ("CRDMissing", "NamespaceMissing", "RouteBackendMissing", "ServiceMonitorSelectsNothing",
         "ServiceSelectsNothing", "PodDisruptionBudgetSelectsNothing", "SecretMissing")


# ---- objects ---------------------------------------------------------------------------------------------------


def _obj(api: str, kind: str, name: str, ns: str | None = None, spec: dict | None = None,
         labels: dict | None = None) -> dict:
    meta: dict[str, Any] = {"name": name}
    if ns:
        meta["namespace"] = ns
    if labels:
        meta["labels"] = labels
    out: dict[str, Any] = {"apiVersion": api, "kind": kind, "metadata": meta}
    if spec is not None:
        out["spec"] = spec
    return out


def _ns(name: str) -> dict:
    return _obj("v1", "Namespace", name)


def _cm(name: str, ns: str | None = None) -> dict:
    return _obj("v1", "ConfigMap", name, ns)


def _oci(name: str, ns: str, url: str) -> dict:
    return _obj("source.toolkit.fluxcd.io/v1", "OCIRepository", name, ns, {"url": url, "ref": {"tag": "1.0.0"}})


def _release(name: str, ns: str, *, chart: str | None = None, ref: tuple[str, str] | None = None,
             values: dict | None = None, **extra: Any) -> dict:
    spec: dict[str, Any] = {"interval": "1h", **extra}
    if chart:
        spec["chart"] = {"spec": {"chart": chart, "sourceRef": {"kind": "HelmRepository", "name": "charts"}}}
    if ref:
        spec["chartRef"] = {"kind": ref[0], "name": ref[1]}
    if values is not None:
        spec["values"] = values
    return _obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", name, ns, spec)


def _child(name: str, path: str, **spec: Any) -> dict:
    """A Flux Kustomization object as a parent renders it."""
    return _obj("kustomize.toolkit.fluxcd.io/v1", "Kustomization", name, "flux-system",
                {"interval": "1h", "path": f"./{path}", "prune": True,
                 "sourceRef": {"kind": "GitRepository", "name": "flux-system"}, **spec})


def _issuer(name: str = "letsencrypt") -> dict:
    return _obj("cert-manager.io/v1", "ClusterIssuer", name, spec={"selfSigned": {}})


def _ks(name: str, objects: list[dict] | None, **spec: Any) -> Applied:
    return Applied(name, "flux-system", f"clusters/prod/{name}.yaml", f"infra/{name}", dict(spec), objects)


def _found(applied: list[Applied], provides: ClusterProvides | None = None,
           outside: list[Applied] | None = None) -> set[tuple[str, str, str]]:
    return {(f.code, str(f.object), f.severity)
            for f in check_cluster(applied, provides or ClusterProvides(), outside=outside or [])}


def _messages(applied: list[Applied], code: str, outside: list[Applied] | None = None) -> list[str]:
    return [f.message for f in check_cluster(applied, ClusterProvides(), outside=outside or []) if f.code == code]


CERT_MANAGER_OCI = _oci("cert-manager", "cert-manager", "oci://quay.io/jetstack/charts/cert-manager")
ISSUED = ("CRDMissing", "ClusterIssuer/letsencrypt")


# ---- who installs a CRD ---------------------------------------------------------------------------------------

CRD_CASES = {
    # chartRef to an OCIRepository: the chart is the URL's last segment; crds.enabled switches cert-manager's CRDs
    "chartRef OCIRepository, crds.enabled": (
        [_ns("cert-manager"), CERT_MANAGER_OCI,
         _release("cert-manager", "cert-manager", ref=("OCIRepository", "cert-manager"),
                  values={"crds": {"enabled": True}})], {"wait": True}, set()),
    "the deprecated installCRDs": (
        [_ns("cert-manager"), CERT_MANAGER_OCI,
         _release("cert-manager", "cert-manager", ref=("OCIRepository", "cert-manager"), values={"installCRDs": True})],
        {"wait": True}, set()),
    "cert-manager's CRDs default to off": (
        [_ns("cert-manager"), CERT_MANAGER_OCI,
         _release("cert-manager", "cert-manager", ref=("OCIRepository", "cert-manager"))],
        {"wait": True}, {(*ISSUED, "error")}),
    "install.crds Skip wins over the values": (
        [_ns("cert-manager"), CERT_MANAGER_OCI,
         _release("cert-manager", "cert-manager", ref=("OCIRepository", "cert-manager"),
                  values={"crds": {"enabled": True}}, install={"crds": "Skip"})],
        {"wait": True}, {(*ISSUED, "error")}),
    "a tag in the OCI URL": (
        [_ns("cert-manager"), _oci("cert-manager", "cert-manager", "oci://ghcr.io/mirror/charts/cert-manager:v1.16"),
         _release("cert-manager", "cert-manager", ref=("OCIRepository", "cert-manager"),
                  values={"crds": {"enabled": True}})], {"wait": True}, set()),
    "chartRef to a HelmChart": (
        [_ns("cert-manager"),
         _obj("source.toolkit.fluxcd.io/v1", "HelmChart", "cert-manager", "cert-manager",
              {"chart": "cert-manager", "sourceRef": {"kind": "HelmRepository", "name": "jetstack"}}),
         _release("cert-manager", "cert-manager", ref=("HelmChart", "cert-manager"),
                  values={"crds": {"enabled": True}})], {"wait": True}, set()),
    "valuesFrom may switch a default-off chart on: not checked": (
        [_ns("cert-manager"), CERT_MANAGER_OCI,
         _release("cert-manager", "cert-manager", ref=("OCIRepository", "cert-manager"),
                  valuesFrom=[{"kind": "ConfigMap", "name": "values"}])],
        {"wait": True}, {(*ISSUED, "warning")}),
    "an unawaited installer": (
        [_ns("cert-manager"), CERT_MANAGER_OCI,
         _release("cert-manager", "cert-manager", ref=("OCIRepository", "cert-manager"),
                  values={"crds": {"enabled": True}})], {}, {(*ISSUED, "warning")}),
    "a chart without data, named like the group: not checked": (
        [_release("cert-manager", "cert-manager", chart="cert-manager-fork")], {"wait": True},
        {(*ISSUED, "warning")}),
}


@pytest.mark.parametrize("installer, installer_spec, expected", CRD_CASES.values(), ids=CRD_CASES.keys())
def test_who_installs_the_crd(installer: list[dict], installer_spec: dict, expected: set):
    infra = _ks("cert-manager", installer, **installer_spec)
    issuers = _ks("issuers", [_issuer()], dependsOn=[{"name": "cert-manager"}])
    assert {f for f in _found([infra, issuers]) if f[0] == "CRDMissing"} == expected


@pytest.mark.parametrize("chart, values, installs", [
    ("external-secrets", None, True),
    ("external-secrets", {"installCRDs": False}, False),
    ("cloudnative-pg", {"crds": {"create": False}}, False),
    ("cilium", None, True),  # cilium-operator registers them (operator.skipCRDCreation defaults to false)
    ("cilium", {"operator": {"skipCRDCreation": True}}, False),
    ("kube-prometheus-stack", {"crds": {"enabled": False}}, False),
    ("grafana-operator", None, True),
    ("app-template", None, False),
])
def test_chart_values_switch_the_crds(chart: str, values: dict | None, installs: bool):
    release = _release("r", "default", chart=chart, values=values)
    info = crds.release_crds(release, [])
    assert info.known and bool(info.groups) is installs, info


def test_every_chart_names_where_its_crd_list_comes_from():
    for name, entry in crds.data()["charts"].items():
        assert str(entry.get("source", "")).startswith("https://"), name
        assert isinstance(entry["groups"], list), name
    assert "source.extensions.fluxcd.io" in crds.data()["flux"]["groups"]  # ArtifactGenerator, ExternalArtifact


def test_crd_installed_elsewhere_is_a_warning_unless_it_never_converges():
    installer = _ks("cert-manager", [_ns("cert-manager"), CERT_MANAGER_OCI, _release(
        "cert-manager", "cert-manager", ref=("OCIRepository", "cert-manager"), values={"crds": {"enabled": True}})],
        wait=True)
    issuers = _ks("issuers", [_issuer()])  # no dependsOn line: Flux retries until cert-manager installs the CRDs
    assert _found([installer, issuers]) == {(*ISSUED, "warning")}
    message = _messages([installer, issuers], "CRDMissing")[0]
    assert "chart cert-manager (HelmRelease cert-manager of Kustomization cert-manager)" in message
    assert "without a dependsOn line" in message
    # the installer waits for this one: it is never applied while this one fails
    installer.spec["dependsOn"] = [{"name": "issuers"}]
    assert _found([installer, issuers]) == {(*ISSUED, "error")}
    assert "never converges" in _messages([installer, issuers], "CRDMissing")[0]


def test_create_namespace_creates_the_release_namespace_not_the_storage_namespace():
    """install.createNamespace creates spec.targetNamespace (else the HelmRelease's own): helm-controller's API
    reference. Helm's storageNamespace only keeps the release records."""
    def found(**spec: Any) -> set[tuple[str, str, str]]:
        helm = _ks("helm", [_release("r", "flux-system", chart="app-template", install={"createNamespace": True},
                                     **spec)], wait=True)
        return {f for f in _found([helm, _ks("app", [_cm("c", "x")], dependsOn=[{"name": "helm"}])])
                if f[0] == "NamespaceMissing"}

    assert found(targetNamespace="x") == set()
    assert found(storageNamespace="x") == {("NamespaceMissing", "ConfigMap/x/c", "error")}


def test_known_chart_not_awaited_names_it():
    """Root cause 1b: a known chart in a Kustomization without wait was reported as 'nothing installs it'."""
    kps = _ks("kps", [_release("kube-prometheus-stack", "flux-system", chart="kube-prometheus-stack",
                               targetNamespace="monitoring", install={"createNamespace": True})])
    rule = _obj("monitoring.coreos.com/v1", "PrometheusRule", "r", "default", {"groups": []})
    rules = _ks("rules", [rule])
    messages = _messages([kps, rules], "CRDMissing")
    assert len(messages) == 1 and "kube-prometheus-stack" in messages[0]
    assert "nothing in this repository installs it" not in messages[0]


@pytest.mark.parametrize("group_api, kind, others, severity, words", [
    ("source.extensions.fluxcd.io/v1beta1", "ArtifactGenerator", [], None, ""),
    ("talos.dev/v1alpha1", "ServiceAccount", [], "warning", "Talos"),
    ("widgets.example.com/v1", "Widget", [_release("widgets", "default", chart="widget-operator")], "warning",
     "HelmRelease widgets"),
    ("widgets.example.com/v1", "Widget", [_release("db", "default", chart="some-database")], "warning",
     "one of the 1 HelmRelease(s) of charts without CRD data"),
    ("widgets.example.com/v1", "Widget", [_release("web", "default", chart="app-template")], "error",
     "nothing in this repository installs it"),
])
def test_unknown_installers_are_not_checked(group_api: str, kind: str, others: list[dict], severity: str | None,
                                             words: str):
    apps = _ks("apps", others)
    user = _ks("user", [_obj(group_api, kind, "x", "default")], dependsOn=[{"name": "apps"}])
    findings = [f for f in check_cluster([apps, user], ClusterProvides()) if f.code == "CRDMissing"]
    assert [f.severity for f in findings] == ([severity] if severity else [])
    if severity:
        assert words in findings[0].message
        assert severity != "warning" or "not checked" in findings[0].message


def test_another_cluster_is_not_simulated():
    """A Kustomization with spec.kubeConfig applies to a spoke: what exists there is not simulated (a warning)."""
    spoke = _ks("configs", [_issuer()], kubeConfig={"secretRef": {"name": "spoke-kubeconfig"}})
    assert _found([spoke]) == {(*ISSUED, "warning")}
    assert "another cluster" in _messages([spoke], "CRDMissing")[0]


# ---- namespaces the parent (or the cluster folder) creates ------------------------------------------------------


def _parent_and_child(parent_objects: list[dict] | None) -> tuple[Applied, Applied]:
    parent = Applied("cluster-apps", "flux-system", "clusters/prod/apps.yaml", "apps", {}, parent_objects)
    child = Applied("app", "flux-system", "apps/ai/app/ks.yaml", "apps/ai/app/app", {"targetNamespace": "ai"},
                    [_cm("app")])
    return parent, child


NAMESPACE_CASES = {
    # what kustomize's namespace transformer made of a Component's `Namespace/_`: the rendered Namespace is `ai`
    "the parent renders the namespace with the child": ([_ns("ai"), _child("app", "apps/ai/app/app")], set()),
    "the parent renders the child only": (
        [_child("app", "apps/ai/app/app")], {("NamespaceMissing", "ConfigMap/ai/app", "error")}),
    "the parent did not render: not judged": (None, set()),
}


@pytest.mark.parametrize("parent_objects, expected", NAMESPACE_CASES.values(), ids=NAMESPACE_CASES.keys())
def test_namespace_from_the_parent(parent_objects: list[dict] | None, expected: set):
    parent, child = _parent_and_child(parent_objects)
    assert _found([parent, child]) == expected


def test_parent_of_another_cluster_folder_and_the_cluster_folder_itself():
    parent, child = _parent_and_child([_ns("ai"), _child("app", "apps/ai/app/app")])
    assert _found([child], outside=[parent]) == set()  # a layout whose cluster folders are kubernetes/{apps,flux}
    # the cluster folder, applied by flux bootstrap (no Flux object in git), declares the Namespace
    root = Applied("cluster folder clusters/prod", "flux-system", "clusters/prod", "clusters/prod", {},
                   None, [_ns("team-a"), _child("a", "apps/a", targetNamespace="team-a")], root=True)
    a = Applied("a", "flux-system", "clusters/prod/a.yaml", "apps/a", {"targetNamespace": "team-a"}, [_cm("a")])
    assert _found([a], outside=[root]) == set()
    assert _found([a]) == {("NamespaceMissing", "ConfigMap/team-a/a", "error")}


def test_cluster_scoped_kinds_need_no_namespace():
    crd = _obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "gadgets.example.com", spec={
        "group": "example.com", "scope": "Cluster", "names": {"kind": "Gadget"}})
    gadget = _obj("example.com/v1", "Gadget", "g", "nowhere")  # kustomize's `namespace:` set one: ignored by Flux
    issuer = {**_issuer(), "metadata": {"name": "letsencrypt", "namespace": "nowhere"}}
    crds_ks = _ks("crds", [crd], wait=True)
    user = _ks("user", [gadget, issuer], dependsOn=[{"name": "crds"}])
    assert {f[0] for f in _found([crds_ks, user], ClusterProvides(crds=frozenset({"cert-manager.io"})))} == set()


# ---- objects created at run time ---------------------------------------------------------------------------------


def _monitor(selector: dict, ns: str = "kube-system") -> dict:
    return _obj("monitoring.coreos.com/v1", "ServiceMonitor", "sm", ns, {"selector": selector,
                                                                         "endpoints": [{"port": "metrics"}]})


def _service(selector: dict, ns: str = "kube-system", name: str = "svc") -> dict:
    return _obj("v1", "Service", name, ns, {"selector": selector, "ports": [{"port": 80}]})


def _deployment(labels: dict, ns: str = "apps") -> dict:
    return _obj("apps/v1", "Deployment", "web", ns, {"selector": {"matchLabels": labels},
                                                     "template": {"metadata": {"labels": labels}, "spec": {}}})


PROVIDES = ClusterProvides(crds=frozenset({"monitoring.coreos.com", "postgresql.cnpg.io", "objectbucket.io"}))
CILIUM = _release("cilium", "kube-system", chart="cilium")
PG = _obj("postgresql.cnpg.io/v1", "Cluster", "pg", "db", {"instances": 1})

RUNTIME_CASES = {
    "a chart's Service": ([CILIUM, _monitor({"matchLabels": {"k8s-app": "cilium"}})],
                          {("ServiceMonitorSelectsNothing", "ServiceMonitor/kube-system/sm", "info")}),
    "nothing creates it": ([_monitor({"matchLabels": {"k8s-app": "cilium"}})],
                           {("ServiceMonitorSelectsNothing", "ServiceMonitor/kube-system/sm", "error")}),
    "static pods": ([_service({"k8s-app": "kube-apiserver", "tier": "control-plane"})],
                    {("ServiceSelectsNothing", "Service/kube-system/svc", "info")}),
    "CoreDNS": ([_obj("policy/v1", "PodDisruptionBudget", "coredns", "kube-system",
                      {"selector": {"matchLabels": {"k8s-app": "kube-dns"}}})],
                {("PodDisruptionBudgetSelectsNothing", "PodDisruptionBudget/kube-system/coredns", "info")}),
    "an operator's pods": ([PG, _service({"cnpg.io/cluster": "pg"}, "db")],
                           {("ServiceSelectsNothing", "Service/db/svc", "info")}),
    # the repository's own workload, mistyped: a chart in the namespace does not excuse it
    "a rendered workload's labels, one wrong": (
        [_release("other", "apps", chart="app-template"), _deployment({"app": "web", "tier": "api"}),
         _service({"app": "web", "tier": "apu"}, "apps")], {("ServiceSelectsNothing", "Service/apps/svc", "error")}),
    "an operator's Secrets": (
        [PG, _obj("objectbucket.io/v1alpha1", "ObjectBucketClaim", "bucket", "db", {}),
         _obj("batch/v1", "CronJob", "backup", "db", {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
             {"name": "c", "envFrom": [{"secretRef": {"name": "pg-app"}}, {"secretRef": {"name": "bucket"}},
                                       {"secretRef": {"name": "other"}}]}]}}}}})],
        {("SecretMissing", "CronJob/db/backup", "error")}),
}


@pytest.mark.parametrize("objects, expected", RUNTIME_CASES.values(), ids=RUNTIME_CASES.keys())
def test_objects_created_at_run_time(objects: list[dict], expected: set):
    ks = _ks("infra", [_ns("apps"), _ns("db"), *objects])
    assert {f for f in _found([ks], PROVIDES) if f[0] != "NamespaceMissing"} == expected
    secrets = [f.message for f in check_cluster([ks], PROVIDES) if f.code == "SecretMissing"]
    assert all("db/other" in m for m in secrets)


@pytest.mark.parametrize("kind, selector, shown", [
    ("ServiceMonitor", {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]},
     "{app in (a,b)}"),
    ("PodDisruptionBudget", {"matchLabels": {"x": "1"}, "matchExpressions": [
        {"key": "tier", "operator": "NotIn", "values": ["db"]}, {"key": "canary", "operator": "DoesNotExist"}]},
     "{x=1, tier notin (db), !canary}"),
])
def test_selectors_are_shown_whole(kind: str, selector: dict, shown: str):
    """The 'selector None' bug: a ServiceMonitor selecting by matchExpressions only was shown as None."""
    obj = _monitor(selector, "apps") if kind == "ServiceMonitor" else \
        _obj("policy/v1", kind, "pdb", "apps", {"selector": selector})
    ks = _ks("infra", [_ns("apps"), obj])
    messages = [f.message for f in check_cluster([ks], PROVIDES) if f.severity == "error"]
    assert len(messages) == 1 and f"selector {shown} " in messages[0] and "None" not in messages[0]


def test_creators_rank_the_release_named_like_the_target():
    found = runtime.creators([_release("a", "x", chart="c"), _release("hubble", "x", chart="cilium"),
                              _release("floating", "", chart="c")])
    assert found.in_namespace("x", "hubble-ui")[0] == "HelmRelease hubble"
    assert found.in_namespace("y") == ["HelmRelease floating"]  # rendered without a namespace: may be anywhere


# ---- through validate, on small repositories ---------------------------------------------------------------------

LAYOUT = "paths:\n  clusters: clusters\nflux:\n  sourceRef:\n    kind: GitRepository\n    name: flux-system\n"


def _flux_ks(name: str, path: str, extra: str = "") -> str:
    return (f"apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: {name}\n"
            f"  namespace: flux-system\nspec:\n  interval: 1h\n  path: ./{path}\n  prune: true\n  sourceRef:\n"
            f"    kind: GitRepository\n    name: flux-system\n{extra}")


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _validate(run_cli, root: Path) -> list[dict]:
    result = run_cli("validate", str(root), "-o", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["findings"]


def _mine(findings: list[dict]) -> set[tuple[str, str, str]]:
    return {(f["code"], str(f["object"]), f["severity"]) for f in findings if f["code"] in CODES}


def _kustomization(*resources: str, namespace: str | None = None) -> str:
    head = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
    ns = f"namespace: {namespace}\n" if namespace else ""
    return head + ns + "resources:\n" + "".join(f"  - {r}\n" for r in resources)


ROUTE = ("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: ui\nspec:\n  rules:\n"
         "    - backendRefs:\n        - name: hubble-ui\n          port: 80\n")
RELEASE = ("apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: cilium\nspec:\n"
           "  interval: 1h\n  chart:\n    spec:\n      chart: cilium\n      sourceRef:\n        kind: HelmRepository\n"
           "        name: cilium\n")


@pytest.mark.parametrize("with_release, severity", [(True, "info"), (False, "error")])
def test_route_backend_created_by_a_chart(run_cli, tmp_path: Path, with_release: bool, severity: str):
    """The route and the HelmRelease have no namespace of their own: the Kustomization's targetNamespace gives it."""
    files = {"kubectl-triton.yaml": LAYOUT + "cluster:\n  provides:\n    crds:\n"
             "      - group: gateway.networking.k8s.io\n        reason: test\n",
             "clusters/prod/cilium.yaml": _flux_ks("cilium", "infra/cilium", "  targetNamespace: kube-system\n"),
             "infra/cilium/route.yaml": ROUTE, "infra/cilium/hr.yaml": RELEASE,
             "infra/cilium/kustomization.yaml": _kustomization("route.yaml", *(["hr.yaml"] if with_release else []))}
    found = {(code, sev) for code, _, sev in _mine(_validate(run_cli, _write(tmp_path, files)))}
    assert found == {("RouteBackendMissing", severity)}


def test_cluster_folder_and_generated_paths(run_cli, tmp_path: Path):
    """A cluster folder without kustomization.yaml (flux bootstrap applies every manifest in it) and a Flux path
    without one (Flux generates it): the Namespaces they hold exist before the Kustomizations they declare run."""
    files = {"kubectl-triton.yaml": LAYOUT,
             "clusters/prod/ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n",
             "clusters/prod/a.yaml": _flux_ks("a", "apps/a", "  targetNamespace: team-a\n"),
             "apps/a/kustomization.yaml": _kustomization("cm.yaml"),
             "apps/a/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"}
    root = _write(tmp_path, files)
    assert _mine(_validate(run_cli, root)) == set()
    (root / "clusters/prod/ns.yaml").unlink()
    assert _mine(_validate(run_cli, root)) == {("NamespaceMissing", "ConfigMap/team-a/a", "error")}


# ---- the shapes of the survey's false errors, as small repositories ------------------------------------------------
# Each repository is written here (our own minimal YAML) in the shape a public Flux fleet of the survey had where an
# earlier version reported an error that was not one; next to it, the same repository broken so that the error is
# real, which validate must still report (the check is live, only the false error is gone).


def _docs(*objs: dict) -> str:
    return yaml.safe_dump_all(list(objs), sort_keys=False)


def _component(*resources: str) -> str:
    return "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources:\n" + \
        "".join(f"  - {r}\n" for r in resources)


def _without_namespace(ks: dict) -> dict:
    """A Flux Kustomization written without metadata.namespace (its parent kustomization.yaml's `namespace:` gives
    it one), its source named with its namespace."""
    spec = {**ks["spec"], "sourceRef": {**ks["spec"]["sourceRef"], "namespace": "flux-system"}}
    return {**ks, "metadata": {"name": ks["metadata"]["name"]}, "spec": spec}


PROVIDES_RUNTIME = LAYOUT + "cluster:\n  provides:\n    crds:\n      - group: gateway.networking.k8s.io\n" \
    "        reason: test\n      - group: monitoring.coreos.com\n        reason: test\n"
GENERATOR = _obj("source.extensions.fluxcd.io/v1beta1", "ArtifactGenerator", "apps", "flux-system", {
    "sources": [{"alias": "repo", "kind": "GitRepository", "name": "flux-system"}],
    "artifacts": [{"name": "apps", "copy": [{"from": "@repo/apps/**", "to": "@artifact/"}]}]})


def _oci_source(name: str, ns: str, url: str) -> dict:
    oci = _oci(name, ns, url)
    oci["spec"]["interval"] = "1h"  # one failing its schema is not read (its chart neither)
    return oci


WIDGET_OCI = _oci_source("widget-operator", "widgets", "oci://ghcr.io/example/charts/widget-operator")
RULE = _obj("monitoring.coreos.com/v1", "PrometheusRule", "node-rules", "alerts", {"groups": [{
    "name": "node", "rules": [{"alert": "NodeDown", "expr": "up == 0", "for": "5m"}]}]},
    labels={"release": "kube-prometheus-stack"})
HOME_OPS = LAYOUT.replace("clusters: clusters", "clusters: kubernetes")
AI_FOLDER = _kustomization("app/ks.yaml", "config/ks.yaml", namespace="ai") + \
    "components:\n  - ../../components/namespace\n"
GRAFANA = _release("grafana", "", chart="grafana")
GRAFANA["metadata"] = {"name": "grafana"}  # its namespace is the Kustomization's targetNamespace


def _external_service() -> dict:
    svc = _service({"app.kubernetes.io/name": "grafana", "app.kubernetes.io/instance": "grafana"}, "", "grafana-lb")
    svc["metadata"] = {"name": "grafana-lb"}
    svc["spec"]["type"] = "LoadBalancer"
    return svc


def _grafana_monitor() -> dict:
    monitor = _monitor({"matchLabels": {"app.kubernetes.io/name": "grafana"}}, "")
    monitor["metadata"] = {"name": "grafana"}
    return monitor


GRAFANA_ROUTE = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "grafana"},
                 "spec": {"hostnames": ["grafana.example.com"],
                          "rules": [{"backendRefs": [{"name": "grafana", "port": 80}]}]}}

# name -> (files, the broken variant: files changed (None: removed), (code, object) it must report as errors)
SURVEY: dict[str, tuple[dict[str, str], dict[str, str | None], set[tuple[str, str]]]] = {
    # Flux >= 2.7's ArtifactGenerator (source-watcher, a Flux controller): its CRD comes with Flux
    "crd-artifactgenerator": ({
        "kubectl-triton.yaml": LAYOUT,
        "clusters/prod/apps-source.yaml": _docs(_child("apps-source", "infra/apps-source")),
        "clusters/prod/apps.yaml": _docs(_child("apps", "", dependsOn=[{"name": "apps-source"}],
                                                sourceRef={"kind": "ExternalArtifact", "name": "apps"})),
        "infra/apps-source/kustomization.yaml": _kustomization("generator.yaml"),
        "infra/apps-source/generator.yaml": _docs(GENERATOR),
    }, {"infra/apps-source/generator.yaml": _docs({**GENERATOR, "apiVersion": "source.example.com/v1beta1"})},
        {("CRDMissing", "ArtifactGenerator/flux-system/apps")}),
    # a HelmRelease whose chart comes through spec.chartRef (an OCIRepository), a chart without CRD data here, and
    # a Widget in another Kustomization without a dependsOn line to it: whether the chart installs
    # widgets.example.com is not known, so "not checked" (it was "nothing in this repository installs it")
    "crd-chartref-unknown-chart": ({
        "kubectl-triton.yaml": LAYOUT,
        "clusters/prod/operator.yaml": _docs(_child("widget-operator", "infra/operator", wait=True)),
        "clusters/prod/widgets.yaml": _docs(_child("widgets", "infra/widgets")),
        "infra/operator/kustomization.yaml": _kustomization("ns.yaml", "oci.yaml", "release.yaml"),
        "infra/operator/ns.yaml": _docs(_ns("widgets")),
        "infra/operator/oci.yaml": _docs(WIDGET_OCI),
        "infra/operator/release.yaml": _docs(_release("widget-operator", "widgets",
                                                      ref=("OCIRepository", "widget-operator"))),
        "infra/widgets/kustomization.yaml": _kustomization("widget.yaml"),
        "infra/widgets/widget.yaml": _docs(_obj("widgets.example.com/v1", "Widget", "main", "default", {})),
    }, {"infra/operator/oci.yaml": _docs(_oci_source("widget-operator", "widgets",  # a chart shipping no CRD
                                                     "oci://ghcr.io/example/charts/app-template"))},
        {("CRDMissing", "Widget/default/main")}),
    # kube-prometheus-stack installs monitoring.coreos.com, in a Kustomization that does not wait for it and that
    # the PrometheusRule's Kustomization has no dependsOn line to (it was "nothing in this repository installs it")
    "crd-known-chart-not-awaited": ({
        "kubectl-triton.yaml": LAYOUT,
        "clusters/prod/monitoring.yaml": _docs(_child("kube-prometheus-stack", "infra/monitoring")),
        "clusters/prod/alerts.yaml": _docs(_child("node-alerts", "infra/alerts")),
        "infra/monitoring/kustomization.yaml": _kustomization("ns.yaml", "repository.yaml", "release.yaml"),
        "infra/monitoring/ns.yaml": _docs(_ns("monitoring")),
        "infra/monitoring/repository.yaml": _docs(_obj(
            "source.toolkit.fluxcd.io/v1", "HelmRepository", "charts", "monitoring",
            {"interval": "1h", "url": "https://charts.example.com"})),
        "infra/monitoring/release.yaml": _docs(_release("kube-prometheus-stack", "monitoring",
                                                        chart="kube-prometheus-stack")),
        "infra/alerts/kustomization.yaml": _kustomization("ns.yaml", "rule.yaml"),
        "infra/alerts/ns.yaml": _docs(_ns("alerts")),
        "infra/alerts/rule.yaml": _docs(RULE),
    }, {"infra/monitoring/kustomization.yaml": _kustomization("ns.yaml", "repository.yaml"),
        "infra/monitoring/release.yaml": None}, {("CRDMissing", "PrometheusRule/alerts/node-rules")}),
    # home-ops (cluster folders kubernetes/flux and kubernetes/apps): the namespace folder's kustomization.yaml
    # says `namespace: ai`; its Component's `Namespace/_` renders as Namespace ai, and the child Kustomizations
    # (whose namespace that line gives too: one dependsOn the other in ai) target ai
    "namespace-from-parent": ({
        "kubectl-triton.yaml": HOME_OPS,
        "kubernetes/flux/cluster/ks.yaml": _docs(_child("cluster-apps", "kubernetes/apps")),
        "kubernetes/apps/ai/kustomization.yaml": AI_FOLDER,
        "kubernetes/apps/ai/app/ks.yaml": _docs(_without_namespace(_child(
            "app", "kubernetes/apps/ai/app/app", targetNamespace="ai"))),
        "kubernetes/apps/ai/app/app/kustomization.yaml": _kustomization("cm.yaml"),
        "kubernetes/apps/ai/app/app/cm.yaml": _docs(_cm("app")),
        "kubernetes/apps/ai/config/ks.yaml": _docs(_without_namespace(_child(
            "app-config", "kubernetes/apps/ai/config/app", targetNamespace="ai",
            dependsOn=[{"name": "app", "namespace": "ai"}]))),
        "kubernetes/apps/ai/config/app/kustomization.yaml": _kustomization("cm.yaml"),
        "kubernetes/apps/ai/config/app/cm.yaml": _docs(_cm("app-config")),
        "kubernetes/components/namespace/kustomization.yaml": _component("namespace.yaml"),
        "kubernetes/components/namespace/namespace.yaml": _docs(_ns("_")),
    }, {"kubernetes/apps/ai/kustomization.yaml": AI_FOLDER.replace("namespace: ai\n", "")},  # no `namespace:`
        {("NamespaceMissing", "ConfigMap/ai/app"), ("FluxDependencyMissing", "Kustomization/flux-system/app-config")}),
    # flux bootstrap's layout: the cluster folder (no kustomization.yaml: Flux generates one) synced by
    # flux-system, its Namespaces created before the Kustomizations it declares run
    "cluster-folder-namespaces": ({
        "kubectl-triton.yaml": LAYOUT,
        "clusters/prod/flux-system/kustomization.yaml": _kustomization("gotk-sync.yaml"),
        "clusters/prod/flux-system/gotk-sync.yaml": _docs(
            _obj("source.toolkit.fluxcd.io/v1", "GitRepository", "flux-system", "flux-system",
                 {"interval": "1m", "url": "https://git.example.com/fleet", "ref": {"branch": "main"}}),
            _child("flux-system", "clusters/prod")),
        "clusters/prod/namespaces.yaml": _docs(_ns("team-a"), _ns("team-b")),
        "clusters/prod/apps.yaml": _docs(_child("team-a", "apps/team-a", targetNamespace="team-a"),
                                         _child("team-b", "apps/team-b")),
        "apps/team-a/kustomization.yaml": _kustomization("cm.yaml"),
        "apps/team-a/cm.yaml": _docs(_cm("a")),
        "apps/team-b/kustomization.yaml": _kustomization("cm.yaml"),
        "apps/team-b/cm.yaml": _docs(_cm("b", "team-b")),
    }, {"clusters/prod/namespaces.yaml": _docs(_ns("team-a"))}, {("NamespaceMissing", "ConfigMap/team-b/b")}),
    # a chart's Service, pods and backend, which Helm creates at run time: selected, scraped and routed to by
    # objects of the repository
    "runtime-objects": ({
        "kubectl-triton.yaml": PROVIDES_RUNTIME,
        "clusters/prod/grafana.yaml": _docs(_child("grafana", "infra/grafana", targetNamespace="observability")),
        "infra/grafana/kustomization.yaml": _kustomization("ns.yaml", "repository.yaml", "release.yaml",
                                                           "service.yaml", "monitor.yaml", "route.yaml"),
        "infra/grafana/ns.yaml": _docs(_ns("observability")),
        "infra/grafana/repository.yaml": _docs(_obj("source.toolkit.fluxcd.io/v1", "HelmRepository", "charts",
                                                    spec={"interval": "1h", "url": "https://charts.example.com"})),
        "infra/grafana/release.yaml": _docs(GRAFANA),
        "infra/grafana/service.yaml": _docs(_external_service()),
        "infra/grafana/monitor.yaml": _docs(_grafana_monitor()),
        "infra/grafana/route.yaml": _docs(GRAFANA_ROUTE),
    }, {"infra/grafana/kustomization.yaml": _kustomization("ns.yaml", "repository.yaml", "service.yaml",
                                                           "monitor.yaml", "route.yaml"),
        "infra/grafana/release.yaml": None},  # nothing creates them: errors
        {("RouteBackendMissing", "HTTPRoute/observability/grafana"),
         ("ServiceSelectsNothing", "Service/observability/grafana-lb"),
         ("ServiceMonitorSelectsNothing", "ServiceMonitor/observability/grafana")}),
}


def _survey_repo(root: Path, name: str, broken: bool = False) -> Path:
    files, changes, _ = SURVEY[name]
    _write(root, files)
    for rel, text in changes.items() if broken else ():
        if text is None:
            (root / rel).unlink()
        else:
            (root / rel).write_text(text)
    return root


def _errors(findings: list[dict]) -> set[tuple[str, str]]:
    return {(f["code"], str(f["object"])) for f in findings if f["severity"] == "error"}


@pytest.mark.parametrize("name", sorted(SURVEY))
def test_survey_repros_have_no_false_errors(run_cli, tmp_path: Path, name: str):
    findings = _validate(run_cli, _survey_repo(tmp_path / name, name))
    assert [f for f in findings if f["severity"] == "error"] == []  # in CODES (what the survey saw) or any other
    if name == "runtime-objects":
        assert {(f["code"], f["severity"]) for f in findings if f["code"] in CODES} == {
            ("RouteBackendMissing", "info"), ("ServiceSelectsNothing", "info"),
            ("ServiceMonitorSelectsNothing", "info")}
        assert all("HelmRelease grafana" in f["message"] for f in findings if f["code"] in CODES)
    if name == "crd-known-chart-not-awaited":
        crd = [f for f in findings if f["code"] == "CRDMissing"]
        assert crd and all("kube-prometheus-stack" in f["message"] and f["severity"] == "warning" for f in crd)
    if name == "crd-chartref-unknown-chart":
        crd = [f for f in findings if f["code"] == "CRDMissing"]
        assert [(f["severity"], f["object"]) for f in crd] == [("warning", "Widget/default/main")]
        assert "not checked" in crd[0]["message"] and "widget-operator (widget-operator)" in crd[0]["message"]


@pytest.mark.parametrize("name", sorted(SURVEY))
def test_survey_repros_broken_are_errors(run_cli, tmp_path: Path, name: str):
    """The same repository, broken so that the error is real: it is reported."""
    expected = SURVEY[name][2]
    found = _errors(_validate(run_cli, _survey_repo(tmp_path / name, name, broken=True)))
    assert expected <= found, found
