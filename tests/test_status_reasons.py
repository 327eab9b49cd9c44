"""`kubectl triton status`: one scenario per reason code, each built from objects shaped like a real
cluster's and served by the local API server (tests/apiserver.py) to the real `kubernetes` client."""

from __future__ import annotations

import json
import re

import pytest

from tests.apiserver import (
    NAMESPACE,
    REVISION,
    api,  # noqa: F401 - fixture
    crashed,
    deployment,
    event,
    healthy_model,
    hpa,
    kustomization,
    pod,
    ts,
)

MODEL = "llama3-8b"


def status(run_cli, api, *args: str) -> tuple[int, dict]:  # noqa: F811
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "-o", "json", *args)
    assert "Traceback" not in res.stderr
    return res.exit_code, json.loads(res.stdout)


def only(doc: dict) -> dict:
    assert len(doc["models"]) == 1, doc
    return doc["models"][0]


def codes(model: dict) -> list[str]:
    return [r["code"] for r in model["reasons"]]


def crash_loop(api, log: str, *, model: str = MODEL, reason: str = "Error", exit_code: int = 1,  # noqa: F811
               restarts: int = 2) -> dict:
    """A rollout whose new pod crash-loops and whose previous container wrote `log`."""
    c = crashed(reason, exit_code, restarts)
    p = pod(model, ready=False, started=False, state=c["state"], last_state=c["last_state"], restarts=restarts)
    api.cluster.apply(deployment(model, ready=0, progressing=("True", "ReplicaSetUpdated")), p, hpa(model),
                      kustomization("apps-prod", [(NAMESPACE, model)]))
    api.cluster.logs[(NAMESPACE, p["metadata"]["name"], "tritonserver", True)] = log
    return p


TRITON_PREFIX = "I1202 11:13:01.104118 1 model_lifecycle.cc:472] \"loading: llama3-8b:1\"\n"

LOG_SCENARIOS = {
    "EngineGPUMismatch": (
        "[TensorRT-LLM][ERROR] 6: The engine plan file is generated on an incompatible device, expecting "
        "compute 9.0 got compute 8.0, please rebuild.\n"
        "E1202 11:13:06.647394 1 model_lifecycle.cc:642] \"failed to load 'llama3-8b' version 1: Internal: "
        "unexpected error when creating modelInstanceState: [TensorRT-LLM][ERROR] Assertion failed: Failed to "
        "deserialize cuda engine. (/workspace/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmRuntime.cpp:175)\"\n"),
    "EngineVersionMismatch": (
        "[TensorRT-LLM][ERROR] 1: [stdArchiveReader.cpp::StdArchiveReader::42] Error Code 1: Serialization "
        "(Serialization assertion stdVersionRead == kSERIALIZATION_VERSION failed.Version tag does not match. "
        "Note: Current Version: 238, Serialized Engine Version: 236)\n"),
    "GPUOutOfMemory": (
        "RuntimeError: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, "
        "mCudaStream->get()): out of memory (/workspace/tensorrt_llm/cpp/tensorrt_llm/runtime/"
        "tllmBuffers.h:117)\n"),
    "SharedMemoryTooSmall": (
        "E1202 11:13:04.201020 1 pb_stub.cc:402] Failed to increase the shared memory pool size for key "
        "'triton_python_backend_shm_region_4' from 67108864 to 134217728 bytes. If you are running Triton "
        "inside docker, use '--shm-size' flag to control the shared memory region size. Error: No space left "
        "on device\n"),
    "WorldSizeMismatch": (
        "[TensorRT-LLM][ERROR] Assertion failed: mpiSize == tp * pp (/workspace/tensorrt_llm/cpp/tensorrt_llm/"
        "runtime/worldConfig.cpp:99)\n"),
    # tensorrtllm_backend#62 (https://github.com/triton-inference-server/tensorrtllm_backend/issues/62), verbatim:
    # the python stub's own lines are INFO, Triton's "Failed to create instance" is the only error line
    "TokenizerLoadFailed": (
        "I1030 09:08:32.939433 1398 pb_stub.cc:325] Failed to initialize Python stub: ValueError: Tokenizer class "
        "BaichuanTokenizer does not exist or is not currently imported.\n\nAt:\n"
        "  /usr/local/lib/python3.10/dist-packages/transformers/models/auto/tokenization_auto.py(748): "
        "from_pretrained\n"
        "  /tensorrtllm_backend/tensorrtllm_backend/triton_model_repo/preprocessing/1/model.py(69): initialize\n\n"
        "E1030 09:08:33.484284 1399 backend_model.cc:634] ERROR: Failed to create instance: ValueError: Tokenizer "
        "class BaichuanTokenizer does not exist or is not currently imported.\n"),
    "ModelLoadFailed": (
        "E1202 11:13:06.647394 1 model_lifecycle.cc:642] \"failed to load 'llama3-8b' version 1: Invalid "
        "argument: unable to find 'tokenizer.json' in /models/llama3-8b/1\"\n"
        "I1202 11:13:06.647436 1 model_lifecycle.cc:777] \"failed to load 'llama3-8b'\"\n"
        "error: creating server: Internal - failed to load all models\n"),
}


