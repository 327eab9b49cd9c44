"""`validate` proves that a fresh cluster converges: each rule of the apply-order simulation with a passing and a
failing case built from a mutated copy of this repository (code, object and path asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubectl_triton.checks.manifests.convergence import Applied, chart_groups, check_cluster
from kubectl_triton.gitops.layout import ClusterProvides, StorageClassInfo


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _findings(run_cli, repo: Path) -> list[dict]:
    result = run_cli("validate", str(repo), "-o", "json")
    assert result.exit_code in (0, 1), result.stderr
    doc = json.loads(result.stdout)
    assert doc["ok"] is (result.exit_code == 0)
    return doc["findings"]


def _errors(findings: list[dict], code: str) -> list[dict]:
    return [f for f in findings if f["code"] == code and f["severity"] == "error"]


def test_this_repository_converges(run_cli, repo_copy: Path):
    findings = _findings(run_cli, repo_copy)
    assert [f for f in findings if f["severity"] == "error"] == []


def test_renamed_triton_namespace_fails_every_model_kustomization(run_cli, repo_copy: Path):
    _edit(repo_copy / "base/platform/namespace.yaml", "  name: triton\n", "  name: triton-inference\n")
    missing = _errors(_findings(run_cli, repo_copy), "NamespaceMissing")
    models = {f"clusters/production/models/{p.name}" for p in (repo_copy / "clusters/production/models").glob("*.yaml")
              if p.name != "kustomization.yaml"}
    assert len(models) >= 5
    # every model Kustomization, and the platform's own PVC (in `triton` too)
    assert {f["path"] for f in missing} == models | {"clusters/production/platform.yaml"}
    model = next(f for f in missing if f["path"].endswith("image-classifier-l4.yaml"))
    assert model["object"].endswith("/triton/image-classifier-triton") and "namespace triton" in model["message"]


def test_namespace_created_by_a_kustomization_outside_the_dependencies_names_it(run_cli, repo_copy: Path):
    _edit(repo_copy / "clusters/production/models/image-classifier-l4.yaml", "    - name: platform\n", "")
    missing = _errors(_findings(run_cli, repo_copy), "NamespaceMissing")
    assert [f["path"] for f in missing] == ["clusters/production/models/image-classifier-l4.yaml"]
    assert "Kustomization platform" in missing[0]["message"] and "dependsOn" in missing[0]["message"]


def test_declared_namespace_satisfies_the_check(run_cli, repo_copy: Path):
    _edit(repo_copy / "clusters/production/models/image-classifier-l4.yaml", "    - name: platform\n", "")
    _edit(repo_copy / "kubectl-triton.yaml", "    crds:\n", "    namespaces: [triton]\n    crds:\n")
    findings = _findings(run_cli, repo_copy)
    assert _errors(findings, "NamespaceMissing") == []
    # the PVC lives in `platform`, which image-classifier no longer waits for: still applied in the cluster
    assert _errors(findings, "ClaimMissing") == []


def test_missing_model_artifacts_pvc(run_cli, repo_copy: Path):
    _edit(repo_copy / "base/platform/kustomization.yaml", "  - persistentvolumeclaim.yaml\n", "")
    claims = _errors(_findings(run_cli, repo_copy), "ClaimMissing")
    assert {(f["path"], f["object"]) for f in claims} >= {
        ("overlays/ensemble-pipeline/l4", "Deployment/triton/ensemble-pipeline-triton"),
        ("overlays/image-classifier/l4", "Deployment/triton/image-classifier-triton"),
        ("overlays/llama3-8b/h100-80gb", "Deployment/triton/llama3-8b-triton"),
        ("overlays/llama3-8b/h100-80gb-engine-build", "Job/triton/llama3-8b-h100-80gb-engine-build")}
    assert all("PersistentVolumeClaim triton/model-artifacts" in f["message"] for f in claims)


def test_prometheus_operator_crds_must_be_installed_or_declared(run_cli, repo_copy: Path):
    """The repository installs them with kube-prometheus-stack in `infrastructure`, which the model and monitoring
    Kustomizations dependsOn (wait: true). Without that HelmRelease nothing does: every ServiceMonitor and the
    PrometheusRule fail Flux's dry run on a fresh cluster."""
    infra = repo_copy / "clusters/production/infrastructure"
    _edit(infra / "kustomization.yaml", "  - helmrelease-kube-prometheus-stack.yaml\n", "")
    crds = _errors(_findings(run_cli, repo_copy), "CRDMissing")
    found = {(f["path"], f["object"]) for f in crds}
    assert ("clusters/production/monitoring.yaml", "PrometheusRule/monitoring/triton") in found
    assert ("clusters/production/models/image-classifier-l4.yaml",
            "ServiceMonitor/triton/image-classifier-triton") in found
    assert all("monitoring.coreos.com" in f["message"] for f in crds)
    # Declaring the group (the cluster's own monitoring stack) fixes it ...
    _edit(repo_copy / "kubectl-triton.yaml", "    crds:\n", "    crds:\n      - monitoring.coreos.com\n")
    assert _errors(_findings(run_cli, repo_copy), "CRDMissing") == []
    # ... as does the HelmRelease, but only where `infrastructure` waits for its HelmReleases: else a warning.
    _edit(repo_copy / "kubectl-triton.yaml", "      - monitoring.coreos.com\n", "")
    _edit(infra / "kustomization.yaml", "  - helmrelease-prometheus-adapter.yaml\n",
          "  - helmrelease-prometheus-adapter.yaml\n  - helmrelease-kube-prometheus-stack.yaml\n")
    assert _errors(_findings(run_cli, repo_copy), "CRDMissing") == []
    _edit(repo_copy / "clusters/production/infrastructure.yaml", "  wait: true\n", "  wait: false\n")
    racing = [f for f in _findings(run_cli, repo_copy) if f["code"] == "CRDMissing"]
    assert racing and all(f["severity"] == "warning" for f in racing)
    assert any("kube-prometheus-stack" in f["message"] for f in racing)


