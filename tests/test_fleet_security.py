"""The security checks on a Flux fleet's own workloads (issue 28): Pod Security "restricted" is judged for Triton's
pods (the folders kubectl-triton manages, and pods running tritonserver anywhere), not for a user's CronJob among
their own apps; format strings and placeholders in URLs are not credentials; SOPS-encrypted Secrets are not
Secrets in git. Synthetic fixtures only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kubectl_triton.checks.manifests import security
from kubectl_triton.checks.manifests.security import check_objects

POD_CODES = {"Capabilities", "PrivilegeEscalation", "Privileged", "ReadOnlyRootFilesystem", "RunAsNonRoot",
             "Seccomp", "ServiceAccountToken", "VolumeType", "HostNamespaces", "HostPort"}


def codes(findings) -> list[str]:
    return sorted(f.code.removeprefix("security.") for f in findings)


def cronjob(image: str = "alpine:3.20", name: str = "scrub") -> dict:
    """A privileged CronJob with a hostPath volume, as a user's node-maintenance job is."""
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "zfs-scrub", "namespace": "kube-system"},
            "spec": {"schedule": "0 0 * * 0", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": name, "image": image, "command": ["zpool", "scrub", "tank"],
                                "securityContext": {"privileged": True},
                                "volumeMounts": [{"name": "dev", "mountPath": "/dev"}]}],
                "volumes": [{"name": "dev", "hostPath": {"path": "/dev"}}]}}}}}}


def deployment(image: str, name: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
                     "spec": {"containers": [{"name": name, "image": image}]}}}}


ALL_POD = ["Capabilities", "PrivilegeEscalation", "Privileged", "ReadOnlyRootFilesystem", "RunAsNonRoot", "Seccomp",
           "ServiceAccountToken", "VolumeType"]
UNHARDENED = ["Capabilities", "PrivilegeEscalation", "ReadOnlyRootFilesystem", "RunAsNonRoot", "Seccomp",
              "ServiceAccountToken"]


@pytest.mark.parametrize("obj, managed, expected", [
    # a user's workload in their own apps: their policy, not this tool's
    (cronjob(), False, []),
    (deployment("ghcr.io/home-operations/sonarr:4", "app"), False, []),
    # the same workload in a folder kubectl-triton manages (its overlays and bases): judged
    (cronjob(), True, ALL_POD),
    # a pod running tritonserver is Triton's wherever it is, by container name or by image
    (deployment("nvcr.io/nvidia/tritonserver:24.12-py3", "server"), False, UNHARDENED),
    (deployment("example.com/mirror/tritonserver@sha256:" + "0" * 64, "x"), False, UNHARDENED),
    (deployment("busybox", "tritonserver"), False, sorted([*UNHARDENED, "NetworkPolicyMissing"])),
    (cronjob("nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3", "build"), False, ALL_POD),
    # an image that only mentions the name is not Triton
    (deployment("example.com/tritonserver-exporter:1", "exporter"), False, []),
], ids=["user-cronjob", "user-deployment", "managed-cronjob", "triton-image", "triton-image-digest",
        "triton-container-name", "triton-build-job", "not-triton-image"])
def test_pod_checks_are_for_triton_workloads(obj, managed, expected):
    assert codes(check_objects("apps/x", [obj], managed=managed)) == expected


@pytest.mark.parametrize("obj, uid_hint", [
    (deployment("nvcr.io/nvidia/tritonserver:24.12-py3", "tritonserver"), True),
    (cronjob("alpine:3.20"), False),
])
def test_the_uid_1000_hint_is_only_for_triton_containers(obj, uid_hint):
    [finding] = [f for f in check_objects("overlays/m/l4", [obj]) if f.code.endswith("RunAsNonRoot")]
    assert ("the Triton image's unprivileged user is uid 1000" in finding.message) is uid_hint


def configmap(**data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "scripts"}, "data": data}


