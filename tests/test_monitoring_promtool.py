"""The alert rules tested as Prometheus tests them: `promtool test rules` on the unit-test files kept in
base/monitoring/tests/ (promtool's own format, so users extend them), every alert covered by a case that fires
and one that does not; and the Triton counting behaviour those cases encode, checked on a real tritonserver."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

RULE = REPO / "base/monitoring/prometheusrule.yaml"
TESTS = REPO / "base/monitoring/tests"
RULES_FILE = "triton.rules.yaml"  # what the test files' rule_files name


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        missing = "no promtool on PATH (Debian package `prometheus`: `make system-deps`)"
        if os.environ.get("KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    return promtool


def _groups() -> list[dict]:
    return yaml.safe_load(RULE.read_text(encoding="utf-8"))["spec"]["groups"]


def _test_files() -> list[Path]:
    return sorted(TESTS.glob("*.test.yaml"))


def _scratch(tmp_path: Path, rule_groups: list[dict]) -> list[Path]:
    """The test files next to the PrometheusRule's groups written as a plain rules file."""
    (tmp_path / RULES_FILE).write_text(yaml.safe_dump({"groups": rule_groups}, sort_keys=False), encoding="utf-8")
    out = []
    for f in _test_files():
        shutil.copyfile(f, tmp_path / f.name)
        out.append(tmp_path / f.name)
    return out