def test_rwx_pvc_without_storage_class_in_a_waiting_kustomization(run_cli, repo_copy: Path):
    layout = repo_copy / "kubectl-triton.yaml"
    _edit(layout, "        rwx: true\n", "        rwx: false\n")
    never = _errors(_findings(run_cli, repo_copy), "WaitNeverHealthy")
    assert [(f["path"], f["object"]) for f in never] == [("base/platform",
                                                         "PersistentVolumeClaim/triton/model-artifacts")]
    assert "shared-rwx" in never[0]["message"]
    # No declared class at all: the default class is unknown, so the RWX PVC cannot be shown to bind.
    text = layout.read_text()
    layout.write_text(text[:text.index("    storageClasses:")] + text[text.index("    secrets:"):])
    never = _errors(_findings(run_cli, repo_copy), "WaitNeverHealthy")
    assert [f["object"] for f in never] == ["PersistentVolumeClaim/triton/model-artifacts"]
    # Without wait: true nothing waits for it: no finding.
    _edit(repo_copy / "clusters/production/platform.yaml", "  wait: true\n", "  wait: false\n")
    assert _errors(_findings(run_cli, repo_copy), "WaitNeverHealthy") == []


def test_external_secret_must_be_declared(run_cli, repo_copy: Path):
    layout = repo_copy / "kubectl-triton.yaml"
    _edit(layout, "      - name: model-store-credentials\n", "      - name: other-credentials\n")
    secrets = _errors(_findings(run_cli, repo_copy), "SecretMissing")
    assert [(f["path"], f["object"]) for f in secrets] == [("overlays/text-embedder/a10g",
                                                            "Deployment/triton/text-embedder-triton")]
    assert "model-store-credentials" in secrets[0]["message"] and "envFrom" in secrets[0]["message"]


@pytest.mark.parametrize("edit, code, obj", [
    (("base/triton/deployment.yaml", "      serviceAccountName: triton\n", "      serviceAccountName: tritn\n"),
     "ServiceAccountMissing", "Deployment/triton/image-classifier-triton"),
    (("base/triton/deployment.yaml", "            name: model-config\n", "            name: model-configs\n"),
     "ConfigMapMissing", "Deployment/triton/image-classifier-triton"),
    (("base/triton/service.yaml", "  type: ClusterIP\n", "  type: ClusterIP\n  selector:\n    app: nothing\n"),
     "ServiceSelectsNothing", "Service/triton/image-classifier-triton"),
    (("base/triton/horizontalpodautoscaler.yaml", "    name: triton\n", "    name: tritonn\n"),
     "ScaleTargetMissing", "HorizontalPodAutoscaler/triton/image-classifier-triton"),
    (("base/triton/poddisruptionbudget.yaml", "      app.kubernetes.io/name: triton-inference-server\n",
      "      app.kubernetes.io/name: triton-inference-server\n      app.kubernetes.io/component: server\n"),
     "PodDisruptionBudgetSelectsNothing", "PodDisruptionBudget/triton/image-classifier-triton"),
    (("base/triton/servicemonitor.yaml", "    - port: metrics\n", "    - port: metric\n"),
     "ServiceMonitorSelectsNothing", "ServiceMonitor/triton/image-classifier-triton"),
])
def test_reference_rules(run_cli, repo_copy: Path, edit, code, obj):
    _edit(repo_copy / edit[0], edit[1], edit[2])
    errors = _errors(_findings(run_cli, repo_copy), code)
    assert ("overlays/image-classifier/l4", obj) in {(f["path"], f["object"]) for f in errors}