@pytest.mark.parametrize("code", sorted(LOG_SCENARIOS))
def test_log_signature_names_cause_and_quotes_line(run_cli, api, code):  # noqa: F811
    crash_loop(api, TRITON_PREFIX + LOG_SCENARIOS[code])
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and doc["healthy"] is False
    assert m["phase"] == "Failed"
    assert codes(m)[0] == code, m  # the specific cause first, the crash loop after it
    assert "CrashLoopBackOff" in codes(m)
    first = m["reasons"][0]
    assert first["fix"]
    # the log line is quoted, without Triton's glog prefix
    assert '"' in first["message"] and "model_lifecycle.cc" not in first["message"]
    assert api.cluster.count("log") == 1


def test_gpu_mismatch_quotes_the_compute_capabilities(run_cli, api):  # noqa: F811
    crash_loop(api, LOG_SCENARIOS["EngineGPUMismatch"])
    _, doc = status(run_cli, api)
    assert "expecting compute 9.0 got compute 8.0" in only(doc)["reasons"][0]["message"]


def test_model_load_failed_quotes_tritons_line(run_cli, api):  # noqa: F811
    crash_loop(api, LOG_SCENARIOS["ModelLoadFailed"])
    _, doc = status(run_cli, api)
    msg = only(doc)["reasons"][0]["message"]
    assert "failed to load 'llama3-8b' version 1: Invalid argument: unable to find 'tokenizer.json'" in msg


def test_tokenizer_load_failure_is_named_with_the_tokenizer_and_its_fix(run_cli, api):  # noqa: F811
    """Issue 24: a python model whose initialize() fails on its tokenizer was only a CrashLoopBackOff."""
    crash_loop(api, TRITON_PREFIX + LOG_SCENARIOS["TokenizerLoadFailed"])
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and m["phase"] == "Failed" and codes(m) == ["TokenizerLoadFailed", "CrashLoopBackOff"]
    first = m["reasons"][0]
    assert "Tokenizer class BaichuanTokenizer does not exist" in first["message"]
    assert "previous instance of container tritonserver" in first["message"]
    for advice in ("tokenizer_dir", "trust_remote_code=True", "HF_HOME"):
        assert advice in first["fix"]