@pytest.mark.parametrize("value, found", [
    ("printf 'https://x-access-token:%s@github.com\\n' \"$${GITHUB_TOKEN}\" > ~/.git-credentials", False),
    ('return f"https://x-access-token:{TOKEN}@github.com/{repo}.git"', False),
    ("git clone https://oauth2:${GITLAB_TOKEN}@gitlab.com/x/y.git", False),
    ("git clone https://oauth2:$${GITLAB_TOKEN}@gitlab.com/x/y.git", False),
    ("git clone https://oauth2:$(GITLAB_TOKEN)@gitlab.com/x/y.git", False),
    ("git clone https://oauth2:$GITLAB_TOKEN@gitlab.com/x/y.git", False),
    ("url: https://user:{{.Password}}@db:5432/app", False),
    ("url = 'https://%(user)s:%(password)s@db/app' % creds", False),
    ("url = fmt.Sprintf(\"https://%s:%v@db/app\", u, p)", False),
    ("postgres://app:<password>@db:5432/app", False),
    # literal passwords are still found
    ("git clone https://alice:hunter22@git.example.com/x.git", True),
    ("postgres://app:$ecret-Pa55@db:5432/app", True),
], ids=["printf", "f-string", "env", "env-escaped", "k8s-ref", "shell-var", "go-template", "python-percent",
        "go-printf", "angle", "literal", "literal-with-dollar"])
def test_format_strings_are_not_credentials(value, found):
    got = codes(check_objects("apps/x", [configmap(script=value)], managed=False))
    assert got == (["LiteralCredential"] if found else [])


@pytest.mark.parametrize("value, found", [
    ("%s", False), ("${API_KEY}", False), ("$(API_KEY)", False), ("{api_key}", False), ("hunter2-literal", True),
])
def test_credential_named_values(value, found):
    assert codes(check_objects("apps/x", [configmap(API_KEY=value)], managed=False)) == \
        (["LiteralCredential"] if found else [])


SOPS_META = {"age": [{"recipient": "age1qqqq", "enc": "-----BEGIN AGE ENCRYPTED FILE-----\n"}],
             "lastmodified": "2025-01-01T00:00:00Z", "mac": "ENC[AES256_GCM,data:bWFj,type:str]", "version": "3.9.0"}


def secret(values: dict[str, str], sops: dict | None = None) -> dict:
    obj = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"},
           "stringData": values}
    if sops is not None:
        obj["sops"] = sops
    return obj


@pytest.mark.parametrize("obj, expected", [
    (secret({"token": "ENC[AES256_GCM,data:abcd,type:str]"}, SOPS_META), []),
    # sops' unencrypted_regex may leave values plain: the file is still one sops wrote, Flux decrypts it
    (secret({"token": "ENC[AES256_GCM,data:abcd,type:str]", "username": "admin"}, SOPS_META), []),
    # every value encrypted, the metadata left out by a patch: still encrypted
    (secret({"token": "ENC[AES256_GCM,data:abcd,type:str]"}), []),
    # plain values: a Secret in git, a `sops:` key that sops did not write does not hide it
    (secret({"token": "hunter2-literal"}), ["SecretInGit"]),
    (secret({"token": "hunter2-literal"}, {}), ["SecretInGit"]),
], ids=["sops", "sops-partly-plain", "all-encrypted", "plain", "fake-sops-key"])
def test_sops_secrets(obj, expected):
    assert codes(check_objects("apps/x", [obj], managed=False)) == expected


# -- the gate ---------------------------------------------------------------------------------------------------------

LAYOUT = "paths:\n  clusters: clusters\nflux:\n  sourceRef:\n    kind: GitRepository\n    name: flux-system\n"
FLUX_KS = """apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: {name}
  namespace: flux-system
spec:
  interval: 1h
  path: {path}
  prune: true
  sourceRef:
    kind: GitRepository
    name: flux-system
"""


def test_validate_leaves_the_users_workloads_to_the_user(run_cli, tmp_path):
    root = tmp_path / "repo"
    files = {"kubectl-triton.yaml": LAYOUT,
             "clusters/prod/scrub.yaml": FLUX_KS.format(name="scrub", path="./apps/scrub"),
             "apps/scrub/kustomization.yaml": "resources:\n  - cronjob.yaml\n  - scripts.yaml\n",
             "apps/scrub/cronjob.yaml": yaml.safe_dump(cronjob()),
             "apps/scrub/scripts.yaml": yaml.safe_dump({**configmap(
                 script="printf 'https://x-access-token:%s@github.com' \"$TOKEN\""),
                 "metadata": {"name": "scripts", "namespace": "kube-system"}})}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    result = run_cli("validate", str(root), "-o", "json", "--no-compat")
    findings = json.loads(result.stdout)["findings"]
    assert [f for f in findings if f["severity"] in ("error", "warning")] == [], result.stdout
    # the same CronJob in a folder kubectl-triton manages is judged
    targets = [type("T", (), {"rel": "base/maintenance", "objects": [cronjob()]})(),
               type("T", (), {"rel": "apps/scrub", "objects": [cronjob()]})()]
    assert {f.path for f in security.check(root, targets)} == {"base/maintenance"}


