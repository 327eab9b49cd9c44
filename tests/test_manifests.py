"""What the repository deploys: schema-valid objects shaped the way the Triton deployment guides recommend."""

from __future__ import annotations

import re

import pytest

from kubectl_triton.formats import schemas

MODEL_OVERLAY = re.compile(r"^overlays/(?P<model>[^/]+)/(?P<gpu>[^/]+)$")


def _objects(rendered):
    for source, docs in rendered.items():
        for doc in docs:
            yield source, doc


def test_every_rendered_object_passes_its_strict_schema(rendered):
    issues = []
    for source, obj in _objects(rendered):
        issues += [f"{source}: {i.object}: {i.message}" for i in schemas.validate_object(obj)]
    assert issues == []


def test_strict_schemas_catch_unknown_fields_in_builtin_and_custom_kinds(rendered):
    deployment = next(o for _, o in _objects(rendered) if o["kind"] == "Deployment")
    bad = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    assert any("'replica' was unexpected" in i.message for i in schemas.validate_object(bad))
    flux = next(o for _, o in _objects(rendered) if o["kind"] == "Kustomization")
    bad_flux = {**flux, "spec": {**flux["spec"], "prunee": True}}
    assert any("prunee" in i.message for i in schemas.validate_object(bad_flux))
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert schemas.validate_object(unknown)[0].missing_schema


def test_model_overlays_label_every_object_with_name_and_instance(rendered):
    checked = 0
    for source, docs in rendered.items():
        m = MODEL_OVERLAY.match(source)
        if not m or source.endswith("engine-build"):
            continue
        for obj in docs:
            labels = obj["metadata"].get("labels", {})
            assert labels.get("app.kubernetes.io/name") == "triton-inference-server", (source, obj["kind"])
            assert labels.get("app.kubernetes.io/instance") == m["model"], (source, obj["kind"])
            checked += 1
    assert checked >= 40


def _by_kind(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


@pytest.mark.parametrize("overlay", ["overlays/llama3-8b/h100-80gb", "overlays/image-classifier/l4",
                                     "overlays/text-embedder/a10g", "overlays/ensemble-pipeline/l4"])
def test_serving_overlay_follows_the_guides(rendered, overlay):
    docs = rendered[overlay]
    model = overlay.split("/")[1]
    dep = _by_kind(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    server = next(c for c in pod["containers"] if c["name"] == "tritonserver")
    assert re.fullmatch(r"nvcr\.io/nvidia/tritonserver:\d\d\.\d\d-[a-z0-9-]+", server["image"])
    assert "--model-repository=/models" in server["args"] and "--disable-auto-complete-config" in server["args"]
    assert server["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert server["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert server["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert server["resources"]["limits"]["nvidia.com/gpu"] >= 1
    assert {"cpu", "memory"} <= set(server["resources"]["requests"]) <= set(server["resources"]["limits"])
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in server["volumeMounts"]
    assert pod["securityContext"]["runAsNonRoot"] and server["securityContext"]["readOnlyRootFilesystem"]
    assert server["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["automountServiceAccountToken"] is False
    assert "nvidia.com/gpu.product" in pod["nodeSelector"]
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    # The model's config.pbtxt files arrive through a hash-suffixed generated ConfigMap.
    config_volume = next(v for v in pod["volumes"] if v["name"] == "model-config")
    cm_name = config_volume["configMap"]["name"]
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == cm_name)
    assert re.fullmatch(rf"{model}-model-config-[a-z0-9]{{10}}", cm["metadata"]["name"])
    assert any(key.endswith("config.pbtxt") for key in cm["data"])

    svc = _by_kind(docs, "Service")
    assert {(p["name"], p["port"]) for p in svc["spec"]["ports"]} == {("http", 8000), ("grpc", 8001), ("metrics", 8002)}
    assert _by_kind(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    hpa = _by_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    assert [m["type"] for m in hpa["spec"]["metrics"]] == ["Pods"]
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "triton_queue_compute_ratio"
    assert hpa["spec"]["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 60
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    sm = _by_kind(docs, "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == model
    netpol = _by_kind(docs, "NetworkPolicy")
    assert netpol["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == model
    pdb = _by_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == model


def _seconds(duration: str) -> int:
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([hms])", duration))


def test_flux_kustomizations_wait_and_outlast_the_progress_deadline(rendered):
    cluster = rendered["clusters/production"]
    flux = {o["metadata"]["name"]: o for o in cluster if o["kind"] == "Kustomization"}
    model_ks = [k for k in flux.values() if k["spec"]["path"].startswith("./overlays/")]
    assert len(model_ks) == 8
    for ks in model_ks:
        spec = ks["spec"]
        assert spec["prune"] and spec["wait"]
        assert {"name": "infrastructure"} in spec["dependsOn"]
        overlay = spec["path"].removeprefix("./")
        for dep in (d for d in rendered[overlay] if d["kind"] == "Deployment"):
            assert dep["spec"]["progressDeadlineSeconds"] < _seconds(spec["timeout"]), overlay
            probe = dep["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
            assert probe["periodSeconds"] * probe["failureThreshold"] <= dep["spec"]["progressDeadlineSeconds"]
        for group in (d for d in rendered[overlay] if d["kind"] == "LeaderWorkerSet"):  # multi-node: the leader
            probe = group["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["startupProbe"]
            assert probe["periodSeconds"] * probe["failureThreshold"] < _seconds(spec["timeout"]), overlay
    serving = flux["llama3-8b-h100-80gb"]
    assert {"name": "llama3-8b-h100-80gb-engine-build"} in serving["spec"]["dependsOn"]


def test_cluster_folder_holds_only_flux_objects(rendered):
    for source, docs in rendered.items():
        if source.startswith("clusters/"):
            assert {d["apiVersion"].split("/")[0] for d in docs} <= {
                "kustomize.toolkit.fluxcd.io", "source.toolkit.fluxcd.io", "helm.toolkit.fluxcd.io"}


def test_infrastructure_installs_gpu_operator_and_the_queue_time_metric():
    from kubectl_triton.adapters import kustomize
    from kubectl_triton.formats import yamlio
    from tests.conftest import REPO

    docs = yamlio.loads_all(kustomize.build(REPO / "clusters/production/infrastructure").yaml)
    releases = {d["metadata"]["name"]: d for d in docs if d["kind"] == "HelmRelease"}
    values = releases["gpu-operator"]["spec"]["values"]
    assert all(values[k]["enabled"] for k in ("driver", "toolkit", "devicePlugin", "dcgmExporter"))
    rule = releases["prometheus-adapter"]["spec"]["values"]["rules"]["custom"][0]
    assert "<<.Series>>" in rule["metricsQuery"] and rule["seriesQuery"].startswith("nv_inference_queue_duration_us{")
    assert "nv_inference_compute_infer_duration_us" in rule["metricsQuery"]
    assert rule["name"]["as"] == "triton_queue_compute_ratio"
    for d in docs:
        assert not schemas.validate_object(d)


def test_engine_build_job_runs_on_the_target_gpu_in_the_serving_image(rendered):
    job = _by_kind(rendered["overlays/llama3-8b/h100-80gb-engine-build"], "Job")
    serving = _by_kind(rendered["overlays/llama3-8b/h100-80gb"], "Deployment")
    pod, spod = job["spec"]["template"]["spec"], serving["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == spod["nodeSelector"]
    assert pod["containers"][0]["image"] == spod["containers"][0]["image"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
