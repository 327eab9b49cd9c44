"""YAML read as kustomize and Flux read it (issue 28): a file is a manifest only where a kustomization lists it (or
Flux generates a kustomization of every manifest under a path that has none); a configMapGenerator's data file is
data, whatever it holds. Where PyYAML's safe loader refuses what kustomize (go-yaml v3) accepts (a custom tag, an
anchor defined again, a plain `=`), it is accepted as kustomize reads it; real syntax errors stay errors with their
file:line. SOPS-encrypted objects are not schema-checked on their `sops` key. Synthetic fixtures only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubectl_triton.errors import InputError
from kubectl_triton.formats import schemas, yamlio
from kubectl_triton.gitops import repo

# -- the loader ------------------------------------------------------------------------------------------------

ANCHORS = "name: &n first\na: &k one\nb: *n\nc: &k two\nd: *k\n"


@pytest.mark.parametrize("text, expected", [
    # an anchor defined again: later aliases name the latest node (as `kubectl kustomize` renders it)
    (ANCHORS, [{"name": "first", "a": "one", "b": "first", "c": "two", "d": "two"}]),
    # anchors are per document
    ("a: &x 1\n---\nb: &x 2\nc: *x\n", [{"a": 1}, {"b": 2, "c": 2}]),
    # a custom tag is dropped: a scalar is its text, a mapping or sequence stays one
    ("api_key: !env_var SONARR_API_KEY\n", [{"api_key": "SONARR_API_KEY"}]),
    ("n: !env_var 12\nb: !foo true\ne: !foo\nq: !foo 'quoted'\n", [{"n": "12", "b": "true", "e": "", "q": "quoted"}]),
    ("m: !secret {a: b}\nl: !custom [1, 2]\n", [{"m": {"a": "b"}, "l": [1, 2]}]),
    ("x: !<tag:example.com,2000:x> val\n", [{"x": "val"}]),
    # the standard tags keep their meaning
    ("i: !!int '7'\ns: !!str 12\n", [{"i": 7, "s": "12"}]),
    # YAML 1.1's value tag: a plain `=` is the string "=", as the API server reads `matchType: =`
    ("matchType: =\n", [{"matchType": "="}]),
    # both at once, in one stream of several documents
    ("a: !env_var X\n---\nb: &k 1\nc: &k 2\nd: *k\n", [{"a": "X"}, {"b": 1, "c": 2, "d": 2}]),
])
def test_read_as_kustomize_reads_it(text, expected):
    assert yamlio.loads_all(text, "f.yaml") == expected


@pytest.mark.parametrize("text, where, problem", [
    ("a: [1, 2\n", "f.yaml:2:1", "did not find expected ',' or ']'"),
    ("a: b: c\n", "f.yaml:1:5", "mapping values are not allowed"),
    ("a: *nope\n", "f.yaml:1:4", "found undefined alias"),
    # an anchor defined again does not hide a real error later in the stream
    ("a: &k 1\nb: &k 2\nc: *missing\n", "f.yaml:3:4", "found undefined alias"),
    ("a: &k 1\nb: &k 2\nc: [\n", "f.yaml:4:1", "expected the node content"),
    # a value its explicit standard tag cannot take is an error, not a crash
    ("a: !!int notanint\n", "f.yaml", "invalid literal"),
])
def test_real_syntax_errors_stay_errors_with_file_and_line(text, where, problem):
    with pytest.raises(InputError) as err:
        yamlio.loads_all(text, "f.yaml")
    assert err.value.message.startswith(f"{where}: invalid YAML: ") and problem in err.value.message


def test_the_plain_safe_loader_is_left_as_it_is():
    import yaml
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load("a: !env_var X\n")


# -- which files are manifests -----------------------------------------------------------------------------------

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
CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: default\ndata:\n  a: one\n"
GENERATOR = """apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
{resources}
configMapGenerator:
  - name: app-config
    namespace: default
    files:
      - config.yml=./config.yml
