"""What the second survey of public Flux fleets (issue 28, tests/fixtures/flux-fleets-sources.json) found that the
gate or init got wrong, each as a small repository written here with its broken twin: what a bootstrap helmfile
installs before Flux runs, routes whose weights are proportions, a remote resource this machine cannot reach,
objects Tekton creates at run time, a bootstrap source and Kustomization under another name than flux-system, and
a configMapGenerator data file that is a Go template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kubectl_triton.adapters import network
from kubectl_triton.checks.manifests.security import check_credentials
from kubectl_triton.errors import InputError
from kubectl_triton.gitops import bootstrap
from kubectl_triton.gitops.model import Repository

FLUX = "kustomize.toolkit.fluxcd.io/v1"
LAYOUT = "paths:\n  clusters: kubernetes/clusters\n"


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def ks(name: str, path: str, *, source: str = "flux-system", extra: str = "") -> str:
    return (f"apiVersion: {FLUX}\nkind: Kustomization\nmetadata:\n  name: {name}\n  namespace: flux-system\n"
            f"spec:\n  interval: 1h\n  path: {path}\n  prune: true\n  sourceRef:\n    kind: GitRepository\n"
            f"    name: {source}\n{extra}")


def listing(*resources: str) -> str:
    return "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n" + "".join(
        f"  - {r}\n" for r in resources)


def findings(run_cli, root: Path) -> list[dict]:
    result = run_cli("validate", str(root), "-o", "json", "--no-compat")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["findings"]


def errors(found: list[dict]) -> set[tuple[str, str]]:
    return {(f["code"], str(f["object"])) for f in found if f["severity"] == "error"}


# ---- a bootstrap helmfile installs CRDs and namespaces before Flux runs --------------------------------------------

RULE = ("apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: rules\n  namespace: "
        "observability\nspec:\n  groups: []\n")
CERT = ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: issuer-settings\n  namespace: cert-manager\n"
        "data:\n  a: b\n")
CRDS = ("helmDefaults:\n  args:\n    - --include-crds\n    - --no-hooks\nreleases:\n"
        "  - name: kube-prometheus-stack\n    namespace: observability\n"
        "    chart: oci://ghcr.io/prometheus-community/charts/kube-prometheus-stack\n    version: 1.0.0\n")
APPS = ("releases:\n  - name: cert-manager\n    namespace: cert-manager\n"
        "    chart: oci://quay.io/jetstack/charts/cert-manager\n    version: v1.0.0\n"
        "    values: ['{{ requiredEnv \"ROOT_DIR\" }}/values.yaml']\n"
        "{{ if true }}\n  - name: spare\n    namespace: spare\n    chart: repo/spare\n{{ end }}\n")


NAMESPACES = ('{% for namespace in ["flux-system", "rook-ceph"] %}\n---\napiVersion: v1\nkind: Namespace\n'
              'metadata:\n  name: {{ namespace }}\n{% endfor %}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n'
              '  name: token\n  namespace: {{ ns }}\nstringData:\n  token: op://vault/item/field\n')


def _fleet(tmp_path: Path, helmfiles: dict[str, str]) -> Path:
    return write(tmp_path / "fleet", {
        "kubectl-triton.yaml": LAYOUT,
        "kubernetes/clusters/main/apps.yaml": ks("apps", "./kubernetes/apps"),
        "kubernetes/apps/kustomization.yaml": listing("rule.yaml", "cert.yaml"),
        "kubernetes/apps/rule.yaml": RULE, "kubernetes/apps/cert.yaml": CERT, **helmfiles})


def test_a_bootstrap_helmfile_provides_its_crds_and_namespaces(run_cli, tmp_path: Path):
    broken = _fleet(tmp_path / "none", {})
    assert {("CRDMissing", "PrometheusRule/observability/rules"),
            ("NamespaceMissing", "ConfigMap/cert-manager/issuer-settings")} <= errors(findings(run_cli, broken))
    root = _fleet(tmp_path / "boot", {"bootstrap/helmfile.d/00-crds.yaml": CRDS,
                                      "bootstrap/helmfile.d/01-apps.yaml.gotmpl": APPS})
    # the CRDs and cert-manager's namespace are there; the CRD-only helmfile (rendered with --include-crds for
    # kubectl apply) creates no namespace, so observability is still missing
    assert errors(findings(run_cli, root)) == {("NamespaceMissing", "PrometheusRule/observability/rules")}
    (root / "bootstrap/resources.yaml.j2").write_text(NAMESPACES.replace("rook-ceph", "observability"))
    assert errors(findings(run_cli, root)) == set()


def test_helmfile_releases_are_read_through_go_templates_and_per_cluster(tmp_path: Path):
    root = write(tmp_path, {"bootstrap/main/helmfile.d/01-apps.yaml.gotmpl": APPS,
                            "bootstrap/edge/helmfile.d/00-crds.yaml": CRDS,
                            "bootstrap/edge/resources.yaml.j2": NAMESPACES,
                            # a chart a base's template resolves: named as the release
                            "bootstrap/edge/helmfile/apps.yaml": "bases:\n  - default.yaml\nreleases:\n"
                                                                 "  - name: grafana-operator\n"
                                                                 "    namespace: observability\n",
                            ".archive/bootstrap/helmfile.yaml": APPS})
    found = bootstrap.releases(root)
    assert {(r.name, r.namespace, r.chart, r.creates_namespace) for r in found} == {
        ("cert-manager", "cert-manager", "cert-manager", True), ("spare", "spare", "spare", True),
        ("kube-prometheus-stack", "observability", "kube-prometheus-stack", False),
        ("flux-system", "flux-system", "", True), ("rook-ceph", "rook-ceph", "", True),
        ("grafana-operator", "observability", "grafana-operator", True)}
    clusters = ["kubernetes/main/flux", "kubernetes/edge/flux"]
    assert {r.name for r in bootstrap.for_cluster(found, clusters[0], clusters)} == {"cert-manager", "spare"}
    assert {r.name for r in bootstrap.for_cluster(found, clusters[1], clusters)} == {
        "kube-prometheus-stack", "flux-system", "rook-ceph", "grafana-operator"}
    assert len(bootstrap.for_cluster(found, "clusters/one", ["clusters/one"])) == 6


# ---- Gateway API weights are proportions ---------------------------------------------------------------------------

def _route(weights: list[int], annotated: bool = False) -> str:
    meta = {"name": "web", "namespace": "default"}
    if annotated:
        meta["annotations"] = {"triton.kubectl.io/triton-model": "m"}
    refs = [{"name": f"web-{i}", "port": 80, "weight": w} for i, w in enumerate(weights)]
    return yaml.safe_dump({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": meta,
                           "spec": {"rules": [{"backendRefs": refs}]}})


def _svc(name: str) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
                           "spec": {"ports": [{"port": 80}]}})


@pytest.mark.parametrize("weights, annotated, expected", [
    ([1], False, set()),  # one backend at weight 1: all of the traffic
    ([3, 1], False, set()),  # three quarters and one quarter
    ([0, 0], False, {"warning"}),  # no backend gets traffic: every request an error
    ([90, 5], True, {"error"}),  # a canary split kubectl-triton writes is in percent
    ([90, 10], True, set()),
])
def test_route_weights(run_cli, tmp_path: Path, weights, annotated, expected):
    root = write(tmp_path / "repo", {
        "kubectl-triton.yaml": LAYOUT,
        "kubernetes/clusters/main/apps.yaml": ks("apps", "./kubernetes/apps"),
        "kubernetes/apps/kustomization.yaml": listing("route.yaml", "s0.yaml", "s1.yaml"),
        "kubernetes/apps/route.yaml": _route(weights, annotated),
        "kubernetes/apps/s0.yaml": _svc("web-0"), "kubernetes/apps/s1.yaml": _svc("web-1")})
    assert {f["severity"] for f in findings(run_cli, root) if f["code"] == "RouteWeights"} == expected


# ---- a remote resource this machine cannot reach -------------------------------------------------------------------

@pytest.mark.parametrize("offline, severity", [(True, "warning"), (False, "error")])
def test_an_unreachable_remote_resource_is_not_checked_only_without_a_network(run_cli, tmp_path: Path, monkeypatch,
                                                                              offline, severity):
    """kustomize cannot resolve the host: on a machine that resolves nothing (the probe fails too) the path is not
    checked; where the network works, the host is the repository's mistake. A missing local file is an error."""
    monkeypatch.setattr(network, "offline", lambda: offline)
    root = write(tmp_path / "repo", {
        "kubectl-triton.yaml": LAYOUT,
        "kubernetes/clusters/main/apps.yaml": ks("apps", "./kubernetes/apps"),
        "kubernetes/apps/kustomization.yaml": listing("https://manifests.example.invalid/v1/crds.yaml")})
    render = [f for f in findings(run_cli, root) if f["code"] == "RenderFailed"]
    assert [f["severity"] for f in render] == [severity], render
    assert ("not checked: this machine reaches no network" in render[0]["message"]) == offline
    (root / "kubernetes/apps/kustomization.yaml").write_text(listing("missing.yaml"))
    assert [f["severity"] for f in findings(run_cli, root) if f["code"] == "RenderFailed"] == ["error"]


