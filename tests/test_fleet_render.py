"""`validate` reads Flux objects as Flux builds and applies them (issue 28): the Kustomizations of a cluster folder
from its render (namespace and patches of the folder's kustomization in them) and, through every Kustomization of
the repository's source, from its path's render (those that exist only once a path is built included); a path
without kustomization.yaml built from the kustomization kustomize-controller generates; spec.components, patches,
targetNamespace and namePrefix in the build; postBuild variables substituted from `substitute` and ConfigMaps in
git (a Secret or no source: unknown, not an error); spokes of a hub (spec.kubeConfig) apart; an OCI artifact's
paths read below the folder it is pushed from. Synthetic repositories, then the survey's repros."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.gitops.model import envsubst, substitute_objects
from tests.conftest import SHARED

REPROS = SHARED / "conformance" / "flux-fleets" / "repros"

LAYOUT = "paths:\n  clusters: clusters\nflux:\n  sourceRef:\n    kind: GitRepository\n    name: flux-system\n"


def ks(name: str, path: str, namespace: str | None = "flux-system", extra: str = "",
       source: str = "GitRepository") -> str:
    meta = f"  namespace: {namespace}\n" if namespace else ""
    return (f"apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: {name}\n{meta}"
            f"spec:\n  interval: 1h\n  path: {path}\n  prune: true\n  sourceRef:\n    kind: {source}\n"
            f"    name: flux-system\n    namespace: flux-system\n{extra}")


def kust(body: str = "") -> str:
    return "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" + body


def cm(name: str, namespace: str | None = None, data: str = "{}") -> str:
    meta = f"  namespace: {namespace}\n" if namespace else ""
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{meta}data: {data}\n"


def svc(port: str = "80", meta: str = "", extra: str = "") -> str:
    return (f"apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: default\n{meta}spec:\n"
            f"  ports:\n    - port: {port}\n{extra}")


PROVIDES_TEAM = LAYOUT + "cluster:\n  provides:\n    namespaces: [team, team-a, team-b]\n"
DEPENDS_A = "  dependsOn:\n    - name: a\n      namespace: team\n"
BUILDS = {"team-a/cm.yaml": cm("a"), "team-a/kustomization.yaml": kust("resources:\n  - cm.yaml\n"),
          "team-b/cm.yaml": cm("b"), "team-b/kustomization.yaml": kust("resources:\n  - cm.yaml\n")}
SHARED_CM = {"apps/shared/cm.yaml": cm("shared"), "apps/shared/kustomization.yaml": kust("resources:\n  - cm.yaml\n")}
APP_CM = {"apps/app/cm.yaml": cm("${APP}-config"), "apps/app/kustomization.yaml": kust("resources:\n  - cm.yaml\n")}
PORT_SVC = {"apps/web/svc.yaml": svc("${PORT}"), "apps/web/kustomization.yaml": kust("resources:\n  - svc.yaml\n")}
VARS_CM = cm("cluster-vars", "flux-system", "{PORT: '8080'}")

# id, files (kubectl-triton.yaml: LAYOUT unless given), findings that must be there (code, object or path), codes
# that must not be there
CASES = [
    ("namespace-of-the-cluster-folder-kustomization", {
        "kubectl-triton.yaml": PROVIDES_TEAM,
        "clusters/prod/kustomization.yaml": kust("namespace: team\nresources:\n  - a.yaml\n  - b.yaml\n"),
        "clusters/prod/a.yaml": ks("a", "./team-a", None), "clusters/prod/b.yaml": ks("b", "./team-b", None,
                                                                                     DEPENDS_A), **BUILDS,
    }, [], {"FluxDependencyMissing"}),
    ("namespace-of-a-rendered-path", {
        "kubectl-triton.yaml": PROVIDES_TEAM,
        "clusters/prod/apps.yaml": ks("apps", "./apps"),
        "apps/kustomization.yaml": kust("namespace: team\nresources:\n  - a.yaml\n  - b.yaml\n"),
        "apps/a.yaml": ks("a", "./team-a", None), "apps/b.yaml": ks("b", "./team-b", None, DEPENDS_A), **BUILDS,
    }, [], {"FluxDependencyMissing"}),
    ("a-dependency-nothing-declares-is-still-an-error", {
        "kubectl-triton.yaml": PROVIDES_TEAM,
        "clusters/prod/apps.yaml": ks("apps", "./apps"),
        "apps/kustomization.yaml": kust("namespace: team\nresources:\n  - b.yaml\n"),
        "apps/b.yaml": ks("b", "./team-b", None, DEPENDS_A), **BUILDS,
    }, [("FluxDependencyMissing", "Kustomization/team/b")], set()),
    ("a-kustomization-that-only-a-path-declares", {
        "clusters/prod/apps.yaml": ks("apps", "./apps"),
        "clusters/prod/late.yaml": ks("late", "./late", extra="  dependsOn:\n    - name: operator\n"),
        "apps/kustomization.yaml": kust("resources:\n  - operator.yaml\n"),
        "apps/operator.yaml": ks("operator", "./operator"),
        "operator/kustomization.yaml": kust("resources: []\n"), "late/kustomization.yaml": kust("resources: []\n"),
    }, [], {"FluxDependencyMissing"}),
    ("a-kustomization-of-another-source-that-a-path-declares", {
        "clusters/prod/apps.yaml": ks("apps", "./apps"),
        "clusters/prod/late.yaml": ks("late", "./late", extra="  dependsOn:\n    - name: vendor\n"),
        "apps/kustomization.yaml": kust("resources:\n  - vendor.yaml\n"),
        "apps/vendor.yaml": ks("vendor", "./", source="OCIRepository"),
        "late/kustomization.yaml": kust("resources: []\n"),
    }, [], {"FluxDependencyMissing", "FluxPathInvalid"}),
    ("a-path-without-kustomization-is-generated-and-checked", {
        "clusters/prod/apps.yaml": ks("apps", "./apps"),
        "apps/svc.yaml": svc("eighty"), "apps/more/cm.yaml": cm("more", "default"),
        "apps/.sops.yaml": "creation_rules: []\n",
    }, [("SchemaInvalid", "Service/default/web")], {"FluxPathUnbuildable", "RenderFailed"}),
    ("a-generated-path-with-a-file-that-is-no-object", {
        "clusters/prod/apps.yaml": ks("apps", "./apps"),
        "apps/svc.yaml": svc(), "apps/values.yaml": "replicas: 2\n",
    }, [("FluxPathUnbuildable", "Kustomization/flux-system/apps")], {"RenderFailed"}),
    ("components-of-the-flux-kustomization", {
        "clusters/prod/app.yaml": ks("app", "./apps/app", extra="  components:\n    - ../../components/web\n"),
        "apps/app/kustomization.yaml": kust("resources: []\npatches:\n  - patch: |-\n      apiVersion: v1\n"
                                            "      kind: Service\n      metadata:\n        name: web\n"
                                            "        namespace: default\n      spec:\n        clusterIPs2: []\n"),
        "components/web/svc.yaml": svc(),
        "components/web/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
                                             "resources:\n  - svc.yaml\n",
    }, [("SchemaInvalid", "Service/default/web")], {"RenderFailed"}),
    ("patches-of-the-flux-kustomization", {
        "clusters/prod/app.yaml": ks("app", "./apps/web", extra="  patches:\n    - target:\n        kind: Service\n"
                                     "      patch: |-\n        - op: add\n          path: /spec/clusterIPs2\n"
                                     "          value: []\n"),
        "apps/web/svc.yaml": svc(), "apps/web/kustomization.yaml": kust("resources:\n  - svc.yaml\n"),
    }, [("SchemaInvalid", "Service/default/web")], set()),
    ("one-base-into-two-target-namespaces", {
        "kubectl-triton.yaml": PROVIDES_TEAM,
        "clusters/prod/a.yaml": ks("a", "./apps/shared", extra="  targetNamespace: team-a\n"),
        "clusters/prod/b.yaml": ks("b", "./apps/shared", extra="  targetNamespace: team-b\n"), **SHARED_CM,
    }, [], {"DuplicateObject"}),
    ("one-base-twice-into-one-namespace", {
        "kubectl-triton.yaml": PROVIDES_TEAM,
        "clusters/prod/a.yaml": ks("a", "./apps/shared", extra="  targetNamespace: team-a\n"),
        "clusters/prod/b.yaml": ks("b", "./apps/shared", extra="  targetNamespace: team-a\n"), **SHARED_CM,
    }, [("DuplicateObject", "ConfigMap/team-a/shared")], set()),
    ("names-from-postbuild-substitute", {
        "kubectl-triton.yaml": PROVIDES_TEAM,
        "clusters/prod/c.yaml": ks("c", "./apps/app", extra="  targetNamespace: team-a\n  postBuild:\n"
                                   "    substitute:\n      APP: c\n"),
        "clusters/prod/d.yaml": ks("d", "./apps/app", extra="  targetNamespace: team-a\n  postBuild:\n"
                                   "    substitute:\n      APP: d\n"), **APP_CM,
    }, [], {"DuplicateObject"}),
    ("name-prefixes", {
        "kubectl-triton.yaml": PROVIDES_TEAM,
        "clusters/prod/a.yaml": ks("a", "./apps/shared", extra="  targetNamespace: team-a\n  namePrefix: a-\n"),
        "clusters/prod/b.yaml": ks("b", "./apps/shared", extra="  targetNamespace: team-a\n  namePrefix: b-\n"),
        **SHARED_CM,
    }, [], {"DuplicateObject"}),
    ("spokes-of-a-hub", {
        "kubectl-triton.yaml": PROVIDES_TEAM,
        "clusters/hub/a.yaml": ks("a", "./apps/shared", "team-a", "  kubeConfig:\n    secretRef:\n"
                                  "      name: kubeconfig\n  targetNamespace: team-a\n"),
        "clusters/hub/b.yaml": ks("b", "./apps/shared", "team-b", "  kubeConfig:\n    secretRef:\n"
                                  "      name: kubeconfig\n  targetNamespace: team-a\n"), **SHARED_CM,
    }, [], {"DuplicateObject"}),
    ("variables-from-a-configmap-in-git", {
        "clusters/prod/vars.yaml": VARS_CM,
        "clusters/prod/web.yaml": ks("web", "./apps/web", extra="  postBuild:\n    substituteFrom:\n"
                                     "      - kind: ConfigMap\n        name: cluster-vars\n"), **PORT_SVC,
    }, [], {"SchemaInvalid", "FluxVariableUnknown"}),
    ("variables-from-a-secret-are-unknown", {
        "clusters/prod/web.yaml": ks("web", "./apps/web", extra="  postBuild:\n    substituteFrom:\n"
                                     "      - kind: Secret\n        name: cluster-secrets\n"), **PORT_SVC,
    }, [("FluxVariableUnknown", "apps/web")], {"SchemaInvalid"}),
    ("a-variable-no-source-gives-is-unknown", {
        "clusters/prod/web.yaml": ks("web", "./apps/web", extra="  postBuild:\n    substitute:\n      OTHER: x\n"),
        **PORT_SVC,
    }, [("FluxVariableUnknown", "apps/web")], {"SchemaInvalid"}),
    ("a-variable-default", {
        "clusters/prod/web.yaml": ks("web", "./apps/web", extra="  postBuild:\n    substitute:\n      OTHER: x\n"),
        "apps/web/svc.yaml": svc("${PORT:=8080}"), "apps/web/kustomization.yaml": kust("resources:\n  - svc.yaml\n"),
    }, [], {"SchemaInvalid", "FluxVariableUnknown"}),
    ("an-escaped-variable-stays-as-written", {
        "clusters/prod/vars.yaml": VARS_CM,
        "clusters/prod/web.yaml": ks("web", "./apps/web", extra="  postBuild:\n    substituteFrom:\n"
                                     "      - kind: ConfigMap\n        name: cluster-vars\n"),
        "apps/web/svc.yaml": svc("$${PORT}"), "apps/web/kustomization.yaml": kust("resources:\n  - svc.yaml\n"),
    }, [("SchemaInvalid", "Service/default/web")], set()),
    ("substitution-disabled-by-annotation", {
        "clusters/prod/vars.yaml": VARS_CM,
        "clusters/prod/web.yaml": ks("web", "./apps/web", extra="  postBuild:\n    substituteFrom:\n"
                                     "      - kind: ConfigMap\n        name: cluster-vars\n"),
        "apps/web/svc.yaml": svc("${PORT}", "  annotations:\n    kustomize.toolkit.fluxcd.io/substitute: disabled\n"),
        "apps/web/kustomization.yaml": kust("resources:\n  - svc.yaml\n"),
    }, [("SchemaInvalid", "Service/default/web")], set()),
    ("no-postbuild-no-substitution", {
        "clusters/prod/web.yaml": ks("web", "./apps/web"), **PORT_SVC,
    }, [("SchemaInvalid", "Service/default/web")], set()),
    ("a-path-variable-the-parent-substitutes", {
        "clusters/prod/apps.yaml": ks("apps", "./apps", extra="  postBuild:\n    substitute:\n      CLUSTER: prod\n"),
        "apps/kustomization.yaml": kust("resources:\n  - web.yaml\n"),
        "apps/web.yaml": ks("web", "./deploy/${CLUSTER}"),
        "deploy/prod/svc.yaml": svc("eighty"), "deploy/prod/kustomization.yaml": kust("resources:\n  - svc.yaml\n"),
    }, [("SchemaInvalid", "Service/default/web")], {"FluxPathInvalid", "FluxPathVariable"}),
    ("a-path-variable-nothing-substitutes", {
        "clusters/prod/web.yaml": ks("web", "./deploy/${CLUSTER}"),
        "deploy/prod/svc.yaml": svc(), "deploy/prod/kustomization.yaml": kust("resources:\n  - svc.yaml\n"),
    }, [("FluxPathVariable", "Kustomization/flux-system/web")], {"FluxPathInvalid"}),
    ("paths-below-the-pushed-folder-of-an-oci-artifact", {
        "kubectl-triton.yaml": LAYOUT.replace("clusters: clusters", "clusters: kubernetes/clusters").replace(
            "GitRepository", "OCIRepository"),
        "kubernetes/clusters/c1/apps.yaml": ks("apps", "./apps/c1", source="OCIRepository"),
        "kubernetes/clusters/c1/gone.yaml": ks("gone", "./apps/c2", source="OCIRepository"),
        "kubernetes/apps/c1/svc.yaml": svc("eighty"),
        "kubernetes/apps/c1/kustomization.yaml": kust("resources:\n  - svc.yaml\n"),
    }, [("FluxArtifactRoot", "kubernetes/clusters"), ("SchemaInvalid", "Service/default/web"),
        ("FluxPathInvalid", "Kustomization/flux-system/gone")], set()),
]


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in {"kubectl-triton.yaml": LAYOUT, **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _findings(run_cli, root: Path) -> list[dict]:
    result = run_cli("validate", str(root), "-o", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["findings"]


@pytest.mark.parametrize("files, present, absent", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_flux_builds_as_flux_does(run_cli, tmp_path: Path, files, present, absent):
    findings = _findings(run_cli, _write(tmp_path / "repo", files))
    seen = {(f["code"], f["object"]) for f in findings} | {(f["code"], f["path"]) for f in findings}
    assert set(present) <= seen, findings
    assert not [f for f in findings if f["code"] in absent], findings


@pytest.mark.parametrize("text, values, want, unknown", [
    ("${A}", {"A": "1"}, "1", set()),
    ("x-${A}-y", {}, "x-${A}-y", {"A"}),
    ("${A:=d}", {}, "d", set()),
    ("${A:=d}", {"A": ""}, "d", set()),
    ("${A=d}", {"A": ""}, "", set()),
    ("${A:-d}", {"A": "v"}, "v", set()),
    ("${A-d}", {}, "d", set()),
    ("$${A}", {"A": "1"}, "${A}", set()),
    ("a$$b", {}, "a$b", set()),
    ("$A", {"A": "1"}, "$A", set()),
    ("${A^^}", {"A": "v"}, "${A^^}", {"A"}),
])
def test_envsubst_as_flux(text, values, want, unknown):
    assert envsubst(text, values) == (want, unknown)


def test_substitution_reads_the_yaml_again():
    """Flux substitutes the object's YAML text: a port written ${PORT} becomes the number."""
    docs = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": "${P}"}]}}]
    out, unknown = substitute_objects(docs, (("P", "80"),))
    assert out[0]["spec"]["ports"][0]["port"] == 80 and unknown == set()
    assert substitute_objects(docs, None) == (docs, set())  # no postBuild
    assert substitute_objects(docs, ()) == (docs, set())  # postBuild without variables: Flux does not substitute


