"""The Grafana dashboard and the alert rules: schema-valid, applied by Flux, and using only metric names
Triton (and DCGM) export: checked against the catalog in the package and a real tritonserver's /metrics."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
import yaml

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks.manifests import monitoring
from kubectl_triton.formats import schemas, yamlio
from tests.conftest import REPO


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return yamlio.loads_all(kustomize.build(REPO / "base/monitoring").yaml, "base/monitoring")


def _one(objects: list[dict], kind: str) -> dict:
    [found] = [o for o in objects if o["kind"] == kind]
    return found


def test_monitoring_objects_pass_their_strict_schemas_and_a_typo_does_not(objects):
    assert {o["kind"] for o in objects} == {"ConfigMap", "PrometheusRule"}
    for obj in objects:
        assert schemas.validate_object(obj) == [], obj["kind"]
    rule = _one(objects, "PrometheusRule")
    bad = {**rule, "spec": {"groups": [{**rule["spec"]["groups"][0], "rule": []}]}}
    assert schemas.validate_object(bad)


def test_dashboard_configmap_is_picked_up_by_the_grafana_sidecar(objects):
    cm = _one(objects, "ConfigMap")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["name"] == "triton-dashboard"  # stable name: no hash suffix
    dashboard = json.loads(cm["data"]["triton-dashboard.json"])
    assert dashboard["uid"] == "kubectl-triton"


def test_flux_applies_monitoring_after_infrastructure(rendered):
    flux = {o["metadata"]["name"]: o for o in rendered["clusters/production"] if o["kind"] == "Kustomization"}
    spec = flux["monitoring"]["spec"]
    assert spec["path"] == "./base/monitoring" and spec["prune"] and {"name": "infrastructure"} in spec["dependsOn"]


def _dashboard() -> dict:
    return json.loads((REPO / "base/monitoring/triton-dashboard.json").read_text())


def _recorded() -> set[str]:
    rule = yaml.safe_load((REPO / "base/monitoring/prometheusrule.yaml").read_text())
    return {r["record"] for g in rule["spec"]["groups"] for r in g["rules"] if "record" in r}


def test_dashboard_uses_only_metrics_triton_and_dcgm_export_and_our_recording_rules():
    exprs = monitoring.dashboard_queries(_dashboard())
    assert len(exprs) >= 15
    assert monitoring.unknown_metrics(exprs, ("triton", "dcgm"), recorded=_recorded()) == {}
    assert monitoring.unknown_metrics(exprs, ("triton", "dcgm")) == {
        e: {"triton:queue_compute:ratio"} for e in exprs if "triton:queue_compute:ratio" in e}


def test_dashboard_covers_the_issue_panels():
    exprs = "\n".join(monitoring.dashboard_queries(_dashboard()))
    for needle in ("rate(nv_inference_request_success", "nv_inference_queue_duration_us",
                   "nv_inference_compute_infer_duration_us", 'quantile="0.5"', 'quantile="0.99"',
                   "nv_gpu_utilization", "nv_gpu_memory_used_bytes", 'kv_cache_block_type="used"',
                   "triton:queue_compute:ratio"):
        assert needle in exprs, needle


def test_the_checker_flags_invented_names_and_ignores_functions_labels_and_variables():
    expr = ('histogram_quantile(0.99, sum by (le, model) (rate(nv_inference_latency_bucket{model=~"$model"}'
            '[$__rate_interval]))) / on(model) group_left nv_inference_request_success offset 5m')
    assert monitoring.promql_metrics(expr) == {"nv_inference_latency_bucket", "nv_inference_request_success"}
    assert monitoring.unknown_metrics([expr], ("triton",)) == {expr: {"nv_inference_latency_bucket"}}
    assert monitoring.promql_metrics("nv_inference_request_summary_us_count / 1e-9") == \
        {"nv_inference_request_summary_us_count"}
    assert "nv_inference_request_summary_us_sum" in monitoring.known_names(("triton",))


def test_alert_rules_use_known_metrics_and_cover_queue_time_and_failing_models(objects):
    groups = _one(objects, "PrometheusRule")["spec"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    recorded = {r["record"] for r in rules if "record" in r}
    assert monitoring.unknown_metrics([r["expr"] for r in rules], recorded=recorded) == {}
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    assert {"TritonQueueTimeHigh", "TritonQueueTimeRising", "TritonModelFailing",
            "TritonRequestFailures"} <= set(alerts)
    for alert in alerts.values():
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def test_catalog_cpu_metrics_are_what_a_real_tritonserver_exports(tmp_path: Path):
    from kubectl_triton.adapters.tritonserver import TritonServer, TritonServerError, find_install, http_json

    try:
        find_install()
    except TritonServerError as err:
        pytest.skip(str(err))
    deployment = yaml.safe_load((REPO / "base/triton/deployment.yaml").read_text())
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    metrics_config = [a for a in args if a.startswith("--metrics-config=")]
    assert metrics_config == ["--metrics-config=summary_latencies=true"]
    model = tmp_path / "repo/m"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 0\n'
                                        'input [{ name: "X" data_type: TYPE_FP32 dims: [1] }]\n'
                                        'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]\n')
    (model / "1/model.py").write_text(
        "import triton_python_backend_utils as pb\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        return [pb.InferenceResponse([pb.Tensor('Y', pb.get_input_tensor_by_name(r, 'X').as_numpy())])"
        " for r in requests]\n")
    with TritonServer(tmp_path / "repo", extra_args=metrics_config).start() as server:
        server.wait_ready()
        http_json("POST", f"{server.http_url}/v2/models/m/infer",
                  {"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [1.0]}]})
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    exported = {ln.split("{")[0].split(" ")[0] for ln in text.splitlines() if ln and not ln.startswith("#")}
    expected = {n for n, info in monitoring.catalog()["triton"].items() if info.get("cpu")}
    assert expected - exported == set()
    # and every nv_ series this server exports is in the catalog
    assert {n for n in exported if n.startswith("nv_")} - monitoring.known_names(("triton",)) == set()


# --- the monitoring stack the repository installs ------------------------------------------------------------


def _infrastructure() -> dict[str, dict]:
    docs = yamlio.loads_all(kustomize.build(REPO / "clusters/production/infrastructure").yaml, "infrastructure")
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "HelmRelease"}


def test_kube_prometheus_stack_is_pinned_with_crds_and_grafana_folders():
    release = _infrastructure()["kube-prometheus-stack"]
    spec = release["spec"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", spec["chart"]["spec"]["version"])
    assert spec["install"]["crds"] == "Create" and spec["upgrade"]["crds"] == "CreateReplace"
    assert spec["targetNamespace"] == "monitoring"
    dashboards = spec["values"]["grafana"]["sidecar"]["dashboards"]
    # the dashboard ConfigMap's label and folder annotation are what the sidecar is told to read
    cm = yamlio.loads_all(kustomize.build(REPO / "base/monitoring").yaml, "m")
    [dash] = [o for o in cm if o["kind"] == "ConfigMap"]
    assert dash["metadata"]["labels"][dashboards["label"]] == dashboards["labelValue"]
    assert dashboards["folderAnnotation"] in dash["metadata"]["annotations"]
    assert dashboards["provider"]["foldersFromFilesStructure"] is True
    # the adapter waits for the Prometheus it queries
    adapter = _infrastructure()["prometheus-adapter"]["spec"]
    assert {"name": "kube-prometheus-stack"} in adapter["dependsOn"]
    assert adapter["values"]["prometheus"]["url"] == "http://prometheus-operated.monitoring.svc"


def _selected_by_the_release(obj: dict, release: dict) -> bool:
    """What kube-prometheus-stack's Prometheus selects with *SelectorNilUsesHelmValues: true."""
    return (obj["metadata"].get("labels") or {}).get("release") == release["spec"]["releaseName"]