# ---- objects Tekton creates at run time ----------------------------------------------------------------------------

def test_a_route_to_an_event_listeners_service_is_not_checked(run_cli, tmp_path: Path):
    listener = yaml.safe_dump({"apiVersion": "triggers.tekton.dev/v1beta1", "kind": "EventListener",
                               "metadata": {"name": "build", "namespace": "default"}, "spec": {"triggers": []}})
    route = yaml.safe_dump({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                            "metadata": {"name": "hook", "namespace": "default"},
                            "spec": {"rules": [{"backendRefs": [{"name": "el-build", "port": 8080}]}]}})
    files = {"kubectl-triton.yaml": LAYOUT + "cluster:\n  provides:\n    crds:\n      - group: triggers.tekton.dev\n"
             "        reason: Tekton\n",
             "kubernetes/clusters/main/apps.yaml": ks("apps", "./kubernetes/apps"),
             "kubernetes/apps/kustomization.yaml": listing("route.yaml", "listener.yaml"),
             "kubernetes/apps/route.yaml": route, "kubernetes/apps/listener.yaml": listener}
    root = write(tmp_path / "repo", files)
    missing = [f for f in findings(run_cli, root) if f["code"] == "RouteBackendMissing"]
    assert [f["severity"] for f in missing] == ["info"] and "EventListener build" in missing[0]["message"]
    (root / "kubernetes/apps/kustomization.yaml").write_text(listing("route.yaml"))
    assert ("RouteBackendMissing", "HTTPRoute/default/hook") in errors(findings(run_cli, root))


