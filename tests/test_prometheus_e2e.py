"""The monitoring chain end to end: a real tritonserver, a real Prometheus scraping it on loopback, bounded load.

A shadow of the example model text-embedder (its config.pbtxt: dynamic batching up to 64, one instance; the
python stub takes SERVICE_S per inference of a batch, as a GPU model's batch time grows with its size) serves on
127.0.0.1. Prometheus (Debian's `prometheus` package) scrapes its metrics port every second and evaluates the
rendered PrometheusRule. Load is open loop: requests leave at a fixed rate whether or not earlier ones were
answered, as real clients do.

Simulated, because there is no Kubernetes API here: the target labels the Prometheus Operator derives from the
rendered ServiceMonitor through Kubernetes service discovery (namespace, service, pod, container, endpoint, job =
the Service name) are static labels of the scrape job, named exactly as the operator names them; `instance` is
the loopback address instead of the pod IP. The scrape interval is 1 s instead of the ServiceMonitor's 15 s so
that `rate(...[1m])` has samples within seconds.

Phases (module fixture, ~30 s): idle (model loaded, no request), light (20% of capacity), overload (3x capacity).
In each, the queries prometheus-adapter would send for the HPA are rendered from the HelmRelease's
seriesQuery/metricsQuery the way the adapter renders them (kubectl_triton.checks.manifests.monitoring) and run
through Prometheus' HTTP API; the HPA's replica formula is applied to the answer. After the overload every
dashboard and alert expression runs through the same API.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubectl_triton.adapters import kustomize, shadow
from kubectl_triton.adapters.tritonserver import TritonServer, find_install, free_ports
from kubectl_triton.checks.manifests import monitoring
from kubectl_triton.errors import ToolMissing
from kubectl_triton.formats import yamlio
from tests.conftest import REPO

OVERLAY = "overlays/text-embedder/a10g"
MODEL_DIR = "models/text-embedder"
MODEL = "text_embedder"
SERVICE_S = 0.02  # stub time per inference: capacity 1 / SERVICE_S = 50 inferences/s
LIGHT_RPS, LIGHT_S = 10, 5  # 20% of capacity
OVERLOAD_RPS, OVERLOAD_S = 150, 8  # 3x capacity
SCRAPE_S = 1
# Labels the Prometheus Operator adds from the ServiceMonitor's Kubernetes service discovery (simulated here)
OPERATOR_TARGET_LABELS = ("namespace", "service", "pod", "container", "endpoint", "job")
SCRAPE_LABELS = {*OPERATOR_TARGET_LABELS, "instance"}
# What Grafana substitutes for the dashboard's variables (All namespaces/models; $__rate_interval for a 1 s scrape)
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$namespace": ".+", "$model": ".+"}

STUB_SUFFIX = '''

import time as _time

_Generic = TritonPythonModel


class TritonPythonModel(_Generic):
    """The generic stand-in, taking SERVICE_S per inference of each batch it executes."""

    def execute(self, requests):
        _time.sleep({service_s} * sum(self._batch_size(r) for r in requests))
        return super().execute(requests)
'''


def _objects(path: str) -> list[dict]:
    return yamlio.loads_all(kustomize.build(REPO / path).yaml, path)


def _one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


class Prometheus:
    """A prometheus process on 127.0.0.1 with a config file; queries through its HTTP API."""

    def __init__(self, workdir: Path, config: dict, rules: dict) -> None:
        self.workdir = workdir
        (workdir / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
        (workdir / "prometheus.yml").write_text(yaml.safe_dump({**config, "rule_files": ["rules.yml"]},
                                                               sort_keys=False))
        [self.port] = free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> Prometheus:
        binary = shutil.which("prometheus")
        assert binary
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={self.workdir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 "--log.level=warn"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.workdir, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                if urllib.request.urlopen(f"{self.url}/-/ready", timeout=1).status == 200:
                    return self
            time.sleep(0.1)
        raise AssertionError(f"prometheus not ready in {timeout} s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                doc = json.load(resp)
        except urllib.error.HTTPError as err:
            doc = json.load(err)
        assert doc.get("status") == "success", f"{path} {params}: {doc.get('errorType')}: {doc.get('error')}"
        return doc["data"]

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """An instant query at now: (labels, value) of every series of the resulting vector."""
        data = self.api("query", query=expr, time=f"{time.time():.3f}")
        assert data["resultType"] == "vector", (expr, data["resultType"])
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]


@dataclass
class Phase:
    """What one load phase measured: adapter metric name -> {pod: value}, and the old chart query's values."""

    name: str
    rps: float
    seconds: float
    adapter: dict[str, dict[str, float]] = field(default_factory=dict)
    queries: dict[str, str] = field(default_factory=dict)
    old_query: dict[str, float] = field(default_factory=dict)
    answered: int = 0