def test_generated_kustomization_lists_what_kustomize_controller_lists(tmp_path: Path):
    folder = _write(tmp_path, {"a.yaml": cm("a"), "b/c.yml": cm("c"), "b/d/kustomization.yaml": kust(),
                               "b/d/e.yaml": cm("e"), "notes.yaml": "just: data\n", ".sops.yaml": "x: 1\n",
                               "README.md": "# no"})
    (folder / "kubectl-triton.yaml").unlink()
    listed, refused = kustomize.flux_manifests(folder)
    assert listed == ["./a.yaml", "./b/c.yml", "./b/d"]
    assert [f for f, _ in refused] == ["notes.yaml"]
    kfile = kustomize.flux_kustomization(folder, {"targetNamespace": "t", "components": ["../x"],
                                                  "ignoreMissingComponents": True})
    assert kfile is not None and kfile.generated
    assert kfile.doc == {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                         "resources": listed, "namespace": "t"}


# ---- the survey's repros: what they reported falsely is gone ---------------------------------------------------

REPRO_FALSE = {  # repro -> codes its OBSERVED.json reports that are false
    "flux-dependency-namespace": {"FluxDependencyMissing"},
    "flux-dependency-nested": {"FluxDependencyMissing"},
    "flux-path-unbuildable-blind": {"FluxPathUnbuildable"},
    "flux-components": {"RenderFailed"},
    "duplicate-target-namespace": {"DuplicateObject"},
    "postbuild-var-path": {"FluxPathInvalid", "SchemaInvalid"},
    "oci-artifact-root": {"FluxPathInvalid"},
}