def test_tokenizer_path_error_names_the_path(run_cli, api):  # noqa: F811
    """triton-inference-server/server#8080, verbatim: Triton 25.x puts the traceback on the failed-load line; the
    generic ModelLoadFailed gives way to the tokenizer's cause."""
    log = ("E0321 04:54:24.240032 1 model_lifecycle.cc:654] \"failed to load 'text_preprocessor' version 1: "
           "Internal: OSError: Incorrect path_or_model_id: './custom_string_tokenizer'. Please provide either the "
           "path to a local folder or the repo_id of a model on the Hub.\\n\\nAt:\\n  /usr/local/lib/python3.12/"
           "dist-packages/transformers/utils/hub.py(408): cached_file\\n  /usr/local/lib/python3.12/dist-packages/"
           "transformers/models/auto/tokenization_auto.py(713): get_tokenizer_config\\n  /usr/local/lib/python3.12/"
           "dist-packages/transformers/models/auto/tokenization_auto.py(881): from_pretrained\\n  /models/"
           "text_preprocessor/1/model.py(7): initialize\\n\"\n"
           "I0321 04:54:24.240066 1 model_lifecycle.cc:789] \"failed to load 'text_preprocessor'\"\n")
    crash_loop(api, log)
    _, doc = status(run_cli, api)
    m = only(doc)
    assert codes(m) == ["TokenizerLoadFailed", "CrashLoopBackOff"]
    assert "Incorrect path_or_model_id: './custom_string_tokenizer'" in m["reasons"][0]["message"]
    assert "\\n" not in m["reasons"][0]["message"]  # the escaped traceback is not quoted


def test_crash_loop_without_known_signature(run_cli, api):  # noqa: F811
    crash_loop(api, "Segmentation fault (core dumped)\n", exit_code=139)
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and m["phase"] == "Failed" and codes(m) == ["CrashLoopBackOff"]
    assert "last exit code 139" in m["reasons"][0]["message"]


def test_oom_killed(run_cli, api):  # noqa: F811
    p = crash_loop(api, "I1202 loading weights\n", reason="OOMKilled", exit_code=137)
    del p
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and codes(m)[0] == "OOMKilled" and "memory limit" in m["reasons"][0]["message"]


def _waiting_pod(api, reason: str, message: str) -> None:  # noqa: F811
    state = {"waiting": {"reason": reason, "message": message}}
    api.cluster.apply(deployment(MODEL, ready=0, progressing=("True", "ReplicaSetUpdated")),
                      pod(MODEL, ready=False, started=False, state=state), hpa(MODEL))


def test_image_pull_back_off(run_cli, api):  # noqa: F811
    _waiting_pod(api, "ImagePullBackOff", 'Back-off pulling image "nvcr.io/nvidia/tritonserver:24.13-py3"')
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and m["phase"] == "Failed" and codes(m) == ["ImagePullBackOff"]
    assert "tritonserver:24.13-py3" in m["reasons"][0]["message"]
    assert api.cluster.count("log") == 0  # nothing to read from a container that never ran


def test_create_container_config_error(run_cli, api):  # noqa: F811
    _waiting_pod(api, "CreateContainerConfigError", 'secret "ngc-api-key" not found')
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and codes(m) == ["CreateContainerConfigError"]
    assert 'secret "ngc-api-key" not found' in m["reasons"][0]["message"]


def _pending(api, message: str, since_s: float) -> dict:  # noqa: F811
    p = pod(MODEL, phase="Pending", ready=False, scheduled=("False", "Unschedulable", message))
    p["status"]["conditions"][0]["lastTransitionTime"] = ts(-since_s)
    api.cluster.apply(deployment(MODEL, ready=0, progressing=("True", "ReplicaSetUpdated")), p, hpa(MODEL),
                      event(p, "FailedScheduling", message, source="default-scheduler"))
    return p


GPU_MSG = ("0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node "
           "affinity/selector. preemption: 0/4 nodes are available: 1 No preemption victims found for incoming "
           "pod, 3 Preemption is not helpful for scheduling.")
TAINT_MSG = ("0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: present}. preemption: "
             "0/3 nodes are available: 3 Preemption is not helpful for scheduling.")


def test_insufficient_gpu_fails_after_grace(run_cli, api):  # noqa: F811
    _pending(api, GPU_MSG, since_s=300)
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and m["phase"] == "Failed" and codes(m) == ["InsufficientGPU"]
    assert "Insufficient nvidia.com/gpu" in m["reasons"][0]["message"]


