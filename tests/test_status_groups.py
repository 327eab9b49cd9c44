"""`kubectl triton status` for models served by a LeaderWorkerSet (multi-node groups): one test per group reason,
the rank errors as the repository's real bootstrap scripts and a real OpenMPI `mpirun` print them, and the API's
behaviour for the leaderworkersets resource (RBAC, a cluster without the CRD, paging, watch). Everything goes
through the real `kubernetes` client against tests/apiserver.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from kubectl_triton.formats import yamlio
from kubectl_triton.status import signatures
from tests.apiserver import (
    NAMESPACE,
    api,  # noqa: F401 - fixture
    group_event,
    group_pod,
    healthy_model,
    leaderworkerset,
)
from tests.test_status_reasons import codes, only
from tests.test_status_reasons import status as reasons_status

MODEL = "llama3-70b"
ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "base" / "triton-multinode"
RBAC = ROOT / "rbac"
LEADER_ADDRESS = f"{MODEL}-triton-group-0.{MODEL}-triton-group.{NAMESPACE}"
RECREATED = (f"Worker pod {MODEL}-triton-group-0-1 failed, deleted leader pod {MODEL}-triton-group-0 to recreate "
             "group 0")


def status(run_cli, api, *args: str) -> tuple[int, dict]:  # noqa: F811
    return reasons_status(run_cli, api, "--no-probe", *args)


def starting() -> dict:
    return leaderworkerset(MODEL, ready=0, conditions=[("Available", "False"), ("Progressing", "True")])


def crashed_leader(lws: dict, log: str, api) -> dict:  # noqa: F811
    """The leader's container exited (its previous instance wrote `log`) and runs again: the moment before the
    lws controller deletes the group (RecreateGroupOnPodRestart)."""
    leader = group_pod(lws, 0, 0, ready=False, started=False, restarts=1,
                       state={"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                       last_state={"terminated": {"exitCode": 1, "reason": "Error"}})
    api.cluster.apply(lws, leader, group_pod(lws, 0, 1))
    api.cluster.logs[(NAMESPACE, leader["metadata"]["name"], "tritonserver", True)] = log
    return leader


# -- groups from objects: healthy, waiting, recreated, rolling ------------------------------------------------

def test_a_ready_group_is_healthy_and_its_groups_are_listed(run_cli, api):  # noqa: F811
    lws = leaderworkerset(MODEL, replicas=2)
    api.cluster.apply(lws, *(group_pod(lws, g, w) for g in (0, 1) for w in (0, 1)))
    code, doc = status(run_cli, api)
    model = only(doc)
    assert code == 0 and (model["model"], model["phase"], model["ready"]) == (MODEL, "Healthy", "2/2")
    assert model["groups"] == [
        {"group": 0, "state": "Ready", "ready": "2/2", "leader": f"{MODEL}-triton-group-0"},
        {"group": 1, "state": "Ready", "ready": "2/2", "leader": f"{MODEL}-triton-group-1"}]


def test_leader_waiting_for_a_worker_without_gpus_names_the_workers_reason(run_cli, api):  # noqa: F811
    lws = starting()
    msg = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    worker = group_pod(lws, 0, 1, phase="Pending", ready=False, scheduled=("False", "Unschedulable", msg),
                       age_s=400)
    api.cluster.apply(lws, group_pod(lws, 0, 0, ready=False, started=False, age_s=400), worker)
    code, doc = status(run_cli, api)
    model = only(doc)
    assert code == 1 and model["phase"] == "Failed"
    first = model["reasons"][0]
    assert first["code"] == "LeaderWaitingForWorkers"
    assert f"{MODEL}-triton-group-0-1 is Pending" in first["message"] and "InsufficientGPU" in first["message"]
    assert "A group needs 2 nodes with 8 free GPUs each" in first["fix"] and "kubectl triton gpus" in first["fix"]
    assert "InsufficientGPU" in codes(model)
    assert model["groups"][0]["state"] == "Failed"


def test_leader_waiting_for_starting_workers_is_progressing(run_cli, api):  # noqa: F811
    lws = starting()
    api.cluster.apply(lws, group_pod(lws, 0, 0, ready=False, started=False, age_s=60),
                      group_pod(lws, 0, 1, phase="Pending", ready=False, age_s=60))
    code, doc = status(run_cli, api)
    model = only(doc)
    assert code == 1 and model["phase"] == "Progressing" and codes(model) == ["LeaderWaitingForWorkers"]
    assert model["reasons"][0]["fix"].startswith("Nothing to change yet")
    assert model["groups"][0]["state"] == "WaitingForWorkers"


def test_a_group_recreated_again_and_again_is_failed(run_cli, api):  # noqa: F811
    lws = starting()
    api.cluster.apply(lws, group_pod(lws, 0, 0, ready=False, started=False, age_s=30), group_pod(lws, 0, 1, age_s=30))
    api.cluster.apply(group_event(lws, "RecreateGroup", RECREATED, count=3))
    code, doc = status(run_cli, api)
    model = only(doc)
    assert code == 1 and model["phase"] == "Failed" and model["reasons"][0]["code"] == "GroupRecreated"
    assert "recreated 3x" in model["reasons"][0]["message"] and RECREATED in model["reasons"][0]["message"]
    assert "kubectl logs --previous` has nothing" in model["reasons"][0]["fix"]
    # read through the events of the LeaderWorkerSet (the lws controller's recorder regards the set, not a pod)
    assert any("involvedObject.kind%3DLeaderWorkerSet" in r.path for r in api.cluster.requests if r.verb == "list")


def test_a_group_recreated_once_and_ready_again_is_healthy(run_cli, api):  # noqa: F811
    lws = leaderworkerset(MODEL)
    api.cluster.apply(lws, group_pod(lws, 0, 0), group_pod(lws, 0, 1))
    api.cluster.apply(group_event(lws, "RecreateGroup", RECREATED, age_s=1800))
    code, doc = status(run_cli, api)
    model = only(doc)
    assert code == 0 and model["phase"] == "Healthy" and codes(model) == ["GroupRecreated"]
    assert model["reasons"][0]["fix"].startswith("History:")


def test_the_log_of_a_leader_being_recreated_is_read(run_cli, api):  # noqa: F811
    """RecreateGroupOnPodRestart deletes the group in the foreground: until its workers are gone, the crashed
    leader (deletionTimestamp set, restartCount 1) still has its previous instance's log."""
    lws = starting()
    leader = crashed_leader(lws, "[1,4]<stderr>:ng30903:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN "
                            "socketProgress: Connection closed by remote peer ng30903-ib<51159>\n", api)
    leader["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["foregroundDeletion"])
    api.cluster.apply(leader, group_event(lws, "RecreateGroup", RECREATED.replace("-0-1 failed", "-0 failed")))
    code, doc = status(run_cli, api)
    model = only(doc)
    assert code == 1 and codes(model)[:2] == ["NCCLTimeout", "GroupRecreated"]
    assert api.cluster.count("log") == 1


def test_rollout_with_surge_and_partition_is_never_failed(run_cli, api):  # noqa: F811
    lws = leaderworkerset(MODEL, replicas=2, ready=2, updated=1, total=3, generation=5, rollout={"maxSurge": 1},
                          conditions=[("Available", "False"), ("Progressing", "True"), ("UpdateInProgress", "True")])
    old = [group_pod(lws, g, w, revision="7b6c5d4e3") for g in (0, 1) for w in (0, 1)]
    surge = [group_pod(lws, 2, 0, ready=False, started=False, age_s=100), group_pod(lws, 2, 1, age_s=100)]
    api.cluster.apply(lws, *old, *surge)
    code, doc = status(run_cli, api)
    model = only(doc)
    assert model["phase"] == "Progressing" and codes(model) == ["RolloutInProgress"]
    assert "1 of 2 groups updated, 2 ready, 1 surge group(s)" in model["reasons"][0]["message"]
    # the update finished on the groups at or above the partition: deliberate, a warning on a Healthy model
    lws = leaderworkerset(MODEL, replicas=2, updated=1, generation=6, rollout={"partition": 1},
                          conditions=[("Available", "True"), ("Progressing", "False"), ("UpdateInProgress", "False")])
    api.cluster.apply(lws)
    api.cluster.delete("Pod", NAMESPACE, f"{MODEL}-triton-group-2")
    api.cluster.delete("Pod", NAMESPACE, f"{MODEL}-triton-group-2-1")
    code, doc = status(run_cli, api)
    model = only(doc)
    assert code == 0 and model["phase"] == "Healthy" and codes(model) == ["RolloutPartitioned"]
    assert "groups 0-0 stay on the previous revision" in model["reasons"][0]["message"]


def test_text_output_lists_the_groups(run_cli, api):  # noqa: F811
    lws = starting()
    api.cluster.apply(lws, group_pod(lws, 0, 0, ready=False, started=False, age_s=60),
                      group_pod(lws, 0, 1, phase="Pending", ready=False, age_s=60))
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "--no-probe")
    assert res.exit_code == 1
    assert f"  group 0: WaitingForWorkers, 0/2 pods ready (leader {MODEL}-triton-group-0)" in res.stdout


