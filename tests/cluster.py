"""A real Kubernetes control plane for the tests: etcd and kube-apiserver (the product's ephemeral control plane,
`kubectl_triton.adapters.controlplane`), kube-controller-manager, kube-scheduler and kwok, all built by
`make controlplane` (hack/controlplane) and started on loopback ports.

kwok runs the nodes and the pods' lifecycles: GPU nodes of the catalog's types (`nvidia.com/gpu` capacity and the
`nvidia.com/gpu.product` label), kwok's own pod and node stages (copied from the kwok module by the build), and
stages of ours that a test selects with a pod label (`FAULT_LABEL`): a crash loop or an OOM kill. Container logs are
served by kwok's kubelet API (ClusterLogs), so `pods/log` goes through the API server as on a real cluster.

Without the binaries the fixtures skip, except where KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS=1 (.ci/run builds them):
there they fail, so CI never passes without the real control plane.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubectl_triton.adapters import controlplane
from kubectl_triton.errors import ToolMissing

ROOT = Path(__file__).resolve().parent.parent
FAULT_LABEL = "kubectl-triton.test/fault"
NODE_LABEL = "type"  # kwok manages the nodes labelled type=kwok
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
READY_TIMEOUT = 60.0

# Our stages, on top of kwok's: pods carrying FAULT_LABEL=crashloop (or oom) never become Ready. The status shapes
# are those the kubelet writes for a container in back-off (pkg/kubelet/kuberuntime, "CrashLoopBackOff").
FAULT_STAGE = """
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-fault-{fault}
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.labels["{label}"]'
      operator: In
      values: ['{fault}']
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: [Pending]
    - key: '.status.conditions.[] | select( .type == "Initialized" ) | .status'
      operator: In
      values: ['True']
  weight: 1000000
  delay:
    durationMilliseconds: 200
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      phase: Running
      conditions:
      - type: Initialized
        status: "True"
        lastTransitionTime: {{{{ $now | Quote }}}}
      - type: Ready
        status: "False"
        reason: ContainersNotReady
        lastTransitionTime: {{{{ $now | Quote }}}}
      - type: ContainersReady
        status: "False"
        reason: ContainersNotReady
        lastTransitionTime: {{{{ $now | Quote }}}}
      - type: PodScheduled
        status: "True"
        lastTransitionTime: {{{{ $now | Quote }}}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - name: {{{{ .name | Quote }}}}
        image: {{{{ .image | Quote }}}}
        ready: false
        started: false
        restartCount: 6
        state:
          waiting:
            reason: CrashLoopBackOff
            message: {{{{ printf "back-off 5m0s restarting failed container=%s" .name | Quote }}}}
        lastState:
          terminated:
            exitCode: {exit_code}
            reason: {reason}
            startedAt: {{{{ $now | Quote }}}}
            finishedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
"""
FAULTS = {"crashloop": (1, "Error"), "oom": (137, "OOMKilled")}


def assets() -> controlplane.Assets:
    """The build of `make controlplane`; skip (fail in CI) without it."""
    try:
        found = controlplane.find_assets(BINARIES)
    except ToolMissing as err:
        if os.environ.get("KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS") == "1":
            pytest.fail(f"the real control plane is required here: {err.message}")
        pytest.skip(f"no control plane binaries ({err.message})")
    return found


@dataclass
class Cluster:
    """A running control plane with kwok nodes; `kubectl(...)` runs the real kubectl against it as admin."""

    plane: controlplane.ControlPlane
    admin: Path
    logs_dir: Path
    nodes: list[str] = field(default_factory=list)

    @property
    def bin(self) -> Path:
        return self.plane.assets.bin

    def kubectl(self, *args: str, input: str | None = None, kubeconfig: Path | None = None,  # noqa: A002
                check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bin / "kubectl"), "--kubeconfig", str(kubeconfig or self.admin), *args],
                              input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def apply(self, objects: list[dict], *, server_side: bool = True) -> None:
        """Apply objects for real (as Flux would), CRDs and Namespaces first."""
        first = [o for o in objects if o.get("kind") in ("CustomResourceDefinition", "Namespace")]
        rest = [o for o in objects if o not in first]
        for batch in (first, rest):
            if batch:
                self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=kustomize-controller",
                             "-f", "-", input=yaml.safe_dump_all(batch))

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def wait_for(self, what: str, predicate: Any, timeout: float = READY_TIMEOUT) -> Any:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what} (last: {last!r})")

    def user(self, name: str, groups: tuple[str, ...] = (), namespace: str | None = None) -> Path:
        return self.plane.kubeconfig_for(name, groups, namespace)

    def write_logs(self, current: str, previous: str) -> None:
        """What kwok's kubelet API serves as every pod's (current, previous) container log, written in the CRI log
        format a container runtime writes and the kubelet reads (`TIMESTAMP STREAM F LINE`)."""
        for name, text in (("current.log", current), ("previous.log", previous)):
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
            (self.logs_dir / name).write_text("".join(f"{stamp} stderr F {line}\n" for line in text.splitlines()))

    def ensure_gpu_nodes(self) -> None:
        """Two T4 nodes and one H100 node (the GPU types the tests' overlays select), once per cluster."""
        have = {n["metadata"]["name"] for n in self.get("nodes")["items"]}
        for name, product, gpus in (("t4-0", "Tesla-T4", 4), ("t4-1", "Tesla-T4", 4),
                                    ("h100-0", "NVIDIA-H100-80GB-HBM3", 8)):
            if name not in have:
                self.add_gpu_node(name, product, gpus)

    def ensure_artifacts_volume(self) -> None:
        """A PersistentVolume for base/platform's model-artifacts claim (what the cluster's storage provides)."""
        self.apply([{"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "model-artifacts"},
                     "spec": {"capacity": {"storage": "500Gi"}, "accessModes": ["ReadWriteMany"],
                              "hostPath": {"path": "/srv/model-artifacts"}, "storageClassName": "",
                              "claimRef": {"namespace": "triton", "name": "model-artifacts"}}}])

    def start_flux(self) -> None:
        """Flux's source-, kustomize- and helm-controller, outside the cluster as a developer runs them."""
        if any(p.name == "source-controller" for p in self.plane.processes):
            return
        storage = self.plane.dir / "flux-storage"
        storage.mkdir(exist_ok=True)
        port = controlplane.free_port()
        env = {"KUBECONFIG": str(self.admin), "RUNTIME_NAMESPACE": "flux-system"}
        common = ["--enable-leader-election=false", "--watch-all-namespaces=true", "--log-level=info"]
        self.plane.spawn("source-controller", [
            str(self.bin / "source-controller"), *common, "--storage-path", str(storage),
            "--storage-addr", f"127.0.0.1:{port}", "--storage-adv-addr", f"127.0.0.1:{port}",
            "--metrics-addr", f"127.0.0.1:{controlplane.free_port()}",
            "--health-addr", f"127.0.0.1:{controlplane.free_port()}"], env)
        # CancelHealthCheckOnNewRevision (off by default in Flux 2.7): a revision pushed while the previous one's
        # health checks wait is applied at once, not after the Kustomization's timeout; tests push fixes that way.
        self.plane.spawn("kustomize-controller", [
            str(self.bin / "kustomize-controller"), *common, "--requeue-dependency=5s",
            "--feature-gates=CancelHealthCheckOnNewRevision=true",
            "--metrics-addr", f"127.0.0.1:{controlplane.free_port()}",
            "--health-addr", f"127.0.0.1:{controlplane.free_port()}"], env)
        self.plane.spawn("helm-controller", [
            str(self.bin / "helm-controller"), *common,
            "--metrics-addr", f"127.0.0.1:{controlplane.free_port()}",
            "--health-addr", f"127.0.0.1:{controlplane.free_port()}"], env)

    def add_gpu_node(self, name: str, product: str, gpus: int) -> None:
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                                           "kwok.x-k8s.io/node": "fake"},
                             "labels": {NODE_LABEL: "kwok", "kubernetes.io/hostname": name,
                                        "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                        "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus),
                                        "nvidia.com/gpu.present": "true"}},
                "spec": {},
                "status": {"capacity": {"cpu": "96", "memory": "1024Gi", "pods": "110",
                                        "nvidia.com/gpu": str(gpus), "ephemeral-storage": "2Ti"},
                           "allocatable": {"cpu": "95", "memory": "1000Gi", "pods": "110",
                                           "nvidia.com/gpu": str(gpus), "ephemeral-storage": "2Ti"}}}
        self.kubectl("create", "-f", "-", input=json.dumps(node))
        self.nodes.append(name)
        # TaintNodesByCondition admission puts not-ready on a new node; the node lifecycle controller (off here:
        # kwok's nodes send no kubelet heartbeats) would lift it once the node is Ready.
        self.kubectl("taint", "nodes", name, "node.kubernetes.io/not-ready:NoSchedule-", check=False)
        self.wait_for(f"node {name} Ready", lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in self.get("node", name).get("status", {}).get("conditions", [])))


