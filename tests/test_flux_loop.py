"""The whole GitOps loop with real Flux: a fresh `kubectl triton init` repository plus one `add-model`, served over
git smart HTTP on loopback (Debian git's `git http-backend`), reconciled by Flux's real source-controller and
kustomize-controller (Flux 2.7, built by `make controlplane`) into the real control plane of tests/cluster.py, then
judged by `kubectl triton status`; then a commit that breaks the model, and status naming the cause.

What the test changes in init's output, and why:
- `clusters/production/infrastructure.yaml` (the GPU Operator, prometheus-adapter, KEDA and LeaderWorkerSet
  HelmReleases) is left out, with the `infrastructure` entries of `dependsOn`: none of those charts can be had here
  (their sources are in no registry this machine reaches; a stand-in chart would prove nothing), and a Kustomization
  suspended instead would block every Kustomization that depends on it. The cluster provides what they would: GPU
  nodes with GPU feature discovery's labels (kwok) and, as `--monitoring existing` says, an existing Prometheus's CRDs.
- `flux bootstrap`'s part is done by the test: Flux's CRDs, the flux-system namespace and gotk-sync.yaml (the
  GitRepository of this repository's loopback URL and the flux-system Kustomization of clusters/production),
  committed as bootstrap commits it. The controllers run outside the cluster (kubeconfig, loopback ports).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests import cluster as real
from tests.cluster import cluster  # noqa: F401 - fixture
from tests.gitserver import serve

MODEL = "resnet50"
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "ci", "GIT_AUTHOR_EMAIL": "ci@example.com", "GIT_COMMITTER_NAME": "ci",
           "GIT_COMMITTER_EMAIL": "ci@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
RECONCILE_TIMEOUT = 240.0


def _run(*args: str, cwd: Path) -> str:
    proc = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, env=GIT_ENV, timeout=120)
    assert proc.returncode == 0, f"{' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def _dump(path: Path, docs: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def _without_infrastructure(work: Path) -> None:
    (work / "clusters/production/infrastructure.yaml").unlink()
    for path in (work / "clusters/production").rglob("*.yaml"):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        changed = False
        for doc in docs:
            deps = (doc.get("spec") or {}).get("dependsOn")
            if doc.get("kind") == "Kustomization" and isinstance(deps, list):
                kept = [d for d in deps if d.get("name") != "infrastructure"]
                if kept != deps:
                    changed = True
                    if kept:
                        doc["spec"]["dependsOn"] = kept
                    else:
                        del doc["spec"]["dependsOn"]
        if changed:
            _dump(path, docs)


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
    _without_infrastructure(work)
    served = tmp_path / "served"
    served.mkdir()
    with serve(served) as base:
        sync = _bootstrap(work, f"{base}/fleet.git")
        _run("git", "add", "-A", cwd=work)
        _run("git", "commit", "-q", "-m", "kubectl triton init + add-model", cwd=work)
        _run("git", "clone", "-q", "--bare", str(work), str(served / "fleet.git"), cwd=tmp_path)
        c.apply(sync)  # flux bootstrap applies its sync objects once; Flux keeps them from git afterwards

        names = {"flux-system", "platform", "monitoring", f"{MODEL}-t4"}
        c.wait_for("every Flux Kustomization Ready", lambda: _all_ready(c, names), RECONCILE_TIMEOUT)
        rc, doc = _status(c, "--wait", "--timeout", "120s")
        model = doc["models"][0]
        assert rc == 0 and model["phase"] == "Healthy", model

        # A breaking commit: the model's overlay moved to a GPU type this cluster has no node of.
        overlay = work / f"overlays/{MODEL}/t4/kustomization.yaml"
        overlay.write_text(overlay.read_text().replace("gpus/t4", "gpus/l4"))
        _run("git", "commit", "-q", "-am", "move resnet50 to L4", cwd=work)
        _run("git", "push", "-q", str(served / "fleet.git"), "main", cwd=work)
        head = _run("git", "rev-parse", "HEAD", cwd=work).strip()
        pushed = time.monotonic()
        c.wait_for("Flux to apply the new revision", lambda: head in json.dumps(
            c.get("kustomizations.kustomize.toolkit.fluxcd.io", f"{MODEL}-t4", "-n", "flux-system")["status"]),
            RECONCILE_TIMEOUT)
        rc, doc = _status(c, "--wait", "--timeout", "120s", "--unschedulable-grace", "10s")
        verdict_s = time.monotonic() - pushed
        model = doc["models"][0]
        assert rc == 1 and model["phase"] == "Failed", model
        assert model["reasons"][0]["code"] == "GPUTypeUnavailable", model
        assert "NVIDIA-L4 (l4)" in model["reasons"][0]["message"]
        print(f"flux loop: push -> status verdict {verdict_s:.0f} s")
