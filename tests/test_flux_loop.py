"""The whole GitOps loop with real Flux: a fresh `kubectl triton init` repository plus one `add-model`, served over
git smart HTTP on loopback (Debian git's `git http-backend`), reconciled by Flux's real source-controller and
kustomize-controller (Flux 2.7, built by `make controlplane`) into the real control plane of tests/cluster.py, then
judged by `kubectl triton status`; then two commits that break the model, and status naming each cause: a config
error pushed past the gate (validate refuses it; the pods' log is what the real tritonserver logs for the repository
the new ConfigMap assembles), then the model moved to a GPU type the cluster has no node of.

What the test changes in init's output, and why:
- `infrastructure/` keeps the LeaderWorkerSet HelmRelease only, its HelmRepository pointed at an OCI registry on
  loopback (Debian's docker-registry) that serves the chart from its Go module (sigs.k8s.io/lws, charts/lws, copied
  by `make controlplane`; packaged at the module's version, pinned in place of init's): helm-controller installs it.
  The GPU Operator, kube-prometheus-stack, prometheus-adapter and KEDA charts are left out: their sources are in no
  registry this machine reaches, and a stand-in chart would prove nothing. The cluster provides what they would:
  GPU nodes with GPU feature discovery's labels (kwok) and, as `--monitoring existing` says, an existing
  Prometheus's CRDs.
- `flux bootstrap`'s part is done by the test: Flux's CRDs, the flux-system namespace and gotk-sync.yaml (the
  GitRepository of this repository's loopback URL and the flux-system Kustomization of clusters/production),
  committed as bootstrap commits it. The controllers run outside the cluster (kubeconfig, loopback ports), the
  kustomize-controller with CancelHealthCheckOnNewRevision (a fix pushed while a broken revision's health checks
  wait is applied at once, not after the 15m timeout).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from kubectl_triton.adapters import kustomize, tritonserver
from kubectl_triton.adapters.shadow import build_shadow
from tests import cluster as real
from tests.cluster import cluster  # noqa: F401 - fixture
from tests.gitserver import serve
from tests.registry import helm_package, push_helm_chart, registry
from tests.test_model_repositories import assemble

MODEL = "resnet50"
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "ci", "GIT_AUTHOR_EMAIL": "ci@example.com", "GIT_COMMITTER_NAME": "ci",
           "GIT_COMMITTER_EMAIL": "ci@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
RECONCILE_TIMEOUT = 240.0
GPU_LESS_HOST = re.compile(r"CUDA driver|CudaDriverHelper|CUDA memory pool|NVML|DCGM")


def _run(*args: str, cwd: Path) -> str:
    proc = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, env=GIT_ENV, timeout=120)
    assert proc.returncode == 0, f"{' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def _dump(path: Path, docs: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def _infrastructure_lws_only(work: Path, repository: str, version: str) -> None:
    """infrastructure/ with the LeaderWorkerSet HelmRelease only, its HelmRepository on the loopback registry."""
    folder = work / "infrastructure"
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    kustomization["resources"] = ["helmrepository-lws.yaml", "helmrelease-lws.yaml"]
    _dump(folder / "kustomization.yaml", [kustomization])
    helm_repository = yaml.safe_load((folder / "helmrepository-lws.yaml").read_text())
    helm_repository["spec"].update(url=repository, insecure=True)  # plain HTTP on loopback
    _dump(folder / "helmrepository-lws.yaml", [helm_repository])
    release = yaml.safe_load((folder / "helmrelease-lws.yaml").read_text())
    release["spec"]["chart"]["spec"]["version"] = version
    _dump(folder / "helmrelease-lws.yaml", [release])


def _serve_lws_chart(c: real.Cluster, host: str, scratch: Path) -> tuple[str, str]:
    """The LeaderWorkerSet chart of the control-plane build (hack/controlplane/charts.txt: the Go module's
    charts/lws), packaged at the module's version and pushed to the registry at `host`: (HelmRepository URL,
    chart version)."""
    chart_dir = c.bin.parent / "charts" / "lws"
    assert chart_dir.is_dir(), f"no {chart_dir} (make controlplane copies the charts of hack/controlplane/charts.txt)"
    version = (chart_dir / "SOURCE").read_text().split()[0].rpartition("@v")[2]
    archive, chart = helm_package(chart_dir, version, scratch)
    reference = push_helm_chart(host, "lws/charts", archive, chart)
    return reference.rpartition("/lws:")[0], version


def _bootstrap(work: Path, url: str) -> list[dict]:
    """What `flux bootstrap git --url=URL --path=clusters/production` commits (its sync objects)."""
    sync = [{"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
             "metadata": {"name": "flux-system", "namespace": "flux-system"},
             "spec": {"interval": "10s", "ref": {"branch": "main"}, "url": url}},
            {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
             "metadata": {"name": "flux-system", "namespace": "flux-system"},
             "spec": {"interval": "10m", "path": "./clusters/production", "prune": True,
                      "sourceRef": {"kind": "GitRepository", "name": "flux-system"}}}]
    _dump(work / "clusters/production/flux-system/gotk-sync.yaml", sync)
    _dump(work / "clusters/production/flux-system/kustomization.yaml",
          [{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": ["gotk-sync.yaml"]}])
    return sync


def _kustomizations(c: real.Cluster) -> dict[str, dict]:
    items = c.get("kustomizations.kustomize.toolkit.fluxcd.io", "-n", "flux-system")["items"]
    return {k["metadata"]["name"]: {cond["type"]: cond for cond in k.get("status", {}).get("conditions", [])}
            for k in items}


def _all_ready(c: real.Cluster, names: set[str]) -> bool:
    found = _kustomizations(c)
    return names <= set(found) and all(found[n].get("Ready", {}).get("status") == "True" for n in names)


def _status(c: real.Cluster, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(["kubectl-triton", "status", MODEL, "--kubeconfig", str(c.admin), "-n", "triton",
                           "--no-probe", "-o", "json", *args], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _push_and_wait(c: real.Cluster, work: Path, served: Path) -> float:
    """Push main to the served repository and wait until Flux applied that revision; the time of the push."""
    _run("git", "push", "-q", str(served / "fleet.git"), "main", cwd=work)
    head = _run("git", "rev-parse", "HEAD", cwd=work).strip()
    pushed = time.monotonic()
    c.wait_for("Flux to apply the new revision", lambda: head in json.dumps(
        c.get("kustomizations.kustomize.toolkit.fluxcd.io", f"{MODEL}-t4", "-n", "flux-system")["status"]),
        RECONCILE_TIMEOUT)
    return pushed


def _triton_log(work: Path, scratch: Path) -> str:
    """What the real tritonserver logs when it loads the repository the model's overlay assembles (its ConfigMap
    through base/triton's init script; the model file shadowed by a python stub, as `validate --triton` does)."""
    docs = [d for d in yaml.safe_load_all(kustomize.build(work / f"overlays/{MODEL}/t4").yaml) if d]
    shadow = scratch / "shadow"
    build_shadow(assemble(docs, scratch), shadow)
    log = tritonserver.load_repository(shadow, timeout=60).log
    # this host has no GPU: the lines saying so would not be in a GPU node's log
    return "".join(line for line in log.splitlines(keepends=True) if not GPU_LESS_HOST.search(line))


