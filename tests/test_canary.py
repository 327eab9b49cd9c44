"""`kubectl triton canary`, `promote` and `abort` on a copy of the example repository: the files they write,
what they render to (HTTPRoute validated against the bundled Gateway API schema), the routes check of
`validate`, one-line errors and all-or-nothing writes."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks.gate import Target
from kubectl_triton.checks.manifests import routes
from kubectl_triton.formats import schemas, yamlio
from kubectl_triton.gitops import scaffold

MODEL = "image-classifier"
CANARY_DIR = f"overlays/{MODEL}/l4-canary"
ROUTE = f"overlays/{MODEL}/route/httproute.yaml"
CONFIG = f"models/{MODEL}/image_classifier/config.pbtxt"
FLUX = "clusters/production/models"


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def tr(run_cli, repo_copy):
    def run(*args: str):
        res = run_cli(*args[:2], "--repo", str(repo_copy), *args[2:])
        assert "Traceback" not in res.stderr
        return res

    return run


def render(root: Path, rel: str) -> list[dict]:
    return yamlio.loads_all(kustomize.build(root / rel).yaml, rel)


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def route_check(root: Path) -> list:
    """The routes check over the overlays the example cluster applies (as validate would run it)."""
    from kubectl_triton.gitops import repo

    targets = []
    for ks in repo.flux_kustomizations(root):
        path = (root / ks.path).resolve()
        if path.is_dir() and repo.kustomization_file(path) and path.parent.parent.name != "clusters":
            targets.append(Target(path, repo.relative(root, path), render(root, repo.relative(root, path))))
    return routes.check(root, targets)


def test_start_writes_canary_route_and_flux_registration(tr, repo_copy):
    res = tr("canary", MODEL, "--version", "2", "--weight", "10")
    assert res.exit_code == 0, res.stderr
    assert (repo_copy / CONFIG).read_text().count("version_policy: { specific: { versions: [ 1 ] } }") == 1
    canary_cfg = (repo_copy / CANARY_DIR / "image_classifier.config.pbtxt").read_text()
    diff = [ln for ln in difflib.unified_diff((repo_copy / CONFIG).read_text().splitlines(), canary_cfg.splitlines(),
                                              lineterm="", n=0) if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    assert diff == ["-version_policy: { specific: { versions: [ 1 ] } }",
                    "+version_policy: { specific: { versions: [ 2 ] } }"]
    kust = (repo_copy / FLUX / "kustomization.yaml").read_text()
    assert f"  - {MODEL}-l4-canary.yaml\n" in kust and f"  - {MODEL}-route.yaml\n" in kust
    flux_route = yamlio.load_all(repo_copy / FLUX / f"{MODEL}-route.yaml")[0]
    assert {d["name"] for d in flux_route["spec"]["dependsOn"]} >= {f"{MODEL}-l4", f"{MODEL}-l4-canary"}

    stable, canary = render(repo_copy, f"overlays/{MODEL}/l4"), render(repo_copy, CANARY_DIR)
    route_objs = render(repo_copy, f"overlays/{MODEL}/route")
    (route,) = route_objs
    for obj in stable + canary + route_objs:  # HTTPRoute against the bundled Gateway API schema
        assert schemas.validate_object(obj) == [], obj["kind"]
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1" and route["metadata"]["namespace"] == "triton"
    refs = route["spec"]["rules"][0]["backendRefs"]
    assert [(r["name"], r["weight"]) for r in refs] == [(f"{MODEL}-triton", 90), (f"{MODEL}-triton-canary", 10)]
    (svc_s,), (svc_c,) = by_kind(stable, "Service"), by_kind(canary, "Service")
    assert [svc_s["metadata"]["name"], svc_c["metadata"]["name"]] == [r["name"] for r in refs]
    # The Services select disjoint pods: the stable selector does not match canary pods and vice versa.
    (dep_s,), (dep_c,) = by_kind(stable, "Deployment"), by_kind(canary, "Deployment")
    pods_s, pods_c = (d["spec"]["template"]["metadata"]["labels"] for d in (dep_s, dep_c))
    for svc, own, other in ((svc_s, pods_s, pods_c), (svc_c, pods_c, pods_s)):
        sel = svc["spec"]["selector"]
        assert all(own.get(k) == v for k, v in sel.items())
        assert not all(other.get(k) == v for k, v in sel.items())
    assert pods_c["triton.kubectl.io/track"] == "canary" and pods_c["triton.kubectl.io/model-version"] == "2"
    # No object name is shared between the tracks (Flux would fight over it).
    assert not {o["metadata"]["name"] for o in stable} & {o["metadata"]["name"] for o in canary}
    assert route_check(repo_copy) == []


def test_weight_change_is_a_one_line_diff(tr, repo_copy):
    assert tr("canary", MODEL, "--version", "2", "--weight", "10").exit_code == 0
    before = snapshot(repo_copy)
    res = tr("canary", MODEL, "--weight", "25")
    assert res.exit_code == 0, res.stderr
    after = snapshot(repo_copy)
    assert [k for k in after if after[k] != before.get(k)] == [ROUTE]
    old, new = before[ROUTE].decode().splitlines(), after[ROUTE].decode().splitlines()
    changed = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    assert len(changed) == 1 and "weight: 75}" in changed[0][1] and "weight: 25}" in changed[0][1]
    assert tr("canary", MODEL, "--weight", "25").stdout.startswith("unchanged")


def test_promote_makes_the_canary_version_stable(tr, repo_copy):
    assert tr("canary", MODEL, "--version", "2", "--weight", "10").exit_code == 0
    res = tr("promote", MODEL)
    assert res.exit_code == 0, res.stderr
    assert "version_policy: { specific: { versions: [ 2 ] } }" in (repo_copy / CONFIG).read_text()
    assert not (repo_copy / CANARY_DIR).exists() and not (repo_copy / FLUX / f"{MODEL}-l4-canary.yaml").exists()
    assert f"{MODEL}-l4-canary" not in (repo_copy / FLUX / "kustomization.yaml").read_text()
    (route,) = render(repo_copy, f"overlays/{MODEL}/route")
    assert route["spec"]["rules"][0]["backendRefs"] == [{"name": f"{MODEL}-triton", "port": 8000, "weight": 100}]
    assert route["metadata"]["annotations"]["triton.kubectl.io/stable-version"] == "2"
    # the stable overlay now carries version 2's folder
    (cm,) = [o for o in render(repo_copy, f"overlays/{MODEL}/l4") if o["kind"] == "ConfigMap"
             and "image_classifier__config.pbtxt" in o["data"]]
    assert "image_classifier__2__.gitkeep" in cm["data"]
    assert route_check(repo_copy) == []
    # a second canary builds on the route that stayed
    assert tr("canary", MODEL, "--version", "3", "--weight", "5").exit_code == 0
    assert route_check(repo_copy) == []


def test_abort_restores_the_tree_but_the_pin_and_the_route(tr, repo_copy):
    before = snapshot(repo_copy)
    assert tr("canary", MODEL, "--version", "2", "--weight", "10").exit_code == 0
    res = tr("abort", MODEL)
    assert res.exit_code == 0, res.stderr
    after = snapshot(repo_copy)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == [f"{FLUX}/{MODEL}-route.yaml", f"{FLUX}/kustomization.yaml", CONFIG,
                       f"overlays/{MODEL}/route/httproute.yaml", f"overlays/{MODEL}/route/kustomization.yaml"]
    assert "versions: [ 1 ]" in after[CONFIG].decode()
    assert route_check(repo_copy) == []


@pytest.mark.parametrize("args, message", [
    (("canary", MODEL, "--version", "2", "--weight", "101"), "--weight 101"),
    (("canary", MODEL, "--weight", "10"), "no canary in progress"),
    (("canary", MODEL, "--version", "1", "--weight", "10"), "already serves version 1"),
    (("canary", MODEL, "--version", "2", "--weight", "10", "--gpu", "t4"), "not registered with Flux"),
    (("canary", MODEL, "--version", "2", "--weight", "10", "--gpu", "h9000"), "no overlay"),
    (("canary", "ensemble-pipeline", "--version", "2", "--weight", "10"), "--triton-model"),
    (("canary", "ensemble-pipeline", "--version", "2", "--weight", "10", "--triton-model", "preprocessor"),
     "commit models/ensemble-pipeline/preprocessor/2/model.py"),
    (("canary", "nope", "--version", "2", "--weight", "10"), "no such model"),
    (("canary", MODEL, "--version", "2", "--weight", "10", "--gateway", "a/b/C"), "--gateway"),
    (("promote", MODEL), "no canary in progress"),
    (("abort", MODEL), "no canary in progress"),
    (("canary", "qwen25-7b", "--version", "2", "--weight", "10"),  # the vLLM backend reads N/model.json from git
     "commit models/qwen25-7b/qwen25_7b/2/model.json first"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tr, repo_copy, args, message):
    before = snapshot(repo_copy)
    res = tr(*args)
    assert res.exit_code == 2 and message in res.stderr, res.stderr
    assert len([ln for ln in res.stderr.splitlines() if ln.startswith("error:")]) == 1
    assert snapshot(repo_copy) == before


def _python_version(root: Path, tm: str, version: int) -> None:
    folder = root / "models" / "ensemble-pipeline" / tm
    (folder / str(version)).mkdir()
    (folder / str(version) / "model.py").write_text((folder / "1" / "model.py").read_text())


@pytest.mark.parametrize("args, message", [
    (("--stable-version", "-3"), "--stable-version -3: Triton versions are positive integers"),
    (("--stable-version", "0"), "--stable-version 0: Triton versions are positive integers"),
    (("--stable-version", "2"), "that is the canary's version"),
    (("--stable-version", "5"), "models/ensemble-pipeline/preprocessor/5/ is not committed"),
])
def test_a_stable_version_triton_cannot_serve_is_refused(tr, repo_copy, args, message):
    _python_version(repo_copy, "preprocessor", 2)
    before = snapshot(repo_copy)
    res = tr("canary", "ensemble-pipeline", "--version", "2", "--weight", "10", "--triton-model", "preprocessor",
             *args)
    assert res.exit_code == 2 and message in res.stderr, res.stderr
    assert snapshot(repo_copy) == before


def test_the_stable_track_keeps_the_version_triton_serves(tr, repo_copy):
    """Versions 1, 2 and 3 committed and no pin: Triton's latest policy serves 3, so a canary of 2 keeps the stable
    track on 3 (not on 1, the highest below the canary)."""
    for v in (2, 3):
        _python_version(repo_copy, "preprocessor", v)
    res = tr("canary", "ensemble-pipeline", "--version", "2", "--weight", "10", "--triton-model", "preprocessor")
    assert res.exit_code == 0, res.stderr
    config = (repo_copy / "models" / "ensemble-pipeline" / "preprocessor" / "config.pbtxt").read_text()
    assert "version_policy: { specific: { versions: [ 3 ] } }" in config


def test_a_second_canary_of_another_triton_model_names_it_on_the_route(tr, repo_copy):
    for tm in ("preprocessor", "postprocessor"):
        _python_version(repo_copy, tm, 2)
    assert tr("canary", "ensemble-pipeline", "--version", "2", "--weight", "10", "--triton-model",
              "preprocessor").exit_code == 0
    assert tr("promote", "ensemble-pipeline").exit_code == 0
    res = tr("canary", "ensemble-pipeline", "--version", "2", "--weight", "10", "--triton-model", "postprocessor")
    assert res.exit_code == 0, res.stderr
    route = yamlio.load_all(repo_copy / "overlays" / "ensemble-pipeline" / "route" / "httproute.yaml")[0]
    ann = route["metadata"]["annotations"]
    assert (ann["triton.kubectl.io/triton-model"], ann["triton.kubectl.io/stable-version"],
            ann["triton.kubectl.io/canary-version"]) == ("postprocessor", "1", "2")
    assert route_check(repo_copy) == []


def test_the_route_goes_to_the_namespace_of_the_layout(tr, repo_copy):
    layout = repo_copy / "kubectl-triton.yaml"
    layout.write_text(layout.read_text() + "namespace: ml\n")
    res = tr("canary", MODEL, "--version", "2", "--weight", "10")
    assert res.exit_code == 0, res.stderr
    kust = yamlio.load_all(repo_copy / "overlays" / MODEL / "route" / "kustomization.yaml")[0]
    assert kust["namespace"] == "ml"


def test_promote_with_the_component_kustomization_named_yml(tr, repo_copy):
    comp = repo_copy / "overlays" / MODEL / "model"
    (comp / "kustomization.yaml").rename(comp / "kustomization.yml")
    assert tr("canary", MODEL, "--version", "2", "--weight", "10").exit_code == 0
    res = tr("promote", MODEL)
    assert res.exit_code == 0, res.stderr


def test_promote_in_a_cluster_that_does_not_run_the_canary_is_refused(tr, repo_copy):
    """The canary folder is shared by the clusters: ending it from another cluster would leave the one that runs it
    with a Flux Kustomization of a deleted folder."""
    shutil.copytree(repo_copy / "clusters" / "production", repo_copy / "clusters" / "staging")
    assert tr("canary", MODEL, "--version", "2", "--weight", "10", "--cluster", "staging").exit_code == 0
    before = snapshot(repo_copy)
    for command in ("promote", "abort"):
        res = tr(command, MODEL, "--cluster", "production")
        assert res.exit_code == 2 and "clusters/staging/models/" in res.stderr, res.stderr
        assert snapshot(repo_copy) == before
    assert tr("abort", MODEL, "--cluster", "staging").exit_code == 0


def test_a_gateway_that_would_be_ignored_is_refused(tr, repo_copy):
    """Once the route exists (it outlives promote and abort) --gateway would change nothing: refused, not ignored."""
    assert tr("canary", MODEL, "--version", "2", "--weight", "10").exit_code == 0
    res = tr("canary", MODEL, "--weight", "20", "--gateway", "infra/other")
    assert res.exit_code == 2 and "--gateway" in res.stderr
    assert tr("abort", MODEL).exit_code == 0
    before = snapshot(repo_copy)
    res = tr("canary", MODEL, "--version", "2", "--weight", "10", "--gateway", "infra/other")
    assert res.exit_code == 2 and "keeps its parentRefs" in res.stderr, res.stderr
    assert snapshot(repo_copy) == before


def test_a_keda_scaled_canary_scales_on_its_own_queue(tr, repo_copy):
    res = tr("add-model", "kedam", "--backend", "onnxruntime", "--gpu", "l4", "--input", "input:FP32:3,224,224",
             "--output", "probs:FP32:1000", "--autoscaler", "keda")
    assert res.exit_code == 0, res.stderr
    assert tr("canary", "kedam", "--version", "2", "--weight", "10").exit_code == 0
    [stable] = by_kind(render(repo_copy, "overlays/kedam/l4"), "ScaledObject")
    [canary] = by_kind(render(repo_copy, "overlays/kedam/l4-canary"), "ScaledObject")

    def query(obj: dict, trigger: str) -> str:
        return next(t["metadata"]["query"] for t in obj["spec"]["triggers"] if t["name"] == trigger)
    assert 'service="kedam-triton"' in query(stable, "queue-compute-ratio")
    assert 'service="kedam-triton-canary"' in query(canary, "queue-compute-ratio")
    assert query(canary, "wake-up") == query(stable, "wake-up")  # the route both tracks share


def test_second_canary_is_refused(tr, repo_copy):
    assert tr("canary", MODEL, "--version", "2", "--weight", "10").exit_code == 0
    before = snapshot(repo_copy)
    res = tr("canary", MODEL, "--version", "3", "--weight", "10")
    assert res.exit_code == 2 and "serves version 2" in res.stderr
    assert snapshot(repo_copy) == before


@pytest.mark.parametrize("command", [("canary", MODEL, "--version", "2", "--weight", "10"), ("promote", MODEL),
                                     ("abort", MODEL)])
def test_failure_while_writing_leaves_the_tree_byte_identical(tr, repo_copy, monkeypatch, command):
    if command[0] != "canary":
        assert tr("canary", MODEL, "--version", "2", "--weight", "10").exit_code == 0
    before = snapshot(repo_copy)
    real, calls = scaffold._replace, []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(scaffold, "_replace", flaky)
    res = tr(*command)
    assert res.exit_code == 2 and "nothing was changed" in res.stderr
    assert snapshot(repo_copy) == before


def _reshape(path: Path, keys: tuple[str, ...]) -> None:
    """A hand edit kubectl triton cannot follow: the list at `keys` written as a mapping (its first item)."""
    yaml = YAML(typ="safe")
    doc = yaml.load(path.read_text())
    parent = doc
    for key in keys[:-1]:
        parent = parent[key]
    parent[keys[-1]] = parent[keys[-1]][0]
    with path.open("w") as fh:
        yaml.dump(doc, fh)


@pytest.mark.parametrize("command, rel, keys, words", [
    (("canary", MODEL, "--weight", "20"), ROUTE, ("spec", "rules"), "spec.rules must be a list, got dict"),
    (("promote", MODEL), f"{CANARY_DIR}/kustomization.yaml", ("labels",), "labels must be a list, got dict"),
    (("abort", MODEL), f"{FLUX}/{MODEL}-route.yaml", ("spec", "dependsOn"), "spec.dependsOn must be a list"),
])
def test_hand_edited_shapes_are_one_line_errors_naming_the_file(tr, repo_copy, command, rel, keys, words):
    assert tr("canary", MODEL, "--version", "2", "--weight", "10").exit_code == 0
    _reshape(repo_copy / rel, keys)
    before = snapshot(repo_copy)
    res = tr(*command)
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {rel}: {words}"), res.stderr
    assert snapshot(repo_copy) == before


def test_dry_run_writes_nothing(tr, repo_copy):
    before = snapshot(repo_copy)
    res = tr("canary", MODEL, "--version", "2", "--weight", "10", "--dry-run")
    assert res.exit_code == 0 and f"==> {ROUTE} <==" in res.stdout
    assert snapshot(repo_copy) == before


@pytest.mark.parametrize("weight, words", [("null", "sum to 91"), ('"ten"', "has weight 'ten', not an integer")])
def test_route_weights_of_odd_types_are_findings(tr, repo_copy, weight, words):
    """null is the default weight 1 to the API server; a string no weight at all (only v1 has a bundled schema)."""
    assert tr("canary", MODEL, "--version", "2", "--weight", "10").exit_code == 0
    route = repo_copy / ROUTE
    route.write_text(route.read_text().replace("weight: 10}", f"weight: {weight}}}"))
    found = [f for f in route_check(repo_copy) if f.code == "RouteWeights"]
    assert len(found) == 1 and found[0].severity == "error" and words in found[0].message, found


def test_routes_check_findings(tr, repo_copy):
    assert tr("canary", MODEL, "--version", "2", "--weight", "10").exit_code == 0
    route = repo_copy / ROUTE
    route.write_text(route.read_text().replace("weight: 10}", "weight: 15}").replace(
        '"2"', '"4"').replace("image-classifier-triton-canary, port: 8000", "image-classifier-triton-canary, port: 9"))
    cfg = repo_copy / CANARY_DIR / "image_classifier.config.pbtxt"
    cfg.write_text(cfg.read_text().replace("max_queue_delay_microseconds: 200", "max_queue_delay_microseconds: 50"))
    found = {(f.code, f.severity) for f in route_check(repo_copy)}
    assert found == {("RouteWeights", "error"), ("RouteBackendMissing", "error"),
                     ("RouteVersionMismatch", "error"), ("CanaryConfigDrift", "warning")}
    messages = " | ".join(f.message for f in route_check(repo_copy))
    assert "sum to 105" in messages and "has no port 9" in messages and "records version 4" in messages
    # the canary Flux file gone: its Service is no longer applied in the route's cluster
    (repo_copy / FLUX / f"{MODEL}-l4-canary.yaml").unlink()
    kust = repo_copy / FLUX / "kustomization.yaml"
    kust.write_text(kust.read_text().replace(f"  - {MODEL}-l4-canary.yaml\n", ""))
    assert "is not rendered by an overlay this route's cluster applies" in " ".join(
        f.message for f in route_check(repo_copy))
