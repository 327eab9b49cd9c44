"""The `status` corpus: scenarios built from real public objects and logs (tests/fixtures/status_corpus/*.yaml,
each with its sources), served by tests/apiserver.py to the real `kubernetes` client through `kubectl triton
status -o json`. Each scenario names the phase and the cause (first reason code, `-` for none) it must get.

The figures are printed and recorded (record_property): cause agreement must be >= 95% and no healthy rollout
may be called Failed. A scenario's objects are built with the apiserver's builders and then overwritten with the
fixture's own status blocks, conditions, events and log lines (verbatim from the sources). A scenario with
`regression: WHY` (the issue a fix was made for) must get exactly its phase and cause.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from kubectl_triton.formats import yamlio
from tests.apiserver import (
    NAMESPACE,
    APIServer,
    deployment,
    event,
    group_event,
    group_pod,
    hpa,
    kustomization,
    labels,
    leaderworkerset,
    pod,
    ts,
)

CORPUS = Path(__file__).resolve().parent / "fixtures" / "status_corpus"
RESULTS: dict[str, tuple[str, str, str, str]] = {}  # id -> (expected phase, cause, got phase, cause)
MIN_SCENARIOS, MIN_CAUSE_AGREEMENT = 60, 0.95
IMAGE_TRTLLM = "nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3"  # base/engine-build's image


def scenarios() -> list[dict]:
    out = []
    for path in sorted(CORPUS.glob("*.yaml")):
        for sc in yamlio.load_all(path)[0]["scenarios"]:
            out.append({**sc, "file": path.name})
    return out


def _times(value: object) -> object:
    """`@-120` anywhere in a scenario: the timestamp 120 s before now (fixtures keep their ages, not dates)."""
    if isinstance(value, str) and re.fullmatch(r"@-?\d+", value):
        return ts(float(value[1:]))
    if isinstance(value, dict):
        return {k: _times(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_times(v) for v in value]
    return value


def _merge(base: dict, extra: dict) -> dict:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


def engine_build_job(model: str, spec: dict, status: dict, name: str | None = None) -> dict:
    """A Job as base/engine-build renders for MODEL (labels and selector as the Job controller sets them)."""
    name = name or f"{model}-h100-80gb-engine-build"
    uid = f"uid-job-{name}"
    job_labels = {"app.kubernetes.io/name": "triton-engine-build", "app.kubernetes.io/instance": model,
                  "app.kubernetes.io/part-of": "kubectl-triton"}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": job_labels, "uid": uid,
                         "creationTimestamp": ts(-3600)},
            "spec": _merge({"backoffLimit": 1, "activeDeadlineSeconds": 6600, "completions": 1, "parallelism": 1,
                            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
                            "template": {"spec": {"restartPolicy": "Never", "containers": [
                                {"name": "engine-build", "image": IMAGE_TRTLLM,
                                 "resources": {"limits": {"memory": "128Gi", "nvidia.com/gpu": "1"}}}]}}}, spec),
            "status": status}


def job_pod(job: dict, suffix: str, state: dict, phase: str) -> dict:
    name = f"{job['metadata']['name']}-{suffix}"
    uid = job["metadata"]["uid"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}", "creationTimestamp": ts(-3000),
                         "labels": {**job["metadata"]["labels"], "batch.kubernetes.io/controller-uid": uid,
                                    "batch.kubernetes.io/job-name": job["metadata"]["name"],
                                    "job-name": job["metadata"]["name"]}},
            "spec": {"nodeName": "gpu-node-h100-1", "restartPolicy": "Never",
                     "containers": [{"name": "engine-build", "image": IMAGE_TRTLLM,
                                     "resources": {"limits": {"memory": "128Gi"}}}]},
            "status": {"phase": phase, "hostIP": "10.0.3.20", "containerStatuses": [{
                "name": "engine-build", "ready": False, "restartCount": 0, "image": "", "imageID": "",
                "state": state}]}}


def build(api: APIServer, sc: dict) -> None:  # noqa: C901 - one branch per scenario part
    """Apply the scenario's objects and logs to the server."""
    sc = _times(sc)
    c = api.cluster
    model = sc.get("model", "llama3-8b")
    d = sc.get("deployment")
    objs: list[dict] = []
    pods: list[dict] = []
    if d is not None:
        kw = {k: d[k] for k in ("replicas", "ready", "updated", "generation", "observed") if k in d}
        if "progressing" in d:
            kw["progressing"] = tuple(d["progressing"])
        dep = deployment(model, **kw)
        _merge(dep["spec"], d.get("spec") or {})
        _merge(dep["metadata"], d.get("metadata") or {})
        for key in [k for k in d.get("unset") or []]:
            dep["spec"].pop(key, None)
        if "status" in d:
            dep["status"] = d["status"]
        objs.append(dep)
        for i, p in enumerate(sc.get("pods") or []):
            kw = {k: p[k] for k in ("phase", "ready", "started", "restarts", "state", "last_state", "node",
                                    "init_state") if k in p}
            if "scheduled" in p:
                kw["scheduled"] = tuple(p["scheduled"])
            obj = pod(model, p.get("suffix", f"p{i}x{i}k"), **kw)
            _merge(obj["status"], p.get("status") or {})
            _merge(obj["spec"], p.get("spec") or {})
            _merge(obj["metadata"], p.get("metadata") or {})
            for key in p.get("unset_metadata") or []:  # a fixture's object without it (kstatus' pods)
                obj["metadata"].pop(key, None)
            pods.append(obj)
        objs += pods
        if sc.get("hpa") is not None:
            h = hpa(model)
            if "conditions" in sc["hpa"]:
                h["status"]["conditions"] = sc["hpa"]["conditions"]
            _merge(h["metadata"], sc["hpa"].get("metadata") or {})
            objs.append(h)
        if sc.get("kustomization") is not None:
            k = sc["kustomization"]
            objs.append(kustomization("apps", [(NAMESPACE, model)],
                                      ready=tuple(k["ready"]) if "ready" in k else None,
                                      attempted=k.get("attempted"), suspend=bool(k.get("suspend"))))
        if sc.get("replicaset") is not None:
            rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                  "metadata": {"name": f"{model}-triton-7d9c8b6f5", "namespace": NAMESPACE, "labels": labels(model)},
                  "spec": {"replicas": dep["spec"]["replicas"]}, "status": sc["replicaset"]["status"]}
            objs.append(rs)
    lws = None
    if sc.get("lws") is not None:  # a multi-node group: the LeaderWorkerSet and its group pods
        spec = sc["lws"]
        kw = {k: spec[k] for k in ("replicas", "size", "ready", "updated", "total", "generation", "observed",
                                   "rollout") if k in spec}
        if "conditions" in spec:
            kw["conditions"] = [tuple(c) for c in spec["conditions"]]
        lws = leaderworkerset(model, **kw)
        _merge(lws["metadata"], spec.get("metadata") or {})
        _merge(lws["spec"], spec.get("spec") or {})
        objs.append(lws)
        for gp in sc.get("group_pods") or []:
            kw = {k: gp[k] for k in ("group", "worker", "phase", "ready", "started", "restarts", "state", "last_state",
                                     "revision", "age_s") if k in gp}
            if "scheduled" in gp:
                kw["scheduled"] = tuple(gp["scheduled"])
            obj = group_pod(lws, **kw)
            _merge(obj["status"], gp.get("status") or {})
            _merge(obj["metadata"], gp.get("metadata") or {})
            pods.append(obj)
            objs.append(obj)
        if sc.get("kustomization") is not None and d is None:
            k = sc["kustomization"]
            ks = kustomization("apps", [], ready=tuple(k["ready"]) if "ready" in k else None,
                               attempted=k.get("attempted"), suspend=bool(k.get("suspend")))
            ks["status"]["inventory"]["entries"] = [
                {"id": f"{NAMESPACE}_{lws['metadata']['name']}_leaderworkerset.x-k8s.io_LeaderWorkerSet", "v": "v1"}]
            objs.append(ks)
    for j in sc.get("jobs") or []:
        job = engine_build_job(model, j.get("spec") or {}, j["status"])
        objs.append(job)
        for i, jp in enumerate(j.get("pods") or []):
            p = job_pod(job, jp.get("suffix", f"b{i}q"), jp["state"], jp.get("phase", "Failed"))
            pods.append(p)
            objs.append(p)
    c.apply(*objs)
    by_name = {o["kind"]: o for o in objs}
    for e in sc.get("events") or []:
        if e.get("object") == "LeaderWorkerSet":  # recorded by the lws controller (events.k8s.io recorder)
            gev = group_event(lws, e["reason"], e["message"], type_=e.get("type", "Normal"),
                              count=e.get("count", 1), age_s=e.get("age_s", 30),
                              related=pods[e["related"]] if "related" in e else None)
            if "uid" in e:  # about an earlier set of the same name (deleted and applied again)
                gev["regarding"]["uid"] = e["uid"]
            c.apply(gev)
            continue
        target = pods[e["pod"]] if "pod" in e else by_name[e["object"]]
        ev = event(target, e["reason"], e["message"], type_=e.get("type", "Warning"), count=e.get("count", 1),
                   source=e.get("source", "kubelet"), age_s=e.get("age_s", 10))
        if "field_path" in e:  # the kubelet's events name the container: spec.containers{NAME}
            ev["involvedObject"]["fieldPath"] = e["field_path"]
        if e.get("api") == "events.k8s.io":  # the newer Event API's shape: the server stores it as core v1
            ev = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": ev["metadata"],
                  "regarding": ev["involvedObject"], "note": ev["message"], "reason": ev["reason"],
                  "type": ev["type"], "reportingController": ev["reportingComponent"],
                  "deprecatedCount": ev["count"]}
        c.apply(ev)
    for lg in sc.get("logs") or []:
        p = pods[lg.get("pod", 0)]
        container = p["spec"]["containers"][0]["name"]
        c.logs[(NAMESPACE, p["metadata"]["name"], container, bool(lg.get("previous")))] = lg["text"]
    access = sc.get("access") or {}
    for verb, res in access.get("forbid") or []:
        # allow_events_v1: only the core group is refused (a role granting events.k8s.io alone)
        c.forbidden.add((verb, res, "") if access.get("allow_events_v1") else (verb, res))
    if access.get("broken_kubelet"):
        c.broken_kubelets.add("gpu-node-a100-1")
    for plural in access.get("unserved") or []:  # a CRD the cluster does not have
        c.unserved.add(plural)