def test_insufficient_gpu_is_progressing_within_grace(run_cli, api):  # noqa: F811
    _pending(api, GPU_MSG, since_s=5)
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and m["phase"] == "Progressing" and codes(m) == ["InsufficientGPU"]


def test_insufficient_gpu_waits_while_autoscaler_adds_a_node(run_cli, api):  # noqa: F811
    p = _pending(api, GPU_MSG, since_s=300)
    api.cluster.apply(event(p, "TriggeredScaleUp", "pod triggered scale-up: [{gpu-a100 1->2 (max: 4)}]",
                            type_="Normal", source="cluster-autoscaler"))
    _, doc = status(run_cli, api)
    assert only(doc)["phase"] == "Progressing"


SCALE_UP_MSG = ("pod triggered scale-up, group: https://content.googleapis.com/compute/v1/projects/maciekpytel-dev-"
                "playground/zones/us-central1-b/instanceGroups/e2e-test-maciekpytel-minion-group, sizes "
                "(current/new): 3/4")  # cluster-autoscaler FAQ.md's example TriggeredScaleUp event


def test_insufficient_gpu_fails_once_a_scale_up_outlasts_the_progress_deadline(run_cli, api):  # noqa: F811
    """Issue 24: the autoscaler's TriggeredScaleUp kept an unschedulable pod Progressing forever. The rollout waits
    for the node as long as the Deployment's progressDeadlineSeconds (600 s here), then the pod is Failed."""
    p = _pending(api, GPU_MSG, since_s=1500)
    api.cluster.apply(event(p, "TriggeredScaleUp", SCALE_UP_MSG, type_="Normal", source="cluster-autoscaler",
                            age_s=1440))
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and m["phase"] == "Failed" and codes(m) == ["InsufficientGPU"]
    msg = m["reasons"][0]["message"]
    waited = re.search(r"unschedulable for (\d+)s, longer than the Deployment's progressDeadlineSeconds \(600s\)", msg)
    assert waited and 1500 <= int(waited.group(1)) < 1560, msg  # the seconds since, read a moment later
    assert "sizes (current/new): 3/4" in msg and "Insufficient nvidia.com/gpu" in msg


def test_insufficient_gpu_after_the_autoscaler_gave_up(run_cli, api):  # noqa: F811
    """A later NotTriggerScaleUp (kubernetes/autoscaler#5692's words) overrides the earlier scale-up: the grace
    applies again, and the autoscaler's reason is quoted."""
    p = _pending(api, GPU_MSG, since_s=300)
    api.cluster.apply(event(p, "TriggeredScaleUp", SCALE_UP_MSG, type_="Normal", source="cluster-autoscaler",
                            age_s=280),
                      event(p, "NotTriggerScaleUp", "pod didn't trigger scale-up: 12 node(s) didn't match Pod's node "
                            "affinity/selector, 3 max node group size reached", type_="Normal",
                            source="cluster-autoscaler", age_s=20))
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and m["phase"] == "Failed" and codes(m) == ["InsufficientGPU"]
    assert "(cluster autoscaler: pod didn't trigger scale-up" in m["reasons"][0]["message"]


def test_unschedulable_without_any_timestamp_is_failed(run_cli, api):  # noqa: F811
    """kstatus' podUnschedulable: neither lastTransitionTime nor creationTimestamp. Its wait was read as 0 s, so
    it stayed Progressing forever; kstatus calls it Failed."""
    p = pod(MODEL, phase="Pending", ready=False, scheduled=("False", "Unschedulable", ""))
    p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    del p["metadata"]["creationTimestamp"]
    api.cluster.apply(deployment(MODEL, ready=0, progressing=("True", "ReplicaSetUpdated")), p)
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and m["phase"] == "Failed" and codes(m) == ["Unschedulable"]
    assert "PodScheduled=False (Unschedulable) without a message" in m["reasons"][0]["message"]