def test_every_monitor_and_rule_the_repository_renders_is_selected_by_its_prometheus(rendered):
    release = _infrastructure()["kube-prometheus-stack"]
    prom = release["spec"]["values"]["prometheus"]["prometheusSpec"]
    assert all(prom[k] is True for k in ("serviceMonitorSelectorNilUsesHelmValues",
                                          "podMonitorSelectorNilUsesHelmValues", "ruleSelectorNilUsesHelmValues"))
    kinds = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
    objects = [o for docs in rendered.values() for o in docs if o["kind"] in kinds]
    objects += [o for o in yamlio.loads_all(kustomize.build(REPO / "base/monitoring").yaml, "m") if o["kind"] in kinds]
    assert {o["kind"] for o in objects} >= {"ServiceMonitor", "PrometheusRule"}
    assert [schemas.object_id(o) for o in objects if not _selected_by_the_release(o, release)] == []
    # and the DCGM exporter's ServiceMonitor, which the GPU Operator chart renders
    dcgm = _infrastructure()["gpu-operator"]["spec"]["values"]["dcgmExporter"]["serviceMonitor"]
    assert dcgm["enabled"] and dcgm["additionalLabels"]["release"] == release["spec"]["releaseName"]


def test_gpu_operator_upgrades_its_crds_as_its_docs_ask():
    spec = _infrastructure()["gpu-operator"]["spec"]
    assert spec["values"]["operator"]["upgradeCRD"] is True
    assert spec["upgrade"]["disableOpenAPIValidation"] is True