@dataclass
class Chain:
    """The running chain and what its phases measured."""

    prometheus: Prometheus
    server: TritonServer
    namespace: str
    service: str
    pod: str
    hpa: dict
    adapter_rules: list[dict]
    prometheus_rule: dict
    dashboard: dict
    phases: dict[str, Phase] = field(default_factory=dict)
    series: dict[str, list[str]] = field(default_factory=dict)  # seriesQuery -> discovered series names

    def hpa_metric(self) -> tuple[str, float, int, int]:
        spec = self.hpa["spec"]
        [metric] = spec["metrics"]
        target = metric["pods"]["target"]
        assert target["type"] == "AverageValue"
        return (metric["pods"]["metric"]["name"], quantity(str(target["averageValue"])), spec["minReplicas"],
                spec["maxReplicas"])


def quantity(text: str) -> float:
    """A Kubernetes quantity as the HPA compares it ("1", "500m", "2k")."""
    m = re.fullmatch(r"([0-9.]+)([mkMG]?)", text)
    assert m, text
    return float(m.group(1)) * {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]


async def _open_loop(url: str, body: dict, rps: float, seconds: float, grace_s: float) -> int:
    """Send rps x seconds requests at a fixed rate (open loop); returns how many were answered within the
    phase plus `grace_s` (the rest are abandoned: the server keeps working on them)."""
    import aiohttp

    answered = 0

    async def one(session: aiohttp.ClientSession) -> None:
        nonlocal answered
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with session.post(url, json=body) as resp:
                await resp.read()
                answered += resp.status == 200

    timeout = aiohttp.ClientTimeout(total=seconds + grace_s)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        tasks = []
        start = time.monotonic()
        for i in range(int(rps * seconds)):
            delay = start + i / rps - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(session)))
        rest = start + seconds + grace_s - time.monotonic()
        _, pending = await asyncio.wait(tasks, timeout=max(rest, 0.01))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return answered


def _measure(chain: Chain, phase: Phase) -> None:
    """Run the adapter's queries (and the replaced k8s-onprem chart query) for the one pod, as the HPA asks."""
    for rule in chain.adapter_rules:
        [series] = chain.series[rule["seriesQuery"]] or [None]
        if series is None:
            continue
        name = monitoring.adapter_metric_name(rule, series)
        assert name
        query = monitoring.adapter_pods_query(rule["metricsQuery"], series, chain.namespace, [chain.pod])
        phase.queries[name] = query
        phase.adapter[name] = {labels["pod"]: value for labels, value in chain.prometheus.query(query)}
    where = f'namespace="{chain.namespace}",pod="{chain.pod}"'
    old = (f"avg(delta(nv_inference_queue_duration_us{{{where}}}[30s]) / (1 + "
           f"delta(nv_inference_request_success{{{where}}}[30s]))) by (pod)")
    phase.old_query = {labels["pod"]: value for labels, value in chain.prometheus.query(old)}


