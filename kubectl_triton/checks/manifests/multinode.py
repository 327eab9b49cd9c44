"""Multi-node serving (LeaderWorkerSet groups, docs/multinode.md), checked on rendered objects before any node is
asked for: the group holds exactly the engine's world size, each pod fits a node, NCCL has shared memory, the
ranks cannot rejoin an MPI job (the group must restart as one), and the LWS controller is installed before Flux
applies a group. Pure functions over rendered objects, model metadata and the Flux dependency graph."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.registry import register
from kubectl_triton.compat.catalog import GPU, by_gfd_label
from kubectl_triton.compat.repo_check import load_model
from kubectl_triton.errors import TritonCtlError
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops import repo
from kubectl_triton.gitops.labels import INSTANCE_LABEL as INSTANCE
from kubectl_triton.gitops.labels import PRODUCT_LABEL as PRODUCT
from kubectl_triton.gitops.model import Repository

LWS_KIND, LWS_GROUP = "LeaderWorkerSet", "leaderworkerset.x-k8s.io"
LWS_CHART = "lws"  # the chart's name, and the last segment of its OCI artifact (registry.k8s.io/lws/charts/lws)
LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
LWS_IMAGE = "lws/lws"  # the controller's image, registry.k8s.io/lws/lws:vX (the release's manifests.yaml)
SERVER = "tritonserver"
GPU_RESOURCE = "nvidia.com/gpu"
SHM_PER_GPU = 1 << 30  # bytes of /dev/shm per GPU of the pod, at least (NCCL's and the python backend's buffers)

WORLD_SIZE = register(
    "MultinodeWorldSize", "error", "overlay",
    "a LeaderWorkerSet group's GPUs (size x GPUs per pod) differ from the engine's world size (tp x pp)",
    "make tp x pp = nodes x GPUs per node: rebuild the engine or change size / nvidia.com/gpu "
    "(add-model --nodes --gpus-per-node)")
NODE_SHAPE = register(
    "MultinodeNodeShape", "error", "overlay",
    "a pod of a LeaderWorkerSet group asks for more GPUs than a node of its GPU type has, or leader and workers differ",
    "ask for at most the node's GPUs per pod (GPU catalog gpus_per_node) and the same count in both templates")
SHARED_MEMORY = register(
    "MultinodeSharedMemory", "error", "overlay",
    "a pod of a LeaderWorkerSet group lacks a memory-backed /dev/shm of at least 1Gi per GPU",
    "mount an emptyDir {medium: Memory, sizeLimit: >= 1Gi x GPUs} at /dev/shm in the leader and worker templates")
RESTART_POLICY = register(
    "MultinodeRestartPolicy", "error", "overlay",
    "a LeaderWorkerSet group does not restart as a whole when one pod fails",
    "set leaderWorkerTemplate.restartPolicy: RecreateGroupOnPodRestart (MPI ranks cannot rejoin a running job)")
OPENAI = register(
    "MultinodeOpenAIFrontend", "error", "overlay",
    "a LeaderWorkerSet group runs Triton's OpenAI-compatible frontend",
    "serve the group with tritonserver (rank.sh); the frontend drives TensorRT-LLM in single-node orchestrator "
    "mode only (docs/openai.md)")
CONTROLLER = register(
    "MultinodeControllerMissing", "error", "cluster",
    "a Flux Kustomization applies a LeaderWorkerSet before (or without) the LWS controller (its HelmRelease or "
    "its release manifests)",
    "install the lws chart with a HelmRelease in the cluster's infrastructure and make the model's Flux "
    "Kustomization depend on it (dependsOn)")


def _spec(obj: Any) -> dict:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return spec if isinstance(spec, dict) else {}


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def groups(objects: Iterable[Any]) -> list[dict]:
    """The LeaderWorkerSets among rendered objects whose pods run tritonserver."""
    return [o for o in objects if isinstance(o, dict) and o.get("kind") == LWS_KIND
            and str(o.get("apiVersion", "")).startswith(LWS_GROUP + "/")
            and any(_server(t) for t in _templates(o).values())]


def _templates(lws: dict) -> dict[str, dict]:
    lwt = _dict(_spec(lws).get("leaderWorkerTemplate"))
    out = {"worker": _dict(lwt.get("workerTemplate"))}
    if lwt.get("leaderTemplate"):
        out["leader"] = _dict(lwt.get("leaderTemplate"))
    return out


def _server(template: dict) -> dict:
    return next((c for c in _list(_spec(template).get("containers"))
                 if isinstance(c, dict) and c.get("name") == SERVER), {})


def gpus_per_pod(template: dict) -> int | None:
    res = _dict(_server(template).get("resources"))
    for part in ("limits", "requests"):
        value = _dict(res.get(part)).get(GPU_RESOURCE)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return None
    return None


def _env(template: dict, name: str) -> str | None:
    for e in _list(_server(template).get("env")):
        if isinstance(e, dict) and e.get("name") == name and "value" in e:
            return str(e["value"])
    return None


def group_size(lws: dict) -> int:
    size = _dict(_spec(lws).get("leaderWorkerTemplate")).get("size", 1)
    return size if isinstance(size, int) and not isinstance(size, bool) else 1


def _node_gpu(template: dict) -> GPU | None:
    label = _dict(_spec(template).get("nodeSelector")).get(PRODUCT)
    return by_gfd_label(str(label)) if label else None


_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
_UNITS = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50,
          "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}


def quantity_bytes(text: Any) -> int | None:
    """A Kubernetes memory quantity (16Gi, 2G, 1073741824) in bytes; None when not one."""
    m = _QUANTITY.match(str(text).strip())
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else None


def _shm_problem(template: dict, gpus: int) -> str | None:
    mounts = [m for m in _list(_server(template).get("volumeMounts"))
              if isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == "/dev/shm"]
    if not mounts:
        return "mounts nothing at /dev/shm (the container runtime's 64 MiB default stalls NCCL)"
    volume = next((v for v in _list(_spec(template).get("volumes"))
                   if isinstance(v, dict) and v.get("name") == mounts[0].get("name")), None)
    empty = _dict((volume or {}).get("emptyDir"))
    if volume is None or "emptyDir" not in volume or empty.get("medium") != "Memory":
        return "has /dev/shm on a volume that is not an emptyDir with medium Memory"
    limit = empty.get("sizeLimit")
    want = SHM_PER_GPU * max(gpus, 1)
    if limit is not None and (quantity_bytes(limit) or 0) < want:
        return f"limits /dev/shm to {limit}, below 1Gi per GPU ({max(gpus, 1)}Gi for {gpus} GPUs)"
    return None


def _engine_world(root: Path, model: str, gpu: GPU | None) -> tuple[int | None, int | None, str]:
    """(tp x pp from model.yaml, recorded engine's world size, where) of the model a group serves."""
    rel = Repository.at(root, tolerant=True).layout.model_dir(model)
    directory = root / rel
    if not directory.is_dir():
        return None, None, ""
    try:
        info = load_model(root, directory)
    except TritonCtlError:
        return None, None, ""  # the metadata checks report unreadable files
    engine = _dict(info.meta.get("engine"))
    tp, pp = engine.get("tp", 1), engine.get("pp", 1)
    declared = tp * pp if isinstance(tp, int) and isinstance(pp, int) else None
    recorded = info.engines.get(gpu.key) if gpu is not None else None
    if recorded is None and len(info.engines) == 1:
        recorded = next(iter(info.engines.values()))
    return declared, recorded.world_size if recorded else None, rel


def check_groups(root: Path, targets: Iterable[Any]) -> list[Finding]:
    """World size, node shape, shared memory and restart policy of every rendered group."""
    out: list[Finding] = []
    for target in targets:
        for lws in groups(target.objects):
            oid, where = object_id(lws), target.rel
            templates = _templates(lws)
            size = group_size(lws)
            counts = {role: gpus_per_pod(t) for role, t in templates.items()}
            per_pod = counts.get("leader") or counts.get("worker") or 0
            if len(set(counts.values())) > 1:
                out.append(NODE_SHAPE.finding(
                    f"leader asks for {counts.get('leader')} GPUs and workers for {counts['worker']}: every rank "
                    "of the world needs one GPU, so all pods of a group ask for the same count",
                    path=where, object=oid))
            gpu = _node_gpu(templates.get("leader", templates["worker"]))
            if gpu is not None and gpu.node_limit is not None and per_pod > gpu.node_limit:
                out.append(NODE_SHAPE.finding(
                    f"each pod asks for {per_pod} GPUs but a {gpu.key} node has at most {gpu.node_limit}: no node "
                    "can host a pod of the group and it stays Pending", path=where, object=oid))
            world = size * per_pod
            leader = templates.get("leader", templates["worker"])
            for name, expected in (("WORLD_SIZE", world), ("GPUS_PER_NODE", per_pod)):
                value = _env(leader, name)
                if value is not None and value != str(expected):
                    out.append(WORLD_SIZE.finding(
                        f"the leader's {name} is {value} but the group has {size} pods x {per_pod} GPUs "
                        f"({name.lower()} {expected}): leader.sh refuses to start", path=where, object=oid))
            model = str(_dict(_dict(leader.get("metadata")).get("labels")).get(INSTANCE) or "")
            declared, recorded, source = _engine_world(root, model, gpu) if model else (None, None, "")
            if declared is not None and declared != world:
                out.append(WORLD_SIZE.finding(
                    f"{source}/model.yaml builds a tp x pp = {declared} engine but the group has {size} pods x "
                    f"{per_pod} GPUs = {world} ranks: TensorRT-LLM needs exactly one rank per engine shard",
                    path=where, object=oid, model=model))
            if recorded is not None and recorded != world:
                out.append(WORLD_SIZE.finding(
                    f"the recorded engine ({source}/engines/) has world size {recorded} but the group runs {world} "
                    "ranks", path=where, object=oid, model=model))
            for role, template in templates.items():
                problem = _shm_problem(template, counts.get(role) or 0)
                if problem:
                    out.append(SHARED_MEMORY.finding(f"the {role} {problem}", path=where, object=oid))
            for role, template in templates.items():
                server = _server(template)
                command = [str(a) for a in _list(server.get("command")) + _list(server.get("args"))]
                if any("openai_frontend" in a for a in command):
                    out.append(OPENAI.finding(
                        f"the {role} runs the OpenAI-compatible frontend: in the pinned Triton release it serves "
                        "TensorRT-LLM only in single-node orchestrator mode (TRTLLM_ORCHESTRATOR=1), not across "
                        "an MPI group", path=where, object=oid))
            policy = _dict(_spec(lws).get("leaderWorkerTemplate")).get("restartPolicy", "RecreateGroupOnPodRestart")
            if size > 1 and policy != "RecreateGroupOnPodRestart":
                out.append(RESTART_POLICY.finding(
                    f"restartPolicy is {policy}: a restarted rank cannot rejoin the MPI job of the others, so the "
                    "group would hang instead of recovering", path=where, object=oid))
    return out


def _named(objects: Iterable[Any], kind: str, name: object, namespace: object) -> dict | None:
    """The object of `kind` called `name` (in `namespace` where both say one)."""
    for o in objects:
        if isinstance(o, dict) and o.get("kind") == kind and _dict(o.get("metadata")).get("name") == name:
            ns = _dict(o.get("metadata")).get("namespace")
            if not (ns and namespace) or ns == namespace:
                return o
    return None


def _is_lws_controller(obj: Any) -> bool:
    """The lws release manifests' controller: a Deployment running registry.k8s.io/lws/lws (any registry mirror)."""
    if not isinstance(obj, dict) or obj.get("kind") != "Deployment":
        return False
    pod = _dict(_dict(_spec(obj).get("template")).get("spec"))
    for c in _list(pod.get("containers")):
        name = str(_dict(c).get("image") or "").split("@")[0]
        head, _, last = name.rpartition("/")
        if f"/{head}/{last.split(':')[0]}".endswith(f"/{LWS_IMAGE}"):
            return True
    return False


def _installs_lws(objects: Iterable[Any], sources: list[Any]) -> bool:
    """Whether `objects` install the LWS controller: the release's manifests (its CRD and its controller), or a
    HelmRelease of the lws chart, named in spec.chart or reached through spec.chartRef (an OCIRepository whose
    artifact is the chart, oci://registry.k8s.io/lws/charts/lws, or a HelmChart), looked up among `sources` (the
    cluster's objects)."""
    objects = list(objects)
    crd = any(isinstance(o, dict) and o.get("kind") == "CustomResourceDefinition"
              and _dict(o.get("metadata")).get("name") == LWS_CRD for o in objects)
    if crd and any(_is_lws_controller(o) for o in objects):  # the CRDs alone reconcile nothing
        return True
    for o in objects:
        if not isinstance(o, dict):
            continue
        if o.get("kind") != "HelmRelease":
            continue
        if _dict(_dict(_spec(o).get("chart")).get("spec")).get("chart") == LWS_CHART:
            return True
        ref = _dict(_spec(o).get("chartRef"))
        namespace = ref.get("namespace") or _dict(o.get("metadata")).get("namespace")
        source = _named(sources, str(ref.get("kind")), ref.get("name"), namespace) if ref else None
        if source is None:
            continue
        if ref.get("kind") == "OCIRepository":
            url = str(_spec(source).get("url") or "")
            if url.rstrip("/").rsplit("/", 1)[-1] == LWS_CHART:
                return True
        elif _spec(source).get("chart") == LWS_CHART:  # a HelmChart
            return True
    return False


def check_controller(root: Path, targets: Iterable[Any]) -> list[Finding]:
    """Every Flux Kustomization that applies a group depends (transitively) on one that installs the lws chart."""
    rendered = {t.rel: t.objects for t in targets}
    out: list[Finding] = []
    for cluster in repo.clusters(root, tolerant=True):  # malformed Flux files are reported by the gate
        kss = repo.flux_kustomizations(root, cluster, tolerant=True)
        by_name = {(k.namespace, k.name): k for k in kss}

        def objects(ks: repo.FluxKustomization) -> list:
            return rendered.get(repo.relative(root, repo.resolved(root / ks.path)), [])

        everything = [o for k in kss for o in objects(k)]
        installers = {key for key, k in by_name.items() if _installs_lws(objects(k), everything)}
        for ks in kss:
            found = groups(objects(ks))
            if not found:
                continue
            seen: set[tuple[str, str]] = set()
            todo = [(ks.namespace, ks.name)]
            while todo:
                key = todo.pop()
                if key in seen or key not in by_name:
                    continue
                seen.add(key)
                for dep in _list(_spec(by_name[key].obj).get("dependsOn")):
                    if isinstance(dep, dict):
                        todo.append((str(dep.get("namespace", key[0])), str(dep.get("name"))))
            if seen & installers:  # its own Flux Kustomization counts: Flux applies CRDs before the objects of them
                continue
            what = (f"it does not depend on {', '.join(n for _, n in sorted(installers))}, which installs the lws "
                    "chart: Flux may apply the group before the CRD exists" if installers else
                    f"no Flux Kustomization of {repo.relative(root, cluster)} installs the lws chart (HelmRelease) "
                    "or the lws release's manifests")
            out.append(CONTROLLER.finding(f"applies LeaderWorkerSet {object_id(found[0])} but {what}",
                                          path=repo.relative(root, ks.file), object=f"Kustomization/{ks.name}"))
    return out


def check(root: Path, targets: list[Any]) -> list[Finding]:
    """validate's hook: the groups of every rendered target and the Flux order of every cluster."""
    return check_groups(root, targets) + check_controller(root, targets)
