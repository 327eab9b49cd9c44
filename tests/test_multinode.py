"""Multi-node models: `add-model --nodes` renders a LeaderWorkerSet group (real kustomize, strict LWS schema from the
project's CRD), the example models/llama3-70b validates, and the multinode checks of `validate` catch what would
keep a group from starting: world size, node shape, /dev/shm, restart policy, LWS controller order."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks import gate
from kubectl_triton.checks.manifests import multinode
from kubectl_triton.formats import schemas, yamlio
from tests.apiserver import api  # noqa: F401 - fixture
from tests.conftest import REPO

LLM = ["--backend", "tensorrtllm", "--gpu", "h100-80gb", "--tp", "8", "--pp", "2", "--nodes", "2"]


def render(root: Path, rel: str) -> list[dict]:
    return yamlio.loads_all(kustomize.build(root / rel).yaml, rel)


def one(objs: list[dict], kind: str) -> dict:
    (found,) = [o for o in objs if o["kind"] == kind]
    return found


@pytest.fixture
def add(run_cli, repo_copy):
    def run(name: str, *args: str):
        res = run_cli("add-model", name, *args, "--repo", str(repo_copy))
        assert "Traceback" not in res.stderr
        return res
    return run


def test_nodes_render_a_leaderworkerset_group_from_the_triton_base(add, repo_copy):
    res = add("big-llm", *LLM)
    assert res.exit_code == 0, res.stderr
    objs = render(repo_copy, "overlays/big-llm/h100-80gb")
    assert [i for o in objs for i in schemas.validate_object(o)] == []  # LWS against its CRD's strict schema
    kinds = sorted(o["kind"] for o in objs)
    assert "Deployment" not in kinds and "HorizontalPodAutoscaler" not in kinds and "LeaderWorkerSet" in kinds
    lws = one(objs, "LeaderWorkerSet")
    assert lws["metadata"]["name"] == "big-llm-triton-group"
    spec = lws["spec"]
    assert spec["startupPolicy"] == "LeaderCreated" and spec["replicas"] == 1
    group = spec["leaderWorkerTemplate"]
    assert group["size"] == 2 and group["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = group["leaderTemplate"], group["workerTemplate"]
    for template, script in ((leader, "leader.sh"), (worker, "worker.sh")):
        pod = template["spec"]
        (server,) = [c for c in pod["containers"] if c["name"] == "tritonserver"]
        # the same base: image, GPU Component's node selector, /dev/shm, artifacts, security context
        assert server["image"] == "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        assert pod["securityContext"]["runAsNonRoot"] is True
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
        assert volumes["artifacts"]["persistentVolumeClaim"]["claimName"] == "model-artifacts"
        assert volumes["mpi-ssh"]["secret"]["secretName"] == "big-llm-mpi-ssh"
        assert server["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert server["command"] == ["sh", f"/multinode/{script}"] and "args" not in server
        env = {e["name"]: e.get("value") for e in server["env"]}
        assert env["WORLD_SIZE"] == "16" and env["GPUS_PER_NODE"] == "8"
        assert template["metadata"]["labels"]["app.kubernetes.io/instance"] == "big-llm"
    assert "startupProbe" in leader["spec"]["containers"][0] and "startupProbe" not in worker["spec"]["containers"][0]
    # The Service selects the leader (rank 0 serves) and never a worker.
    selector = one(objs, "Service")["spec"]["selector"]
    for template, matches in ((leader, True), (worker, False)):
        labels = {**template["metadata"]["labels"], "leaderworkerset.sigs.k8s.io/worker-index": "0" if matches else "1"}
        assert all(labels.get(k) == v for k, v in selector.items()) is matches
    assert selector["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    # The scripts the templates run are the tested ones, mounted where the commands look.
    scripts = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("big-llm-multinode")]
    assert {k: v for k, v in scripts[0]["data"].items()} == {
        name: (REPO / "base" / "triton-multinode" / name).read_text() for name in ("leader.sh", "worker.sh", "rank.sh")}
    meta = yamlio.load_all(repo_copy / "models" / "big-llm" / "model.yaml")[0]
    assert (meta["engine"]["tp"], meta["engine"]["pp"], meta["engine"]["nodes"], meta["engine"]["gpus_per_node"]) == \
        (8, 2, 2, 8)
    assert not [f for f in gate.validate_repo(repo_copy) if f.severity == "error"]


@pytest.mark.parametrize("args, message", [
    (["--backend", "tensorrtllm", "--gpu", "h100-80gb", "--tp", "8", "--nodes", "2"],
     "--nodes 2: tp 8 x pp 1 = 8 GPUs, but 2 nodes x 8 GPUs per node = 16"),
    (["--backend", "tensorrtllm", "--gpu", "h100-80gb", "--tp", "16", "--nodes", "1", "--gpus-per-node", "16"],
     "--gpus-per-node: only with --nodes 2 or more"),
    (["--backend", "tensorrtllm", "--gpu", "h100-80gb", "--tp", "16", "--pp", "2", "--nodes", "2",
      "--gpus-per-node", "16"], "--gpus-per-node 16: a h100-80gb node has 8 GPUs"),
    (["--backend", "tensorrtllm", "--gpu", "l4", "--tp", "4", "--nodes", "2"],
     "the GPU catalog has no node shape for 'l4'; pass --gpus-per-node"),
    ([*LLM, "--frontend", "openai"], "--frontend openai: Triton's OpenAI-compatible frontend serves TensorRT-LLM "
     "only in single-node orchestrator mode"),
    (["--backend", "onnxruntime", "--gpu", "l4", "--nodes", "2"], "--nodes: only for --backend tensorrtllm"),
    (["--backend", "tensorrtllm", "--gpu", "h100-80gb", "--nodes", "0"], "--nodes 0: must be at least 1"),
])
def test_bad_group_options_are_one_line_errors(add, repo_copy, args, message):
    res = add("big-llm", *args)
    assert res.exit_code == 2 and message in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (repo_copy / "models" / "big-llm").exists()


def test_long_names_are_refused_for_groups(add):
    res = add("a" * 38, *LLM)
    assert res.exit_code == 2 and "at most 37 characters" in res.stderr
    res = add("l4-group", "--backend", "tensorrtllm", "--gpu", "l4", "--tp", "4", "--nodes", "2",
              "--gpus-per-node", "2")
    assert res.exit_code == 0, res.stderr


def test_the_example_model_renders_and_validates():
    objs = render(REPO, "overlays/llama3-70b/h100-80gb")
    lws = one(objs, "LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    meta = yamlio.load_all(REPO / "models" / "llama3-70b" / "model.yaml")[0]
    assert meta["engine"]["tp"] * meta["engine"]["pp"] == 16
    # The engine-build Job builds from the same model.yaml: every one of the group's 16 ranks.
    build = render(REPO, "overlays/llama3-70b/h100-80gb-engine-build")
    (cm,) = [o for o in build if o["kind"] == "ConfigMap" and "model.yaml" in o.get("data", {})]
    engine = yamlio.loads_all(cm["data"]["model.yaml"], "model.yaml")[0]["engine"]
    group = lws["spec"]["leaderWorkerTemplate"]
    per_pod = group["leaderTemplate"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert engine["tp"] * engine["pp"] == group["size"] * per_pod == 16
    findings = gate.validate_repo(REPO)
    assert [f for f in findings if f.code.startswith("Multinode") or f.severity == "error"] == []


@dataclass
class T:
    rel: str
    objects: list[dict] = field(default_factory=list)


@pytest.fixture(scope="module")
def example() -> list[dict]:
    return render(REPO, "overlays/llama3-70b/h100-80gb")


def _codes(objects: list[dict], root: Path = REPO) -> list[tuple[str, str]]:
    return [(f.code, f.message) for f in multinode.check_groups(root, [T("overlays/x", objects)])]


def _group(objects: list[dict]) -> dict:
    return next(o for o in objects if o["kind"] == "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]


def test_the_example_group_has_no_findings(example):
    assert _codes(example) == []


def test_group_checks_catch_what_keeps_a_group_from_starting(example):
    objs = copy.deepcopy(example)
    _group(objs)["size"] = 3  # 3 x 8 = 24 ranks for a 16-rank engine
    found = _codes(objs)
    assert {c for c, _ in found} == {"MultinodeWorldSize"}
    assert any("tp x pp = 16 engine but the group has 3 pods x 8 GPUs = 24 ranks" in m for _, m in found)
    assert any("WORLD_SIZE is 16 but the group has 3 pods x 8 GPUs" in m for _, m in found)

    objs = copy.deepcopy(example)
    for t in ("leaderTemplate", "workerTemplate"):
        _group(objs)[t]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 16
    _group(objs)["size"] = 1
    found = _codes(objs)
    assert ("MultinodeNodeShape", "each pod asks for 16 GPUs but a h100-80gb node has at most 8: no node can host a "
            "pod of the group and it stays Pending") in found

    objs = copy.deepcopy(example)
    _group(objs)["workerTemplate"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 4
    assert any(c == "MultinodeNodeShape" and "leader asks for 8 GPUs and workers for 4" in m for c, m in _codes(objs))

    objs = copy.deepcopy(example)
    worker = _group(objs)["workerTemplate"]["spec"]
    next(v for v in worker["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] = "2Gi"
    leader = _group(objs)["leaderTemplate"]["spec"]
    leader["containers"][0]["volumeMounts"] = [m for m in leader["containers"][0]["volumeMounts"]
                                               if m["mountPath"] != "/dev/shm"]
    assert sorted(m for c, m in _codes(objs) if c == "MultinodeSharedMemory") == [
        "the leader mounts nothing at /dev/shm (the container runtime's 64 MiB default stalls NCCL)",
        "the worker limits /dev/shm to 2Gi, below 1Gi per GPU (8Gi for 8 GPUs)"]

    objs = copy.deepcopy(example)
    _group(objs)["restartPolicy"] = "None"
    assert [c for c, _ in _codes(objs)] == ["MultinodeRestartPolicy"]


def test_validate_wants_the_lws_controller_installed_before_the_group(repo_copy):
    flux = repo_copy / "clusters" / "production" / "models" / "llama3-70b-h100-80gb.yaml"
    text = flux.read_text()
    deps = ("  dependsOn:\n    - name: infrastructure\n    - name: platform\n"
            "    - name: llama3-70b-h100-80gb-engine-build\n")
    assert deps in text
    # Depending on the engine build (which depends on infrastructure) does: dependsOn is followed transitively.
    flux.write_text(text.replace(deps, "  dependsOn:\n    - name: llama3-70b-h100-80gb-engine-build\n"))
    assert [f for f in gate.validate_repo(repo_copy) if f.code == "MultinodeControllerMissing"] == []
    flux.write_text(text.replace(deps, "  dependsOn:\n    - name: platform\n"))
    found = [f for f in gate.validate_repo(repo_copy) if f.code == "MultinodeControllerMissing"]
    assert [(f.path, f.object) for f in found] == [("clusters/production/models/llama3-70b-h100-80gb.yaml",
                                                    "Kustomization/llama3-70b-h100-80gb")]
    assert "it does not depend on infrastructure, which installs the lws chart" in found[0].message
    flux.write_text(text)
    infra = repo_copy / "clusters" / "production" / "infrastructure" / "kustomization.yaml"
    infra.write_text(infra.read_text().replace("  - helmrelease-lws.yaml\n", ""))
    found = [f for f in gate.validate_repo(repo_copy) if f.code == "MultinodeControllerMissing"]
    assert len(found) == 1 and "no Flux Kustomization of clusters/production installs the lws chart" in found[0].message


LWS_OCI = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository", "metadata": {"name": "lws-chart"},
           "spec": {"interval": "1h", "url": "oci://registry.k8s.io/lws/charts/lws", "ref": {"tag": "0.10.0"},
                    "layerSelector": {"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                                      "operation": "copy"}}}


@pytest.mark.parametrize("url, installs", [
    ("oci://registry.k8s.io/lws/charts/lws", True),  # the chart the lws docs install with helm
    ("oci://ghcr.io/example/charts/keda", False),
])
def test_lws_installed_through_a_chart_ref_to_an_oci_repository(repo_copy, url, installs):
    """HelmRelease.spec.chartRef (Flux 2.3 and later) to an OCIRepository of the lws chart installs the controller."""
    infra = repo_copy / "clusters" / "production" / "infrastructure"
    release = yamlio.load_all(infra / "helmrelease-lws.yaml")[0]
    del release["spec"]["chart"]
    release["spec"]["chartRef"] = {"kind": "OCIRepository", "name": "lws-chart"}
    (infra / "helmrelease-lws.yaml").write_text(yamlio.dump_all([release]))
    oci = copy.deepcopy(LWS_OCI)
    oci["spec"]["url"] = url
    (infra / "ocirepository-lws.yaml").write_text(yamlio.dump_all([oci]))
    kust = infra / "kustomization.yaml"
    kust.write_text(kust.read_text().replace("  - helmrelease-lws.yaml\n",
                                             "  - helmrelease-lws.yaml\n  - ocirepository-lws.yaml\n"))
    found = [f for f in gate.validate_repo(repo_copy) if f.code == "MultinodeControllerMissing"]
    assert (found == []) == installs, [f.message for f in found]


def test_lws_installed_from_the_release_manifests(repo_copy):
    """The lws release's manifests (its CRD and its controller's Deployment) applied by a Kustomization install the
    controller too; the CRD alone (a crds/ folder) reconciles nothing."""
    infra = repo_copy / "clusters" / "production" / "infrastructure"
    kust = infra / "kustomization.yaml"
    kust.write_text(kust.read_text().replace("  - helmrelease-lws.yaml\n", "  - lws-crd.yaml\n"))
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "leaderworkersets.leaderworkerset.x-k8s.io"},
           "spec": {"group": "leaderworkerset.x-k8s.io", "scope": "Namespaced",
                    "names": {"kind": "LeaderWorkerSet", "plural": "leaderworkersets", "singular": "leaderworkerset",
                              "listKind": "LeaderWorkerSetList"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {"type": "object",
                                                                 "x-kubernetes-preserve-unknown-fields": True}}}]}}
    (infra / "lws-crd.yaml").write_text(yamlio.dump_all([crd]))
    missing = [f.code for f in gate.validate_repo(repo_copy) if f.code == "MultinodeControllerMissing"]
    assert missing == ["MultinodeControllerMissing"]  # the CRD without its controller
    controller = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "lws-controller-manager", "namespace": "lws-system"},
                  "spec": {"selector": {"matchLabels": {"control-plane": "controller-manager"}},
                           "template": {"metadata": {"labels": {"control-plane": "controller-manager"}},
                                        "spec": {"containers": [{"name": "manager",
                                                                 "image": "registry.k8s.io/lws/lws:v0.6.1"}]}}}}
    (infra / "lws-controller.yaml").write_text(yamlio.dump_all([controller]))
    kust.write_text(kust.read_text().replace("  - lws-crd.yaml\n", "  - lws-crd.yaml\n  - lws-controller.yaml\n"))
    assert [f for f in gate.validate_repo(repo_copy) if f.code == "MultinodeControllerMissing"] == []


def test_gpus_counts_nodes_that_can_host_a_whole_group(run_cli, api):  # noqa: F811
    from tests.test_gpus import gpu_pod, node

    api.cluster.apply(node("h100-a", "NVIDIA-H100-80GB-HBM3", 8), node("h100-b", "NVIDIA-H100-80GB-HBM3", 8),
                      gpu_pod("llm", "h100-a", 2))
    res = run_cli("--kubeconfig", str(api.kubeconfig_path), "gpus", "--repo", str(REPO), "-o", "json")
    assert res.exit_code == 0, res.stderr
    fit = {f["overlay"]: f for f in json.loads(res.stdout)["overlays"]}["overlays/llama3-70b/h100-80gb"]
    assert (fit["gpus_per_pod"], fit["group_size"], fit["nodes_that_fit"], fit["nodes_free_now"]) == (8, 2, 2, 1)
    assert fit["reason"] == ("group of 2 pods x 8 GPU(s): 2 node(s) can host a pod, 1 with 8 free now; "
                             "the group needs 2")
    api.cluster.apply(node("h100-c", "NVIDIA-H100-80GB-HBM3", 8))
    res = run_cli("--kubeconfig", str(api.kubeconfig_path), "gpus", "--repo", str(REPO), "-o", "json")
    fit = {f["overlay"]: f for f in json.loads(res.stdout)["overlays"]}["overlays/llama3-70b/h100-80gb"]
    assert fit["reason"].endswith("the whole group fits now") and fit["nodes_free_now"] == 2