def _repro(name: str, tmp_path: Path) -> Path:
    src = REPROS / name
    if not src.is_dir():
        pytest.skip(f"{src} is not here")
    dest = tmp_path / name
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("ABOUT.txt", "OBSERVED.json"))
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return dest


@pytest.mark.parametrize("patch, says", [("", "identically"), ("  patches:\n    - patch: |-\n        apiVersion: v1\n"
                                                  "        kind: ConfigMap\n        metadata:\n          name: shared\n"
                                                  "        data:\n          b: other\n", "fight")])
def test_one_object_from_two_kustomizations(run_cli, tmp_path: Path, patch, says):
    """One object from two Kustomizations of a cluster, the same or different: an error either way."""
    findings = _findings(run_cli, _write(tmp_path / "repo", {
        "kubectl-triton.yaml": PROVIDES_TEAM,
        "clusters/prod/a.yaml": ks("a", "./apps/shared", extra="  targetNamespace: team-a\n"),
        "clusters/prod/b.yaml": ks("b", "./apps/shared", extra="  targetNamespace: team-a\n" + patch),
        **SHARED_CM}))
    dup = [f for f in findings if f["code"] == "DuplicateObject"]
    assert [(f["severity"], f["object"]) for f in dup] == [("error", "ConfigMap/team-a/shared")]
    assert says in dup[0]["message"]