# ---- init: a bootstrap pair under another name, and a generator's Go template ---------------------------------------

SOURCE = ("apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  name: home\n"
          "  namespace: flux-system\nspec:\n  interval: 1h\n  url: https://example.invalid/home\n"
          "  ref:\n    branch: main\n")


def test_init_finds_a_self_syncing_source_and_kustomization_and_reads_no_data_file(run_cli, tmp_path: Path):
    files = {}
    for cluster in ("one", "two"):
        files[f"kubernetes/{cluster}/flux/config/cluster.yaml"] = \
            SOURCE + "---\n" + ks("cluster", f"./kubernetes/{cluster}/flux", source="home")
        files[f"kubernetes/{cluster}/flux/config/kustomization.yaml"] = listing("cluster.yaml")
        files[f"kubernetes/{cluster}/flux/apps.yaml"] = ks("apps", f"./kubernetes/{cluster}/apps", source="home")
        files[f"kubernetes/{cluster}/apps/kustomization.yaml"] = (
            listing() + "configMapGenerator:\n  - name: tpl\n    files:\n      - config.yml\n")
        # a Go template that kustomize reads as data: not YAML at all
        files[f"kubernetes/{cluster}/apps/config.yml"] = "plex:\n  token: {{ .PLEX_TOKEN }}\n"
    root = write(tmp_path / "repo", files)
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 2
    assert "several cluster folders (one, two) are sync roots: kubernetes/one/flux, kubernetes/two/flux" in \
        result.stderr, result.stderr
    result = run_cli("init", str(root), "--gpu", "l4", "--cluster", "kubernetes/one/flux")
    assert result.exit_code == 0, result.stderr
    assert "invalid YAML" not in result.stderr
    layout = yaml.safe_load((root / "kubectl-triton.yaml").read_text())
    assert layout["flux"]["sourceRef"] == {"kind": "GitRepository", "name": "home"}
    platform = yaml.safe_load((root / "kubernetes/one/flux/platform.yaml").read_text())
    assert platform["spec"]["sourceRef"]["name"] == "home"