def crds(c: Cluster, groups: list[str]) -> list[dict]:
    """The CRD manifests of `groups` from the control-plane build (crds/ beside bin/)."""
    from kubectl_triton.checks.server import load_crds

    found = load_crds(c.bin.parent / "crds")
    missing = [g for g in groups if g not in found]
    assert not missing, f"no CRD manifests for {missing} in {c.bin.parent / 'crds'} (make controlplane)"
    return [crd for g in groups for crd in found[g]]


def _kwok_config(cluster_dir: Path, stages_dir: Path | None, logs_dir: Path) -> Path:
    docs: list[dict] = []
    if stages_dir is not None:
        for path in sorted(stages_dir.rglob("*.yaml")):
            if path.name == "kustomization.yaml" or "testdata" in path.parts:
                continue
            docs += [d for d in yaml.safe_load_all(path.read_text())
                     if isinstance(d, dict) and d.get("kind") == "Stage"]
    for fault, (code, reason) in FAULTS.items():
        stage = FAULT_STAGE.format(fault=fault, label=FAULT_LABEL, exit_code=code, reason=reason)
        docs.append(yaml.safe_load(stage))
    docs.append({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": "all"},
                 "spec": {"logs": [{"containers": [], "logsFile": str(logs_dir / "current.log"),
                                    "previousLogsFile": str(logs_dir / "previous.log"), "follow": False}]}})
    path = cluster_dir / "kwok.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One real cluster for the session: control plane, controllers, scheduler and kwok with GPU nodes."""
    found = assets()
    workdir = tmp_path_factory.mktemp("cluster")
    plane = controlplane.ControlPlane(found, workdir)
    ok = False
    try:
        plane.start()
        admin = plane.kubeconfig_for("admin", ["system:masters"])
        pki = workdir / "pki"
        plane.spawn("kube-controller-manager", [
            str(found.binary("kube-controller-manager")), "--kubeconfig", str(admin),
            "--authentication-kubeconfig", str(admin), "--authorization-kubeconfig", str(admin),
            "--bind-address", "127.0.0.1", "--secure-port", str(controlplane.free_port()),
            "--leader-elect=false", "--controllers=*,-nodelifecycle,-nodeipam",
            "--service-account-private-key-file", str(pki / "sa.key"), "--root-ca-file", str(pki / "ca.crt"),
            "--use-service-account-credentials=false", "--concurrent-deployment-syncs=5"])
        plane.spawn("kube-scheduler", [
            str(found.binary("kube-scheduler")), "--kubeconfig", str(admin),
            "--authentication-kubeconfig", str(admin), "--authorization-kubeconfig", str(admin),
            "--bind-address", "127.0.0.1", "--secure-port", str(controlplane.free_port()), "--leader-elect=false"])
        logs_dir = workdir / "kwok-logs"
        logs_dir.mkdir()
        kwok_port = controlplane.free_port()
        assert plane._ca is not None
        cert, key = plane._ca.issue("kwok-kubelet", server=True)
        (pki / "kwok.crt").write_bytes(cert)
        (pki / "kwok.key").write_bytes(key)
        stages = found.bin.parent / "kwok-stages"
        plane.spawn("kwok", [
            str(found.binary("kwok")), "--kubeconfig", str(admin), "--manage-all-nodes=false",
            f"--manage-nodes-with-label-selector={NODE_LABEL}=kwok", "--cidr", "10.244.0.0/16",
            "--node-ip", "127.0.0.1", "--node-port", str(kwok_port), "--server-address", f"127.0.0.1:{kwok_port}",
            "--tls-cert-file", str(pki / "kwok.crt"), "--tls-private-key-file", str(pki / "kwok.key"),
            "--config", str(_kwok_config(workdir, stages if stages.is_dir() else None, logs_dir))])
        cluster = Cluster(plane, admin, logs_dir)
        cluster.write_logs("", "")
        cluster.wait_for("the default ServiceAccount (controller manager up)",
                         lambda: cluster.kubectl("get", "sa", "default", "-n", "default", check=False).returncode == 0)
        ok = True
        yield cluster
    finally:
        failed_logs = workdir / "logs"
        plane.stop()
        if not ok:
            print(f"control plane logs kept in {failed_logs}")