def test_no_deprecated_triton_flag_in_the_repository_or_the_package():
    for top in ("base", "overlays", "kubectl_triton"):
        for path in (REPO / top).rglob("*"):
            if path.suffix in (".yaml", ".py", ".sh", ".json") and path.is_file():
                assert "--strict-model-config" not in path.read_text(encoding="utf-8"), path


def test_hpa_scales_on_the_adapter_metric_with_a_target_of_one(rendered):
    adapter = _infrastructure()["prometheus-adapter"]["spec"]["values"]["rules"]["custom"]
    names = {r["name"]["as"] for r in adapter}
    for overlay, docs in rendered.items():
        for hpa in (o for o in docs if o["kind"] == "HorizontalPodAutoscaler"):
            [metric] = hpa["spec"]["metrics"]
            assert metric["pods"]["metric"]["name"] in names, overlay
            assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "1"}, overlay


# --- scale to zero: add-model --autoscaler keda ------------------------------------------------------------


def test_add_model_with_keda_renders_a_scaled_object_instead_of_the_hpa(run_cli, repo_copy: Path):
    result = run_cli("add-model", "--backend", "onnxruntime", "--gpu", "l4", "--input", "input:FP32:3,224,224",
                     "--output", "probs:FP32:1000", "--autoscaler", "keda", "--repo", str(repo_copy), "--", "resnet")
    assert result.exit_code == 0, result.stderr
    docs = yamlio.loads_all(kustomize.build(repo_copy / "overlays/resnet/l4").yaml, "resnet")
    kinds = [o["kind"] for o in docs]
    assert "HorizontalPodAutoscaler" not in kinds and kinds.count("ScaledObject") == 1
    [so] = [o for o in docs if o["kind"] == "ScaledObject"]
    [dep] = [o for o in docs if o["kind"] == "Deployment"]
    [svc] = [o for o in docs if o["kind"] == "Service"]
    assert schemas.validate_object(so) == []
    spec = so["spec"]
    assert spec["scaleTargetRef"]["name"] == dep["metadata"]["name"] == "resnet-triton"
    assert spec["minReplicaCount"] == 0 and spec["maxReplicaCount"] >= 1
    triggers = {t["name"]: t["metadata"] for t in spec["triggers"]}
    ratio, wake = triggers["queue-compute-ratio"], triggers["wake-up"]
    assert ratio["query"] == ('sum(max by (pod) (triton:queue_compute:ratio{namespace="triton",'
                              f'service="{svc["metadata"]["name"]}"}}))')
    assert ratio["threshold"] == "1"
    assert wake["query"].count('envoy_cluster_name=~"httproute/triton/resnet/rule/.*"') == 2
    assert float(wake["activationThreshold"]) == 0
    # the ratio trigger reads the recording rule the PrometheusRule defines
    assert "triton:queue_compute:ratio" in _recorded()
    # the default stays an HPA
    result = run_cli("add-model", "--backend", "onnxruntime", "--gpu", "l4", "--input", "input:FP32:3,224,224",
                     "--output", "probs:FP32:1000", "--repo", str(repo_copy), "--", "resnet2")
    assert result.exit_code == 0, result.stderr
    kinds = [o["kind"] for o in yamlio.loads_all(kustomize.build(repo_copy / "overlays/resnet2/l4").yaml, "r2")]
    assert "HorizontalPodAutoscaler" in kinds and "ScaledObject" not in kinds


