"""`validate` reads Flux objects as Flux builds and applies them (issue 28): the Kustomizations of a cluster folder
from its render (namespace and patches of the folder's kustomization in them) and, through every Kustomization of
the repository's source, from its path's render (those that exist only once a path is built included); a path
without kustomization.yaml built from the kustomization kustomize-controller generates; spec.components, patches,
targetNamespace and namePrefix in the build; postBuild variables substituted from `substitute` and ConfigMaps in
git (a Secret or no source: unknown, not an error); spokes of a hub (spec.kubeConfig) apart; an OCI artifact's
paths read below the folder it is pushed from. Synthetic repositories, then small ones in the shapes of
the survey's false errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.gitops.model import envsubst, substitute_objects

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


# ---- the shapes of the survey's false errors, as small repositories ----------------------------------------------
# Each repository is written here (our own minimal YAML) in the shape a public Flux fleet of the survey had where an
# earlier version reported what REPRO_FALSE names; REPRO_BROKEN breaks it so that such an error is real, which
# validate must still report.

ROUTE_R = ("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: r\n  namespace: default\n"
           "spec:\n  hostnames:\n    - ${SUBDOMAIN}.example.com\n  rules:\n    - backendRefs:\n        - name: web\n"
           "          port: 80\n")
SUBSTITUTE_INFO = "  postBuild:\n    substituteFrom:\n      - kind: ConfigMap\n        name: cluster-info\n"
NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"
SERVICE_S = ("apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n  namespace: default\nspec:\n  selector:\n"
             "    app: s\n  ports:\n    - port: 80\n")
PATCH_DB = ("resources:\n  - cm.yaml\npatches:\n  - patch: |-\n      apiVersion: v1\n      kind: ConfigMap\n"
            "      metadata:\n        name: db\n        namespace: default\n      data:\n        c: d\n")
OCI_LAYOUT = LAYOUT.replace("clusters: clusters", "clusters: kubernetes/clusters").replace("GitRepository",
                                                                                         "OCIRepository")
HOME_OPS = LAYOUT.replace("clusters: clusters", "clusters: kubernetes")  # cluster folders kubernetes/{flux,apps}
GATEWAY = "cluster:\n  provides:\n    crds:\n      - group: gateway.networking.k8s.io\n        reason: the platform\n"


def _ns_folder(ns: str, *apps: str) -> dict[str, str]:
    """A home-ops namespace folder kubernetes/apps/NS: `namespace: NS` in its kustomization.yaml, the Namespace,
    and per app its ks.yaml (the Flux Kustomization, written without a namespace) beside the app's folder."""
    top = f"kubernetes/apps/{ns}"
    return {f"{top}/kustomization.yaml": kust(f"namespace: {ns}\nresources:\n  - namespace.yaml\n"
                                              + "".join(f"  - {a}/ks.yaml\n" for a in apps)),
            f"{top}/namespace.yaml": NAMESPACE.format(name=ns),
            **{f"{top}/{a}/app/{f}": t for a in apps
               for f, t in (("kustomization.yaml", kust("resources:\n  - cm.yaml\n")), ("cm.yaml", cm(a)))}}