def _verdict(doc: dict, sc: dict) -> tuple[str, str]:
    rows = doc["models"]
    if sc["expect"].get("row") == "serving":  # the model's own row, beside its engine build's
        rows = [m for m in rows if not m.get("job")]
    elif sc.get("jobs") and not sc.get("deployment"):
        rows = [m for m in rows if m.get("job")]
    assert len(rows) == 1, rows
    m = rows[0]
    return m["phase"], (m["reasons"][0]["code"] if m["reasons"] else "-")


ALL = scenarios()


def test_corpus_is_large_and_sourced():
    ids = [sc["id"] for sc in ALL]
    assert len(ids) == len(set(ids)), "scenario ids must be unique"
    assert len(ALL) >= MIN_SCENARIOS, len(ALL)
    for sc in ALL:
        assert sc.get("sources") and all(str(u).startswith("https://") for u in sc["sources"]), sc["id"]
        assert sc["expect"]["phase"] in ("Healthy", "Progressing", "Failed", "Unknown"), sc["id"]


@pytest.mark.parametrize("sc", ALL, ids=[sc["id"] for sc in ALL])
def test_scenario(run_cli, tmp_path, sc):
    with APIServer() as api:
        build(api, sc)
        kubeconfig = api.kubeconfig(tmp_path)
        res = run_cli("status", "--kubeconfig", str(kubeconfig), "-o", "json", *sc.get("args", []))
        assert "Traceback" not in res.stderr, res.stderr
        assert res.exit_code in (0, 1), (res.exit_code, res.stderr)
        doc = json.loads(res.stdout)
        assert api.cluster.violations == []
    phase, cause = _verdict(doc, sc)
    want = sc["expect"]
    RESULTS[sc["id"]] = (want["phase"], want["cause"], phase, cause)
    # exit code agrees with the phase: 0 only when Healthy
    assert (res.exit_code == 0) == (phase == "Healthy")
    if sc.get("regression"):  # a scenario a fix was made for must agree exactly, not only count in the figures
        assert (phase, cause) == (want["phase"], want["cause"]), (sc["regression"], doc["models"][0]["reasons"])
    for text in sc["expect"].get("notes_mention") or []:
        assert any(text in n for n in doc.get("notes") or []), (text, doc.get("notes"))
    for text in sc["expect"].get("message_mentions") or []:
        assert text in doc["models"][0]["reasons"][0]["message"], (text, doc["models"][0]["reasons"][0])