def test_unschedulable_dated_by_creation_without_transition_time(run_cli, api):  # noqa: F811
    p = pod(MODEL, phase="Pending", ready=False, scheduled=("False", "Unschedulable", GPU_MSG))
    del p["status"]["conditions"][0]["lastTransitionTime"]
    p["metadata"]["creationTimestamp"] = ts(-3)
    api.cluster.apply(deployment(MODEL, ready=0, progressing=("True", "ReplicaSetUpdated")), p)
    _, doc = status(run_cli, api)
    assert only(doc)["phase"] == "Progressing"
    p["metadata"]["creationTimestamp"] = ts(-300)
    api.cluster.apply(p)
    _, doc = status(run_cli, api)
    message = only(doc)["reasons"][0]["message"]
    waited = int(re.search(r"unschedulable for (\d+)s", message).group(1))  # a slow machine adds a second or two
    assert only(doc)["phase"] == "Failed" and 300 <= waited < 330, message


def test_no_matching_node(run_cli, api):  # noqa: F811
    _pending(api, TAINT_MSG, since_s=300)
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and codes(m) == ["NoMatchingNode"] and "untolerated taint" in m["reasons"][0]["message"]


def test_startup_probe_failing(run_cli, api):  # noqa: F811
    p = pod(MODEL, ready=False, started=False, restarts=1)
    msg = ('Startup probe failed: Get "http://10.244.1.7:8000/v2/health/ready": dial tcp 10.244.1.7:8000: '
           "connect: connection refused")
    api.cluster.apply(deployment(MODEL, ready=0, progressing=("True", "ReplicaSetUpdated")), p, hpa(MODEL),
                      event(p, "Unhealthy", msg, count=30),
                      event(p, "Killing", "Container tritonserver failed startup probe, will be restarted",
                            type_="Normal"))
    api.cluster.logs[(NAMESPACE, p["metadata"]["name"], "tritonserver", False)] = TRITON_PREFIX
    rc, doc = status(run_cli, api, "--no-probe")
    m = only(doc)
    assert rc == 1 and m["phase"] == "Failed" and codes(m) == ["StartupProbeFailing"]
    assert "30 failures" in m["reasons"][0]["message"]


def test_progress_deadline_exceeded(run_cli, api):  # noqa: F811
    api.cluster.apply(deployment(MODEL, ready=0, updated=1, progressing=("False", "ProgressDeadlineExceeded")),
                      pod(MODEL, ready=False, started=False, state={"waiting": {"reason": "PodInitializing"}}))
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and m["phase"] == "Failed" and codes(m) == ["ProgressDeadlineExceeded"]
    assert "600s" in m["reasons"][0]["message"]


def _complete(progress_deadline: int | None, conditions: list[dict] | None) -> dict:
    """A Deployment whose rollout is complete by the counts, with the given deadline and conditions."""
    d = deployment(MODEL)
    if progress_deadline is None:
        del d["spec"]["progressDeadlineSeconds"]
    else:
        d["spec"]["progressDeadlineSeconds"] = progress_deadline
    if conditions is None:
        del d["status"]["conditions"]
    else:
        d["status"]["conditions"] = conditions
    return d


AVAILABLE = {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
             "message": "Deployment has minimum availability."}


