"""`status` against an API that behaves like a real one where it matters (issue 17): RBAC from the shipped roles,
a NetworkPolicy that drops the API server's proxy dial, a failing kubelet, 410 Gone on every watch, paged lists,
selector 400s, the kubelet's log rules, BOOKMARK/ERROR watch events and both Event APIs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubectl_triton.adapters import kube as kube_mod
from kubectl_triton.errors import ClusterError
from kubectl_triton.formats import yamlio
from tests.apiserver import (
    NAMESPACE,
    TOKEN,
    api,  # noqa: F401 - fixture
    crashed,
    deployment,
    event,
    healthy_model,
    hpa,
    kustomization,
    pod,
)

MODEL = "llama3-8b"
RBAC = Path(__file__).resolve().parents[1] / "rbac"
SHM_LINE = ("E1202 11:13:04.201020 1 pb_stub.cc:402] Failed to increase the shared memory pool size for key "
            "'triton_python_backend_shm_region_4' from 67108864 to 134217728 bytes. Error: No space left on device\n")


def role(name: str) -> list[dict]:
    return yamlio.load_all(RBAC / name)[0]["rules"]


def crash_loop(api) -> dict:  # noqa: F811
    c = crashed(restarts=3)
    p = pod(MODEL, ready=False, started=False, state=c["state"], last_state=c["last_state"], restarts=3)
    api.cluster.apply(deployment(MODEL, ready=0, progressing=("True", "ReplicaSetUpdated")), p, hpa(MODEL),
                      kustomization("apps", [(NAMESPACE, MODEL)]))
    api.cluster.logs[(NAMESPACE, p["metadata"]["name"], "tritonserver", True)] = SHM_LINE
    return p


def status(run_cli, api, *args: str):  # noqa: F811
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "-o", "json", *args)
    assert "Traceback" not in res.stderr
    return res, json.loads(res.stdout) if res.stdout.strip() else {}


# -- RBAC: which permissions give which depth ---------------------------------------------------------------

def test_full_role_reads_the_log_and_probes(run_cli, api):  # noqa: F811
    api.cluster.rbac_rules = role("clusterrole.yaml")
    crash_loop(api)
    healthy_model(api.cluster, "ok")
    res, doc = status(run_cli, api)
    assert res.exit_code == 1
    bad = next(m for m in doc["models"] if m["model"] == MODEL)
    assert bad["reasons"][0]["code"] == "SharedMemoryTooSmall"
    crash = next(r for r in bad["reasons"] if r["code"] == "CrashLoopBackOff")
    assert "quoted here" in crash["fix"]  # the signature's reason quotes the line
    assert api.cluster.count("log") == 1 and api.cluster.count("proxy") >= 1
    # the probe could not connect (no Triton behind the test server): one note, no verdict change
    assert [n for n in doc["notes"] if "pods/log" in n] == []
    assert next(m for m in doc["models"] if m["model"] == "ok")["phase"] == "Healthy"


def test_objects_role_diagnoses_from_state_and_names_what_it_skipped(run_cli, api):  # noqa: F811
    """Like the built-in `view` role: no pods/log, no pods/proxy. Exit 1 for the crash loop, never 2."""
    api.cluster.rbac_rules = role("clusterrole-status-objects.yaml")
    crash_loop(api)
    healthy_model(api.cluster, "ok")
    res, doc = status(run_cli, api)
    assert res.exit_code == 1, res.stderr
    bad = next(m for m in doc["models"] if m["model"] == MODEL)
    assert bad["phase"] == "Failed" and bad["reasons"][0]["code"] == "CrashLoopBackOff"
    assert "kubectl logs --previous" in bad["reasons"][0]["fix"]
    notes = doc["notes"]
    assert len([n for n in notes if "get pods/log is forbidden" in n]) == 1
    assert [n for n in notes if "skipped: the Triton probe" in n] == [
        "skipped: the Triton probe (get pods/proxy is forbidden in namespace 'triton'); it would add Triton's own "
        "per-model readiness and load errors"]


def test_wait_with_objects_role_asks_for_a_refused_log_once(run_cli, api):  # noqa: F811
    api.cluster.rbac_rules = role("clusterrole-status-objects.yaml")
    crash_loop(api)
    api.cluster.apply(deployment(MODEL, ready=0, progressing=("True", "ReplicaSetUpdated")))  # still rolling out
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--wait", "--timeout", "3s", "-o", "json")
    assert res.exit_code in (1, 3) and "Traceback" not in res.stderr
    assert api.cluster.count("log") == 1
    assert any("get pods/log is forbidden" in n for n in json.loads(res.stdout)["notes"])


def test_objects_role_text_output_lists_the_notes(run_cli, api):  # noqa: F811
    api.cluster.rbac_rules = role("clusterrole-status-objects.yaml")
    healthy_model(api.cluster, MODEL)
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path))
    assert res.exit_code == 0
    assert "Not everything was read:" in res.stdout and "pods/proxy" in res.stdout


def test_the_roles_grant_only_reads_and_the_full_role_is_a_superset():
    full = {(v, g, r) for rule in role("clusterrole.yaml") for v in rule["verbs"] for g in rule["apiGroups"]
            for r in rule["resources"]}
    objects = {(v, g, r) for rule in role("clusterrole-status-objects.yaml") for v in rule["verbs"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    assert {v for v, _, _ in full | objects} <= {"get", "list", "watch"}
    assert full - objects == {("get", "", "pods/log"), ("get", "", "pods/proxy"), ("get", "", "nodes"),
                              ("list", "", "nodes")}
    assert "clusterrole-status-objects.yaml" in (RBAC / "kustomization.yaml").read_text()


def test_a_token_file_ending_in_a_newline_is_read_as_kubectl_reads_it(run_cli, api, tmp_path):  # noqa: F811
    """`echo $TOKEN > file`: kubectl trims the newline; sent as is, the header is refused before any request."""
    healthy_model(api.cluster, MODEL)
    token = tmp_path / "token"
    token.write_text(f"{TOKEN}\n")
    doc = json.loads(api.kubeconfig_path.read_text())
    doc["users"][0]["user"] = {"tokenFile": str(token)}
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(doc))
    res = run_cli("status", "--kubeconfig", str(kubeconfig), "-o", "json")
    assert res.exit_code == 0 and "Traceback" not in res.stderr, res.stderr
    assert [m["phase"] for m in json.loads(res.stdout)["models"]] == ["Healthy"]


def test_403_is_worded_like_rbac(api):  # noqa: F811
    """The server's Status for a refused subresource names the object, user, verb, resource and namespace."""
    import urllib.request

    api.cluster.rbac_rules = role("clusterrole-status-objects.yaml")
    p = pod(MODEL)
    api.cluster.apply(p)
    req = urllib.request.Request(f"{api.url}/api/v1/namespaces/{NAMESPACE}/pods/{p['metadata']['name']}/log",
                                 headers={"Authorization": "Bearer test-token"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req)
    doc = json.loads(info.value.read())
    assert info.value.code == 403 and doc["reason"] == "Forbidden"
    assert doc["message"] == (f'pods "{p["metadata"]["name"]}" is forbidden: User "alice" cannot get resource '
                              f'"pods/log" in API group "" in the namespace "{NAMESPACE}"')
    assert doc["details"] == {"kind": "pods", "name": p["metadata"]["name"]}


def test_events_forbidden_is_a_note(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    api.cluster.forbidden.add(("list", "events"))
    res, doc = status(run_cli, api, "--no-probe")
    assert res.exit_code == 0
    assert doc["notes"] == ["not read: events (list is forbidden); scheduling, probe and kill events are not used"]


# -- kubelet and NetworkPolicy ------------------------------------------------------------------------------

def test_a_failing_kubelet_is_named_and_the_rest_diagnosed(run_cli, api):  # noqa: F811
    crash_loop(api)
    healthy_model(api.cluster, "ok")
    api.cluster.broken_kubelets.add("gpu-node-a100-1")
    res, doc = status(run_cli, api, "--no-probe")
    assert res.exit_code == 1
    assert {m["model"]: m["phase"] for m in doc["models"]} == {MODEL: "Failed", "ok": "Healthy"}
    assert any("API server answered 500" in n and "tls: internal error" in n for n in doc["notes"])


def test_networkpolicy_dropping_the_proxy_is_one_note_and_one_attempt(run_cli, api):  # noqa: F811
    """The repository's NetworkPolicy admits port 8000 only from labelled namespaces; with a policy-enforcing CNI
    the API server's dial times out. One attempt, one note, the ready pods are Healthy (exit 0)."""
    names = []
    for m in ("a", "b", "c"):
        names.append(healthy_model(api.cluster, m)["metadata"]["name"])
    api.cluster.dropped_proxies.update((NAMESPACE, n) for n in names)
    res, doc = status(run_cli, api, "--request-timeout", "1s")
    assert res.exit_code == 0, res.stderr
    assert all(m["phase"] == "Healthy" for m in doc["models"])
    assert api.cluster.count("proxy") == 1
    assert len(doc["notes"]) == 1 and "NetworkPolicy" in doc["notes"][0]


def test_a_loading_pod_that_does_not_answer_yet_is_no_note(run_cli, api):  # noqa: F811
    """Triton listens only once it loaded: a refused probe of a pod that is not ready is expected, not a
    NetworkPolicy; it is neither noted nor does it stop the probing of the other pods."""
    api.cluster.apply(deployment(MODEL, ready=0, progressing=("True", "ReplicaSetUpdated")),
                      pod(MODEL, "load1", ready=False, started=False), pod(MODEL, "load2", ready=False, started=False))
    res, doc = status(run_cli, api)
    assert res.exit_code == 1 and doc["models"][0]["phase"] == "Progressing"
    assert "notes" not in doc and api.cluster.count("proxy") == 2


# -- watches: 410 Gone with backoff, BOOKMARK and ERROR events -------------------------------------------------

def test_watch_410_forever_backs_off(run_cli, api, monkeypatch):  # noqa: F811
    """A server that answers every watch with 410 Gone: the informers relist with growing waits, not in a loop
    (the issue measured 654 list+watch pairs in 6 s without backoff)."""
    from kubectl_triton.status import collect as cmd

    monkeypatch.setattr(cmd, "WATCH_BACKOFF_S", 0.2)
    api.cluster.apply(deployment(MODEL, ready=0, progressing=("True", "ReplicaSetUpdated")),
                      pod(MODEL, phase="Pending", ready=False), hpa(MODEL), kustomization("apps", [(NAMESPACE, MODEL)]))
    api.cluster.expire_watches = True
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe", "--wait", "--timeout", "2s")
    assert res.exit_code == 3, res.stderr
    watches = api.cluster.count("watch")
    informers = 7  # Deployments, Jobs, Pods, Events, HPAs, Kustomizations, LeaderWorkerSets
    # backoff 0.2, 0.4, 0.8 (+20% jitter) fits at most 4 watches per informer in 2 s
    assert informers <= watches <= informers * 4, watches
    print(f"\nwatch 410 forever, 2 s: {watches} watches and {api.cluster.count('list')} lists for {informers} "
          "informers")


def test_watch_bookmarks_and_error_events(api):  # noqa: F811
    api.cluster.bookmark_interval = 0.1
    healthy_model(api.cluster, MODEL)
    kube = kube_mod.connect(str(api.kubeconfig_path))
    _, rv = kube.list("pods", NAMESPACE)
    stream = kube.watch("pods", NAMESPACE, resource_version=rv, timeout_seconds=2)
    types = [next(stream)["type"], next(stream)["type"]]
    stream.close()
    assert types == ["BOOKMARK", "BOOKMARK"]
    api.cluster.watch_errors.append(("pods", {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                              "code": 500, "reason": "InternalError", "message": "etcd leader lost"}))
    events = list(kube.watch("pods", NAMESPACE, resource_version=rv, timeout_seconds=2))
    assert events[-1]["type"] == "ERROR" and events[-1]["object"]["code"] == 500


def test_watch_error_event_during_wait_is_one_line(run_cli, api):  # noqa: F811
    api.cluster.apply(deployment(MODEL, ready=0, progressing=("True", "ReplicaSetUpdated")),
                      pod(MODEL, phase="Pending", ready=False))
    api.cluster.watch_errors.append(("deployments", {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                     "code": 500, "reason": "InternalError",
                                                     "message": "etcd leader lost"}))
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe", "--wait", "--timeout", "5s")
    assert res.exit_code == 2 and res.stderr.splitlines()[0] == "error: watch deployments: etcd leader lost"


# -- lists: paging, selectors -----------------------------------------------------------------------------------

def test_lists_are_paged_with_limit_and_continue(api):  # noqa: F811
    for i in range(25):
        api.cluster.apply(pod(f"m{i:02d}"))
    kube = kube_mod.connect(str(api.kubeconfig_path))
    items, rv = kube.list("pods", NAMESPACE, page_size=10)
    assert len(items) == 25 and len({p["metadata"]["name"] for p in items}) == 25 and rv
    lists = [r.path for r in api.cluster.requests if r.verb == "list"]
    assert len(lists) == 3 and all("limit=10" in p for p in lists) and sum("continue=" in p for p in lists) == 2


def test_expired_continue_token_restarts_the_list(api, monkeypatch):  # noqa: F811
    for i in range(15):
        api.cluster.apply(pod(f"m{i:02d}"))
    kube = kube_mod.connect(str(api.kubeconfig_path))
    original = kube._json
    pages = []

    def compact_after_first_page(resp, request="request"):
        doc = original(resp, request)
        pages.append(doc)
        if len(pages) == 1:
            api.cluster.compact()  # etcd compacts between the pages: the continue token is now too old
        return doc

    monkeypatch.setattr(kube, "_json", compact_after_first_page)
    items, _ = kube.list("pods", NAMESPACE, page_size=10)
    assert len(items) == 15
    assert [r.path.count("limit=") for r in api.cluster.requests if r.verb == "list"] == [1, 1, 0]


def test_status_lists_in_pages_on_a_large_namespace(run_cli, api, monkeypatch):  # noqa: F811
    monkeypatch.setattr(kube_mod, "PAGE_SIZE", 4)
    for i in range(10):
        healthy_model(api.cluster, f"m{i:02d}")
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe")
    assert res.exit_code == 0
    assert api.cluster.count("list", "pods") == 3 and api.cluster.count("list", "deployments") == 3


def test_invalid_selectors_are_400(api):  # noqa: F811
    kube = kube_mod.connect(str(api.kubeconfig_path))
    with pytest.raises(ClusterError, match="answered 400: unable to parse requirement"):
        kube.list("pods", NAMESPACE, label_selector="app in (a b")
    with pytest.raises(ClusterError, match="answered 400: field label not supported: spec.containers"):
        kube.list("pods", NAMESPACE, field_selector="spec.containers=x")
    assert kube.list("pods", NAMESPACE, field_selector="status.phase=Running")[0] == []


# -- the kubelet's log rules and the two Event APIs ------------------------------------------------------------

def test_previous_log_only_after_a_termination(api):  # noqa: F811
    running = pod(MODEL, "run01")
    waiting = pod(MODEL, "wait1", phase="Pending", ready=False, state={"waiting": {"reason": "ContainerCreating"}})
    c = crashed()
    looping = pod(MODEL, "loop1", ready=False, state=c["state"], last_state=c["last_state"], restarts=1)
    api.cluster.apply(running, waiting, looping)
    api.cluster.logs[(NAMESPACE, running["metadata"]["name"], "tritonserver", False)] = "I0101 now\n"
    api.cluster.logs[(NAMESPACE, looping["metadata"]["name"], "tritonserver", True)] = "E0101 before\n"
    kube = kube_mod.connect(str(api.kubeconfig_path))
    assert kube.log(NAMESPACE, running["metadata"]["name"], "tritonserver") == "I0101 now\n"
    assert kube.log(NAMESPACE, running["metadata"]["name"], "tritonserver", previous=True) == ""  # 400
    assert kube.log(NAMESPACE, waiting["metadata"]["name"], "tritonserver") == ""  # 400: waiting to start
    # in back-off the kubelet shows the instance that terminated, with or without previous
    assert kube.log(NAMESPACE, looping["metadata"]["name"], "tritonserver") == "E0101 before\n"
    assert kube.log(NAMESPACE, looping["metadata"]["name"], "tritonserver", previous=True) == "E0101 before\n"
    codes = [r for r in api.cluster.requests if r.verb == "log"]
    assert len(codes) == 5


def test_both_event_apis_serve_the_same_events(api):  # noqa: F811
    p = pod(MODEL)
    api.cluster.apply(p, event(p, "Killing", "Container tritonserver failed liveness probe, will be restarted",
                               type_="Normal", count=3))
    kube = kube_mod.connect(str(api.kubeconfig_path))
    core, _ = kube.list("events", NAMESPACE, field_selector="involvedObject.kind=Pod")
    new, _ = kube.list("events.k8s.io", NAMESPACE, field_selector="regarding.kind=Pod")
    assert core[0]["message"] == new[0]["note"] and core[0]["count"] == new[0]["deprecatedCount"] == 3
    assert new[0]["regarding"]["name"] == p["metadata"]["name"] and new[0]["apiVersion"] == "events.k8s.io/v1"
    with pytest.raises(ClusterError, match="field label not supported: involvedObject.kind"):
        kube.list("events.k8s.io", NAMESPACE, field_selector="involvedObject.kind=Pod")
