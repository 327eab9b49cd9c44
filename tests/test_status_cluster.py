"""`kubectl triton status` end to end on a real control plane (tests/cluster.py): a model overlay of this repository
applied as Flux applies it, the real Deployment controller and scheduler writing the conditions status reads, kwok
running the pods; and RBAC as the real API server enforces it (the ClusterRoles of rbac/)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.formats import yamlio
from tests import cluster as real
from tests.apiserver import APIServer
from tests.cluster import cluster  # noqa: F401 - fixture
from tests.conftest import REPO

NAMESPACE = "triton"
# A real Triton 2.51 start-up failure (the python backend's initialize raising): ModelLoadFailed's example in
# kubectl_triton/data/log_signatures.yaml, as tests/test_status_reasons.py uses it.
TRITON_LOG = (
    "I1202 11:13:01.100000 1 server.cc:674] \"Started GRPCInferenceService at 0.0.0.0:8001\"\n"
    "E1202 11:13:06.647394 1 model_lifecycle.cc:642] \"failed to load 'image_classifier' version 1: Invalid "
    "argument: unable to find 'model.onnx' in /models/image_classifier/1\"\n"
    "I1202 11:13:06.647436 1 model_lifecycle.cc:777] \"failed to load 'image_classifier'\"\n"
    "error: creating server: Internal - failed to load all models\n")


def _render(rel: str) -> list[dict]:
    result = kustomize.build(REPO / rel)
    return [o for o in yamlio.loads_all(result.yaml, rel) if isinstance(o, dict)]


def _crds_for(c: real.Cluster, objects: list[dict]) -> list[dict]:
    """The CRD manifests (from the control-plane build) of the custom kinds among `objects`."""
    from kubectl_triton.checks.server import load_crds

    groups = {str(o["apiVersion"]).split("/")[0] for o in objects if "." in str(o["apiVersion"]).split("/")[0]}
    groups -= {"rbac.authorization.k8s.io", "networking.k8s.io", "policy"}
    crds = load_crds(c.bin.parent / "crds")
    return [crd for g in sorted(groups) for crd in crds.get(g, [])]


@pytest.fixture(scope="module")
def serving(cluster: real.Cluster) -> real.Cluster:  # noqa: F811
    """The platform (Namespace, PVC with a PV to bind), two T4 nodes and one H100 node, rbac/ applied."""
    platform = _render("base/platform")
    t4 = _render("overlays/image-classifier/t4")
    flux = [{"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization"}]  # flux bootstrap's CRDs
    cluster.apply(_crds_for(cluster, t4 + flux) + [{"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": "flux-system"}}])
    cluster.apply(platform)
    cluster.ensure_artifacts_volume()
    cluster.ensure_gpu_nodes()
    cluster.kubectl("apply", "-k", str(REPO / "rbac"))
    cluster.apply(t4)
    return cluster


def _status(c: real.Cluster, *args: str, kubeconfig: Path | None = None) -> tuple[int, dict | None, str]:
    proc = subprocess.run(["kubectl-triton", "status", "--kubeconfig", str(kubeconfig or c.admin), "-n", NAMESPACE,
                           "--no-probe", "-o", "json", *args], capture_output=True, text=True, timeout=180)
    doc = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, doc, proc.stderr


def _model(doc: dict | None, name: str) -> dict:
    assert doc is not None
    return next(m for m in doc["models"] if m["model"] == name)


def _codes(model: dict) -> list[str]:
    return [r["code"] for r in model["reasons"]]


def test_ready_pods_are_healthy(serving: real.Cluster):
    hpa = lambda: serving.get("hpa", "-n", NAMESPACE)["items"]  # noqa: E731
    serving.wait_for("the HPA controller to find no custom metrics API", lambda: any(
        c.get("type") == "ScalingActive" and c.get("status") == "False"
        for h in hpa() for c in (h.get("status") or {}).get("conditions") or []))
    rc, doc, err = _status(serving, "image-classifier", "--wait", "--timeout", "120s")
    model = _model(doc, "image-classifier")
    assert rc == 0 and model["phase"] == "Healthy", (err, json.dumps(model))
    # No prometheus-adapter here: the real HPA controller's condition, named as a warning of a healthy model.
    assert _codes(model) == ["HPAMetricUnavailable"] and "custom.metrics.k8s.io" in model["reasons"][0]["message"]
    deployment = serving.get("deployment", "image-classifier-triton", "-n", NAMESPACE)
    available = {c["type"]: c["status"] for c in deployment["status"]["conditions"]}
    assert available["Available"] == "True"  # written by the real Deployment controller


def test_unschedulable_for_want_of_the_gpu_type_names_it(serving: real.Cluster):
    serving.apply(_render("overlays/image-classifier/l4"))  # the same Deployment moved to L4: no L4 node here
    pods = lambda: serving.get("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/instance=image-classifier")  # noqa: E731
    serving.wait_for("the scheduler to refuse the L4 pod", lambda: any(
        c.get("reason") == "Unschedulable" for p in pods()["items"] for c in p.get("status", {}).get("conditions", [])))
    rc, doc, err = _status(serving, "image-classifier", "--unschedulable-grace", "0s")
    model = _model(doc, "image-classifier")
    assert rc == 1 and model["phase"] == "Failed", (err, model)
    assert _codes(model)[0] == "GPUTypeUnavailable", model
    assert "no node of GPU type NVIDIA-L4 (l4)" in model["reasons"][0]["message"], model
    assert "didn't match Pod's node affinity/selector" in model["reasons"][0]["message"]  # the real scheduler


def test_crash_loop_is_failed_with_the_triton_log_cause(serving: real.Cluster):
    serving.write_logs("", TRITON_LOG)
    serving.apply(_render("overlays/image-classifier/t4"))
    serving.kubectl("patch", "deployment", "image-classifier-triton", "-n", NAMESPACE, "--type", "merge", "-p",
                    json.dumps({"spec": {"template": {"metadata": {"labels": {real.FAULT_LABEL: "crashloop"}}}}}))
    serving.wait_for("a crash-looping pod", lambda: any(
        (s.get("state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"
        for p in serving.get("pods", "-n", NAMESPACE, "-l", f"{real.FAULT_LABEL}=crashloop")["items"]
        for s in p.get("status", {}).get("containerStatuses") or []))
    rc, doc, err = _status(serving, "image-classifier")
    model = _model(doc, "image-classifier")
    assert rc == 1 and model["phase"] == "Failed", (err, model)
    assert _codes(model)[0] == "ModelLoadFailed" and "CrashLoopBackOff" in _codes(model), model
    assert "model.onnx" in model["reasons"][0]["message"]  # the line, read through pods/log from kwok's kubelet


def _patch_template_label(c: real.Cluster, fault: str) -> None:
    c.kubectl("patch", "deployment", "image-classifier-triton", "-n", NAMESPACE, "--type", "merge", "-p",
              json.dumps({"spec": {"template": {"metadata": {"labels": {real.FAULT_LABEL: fault}}}}}))


def test_oom_killed_pods_are_failed_with_the_memory_limit_named(serving: real.Cluster):
    serving.write_logs("", "")
    _patch_template_label(serving, "oom")
    serving.wait_for("an OOM-killed pod", lambda: any(
        ((s.get("lastState") or {}).get("terminated") or {}).get("reason") == "OOMKilled"
        for p in serving.get("pods", "-n", NAMESPACE, "-l", f"{real.FAULT_LABEL}=oom")["items"]
        for s in p.get("status", {}).get("containerStatuses") or []))
    rc, doc, err = _status(serving, "image-classifier")
    model = _model(doc, "image-classifier")
    assert rc == 1 and model["phase"] == "Failed", (err, model)
    assert "OOMKilled" in _codes(model), model
    oom = next(r for r in model["reasons"] if r["code"] == "OOMKilled")
    assert "resources.limits.memory" in oom["fix"], oom


def test_rollout_stuck_on_its_progress_deadline_is_failed(serving: real.Cluster):
    """The real Deployment controller, not a fixture, writes Progressing=False/ProgressDeadlineExceeded."""
    # One patch: a deadline that an earlier rollout of this Deployment could already have passed would race the
    # controller's reset of the condition for the new template.
    serving.kubectl("patch", "deployment", "image-classifier-triton", "-n", NAMESPACE, "--type", "merge", "-p",
                    json.dumps({"spec": {"progressDeadlineSeconds": 3, "template": {"metadata": {"labels": {
                        real.FAULT_LABEL: "crashloop"}}}}}))

    def progressing() -> tuple[bool, Any]:
        dep = serving.get("deployment", "image-classifier-triton", "-n", NAMESPACE)
        cond = next((c for c in dep["status"].get("conditions") or [] if c.get("type") == "Progressing"), {})
        exceeded = dep["status"].get("observedGeneration") == dep["metadata"]["generation"] and \
            cond.get("reason") == "ProgressDeadlineExceeded"
        return exceeded, (dep["metadata"]["generation"], cond)

    # A crash-looping kwok pod's restarts count as progress to the controller, which then resets the condition and
    # times out again 3 s later: status is judged on a read during which the condition stood still.
    for _ in range(5):
        serving.wait_for("the Deployment controller to give up on the new rollout", lambda: progressing()[0])
        before = progressing()
        rc, doc, err = _status(serving, "image-classifier")
        if before[0] and progressing() == before:
            break
    model = _model(doc, "image-classifier")
    assert rc == 1 and model["phase"] == "Failed", (err, _codes(model), before, [r["message"][:200] for r in
                                                    model["reasons"]])
    assert "ProgressDeadlineExceeded" in _codes(model), model
    deadline = next(r for r in model["reasons"] if r["code"] == "ProgressDeadlineExceeded")
    assert "made no progress for 3s" in deadline["message"], deadline


def test_lists_are_paged_by_the_real_server_as_by_the_stand_in(serving: real.Cluster, tmp_path: Path):
    """limit/continue as the real API server does them: every page but the last carries a continue token, and
    paging gives the same objects as one request; tests/apiserver.py pages the same objects the same way."""
    # two pods of its own (the namespace enforces the restricted Pod Security Standard): how many the earlier
    # tests' rollouts left is their business (one, at times)
    extra = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"paging-{i}", "namespace": NAMESPACE},
              "spec": {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                       "containers": [{"name": "c", "image": "registry.invalid/none:1", "securityContext": {
                           "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}
             for i in range(2)]
    serving.apply(extra)
    try:
        _paged_as_by_the_stand_in(serving, tmp_path)
    finally:
        serving.kubectl("delete", "pod", "-n", NAMESPACE, "paging-0", "paging-1", "--wait=false")


def _paged_as_by_the_stand_in(serving: real.Cluster, tmp_path: Path) -> None:
    from kubectl_triton.adapters import kube as kube_mod

    kube = kube_mod.connect(str(serving.admin))
    whole, _ = kube.list("pods", NAMESPACE, page_size=0)
    assert len(whole) >= 2, [p["metadata"]["name"] for p in whole]
    pages = []
    original = kube._json

    def record(resp, request="request"):
        doc = original(resp, request)
        pages.append(doc)
        return doc

    kube._json = record  # type: ignore[method-assign]
    paged, _ = kube.list("pods", NAMESPACE, page_size=1)
    assert [p["metadata"]["name"] for p in paged] == [p["metadata"]["name"] for p in whole]
    assert len(pages) == len(whole) and all(d["metadata"].get("continue") for d in pages[:-1])
    assert not pages[-1]["metadata"].get("continue")
    assert all(d["metadata"].get("remainingItemCount") == len(whole) - i - 1 for i, d in enumerate(pages[:-1]))

    with APIServer() as fake:
        for p in whole:
            fake.cluster.apply({k: v for k, v in p.items() if k != "status"} | {"status": p.get("status", {})})
        fake_kube = kube_mod.connect(str(fake.kubeconfig(tmp_path, namespace=NAMESPACE)))
        fake_paged, _ = fake_kube.list("pods", NAMESPACE, page_size=1)
        fake_pages = [r.path for r in fake.cluster.requests if r.verb == "list"]
    assert sorted(p["metadata"]["name"] for p in fake_paged) == sorted(p["metadata"]["name"] for p in whole)
    assert len(fake_pages) == len(pages) and sum("continue=" in p for p in fake_pages) == len(pages) - 1


def test_rbac_status_role_reads_and_no_binding_is_refused(serving: real.Cluster, tmp_path: Path):
    serving.kubectl("create", "rolebinding", "ml-status", "-n", NAMESPACE, "--clusterrole=kubectl-triton-status",
                    "--user=alice")
    serving.kubectl("create", "rolebinding", "ml-status", "-n", "flux-system", "--clusterrole=kubectl-triton-status",
                    "--user=alice", check=False)
    alice = serving.user("alice", ("ml-platform-readers",))
    rc, doc, err = _status(serving, "image-classifier", kubeconfig=alice)
    assert doc is not None and _model(doc, "image-classifier")["phase"] in ("Healthy", "Failed", "Progressing"), err
    assert "forbidden" not in err

    mallory = serving.user("mallory")
    rc, doc, err = _status(serving, "image-classifier", kubeconfig=mallory)
    assert rc == 2 and doc is None
    line = err.strip().splitlines()[0]
    assert line.startswith("error: forbidden: list deployments.apps in namespace 'triton' was refused"), err
    assert 'User "mallory" cannot list resource "deployments"' in line  # the real API server's words

    # tests/apiserver.py (kept for faults a real server cannot be made to produce) words it the same way.
    with APIServer() as fake:
        fake.cluster.rbac_rules, fake.cluster.user = [], "mallory"
        fake_rc, fake_doc, fake_err = _status(serving, "image-classifier",
                                              kubeconfig=fake.kubeconfig(tmp_path, namespace=NAMESPACE))
    assert (fake_rc, fake_doc, fake_err.strip().splitlines()[0]) == (rc, doc, line)


def test_validate_server_on_a_cluster_context_dry_runs_and_names_an_immutable_selector(
        serving: real.Cluster, run_cli, repo_copy: Path):
    """`validate --server --kubeconfig` as a member of kubectl-triton:validate-server (rbac/): the cluster holds
    image-classifier's Deployment; a change of its selector is what only the API server can refuse."""
    bob = serving.user("bob", ("kubectl-triton:validate-server",))
    def written() -> tuple:
        """What a write would change; the controllers' status updates move resourceVersion on their own."""
        doc = serving.get("deployment", "image-classifier-triton", "-n", NAMESPACE)
        return doc["metadata"]["generation"], doc["metadata"].get("labels"), doc["spec"]

    before = written()
    kustomization = repo_copy / "overlays/image-classifier/l4/kustomization.yaml"  # what production applies
    kustomization.write_text(kustomization.read_text().replace(
        "app.kubernetes.io/instance: image-classifier", "app.kubernetes.io/instance: image-classifier-t4"))
    result = run_cli("validate", str(repo_copy), "--server", "--kubeconfig", str(bob), "-o", "json")
    assert result.exit_code == 1, result.stderr
    findings = json.loads(result.stdout)["findings"]
    immutable = [f for f in findings if f["code"] == "ServerRejected" and "field is immutable" in f["message"]
                 and f["object"] == "Deployment/triton/image-classifier-triton"]
    assert immutable, [f["message"] for f in findings if f["code"].startswith("Server")]
    assert "spec.selector" in immutable[0]["message"]
    # What the repository itself creates and this cluster lacks yet is not judged, and not called an error.
    refused = [f for f in findings if f["code"] == "ServerRejected" and f not in immutable]
    assert not refused, [f["message"] for f in refused]
    # The static gate has no prior state to compare a selector with: it passes the same change.
    static = json.loads(run_cli("validate", str(repo_copy), "-o", "json").stdout)["findings"]
    assert not [f for f in static if f["object"] == "Deployment/triton/image-classifier-triton"
                and f["severity"] == "error"]
    # Nothing was written, and the group cannot write for real: the admission policy of rbac/ refuses it.
    assert written() == before
    config = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bob", "namespace": NAMESPACE}})
    dry = serving.kubectl("apply", "--dry-run=server", "-f", "-", input=config, kubeconfig=bob, check=False)
    assert dry.returncode == 0, dry.stderr
    real_write = serving.kubectl("apply", "-f", "-", input=config, kubeconfig=bob, check=False)
    assert real_write.returncode != 0
    assert "kubectl-triton:validate-server may only dry-run" in real_write.stderr


