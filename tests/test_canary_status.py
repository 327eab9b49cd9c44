"""`kubectl triton status` during a canary: both tracks, with their versions, route weights and health."""

from __future__ import annotations

import json

from tests import apiserver
from tests.apiserver import NAMESPACE, api, deployment, healthy_model, pod  # noqa: F401 - fixture

MODEL = "image-classifier"


def canary_in_progress(cluster, monkeypatch, *, canary_ready: bool = True) -> None:
    """The objects `kubectl triton canary image-classifier --version 2 --weight 10` makes Flux apply."""
    monkeypatch.setitem(apiserver.KINDS, "httproutes", ("gateway.networking.k8s.io", "v1", "HTTPRoute", True))
    monkeypatch.setitem(apiserver.KIND_TO_PLURAL, "HTTPRoute", "httproutes")
    cluster.objects.setdefault("httproutes", {})
    healthy_model(cluster, MODEL)
    dep = deployment(f"{MODEL}-canary", ready=1 if canary_ready else 0)
    dep["metadata"]["name"] = f"{MODEL}-triton-canary"
    dep["metadata"]["labels"].update({"triton.kubectl.io/model": MODEL, "triton.kubectl.io/track": "canary",
                                      "triton.kubectl.io/model-version": "2"})
    dep["metadata"]["annotations"] = {"triton.kubectl.io/triton-model": "image_classifier",
                                      "triton.kubectl.io/stable-version": "1"}
    cluster.apply(dep, pod(f"{MODEL}-canary", ready=canary_ready))
    cluster.apply({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                   "metadata": {"name": MODEL, "namespace": NAMESPACE},
                   "spec": {"rules": [{"backendRefs": [
                       {"name": f"{MODEL}-triton", "port": 8000, "weight": 90},
                       {"name": f"{MODEL}-triton-canary", "port": 8000, "weight": 10}]}]}})


def test_status_shows_both_tracks_with_versions_and_weights(run_cli, api, monkeypatch):  # noqa: F811
    canary_in_progress(api.cluster, monkeypatch)
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe", "-o", "json")
    assert res.exit_code == 0, res.stderr
    rows = [(m["model"], m["track"], m["version"], m["weight"], m["phase"]) for m in json.loads(res.stdout)["models"]]
    assert rows == [(MODEL, "stable", 1, 90, "Healthy"), (MODEL, "canary", 2, 10, "Healthy")]
    text = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe").stdout
    assert f"{MODEL} [stable v1 90%]" in text and f"{MODEL} [canary v2 10%]" in text
    assert api.cluster.count("list", "httproutes") == 2  # read only because a canary is in scope


def test_status_canary_not_ready_and_versioned_probe(run_cli, api, monkeypatch):  # noqa: F811
    canary_in_progress(api.cluster, monkeypatch, canary_ready=False)
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "-o", "json")
    doc = json.loads(res.stdout)
    canary = next(m for m in doc["models"] if m.get("track") == "canary")
    assert res.exit_code == 1 and canary["phase"] != "Healthy" and canary["weight"] == 10
    proxied = [r.path.split("/proxy", 1)[1] for r in api.cluster.requests if r.verb == "proxy"]
    assert all("/v2/models/image_classifier/versions/2/ready" in p or "health" in p or MODEL in p for p in proxied)


def test_status_without_gateway_api_shows_tracks_without_weights(run_cli, api, monkeypatch):  # noqa: F811
    canary_in_progress(api.cluster, monkeypatch)
    monkeypatch.delitem(apiserver.KINDS, "httproutes")  # the Gateway API is not served: 404
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe", "-o", "json")
    assert res.exit_code == 0, res.stderr
    assert [(m["track"], m["version"], m["weight"]) for m in json.loads(res.stdout)["models"]] == [
        ("stable", 1, None), ("canary", 2, None)]


def test_status_named_model_and_canary(run_cli, api, monkeypatch):  # noqa: F811
    canary_in_progress(api.cluster, monkeypatch)
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe", "-o", "json",
                  MODEL, f"{MODEL}-canary")
    assert res.exit_code == 0, res.stdout
    assert [m["track"] for m in json.loads(res.stdout)["models"]] == ["stable", "canary"]