def _wait_for_samples(prom: Prometheus, expr: str, count: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = prom.query(f"count_over_time(({expr})[1m:{SCRAPE_S}s])")
        if result and min(v for _, v in result) >= count:
            return
        time.sleep(0.25)
    raise AssertionError(f"fewer than {count} samples of {expr} after {timeout} s")


@contextlib.contextmanager
def running_chain() -> Iterator[Chain]:
    """Start the chain, run the three phases, yield what they measured; always stop both servers."""
    if shutil.which("prometheus") is None:
        missing = "no prometheus on PATH (Debian package `prometheus`: `make system-deps`)"
        if os.environ.get("KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    try:
        find_install()
    except ToolMissing as exc:
        pytest.skip(f"no tritonserver: {exc.message}")
    overlay = _objects(OVERLAY)
    service = _one(overlay, "Service")
    monitor = _one(overlay, "ServiceMonitor")
    deployment = _one(overlay, "Deployment")
    namespace, service_name = service["metadata"]["namespace"], service["metadata"]["name"]
    [endpoint] = monitor["spec"]["endpoints"]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]}[endpoint["port"]] == 8002
    pod = f"{deployment['metadata']['name']}-5f7d9c8b6-x2x7k"
    args = [a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            if a.startswith("--metrics-config=")]
    infrastructure = _objects("clusters/production/infrastructure")
    adapter = _one(infrastructure, "HelmRelease", "prometheus-adapter")
    monitoring_objects = _objects("base/monitoring")
    rule = _one(monitoring_objects, "PrometheusRule")
    dashboard = json.loads(_one(monitoring_objects, "ConfigMap")["data"]["triton-dashboard.json"])

    with tempfile.TemporaryDirectory(prefix="kubectl-triton-e2e-") as tmp:
        work = Path(tmp)
        stub = work / "stub.py"
        stub.write_text(shadow.stub_path("generic").read_text(encoding="utf-8")
                        + STUB_SUFFIX.format(service_s=SERVICE_S), encoding="utf-8")
        shadow.build_shadow(REPO / MODEL_DIR, work / "repo", stubs={"pytorch": str(stub)})
        server = TritonServer(work / "repo", extra_args=args)
        prom: Prometheus | None = None
        try:
            server.start()
            server.wait_ready()
            static_labels = {"namespace": namespace, "service": service_name, "pod": pod,
                             "container": "tritonserver", "endpoint": endpoint["port"]}
            config = {"global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
                      "scrape_configs": [{"job_name": service_name, "metrics_path": endpoint["path"],
                                          "static_configs": [{"targets": [f"127.0.0.1:{server.metrics_port}"],
                                                              "labels": static_labels}]}]}
            (work / "prometheus").mkdir()
            prom = Prometheus(work / "prometheus", config, {"groups": rule["spec"]["groups"]}).start()
            chain = Chain(prom, server, namespace, service_name, pod, _one(overlay, "HorizontalPodAutoscaler"),
                          adapter["spec"]["values"]["rules"]["custom"], rule, dashboard)
            _wait_for_samples(prom, f'nv_inference_queue_duration_us{{model="{MODEL}"}}', 3)
            for r in chain.adapter_rules:
                found = prom.api("series", **{"match[]": r["seriesQuery"], "start": f"{time.time() - 600:.0f}"})
                chain.series[r["seriesQuery"]] = sorted({s["__name__"] for s in found})
            body = {"inputs": [{"name": "INPUT__0", "shape": [1, 8], "datatype": "INT64", "data": list(range(8))},
                               {"name": "INPUT__1", "shape": [1, 8], "datatype": "INT64", "data": [1] * 8}]}
            url = f"{server.http_url}/v2/models/{MODEL}/infer"
            for phase in (Phase("idle", 0, 0), Phase("light", LIGHT_RPS, LIGHT_S),
                          Phase("overload", OVERLOAD_RPS, OVERLOAD_S)):
                if phase.rps:
                    phase.answered = asyncio.run(_open_loop(url, body, phase.rps, phase.seconds, grace_s=0.5))
                time.sleep(2 * SCRAPE_S + 0.2)  # two scrapes and one rule evaluation after the phase
                _measure(chain, phase)
                chain.phases[phase.name] = phase
            yield chain
        finally:
            if prom is not None:
                prom.stop()
            server.stop(grace=0)


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    with running_chain() as c:
        yield c


