"""checks/security.py: Pod Security Standards "restricted" (+ read-only root), NetworkPolicy shape, literal
credentials, the opt-out annotation; and `validate` running it on the example repository."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kubectl_triton.checks.manifests import security
from kubectl_triton.checks.manifests.security import EXEMPT_ANNOTATION, check_model_metadata, check_objects


def codes(findings) -> list[str]:
    return sorted(f.code.removeprefix("security.") for f in findings)


def test_example_repository_is_clean(rendered):
    for rel, objects in rendered.items():
        assert check_objects(rel, objects) == [], rel
    assert check_model_metadata(Path(__file__).resolve().parents[1]) == []


@pytest.fixture
def overlay(rendered) -> list[dict]:
    return copy.deepcopy(rendered["overlays/image-classifier/l4"])


def _dep(objects: list[dict]) -> dict:
    return next(o for o in objects if o["kind"] == "Deployment")


def _server(objects: list[dict]) -> dict:
    return next(c for c in _dep(objects)["spec"]["template"]["spec"]["containers"] if c["name"] == "tritonserver")


@pytest.mark.parametrize("mutate, expected", [
    (lambda d, s: s["securityContext"].update(allowPrivilegeEscalation=True), ["PrivilegeEscalation"]),
    (lambda d, s: s["securityContext"].update(privileged=True), ["Privileged"]),
    (lambda d, s: s["securityContext"].update(readOnlyRootFilesystem=False), ["ReadOnlyRootFilesystem"]),
    (lambda d, s: s["securityContext"].update(capabilities={"drop": ["NET_RAW"]}), ["Capabilities"]),
    (lambda d, s: s["securityContext"].update(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
     ["Capabilities"]),
    (lambda d, s: s["securityContext"].update(runAsUser=0), ["RunAsNonRoot"]),
    (lambda d, s: s["securityContext"].update(seccompProfile={"type": "Unconfined"}), ["Seccomp"]),
    (lambda d, s: d["spec"]["template"]["spec"].update(hostNetwork=True), ["HostNamespaces"]),
    (lambda d, s: d["spec"]["template"]["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
     ["VolumeType"]),
    (lambda d, s: s["ports"][0].update(hostPort=8000), ["HostPort"]),
    (lambda d, s: d["spec"]["template"]["spec"].pop("automountServiceAccountToken"), ["ServiceAccountToken"]),
    (lambda d, s: s["env"].append({"name": "AWS_SECRET_ACCESS_KEY", "value": "wJalrXUtnFEMI/K7MDENG"}),
     ["LiteralCredential"]),
    (lambda d, s: s["args"].append("--repo=s3://alice:hunter22@minio.local/models"), ["LiteralCredential"]),
    # Pod Security "baseline" (k8s.io/pod-security-admission policy/check_*.go)
    (lambda d, s: s["securityContext"].update(appArmorProfile={"type": "Unconfined"}), ["AppArmor"]),
    (lambda d, s: d["spec"]["template"]["spec"]["securityContext"].update(seLinuxOptions={"type": "spc_t"}),
     ["SELinux"]),
    (lambda d, s: s["securityContext"].update(seLinuxOptions={"user": "system_u", "type": "container_t"}),
     ["SELinux"]),
    (lambda d, s: d["spec"]["template"]["spec"]["securityContext"].update(
        sysctls=[{"name": "net.core.somaxconn", "value": "1024"}]), ["Sysctls"]),
    (lambda d, s: s["securityContext"].update(procMount="Unmasked"), ["ProcMount"]),
    (lambda d, s: s["securityContext"].update(windowsOptions={"hostProcess": True}), ["HostProcess"]),
    (lambda d, s: s["livenessProbe"]["httpGet"].update(host="10.0.0.1"), ["ProbeHost"]),
])
def test_pod_findings(overlay, mutate, expected):
    mutate(_dep(overlay), _server(overlay))
    assert codes(check_objects("o", overlay)) == expected


@pytest.mark.parametrize("mutate", [
    lambda d, s: s["securityContext"].update(appArmorProfile={"type": "RuntimeDefault"},
                                             seLinuxOptions={"type": "container_t"}, procMount="Default"),
    lambda d, s: d["spec"]["template"]["spec"]["securityContext"].update(
        sysctls=[{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]),
])
def test_what_pod_security_baseline_allows_passes(overlay, mutate):
    mutate(_dep(overlay), _server(overlay))
    assert codes(check_objects("o", overlay)) == []


def test_pod_without_any_security_context_gets_every_finding(overlay):
    pod = _dep(overlay)["spec"]["template"]["spec"]
    pod.pop("securityContext")
    for c in pod["containers"] + pod["initContainers"]:
        c.pop("securityContext")
    found = set(codes(check_objects("o", overlay)))
    assert {"RunAsNonRoot", "PrivilegeEscalation", "Capabilities", "Seccomp", "ReadOnlyRootFilesystem"} <= found


def test_secret_values_in_git(overlay):
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "model-store-credentials"},
              "stringData": {"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE"}}
    assert codes(check_objects("o", [*overlay, secret])) == ["SecretInGit"]
    sops = {**secret, "stringData": {"AWS_ACCESS_KEY_ID": "ENC[AES256_GCM,data:abc,type:str]"}, "sops": {}}
    assert codes(check_objects("o", [*overlay, sops])) == []


def test_credential_patterns_anywhere(overlay):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
          "data": {"notes": "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n", "hf": "hf_" + "a" * 34,
                   "password": "s3cr3t-value", "url": "https://$(USER):$(PASS)@host/"}}
    msgs = [f.message for f in check_objects("o", [*overlay, cm])]
    assert len(msgs) == 3, msgs
    assert any("private key" in m for m in msgs) and any("Hugging Face" in m for m in msgs)


def test_network_policy_missing_or_open(overlay):
    without = [o for o in overlay if o["kind"] != "NetworkPolicy"]
    assert codes(check_objects("o", without)) == ["NetworkPolicyMissing"]
    policy = next(o for o in overlay if o["kind"] == "NetworkPolicy")
    policy["spec"]["ingress"][0]["from"] = [{"namespaceSelector": {}}]
    assert codes(check_objects("o", overlay)) == ["NetworkPolicyOpen"]
    policy["spec"]["ingress"][0]["from"] = [{"ipBlock": {"cidr": "0.0.0.0/0"}}]
    assert codes(check_objects("o", overlay)) == ["NetworkPolicyOpen"]
    policy["spec"]["ingress"][0].pop("from")
    assert codes(check_objects("o", overlay)) == ["NetworkPolicyOpen"]


def test_metrics_only_from_monitoring(overlay):
    policy = next(o for o in overlay if o["kind"] == "NetworkPolicy")
    policy["spec"]["ingress"][0]["ports"].append({"port": "metrics"})
    assert codes(check_objects("o", overlay)) == ["MetricsExposed"]
    policy["spec"]["ingress"][0].pop("ports")  # all ports to the client namespaces
    assert codes(check_objects("o", overlay)) == ["MetricsExposed"]


def test_exemption_needs_codes_and_a_reason(overlay):
    dep = _dep(overlay)
    _server(overlay)["securityContext"]["readOnlyRootFilesystem"] = False
    ann = dep["metadata"].setdefault("annotations", {})
    ann[EXEMPT_ANNOTATION] = "ReadOnlyRootFilesystem: the vendor backend writes its JIT cache under /opt"
    assert check_objects("o", overlay) == []
    for bad in ("ReadOnlyRootFilesystem", "ReadOnlyRootFilesystem:", "ReadOnlyRootFilesystem: because",
                ": no code given at all here", "NoSuchCode: a long enough reason"):
        ann[EXEMPT_ANNOTATION] = bad
        assert codes(check_objects("o", overlay)) == ["ExemptionInvalid", "ReadOnlyRootFilesystem"], bad
    ann[EXEMPT_ANNOTATION] = "security.ReadOnlyRootFilesystem, Seccomp: the vendor backend writes under /opt"
    assert check_objects("o", overlay) == []


def test_model_metadata_credentials(tmp_path):
    (tmp_path / "models" / "m").mkdir(parents=True)
    meta = tmp_path / "models" / "m" / "model.yaml"
    meta.write_text("name: m\nartifacts:\n  source: s3\n  uri: s3://bucket/m\n  secret: model-store-credentials\n")
    assert check_model_metadata(tmp_path) == []
    meta.write_text("name: m\nartifacts:\n  source: s3\n  uri: s3://bucket/m\n  access_key_id: AKIAIOSFODNN7EXAMPLE\n"
                    "  secret_access_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")
    found = check_model_metadata(tmp_path)
    assert [(f.code, f.line) for f in found] == [("LiteralCredential", 5), ("LiteralCredential", 6)]
    meta.write_text(meta.read_text() + "annotations:\n  " + EXEMPT_ANNOTATION
                    + ": 'LiteralCredential: public MinIO demo keys, documented upstream'\n")
    assert check_model_metadata(tmp_path) == []


def test_validate_reports_security_findings(run_cli, repo_copy):
    dep = repo_copy / "base" / "triton" / "deployment.yaml"
    dep.write_text(dep.read_text().replace("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true"))
    res = run_cli("validate", str(repo_copy), "-o", "json", "--no-compat")
    assert res.exit_code == 1
    got = {f["code"] for f in json.loads(res.stdout)["findings"] if f["severity"] == "error"}
    assert got == {"PrivilegeEscalation"}


def test_documented_codes_and_annotation():
    doc = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert EXEMPT_ANNOTATION in doc
    for code in security.CODES:
        assert code in doc, code