REPRO_FILES: dict[str, dict[str, str]] = {
    # home-ops: a dependsOn naming a Kustomization of another namespace, which the parent kustomization.yaml's
    # `namespace:` gives it (the Flux object itself is written without one)
    "flux-dependency-namespace": {
        "kubectl-triton.yaml": HOME_OPS,
        "kubernetes/flux/cluster/ks.yaml": ks("cluster-apps", "./kubernetes/apps"),
        **_ns_folder("database", "postgres"), **_ns_folder("media", "jellyfin"),
        "kubernetes/apps/database/postgres/ks.yaml": ks("postgres", "./kubernetes/apps/database/postgres/app", None,
                                                        "  targetNamespace: database\n"),
        "kubernetes/apps/media/jellyfin/ks.yaml": ks("jellyfin", "./kubernetes/apps/media/jellyfin/app", None,
                                                     "  targetNamespace: media\n  dependsOn:\n"
                                                     "    - name: postgres\n      namespace: database\n"),
    },
    # Kustomizations that exist only once other paths are built (two levels down), named in dependsOn
    "flux-dependency-nested": {
        "clusters/prod/infrastructure.yaml": ks("infrastructure", "./infrastructure"),
        "clusters/prod/apps.yaml": ks("apps", "./apps", extra="  dependsOn:\n    - name: infra-configs\n"
                                      "    - name: issuers\n"),
        "infrastructure/kustomization.yaml": kust("resources:\n  - controllers.yaml\n  - configs.yaml\n"),
        "infrastructure/controllers.yaml": ks("infra-controllers", "./infrastructure/controllers"),
        "infrastructure/configs.yaml": ks("infra-configs", "./infrastructure/configs",
                                          extra="  dependsOn:\n    - name: infra-controllers\n"),
        "infrastructure/controllers/kustomization.yaml": kust("resources:\n  - cm.yaml\n"),
        "infrastructure/controllers/cm.yaml": cm("controllers", "default"),
        "infrastructure/configs/kustomization.yaml": kust("resources:\n  - issuers.yaml\n"),
        "infrastructure/configs/issuers.yaml": ks("issuers", "./infrastructure/issuers",
                                                  extra="  dependsOn:\n    - name: infra-configs\n"),
        "infrastructure/issuers/kustomization.yaml": kust("resources:\n  - cm.yaml\n"),
        "infrastructure/issuers/cm.yaml": cm("issuers", "default"),
        "apps/kustomization.yaml": kust("resources:\n  - cm.yaml\n"), "apps/cm.yaml": cm("apps", "default"),
    },
    # a Flux path without kustomization.yaml whose files Flux's generated kustomization does not read as manifests
    # (.sops.yaml, README.md, a sub-folder's own kustomization with its generator's data file): it builds, and its
    # objects are checked (the Service s selects no pod: ServiceSelectsNothing shows it is seen)
    "flux-path-unbuildable-blind": {
        "clusters/prod/apps.yaml": ks("apps", "./apps"),
        "apps/svc.yaml": SERVICE_S,
        "apps/.sops.yaml": "creation_rules:\n  - path_regex: .*\\.sops\\.yaml\n    age: age1example\n",
        "apps/README.md": "# apps\n",
        "apps/dashboards/kustomization.yaml": kust("configMapGenerator:\n  - name: dashboards\n"
                                                   "    namespace: default\n    files:\n      - values.yaml\n"),
        "apps/dashboards/values.yaml": "replicas: 2\nfolders: [a, b]\n",
    },
    # the path's kustomization patches a ConfigMap only the Kustomization's spec.components brings
    "flux-components": {
        "clusters/prod/app.yaml": ks("app", "./apps/app", extra="  components:\n    - ../../components/db\n"),
        "apps/app/kustomization.yaml": kust(PATCH_DB), "apps/app/cm.yaml": cm("app", "default"),
        "components/db/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
                                            "resources:\n  - cm.yaml\n",
        "components/db/cm.yaml": cm("db", "default", "{a: b}"),
    },
    # one base applied by two Kustomizations of the cluster folder (one file) into two target namespaces
    "duplicate-target-namespace": {
        "kubectl-triton.yaml": PROVIDES_TEAM,
        "clusters/prod/echo.yaml": ks("echo-a", "./base/echo", extra="  targetNamespace: team-a\n") + "---\n"
        + ks("echo-b", "./base/echo", extra="  targetNamespace: team-b\n"),
        "base/echo/kustomization.yaml": kust("resources:\n  - cm.yaml\n  - svc.yaml\n"),
        "base/echo/cm.yaml": cm("echo"), "base/echo/svc.yaml": svc(),
    },
    # home-ops: cluster-apps substitutes its path's objects from a ConfigMap of the flux folder: a child's spec.path
    # (./kubernetes/apps/web/${CLUSTER}) and a route's hostname (${SUBDOMAIN}.example.com)
    "postbuild-var-path": {
        "kubectl-triton.yaml": HOME_OPS + GATEWAY,
        "kubernetes/flux/cluster/cluster-info.yaml": cm("cluster-info", "flux-system",
                                                        "{CLUSTER: prod, SUBDOMAIN: www}"),
        "kubernetes/flux/cluster/ks.yaml": ks("cluster-apps", "./kubernetes/apps", extra=SUBSTITUTE_INFO),
        "kubernetes/apps/kustomization.yaml": kust("resources:\n  - web/ks.yaml\n  - gateway\n"),
        "kubernetes/apps/web/ks.yaml": ks("web", "./kubernetes/apps/web/${CLUSTER}"),
        "kubernetes/apps/web/prod/kustomization.yaml": kust("resources:\n  - cm.yaml\n"),
        "kubernetes/apps/web/prod/cm.yaml": cm("web", "default"),
        "kubernetes/apps/gateway/kustomization.yaml": kust("resources:\n  - route.yaml\n  - svc.yaml\n"),
        "kubernetes/apps/gateway/route.yaml": ROUTE_R, "kubernetes/apps/gateway/svc.yaml": svc(),
    },
    # the repository's own source is an OCI artifact pushed from kubernetes/: spec.paths are below that folder
    "oci-artifact-root": {
        "kubectl-triton.yaml": OCI_LAYOUT,
        "kubernetes/clusters/cluster-00/infrastructure.yaml": ks("infrastructure", "./infrastructure",
                                                                 source="OCIRepository"),
        "kubernetes/clusters/cluster-00/apps.yaml": ks("apps", "./apps/cluster-00", source="OCIRepository",
                                                       extra="  dependsOn:\n    - name: infrastructure\n"),
        "kubernetes/infrastructure/kustomization.yaml": kust("resources:\n  - cm.yaml\n"),
        "kubernetes/infrastructure/cm.yaml": cm("infrastructure", "default"),
        "kubernetes/apps/cluster-00/kustomization.yaml": kust("resources:\n  - cm.yaml\n"),
        "kubernetes/apps/cluster-00/cm.yaml": cm("apps", "default"),
    },
}

