"""The Kubernetes adapter as a user meets it through `kubectl triton status`: kubeconfig and namespace
resolution, request budget, retries, and one-line errors (exit 2) for refused or unreachable clusters."""

from __future__ import annotations

import json
import socket

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

MODEL = "llama3-8b"


def run(run_cli, api, *args: str):  # noqa: F811
    return run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe", *args)


def namespaces_listed(api, resource: str) -> set:  # noqa: F811
    return {r.namespace for r in api.cluster.requests if r.resource == resource and r.verb == "list"}


def test_namespace_from_context_then_flag_then_default(run_cli, api, tmp_path):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    assert run(run_cli, api).exit_code == 0
    assert namespaces_listed(api, "deployments") == {NAMESPACE}  # the context's namespace

    api.cluster.requests.clear()
    res = run(run_cli, api, "-n", "serving")
    assert namespaces_listed(api, "deployments") == {"serving"}
    assert "No Triton deployments found in namespace serving" in res.stderr and res.exit_code == 0

    api.cluster.requests.clear()
    run(run_cli, api, "--context", "other")
    assert namespaces_listed(api, "deployments") == {"other"}

    api.cluster.requests.clear()
    bare = api.kubeconfig(tmp_path / "more", namespace=None)
    run_cli("status", "--kubeconfig", str(bare), "--no-probe")
    assert namespaces_listed(api, "deployments") == {"default"}


def test_group_options_are_defaults(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    res = run_cli("--kubeconfig", str(api.kubeconfig_path), "-n", NAMESPACE, "-o", "json", "status", "--no-probe")
    assert res.exit_code == 0 and json.loads(res.stdout)["healthy"] is True


def test_kubeconfig_env_var(run_cli, api, monkeypatch):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig_path))
    assert run_cli("status", "--no-probe").exit_code == 0