# ---- a documented default in a configuration file's comment is no credential ---------------------------------------

@pytest.mark.parametrize("config, found", [
    ("## Default: postgres://kemal:kemal@localhost:5432/invidious\ndatabase_url: postgres://${USER}:${PW}@db/x\n",
     []),
    ("database_url: postgres://app:hunter2@db:5432/app\n", ["a URL with a password"]),
    ("# token: ghp_" + "a" * 36 + "\n", ["a GitHub token"]),  # a token counts even commented out
    ("# prod: postgres://admin:Sup3rS3cret@prod-db.corp/app\nlevel: info\n", ["a URL with a password"]),
])
def test_credentials_in_configuration_files(config, found):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": "default"},
          "data": {"config.yml": config}}
    assert [f.message.split(" contains ")[1] for f in check_credentials("apps", cm)] == found


# ---- the review's broken twins ---------------------------------------------------------------------------------------

def test_a_tekton_config_covers_only_its_target_namespace(run_cli, tmp_path: Path):
    config = yaml.safe_dump({"apiVersion": "operator.tekton.dev/v1alpha1", "kind": "TektonConfig",
                             "metadata": {"name": "config"}, "spec": {"targetNamespace": "tekton-pipelines"}})
    route = yaml.safe_dump({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                            "metadata": {"name": "web", "namespace": "default"},
                            "spec": {"rules": [{"backendRefs": [{"name": "web-stabel", "port": 80}]}]}})
    root = write(tmp_path / "repo", {
        "kubectl-triton.yaml": LAYOUT + "cluster:\n  provides:\n    crds:\n      - group: operator.tekton.dev\n"
        "        reason: Tekton\n",
        "kubernetes/clusters/main/apps.yaml": ks("apps", "./kubernetes/apps"),
        "kubernetes/apps/kustomization.yaml": listing("route.yaml", "config.yaml"),
        "kubernetes/apps/route.yaml": route, "kubernetes/apps/config.yaml": config})
    assert ("RouteBackendMissing", "HTTPRoute/default/web") in errors(findings(run_cli, root))
    (root / "kubernetes/apps/route.yaml").write_text(route.replace("namespace: default", "namespace: tekton-pipelines"))
    missing = [f for f in findings(run_cli, root) if f["code"] == "RouteBackendMissing"]
    assert [f["severity"] for f in missing] == ["info"] and "TektonConfig config" in missing[0]["message"]


def test_a_helmfile_outside_bootstrap_installs_nothing(run_cli, tmp_path: Path):
    root = _fleet(tmp_path, {"hack/kind/helmfile.yaml": CRDS + APPS.split("releases:\n", 1)[1]})
    assert ("CRDMissing", "PrometheusRule/observability/rules") in errors(findings(run_cli, root))
    assert bootstrap.releases(root) == []


@pytest.mark.parametrize("values, installed", [
    ("", False), ("    values:\n      - crds:\n          enabled: true\n", True),
    ("    set:\n      - name: crds.enabled\n        value: true\n", True)])
def test_a_bootstrap_chart_installs_its_crds_as_its_values_say(run_cli, tmp_path: Path, values, installed):
    """cert-manager's CRDs are templates behind crds.enabled, off by default."""
    issuer = "apiVersion: cert-manager.io/v1\nkind: ClusterIssuer\nmetadata:\n  name: self\nspec:\n  selfSigned: {}\n"
    root = write(tmp_path / "repo", {
        "kubectl-triton.yaml": LAYOUT,
        "kubernetes/clusters/main/apps.yaml": ks("apps", "./kubernetes/apps"),
        "kubernetes/apps/kustomization.yaml": listing("issuer.yaml"), "kubernetes/apps/issuer.yaml": issuer,
        "bootstrap/helmfile.yaml": "releases:\n  - name: cert-manager\n    namespace: cert-manager\n"
                                   "    chart: jetstack/cert-manager\n" + values})
    assert (("CRDMissing", "ClusterIssuer/self") in errors(findings(run_cli, root))) != installed