@pytest.fixture
def flux_cluster(cluster: real.Cluster) -> real.Cluster:  # noqa: F811
    crds = real.crds(cluster, ["source.toolkit.fluxcd.io", "kustomize.toolkit.fluxcd.io", "helm.toolkit.fluxcd.io",
                               "monitoring.coreos.com"])
    cluster.apply(crds + [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                          for n in ("flux-system", "monitoring")])
    cluster.ensure_gpu_nodes()
    cluster.ensure_artifacts_volume()
    cluster.start_flux()
    return cluster


def test_flux_reconciles_an_init_repository_and_status_follows_a_breaking_commit(flux_cluster: real.Cluster,
                                                                                 tmp_path: Path):
    c = flux_cluster
    work = tmp_path / "work"
    work.mkdir()
    _run("git", "init", "-q", "-b", "main", cwd=work)
    _run("kubectl-triton", "init", "--gpu", "t4", "--gpu", "l4", "--monitoring", "existing",
         "--prometheus-url", "http://prometheus.monitoring:9090", cwd=work)
    _run("kubectl-triton", "add-model", MODEL, "--backend", "onnxruntime", "--gpu", "t4",
         "--input", "input:FP32:3,224,224", "--output", "probabilities:FP32:1000", cwd=work)
    served = tmp_path / "served"
    served.mkdir()
    with serve(served) as base, registry(tmp_path / "registry") as host:
        _infrastructure_lws_only(work, *_serve_lws_chart(c, host, tmp_path / "charts"))
        sync = _bootstrap(work, f"{base}/fleet.git")
        _run("git", "add", "-A", cwd=work)
        _run("git", "commit", "-q", "-m", "kubectl triton init + add-model", cwd=work)
        _run("git", "clone", "-q", "--bare", str(work), str(served / "fleet.git"), cwd=tmp_path)
        c.apply(sync)  # flux bootstrap applies its sync objects once; Flux keeps them from git afterwards

        names = {"flux-system", "infrastructure", "platform", "monitoring", f"{MODEL}-t4"}
        c.wait_for("every Flux Kustomization Ready", lambda: _all_ready(c, names), RECONCILE_TIMEOUT)
        # helm-controller installed the chart it pulled through source-controller: the CRD and the controller
        release = c.get("helmreleases.helm.toolkit.fluxcd.io", "lws", "-n", "flux-system")
        assert any(x["type"] == "Ready" and x["status"] == "True" for x in release["status"]["conditions"]), release
        assert c.get("crd", "leaderworkersets.leaderworkerset.x-k8s.io")["spec"]["group"] == "leaderworkerset.x-k8s.io"
        assert c.get("deployment", "lws-controller-manager", "-n", "lws-system")["status"].get("readyReplicas") == 1
        rc, doc = _status(c, "--wait", "--timeout", "120s")
        model = doc["models"][0]
        assert rc == 0 and model["phase"] == "Healthy", model

        # A breaking commit past the gate: a config error. What the pods' tritonserver logs for it is what the
        # real tritonserver logs for the repository the new ConfigMap assembles; kwok runs no containers, so the
        # commit also carries the test's crash-loop label and kwok's kubelet serves that log.
        config = work / f"models/{MODEL}/{MODEL}/config.pbtxt"
        good_config = config.read_text()
        config.write_text(good_config.replace("max_queue_delay_microseconds: 100",
                                              "preferred_batch_size: [ 16 ]\n  max_queue_delay_microseconds: 100"))
        overlay = work / f"overlays/{MODEL}/t4/kustomization.yaml"
        good_overlay = overlay.read_text()
        faulty = yaml.safe_load(good_overlay)
        faulty["labels"].append({"pairs": {real.FAULT_LABEL: "crashloop"}, "includeTemplates": True})
        overlay.write_text(yaml.safe_dump(faulty, sort_keys=False))
        gate = subprocess.run(["kubectl-triton", "validate", "-o", "json"], cwd=work, capture_output=True, text=True,
                              timeout=300)
        refused = [f for f in json.loads(gate.stdout)["findings"] if f["severity"] == "error"]
        assert gate.returncode == 1 and any("preferred" in f["message"] for f in refused), gate.stdout
        log = _triton_log(work, tmp_path / "triton")
        assert "preferred size must be <= max batch size" in log, log
        c.write_logs("", log)
        _run("git", "commit", "-q", "-am", "resnet50: prefer batches of 16 (bypassing the gate)", cwd=work)
        pushed = _push_and_wait(c, work, served)
        rc, doc = _status(c, "--wait", "--timeout", "120s")
        print(f"flux loop: config error: push -> status verdict {time.monotonic() - pushed:.0f} s")
        model = doc["models"][0]
        assert rc == 1 and model["phase"] == "Failed", model
        assert model["reasons"][0]["code"] == "ModelRepositoryInvalid", model
        assert "preferred size must be <= max batch size" in model["reasons"][0]["message"], model

        # Another breaking commit: the config mended, the model's overlay moved to a GPU type this cluster has no
        # node of.
        c.write_logs("", "")
        config.write_text(good_config)
        overlay.write_text(good_overlay.replace("gpus/t4", "gpus/l4"))
        _run("git", "commit", "-q", "-am", "move resnet50 to L4", cwd=work)
        pushed = _push_and_wait(c, work, served)
        rc, doc = _status(c, "--wait", "--timeout", "120s", "--unschedulable-grace", "10s")
        verdict_s = time.monotonic() - pushed
        model = doc["models"][0]
        assert rc == 1 and model["phase"] == "Failed", model
        assert model["reasons"][0]["code"] == "GPUTypeUnavailable", model
        assert "NVIDIA-L4 (l4)" in model["reasons"][0]["message"]
        print(f"flux loop: missing GPU type: push -> status verdict {verdict_s:.0f} s")