def test_the_leader_is_probed_not_the_workers(run_cli, api):  # noqa: F811
    lws = leaderworkerset(MODEL)
    api.cluster.apply(lws, group_pod(lws, 0, 0), group_pod(lws, 0, 1))
    res = run_cli("status", "--kubeconfig", str(api.kubeconfig_path), "-o", "json")
    proxied = [r.name for r in api.cluster.requests if r.verb == "proxy"]
    assert proxied and all(name.startswith(f"{MODEL}-triton-group-0:") for name in proxied), proxied
    assert json.loads(res.stdout)["models"][0]["phase"] == "Healthy"  # the probe is an enrichment


# -- rank errors as the real scripts and a real mpirun print them ---------------------------------------------

def _leader_env(tmp_path: Path, **extra: str) -> dict:
    env = dict(os.environ, LWS_LEADER_ADDRESS=LEADER_ADDRESS, LWS_GROUP_SIZE="2", LWS_WORKER_INDEX="0",
               GPUS_PER_NODE="8", WORLD_SIZE="16", MPI_HOSTFILE=str(tmp_path / "mpi" / "hostfile"),
               SCRIPTS_DIR=str(SCRIPTS))
    env.update(extra)
    return env


def _run(cmd: list[str], env: dict) -> str:
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0, res.stderr
    return res.stdout + res.stderr