def _ratio(chain: Chain, phase: str) -> float:
    name = chain.hpa_metric()[0]
    values = chain.phases[phase].adapter.get(name)
    assert values, f"{phase}: the adapter's query for {name} returned no series: {chain.phases[phase].queries}"
    assert set(values) == {chain.pod}
    return values[chain.pod]


def test_the_adapter_discovers_triton_series_under_the_name_the_hpa_uses(chain: Chain):
    name, _, _, _ = chain.hpa_metric()
    rules = {monitoring.adapter_metric_name(r, s): r
             for r in chain.adapter_rules for s in chain.series[r["seriesQuery"]]}
    assert name in rules, f"no adapter rule names a discovered series {name}: {chain.series}"
    overrides = rules[name]["resources"]["overrides"]
    assert overrides == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    # the TensorRT-LLM rules find nothing on a python model, and their queries still run (empty, not an error)
    for r in chain.adapter_rules:
        if "nv_trt_llm" in r["seriesQuery"]:
            assert chain.series[r["seriesQuery"]] == []
            series = re.match(r"\w+", r["seriesQuery"]).group(0)
            assert chain.prometheus.query(monitoring.adapter_pods_query(r["metricsQuery"], series, chain.namespace,
                                                                       [chain.pod])) == []


def test_idle_server_reads_zero_and_the_hpa_scales_down_to_min_replicas(chain: Chain):
    _, target, min_replicas, max_replicas = chain.hpa_metric()
    value = _ratio(chain, "idle")
    assert value == 0
    # however many replicas run, idle ones ask for no more than minReplicas
    for current in range(1, max_replicas + 1):
        desired = monitoring.hpa_desired_replicas(current, [value] * current, target, min_replicas, max_replicas)
        assert desired <= min_replicas


def test_a_server_that_keeps_up_stays_under_the_target(chain: Chain):
    _, target, min_replicas, max_replicas = chain.hpa_metric()
    light = chain.phases["light"]
    assert light.answered >= 0.9 * LIGHT_RPS * LIGHT_S
    value = _ratio(chain, "light")
    assert 0 < value < target / 2
    assert monitoring.hpa_desired_replicas(1, [value], target, min_replicas, max_replicas) == 1
    # the k8s-onprem chart's query it replaces asked for maxReplicas at the same load (its target was 50 µs)
    [old] = light.old_query.values()
    assert monitoring.hpa_desired_replicas(1, [old], 50, min_replicas, max_replicas) == max_replicas


def test_an_overloaded_server_crosses_the_target_and_the_hpa_adds_replicas(chain: Chain):
    _, target, min_replicas, max_replicas = chain.hpa_metric()
    overload = chain.phases["overload"]
    value = _ratio(chain, "overload")
    assert value > target
    desired = monitoring.hpa_desired_replicas(1, [value], target, min_replicas, max_replicas)
    assert desired == min(max_replicas, math.ceil(value / target)) and desired > 1
    assert overload.answered < OVERLOAD_RPS * OVERLOAD_S  # the server could not keep up: a backlog built
    # the recording rule KEDA and the dashboard read agrees that this model is over target
    recorded = chain.prometheus.query(f'triton:queue_compute:ratio{{model="{MODEL}"}}')
    assert [labels["pod"] for labels, _ in recorded] == [chain.pod] and recorded[0][1] > target