REPRO_FALSE = {  # repository -> codes an earlier version reported on it, falsely
    "flux-dependency-namespace": {"FluxDependencyMissing"},
    "flux-dependency-nested": {"FluxDependencyMissing"},
    "flux-path-unbuildable-blind": {"FluxPathUnbuildable"},
    "flux-components": {"RenderFailed"},
    "duplicate-target-namespace": {"DuplicateObject"},
    "postbuild-var-path": {"FluxPathInvalid", "SchemaInvalid"},
    "oci-artifact-root": {"FluxPathInvalid"},
}

# repository -> (file, text replaced, replacement: None removes the file), and what the broken one reports (code,
# object or path): the error is real there
REPRO_BROKEN: dict[str, tuple[list[tuple[str, str, str | None]], set[tuple[str, str]]]] = {
    # the parent's `namespace: database` gone: postgres is flux-system's
    "flux-dependency-namespace": ([("kubernetes/apps/database/kustomization.yaml", "namespace: database\n", "")],
                                  {("FluxDependencyMissing", "Kustomization/media/jellyfin")}),
    # the path declaring infra-configs (and, through it, issuers) no longer lists it
    "flux-dependency-nested": ([("infrastructure/kustomization.yaml", "  - configs.yaml\n", "")],
                               {("FluxDependencyMissing", "Kustomization/flux-system/apps")}),
    # a file below the path that is no Kubernetes object and no kustomization reads
    "flux-path-unbuildable-blind": ([("apps/values.yaml", "", "replicas: 2\n")],
                                    {("FluxPathUnbuildable", "Kustomization/flux-system/apps")}),
    # without spec.components the patch has no target: kustomize fails as Flux's build would
    "flux-components": ([("clusters/prod/app.yaml", "  components:\n    - ../../components/db\n", "")],
                        {("RenderFailed", "apps/app")}),
    # both into team-a
    "duplicate-target-namespace": ([("clusters/prod/echo.yaml", "targetNamespace: team-b", "targetNamespace: team-a")],
                                   {("DuplicateObject", "ConfigMap/team-a/echo"),
                                    ("DuplicateObject", "Service/team-a/web")}),
    # a cluster whose folder web/staging does not exist
    "postbuild-var-path": ([("kubernetes/flux/cluster/cluster-info.yaml", "CLUSTER: prod", "CLUSTER: staging")],
                           {("FluxPathInvalid", "Kustomization/flux-system/web")}),
    # the same repository synced from git: its paths are read from the top, where they do not exist
    "oci-artifact-root": ([(rel, "OCIRepository", "GitRepository") for rel in (
        "kubectl-triton.yaml", "kubernetes/clusters/cluster-00/infrastructure.yaml",
        "kubernetes/clusters/cluster-00/apps.yaml")],
        {("FluxPathInvalid", "Kustomization/flux-system/infrastructure"),
         ("FluxPathInvalid", "Kustomization/flux-system/apps")}),
}


