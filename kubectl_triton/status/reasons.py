"""The catalog of reason codes that come from API objects (log-signature codes live in
data/log_signatures.yaml). Each code has a fix; messages are filled in from the objects."""

from __future__ import annotations

from kubectl_triton.status.model import Reason

# code -> fix. Stable codes: scripts match on them; the README lists them.
FIXES: dict[str, str] = {
    "FluxNotReady": "Read the Kustomization's message (flux get kustomizations -A); fix the manifests in git "
                    "and merge, or `flux reconcile kustomization NAME --with-source` after fixing the source.",
    "FluxRevisionBehind": "The cluster still runs the last applied revision; fix what blocks the attempted one "
                          "(see FluxNotReady) or wait for Flux to finish applying it.",
    "FluxSuspended": "Changes merged in git are not applied while suspended: `flux resume kustomization NAME`.",
    "ProgressDeadlineExceeded": "The new ReplicaSet never became available; fix the pod-level reason listed "
                                "here, then merge the fix (or revert the change in git).",
    "RolloutInProgress": "Nothing to change yet: the rollout is progressing (`status --wait` follows it).",
    "CrashLoopBackOff": "Read the log lines quoted here (kubectl logs --previous POD -c CONTAINER) and fix the "
                        "model or server arguments in git.",
    "ImagePullBackOff": "Check the image name and tag in the overlay and that the node can pull it "
                        "(imagePullSecrets for nvcr.io need an NGC API key).",
    "InsufficientGPU": "No node has a free nvidia.com/gpu: lower replicas or GPUs per pod, free GPUs, or add GPU "
                       "nodes (check the cluster autoscaler's node group for this GPU type).",
    "GPUTypeUnavailable": "No node of the GPU type the overlay selects: add a node pool of that type (its "
                          "nodes labelled nvidia.com/gpu.product by GPU feature discovery), or deploy the model's "
                          "overlay for a GPU type the cluster has (`kubectl triton gpus` lists them).",
    "NoMatchingNode": "No node matches the pod's nodeSelector/affinity or tolerates its taints: fix the "
                      "selector or tolerations in the overlay, or label/taint the GPU nodes accordingly.",
    "Unschedulable": "Read the scheduler's message; free the named resource or relax the pod's constraints.",
    "OOMKilled": "The container exceeded its memory limit: raise resources.limits.memory in the overlay (model "
                 "weights load through host memory), or lower what the model loads.",
    "CreateContainerConfigError": "A Secret or ConfigMap the container references is missing or lacks a key: "
                                  "create it (sealed/external secret in git) or fix the reference.",
    "StartupProbeFailing": "Triton did not become ready within the startup budget: raise the startupProbe's "
                           "failureThreshold x periodSeconds in the overlay for this model's load time.",
    "TritonNotReady": "Triton answers but is not ready (models still loading or failed): see the model "
                      "reasons here and the container log.",
    "ModelNotReady": "Fix the model Triton reports as not ready (its config or files in the repository), "
                     "then merge; `kubectl triton check-models` loads it locally.",
    "HPAMetricUnavailable": "The HPA cannot read its custom metric (triton_queue_compute_ratio): check that "
                            "prometheus-adapter serves it and that Prometheus scrapes Triton's metrics port (the "
                            "ServiceMonitor needs the label its Prometheus selects: `kubectl triton validate`).",
    "HPAUnableToScale": "The HPA cannot act on the Deployment (read or update its scale, or its selector): check "
                        "scaleTargetRef names the Deployment and the HPA controller's rights; replicas stay as they "
                        "are meanwhile.",
    "QuotaExceeded": "A ResourceQuota in the namespace refuses the pods (the message names it): raise the quota, "
                     "free what other workloads use, or lower replicas/requests in the overlay. Waiting does not "
                     "help until one of these changes.",
    "ReplicaFailure": "The ReplicaSet cannot create pods (admission, PodSecurity, LimitRange: the message says "
                      "which); fix the pod template in the overlay or the namespace policy.",
    "RolloutPaused": "The Deployment is paused, so changes merged in git do not roll out: remove spec.paused from "
                     "the overlay (or `kubectl rollout resume` if someone paused it by hand; Flux reverts it).",
    "UnexpectedAdmissionError": "The kubelet refused the pod at admission (usually the NVIDIA device plugin could "
                                "not allocate the GPU): check the device plugin pod on that node (`kubectl -n "
                                "gpu-operator logs`), cordon the node if its GPUs are unhealthy; delete the failed "
                                "pods once fixed.",
    "PodEvicted": "History: an evicted pod the ReplicaSet already replaced. Delete it when convenient; if "
                  "evictions recur, raise memory/ephemeral-storage requests so the node is not under pressure.",
    "LivenessProbeKilled": "Triton was killed by its liveness probe (exit 137) before it finished loading: add a "
                           "startupProbe on /v2/health/ready whose failureThreshold x periodSeconds covers the "
                           "model's load time, or raise the liveness probe's initialDelaySeconds in the overlay.",
    "JobDeadlineExceeded": "The engine build ran past activeDeadlineSeconds: raise it in the engine-build overlay "
                           "(keep it below the Flux Kustomization's timeout, so Flux reports the Job's failure) "
                           "or build a smaller engine; recreate the Job by reconciling.",
    "JobFailed": "The engine-build Job failed: read the pod's log (`kubectl logs job/NAME`) and fix the build "
                 "options in models/MODEL/model.yaml; Flux recreates the Job (force: true).",
    "JobSuspended": "The Job is suspended (spec.suspend): unsuspend it in the overlay to build the engine.",
    "EngineBuildRunning": "Nothing to change yet: the engine build is running (`status --wait` follows it).",
    "DeploymentNotFound": "No Deployment or LeaderWorkerSet labelled app.kubernetes.io/instance=MODEL and "
                          "app.kubernetes.io/name=triton-inference-server in scope: check -n/-A and the model name, "
                          "or whether Flux applied the overlay yet.",
    "LeaderWaitingForWorkers": "Nothing to change yet: the group's workers are starting; the leader waits for "
                               "their SSH port at most WORKER_WAIT_SECONDS (600 s), then exits and the group is "
                               "recreated (`status --wait` follows it).",
    "GroupRecreated": "A pod of the group keeps failing and the lws controller recreates the whole group each time "
                      "(RecreateGroupOnPodRestart), so the failed pod and its log are gone (`kubectl logs "
                      "--previous` has nothing): follow the new group's leader and the worker the event names as "
                      "they start (`kubectl logs -f POD`), fix the cause in git; `kubectl triton validate` checks "
                      "world size, node shape and /dev/shm of multi-node groups.",
    "RolloutPartitioned": "Deliberate: rollingUpdateConfiguration.partition keeps the groups below it on the "
                          "previous revision (a canary of whole groups). Set partition to 0 in git to finish the "
                          "rollout.",
}