def test_keda_is_installed_by_the_repository():
    keda = _infrastructure()["keda"]["spec"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", keda["chart"]["spec"]["version"])
    assert keda["install"]["crds"] == "Create"


# --- rendering prometheus-adapter queries as the adapter does --------------------------------------------------


@pytest.mark.parametrize(("template", "selector", "namespace", "pods", "expected"), [
    # cases of prometheus-adapter's pkg/naming/metrics_query_test.go (its mock names the namespace label
    # "namespaces" and the resource label "resource")
    ("series <<.Series>>", None, "", ["bar"], "series foo"),
    ("<<.LabelMatchers>>", None, "", ["bar", "baz"], 'resource=~"bar|baz"'),
    ("<<.LabelMatchers>>", None, "", ["bar"], 'resource="bar"'),
    ("<<.LabelMatchers>>", {"metric1": "value1"}, "", ["bar"], 'metric1="value1",resource="bar"'),
    ("<<.LabelMatchers>>", {"foo": "bar"}, "default", ["bar"], 'foo="bar",namespaces="default",resource="bar"'),
    ("<<.GroupBy>>", None, "", ["bar"], "resource"),
])
def test_adapter_query_rendering_matches_the_adapters_own_tests(template, selector, namespace, pods, expected):
    # the adapter leaves the namespace out for root-scoped queries; ours are always namespaced, so the cases
    # without one drop the namespace matcher the renderer writes
    query = monitoring.adapter_pods_query(template, "foo", namespace or "x", pods, selector,
                                          namespace_label="namespaces", pod_label="resource")
    if not namespace:
        query = query.replace('namespaces="x",', "")
    assert query == expected


def test_adapter_query_rendering_refuses_what_it_cannot_reproduce():
    with pytest.raises(monitoring.AdapterTemplateError, match="LabelValuesByName"):
        monitoring.adapter_pods_query('<<index .LabelValuesByName "namespaces">>', "s", "ns", ["p"])
    with pytest.raises(ValueError):
        monitoring.adapter_pods_query("<<.Series>>", "s", "ns", [])
    # label values are quoted as Go's %q quotes them
    assert monitoring.adapter_pods_query("<<.LabelMatchers>>", "s", 'a"b', ["p"]) == 'namespace="a\\"b",pod="p"'


def test_adapter_metric_names_follow_name_matches_and_as():
    assert monitoring.adapter_metric_name({"name": {"matches": "^(.*)_total$"}}, "http_requests_total") == \
        "http_requests"
    assert monitoring.adapter_metric_name({"name": {"matches": "^x$", "as": "y"}}, "x") == "y"
    assert monitoring.adapter_metric_name({"name": {"matches": "^x$", "as": "y"}}, "z") is None
    assert monitoring.adapter_metric_name({}, "anything") == "anything"


def test_hpa_replica_formula():
    # ceil(current x average / target), 10% tolerance, bounded by min/max
    assert monitoring.hpa_desired_replicas(2, [3.0, 1.0], 1.0, 1, 10) == 4
    assert monitoring.hpa_desired_replicas(2, [1.05, 1.0], 1.0, 1, 10) == 2
    assert monitoring.hpa_desired_replicas(4, [0.0] * 4, 1.0, 1, 10) == 1
    assert monitoring.hpa_desired_replicas(1, [50.0], 1.0, 1, 4) == 4


# --- validate: monitors and rules the repository's Prometheus would not select --------------------------------


def _not_selected(run_cli, root: Path) -> list[dict]:
    result = run_cli("validate", str(root), "--no-compat", "-o", "json")
    doc = json.loads(result.stdout)
    return [f for f in doc["findings"] if f["code"] == "MonitorNotSelected"]


def test_validate_reports_monitors_and_rules_its_prometheus_would_not_select(run_cli, repo_copy: Path):
    assert _not_selected(run_cli, repo_copy) == []
    monitor = repo_copy / "base/triton/servicemonitor.yaml"
    monitor.write_text(monitor.read_text().replace("    release: kube-prometheus-stack\n", ""))
    rule = repo_copy / "base/monitoring/prometheusrule.yaml"
    rule.write_text(rule.read_text().replace("    release: kube-prometheus-stack\n", "    release: prometheus\n"))
    gpu = repo_copy / "clusters/production/infrastructure/helmrelease-gpu-operator.yaml"
    gpu.write_text(gpu.read_text().replace("        additionalLabels:\n          release: kube-prometheus-stack\n",
                                           ""))
    found = _not_selected(run_cli, repo_copy)
    by_object = {(f["path"], f["object"]) for f in found}
    assert ("overlays/image-classifier/l4", "ServiceMonitor/triton/image-classifier-triton") in by_object
    assert ("base/monitoring", "PrometheusRule/monitoring/triton") in by_object
    assert ("clusters/production/infrastructure", "HelmRelease/flux-system/gpu-operator") in by_object
    overlays_with_monitors = {p for p, o in by_object if o.startswith("ServiceMonitor/")}
    assert len(overlays_with_monitors) >= 5
    assert all(f["severity"] == "warning" and "release=kube-prometheus-stack" in f["message"] for f in found)
    # a Prometheus told to select every rule (no Helm-values selector) accepts the relabelled rule
    stack = repo_copy / "clusters/production/infrastructure/helmrelease-kube-prometheus-stack.yaml"
    stack.write_text(stack.read_text().replace("ruleSelectorNilUsesHelmValues: true",
                                               "ruleSelectorNilUsesHelmValues: false"))
    assert not any(f["object"].startswith("PrometheusRule/") for f in _not_selected(run_cli, repo_copy))


def test_prometheus_selectors_follow_the_charts_template():
    release = {"metadata": {"name": "kps"}, "spec": {"targetNamespace": "monitoring", "values": {"prometheus": {
        "prometheusSpec": {"podMonitorSelector": {"matchExpressions": [{"key": "team", "operator": "In",
                                                                          "values": ["ml"]}]},
                           "ruleSelectorNilUsesHelmValues": False}}}}}
    sel = monitoring.stack_selectors(release)
    # Flux names the Helm release [targetNamespace-]name when releaseName is not set
    assert sel["ServiceMonitor"] == {"matchLabels": {"release": "monitoring-kps"}}
    assert sel["PrometheusRule"] == {}
    assert monitoring.selector_matches(sel["PodMonitor"], {"team": "ml"})
    assert not monitoring.selector_matches(sel["PodMonitor"], {"team": "web"})
    assert monitoring.selector_matches(sel["PrometheusRule"], {})


def test_tensorrtllm_component_scales_on_the_batchers_signals_the_adapter_serves(repo_copy: Path):
    overlay = repo_copy / "overlays/llama3-8b/h100-80gb/kustomization.yaml"
    text = overlay.read_text()
    assert "components:\n" in text
    overlay.write_text(text.replace("components:\n", "components:\n  - ../../autoscaling/tensorrtllm\n", 1))
    [hpa] = [o for o in yamlio.loads_all(kustomize.build(overlay.parent).yaml, "llama")
             if o["kind"] == "HorizontalPodAutoscaler"]
    assert schemas.validate_object(hpa) == []
    names = {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]}
    adapter = {r["name"]["as"] for r in _infrastructure()["prometheus-adapter"]["spec"]["values"]["rules"]["custom"]}
    assert names == {"triton_trtllm_waiting_requests", "triton_trtllm_kv_cache_utilization"} and names <= adapter