@pytest.mark.parametrize("name", sorted(REPRO_FALSE))
def test_repro_false_errors_are_gone(run_cli, tmp_path: Path, name):
    observed = json.loads((REPROS / name / "OBSERVED.json").read_text()) if (REPROS / name).is_dir() else []
    repo = _repro(name, tmp_path)
    before = {line.split(":")[0].split(" ")[1] for run in observed for line in run["findings"]}
    assert REPRO_FALSE[name] <= before  # what the survey saw
    findings = _findings(run_cli, repo)
    assert not [f for f in findings if f["code"] in REPRO_FALSE[name]], findings


def test_repro_objects_below_a_generated_path_are_checked(run_cli, tmp_path: Path):
    repo = _repro("flux-path-unbuildable-blind", tmp_path)
    findings = _findings(run_cli, repo)
    assert any(f["object"] == "Service/default/s" for f in findings), findings  # the Service is seen now
    (repo / "apps/nested").mkdir()
    (repo / "apps/nested/broken.yaml").write_text(svc("eighty"))
    findings = _findings(run_cli, repo)
    assert [(f["severity"], f["path"]) for f in findings if f["code"] == "SchemaInvalid"
            and f["object"] == "Service/default/web"] == [("error", "apps")]


def test_repro_component_objects_are_rendered(run_cli, tmp_path: Path):
    """The component's ConfigMap with the path's patch applied to it: a field the patch adds is checked."""
    repo = _repro("flux-components", tmp_path)
    kfile = repo / "apps/app/kustomization.yaml"
    kfile.write_text(kfile.read_text().replace("      data:\n        c: d", "      data:\n        c: d\n"
                                               "      binaryData2: {}"))
    findings = _findings(run_cli, repo)
    assert any(f["code"] == "SchemaInvalid" and f["object"] == "ConfigMap/default/db" for f in findings), findings


def test_repro_substituted_values_are_checked(run_cli, tmp_path: Path):
    """The route's hostname is judged with the ConfigMap's value: a bad value is an error again."""
    repo = _repro("postbuild-var-path", tmp_path)
    info = repo / "clusters/prod/cluster-info.yaml"
    info.write_text(info.read_text().replace("SUBDOMAIN: www", "SUBDOMAIN: Not_A_Host"))
    findings = _findings(run_cli, repo)
    assert [f["object"] for f in findings if f["code"] == "SchemaInvalid"] == ["HTTPRoute/default/r"], findings
