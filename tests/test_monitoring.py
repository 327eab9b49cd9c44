"""The Grafana dashboard and the alert rules: schema-valid, applied by Flux, and using only metric names
Triton (and DCGM) export: checked against the catalog in the package and a real tritonserver's /metrics."""

from __future__ import annotations

import json
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


def test_dashboard_uses_only_metrics_triton_and_dcgm_export():
    exprs = monitoring.dashboard_queries(_dashboard())
    assert len(exprs) >= 15
    assert monitoring.unknown_metrics(exprs, ("triton", "dcgm")) == {}


def test_dashboard_covers_the_issue_panels():
    exprs = "\n".join(monitoring.dashboard_queries(_dashboard()))
    for needle in ("rate(nv_inference_request_success", "nv_inference_queue_duration_us",
                   "nv_inference_compute_infer_duration_us", 'quantile="0.5"', 'quantile="0.99"',
                   "nv_gpu_utilization", "nv_gpu_memory_used_bytes", 'kv_cache_block_type="used"'):
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