def test_zz_corpus_figures(record_property):
    """The agreement over the whole corpus (runs after every scenario: the name sorts last)."""
    done = {k: v for k, v in RESULTS.items()}
    if len(done) < len(ALL):
        pytest.skip("run with the scenarios (tests/test_status_corpus.py) to get the figures")
    phase_ok = sum(1 for wp, _, gp, _ in done.values() if wp == gp)
    cause_ok = sum(1 for _, wc, _, gc in done.values() if wc == gc)
    false_alarms = [k for k, (wp, _, gp, _) in done.items() if wp == "Healthy" and gp == "Failed"]
    n = len(done)
    healthy = sum(1 for wp, *_ in done.values() if wp == "Healthy")
    record_property("corpus_scenarios", n)
    record_property("corpus_phase_agreement", round(phase_ok / n, 4))
    record_property("corpus_cause_agreement", round(cause_ok / n, 4))
    record_property("corpus_false_alarms", len(false_alarms))
    misses = [f"{k}: want {wp}/{wc}, got {gp}/{gc}" for k, (wp, wc, gp, gc) in done.items() if (wp, wc) != (gp, gc)]
    summary = (f"{n} scenarios ({healthy} healthy); phase {phase_ok}/{n} = {phase_ok / n:.1%}; cause {cause_ok}/{n} "
               f"= {cause_ok / n:.1%}; healthy rollouts called Failed: {len(false_alarms)}")
    record_property("corpus_summary", summary)
    print(f"\nstatus corpus: {summary}" + "".join(f"\n  miss {m}" for m in misses))
    assert cause_ok / n >= MIN_CAUSE_AGREEMENT, misses
    assert false_alarms == []


def test_engine_build_deadline_leaves_slack_below_the_flux_timeout():
    """base/engine-build's activeDeadlineSeconds ends the Job before the Flux Kustomization that waits for it
    times out (at least 5 minutes earlier), so the reported failure is the Job's DeadlineExceeded."""
    from kubectl_triton.formats.duration import parse_duration

    root = Path(__file__).resolve().parents[1]
    job = yamlio.load_all(root / "base" / "engine-build" / "job.yaml")[0]
    deadline = job["spec"]["activeDeadlineSeconds"]
    flux = [doc for path in sorted(root.glob("clusters/*/models/*-engine-build.yaml"))
            for doc in yamlio.load_all(path)]
    assert flux, "no engine-build Flux Kustomization in clusters/"
    for ks in flux:
        overlay = root / ks["spec"]["path"]
        assert "activeDeadlineSeconds" not in (overlay / "kustomization.yaml").read_text(), overlay
        timeout = parse_duration(ks["spec"]["timeout"], bare_seconds=False)
        assert timeout is not None and timeout - deadline >= 300, (ks["metadata"]["name"], timeout, deadline)
