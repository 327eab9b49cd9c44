"""API faults against tests/apiserver.py, through `kubectl triton status` (and `gpus`): each gives one clear
line and the documented exit code (2 for a cluster that refuses or fails a request), reads are retried with
backoff on 429/5xx within a bounded time, and `--wait` resumes a watch the server closed mid-way.
The number of fault cases is printed and recorded (record_property `fault_cases`)."""

from __future__ import annotations

import json
import time

import pytest

from tests import apiserver
from tests.apiserver import (
    NAMESPACE,
    api,  # noqa: F401 - fixture
    deployment,
    healthy_model,
    hpa,
    kustomization,
    pod,
    write_kubeconfig,
)
from tests.test_status_wait import Timeline

MODEL = "llama3-8b"
CASES: list[str] = []


@pytest.fixture(autouse=True)
def quiet_server_errors(monkeypatch):
    """The tests that drop connections make the server's handler threads fail; keep their noise off stderr,
    where it would read as the plugin's traceback."""
    monkeypatch.setattr(apiserver._Server, "handle_error", lambda self, request, address: None)


def status(run_cli, api, *args: str):  # noqa: F811
    return run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe", *args)


def one_clear_line(res, code: int = 2) -> str:
    assert res.exit_code == code, (res.exit_code, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    first = res.stderr.splitlines()[0]
    assert first.startswith("error: ") and len(res.stderr.splitlines()) <= 2, res.stderr
    assert apiserver.TOKEN not in res.stderr + res.stdout  # never print credentials
    return first


@pytest.mark.parametrize("status_code, expected", [
    (401, "unauthorized"),
    (403, "forbidden: list deployments.apps in namespace 'triton' was refused"),
    (404, "not found: list deployments.apps in namespace 'triton'"),
    (500, "API server answered 500"),
    (503, "API server answered 503"),
    (429, "API server answered 429"),
])
def test_persistent_fault_is_one_line_exit_2(run_cli, api, status_code, expected):  # noqa: F811
    CASES.append(f"persistent {status_code}")
    healthy_model(api.cluster, MODEL)
    if status_code == 403:
        api.cluster.forbidden.add(("list", "deployments"))
    else:
        api.cluster.faults += [(r"/deployments\?", status_code)] * 10
    t = time.monotonic()
    first = one_clear_line(status(run_cli, api))
    assert expected in first, first
    assert time.monotonic() - t < 10  # bounded retries
    retried = status_code in (429, 500, 503)
    assert api.cluster.count("list", "deployments") == (4 if retried else 1)


@pytest.mark.parametrize("status_code", [429, 500, 502, 503, 504])
def test_transient_fault_is_retried(run_cli, api, status_code):  # noqa: F811
    CASES.append(f"transient {status_code}")
    healthy_model(api.cluster, MODEL)
    api.cluster.faults += [(r"/pods\?", status_code)] * 2
    res = status(run_cli, api)
    assert res.exit_code == 0, res.stderr
    assert api.cluster.count("list", "pods") == 3


def test_429_retry_after_is_honoured(run_cli, api, monkeypatch):  # noqa: F811
    CASES.append("429 Retry-After")
    healthy_model(api.cluster, MODEL)
    original = apiserver._Handler._send_json

    def send(self, code, doc, headers=None):
        if code == 429:
            headers = {"Retry-After": "1"}
        original(self, code, doc, headers)

    monkeypatch.setattr(apiserver._Handler, "_send_json", send)
    api.cluster.faults.append((r"/deployments\?", 429))
    t = time.monotonic()
    res = status(run_cli, api)
    assert res.exit_code == 0, res.stderr
    assert 0.9 < time.monotonic() - t < 30  # waited as told


def test_slow_response_past_the_timeout(run_cli, api):  # noqa: F811
    CASES.append("slow response")
    healthy_model(api.cluster, MODEL)
    api.cluster.delays.append((r"/deployments\?", 30.0))
    t = time.monotonic()
    first = one_clear_line(status(run_cli, api, "--request-timeout", "1s"))
    assert "no answer from the Kubernetes API" in first and "within 1s" in first
    assert time.monotonic() - t < 20  # gave up at the request timeout, not at the 30 s answer


def test_connection_refused(run_cli, tmp_path):
    CASES.append("connection refused")
    kc = write_kubeconfig(tmp_path, "http://127.0.0.1:1")
    res = run_cli("status", "--kubeconfig", str(kc), "--no-probe")
    first = one_clear_line(res)
    assert "cannot reach the Kubernetes API at http://127.0.0.1:1" in first and "refused" in first
    res = run_cli("--kubeconfig", str(kc), "gpus")
    one_clear_line(res)


def test_truncated_json(run_cli, api, monkeypatch):  # noqa: F811
    CASES.append("truncated JSON")
    healthy_model(api.cluster, MODEL)
    original = apiserver._Handler._send_json

    def send(self, code, doc, headers=None):
        if "/deployments" in self.path and code == 200:
            body = json.dumps(doc).encode()[:50]
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        original(self, code, doc, headers)

    monkeypatch.setattr(apiserver._Handler, "_send_json", send)
    first = one_clear_line(status(run_cli, api))
    assert "list deployments.apps" in first and "not valid JSON" in first


def test_connection_dropped_mid_body(run_cli, api, monkeypatch):  # noqa: F811
    CASES.append("connection dropped mid-body")
    healthy_model(api.cluster, MODEL)
    original = apiserver._Handler._send_json

    def send(self, code, doc, headers=None):
        if "/pods" in self.path and code == 200:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:20])
            self.wfile.flush()
            self.close_connection = True  # the server closes the socket: the body ends short
            return
        original(self, code, doc, headers)

    monkeypatch.setattr(apiserver._Handler, "_send_json", send)
    one_clear_line(status(run_cli, api))