def test_route_backend_must_name_a_service_port(run_cli, repo_copy: Path):
    """HTTPRoute backends are checked once, by checks/manifests/routes.py, against the cluster's Services."""
    route = ("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: triton\nspec:\n"
             "  parentRefs:\n    - name: inference\n      namespace: gateways\n  rules:\n    - backendRefs:\n"
             "        - name: image-classifier-triton\n          port: 8000\n")
    overlay = repo_copy / "overlays/image-classifier/l4"
    (overlay / "httproute.yaml").write_text(route)
    _edit(overlay / "kustomization.yaml", "resources:\n", "resources:\n  - httproute.yaml\n")
    assert _errors(_findings(run_cli, repo_copy), "RouteBackendMissing") == []
    (overlay / "httproute.yaml").write_text(route.replace("port: 8000", "port: 8080"))
    errors = _errors(_findings(run_cli, repo_copy), "RouteBackendMissing")
    assert [(f["path"], f["object"]) for f in errors] == [("overlays/image-classifier/l4",
                                                           "HTTPRoute/triton/image-classifier-triton")]
    assert "port 8080" in errors[0]["message"]


# ---- the pure core, on small clusters ------------------------------------------------------------------------


def _ns(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _cm(name: str, ns: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}}


def test_objects_of_the_same_kustomization_count_and_target_namespace_applies():
    app = Applied("app", "flux-system", "clusters/c/app.yaml", "apps/app", {"targetNamespace": "apps"},
                  [_ns("apps"), _cm("settings", "elsewhere")])
    assert check_cluster([app], ClusterProvides()) == []
    app.spec = {"targetNamespace": "other"}
    findings = check_cluster([app], ClusterProvides())
    assert [(f.code, f.object) for f in findings] == [("NamespaceMissing", "ConfigMap/other/settings")]


def test_crd_from_an_ancestor_crd_object_and_not_from_a_sibling():
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com"}}
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}}
    crds = Applied("crds", "flux-system", "c/crds.yaml", "crds", {"wait": True}, [crd])
    app = Applied("app", "flux-system", "c/app.yaml", "app", {}, [widget])
    missing = check_cluster([crds, app], ClusterProvides())
    assert [(f.code, f.path) for f in missing] == [("CRDMissing", "c/app.yaml")]
    assert "Kustomization crds" in missing[0].message and "dependsOn" in missing[0].message
    app.spec = {"dependsOn": [{"name": "crds"}]}
    assert check_cluster([crds, app], ClusterProvides()) == []
    assert check_cluster([app], ClusterProvides(crds=frozenset({"example.com"}))) == []


def test_wait_for_first_consumer_class_never_binds_an_unmounted_claim():
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "default"},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    ks = Applied("platform", "flux-system", "c/p.yaml", "platform", {"wait": True}, [pvc])
    wffc = ClusterProvides(storage_classes=(StorageClassInfo("gp3", False, True, "WaitForFirstConsumer"),))
    assert [f.code for f in check_cluster([ks], wffc)] == ["WaitNeverHealthy"]
    immediate = ClusterProvides(storage_classes=(StorageClassInfo("gp3", False, True, "Immediate"),))
    assert check_cluster([ks], immediate) == []


def test_chart_knowledge_is_data_with_sources():
    from kubectl_triton.checks.manifests.convergence import _data

    assert "monitoring.coreos.com" in chart_groups("kube-prometheus-stack")
    assert chart_groups("prometheus-adapter") == ()
    assert chart_groups("no-such-chart") is None
    for chart in ("gpu-operator", "kube-prometheus-stack", "prometheus-operator-crds", "prometheus-adapter", "keda",
                  "gateway-helm", "lws"):
        assert _data()["charts"][chart]["source"].startswith("https://")


def test_dependency_circle_is_an_error(run_cli, repo_copy: Path):
    _edit(repo_copy / "clusters/production/platform.yaml", "  wait: true\n",
          "  wait: true\n  dependsOn:\n    - name: image-classifier-l4\n")
    circles = _errors(_findings(run_cli, repo_copy), "FluxDependencyCycle")
    assert [f["message"] for f in circles] == [
        "dependsOn circle image-classifier-l4 -> platform -> image-classifier-l4: Flux waits on it forever"]
    assert circles[0]["path"] == "clusters/production/models/image-classifier-l4.yaml"


def test_secrets_written_by_controllers_from_repository_objects_resolve():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "envFrom": [{"secretRef": {"name": "s3"}}]}]}}
    external = {"apiVersion": "external-secrets.io/v1beta1", "kind": "ExternalSecret",
                "metadata": {"name": "store", "namespace": "default"}, "spec": {"target": {"name": "s3"}}}
    provides = ClusterProvides(crds=frozenset({"external-secrets.io"}))
    assert [f.code for f in check_cluster([Applied("a", "flux-system", "c/a.yaml", "a", {}, [pod])], provides)] \
        == ["SecretMissing"]
    assert check_cluster([Applied("a", "flux-system", "c/a.yaml", "a", {}, [pod, external])], provides) == []