def test_another_repositorys_source_beside_the_bootstrap_is_no_sync_root(run_cli, tmp_path: Path):
    tenant = SOURCE.replace("name: home", "name: team-a") + "---\n" + ks("team-a", "./clusters/prod", source="team-a")
    gotk = SOURCE.replace("name: home", "name: flux-system") + "---\n" + ks("flux-system", "./clusters/prod")
    root = write(tmp_path / "repo", {"clusters/prod/apps/team-a.yaml": tenant,
                                     "clusters/prod/flux-system/gotk-sync.yaml": gotk,
                                     "clusters/prod/flux-system/kustomization.yaml": listing("gotk-sync.yaml")})
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    layout = yaml.safe_load((root / "kubectl-triton.yaml").read_text())
    assert layout["flux"]["sourceRef"] == {"kind": "GitRepository", "name": "flux-system"}


def test_kinds_without_a_schema_are_reported_once(run_cli, tmp_path: Path):
    widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {}\n  namespace: default\n"
    root = write(tmp_path / "repo", {
        "kubectl-triton.yaml": LAYOUT + "cluster:\n  provides:\n    crds:\n      - group: example.com\n"
        "        reason: test\n",
        "kubernetes/clusters/main/a.yaml": ks("a", "./kubernetes/a"),
        "kubernetes/clusters/main/b.yaml": ks("b", "./kubernetes/b"),
        "kubernetes/a/kustomization.yaml": listing("w1.yaml", "w2.yaml"),
        "kubernetes/a/w1.yaml": widget.format("one"), "kubernetes/a/w2.yaml": widget.format("two"),
        "kubernetes/b/kustomization.yaml": listing("w.yaml"), "kubernetes/b/w.yaml": widget.format("three")})
    missing = [f for f in findings(run_cli, root) if f["code"] == "SchemaMissing"]
    assert len(missing) == 1, missing
    assert "3 objects of this kind in 2 folder(s) are not schema-checked" in missing[0]["message"]


def test_an_artifact_root_needs_an_oci_source(run_cli, tmp_path: Path):
    root = write(tmp_path / "repo", {"kubectl-triton.yaml": LAYOUT + "flux:\n  artifactRoot: kubernetes\n",
                                     "kubernetes/clusters/main/apps.yaml": ks("apps", "./apps")})
    result = run_cli("validate", str(root))  # a finding of the gate, which goes on
    assert result.exit_code == 1 and "error [LayoutInvalid] flux.artifactRoot needs flux.sourceRef of kind " \
        "OCIRepository" in result.stdout, result.stdout
    result = run_cli("add-model", "m", "--repo", str(root), "--backend", "onnxruntime", "--gpu", "l4",
                     "--input", "x:FP32:3", "--output", "y:FP32:3")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "flux.artifactRoot needs flux.sourceRef" in result.stderr.splitlines()[0]


def test_unlisted_cluster_files_still_count_and_only_data_files_may_be_unreadable(tmp_path: Path):
    root = write(tmp_path / "repo", {
        "kubectl-triton.yaml": LAYOUT,
        "kubernetes/clusters/main/kustomization.yaml": listing("apps.yaml"),
        "kubernetes/clusters/main/apps.yaml": ks("apps", "./kubernetes/apps"),
        "kubernetes/clusters/main/infra/platform.yaml": ks("platform", "./kubernetes/platform"),
        "kubernetes/clusters/main/infra/kustomization.yaml": listing() + "configMapGenerator:\n  - name: t\n"
                                                             "    files:\n      - data.yaml\n",
        "kubernetes/clusters/main/infra/data.yaml": "a: {{ .B }}\n"})
    names = {ks.name for ks in Repository.at(root).clusters[0].kustomizations}
    assert names == {"apps", "platform"}
    (root / "kubernetes/clusters/main/apps.yaml").write_text("a: [\n")
    with pytest.raises(InputError, match="apps.yaml"):
        assert Repository.at(root).clusters