def test_watch_closed_midway_is_resumed(run_cli, api, monkeypatch):  # noqa: F811
    """The first watch on pods sends its events and then drops the connection; --wait watches again."""
    CASES.append("watch closed mid-way")
    api.cluster.apply(deployment(MODEL, ready=0, updated=0, generation=3, progressing=("True", "ReplicaSetUpdated")),
                      pod(MODEL, phase="Pending", ready=False), hpa(MODEL),
                      kustomization("apps", [(NAMESPACE, MODEL)]))
    original = apiserver._Handler._watch
    broken = []

    def watch(self, plural, ns, query):
        if plural == "pods" and not broken:
            broken.append(True)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            data = b'{"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVer'
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            time.sleep(0.2)
            self.close_connection = True  # closed without the terminating chunk: the stream breaks
            return
        original(self, plural, ns, query)

    monkeypatch.setattr(apiserver._Handler, "_watch", watch)

    def ready() -> None:
        api.cluster.apply(pod(MODEL), deployment(MODEL, generation=3))

    timeline = Timeline([(1.0, ready)])
    timeline.start()
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe", "--wait", "--timeout", "20s",
                  "-o", "json")
    assert "Traceback" not in res.stderr
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["healthy"] is True
    assert broken and api.cluster.count("watch", "pods") >= 2


def test_proxy_error_from_triton(run_cli, api):  # noqa: F811
    """Triton unreachable through the pod proxy: the API server's 503 is reported, not raised."""
    CASES.append("proxy error")
    healthy_model(api.cluster, MODEL)  # no proxy target: the test API server answers 503
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "-o", "json")
    assert "Traceback" not in res.stderr
    assert res.exit_code in (0, 1), res.stderr
    doc = json.loads(res.stdout)
    assert doc["models"][0]["model"] == MODEL


def test_proxy_forbidden(run_cli, api):  # noqa: F811
    """A 403 on pods/proxy no longer aborts (issue 17): the probe is skipped with a note, exit 0 when Healthy."""
    CASES.append("proxy 403")
    healthy_model(api.cluster, MODEL)
    api.cluster.forbidden.add(("get", "pods/proxy"))
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "-o", "json")
    assert res.exit_code == 0 and "Traceback" not in res.stderr
    doc = json.loads(res.stdout)
    assert doc["healthy"] is True and len(doc["notes"]) == 1 and "pods/proxy" in doc["notes"][0]


def test_zz_fault_figures(record_property):
    record_property("fault_cases", len(CASES))
    print(f"\nfault cases: {len(CASES)} ({', '.join(CASES)})")
    assert len(CASES) >= 18
