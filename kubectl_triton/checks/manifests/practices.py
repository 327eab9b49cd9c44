"""Best practices from the Triton deployment guides, checked on one overlay's rendered objects.

Pure: rendered objects and the assembled models' configurations in, findings out. Codes are stable and
documented in README ("validate" section)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kubectl_triton.checks.findings import ERROR, WARNING, Finding
from kubectl_triton.checks.registry import Severity, register
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops import workloads
from kubectl_triton.gitops.labels import TRITON_MODELS_ANNOTATION

WORKLOAD_KINDS = ("Deployment", "Job", "StatefulSet", "LeaderWorkerSet")
_DECLARED: dict[str, tuple[Severity, str, str]] = {
    "HPAOnCPU": ("warning", "an HPA scales a Triton Deployment on CPU or memory, which do not follow GPU load",
                 "scale on the model's queue-to-compute ratio (docs/monitoring.md)"),
    "ImageTagNotPinned": ("error", "a container image without a pinned tag or digest",
                          "pin the image to a release tag (24.12-py3) or a digest"),
    "ResourcesMissing": ("warning", "a container sets no CPU/memory requests", "set requests (and a memory limit)"),
    "GPULimitMissing": ("error", "the Triton container of a GPU model requests no nvidia.com/gpu",
                        "include the GPU Component of the overlay's GPU type"),
    "TRTLLMImage": ("error", "a tensorrtllm model served from an image without the TensorRT-LLM backend",
                    "serve it from a -trtllm-python-py3 image"),
    "StartupProbeMissing": ("warning", "no startupProbe: the liveness probe may kill Triton while it loads",
                            "add a startupProbe on /v2/health/ready with a budget above the load time"),
    "StartupProbeTooShort": ("warning", "the startupProbe budget is shorter than a TensorRT-LLM engine load",
                             "raise failureThreshold x periodSeconds"),
    "LivenessProbe": ("warning", "the liveness probe is not an HTTP GET on /v2/health/live",
                      "probe /v2/health/live on the http port"),
    "ReadinessProbe": ("warning", "the readiness probe is not an HTTP GET on /v2/health/ready",
                       "probe /v2/health/ready on the http port"),
    "ProgressDeadline": ("error", "progressDeadlineSeconds does not fit the Flux timeout and the startup budget",
                         "keep startup budget < progressDeadlineSeconds < the Flux Kustomization's timeout"),
    "ModelsAnnotation": ("error", "the triton-models annotation does not list the models the overlay serves",
                         "list the served Triton models in triton.kubectl.io/triton-models"),
    "SharedMemory": ("warning", "/dev/shm is the 64 MiB default or too small for the python backend",
                     "mount a memory-backed emptyDir at /dev/shm with a sizeLimit"),
}
CHECKS = {code: register(code, sev, "overlay", desc, fix) for code, (sev, desc, fix) in _DECLARED.items()}


TRITON_CONTAINER = "tritonserver"
GPU_RESOURCE = "nvidia.com/gpu"
LLM_STARTUP_BUDGET_S = 600  # TensorRT-LLM engines take minutes to deserialize and allocate the KV cache
TP_SHM_MIN_BYTES = 1 << 30
_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9}


@dataclass(frozen=True)
class ModelFacts:
    """What the practices need to know about the models an overlay serves."""

    uses_gpu: bool
    tensorrtllm: bool
    models: tuple[str, ...] | None = None  # names in the assembled repository; None when unknown


def model_facts(configs: Mapping[str, Any]) -> ModelFacts:
    """From parsed ModelConfig messages: does any model want a GPU, is any a TensorRT-LLM model."""
    gpu_kinds = {1, 0}  # KIND_GPU = 1, KIND_AUTO = 0
    uses_gpu = tensorrtllm = False
    for config in configs.values():
        if config.backend == "tensorrtllm":
            tensorrtllm = uses_gpu = True
        elif config.platform != "ensemble" and config.backend != "python":
            groups = list(config.instance_group)
            uses_gpu |= not groups or any(g.kind in gpu_kinds for g in groups)
    return ModelFacts(uses_gpu, tensorrtllm, tuple(sorted(configs)))


def parse_quantity(value: Any) -> float | None:
    """Kubernetes quantity -> number (bytes for memory)."""
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value))
    if not m or (m[2] and m[2] not in _UNITS):
        return None
    return float(m[1]) * _UNITS.get(m[2], 1)


def _f(severity: Severity, code: str, message: str, source: str, obj: dict) -> Finding:
    return CHECKS[code].finding(message, path=source, object=object_id(obj), severity=severity)


def _probe_budget(probe: dict | None) -> int:
    if not probe:
        return 0
    try:
        return int(probe.get("periodSeconds", 10)) * int(probe.get("failureThreshold", 3)) + \
            int(probe.get("initialDelaySeconds", 0))
    except (TypeError, ValueError):
        return 0


def _http_path(probe: dict | None) -> str | None:
    return ((probe or {}).get("httpGet") or {}).get("path")


def check_image(image: str) -> str | None:
    """Why an image reference is not pinned, or None when it is."""
    if "@sha256:" in image:
        return None
    name = image.rsplit("/", 1)[-1]
    if ":" not in name:
        return f"image {image} has no tag (it means :latest)"
    if name.rsplit(":", 1)[1] == "latest":
        return f"image {image} uses the moving tag :latest"
    return None


def check_overlay(source: str, objects: Iterable[dict], facts: ModelFacts,
                  flux_timeout_s: int | None = None) -> list[Finding]:
    """Every practice finding for one rendered overlay (`source` is its path, for the findings)."""
    objects = list(objects)
    out: list[Finding] = []
    hpas = [o for o in objects if o.get("kind") == "HorizontalPodAutoscaler"]
    for obj in objects:
        if obj.get("kind") in WORKLOAD_KINDS:
            out += _check_workload(source, obj, facts, flux_timeout_s)
    for hpa in hpas:
        for metric in (hpa.get("spec") or {}).get("metrics") or []:
            if metric.get("type") == "Resource" and (metric.get("resource") or {}).get("name") in ("cpu", "memory"):
                out.append(_f(WARNING, "HPAOnCPU", "HPA scales on "
                              f"{metric['resource']['name']}: a GPU-bound Triton's CPU says nothing about its "
                              "load; scale on its queue-to-compute ratio (triton_queue_compute_ratio, "
                              "served by prometheus-adapter)",
                              source, hpa))
    return out


def _check_workload(source: str, obj: dict, facts: ModelFacts, flux_timeout_s: int | None) -> list[Finding]:
    """Images and resources of every pod template; of a workload serving Triton (a Deployment, StatefulSet or
    LeaderWorkerSet group: leader and workers alike) the server container's GPUs, image and /dev/shm; the probes,
    annotation and progress deadline of the pod that serves (a group's leader)."""
    out: list[Finding] = []
    serving = workloads.serving_template(obj)
    for template in workloads.templates(obj):
        pod, who = template.spec, f"{template.role} " if template.role else ""
        for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
            if not isinstance(container, dict):
                continue
            if reason := check_image(str(container.get("image", ""))):
                out.append(_f(ERROR, "ImageTagNotPinned", f"{who}container {container.get('name')}: {reason}; pin "
                              "a release tag such as 24.12-py3 so every rollout runs what was validated", source, obj))
            resources = container.get("resources") or {}
            missing = [f"{kind}.{res}" for kind in ("requests", "limits") for res in ("cpu", "memory")
                       if res not in (resources.get(kind) or {})]
            if missing:
                out.append(_f(WARNING, "ResourcesMissing", f"{who}container {container.get('name')} sets no "
                              f"{', '.join(missing)}", source, obj))
        server = workloads.server_container(pod)
        if serving is None or server is None:
            continue
        out += _check_server(source, obj, template, server, facts)
        if template == serving:
            out += _check_serving_pod(source, obj, server, facts, flux_timeout_s)
    return out


def _check_server(source: str, obj: dict, template: workloads.PodTemplate, server: dict,
                  facts: ModelFacts) -> list[Finding]:
    """What every pod running tritonserver needs: its GPUs, the image with the models' backend, /dev/shm."""
    out: list[Finding] = []
    who = f"{template.role}: " if template.role else ""
    limits = (server.get("resources") or {}).get("limits") or {}
    gpus = int(parse_quantity(limits.get(GPU_RESOURCE, 0) or 0) or 0)
    if facts.uses_gpu and gpus < 1:
        out.append(_f(ERROR, "GPULimitMissing", f"{who}models need a GPU but container {TRITON_CONTAINER} has no "
                      f"{GPU_RESOURCE} limit; add a GPU Component (overlays/gpus/<type>)", source, obj))
    image = str(server.get("image", ""))
    if facts.tensorrtllm and "trtllm" not in image.rsplit(":", 1)[-1]:
        out.append(_f(ERROR, "TRTLLMImage", f"{who}a tensorrtllm model is served from {image}, which has no "
                      "TensorRT-LLM backend; use the -trtllm-python-py3 flavour of the same release", source, obj))
    return out + [replace(f, message=who + f.message) if who else f
                  for f in _check_shm(source, obj, template.spec, server, facts, gpus)]


def _check_serving_pod(source: str, obj: dict, server: dict, facts: ModelFacts,
                       flux_timeout_s: int | None) -> list[Finding]:
    """The probes of the pod that serves, the triton-models annotation and (Deployments) the progress deadline."""
    out: list[Finding] = []
    startup, liveness = server.get("startupProbe"), server.get("livenessProbe")
    budget = _probe_budget(startup)
    if not startup:
        out.append(_f(WARNING, "StartupProbeMissing", "no startupProbe: the liveness probe may kill Triton "
                      "while models are still loading; add one on /v2/health/ready", source, obj))
    elif facts.tensorrtllm and budget < LLM_STARTUP_BUDGET_S:
        out.append(_f(WARNING, "StartupProbeTooShort", f"startupProbe allows {budget}s; TensorRT-LLM engines "
                      f"often need more than {LLM_STARTUP_BUDGET_S}s to load (raise failureThreshold)",
                      source, obj))
    if _http_path(liveness) != "/v2/health/live":
        out.append(_f(WARNING, "LivenessProbe", "livenessProbe should be an HTTP GET on /v2/health/live "
                      f"(found {_http_path(liveness) or 'none'}): readiness failures must not restart Triton",
                      source, obj))
    if _http_path(server.get("readinessProbe")) != "/v2/health/ready":
        out.append(_f(WARNING, "ReadinessProbe", "readinessProbe should be an HTTP GET on /v2/health/ready",
                      source, obj))
    out += _check_models_annotation(source, obj, facts)
    if obj.get("kind") != "Deployment":  # StatefulSets and LeaderWorkerSets have no progress deadline
        return out
    raw = (obj.get("spec") or {}).get("progressDeadlineSeconds")
    deadline = raw if isinstance(raw, int) and not isinstance(raw, bool) else 600  # null: the API's default
    if flux_timeout_s is not None and deadline >= flux_timeout_s:
        out.append(_f(ERROR, "ProgressDeadline", f"progressDeadlineSeconds {deadline} is not below the Flux "
                      f"Kustomization timeout ({flux_timeout_s}s): Flux gives up before the Deployment reports "
                      "a failed rollout", source, obj))
    if startup and budget > deadline:
        out.append(_f(WARNING, "ProgressDeadline", f"startupProbe budget {budget}s exceeds "
                      f"progressDeadlineSeconds {deadline}: slow loads are reported as failed rollouts",
                      source, obj))
    return out


def _check_models_annotation(source: str, obj: dict, facts: ModelFacts) -> list[Finding]:
    """The annotation `status` probes must name exactly the models the overlay's repository holds."""
    if facts.models is None:
        return []
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if TRITON_MODELS_ANNOTATION not in annotations:
        return [_f(WARNING, "ModelsAnnotation", f"no {TRITON_MODELS_ANNOTATION} annotation: `kubectl triton "
                   f"status` can only probe Triton's readiness, not each model ({', '.join(facts.models)})",
                   source, obj)]
    listed = sorted({n.strip() for n in str(annotations[TRITON_MODELS_ANNOTATION]).split(",") if n.strip()})
    if listed != sorted(facts.models):
        return [_f(ERROR, "ModelsAnnotation", f"{TRITON_MODELS_ANNOTATION} lists {', '.join(listed) or 'nothing'} "
                   f"but the model repository holds {', '.join(facts.models)}", source, obj)]
    return []


def _check_shm(source: str, obj: dict, pod: dict, server: dict, facts: ModelFacts, gpus: int) -> list[Finding]:
    mounts, volumes = server.get("volumeMounts"), pod.get("volumes")
    mounts, volumes = (mounts if isinstance(mounts, list) else []), (volumes if isinstance(volumes, list) else [])
    mount = next((m for m in mounts if isinstance(m, dict) and m.get("mountPath") == "/dev/shm"), None)
    volume = next((v for v in volumes if isinstance(v, dict) and mount and v.get("name") == mount.get("name")),
                  None)
    empty_dir = (volume or {}).get("emptyDir")
    if empty_dir is None or empty_dir.get("medium") != "Memory":
        return [_f(WARNING, "SharedMemory", "/dev/shm is the runtime's 64 MiB default: mount a memory-backed "
                   "emptyDir there (python backend and tensor-parallel engines exchange tensors through it)",
                   source, obj)]
    size = parse_quantity(empty_dir.get("sizeLimit") or "0") or 0
    if facts.tensorrtllm and gpus > 1 and size and size < TP_SHM_MIN_BYTES:
        return [_f(WARNING, "SharedMemory", f"/dev/shm sizeLimit {empty_dir['sizeLimit']} is too small for "
                   f"tensor parallelism over {gpus} GPUs (NCCL needs at least 1Gi)", source, obj)]
    return []