"""
DATA_WITH_TAGS = "sonarr:\n  series:\n    api_key: !env_var SONARR_API_KEY\n"
NOT_YAML = "key: [unclosed\n  {{ template }}: x\n"


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "repo"
    for rel, text in {"kubectl-triton.yaml": LAYOUT, **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _apps(data: str, resource: str | None = None, resource_text: str = "") -> dict[str, str]:
    """clusters/prod applying clusters/prod/apps, whose kustomization generates a ConfigMap from config.yml and
    lists `resource` (if any)."""
    files = {"clusters/prod/apps.yaml": FLUX_KS.format(name="apps", path="./clusters/prod/apps"),
             "clusters/prod/apps/kustomization.yaml":
                 GENERATOR.format(resources=f"  - {resource}" if resource else "  []"),
             "clusters/prod/apps/config.yml": data}
    if resource:
        files[f"clusters/prod/apps/{resource}"] = resource_text
    return files


@pytest.mark.parametrize("files, manifests", [
    # a generator's data file is not a manifest; the kustomization and what it lists are
    (_apps(DATA_WITH_TAGS, "cm.yaml", CM.format(name="x")),
     ["prod/apps.yaml", "prod/apps/cm.yaml", "prod/apps/kustomization.yaml"]),
    # a folder with no kustomization file anywhere up to clusters/: Flux generates one of every manifest
    ({"clusters/prod/apps.yaml": FLUX_KS.format(name="apps", path="./clusters/prod"),
      "clusters/prod/extra/cm.yaml": CM.format(name="x")},
     ["prod/apps.yaml", "prod/extra/cm.yaml"]),
    # a Flux path without a kustomization file below a folder that has one: generated too
    ({"clusters/prod/kustomization.yaml": "resources:\n  - apps.yaml\n",
      "clusters/prod/apps.yaml": FLUX_KS.format(name="apps", path="./clusters/prod/gen"),
      "clusters/prod/gen/cm.yaml": CM.format(name="x"), "clusters/prod/notes/values.yaml": NOT_YAML},
     ["prod/apps.yaml", "prod/gen/cm.yaml", "prod/kustomization.yaml"]),
    # a file listed from another folder (../), patches and components count; generator envs do not
    ({"clusters/prod/apps.yaml": FLUX_KS.format(name="apps", path="./clusters/prod/a"),
      "clusters/prod/a/kustomization.yaml": "resources:\n  - ../shared/cm.yaml\npatches:\n  - path: patch.yaml\n"
                                            "configMapGenerator:\n  - name: e\n    envs: [env.yaml]\n",
      "clusters/prod/a/patch.yaml": CM.format(name="x"), "clusters/prod/a/env.yaml": NOT_YAML,
      "clusters/prod/shared/kustomization.yaml": "resources: []\n",
      "clusters/prod/shared/cm.yaml": CM.format(name="x"), "clusters/prod/shared/unused.yaml": NOT_YAML},
     ["prod/a/kustomization.yaml", "prod/a/patch.yaml", "prod/apps.yaml", "prod/shared/cm.yaml",
      "prod/shared/kustomization.yaml"]),
], ids=["generator-data", "flux-generated", "flux-path-without-kustomization", "listed-elsewhere"])
def test_manifest_files(tmp_path, files, manifests):
    root = _repo(tmp_path, files)
    top = root / "clusters"
    found = repo.manifest_files(top, repo.Repository.at(root, tolerant=True))
    assert sorted(f.relative_to(top).as_posix() for f in found) == manifests


# -- the gate -----------------------------------------------------------------------------------------------------

def _validate(run_cli, root: Path) -> list[tuple[str, str, str | None, int | None]]:
    result = run_cli("validate", str(root), "-o", "json", "--no-compat")
    assert "Traceback" not in result.stderr, result.stderr
    return sorted((f["severity"], f["code"], f["path"], f["line"]) for f in json.loads(result.stdout)["findings"]
                  if f["severity"] in ("error", "warning"))


CM_ANCHORS = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: &n x\n  namespace: default\ndata:\n" \
             "  a: &k one\n  b: *n\n  c: &k two\n  d: *k\n"
CM_TAGS = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: t\n  namespace: default\ndata:\n" \
          "  key: !env_var API_KEY\n  match: =\n"
SOPS_SECRET = """apiVersion: v1
kind: Secret
metadata:
  name: token
  namespace: default
type: Opaque
stringData:
  token: ENC[AES256_GCM,data:aGVsbG8=,iv:aXY=,tag:dGFn,type:str]
sops:
  age:
    - recipient: age1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq
      enc: |
        -----BEGIN AGE ENCRYPTED FILE-----
        c3ludGhldGlj
        -----END AGE ENCRYPTED FILE-----
  lastmodified: "2025-01-01T00:00:00Z"
  mac: ENC[AES256_GCM,data:bWFj,iv:aXY=,tag:dGFn,type:str]
  version: 3.9.0