def _etcd_compact(plane) -> int:  # noqa: ANN001
    """Compact the control plane's etcd at its current revision, through etcd's own JSON gateway."""
    import urllib.request

    etcd = next(p for p in plane.processes if p.name == "etcd")
    url = next(a for a in etcd.popen.args if str(a).startswith("http://127.0.0.1"))

    def call(path: str, body: dict) -> dict:
        request = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode())
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback etcd
            return json.loads(answer.read())

    revision = int(call("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
    call("/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def test_an_expired_continue_token_restarts_the_list_on_the_real_server(tmp_path: Path):
    """etcd compacts between two pages: the real kube-apiserver answers the old continue token 410 Expired ("The
    provided continue parameter is too old ..."), and the list starts again unpaged, as kubectl does; the same
    scenario as tests/test_status_access.py's on the stand-in. Served from etcd as before 1.34: from 1.34 the API
    server serves a continue from its watch cache's snapshots (ListFromCacheSnapshot, beta, on), which outlive a
    compaction, so the gate is set off here."""
    from kubectl_triton.adapters import controlplane
    from kubectl_triton.adapters import kube as kube_mod

    with controlplane.ControlPlane(real.assets(), tmp_path / "plane",
                                   apiserver_flags=["--feature-gates=ListFromCacheSnapshot=false"]) as plane:
        admin = plane.kubeconfig_for("admin", ["system:masters"])
        pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"m{i:02d}", "namespace": "default"},
                 "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}} for i in range(15)]
        subprocess.run([str(plane.assets.binary("kubectl")), "--kubeconfig", str(admin), "apply", "-f", "-"],
                       input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
                           {"apiVersion": "v1", "kind": "ServiceAccount",  # no controller-manager makes it here
                            "metadata": {"name": "default", "namespace": "default"}}, *pods]}), text=True,
                       check=True, capture_output=True, timeout=60)
        kube = kube_mod.connect(str(admin), namespace="default")
        original, pages, refused = kube._json, [], []
        original_request = kube._request

        def compact_after_first_page(resp, request="request"):  # noqa: ANN001, ANN202
            doc = original(resp, request)
            pages.append(doc)
            if len(pages) == 1:  # the cluster moves on, then etcd compacts past the token's revision
                subprocess.run([str(plane.assets.binary("kubectl")), "--kubeconfig", str(admin), "create",
                                "configmap", "moved-on", "-n", "default"], check=True, capture_output=True, timeout=60)
                _etcd_compact(plane)
            return doc

        def request(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - records the real answers, changes none
            resp = original_request(*args, **kwargs)
            if isinstance(resp, kube_mod.HttpError):
                refused.append(resp)
            return resp

        kube._json = compact_after_first_page  # type: ignore[method-assign]
        kube._request = request  # type: ignore[method-assign]
        items, _ = kube.list("pods", "default", page_size=10)
    assert sorted(p["metadata"]["name"] for p in items) == [p["metadata"]["name"] for p in pods]
    assert [r.status for r in refused] == [410]
    assert "continue parameter is too old" in str(refused[0].body)
    assert len(pages) == 2 and len(pages[0]["items"]) == 10 and not pages[1]["metadata"].get("continue")