def node_exporter(image: str = "quay.io/prometheus/node-exporter:v1.8.2", name: str = "node-exporter") -> dict:
    """A user's node-level DaemonSet: host namespaces, a host port, the host's root filesystem, privileged."""
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-exporter"},
            "spec": {"selector": {"matchLabels": {"app": "node-exporter"}}, "template": {
                "metadata": {"labels": {"app": "node-exporter"}},
                "spec": {"hostNetwork": True, "hostPID": True,
                         "containers": [{"name": name, "image": image, "args": ["--path.rootfs=/host"],
                                         "ports": [{"containerPort": 9100, "hostPort": 9100}],
                                         "securityContext": {"privileged": True},
                                         "volumeMounts": [{"name": "root", "mountPath": "/host", "readOnly": True}]}],
                         "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}}}


def _node_tools(root: Path, daemonset: dict) -> Path:
    """A Flux fleet (not one kubectl-triton manages) whose node tooling in kube-system is privileged: a node
    exporter, a ZFS scrub CronJob and a ConfigMap of scripts writing git credentials from the environment."""
    files = {"kubectl-triton.yaml": LAYOUT,
             "clusters/prod/node-tools.yaml": FLUX_KS.format(name="node-tools", path="./apps/kube-system/node-tools"),
             "apps/kube-system/node-tools/kustomization.yaml": "namespace: kube-system\nresources:\n"
                                                               "  - daemonset.yaml\n  - cronjob.yaml\n"
                                                               "  - scripts.yaml\n",
             "apps/kube-system/node-tools/daemonset.yaml": yaml.safe_dump(daemonset),
             "apps/kube-system/node-tools/cronjob.yaml": yaml.safe_dump(cronjob()),
             "apps/kube-system/node-tools/scripts.yaml": yaml.safe_dump(configmap(
                 script="printf 'https://x-access-token:%s@github.com\\n' \"$GITHUB_TOKEN\" > ~/.git-credentials",
                 clone="git clone https://oauth2:${GITLAB_TOKEN}@gitlab.com/x/y.git"))}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_survey_repro_security_non_triton(run_cli, tmp_path, monkeypatch):
    """The user's own privileged workloads in a Flux fleet are theirs: no pod check, and validate passes."""
    monkeypatch.chdir(_node_tools(tmp_path / "repo", node_exporter()))
    result = run_cli("validate", ".", "-o", "json", "--no-compat")
    found = [f for f in json.loads(result.stdout)["findings"] if f["code"] in POD_CODES]
    assert found == [] and result.exit_code == 0, result.stdout


def test_survey_repro_security_triton_is_judged(run_cli, tmp_path, monkeypatch):
    """The same DaemonSet running tritonserver is Triton's: judged, and validate fails."""
    monkeypatch.chdir(_node_tools(tmp_path / "repo", node_exporter("nvcr.io/nvidia/tritonserver:24.12-py3",
                                                                   "tritonserver")))
    result = run_cli("validate", ".", "-o", "json", "--no-compat")
    found = {(f["code"], f["object"]) for f in json.loads(result.stdout)["findings"] if f["code"] in POD_CODES}
    assert {(code, "DaemonSet/kube-system/node-exporter") for code in
            ("HostNamespaces", "HostPort", "Privileged", "VolumeType")} <= found, result.stdout
    assert not [o for _, o in found if "zfs-scrub" in o]  # the user's CronJob beside it stays the user's
    assert result.exit_code == 1


def test_pod_checks_still_judge_the_example_repositorys_overlays(rendered):
    dep = next(o for o in rendered["overlays/image-classifier/l4"] if o["kind"] == "Deployment")
    bad = json.loads(json.dumps(dep))
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = True
    assert "Privileged" in codes(check_objects("overlays/image-classifier/l4", [bad], managed=False))


def test_the_managed_folders_come_from_the_layout_file(tmp_path: Path):
    (tmp_path / "kubectl-triton.yaml").write_text("paths:\n  overlays: deploy/triton/overlays\n  bases: deploy/base\n")
    targets = [type("T", (), {"rel": rel, "objects": [cronjob()]})()
               for rel in ("deploy/triton/overlays/m/l4", "deploy/base/triton", "overlays/m/l4", "deploy/other")]
    assert sorted({f.path for f in security.check(tmp_path, targets)}) == ["deploy/base/triton",
                                                                         "deploy/triton/overlays/m/l4"]