def _run(promtool: str, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_rules_pass_promtool_check_and_every_unit_test_passes(tmp_path: Path):
    promtool = _promtool()
    files = _scratch(tmp_path, _groups())
    assert files, "no *.test.yaml under base/monitoring/tests"
    check = _run(promtool, "check", "rules", RULES_FILE, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    result = _run(promtool, "test", "rules", *[f.name for f in files], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_case_that_fires_and_one_that_does_not():
    alerts = {r["alert"] for g in _groups() for r in g["rules"] if "alert" in r}
    fires: set[str] = set()
    silent: set[str] = set()
    for f in _test_files():
        doc = yaml.safe_load(f.read_text(encoding="utf-8"))
        assert doc["rule_files"] == [RULES_FILE], f.name
        for case in doc["tests"]:
            for t in case.get("alert_rule_test") or []:
                (fires if t.get("exp_alerts") else silent).add(t["alertname"])
    assert alerts - fires == set(), "alerts without a firing case"
    assert alerts - silent == set(), "alerts without a case where they stay silent"


def test_a_broken_rule_fails_its_unit_test(tmp_path: Path):
    # the same tests against rules whose failure threshold moved from 5% to 50% must fail
    promtool = _promtool()
    groups = _groups()
    for group in groups:
        for rule in group["rules"]:
            if rule.get("alert") == "TritonRequestFailures":
                rule["expr"] = rule["expr"].replace("> 0.05", "> 0.5")
    files = _scratch(tmp_path, groups)
    result = _run(promtool, "test", "rules", *[f.name for f in files], cwd=tmp_path)
    assert result.returncode != 0
    assert "alertname: TritonRequestFailures" in result.stdout + result.stderr


def _metrics(url: str) -> dict[tuple[str, str], float]:
    """(metric, model) -> value summed over the other labels, for the request counters."""
    out: dict[tuple[str, str], float] = {}
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    for m in re.finditer(r'^(nv_inference_request_(?:success|failure))\{([^}]*)\} (\S+)$', text, re.M):
        model = re.search(r'model="([^"]*)"', m.group(2)).group(1)
        out[(m.group(1), model)] = out.get((m.group(1), model), 0.0) + float(m.group(3))
    return out


def test_triton_counts_failures_as_the_unit_tests_say(install, tmp_path: Path):
    """What the promtool cases encode, on the real server: an error response is a success of the python model,
    a raised exception a failure; an enclosing ensemble counts each failed request twice (reason OTHER)."""
    from kubectl_triton.adapters.tritonserver import TritonServer, TritonServerError

    repo = tmp_path / "repo"
    io = ('input [{ name: "X" data_type: TYPE_FP32 dims: [1] }]\n'
          'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]\n')
    bodies = {"raises": "        raise pb.TritonModelException('boom')\n",
              "errresp": "        return [pb.InferenceResponse(error=pb.TritonError('bad input')) for r in requests]\n"}
    for name, body in bodies.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{io}')
        (repo / name / "1/model.py").write_text("import triton_python_backend_utils as pb\n\n\n"
                                                "class TritonPythonModel:\n"
                                                "    def execute(self, requests):\n" + body)
        (repo / f"ens_{name}" / "1").mkdir(parents=True)
        (repo / f"ens_{name}" / "config.pbtxt").write_text(
            f'name: "ens_{name}"\nplatform: "ensemble"\nmax_batch_size: 0\n{io}'
            f'ensemble_scheduling {{ step [ {{ model_name: "{name}" model_version: -1 '
            'input_map { key: "X" value: "X" } output_map { key: "Y" value: "Y" } } ] }\n')
    request = {"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
    with TritonServer(repo, install=install).start() as server:
        server.wait_ready()
        for model in ("raises", "errresp", "ens_raises", "ens_errresp"):
            for _ in range(3):
                with pytest.raises(TritonServerError, match="HTTP 500|HTTP 400"):
                    server.request("POST", f"/v2/models/{model}/infer", request)
        counts = _metrics(f"http://127.0.0.1:{server.metrics_port}/metrics")

    def n(metric: str, model: str) -> float:
        return counts.get((f"nv_inference_request_{metric}", model), 0.0)

    # 3 direct requests + 3 through the ensemble each
    assert (n("success", "errresp"), n("failure", "errresp")) == (6, 0)  # error responses count as successes
    assert (n("success", "raises"), n("failure", "raises")) == (0, 6)
    # each ensemble answered 3 failed requests and counts 6 failures, no success
    assert (n("success", "ens_errresp"), n("failure", "ens_errresp")) == (0, 6)
    assert (n("success", "ens_raises"), n("failure", "ens_raises")) == (0, 6)


def test_the_tensorrtllm_adapter_queries_compute_what_their_names_say(tmp_path: Path):
    """No TensorRT-LLM server runs here: the adapter's LLM queries, rendered as the adapter renders them, are
    evaluated by promtool's PromQL engine on series shaped as the backend documents them."""
    from kubectl_triton.adapters import kustomize
    from kubectl_triton.checks.manifests import monitoring
    from kubectl_triton.formats import yamlio

    promtool = _promtool()
    docs = yamlio.loads_all(kustomize.build(REPO / "clusters/production/infrastructure").yaml, "infrastructure")
    [adapter] = [d for d in docs if d["kind"] == "HelmRelease" and d["metadata"]["name"] == "prometheus-adapter"]
    rules = {r["name"]["as"]: r for r in adapter["spec"]["values"]["rules"]["custom"]}
    pods = ["llama3-8b-triton-6d5-klmno", "llama3-8b-triton-6d5-pqrst"]

    def query(name: str) -> str:
        series = re.match(r"\w+", rules[name]["seriesQuery"]).group(0)
        return monitoring.adapter_pods_query(rules[name]["metricsQuery"], series, "triton", pods)

    def series(metric: str, pod: str, kind: str, value: float) -> dict:
        label = "request_type" if metric == "nv_trt_llm_request_metrics" else "kv_cache_block_type"
        return {"series": f'{metric}{{namespace="triton",pod="{pod}",model="tensorrt_llm",version="1",'
                          f'{label}="{kind}"}}', "values": f"{value}x5"}

    inputs = [series("nv_trt_llm_request_metrics", pods[0], "waiting", 3),
              series("nv_trt_llm_request_metrics", pods[0], "active", 64),
              series("nv_trt_llm_request_metrics", pods[1], "waiting", 0),
              series("nv_trt_llm_kv_cache_block_metrics", pods[0], "used", 800),
              series("nv_trt_llm_kv_cache_block_metrics", pods[0], "max", 1000),
              series("nv_trt_llm_kv_cache_block_metrics", pods[1], "used", 100),
              series("nv_trt_llm_kv_cache_block_metrics", pods[1], "max", 1000),
              # another Deployment's pod: not asked for
              series("nv_trt_llm_request_metrics", "other-triton-1", "waiting", 50)]
    expect = {"triton_trtllm_waiting_requests": [3, 0], "triton_trtllm_kv_cache_utilization": [0.8, 0.1]}
    test = {"evaluation_interval": "1m", "tests": [{"interval": "1m", "input_series": inputs, "promql_expr_test": [
        {"expr": query(name), "eval_time": "2m",
         "exp_samples": [{"labels": f'{{pod="{pod}"}}', "value": v} for pod, v in zip(pods, values, strict=True)]}
        for name, values in expect.items()]}]}
    (tmp_path / "adapter.test.yaml").write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    result = _run(promtool, "test", "rules", "adapter.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_keda_queries_wake_on_the_models_route_and_sum_its_pods(tmp_path: Path, repo_copy: Path):
    """The ScaledObject of a model added with --autoscaler keda, rendered; its two queries evaluated by promtool:
    the ratio trigger sums this Service's pods only, the wake-up trigger counts this route's requests (also those
    that found no endpoint) and reads 0, not nothing, when the Gateway has seen none."""
    from kubectl_triton.adapters import kustomize
    from kubectl_triton.formats import yamlio

    promtool = _promtool()
    overlay = repo_copy / "overlays/text-embedder/a10g/kustomization.yaml"
    overlay.write_text(overlay.read_text().replace("components:\n", "components:\n  - ../../autoscaling/keda\n", 1)
                       + "replacements:\n  - path: ../../autoscaling/keda/replacements.yaml\n")
    [so] = [o for o in yamlio.loads_all(kustomize.build(overlay.parent).yaml, "keda") if o["kind"] == "ScaledObject"]
    queries = {t["name"]: t["metadata"]["query"] for t in so["spec"]["triggers"]}

    def ratio(service: str, pod: str, value: float) -> dict:
        return {"series": f'triton:queue_compute:ratio{{namespace="triton",service="{service}",pod="{pod}",'
                          f'model="text_embedder"}}', "values": f"{value}x10"}

    def envoy(metric: str, route: str, per_min: float) -> dict:
        return {"series": f'{metric}{{envoy_cluster_name="httproute/triton/{route}/rule/0"}}',
                "values": f"0+{per_min}x10"}

    busy = [ratio("text-embedder-triton", "a", 1.5), ratio("text-embedder-triton", "b", 0.5),
            ratio("image-classifier-triton", "c", 9),
            envoy("envoy_cluster_upstream_cx_none_healthy", "text-embedder", 60),  # 1/s found no endpoint
            envoy("envoy_cluster_upstream_rq_total", "image-classifier", 600)]
    idle = [ratio("image-classifier-triton", "c", 9), envoy("envoy_cluster_upstream_rq_total", "image-classifier", 600)]
    test = {"evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": busy, "promql_expr_test": [
            {"expr": queries["queue-compute-ratio"], "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 2}]},
            {"expr": queries["wake-up"], "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 1}]}]},
        {"interval": "1m", "input_series": idle, "promql_expr_test": [
            {"expr": queries["queue-compute-ratio"], "eval_time": "5m", "exp_samples": []},
            {"expr": queries["wake-up"], "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 0}]}]}]}
    (tmp_path / "keda.test.yaml").write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    result = _run(promtool, "test", "rules", "keda.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
