"""`validate --server` against a real kube-apiserver, and the gate's own simulation checked against it.

Each case mutates a copy of this repository and runs `validate --server` (an ephemeral etcd + kube-apiserver built
by `make controlplane`) once: its findings hold both the static gate's and the API server's, and the case asserts
what each says. Where the static gate and the
API server disagree, the case says so and why (the `static` column is None: only the server can judge it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import cluster as real

pytestmark = pytest.mark.usefixtures("_assets")


@pytest.fixture(scope="module")
def _assets() -> None:
    real.assets()


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert text.count(old) >= count, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, count))


def _findings(run_cli, repo: Path, *args: str) -> list[dict]:
    result = run_cli("validate", str(repo), "-o", "json", *args)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["findings"]


def _codes(findings: list[dict], severity: str = "error") -> set[str]:
    return {f["code"] for f in findings if f["severity"] == severity}


SERVER_CODES = {"ServerRejected", "PodSecurityRefused"}


def test_this_repository_is_accepted_by_the_api_server(run_cli, repo_copy: Path):
    findings = _findings(run_cli, repo_copy, "--server")
    assert not _codes(findings) & SERVER_CODES, [f["message"] for f in findings if f["code"] in SERVER_CODES]
    # Every custom resource met a CRD: Flux's own, the Prometheus operator's (kube-prometheus-stack), KEDA's...
    not_checked = [f for f in findings if f["code"] == "ServerNotChecked"]
    assert all("nvidia.com" in f["message"] or "nfd.k8s-sigs.io" in f["message"] for f in not_checked), not_checked


TRITON = "base/triton/deployment.yaml"
CASES = [
    # (id, file, old, new, what static validate reports, what the API server reports, a word of its message)
    ("unknown-field-builtin", TRITON, "      terminationGracePeriodSeconds: 60",
     "      terminationGracePeriodSeconds: 60\n      terminationGraceSeconds: 60",
     "SchemaInvalid", "ServerRejected", ".spec.template.spec.terminationGraceSeconds: field not declared in schema"),
    ("unknown-field-crd", "base/triton/servicemonitor.yaml", "  endpoints:\n", "  endpoints:\n    - scrapeEvery: 5s\n",
     "SchemaInvalid", "ServerRejected", "scrapeEvery: field not declared in schema"),
    ("namespace-missing", "base/platform/kustomization.yaml", "  - namespace.yaml\n", "",
     "NamespaceMissing", "ServerRejected", "namespace triton does not exist"),
    ("privileged-pod-in-restricted-namespace", TRITON, "            allowPrivilegeEscalation: false",
     "            allowPrivilegeEscalation: true", "PrivilegeEscalation", "PodSecurityRefused",
     "allowPrivilegeEscalation"),
    # Only the server: field rules no OpenAPI schema expresses (the API server's validation code).
    ("request-above-limit", TRITON, "              memory: 64Mi", "              memory: 512Mi",
     None, "ServerRejected", "must be less than or equal to memory limit"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_static_gate_and_api_server_agree(run_cli, repo_copy: Path, case):
    _id, rel, old, new, static_code, server_code, words = case
    _edit(repo_copy / rel, old, new)
    served = _findings(run_cli, repo_copy, "--server")
    static = [f for f in served if f["code"] not in SERVER_CODES | {"ServerWarning", "ServerNotChecked"}]
    refusals = [f for f in served if f["code"] == server_code and f["severity"] == "error"]
    assert refusals and any(words in f["message"] for f in refusals), [f["message"] for f in served
                                                                        if f["code"] in SERVER_CODES]
    assert all(f["object"] and f["path"] and "Kustomization flux-system/" in f["message"] for f in refusals)
    if static_code is None:
        assert not _codes(static), static  # the static gate cannot see it: documented on ServerRejected
    else:
        assert static_code in _codes(static), sorted(_codes(static))


def test_no_binaries_is_one_line_naming_how_to_get_them(run_cli, repo_copy: Path, monkeypatch, tmp_path):
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    result = run_cli("validate", str(repo_copy), "--server")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: KUBEBUILDER_ASSETS={tmp_path} has no etcd, kube-apiserver")
    assert "make controlplane" in result.stderr and "Traceback" not in result.stderr


def test_crds_folder_brings_the_crds_of_charts_and_the_rest_is_not_checked(run_cli, repo_copy: Path, tmp_path):
    # A CI job with setup-envtest's binaries and only the Prometheus operator's CRDs downloaded (--crds): the
    # ServiceMonitor meets its schema, Flux's and KEDA's objects are named as not checked, never passed silently.
    crds = tmp_path / "crds"
    found = real.assets().crds
    assert found is not None, "make controlplane copies the CRD manifests into its cache"
    source = found / "github.com/prometheus-operator/prometheus-operator"
    crds.mkdir()
    for path in source.glob("*servicemonitors.yaml"):
        (crds / path.name).write_text(path.read_text())
    (crds / "README.md").write_text("not a manifest")
    _edit(repo_copy / "base/triton/servicemonitor.yaml", "  endpoints:\n", "  endpoints:\n    - scrapeEvery: 5s\n")
    findings = _findings(run_cli, repo_copy, "--server", "--crds", str(crds))
    assert any(f["code"] == "ServerRejected" and "scrapeEvery: field not declared in schema" in f["message"]
               for f in findings)
    not_checked = " ".join(f["message"] for f in findings if f["code"] == "ServerNotChecked")
    assert "kustomize.toolkit.fluxcd.io" in not_checked or "source.toolkit.fluxcd.io" in not_checked, not_checked
    assert "leaderworkerset.x-k8s.io" in not_checked  # the lws chart's CRD, not among the --crds given


@pytest.mark.parametrize("args, words", [
    (("--crds", "no-such-folder"), "--crds no-such-folder: no such directory"),
    (("--crds", ".", "--context", "kind-x"), "--crds applies to the ephemeral API server only"),
])
def test_crds_folder_usage_errors_are_one_line(run_cli, repo_copy: Path, args, words):
    result = run_cli("validate", str(repo_copy), "--server", *args)
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