"""
BROKEN = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [b\n"


@pytest.mark.parametrize("files, expected", [
    # a configMapGenerator data file with custom tags: data, no finding
    (_apps(DATA_WITH_TAGS), []),
    # a data file that is no YAML at all: still data
    (_apps(NOT_YAML), []),
    # a resource with an anchor defined again, and one with custom tags and `=`: kustomize renders both
    (_apps(DATA_WITH_TAGS, "cm.yaml", CM_ANCHORS), []),
    (_apps(DATA_WITH_TAGS, "cm.yaml", CM_TAGS), []),
    # a resource that is really broken: YamlInvalid at its line, and the folder does not render
    (_apps(DATA_WITH_TAGS, "cm.yaml", BROKEN),
     [("error", "RenderFailed", "clusters/prod/apps", None),
      ("error", "YamlInvalid", "clusters/prod/apps/cm.yaml", 5)]),
    # a SOPS-encrypted Secret: no SchemaInvalid for `sops`, no SecretInGit
    (_apps(DATA_WITH_TAGS, "secret.sops.yaml", SOPS_SECRET), []),
    # the same Secret decrypted (no sops metadata, plain values): SecretInGit
    (_apps(DATA_WITH_TAGS, "secret.yaml", SOPS_SECRET.split("sops:")[0].replace(
        "ENC[AES256_GCM,data:aGVsbG8=,iv:aXY=,tag:dGFn,type:str]", "s3cr3t-literal")),
     [("error", "SecretInGit", "clusters/prod/apps", None)]),
], ids=["data-tags", "data-not-yaml", "resource-anchors", "resource-tags", "resource-broken", "sops", "plain-secret"])
def test_gate_findings(run_cli, tmp_path, files, expected):
    assert _validate(run_cli, _repo(tmp_path, files)) == expected


def test_init_reads_a_cluster_folder_with_data_files_and_redefined_anchors(run_cli, tmp_path):
    files = {"clusters/production/apps.yaml": FLUX_KS.format(name="apps", path="./clusters/production/apps"),
             "clusters/production/apps/kustomization.yaml": GENERATOR.format(resources="  - cm.yaml"),
             "clusters/production/apps/config.yml": DATA_WITH_TAGS,
             "clusters/production/apps/cm.yaml": CM_ANCHORS}
    root = tmp_path / "repo"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    assert "invalid YAML" not in result.stderr


# -- schemas -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sops, issues", [
    ({"mac": "ENC[x]", "lastmodified": "2025-01-01T00:00:00Z"}, []),
    ({"lastmodified": "2025-01-01T00:00:00Z"}, []),
    # a `sops` key that sops did not write is an unknown field like any other
    ({"note": "not sops"}, ["(root): Additional properties are not allowed ('sops' was unexpected)"]),
])
def test_sops_key_in_schemas(sops, issues):
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "ENC[AES256_GCM,x]"},
              "sops": sops}
    assert [i.message for i in schemas.validate_object(secret)] == issues


def test_encrypted_values_are_not_type_checked():
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
           "spec": {"replicas": "ENC[AES256_GCM,data:Mw==,type:int]", "selector": {"matchLabels": {"a": "b"}},
                    "template": {"metadata": {"labels": {"a": "b"}},
                                 "spec": {"containers": [{"name": "c", "image": "i"}]}}},
           "sops": {"mac": "ENC[x]", "lastmodified": "2025-01-01T00:00:00Z"}}
    assert schemas.validate_object(dep) == []
    plain = {k: v for k, v in dep.items() if k != "sops"}
    assert [i.message.split(" is not of type")[0] for i in schemas.validate_object(plain)] == [
        "spec.replicas: 'ENC[AES256_GCM,data:Mw==,type:int]'"]


# -- the shapes of the survey's failures, as small repositories -----------------------------------------------------
# Each repository is written here (our own minimal YAML) in the shape a public Flux fleet of the survey had where an
# earlier version failed (init stopped on "invalid YAML", validate reported errors); next to it the same repository
# with a real mistake, which is still reported.

RECYCLARR_KUSTOMIZATION = """apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: media
resources:
  - ./configmap.yaml
configMapGenerator:
  - name: recyclarr
    files:
      - recyclarr.yml=./config/recyclarr.yml