def test_leader_sh_world_size_refusal_is_recognised(run_cli, api, tmp_path):  # noqa: F811
    log = _run(["sh", str(SCRIPTS / "leader.sh")], _leader_env(tmp_path, WORLD_SIZE="12"))
    assert "world size 12 (tp x pp) is not 2 nodes x 8 GPUs per node" in log
    crashed_leader(starting(), log, api)
    code, doc = status(run_cli, api)
    model = only(doc)
    assert code == 1 and model["reasons"][0]["code"] == "WorldSizeMismatch"
    assert "world size 12 (tp x pp)" in model["reasons"][0]["message"]


def test_leader_sh_giving_up_on_a_worker_is_recognised(run_cli, api, tmp_path):  # noqa: F811
    log = _run(["sh", str(SCRIPTS / "leader.sh")], _leader_env(tmp_path, WORKER_WAIT_SECONDS="1"))
    crashed_leader(starting(), log, api)
    code, doc = status(run_cli, api)
    model = only(doc)
    assert code == 1 and model["reasons"][0]["code"] == "WorkersUnreachable"
    assert f"worker {MODEL}-triton-group-0-1.{MODEL}-triton-group.{NAMESPACE} did not accept connections" in \
        model["reasons"][0]["message"]


def test_worker_sh_without_its_key_is_recognised_behind_the_waiting_leader(run_cli, api, tmp_path):  # noqa: F811
    log = _run(["sh", str(SCRIPTS / "worker.sh")],
               dict(os.environ, LWS_LEADER_ADDRESS=LEADER_ADDRESS, MPI_SSH_DIR=str(tmp_path / "none")))
    lws = starting()
    worker = group_pod(lws, 0, 1, ready=False, started=False, restarts=1,
                       state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
                       last_state={"terminated": {"exitCode": 1, "reason": "Error"}})
    api.cluster.apply(lws, group_pod(lws, 0, 0, ready=False, started=False, age_s=60), worker)
    api.cluster.logs[(NAMESPACE, worker["metadata"]["name"], "tritonserver", True)] = log
    code, doc = status(run_cli, api)
    model = only(doc)
    assert code == 1 and codes(model)[:2] == ["LeaderWaitingForWorkers", "MPILaunchFailed"]
    assert "authorized_keys is missing" in model["reasons"][0]["message"]


def test_real_mpirun_that_cannot_reach_a_worker_is_mpi_launch_failed(run_cli, api, tmp_path):  # noqa: F811
    """Debian's OpenMPI mpirun (the project's install step installs openmpi-bin) asked to start a rank on a
    worker whose pod DNS name does not resolve: its own words, as the leader's log shows them."""
    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun (openmpi-bin) is a system dependency: `make system-deps`"
    agent = "ssh -o BatchMode=yes -o ConnectTimeout=5" if shutil.which("ssh") else "false"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    started = time.monotonic()
    log = _run([mpirun, "-np", "2", "--host", f"localhost:1,{MODEL}-triton-group-0-1.{MODEL}-triton-group.triton:1",
                "--mca", "plm_rsh_agent", agent, "--mca", "orte_keep_fqdn_hostnames", "1", "--tag-output", "true"],
               env)
    assert time.monotonic() - started < 100
    crashed_leader(starting(), log, api)
    code, doc = status(run_cli, api)
    model = only(doc)
    assert code == 1 and model["reasons"][0]["code"] == "MPILaunchFailed", (log, model)


# -- the API: RBAC, no CRD, paging, watch ------------------------------------------------------------------

def _rules(name: str, *, without_lws: bool = False) -> list[dict]:
    rules = yamlio.load_all(RBAC / name)[0]["rules"]
    return [r for r in rules if not (without_lws and "leaderworkersets" in r["resources"])]


