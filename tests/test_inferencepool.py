"""`add-model --route inferencepool` and canaries across two InferencePools: real kustomize renders, validated
against the InferencePool schema converted from the Gateway API Inference Extension's CRD and the Gateway API
HTTPRoute schema; the pools select exactly their track's Triton pods; `canary` splits by weight across the
pools, `promote`/`abort` fold them back; the layout file can name the platform's endpoint picker instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks import gate
from kubectl_triton.formats import schemas, yamlio

POOL_API = "inference.networking.k8s.io/v1"


def render(root: Path, rel: str) -> list[dict]:
    return yamlio.loads_all(kustomize.build(root / rel).yaml, rel)


def of(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pod_labels(objs: list[dict]) -> dict:
    (dep,) = of(objs, "Deployment")
    return dep["spec"]["template"]["metadata"]["labels"]


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def tr(run_cli, repo_copy):
    def run(*args: str):
        res = run_cli(*args[:2], "--repo", str(repo_copy), *args[2:])
        assert "Traceback" not in res.stderr
        return res
    return run


LLM = ["--backend", "tensorrtllm", "--gpu", "h200", "--tp", "2", "--route", "inferencepool"]


def test_route_inferencepool_renders_a_pool_its_picker_and_the_route(tr, repo_copy):
    res = tr("add-model", "chat", *LLM)
    assert res.exit_code == 0, res.stderr
    route = render(repo_copy, "overlays/chat/route")
    assert [i for o in route for i in schemas.validate_object(o)] == []
    (pool,) = of(route, "InferencePool")
    assert pool["apiVersion"] == POOL_API and pool["metadata"] == {"name": "chat", "namespace": "triton",
                                                                   "labels": {"app.kubernetes.io/instance": "chat"}}
    serving = render(repo_copy, "overlays/chat/h200")
    selector = pool["spec"]["selector"]["matchLabels"]
    assert selects(selector, pod_labels(serving))  # the model's Triton pods ...
    (epp,) = of(route, "Deployment")
    assert not selects(selector, epp["spec"]["template"]["metadata"]["labels"])  # ... and not its picker
    container = of(serving, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]  # tritonserver
    port = next(p for p in container["ports"] if p["name"] == "http")["containerPort"]
    assert pool["spec"]["targetPorts"] == [{"number": port}]
    ref = pool["spec"]["endpointPickerRef"]
    (svc,) = of(route, "Service")
    assert (ref["name"], ref["port"]["number"]) == (svc["metadata"]["name"], svc["spec"]["ports"][0]["port"])
    assert selects(svc["spec"]["selector"], epp["spec"]["template"]["metadata"]["labels"])
    args = epp["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--pool-name") + 1] == "chat" and args[args.index("--pool-namespace") + 1] == "triton"
    assert "nv_trt_llm_request_metrics{request_type=waiting}" in args  # Triton TensorRT-LLM's metrics
    # ... scraped from Triton's metrics port (not the pool's target port), which the NetworkPolicy opens to it
    metrics = next(p for p in container["ports"] if p["name"] == "metrics")["containerPort"]
    assert args[args.index("--model-server-metrics-port") + 1] == str(metrics)
    epp_labels = epp["spec"]["template"]["metadata"]["labels"]
    (policy,) = of(serving, "NetworkPolicy")
    admitted = [r for r in policy["spec"]["ingress"] if {"port": "metrics"} in r.get("ports", [])
                for src in r["from"] if "podSelector" in src
                and all(e["key"] in epp_labels for e in src["podSelector"].get("matchExpressions", []))
                and selects(src["podSelector"].get("matchLabels", {}), epp_labels)]
    assert admitted
    assert epp["spec"]["template"]["spec"]["containers"][0]["image"].endswith("/epp:v1.3.1")
    (httproute,) = of(route, "HTTPRoute")
    assert httproute["spec"]["rules"][0]["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "chat", "weight": 100}]
    assert {"path": {"type": "PathPrefix", "value": "/v2/models/ensemble"}} in httproute["spec"]["rules"][0]["matches"]
    flux = yamlio.load_all(repo_copy / "clusters/production/models/chat-route.yaml")[0]
    assert {"name": "chat-h200"} in flux["spec"]["dependsOn"] and flux["spec"]["path"] == "./overlays/chat/route"
    assert "  - chat-route.yaml\n" in (repo_copy / "clusters/production/models/kustomization.yaml").read_text()
    assert not [f for f in gate.validate_repo(repo_copy) if f.severity == "error"]


def test_canary_splits_across_two_pools_and_promote_folds_them_back(tr, repo_copy):
    assert tr("add-model", "chat", *LLM).exit_code == 0
    before = snapshot(repo_copy)
    res = tr("canary", "chat", "--version", "2", "--weight", "20", "--triton-model", "tensorrt_llm")
    assert res.exit_code == 0, res.stderr
    route = render(repo_copy, "overlays/chat/route")
    assert [i for o in route for i in schemas.validate_object(o)] == []
    pools = {p["metadata"]["name"]: p for p in of(route, "InferencePool")}
    assert set(pools) == {"chat", "chat-canary"}
    stable, canary = render(repo_copy, "overlays/chat/h200"), render(repo_copy, "overlays/chat/h200-canary")
    for name, own, other in (("chat", stable, canary), ("chat-canary", canary, stable)):
        sel = pools[name]["spec"]["selector"]["matchLabels"]
        assert selects(sel, pod_labels(own)) and not selects(sel, pod_labels(other)), name
    # one picker per pool, each told its own pool
    pickers = {d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["args"] for d in
               of(route, "Deployment")}
    assert {n: a[a.index("--pool-name") + 1] for n, a in pickers.items()} == {
        "chat-endpoint-picker": "chat", "chat-canary-endpoint-picker": "chat-canary"}
    assert pools["chat-canary"]["spec"]["endpointPickerRef"]["name"] == "chat-canary-endpoint-picker"
    (httproute,) = of(route, "HTTPRoute")
    assert [(r["kind"], r["name"], r["weight"]) for r in httproute["spec"]["rules"][0]["backendRefs"]] == [
        ("InferencePool", "chat", 80), ("InferencePool", "chat-canary", 20)]
    assert not [f for f in gate.validate_repo(repo_copy) if f.severity == "error"]

    text = (repo_copy / "overlays/chat/route/httproute.yaml").read_text()
    assert tr("canary", "chat", "--weight", "50").exit_code == 0
    changed = [(a, b) for a, b in zip(text.splitlines(), (repo_copy / "overlays/chat/route/httproute.yaml")
                                      .read_text().splitlines(), strict=True) if a != b]
    assert len(changed) == 1 and "weight: 50}" in changed[0][1]

    res = tr("promote", "chat")
    assert res.exit_code == 0, res.stderr
    after = snapshot(repo_copy)
    route_files = sorted(k for k in after if k.startswith("overlays/chat/route/"))
    assert route_files == sorted(k for k in before if k.startswith("overlays/chat/route/"))
    assert after["overlays/chat/route/kustomization.yaml"] == before["overlays/chat/route/kustomization.yaml"]
    (httproute,) = of(render(repo_copy, "overlays/chat/route"), "HTTPRoute")
    assert [(r["name"], r["weight"]) for r in httproute["spec"]["rules"][0]["backendRefs"]] == [("chat", 100)]
    assert httproute["metadata"]["annotations"]["triton.kubectl.io/stable-version"] == "2"


def test_abort_removes_the_canary_pool(tr, repo_copy):
    assert tr("add-model", "chat", *LLM).exit_code == 0
    assert tr("canary", "chat", "--version", "2", "--weight", "20", "--triton-model", "tensorrt_llm").exit_code == 0
    res = tr("abort", "chat")
    assert res.exit_code == 0, res.stderr
    assert not (repo_copy / "overlays/chat/route/inferencepool-canary.yaml").exists()
    assert not (repo_copy / "overlays/chat/route/endpoint-picker-canary").exists()
    assert [p["metadata"]["name"] for p in of(render(repo_copy, "overlays/chat/route"), "InferencePool")] == ["chat"]


def test_a_group_pool_selects_the_leader_and_its_canary_is_a_whole_group(tr, repo_copy):
    args = ["--backend", "tensorrtllm", "--gpu", "h100-80gb", "--tp", "8", "--pp", "2", "--nodes", "2",
            "--route", "inferencepool"]
    assert tr("add-model", "big", *args).exit_code == 0
    assert tr("canary", "big", "--version", "2", "--weight", "10", "--triton-model", "tensorrt_llm").exit_code == 0
    pools = {p["metadata"]["name"]: p["spec"]["selector"]["matchLabels"]
             for p in of(render(repo_copy, "overlays/big/route"), "InferencePool")}
    for track, overlay in (("big", "h100-80gb"), ("big-canary", "h100-80gb-canary")):
        (lws,) = of(render(repo_copy, f"overlays/big/{overlay}"), "LeaderWorkerSet")
        group = lws["spec"]["leaderWorkerTemplate"]
        leader = {**group["leaderTemplate"]["metadata"]["labels"], "leaderworkerset.sigs.k8s.io/worker-index": "0"}
        worker = {**group["workerTemplate"]["metadata"]["labels"], "leaderworkerset.sigs.k8s.io/worker-index": "1"}
        assert leader["app.kubernetes.io/instance"] == worker["app.kubernetes.io/instance"] == track
        assert selects(pools[track], leader) and not selects(pools[track], worker)
        other = "big-canary" if track == "big" else "big"
        assert not selects(pools[other], leader)


def test_the_platform_endpoint_picker_from_the_layout_file(tr, repo_copy):
    (repo_copy / "kubectl-triton.yaml").write_text("inferencePool:\n  endpointPicker:\n    name: shared-epp\n"
                                                   "    port: 9002\n")
    assert tr("add-model", "chat", *LLM).exit_code == 0
    assert not (repo_copy / "overlays/chat/route/endpoint-picker").exists()
    route = render(repo_copy, "overlays/chat/route")
    assert [o["kind"] for o in route] == ["HTTPRoute", "InferencePool"]
    assert of(route, "InferencePool")[0]["spec"]["endpointPickerRef"] == {
        "name": "shared-epp", "port": {"number": 9002}, "failureMode": "FailClose"}
    assert tr("canary", "chat", "--version", "2", "--weight", "20", "--triton-model", "tensorrt_llm").exit_code == 0
    assert not (repo_copy / "overlays/chat/route/endpoint-picker-canary").exists()
    pools = of(render(repo_copy, "overlays/chat/route"), "InferencePool")
    assert {p["spec"]["endpointPickerRef"]["name"] for p in pools} == {"shared-epp"}


@pytest.mark.parametrize("layout, message", [
    ("inferencePool:\n  endpointPicker: {}\n", "inferencePool.endpointPicker needs a name"),
    ("inferencePool:\n  endpointPicker: {name: x, port: 70000}\n", "endpointPicker.port must be a port number"),
])
def test_a_bad_layout_file_is_a_one_line_error(tr, repo_copy, layout, message):
    (repo_copy / "kubectl-triton.yaml").write_text(layout)
    res = tr("add-model", "chat", *LLM)
    assert res.exit_code == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_bad_gateway_is_refused(tr):
    res = tr("add-model", "chat", *LLM, "--gateway", "Not/A/Gateway")
    assert res.exit_code == 2 and "--gateway 'Not/A/Gateway'" in res.stderr
