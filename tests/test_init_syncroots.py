"""`kubectl triton init` places its Flux objects where Flux really syncs (issue 28): the sync root a FluxInstance
(also as the flux-instance chart's HelmRelease values) or the bootstrap Kustomization names, never the first folder
called flux-system (a namespace folder, an archived base). What init writes must be in the sync root's build as
kustomize-controller builds it (a generated kustomization.yaml where the folder has none), and after add-model the
model's Deployment too. Synthetic repositories in the shapes of the public fleets of
../shared/conformance/flux-fleets, then the fleets themselves."""

from __future__ import annotations

import importlib.util
import json
import os
import posixpath
import shutil
import stat
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubectl_triton.compat import catalog
from tests.conftest import REPO, SHARED

FLEETS = SHARED / "conformance" / "flux-fleets"
ONNX = ["--backend", "onnxruntime", "--gpu", "l4", "--input", "input:FP32:3,224,224", "--output", "probs:FP32:1000"]
FLUX = "kustomize.toolkit.fluxcd.io/v1"

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) is not on PATH")


def _survey() -> Any:
    """tools/fleet_survey.py: its Fleet builds a folder as kustomize-controller does."""
    spec = importlib.util.spec_from_file_location("fleet_survey", REPO / "tools" / "fleet_survey.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fleet_survey", module)
    spec.loader.exec_module(module)
    return module


SURVEY = _survey()


@pytest.fixture(autouse=True)
def _catalog_restored():
    yield
    catalog.register(())


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def ks(name: str, path: str, *, namespace: str = "flux-system", extra: str = "") -> str:
    return (f"apiVersion: {FLUX}\nkind: Kustomization\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"
            f"spec:\n  interval: 1h\n  path: {path}\n  prune: true\n  sourceRef:\n    kind: GitRepository\n"
            f"    name: flux-system\n    namespace: flux-system\n{extra}")


def listing(*resources: str, namespace: str | None = None) -> str:
    head = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
    if namespace:
        head += f"namespace: {namespace}\n"
    return head + ("resources:\n" + "".join(f"  - {r}\n" for r in resources) if resources else "resources: []\n")