generatorOptions:
  disableNameSuffixHash: true
"""
RECYCLARR_DATA = """sonarr:
  series:
    base_url: http://sonarr.media:8989
    api_key: !env_var SONARR_API_KEY
radarr:
  movies:
    base_url: http://radarr.media:7878
    api_key: !env_var RADARR_API_KEY
"""
RELEASE_ANCHORS = """apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: &app radarr
  namespace: media
spec:
  interval: 1h
  chart:
    spec:
      chart: app-template
      sourceRef:
        kind: HelmRepository
        name: charts
  values:
    controllers:
      radarr:
        containers:
          app:
            image:
              repository: ghcr.io/example/radarr
              tag: "5.0"
            env:
              PORT: &port 7878
    service:
      app:
        controller: *app
        ports:
          http:
            port: *port
    ingress:
      app:
        hosts:
          - host: &app radarr.example.com
            paths:
              - path: /
                service:
                  name: radarr
                  port: &port http
        tls:
          - hosts: [*app]
    probes:
      port: *port
"""
ALERTMANAGER_TEMPLATE = """{{ define "slack.title" }}
  [{{ .Status | toUpper }}] {{ .CommonLabels.alertname }}
{{ end }}
"""
ALERTMANAGER_KUSTOMIZATION = """apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: default
resources:
  - ./configmap.yaml
configMapGenerator:
  - name: alertmanager-templates
    files:
      - slack.tmpl.yaml=./templates/slack.tmpl.yaml
  - name: recyclarr
    files:
      - recyclarr.yml=./config/recyclarr.yml
"""
SOPS_FLUX_KS = FLUX_KS + "  decryption:\n    provider: sops\n    secretRef:\n      name: sops-age\n"
SOPS_ENCRYPTED = """apiVersion: v1
kind: Secret
metadata:
  name: app-credentials
  namespace: default
type: Opaque
data:
  username: ENC[AES256_GCM,data:dXNlcg==,iv:aXY=,tag:dGFn,type:str]
  password: ENC[AES256_GCM,data:cGFzcw==,iv:aXY=,tag:dGFn,type:str]
sops:
  age:
    - recipient: age1examplerecipientexamplerecipientexamplerecipientexample
      enc: |
        -----BEGIN AGE ENCRYPTED FILE-----
        ZXhhbXBsZQ==
        -----END AGE ENCRYPTED FILE-----
  lastmodified: "2025-01-01T00:00:00Z"
  mac: ENC[AES256_GCM,data:bWFj,iv:aXY=,tag:dGFn,type:str]
  encrypted_regex: ^(data|stringData)$
  version: 3.9.0
"""
SOPS_DECRYPTED = SOPS_ENCRYPTED.split("sops:")[0].replace(
    "ENC[AES256_GCM,data:dXNlcg==,iv:aXY=,tag:dGFn,type:str]", "dXNlcg==").replace(
    "ENC[AES256_GCM,data:cGFzcw==,iv:aXY=,tag:dGFn,type:str]", "aHVudGVyMg==")
SOPS_DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  namespace: default
spec:
  selector:
    matchLabels:
      app: app
  template:
    metadata:
      labels:
        app: app
    spec:
      containers:
        - name: app
          image: ghcr.io/example/app:1.0
          envFrom:
            - secretRef:
                name: app-credentials
"""


def _in_cluster(folder: str, files: dict[str, str]) -> dict[str, str]:
    """`files` of the folder clusters/production/FOLDER, which a Flux Kustomization of the cluster folder applies."""
    path = f"clusters/production/{folder}"
    return {"clusters/production/apps.yaml": FLUX_KS.format(name="apps", path=f"./{path}"),
            **{f"{path}/{rel}": text for rel, text in files.items()}}