def _repro(name: str, tmp_path: Path) -> Path:
    return _write(tmp_path / name, REPRO_FILES[name])


def _break(repo: Path, changes: list[tuple[str, str, str | None]]) -> None:
    for rel, old, new in changes:
        path = repo / rel
        if new is None:
            path.unlink()
        elif not old:
            path.write_text(new)  # a new file
        else:
            text = path.read_text()
            assert old in text, (rel, old)
            path.write_text(text.replace(old, new))


@pytest.mark.parametrize("patch, says, severity", [
    ("", "identically", "warning"),
    ("  patches:\n    - patch: |-\n        apiVersion: v1\n        kind: ConfigMap\n        metadata:\n"
     "          name: shared\n        data:\n          b: other\n", "fight", "error")])
def test_one_object_from_two_kustomizations(run_cli, tmp_path: Path, patch, says, severity):
    """One object from two Kustomizations of a cluster: different, they fight over it (an error); the same, it
    converges and only changes owners (a warning: the shared OCIRepository of home-ops app folders)."""
    findings = _findings(run_cli, _write(tmp_path / "repo", {
        "kubectl-triton.yaml": PROVIDES_TEAM,
        "clusters/prod/a.yaml": ks("a", "./apps/shared", extra="  targetNamespace: team-a\n"),
        "clusters/prod/b.yaml": ks("b", "./apps/shared", extra="  targetNamespace: team-a\n" + patch),
        **SHARED_CM}))
    dup = [f for f in findings if f["code"] == "DuplicateObject"]
    assert [(f["severity"], f["object"]) for f in dup] == [(severity, "ConfigMap/team-a/shared")]
    assert says in dup[0]["message"]


@pytest.mark.parametrize("name", sorted(REPRO_FALSE))
def test_repro_false_errors_are_gone(run_cli, tmp_path: Path, name):
    findings = _findings(run_cli, _repro(name, tmp_path))
    assert not [f for f in findings if f["code"] in REPRO_FALSE[name]], findings
    expected = {"ServiceSelectsNothing"} if name == "flux-path-unbuildable-blind" else set()  # Service s: seen
    assert {f["code"] for f in findings if f["severity"] == "error"} == expected, findings
    if name == "oci-artifact-root":
        assert [(f["code"], f["path"]) for f in findings if f["code"] == "FluxArtifactRoot"] == [
            ("FluxArtifactRoot", "kubernetes/clusters")]


@pytest.mark.parametrize("name", sorted(REPRO_BROKEN))
def test_repro_broken_reports_the_error(run_cli, tmp_path: Path, name):
    """The same repository, broken so that the error REPRO_FALSE names is real: validate reports it."""
    repo = _repro(name, tmp_path)
    changes, expected = REPRO_BROKEN[name]
    _break(repo, changes)
    findings = _findings(run_cli, repo)
    seen = {(f["code"], f["object"]) for f in findings} | {(f["code"], f["path"]) for f in findings}
    assert expected <= seen, findings
    assert {code for code, _ in expected} <= REPRO_FALSE[name]


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
    assert "      data:\n        c: d" in kfile.read_text()
    assert not [f for f in _findings(run_cli, repo) if f["code"] == "SchemaInvalid"]
    kfile.write_text(kfile.read_text().replace("      data:\n        c: d", "      data:\n        c: d\n"
                                               "      binaryData2: {}"))
    findings = _findings(run_cli, repo)
    assert any(f["code"] == "SchemaInvalid" and f["object"] == "ConfigMap/default/db" for f in findings), findings


def test_repro_substituted_values_are_checked(run_cli, tmp_path: Path):
    """The route's hostname is judged with the ConfigMap's value: a bad value is an error again."""
    repo = _repro("postbuild-var-path", tmp_path)
    info = repo / "kubernetes/flux/cluster/cluster-info.yaml"
    assert "SUBDOMAIN: www" in info.read_text()
    info.write_text(info.read_text().replace("SUBDOMAIN: www", "SUBDOMAIN: Not_A_Host"))
    findings = _findings(run_cli, repo)
    assert [f["object"] for f in findings if f["code"] == "SchemaInvalid"] == ["HTTPRoute/default/r"], findings