def test_the_adapter_keeps_models_apart(chain: Chain):
    # an HPA naming the model (metric.selector.matchLabels.model) gets that model's ratio; another name gets none
    [rule] = [r for r in chain.adapter_rules if r["name"]["as"] == chain.hpa_metric()[0]]
    ours = monitoring.adapter_pods_query(rule["metricsQuery"], "nv_inference_queue_duration_us", chain.namespace,
                                         [chain.pod], {"model": MODEL})
    other = monitoring.adapter_pods_query(rule["metricsQuery"], "nv_inference_queue_duration_us", chain.namespace,
                                          [chain.pod], {"model": "not_loaded"})
    assert 'model="text_embedder",namespace="triton",pod=' in ours
    assert [v for _, v in chain.prometheus.query(ours)][0] > chain.hpa_metric()[1]
    assert chain.prometheus.query(other) == []


def _legend_labels(legend: str) -> set[str]:
    return set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend or ""))


def _grafana(expr: str) -> str:
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def _documented_labels(expr: str) -> set[str] | None:
    """Labels the exporters document for the metrics of `expr` plus the scrape's, None for metrics without a
    documented label list (those the CPU server serves)."""
    known: set[str] = set()
    for name in monitoring.promql_metrics(expr):
        info = next((m[name] for m in monitoring.catalog().values() if name in m), None)
        if info is None or "labels" not in info:
            return None
        known |= set(info["labels"])
    return known | SCRAPE_LABELS


def test_every_dashboard_panel_returns_series_with_its_legend_labels(chain: Chain):
    checked = 0
    panels = [p for row in chain.dashboard["panels"] for p in [row, *(row.get("panels") or [])]]
    for panel in panels:
        for target in panel.get("targets") or []:
            expr, legend = _grafana(target["expr"]), target.get("legendFormat", "")
            result = chain.prometheus.query(expr)
            documented = _documented_labels(target["expr"])
            if documented is None:  # Triton's own metrics and our recording rules: served here
                assert result, f"{panel['title']}: no series for {expr}"
                for labels, _ in result:
                    assert _legend_labels(legend) <= set(labels), (panel["title"], legend, labels)
                checked += 1
            else:  # GPU, DCGM, TensorRT-LLM: no such exporter here; the names are checked against their docs
                assert result == []
                grouping = {lbl.strip() for g in re.findall(r"\bby\s*\(([^)]*)\)", expr) for lbl in g.split(",")}
                assert _legend_labels(legend) | grouping <= documented, (panel["title"], legend, documented)
    assert checked >= 8


def test_every_dashboard_variable_finds_values(chain: Chain):
    variables = [v for v in chain.dashboard["templating"]["list"] if v.get("type") == "query"]
    assert variables
    for var in variables:
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
        assert m, query
        series = chain.prometheus.api("series", **{"match[]": _grafana(m.group(1)),
                                                  "start": f"{time.time() - 600:.0f}"})
        values = {s[m.group(2)] for s in series if m.group(2) in s}
        assert values, f"variable {var['name']}: {query} finds no values"
        expected = chain.namespace if var["name"] == "namespace" else MODEL
        assert expected in values, (var["name"], values)


def test_every_rule_and_alert_expression_runs_and_the_queue_alert_sees_the_overload(chain: Chain):
    rules = [r for g in chain.prometheus_rule["spec"]["groups"] for r in g["rules"]]
    results = {r.get("alert") or r["record"]: chain.prometheus.query(r["expr"]) for r in rules}
    # Prometheus evaluated every rule of the file without error
    groups = chain.prometheus.api("rules")["groups"]
    health = {r["name"]: (r["health"], r.get("lastError", "")) for g in groups for r in g["rules"]}
    assert len(health) == len(rules) and all(h == "ok" for h, _ in health.values()), health
    # queue time per request is seconds now: the alert's condition holds (it fires after its `for`)
    assert [labels["model"] for labels, _ in results["TritonQueueTimeHigh"]] == [MODEL]
    assert results["TritonRequestFailures"] == [] and results["TritonModelFailing"] == []
    # the metrics-down alert selects this target by the operator's labels (up == 1 here, so it does not fire)
    assert [v for _, v in chain.prometheus.query('up{endpoint="metrics", service=~".+-triton"}')] == [1.0]
    assert results["TritonMetricsDown"] == []