def created(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def flux_build(root: Path, rel: str) -> Any:
    """Folder `rel` as kustomize-controller builds it."""
    runner = SURVEY.Runner("kubectl-triton", dict(os.environ), 300, False)
    return SURVEY.Fleet(root, runner).build(rel, {})


def reach(root: Path, sync_path: str, artifact_root: str = "", source: str = "GitRepository/flux-system"
          ) -> tuple[dict[str, dict[str, Any]], set[str], list[str]]:
    """What the sync root applies, one level of Flux Kustomizations deep: the Flux Kustomizations by name (of the
    root and of the paths they apply), the Deployments, and the build errors of the sync root itself."""
    runner = SURVEY.Runner("kubectl-triton", dict(os.environ), 300, False)
    fleet = SURVEY.Fleet(root, runner)
    top = fleet.build(sync_path, {})
    kustomizations: dict[str, dict[str, Any]] = {}
    deployments: set[str] = set()
    queue = [top]
    for depth in range(2):
        following = []
        for built in queue:
            for doc in built.docs:
                meta = doc.get("metadata") or {}
                if doc.get("kind") == "Deployment":
                    deployments.add(str(meta.get("name")))
                if not SURVEY.is_flux_ks(doc):
                    continue
                kustomizations[str(meta.get("name"))] = doc
                spec = doc.get("spec") or {}
                ref = spec.get("sourceRef") or {}
                if depth == 0 and f"{ref.get('kind')}/{ref.get('name')}" == source and not spec.get("kubeConfig"):
                    path = posixpath.normpath(posixpath.join(artifact_root, str(spec.get("path") or ".")))
                    following.append(fleet.build(path, {}))
        queue = following
    return kustomizations, deployments, [top.error] if top.error else []


def assert_model_reachable(run_cli, root: Path, *sync_paths: str, artifact_root: str = "",
                           source: str = "GitRepository/flux-system") -> None:
    """add-model, then: one of `sync_paths` applies the model's Flux Kustomization, the platform and what the model
    waits for, and the model's Deployment."""
    added = run_cli("add-model", "resnet", "--repo", str(root), *ONNX)
    assert added.exit_code == 0, added.stderr
    layout = yaml.safe_load((root / "kubectl-triton.yaml").read_text())
    seen = {}
    for sync_path in sync_paths:
        kustomizations, deployments, errors = reach(root, sync_path, artifact_root, source)
        seen[sync_path] = sorted(kustomizations)
        model = kustomizations.get("resnet-l4")
        if model is None:
            continue
        assert not errors, errors
        assert layout["flux"]["platform"] in kustomizations
        missing = [d["name"] for d in model["spec"].get("dependsOn") or [] if d["name"] not in kustomizations]
        assert not missing, f"resnet-l4 waits for {missing}, which {sync_path} does not apply"
        assert "resnet-triton" in deployments
        return
    pytest.fail(f"no sync root applies resnet-l4: {seen}")


# ---- home-ops: a FluxInstance as the flux-instance chart's HelmRelease values --------------------------------------

HOME_OPS = {
    "kubernetes/apps/flux-system/kustomization.yaml": listing("./flux-instance/ks.yaml", namespace="flux-system"),
    "kubernetes/apps/flux-system/flux-instance/ks.yaml": ks("flux-instance",
                                                            "./kubernetes/apps/flux-system/flux-instance/app"),
    "kubernetes/apps/flux-system/flux-instance/app/kustomization.yaml": listing("helmrelease.yaml"),
    "kubernetes/apps/flux-system/flux-instance/app/helmrelease.yaml": """
        apiVersion: helm.toolkit.fluxcd.io/v2
        kind: HelmRelease
        metadata:
          name: flux-instance
        spec:
          interval: 1h
          chartRef:
            kind: OCIRepository
            name: flux-instance
          values:
            instance:
              sync:
                kind: GitRepository
                url: https://example.com/home-ops.git
                ref: refs/heads/main
                path: kubernetes/flux/cluster
        """,
    "kubernetes/apps/kustomization.yaml": listing("./flux-system"),
    "kubernetes/components/alerts/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\n"
                                                       "kind: Component\nresources: []\n",
    "kubernetes/flux/cluster/ks.yaml": ks("cluster-apps", "./kubernetes/apps"),
}


def test_a_flux_instance_in_helm_values_is_the_cluster_folder(run_cli, tmp_path):
    """The namespace folder kubernetes/apps/flux-system is no bootstrap folder: the FluxInstance's sync path is."""
    root = write(tmp_path / "home-ops", HOME_OPS)
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    assert "placed under the sync root kubernetes/flux/cluster (HelmRelease flux-instance" in result.stderr
    assert "bootstrap" not in result.stderr.replace("bootstrap folder", "")
    new = created(root)
    assert {"kubernetes/flux/cluster/platform.yaml", "kubernetes/flux/cluster/monitoring.yaml",
            "kubernetes/flux/cluster/models/kustomization.yaml"} <= new
    assert not [p for p in new if p.startswith(("clusters/", "infrastructure/", "kubernetes/flux/platform"))]
    layout = yaml.safe_load((root / "kubectl-triton.yaml").read_text())
    assert layout["paths"]["clusters"] == "kubernetes/flux"
    kustomizations, _, errors = reach(root, "kubernetes/flux/cluster")
    assert not errors and {"cluster-apps", "platform", "monitoring"} <= set(kustomizations)
    assert_model_reachable(run_cli, root, "kubernetes/flux/cluster")
    again = run_cli("init", str(root), "--gpu", "l4")
    assert again.exit_code == 0 and "nothing to write" in again.stderr, again.stderr


def test_a_flux_instance_object_and_a_sync_path_with_its_own_kustomization(run_cli, tmp_path):
    """FluxInstance (fluxcd.controlplane.io/v1) syncing a folder with a kustomization.yaml: init lists its files
    there, as for a cluster folder's kustomization.yaml."""
    root = write(tmp_path / "fleet", {
        "kubernetes/main/apps/flux-system/flux-instance/app/flux-instance.yaml": """
            apiVersion: fluxcd.controlplane.io/v1
            kind: FluxInstance
            metadata:
              name: flux
              namespace: flux-system
            spec:
              distribution:
                version: 2.x
              sync:
                kind: GitRepository
                url: https://example.com/fleet.git
                ref: refs/heads/main
                path: ./kubernetes/main/flux
            """,
        "kubernetes/main/apps/flux-system/flux-instance/app/kustomization.yaml": listing("flux-instance.yaml"),
        "kubernetes/main/flux/kustomization.yaml": listing("./flux-sync.yaml"),
        "kubernetes/main/flux/flux-sync.yaml": ks("flux-apps", "./kubernetes/main/apps"),
    })
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    listed = yaml.safe_load((root / "kubernetes/main/flux/kustomization.yaml").read_text())["resources"]
    assert listed == ["./flux-sync.yaml", "platform.yaml", "monitoring.yaml", "models"]
    kustomizations, _, errors = reach(root, "kubernetes/main/flux")
    assert not errors and {"flux-apps", "platform", "monitoring"} <= set(kustomizations)
    assert_model_reachable(run_cli, root, "kubernetes/main/flux")


def test_a_top_level_sync_root_and_namespaces_from_parent_kustomizations(run_cli, tmp_path):
    """A FluxInstance syncing apps/ (the repository's top folder holds the cluster folder); a Kustomization whose
    namespace comes from its parent kustomization.yaml is not one the models can wait for (dependsOn names
    flux-system's)."""
    instance = HOME_OPS["kubernetes/apps/flux-system/flux-instance/app/helmrelease.yaml"].replace(
        "path: kubernetes/flux/cluster", "path: apps/")
    root = write(tmp_path / "top", {
        "apps/flux-system/flux-instance/app/helmrelease.yaml": instance,
        "apps/flux-system/flux-instance/app/kustomization.yaml": listing("helmrelease.yaml"),
        "apps/flux-system/flux-instance/ks.yaml": ks("flux-instance", "./apps/flux-system/flux-instance/app"),
        "apps/flux-system/kustomization.yaml": listing("./flux-instance/ks.yaml", namespace="flux-system"),
        "apps/storage/kustomization.yaml": listing("./infra-storage/ks.yaml", namespace="storage"),
        "apps/storage/infra-storage/ks.yaml": ks("infra-storage", "./apps/storage/infra-storage/app").replace(
            "  namespace: flux-system\nspec", "spec"),
        "apps/storage/infra-storage/app/kustomization.yaml": listing(),
    })
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    assert "placed under the sync root apps (HelmRelease flux-instance" in result.stderr
    assert {"apps/platform.yaml", "apps/monitoring.yaml", "apps/models/kustomization.yaml"} <= created(root)
    assert yaml.safe_load((root / "kubectl-triton.yaml").read_text())["paths"]["clusters"] == "."
    assert "models wait for: platform)" in result.stderr  # storage/infra-storage is in another namespace
    assert_model_reachable(run_cli, root, "apps")


# ---- several clusters, development environments, archives ----------------------------------------------------------

def _instance(path: str, *, kind: str = "GitRepository", url: str = "https://example.com/r.git") -> str:
    return (f"apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\nmetadata:\n  name: flux\n"
            f"  namespace: flux-system\nspec:\n  sync:\n    kind: {kind}\n    url: {url}\n    ref: main\n"
            f"    path: {path}\n")


def two_clusters(root: Path, *, dev: bool = False) -> Path:
    files = {f"kubernetes/{c}/apps/flux-system/flux-instance.yaml": _instance(f"kubernetes/{c}/flux")
             for c in ("main", "utility")}
    files.update({f"kubernetes/{c}/flux/apps.yaml": ks(f"{c}-apps", f"./kubernetes/{c}/apps")
                  for c in ("main", "utility")})
    if dev:
        files = {k: v for k, v in files.items() if "/utility/" not in k}
        files["devenv/oci/apps/flux-instance.yaml"] = _instance("./devenv/oci/flux", kind="OCIRepository",
                                                                url="oci://homeops-kind-registry:5000/devenv")
        files["devenv/oci/flux/apps.yaml"] = ks("dev-apps", "./devenv/oci/apps")
    return write(root, files)


def test_several_sync_roots_ask_for_cluster_by_path_or_name(run_cli, tmp_path):
    root = two_clusters(tmp_path / "fleet")
    asked = run_cli("init", str(root), "--gpu", "l4")
    assert asked.exit_code == 2 and not (root / "kubectl-triton.yaml").exists()
    first = asked.stderr.splitlines()[0]
    assert first == ("error: several cluster folders (main, utility) are sync roots: kubernetes/main/flux, "
                     "kubernetes/utility/flux; name one with --cluster"), asked.stderr
    ambiguous = run_cli("init", str(root), "--gpu", "l4", "--cluster", "flux")
    assert ambiguous.exit_code == 2 and "names several sync roots" in ambiguous.stderr
    unknown = run_cli("init", str(root), "--gpu", "l4", "--cluster", "kubernetes/nowhere")
    assert unknown.exit_code == 2 and "not a sync root" in unknown.stderr
    for how, wanted in (("label", "utility"), ("path", "./kubernetes/utility/flux/")):
        copy = tmp_path / how
        shutil.copytree(root, copy)
        chosen = run_cli("init", str(copy), "--gpu", "l4", "--cluster", wanted)
        assert chosen.exit_code == 0, chosen.stderr
        assert (copy / "kubernetes/utility/flux/platform.yaml").is_file()
        assert not (copy / "kubernetes/main/flux/platform.yaml").exists()
        assert "other sync roots: kubernetes/main/flux (--cluster main)" in chosen.stderr
    assert_model_reachable(run_cli, tmp_path / "label", "kubernetes/utility/flux")


def test_a_development_only_sync_root_counts_only_without_another(run_cli, tmp_path):
    root = two_clusters(tmp_path / "fleet", dev=True)
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    assert (root / "kubernetes/main/flux/platform.yaml").is_file() and not (root / "devenv/oci/flux/platform.yaml"
                                                                            ).exists()
    assert "development-only sync roots left out: devenv/oci/flux" in result.stderr


def test_archived_flux_system_folders_are_never_the_cluster_folder(run_cli, tmp_path):
    archived = {".archive/old/apps/base/flux-system/kustomization.yaml": listing(),
                "kubernetes/apps/kustomization.yaml": listing()}
    bootstrapped = write(tmp_path / "bootstrapped", {
        **archived,
        "kubernetes/clusters/one/flux-system/gotk-components.yaml": "# flux bootstrap writes this\n",
        "kubernetes/clusters/one/flux-system/gotk-sync.yaml": ks("flux-system", "./kubernetes/clusters/one"),
        "kubernetes/clusters/one/flux-system/kustomization.yaml": listing("gotk-sync.yaml"),
        "kubernetes/clusters/one/apps.yaml": ks("cluster", "./kubernetes/apps"),
    })
    result = run_cli("init", str(bootstrapped), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    assert "placed under the sync root kubernetes/clusters/one" in result.stderr
    assert not [p for p in created(bootstrapped) if p.startswith(".archive/") and "flux-system" not in p]
    assert "bootstrap Flux" not in result.stderr
    assert_model_reachable(run_cli, bootstrapped, "kubernetes/clusters/one")
    # nothing says what Flux syncs: .archive/ is still never it
    plain = write(tmp_path / "plain", {**archived,
                                       "kubernetes/clusters/one/ks.yaml": ks("cluster", "./kubernetes/apps")})
    result = run_cli("init", str(plain), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    assert (plain / "kubernetes/clusters/one/platform.yaml").is_file()
    assert not [p for p in created(plain) if p.startswith(".archive/") and "flux-system" not in p]


# ---- hub and spoke -----------------------------------------------------------------------------------------------

HUB = {
    "hub/flux-system/gotk-components.yaml": "# This file will be generated automatically by flux bootstrap.\n",
    "hub/flux-system/gotk-sync.yaml": "# This file will be generated automatically by flux bootstrap.\n",
    "hub/flux-system/kustomization.yaml": listing(),
    "hub/production.yaml": "---\n".join(
        ks(name, f"./clusters/production/{name}", namespace="production",
           extra="  kubeConfig:\n    secretRef:\n      name: cluster-kubeconfig\n")
        for name in ("infra-controllers", "infra-configs", "apps")),
    "clusters/production/infra-controllers/kustomization.yaml": listing("../../../deploy/infra-controllers"),
    "clusters/production/infra-configs/kustomization.yaml": listing(),
    "clusters/production/apps/kustomization.yaml": listing(),
    "deploy/infra-controllers/kustomization.yaml": listing(),
}


def test_hub_and_spoke_places_under_the_hub_and_never_advises_bootstrap(run_cli, tmp_path):
    root = write(tmp_path / "hub-spoke", HUB)
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    assert "placed under the sync root hub (flux bootstrap folder hub/flux-system/)" in result.stderr
    assert "spec.kubeConfig" in result.stderr and "flux bootstrap github" not in result.stderr
    new = created(root)
    assert {"hub/platform.yaml", "hub/monitoring.yaml", "hub/models/kustomization.yaml"} <= new
    assert not [p for p in new if p.startswith(("clusters/production/platform", "clusters/production/models",
                                                "infrastructure/"))]
    # the spokes' infrastructure is not the hub's: the models wait only for the platform
    assert "models wait for: platform)" in result.stderr
    kustomizations, _, errors = reach(root, "hub")
    assert not errors and {"platform", "monitoring", "infra-configs"} <= set(kustomizations)
    assert_model_reachable(run_cli, root, "hub")


# ---- what the source's artifact holds ------------------------------------------------------------------------------

def test_sourceignore_that_leaves_inits_folders_out_gets_them_back(run_cli, tmp_path):
    root = write(tmp_path / "fleet", {
        ".sourceignore": "# Exclude all\n/*\n\n# Include manifest directories\n!/apps/\n!/clusters/\n",
        "clusters/production/flux-system/gotk-sync.yaml": ks("flux-system", "./clusters/production"),
        "clusters/production/apps.yaml": ks("apps", "./apps"),
        "apps/kustomization.yaml": listing(),
    })
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    assert "updated .sourceignore" in result.stdout
    assert (root / ".sourceignore").read_text().endswith("!/base/\n!/overlays/\n!/models/\n")
    again = run_cli("init", str(root), "--gpu", "l4")
    assert again.exit_code == 0 and "nothing to write" in again.stderr


def test_spec_ignore_of_the_sync_source_moves_inits_folders_inside_the_artifact(run_cli, tmp_path):
    instance = _instance("./kubernetes/main/flux") + textwrap.indent(textwrap.dedent("""
        kustomize:
          patches:
            - patch: |
                - op: add
                  path: /spec/ignore
                  value: |
                    /*
                    !/kubernetes
              target:
                kind: GitRepository
                name: flux-system
        """), "  ")
    root = write(tmp_path / "fleet", {"kubernetes/main/apps/flux-instance.yaml": instance,
                                      "kubernetes/main/flux/apps.yaml": ks("apps", "./kubernetes/main/apps")})
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    assert "init writes its bases, overlays and models under kubernetes/triton/" in result.stderr
    assert (root / "kubernetes/triton/base/platform/kustomization.yaml").is_file() and not (root / "base").exists()
    platform = yaml.safe_load((root / "kubernetes/main/flux/platform.yaml").read_text())
    assert platform["spec"]["path"] == "./kubernetes/triton/base/platform"
    assert_model_reachable(run_cli, root, "kubernetes/main/flux")
    assert (root / "kubernetes/triton/overlays/resnet/l4/kustomization.yaml").is_file()


def test_an_oci_artifact_pushed_from_a_sub_folder_holds_the_model(run_cli, tmp_path):
    """`flux push artifact --path=./kubernetes`: init's files go inside kubernetes/ and every spec.path it or
    add-model writes is relative to it (flux.artifactRoot), so the sync root applies the model."""
    root = write(tmp_path / "oci", {
        "kubernetes/clusters/one/flux-system/values.yaml": "instance:\n  sync:\n    kind: OCIRepository\n"
                                                           "    url: oci://ghcr.io/o/r\n    path: ./clusters/one\n",
        "kubernetes/clusters/one/ks.yaml": ks("apps", "./apps").replace("kind: GitRepository", "kind: OCIRepository"),
        "kubernetes/apps/kustomization.yaml": listing("cm.yaml"),
        "kubernetes/apps/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: default\n",
    })
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    assert "spec.path relative to kubernetes/ (flux.artifactRoot" in result.stderr
    layout = yaml.safe_load((root / "kubectl-triton.yaml").read_text())
    assert layout["flux"]["artifactRoot"] == "kubernetes" and layout["paths"]["bases"] == "kubernetes/triton/base"
    platform = yaml.safe_load((root / "kubernetes/clusters/one/platform.yaml").read_text())
    assert platform["spec"]["path"] == "./triton/base/platform"
    assert_model_reachable(run_cli, root, "kubernetes/clusters/one", artifact_root="kubernetes",
                           source="OCIRepository/flux-system")
    model = yaml.safe_load((root / "kubernetes/clusters/one/models/resnet-l4.yaml").read_text())
    assert model["spec"]["path"] == "./triton/overlays/resnet/l4"
    findings = json.loads(run_cli("validate", str(root), "-o", "json", "--no-compat").stdout)["findings"]
    assert [f for f in findings if f["severity"] == "error"] == []
    model_file = root / "kubernetes/clusters/one/models/resnet-l4.yaml"
    model_file.write_text(model_file.read_text().replace("./triton/", "./kubernetes/triton/"))
    findings = json.loads(run_cli("validate", str(root), "-o", "json", "--no-compat").stdout)["findings"]
    assert ("FluxPathInvalid", "error") in {(f["code"], f["severity"]) for f in findings}


# ---- the public fleets -------------------------------------------------------------------------------------------

ROWS = json.loads((FLEETS / "SOURCES.json").read_text()) if (FLEETS / "SOURCES.json").is_file() else []


@pytest.mark.parametrize("row", ROWS or [None], ids=[r["folder"] for r in ROWS] or ["no-corpus"])
def test_the_public_fleets_deploy_the_model_where_flux_syncs(run_cli, tmp_path, row):
    if row is None:
        pytest.skip(f"{FLEETS} is absent (the public Flux fleets of issue 28 are not beside this checkout)")
    root = tmp_path / row["folder"]
    shutil.copytree(FLEETS / row["folder"], root, symlinks=True)
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    roots = [r for r in row["sync_roots"] if not r.get("dev_only")]
    result = run_cli("init", str(root), "--gpu", "l4")
    if result.exit_code == 2 and "name one with --cluster" in result.stderr:
        result = run_cli("init", str(root), "--gpu", "l4", "--cluster", roots[0]["path"])
    assert result.exit_code == 0, result.stderr
    assert "bootstrap Flux with" not in result.stderr and not (root / "infrastructure/helmrelease-keda.yaml").exists()
    assert_model_reachable(run_cli, root, *(r["path"] for r in roots), source=roots[0]["source"],
                           artifact_root=roots[0].get("artifact_root", ""))