@pytest.mark.parametrize("deadline, conditions", [
    (2147483647, [AVAILABLE]),  # MaxInt32: no deadline; the controller removes the Progressing condition
    (600, [AVAILABLE]),  # a status without the Progressing condition
    (None, None),  # hand-written: no deadline, no conditions at all
    (2147483647, [AVAILABLE, {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]),
], ids=["maxint32-deadline", "no-progressing-condition", "no-deadline-no-conditions", "maxint32-stale-condition"])
def test_complete_rollout_without_a_progress_deadline_is_healthy(run_cli, api, deadline, conditions):  # noqa: F811
    """Issue 24: kstatus needs the Progressing condition only where the controller keeps one (a finite deadline);
    a status without one (or without Available) is judged by its counts, as Argo CD and kubectl rollout do."""
    api.cluster.apply(_complete(deadline, conditions), pod(MODEL))
    rc, doc = status(run_cli, api, "--no-probe")
    m = only(doc)
    assert rc == 0 and m["phase"] == "Healthy" and codes(m) == [], m


@pytest.mark.parametrize("conditions, why", [
    ([AVAILABLE, {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}], "ReplicaSetUpdated"),
    ([{**AVAILABLE, "status": "False"}, {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}],
     "not Available yet"),
])
def test_conditions_the_controller_wrote_still_hold_a_rollout(run_cli, api, conditions, why):  # noqa: F811
    """With a deadline, a Progressing condition that is not NewReplicaSetAvailable, or Available=False, keeps the
    rollout InProgress though the counts are complete (kstatus' depNotProgressing / depNotAvailable)."""
    api.cluster.apply(_complete(600, conditions), pod(MODEL))
    rc, doc = status(run_cli, api, "--no-probe")
    m = only(doc)
    assert rc == 1 and m["phase"] == "Progressing" and codes(m) == ["RolloutInProgress"]
    assert why in m["reasons"][0]["message"]


def test_rollout_in_progress(run_cli, api):  # noqa: F811
    api.cluster.apply(deployment(MODEL, ready=0, updated=0, generation=3),
                      pod(MODEL, phase="Pending", ready=False), hpa(MODEL))
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 1 and m["phase"] == "Progressing" and codes(m) == ["RolloutInProgress"]
    assert m["ready"] == "0/1"


def test_flux_not_ready(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    bad = "main@sha1:9b8a7d6e5f4a3b2c1d0e4f2a9c1e0b7d5a3f2e1c"
    api.cluster.apply(kustomization("apps-prod", [(NAMESPACE, MODEL)], attempted=bad, ready=(
        "False", "BuildFailed", "kustomize build failed: accumulating resources: accumulation err='accumulating "
        "resources from '../../base/triton': evalsymlink failure'")))
    rc, doc = status(run_cli, api, "--no-probe")
    m = only(doc)
    assert rc == 1 and m["phase"] == "Failed"
    assert codes(m) == ["FluxNotReady", "FluxRevisionBehind"]
    assert "BuildFailed" in m["reasons"][0]["message"]
    assert "main@sha1:9b8a7d6" in m["reasons"][1]["message"]
    assert m["revision"] == REVISION  # what the cluster runs


def test_flux_revision_behind_while_reconciling(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    api.cluster.apply(kustomization("apps-prod", [(NAMESPACE, MODEL)], attempted="main@sha1:" + "a" * 40,
                                    ready=("Unknown", "Progressing", "Reconciliation in progress")))
    rc, doc = status(run_cli, api, "--no-probe")
    m = only(doc)
    assert m["phase"] == "Progressing" and "FluxRevisionBehind" in codes(m)


def test_flux_suspended_is_a_warning(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    api.cluster.apply(kustomization("apps-prod", [(NAMESPACE, MODEL)], suspend=True))
    rc, doc = status(run_cli, api, "--no-probe")
    m = only(doc)
    assert rc == 0 and m["phase"] == "Healthy" and codes(m) == ["FluxSuspended"]


def test_hpa_metric_unavailable_is_a_warning(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    api.cluster.apply(hpa(MODEL, metric_ok=False))
    rc, doc = status(run_cli, api, "--no-probe")
    m = only(doc)
    assert rc == 0 and doc["healthy"] is True and codes(m) == ["HPAMetricUnavailable"]
    assert "avg_time_queue_us" in m["reasons"][0]["message"]


def test_triton_unreachable_through_proxy_is_a_note_not_a_verdict(run_cli, api):  # noqa: F811
    """A NetworkPolicy or CNI that keeps the API server from port 8000: the ready pod is Healthy, and one note
    says what the probe would add and why it was skipped (issue 17: it used to be Unknown, exit 1)."""
    healthy_model(api.cluster, MODEL)  # no proxy target: the API server cannot reach the pod
    rc, doc = status(run_cli, api)
    m = only(doc)
    assert rc == 0 and m["phase"] == "Healthy" and codes(m) == []
    assert len(doc["notes"]) == 1 and "connection refused" in doc["notes"][0]
    assert "NetworkPolicy" in doc["notes"][0]


def test_healthy_without_probe(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    api.cluster.apply(kustomization("apps-prod", [(NAMESPACE, MODEL)]))
    rc, doc = status(run_cli, api, "--no-probe")
    assert rc == 0 and doc == {"healthy": True, "models": [{
        "model": MODEL, "namespace": NAMESPACE, "phase": "Healthy", "ready": "1/1", "revision": REVISION,
        "reasons": []}]}
    assert api.cluster.count("proxy") == 0


def test_unknown_model_is_unknown(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, MODEL)
    rc, doc = status(run_cli, api, "--no-probe", "mistral-7b")
    m = only(doc)
    assert rc == 1 and m["model"] == "mistral-7b" and m["phase"] == "Unknown"
    assert codes(m) == ["DeploymentNotFound"]


def test_table_output(run_cli, api):  # noqa: F811
    healthy_model(api.cluster, "resnet50")
    crash_loop(api, LOG_SCENARIOS["EngineGPUMismatch"])
    api.cluster.apply(kustomization("apps-prod", [(NAMESPACE, MODEL), (NAMESPACE, "resnet50")]))
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe")
    lines = res.stdout.splitlines()
    assert res.exit_code == 1
    assert lines[0].split() == ["MODEL", "NAMESPACE", "PHASE", "READY", "REVISION", "REASON"]
    assert lines[1].split() == [MODEL, NAMESPACE, "Failed", "0/1", "main@sha1:4f2a9c1", "EngineGPUMismatch"]
    assert lines[2].split() == ["resnet50", NAMESPACE, "Healthy", "1/1", "main@sha1:4f2a9c1", "-"]
    assert lines[0].index("NAMESPACE") == lines[1].index(NAMESPACE) == len(MODEL) + 3  # kubectl padding
    assert any(line.strip().startswith("fix: Build the engine") for line in lines)


def test_several_replicas_one_reason_each(run_cli, api):  # noqa: F811
    c = crashed()
    pods = [pod(MODEL, s, ready=False, started=False, state=c["state"], last_state=c["last_state"], restarts=1)
            for s in ("aaaaa", "bbbbb", "ccccc")]
    api.cluster.apply(deployment(MODEL, replicas=3, ready=0), *pods)
    for p in pods:
        api.cluster.logs[(NAMESPACE, p["metadata"]["name"], "tritonserver", True)] = \
            LOG_SCENARIOS["WorldSizeMismatch"]
    _, doc = status(run_cli, api)
    m = only(doc)
    assert codes(m) == ["WorldSizeMismatch", "CrashLoopBackOff"]
    assert "(and 2 more)" in m["reasons"][0]["message"]
    assert api.cluster.count("log") == 3  # one log read per failing container


def test_probe_targets_are_the_triton_models_the_deployment_serves():
    """The instance label names the deployment unit; the probe asks Triton for its real model names."""
    from kubectl_triton.status.diagnose import expected_models
    from tests.apiserver import deployment

    llm = deployment("llama3-8b", triton_models=("ensemble", "postprocessing", "preprocessing", "tensorrt_llm"))
    assert expected_models(llm) == ["ensemble", "postprocessing", "preprocessing", "tensorrt_llm"]
    bare = deployment("llama3-8b", args=("--load-model=ensemble",))
    del bare["metadata"]["annotations"]["triton.kubectl.io/triton-models"]
    assert expected_models(bare) == ["ensemble"]  # never "llama3-8b", which Triton does not serve