def test_all_namespaces(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    healthy_model(api.cluster, "resnet50", ns="vision")
    res = run(run_cli, api, "-A", "-o", "json")
    doc = json.loads(res.stdout)
    assert [(m["namespace"], m["model"]) for m in doc["models"]] == [(NAMESPACE, MODEL), ("vision", "resnet50")]
    assert namespaces_listed(api, "pods") == {None}  # one cluster-wide list, not one per namespace


def test_named_models_select_by_label(run_cli, api):  # noqa: F811
    for m in ("a", "b", "c"):
        healthy_model(api.cluster, m)
    doc = json.loads(run(run_cli, api, "-o", "json", "c", "a").stdout)
    assert [m["model"] for m in doc["models"]] == ["a", "c"]
    dep_query = next(r.path for r in api.cluster.requests if r.resource == "deployments")
    assert "app.kubernetes.io%2Finstance+in+%28c%2Ca%29" in dep_query


def test_constant_request_budget(run_cli, api):  # noqa: F811
    """Seven lists whatever the number of Deployments (Deployments, engine-build Jobs, LeaderWorkerSets, Pods,
    Events, HPAs, Flux Kustomizations); plus one log per failing container."""
    for i in range(30):
        healthy_model(api.cluster, f"m{i:02d}")
    api.cluster.apply(kustomization("apps", [(NAMESPACE, f"m{i:02d}") for i in range(30)]))
    assert run(run_cli, api).exit_code == 0
    assert api.cluster.count() == 7
    assert {r.verb for r in api.cluster.requests} == {"list"}


def test_retries_429_and_5xx(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    api.cluster.faults += [(r"/pods\?", 429), (r"/deployments\?", 500), (r"/deployments\?", 503)]
    res = run(run_cli, api)
    assert res.exit_code == 0, res.stderr
    assert api.cluster.count("list", "deployments") == 3 and api.cluster.count("list", "pods") == 2


def test_persistent_server_error_is_one_line_exit_2(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    api.cluster.faults += [(r"/horizontalpodautoscalers", 500)] * 10
    res = run(run_cli, api)
    assert res.exit_code == 2
    assert res.stderr.splitlines()[0] == (
        "error: list horizontalpodautoscalers.autoscaling in namespace 'triton': API server answered 500: "
        "injected fault 500")
    assert api.cluster.count("list", "horizontalpodautoscalers") == 4  # bounded


def test_forbidden_names_verb_and_resource(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    api.cluster.forbidden.add(("list", "pods"))
    res = run(run_cli, api)
    assert res.exit_code == 2
    first = res.stderr.splitlines()[0]
    assert first.startswith("error: forbidden: list pods in namespace 'triton' was refused")
    assert "Traceback" not in res.stderr and "rbac/" in res.stderr


def test_forbidden_proxy_is_skipped_with_one_note(run_cli, api):  # noqa: F811
    """The built-in `view` role has no pods/proxy: the probe is an enrichment, skipped once with a note naming
    what it would add; the verdict comes from the pods (issue 17)."""
    healthy_model(api.cluster, MODEL)
    healthy_model(api.cluster, "other")
    api.cluster.forbidden.add(("get", "pods/proxy"))
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path))
    assert res.exit_code == 0, res.stdout + res.stderr
    assert res.stdout.count("skipped: the Triton probe") == 1 and "forbidden" in res.stdout
    assert "per-model readiness" in res.stdout
    assert api.cluster.count("proxy") == 1  # not tried again for the second pod


def test_flux_listed_in_flux_system_without_cluster_wide_rights(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    api.cluster.apply(kustomization("apps", [(NAMESPACE, MODEL)], suspend=True))
    api.cluster.forbidden_cluster_wide.add(("list", "kustomizations"))
    doc = json.loads(run(run_cli, api, "-o", "json").stdout)
    assert doc["models"][0]["reasons"][0]["code"] == "FluxSuspended"
    assert namespaces_listed(api, "kustomizations") == {None, "flux-system"}


def test_cluster_without_flux(run_cli, api, monkeypatch):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    monkeypatch.delitem(api.cluster.objects, "kustomizations")
    from tests import apiserver
    monkeypatch.delitem(apiserver.KINDS, "kustomizations")  # the API is not served: 404
    doc = json.loads(run(run_cli, api, "-o", "json").stdout)
    assert doc["healthy"] is True and doc["models"][0]["revision"] is None


def test_unauthorized(run_cli, api, tmp_path):  # noqa: F811
    kc = api.kubeconfig(tmp_path / "more", token="expired")
    res = run_cli("status", "--kubeconfig", str(kc))
    assert res.exit_code == 2
    assert res.stderr.startswith("error: unauthorized: the API server at http://127.0.0.1:")


def test_unreachable_cluster(run_cli, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kc = write_kubeconfig(tmp_path, f"http://127.0.0.1:{port}")  # a port nobody listens on
    res = run_cli("status", "--kubeconfig", str(kc))
    assert res.exit_code == 2
    assert res.stderr.splitlines()[0] == f"error: cannot reach the Kubernetes API at http://127.0.0.1:{port}: " \
                                         "connection refused"


def test_missing_kubeconfig_and_context(run_cli, api, tmp_path):  # noqa: F811
    res = run_cli("status", "--kubeconfig", str(tmp_path / "nope"))
    assert res.exit_code == 2 and "no such file" in res.stderr
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--context", "prod")
    assert res.exit_code == 2 and "context 'prod' not found" in res.stderr


def test_usage_errors(run_cli, api):  # noqa: F811
    assert run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--timeout", "soon").exit_code == 2
    assert run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "-n", "x", "-A").exit_code == 2
    assert api.cluster.requests == []


def test_server_guard_catches_mutations(api):  # noqa: F811
    """The guard every test relies on is real: a write reaches the server and is recorded."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(api.url + "/api/v1/namespaces/triton/pods", data=b"{}", method="POST")
    try:
        urllib.request.urlopen(req)
    except urllib.error.HTTPError as err:
        assert err.code == 405
    assert api.cluster.violations == ["POST /api/v1/namespaces/triton/pods"]
    api.cluster.violations.clear()


def test_one_log_read_per_failing_container_and_none_for_healthy(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, "ok")
    state = {"terminated": {"exitCode": 1, "reason": "Error"}}
    p = pod(MODEL, ready=False, started=False, state=state)
    api.cluster.apply(deployment(MODEL, ready=0), p, hpa(MODEL))
    api.cluster.logs[(NAMESPACE, p["metadata"]["name"], "tritonserver", False)] = "boom\n"
    run(run_cli, api)
    logs = [r for r in api.cluster.requests if r.verb == "log"]
    assert len(logs) == 1 and p["metadata"]["name"] in logs[0].path and "previous" not in logs[0].path


def test_shipped_clusterrole_covers_every_request_and_nothing_more(run_cli, api):  # noqa: F811
    """Every request a status run makes (lists, watches, a log, a probe) is allowed by rbac/clusterrole.yaml,
    and the role grants only read verbs."""
    from pathlib import Path

    from kubectl_triton.formats import yamlio
    from tests.apiserver import KINDS, crashed

    healthy_model(api.cluster, "ok")
    c = crashed()
    p = pod(MODEL, ready=False, started=False, state=c["state"], last_state=c["last_state"], restarts=5)
    api.cluster.apply(deployment(MODEL, ready=0), p, kustomization("apps", [(NAMESPACE, MODEL)]))
    api.cluster.logs[(NAMESPACE, p["metadata"]["name"], "tritonserver", True)] = "boom\n"
    run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--wait", "--timeout", "5s")
    used = set()
    for r in api.cluster.requests:
        group = KINDS[r.resource][0]
        if r.verb in ("log", "proxy"):
            used.add(("get", group, f"{r.resource}/{r.verb}"))
        else:
            used.add((r.verb, group, r.resource))
    assert {v for v, _, _ in used} == {"get", "list", "watch"} and ("get", "", "pods/proxy") in used

    role = yamlio.load_all(Path(__file__).resolve().parents[1] / "rbac" / "clusterrole.yaml")[0]
    allowed = {(v, g, res) for rule in role["rules"] for v in rule["verbs"] for g in rule["apiGroups"]
               for res in rule["resources"]}
    assert used - allowed == set()
    assert {v for v, _, _ in allowed} <= {"get", "list", "watch"}


def test_in_cluster_service_account(run_cli, tmp_path, monkeypatch):
    """In a pod (no kubeconfig): the service account's token, CA and namespace, over HTTPS."""
    import shutil
    import subprocess

    import pytest
    from kubernetes.config import incluster_config

    from kubectl_triton.adapters import kube
    from tests.apiserver import TOKEN, APIServer

    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make the test server's certificate")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(TOKEN)
    (sa / "namespace").write_text("serving")
    shutil.copy(cert, sa / "ca.crt")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(sa / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(sa / "ca.crt"))
    monkeypatch.setattr(kube, "SA_NAMESPACE_FILE", sa / "namespace")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with APIServer(tls=(cert, key)) as server:
        healthy_model(server.cluster, MODEL, ns="serving")
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
        res = run_cli("status", "--no-probe", "-o", "json")
        assert res.exit_code == 0, res.stderr
        assert json.loads(res.stdout)["models"][0]["namespace"] == "serving"
        assert server.cluster.violations == []


def test_request_timeout_is_one_line_exit_2(run_cli, api):  # noqa: F811
    import time

    healthy_model(api.cluster, MODEL)
    api.cluster.delays.append((r"/deployments\?", 30.0))
    t = time.monotonic()
    res = run(run_cli, api, "--request-timeout", "0.5s")
    assert res.exit_code == 2 and time.monotonic() - t < 20  # at the request timeout, not at the 30 s answer
    assert res.stderr.splitlines()[0] == (f"error: list deployments.apps: no answer from the Kubernetes API at "
                                          f"{api.url} within 0.5s")