# name -> (command, files (no layout file: init writes it), the broken variant: (file, its text))
SURVEY = {
    # a configMapGenerator's data file (recyclarr's config) with custom tags, in the cluster folder
    "init-yaml-datafile": (["init", ".", "--gpu", "l4"], _in_cluster("recyclarr", {
        "kustomization.yaml": RECYCLARR_KUSTOMIZATION, "configmap.yaml": CM.format(name="recyclarr-env"),
        "config/recyclarr.yml": RECYCLARR_DATA}), ("clusters/production/recyclarr/configmap.yaml", BROKEN)),
    # a HelmRelease (app-template values) whose anchors &app and &port are defined again further down
    "init-duplicate-anchor": (["init", ".", "--gpu", "l4"], _in_cluster("radarr", {
        "kustomization.yaml": "resources:\n  - helmrelease.yaml\n", "helmrelease.yaml": RELEASE_ANCHORS}),
        ("clusters/production/radarr/helmrelease.yaml", RELEASE_ANCHORS.replace("port: *port\n", "port: *prot\n"))),
    # generator data files: one with custom tags, one that is no YAML at all (a Go template)
    "validate-yaml-datafile": (["validate", ".", "-o", "json", "--no-compat"], {
        "kubectl-triton.yaml": LAYOUT, **_in_cluster("alerting", {
            "kustomization.yaml": ALERTMANAGER_KUSTOMIZATION, "configmap.yaml": CM.format(name="alerting"),
            "templates/slack.tmpl.yaml": ALERTMANAGER_TEMPLATE, "config/recyclarr.yml": RECYCLARR_DATA})},
        # the template listed as a manifest: kustomize cannot read it
        ("clusters/production/alerting/kustomization.yaml", ALERTMANAGER_KUSTOMIZATION.replace(
            "  - ./configmap.yaml\n", "  - ./configmap.yaml\n  - ./templates/slack.tmpl.yaml\n"))),
    # a SOPS-encrypted Secret that Flux decrypts (spec.decryption), and the Deployment using it
    "sops-secret": (["validate", ".", "-o", "json", "--no-compat"], {
        "kubectl-triton.yaml": LAYOUT, ".sops.yaml": "creation_rules:\n  - path_regex: .*\\.sops\\.yaml$\n"
                                                    "    encrypted_regex: ^(data|stringData)$\n"
                                                    "    age: age1examplerecipient\n",
        "clusters/production/apps.yaml": SOPS_FLUX_KS.format(name="apps", path="./clusters/production/app"),
        "clusters/production/app/kustomization.yaml": "resources:\n  - secret.sops.yaml\n  - deployment.yaml\n",
        "clusters/production/app/secret.sops.yaml": SOPS_ENCRYPTED,
        "clusters/production/app/deployment.yaml": SOPS_DEPLOYMENT},
        # committed decrypted: a Secret in git
        ("clusters/production/app/secret.sops.yaml", SOPS_DECRYPTED)),
}


def _survey(run_cli, tmp_path: Path, monkeypatch, name: str, broken: bool = False) -> Any:
    args, files, (rel, text) = SURVEY[name]
    work = tmp_path / name
    for path, content in {**files, **({rel: text} if broken else {})}.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(content)
    monkeypatch.chdir(work)
    return run_cli(*args)


@pytest.mark.parametrize("name", sorted(SURVEY))
def test_survey_repros(run_cli, tmp_path, monkeypatch, name):
    result = _survey(run_cli, tmp_path, monkeypatch, name)
    assert "invalid YAML" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    if SURVEY[name][0][0] == "init":
        assert result.exit_code == 0, result.stderr
        assert (tmp_path / name / "kubectl-triton.yaml").is_file()
        return
    findings = json.loads(result.stdout)["findings"]
    assert [f for f in findings if f["severity"] == "error"] == []
    assert result.exit_code == 0, result.stdout


@pytest.mark.parametrize("name, code, where", [
    ("init-yaml-datafile", None, "clusters/production/recyclarr/configmap.yaml:5:1"),
    ("init-duplicate-anchor", None, "clusters/production/radarr/helmrelease.yaml:29:19"),
    ("validate-yaml-datafile", "YamlInvalid", "clusters/production/alerting/templates/slack.tmpl.yaml"),
    ("sops-secret", "SecretInGit", "clusters/production/app"),
])
def test_survey_repros_broken_still_fail(run_cli, tmp_path, monkeypatch, name, code, where):
    """The same repositories with a real mistake: init stops on the invalid YAML (naming file and line), validate
    reports the error."""
    result = _survey(run_cli, tmp_path, monkeypatch, name, broken=True)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.exit_code != 0
    if code is None:
        assert "invalid YAML" in result.stderr and where in result.stderr, result.stderr
        assert not (tmp_path / name / "kubectl-triton.yaml").exists()
        return
    findings = json.loads(result.stdout)["findings"]
    assert (code, where) in {(f["code"], f["path"]) for f in findings if f["severity"] == "error"}, findings