# Fixes for a code in a situation that needs a different advice than the code's usual one.
SITUATION_FIXES: dict[str, str] = {
    "lws-create-failed": "The lws controller cannot create the group's StatefulSets, Service or pods (admission, "
                         "PodSecurity, LimitRange, a webhook: the message says which); fix the LeaderWorkerSet's "
                         "templates in the overlay or the namespace policy.",
    "group-recovered": "History: the group was recreated after one of its pods failed and is ready again. If it "
                       "recurs, follow the pod the event names as it runs (`kubectl logs -f POD`): the failed "
                       "instance's log went with the recreated group.",
    "group-restarting": "Nothing to change yet: the lws controller recreated the group after one of its pods "
                        "failed (RecreateGroupOnPodRestart) and the new group is starting; if it happens again, the "
                        "failing pod's cause is in its log while it runs (`kubectl logs -f POD`).",
    "pull-transient": "The registry limits or fails pulls for now (a rate limit, an outage, a network failure) and "
                      "the kubelet retries: authenticate pulls (an imagePullSecret raises Docker Hub's and NGC's "
                      "limits), or mirror the image to a registry near the cluster and point the overlay's images "
                      "at it.",
    "flux-reconciling": "Nothing to change yet: Flux is applying the revision (`status --wait` follows it); if it "
                        "stays so for long, `flux events --for Kustomization/NAME` shows what it waits for.",
}


def reason(code: str, message: str, severity: str, *, terminal: bool = False, situation: str | None = None) -> Reason:
    """A Reason for a catalog code (with the fix for `situation` when given)."""
    return Reason(code, message, SITUATION_FIXES[situation] if situation else FIXES[code], severity, terminal)
