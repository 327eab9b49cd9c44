"""Every check family that judges a model served by a Deployment judges one served by a LeaderWorkerSet group.

The multi-node model of this repository (models/llama3-70b, overlays/llama3-70b/h100-80gb: a LeaderWorkerSet of
2 pods x 8 GPUs) is broken in one way per check family, all in one copy and one validate run; each case asserts
that its finding is reported on the 70b's files or objects — as the same break of the Deployment-served
models/llama3-8b is (the `twin` column: the same edit there, and the code it gets).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from kubectl_triton.gitops import workloads

ENGINES = Path(__file__).parent / "fixtures" / "engines"
OVERLAY = "overlays/llama3-70b/h100-80gb"
GROUP = "LeaderWorkerSet/triton/llama3-70b-triton-group"
LEADER = "/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0"
WORKER = "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0"


def _replace(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / rel
        text = path.read_text()
        assert old in text, f"{old!r} not in {rel}"
        path.write_text(text.replace(old, new, 1))
    return edit


def _group_ops(*ops: dict) -> Callable[[Path], None]:
    """Append a JSON patch of the LeaderWorkerSet to the 70b's serving overlay."""
    def edit(root: Path) -> None:
        path = root / OVERLAY / "kustomization.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["patches"].append({"target": {"kind": "LeaderWorkerSet"}, "patch": yaml.safe_dump(list(ops))})
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return edit


def _engine(name: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        shutil.copytree(ENGINES / name, root / "models/llama3-70b/engines/h100-80gb")
    return edit


def _drop_networkpolicy(root: Path) -> None:
    path = root / OVERLAY / "kustomization.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["patches"].append({"target": {"kind": "NetworkPolicy"}, "patch": yaml.safe_dump(
        {"$patch": "delete", "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "any"}})})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


TRTLLM = "models/llama3-70b/tensorrt_llm/config.pbtxt"
CASES = [
    # (family, edit, code, path, object, words in the message)
    ("model-repository", _replace(TRTLLM, 'key: "gpt_model_path"', 'key: "gpt_model_dir"'),
     "TRTLLMParameter", TRTLLM, None, "missing mandatory parameter 'gpt_model_path'"),
    ("engine-compatibility", _engine("llama3-8b-int4awq-tp2-a100"), None, OVERLAY, None, "on h100-80gb"),
    ("practices-image", _group_ops({"op": "replace", "path": f"{LEADER}/image",
                                    "value": "nvcr.io/nvidia/tritonserver:latest"}),
     "ImageTagNotPinned", OVERLAY, GROUP, "leader container tritonserver"),
    ("practices-probes", _group_ops({"op": "remove", "path": f"{LEADER}/startupProbe"}),
     "StartupProbeMissing", OVERLAY, GROUP, "no startupProbe"),
    ("practices-annotation", _group_ops({"op": "replace", "path": "/metadata/annotations",
                                         "value": {"triton.kubectl.io/triton-models": "ensemble"}}),
     "ModelsAnnotation", OVERLAY, GROUP, "lists ensemble but the model repository holds"),
    ("security-pod", _group_ops({"op": "add", "path": f"{WORKER}/securityContext/privileged", "value": True}),
     "Privileged", OVERLAY, GROUP, "worker: container tritonserver: privileged: true"),
    ("security-networkpolicy", _drop_networkpolicy, "NetworkPolicyMissing", OVERLAY, GROUP,
     "LeaderWorkerSet's pods"),
    ("engine-build", _replace("overlays/llama3-70b/h100-80gb-engine-build/kustomization.yaml",
                              "  - ../../gpus/h100-80gb\n",
                              "  - ../../gpus/h100-80gb\nimages:\n  - name: nvcr.io/nvidia/tritonserver\n"
                              "    newTag: 24.11-trtllm-python-py3\n"),
     "EngineBuildImageMismatch", OVERLAY, GROUP, "its engine is built in nvcr.io/nvidia/tritonserver:24.11"),
]


@pytest.fixture(scope="module")
def findings(tmp_path_factory, request) -> list[dict]:
    from tests.conftest import REPO

    root = tmp_path_factory.mktemp("lws") / "repo"
    for part in ("base", "overlays", "models", "clusters"):
        shutil.copytree(REPO / part, root / part)
    shutil.copy(REPO / "kubectl-triton.yaml", root / "kubectl-triton.yaml")
    for case in CASES:
        case[1](root)
    from click.testing import CliRunner

    from kubectl_triton.cli import cli

    result = CliRunner().invoke(cli, ["validate", str(root), "-o", "json"])
    assert result.exit_code == 1, result.output
    return list(json.loads(result.stdout)["findings"])


def test_the_group_keeps_the_base_network_rules_and_its_serving_pod_is_the_leader(rendered):
    """base/triton-multinode appends the rule between the group's pods to the base's ingress rules: clients still
    reach http/grpc and Prometheus the metrics port (a strategic-merge patch used to replace the list)."""
    objects = rendered[OVERLAY]
    group = next(o for o in objects if o["kind"] == "LeaderWorkerSet")
    serving = workloads.serving_template(group)
    assert serving is not None and serving.role == "leader"
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    rules = policy["spec"]["ingress"]
    ports = [sorted(p["port"] for p in r.get("ports", [])) for r in rules]
    assert ["grpc", "http"] in ports and ["metrics"] in ports
    own = [r for r in rules if "ports" not in r]
    assert own and own[0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "llama3-70b"


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_check_family_judges_the_leaderworkerset_model(findings, case):
    family, _edit, code, path, obj, words = case
    hits = [f for f in findings if f["path"] == path and (code is None or f["code"] == code)
            and (obj is None or f["object"] == obj) and words in f["message"]]
    if family == "engine-compatibility":  # built on an A100 (sm80), served on H100s: the compat verdict is there
        hits = [f for f in hits if f["model"] == "llama3-70b" and f["severity"] == "error"]
    assert hits, [(f["code"], f["path"], f["message"][:120]) for f in findings if "70b" in json.dumps(f)]