@pytest.mark.parametrize("name", ["clusterrole.yaml", "clusterrole-status-objects.yaml"])
def test_the_status_roles_read_leaderworkersets(name):
    rules = _rules(name)
    assert any(r["apiGroups"] == ["leaderworkerset.x-k8s.io"] and r["resources"] == ["leaderworkersets"]
               and sorted(r["verbs"]) == ["get", "list", "watch"] for r in rules)
    readme = (ROOT / "README.md").read_text()
    assert "LeaderWorkerSets" in readme[readme.index("which depth"):readme.index("A missing right never aborts")]


def test_without_the_right_to_list_leaderworkersets_status_says_so(run_cli, api):  # noqa: F811
    api.cluster.rbac_rules = _rules("clusterrole-status-objects.yaml", without_lws=True)
    healthy_model(api.cluster, "llama3-8b")
    lws = leaderworkerset(MODEL)
    api.cluster.apply(lws, group_pod(lws, 0, 0), group_pod(lws, 0, 1))
    code, doc = status(run_cli, api)
    assert code == 0 and [m["model"] for m in doc["models"]] == ["llama3-8b"]
    assert [n for n in doc["notes"] if "leaderworkersets" in n] == [
        "not read: leaderworkersets.leaderworkerset.x-k8s.io (list is forbidden); multi-node groups "
        "(LeaderWorkerSets) are not shown"]
    # with the shipped role the group is read, and every request it made was allowed
    api.cluster.rbac_rules = _rules("clusterrole-status-objects.yaml")
    code, doc = status(run_cli, api)
    assert code == 0 and sorted(m["model"] for m in doc["models"]) == [MODEL, "llama3-8b"]


def test_the_403_names_the_qualified_resource(api):  # noqa: F811
    import urllib.error
    import urllib.request

    api.cluster.rbac_rules = _rules("clusterrole-status-objects.yaml", without_lws=True)
    req = urllib.request.Request(f"{api.url}/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NAMESPACE}/leaderworkersets",
                                 headers={"Authorization": "Bearer test-token"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req)
    doc = json.loads(info.value.read())
    assert info.value.code == 403 and doc["message"] == (
        'leaderworkersets.leaderworkerset.x-k8s.io is forbidden: User "alice" cannot list resource '
        '"leaderworkersets" in API group "leaderworkerset.x-k8s.io" in the namespace "triton"')
    assert doc["details"] == {"kind": "leaderworkersets", "group": "leaderworkerset.x-k8s.io"}


def test_a_cluster_without_the_lws_crd_is_no_note(run_cli, api):  # noqa: F811
    api.cluster.unserved.add("leaderworkersets")
    healthy_model(api.cluster, "llama3-8b")
    code, doc = status(run_cli, api)
    assert code == 0 and "notes" not in doc
    assert api.cluster.count("list", "leaderworkersets") == 1
    code, doc = status(run_cli, api, MODEL)  # asked for by name: not found, as for a Deployment
    assert code == 1 and only(doc)["reasons"][0]["code"] == "DeploymentNotFound"
    assert "LeaderWorkerSet" in only(doc)["reasons"][0]["message"]


def test_leaderworkersets_are_listed_in_pages(run_cli, api, monkeypatch):  # noqa: F811
    from kubectl_triton.adapters import kube as kube_mod

    monkeypatch.setattr(kube_mod, "PAGE_SIZE", 2)
    for i in range(5):
        lws = leaderworkerset(f"m{i}")
        api.cluster.apply(lws, group_pod(lws, 0, 0), group_pod(lws, 0, 1))
    code, doc = status(run_cli, api)
    assert code == 0 and len(doc["models"]) == 5
    pages = [r.path for r in api.cluster.requests if r.verb == "list" and r.resource == "leaderworkersets"]
    assert len(pages) == 3 and all("limit=2" in p for p in pages)


def test_wait_follows_a_group_until_it_is_ready(run_cli, api):  # noqa: F811
    import threading

    lws = starting()
    api.cluster.apply(lws, group_pod(lws, 0, 0, ready=False, started=False, age_s=20),
                      group_pod(lws, 0, 1, phase="Pending", ready=False, age_s=20))

    def become_ready() -> None:
        time.sleep(1.0)
        api.cluster.apply(group_pod(lws, 0, 1))
        time.sleep(0.5)
        ready = leaderworkerset(MODEL)
        api.cluster.apply(ready, group_pod(ready, 0, 0))

    threading.Thread(target=become_ready, daemon=True).start()
    code, doc = status(run_cli, api, "--wait", "--timeout", "30s")
    assert code == 0 and only(doc)["phase"] == "Healthy"
    assert api.cluster.count("list", "leaderworkersets") == 1  # later changes came through the watch
    assert api.cluster.count("watch", "leaderworkersets") >= 1


def test_signatures_with_an_origin_name_files_that_exist():
    for sig in signatures.load():
        for path in sig.origin:
            assert (ROOT / path).is_file(), (sig.code, path)
