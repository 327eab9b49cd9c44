"""LoRA adapter canaries behind an InferencePool (`canary MODEL --adapter NAME --to NEW --weight P`, promote and
abort --adapter): the InferenceModelRewrite the plan writes at each step, the rendered route folder against the
schemas converted from the Inference Extension's v1.3.1 CRDs, validate's ModelRewrite* findings on good and bad
repositories, one-line refusals, the OpenAI frontend's --lora-separator from Triton 25.05, and a real kube-apiserver
with the extension's CRD accepting the rewrite (server-side dry run)."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks.manifests import modelrewrites
from kubectl_triton.cli import main
from kubectl_triton.formats import schemas, yamlio
from kubectl_triton.gitops import scaffold
from tests.conftest import REPO

MODEL = "chat"
ROUTE = f"overlays/{MODEL}/route"
REWRITE = f"{ROUTE}/inferencemodelrewrite.yaml"
MULTI_LORA = f"models/{MODEL}/{MODEL}/1/multi_lora.json"
DEPLOYMENT = f"overlays/{MODEL}/model/deployment.yaml"


def _cli(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    return 0


def _adapter_config(path: Path, rank: int = 16) -> Path:
    path.write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen2.5-7B-Instruct", "peft_type": "LORA",
                                "r": rank, "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example repository plus `chat`: Qwen on Triton 25.05's vLLM backend behind the OpenAI-compatible frontend,
    routed through an InferencePool, with adapters sql and sql-v2, all through the CLI."""
    root = tmp_path_factory.mktemp("adapters") / "repo"
    for part in ("base", "overlays", "models", "clusters"):
        shutil.copytree(REPO / part, root / part)
    shutil.copy(REPO / "kubectl-triton.yaml", root / "kubectl-triton.yaml")
    assert _cli("add-model", MODEL, "--backend", "vllm", "--gpu", "l40s", "--route", "inferencepool",
                "--frontend", "openai", "--image-tag", "25.05", "--hf-model", "/artifacts/chat/hf",
                "--repo", str(root)) == 0
    for name in ("sql", "sql-v2"):
        config = _adapter_config(root.parent / f"{name}.json")
        assert _cli("add-adapter", MODEL, name, "--adapter-config", str(config), "--repo", str(root)) == 0
    # The cluster has the extension's experimental CRDs (InferenceModelRewrite) with its inference gateway.
    layout = root / "kubectl-triton.yaml"
    layout.write_text(layout.read_text().replace("    crds:\n", "    crds:\n      - inference.networking.x-k8s.io\n",
                                                 1))
    return root


@pytest.fixture
def lora_repo(built: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    shutil.copytree(built, dest)
    return dest


def _rewrite(root: Path) -> dict | None:
    path = root / REWRITE
    return yamlio.loads_all(path.read_text(), REWRITE)[0] if path.is_file() else None


def _targets(root: Path, client: str = "chat_lora_sql") -> list[tuple[str, int | None]] | None:
    doc = _rewrite(root)
    for rule in (doc or {}).get("spec", {}).get("rules", []):
        if [m["model"]["value"] for m in rule["matches"]] == [client]:
            return [(t["modelRewrite"], t.get("weight")) for t in rule["targets"]]
    return None


def _listed(root: Path) -> bool:
    return "inferencemodelrewrite.yaml" in yamlio.loads_all((root / ROUTE / "kustomization.yaml").read_text())[0][
        "resources"]


# ---- the plan, step by step ---------------------------------------------------------------------------------

# (command line after `kubectl triton`, the targets of the rule for chat_lora_sql afterwards: None when no rule)
STEPS: list[tuple[list[str], list[tuple[str, int | None]] | None]] = [
    (["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10"],
     [("chat_lora_sql", 90), ("chat_lora_sql-v2", 10)]),
    (["canary", MODEL, "--adapter", "sql", "--weight", "50"], [("chat_lora_sql", 50), ("chat_lora_sql-v2", 50)]),
    (["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "60"],  # again: a weight change
     [("chat_lora_sql", 40), ("chat_lora_sql-v2", 60)]),
    (["promote", MODEL, "--adapter", "sql"], [("chat_lora_sql-v2", None)]),
    (["canary", MODEL, "--adapter", "sql", "--to", "sql", "--weight", "5"],  # back to the original, as a canary
     [("chat_lora_sql-v2", 95), ("chat_lora_sql", 5)]),
    (["abort", MODEL, "--adapter", "sql"], [("chat_lora_sql-v2", None)]),  # the promoted alias stays
]


def test_canary_weight_promote_and_abort_write_the_rewrite(lora_repo: Path, run_cli):
    for args, expected in STEPS:
        before = (lora_repo / REWRITE).read_text() if (lora_repo / REWRITE).is_file() else ""
        result = run_cli(*args, "--repo", str(lora_repo))
        assert result.exit_code == 0, (args, result.stderr)
        assert _targets(lora_repo) == expected, args
        assert _listed(lora_repo)
        if args[-1] in ("50", "60"):  # a weight change is the two weight lines, nothing else
            after = (lora_repo / REWRITE).read_text().splitlines()
            changed = [a for a, b in zip(before.splitlines(), after, strict=True) if a != b]
            assert len(changed) == 2 and all("weight:" in line for line in changed), changed
    doc = _rewrite(lora_repo)
    assert doc is not None
    assert doc["metadata"] == {"name": MODEL, "labels": {"app.kubernetes.io/instance": MODEL}}
    assert doc["spec"]["poolRef"] == {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": MODEL}


def test_abort_of_a_first_canary_removes_the_file_and_its_entry(lora_repo: Path, run_cli):
    route_kust = (lora_repo / ROUTE / "kustomization.yaml").read_text()
    assert run_cli("canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10",
                   "--repo", str(lora_repo)).exit_code == 0
    assert run_cli("canary", MODEL, "--adapter", "sql-v2", "--to", "sql", "--weight", "20",
                   "--repo", str(lora_repo)).exit_code == 0  # a second adapter: a second rule
    assert _targets(lora_repo, "chat_lora_sql-v2") == [("chat_lora_sql-v2", 80), ("chat_lora_sql", 20)]
    result = run_cli("abort", MODEL, "--adapter", "sql", "--repo", str(lora_repo))
    assert result.exit_code == 0 and "go to adapter sql" in result.stderr
    assert _targets(lora_repo) is None and _targets(lora_repo, "chat_lora_sql-v2") is not None
    assert run_cli("abort", MODEL, "--adapter", "sql-v2", "--repo", str(lora_repo)).exit_code == 0
    assert not (lora_repo / REWRITE).exists()
    assert (lora_repo / ROUTE / "kustomization.yaml").read_text() == route_kust


def test_dry_run_writes_nothing(lora_repo: Path, run_cli):
    result = run_cli("canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10", "--dry-run",
                     "--repo", str(lora_repo))
    assert result.exit_code == 0 and "==> overlays/chat/route/inferencemodelrewrite.yaml <==" in result.stdout
    assert not (lora_repo / REWRITE).exists()


# ---- the rendered route folder -----------------------------------------------------------------------------

def test_the_rendered_route_folder_is_schema_valid(lora_repo: Path, run_cli):
    assert run_cli("canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10",
                   "--repo", str(lora_repo)).exit_code == 0
    objects = yamlio.loads_all(kustomize.build(lora_repo / ROUTE).yaml, ROUTE)
    kinds = {o["kind"] for o in objects}
    assert {"InferenceModelRewrite", "InferencePool", "HTTPRoute", "Deployment"} <= kinds
    for obj in objects:
        assert schemas.validate_object(obj, "1.35") == [], schemas.object_id(obj)
    (rewrite,) = [o for o in objects if o["kind"] == "InferenceModelRewrite"]
    assert rewrite["metadata"]["namespace"] == "triton"
    bad = copy.deepcopy(rewrite)
    bad["spec"]["rules"][0]["targets"][1]["weight"] = 0  # the CRD's minimum is 1
    assert [i.message for i in schemas.validate_object(bad)] == [
        "spec.rules.0.targets.1.weight: 0 is less than the minimum of 1"]
    picker = next(o for o in objects if o["kind"] == "Deployment")
    assert picker["spec"]["template"]["spec"]["containers"][0]["image"].endswith("/epp:v1.3.1")
    role = next(o for o in objects if o["kind"] == "Role")
    assert any("inferencemodelrewrites" in r["resources"] for r in role["rules"])


# ---- validate's findings -----------------------------------------------------------------------------------

def _rendered(root: Path) -> tuple[list[Any], dict]:
    """The serving overlay and the route folder as validate's targets, and the route's rewrite object."""
    targets = []
    for rel in (f"overlays/{MODEL}/l40s", ROUTE):
        objs = yamlio.loads_all(kustomize.build(root / rel).yaml, rel)
        targets.append(SimpleNamespace(path=root / rel, rel=rel, objects=objs))
    rewrite = next(o for o in targets[1].objects if o["kind"] == "InferenceModelRewrite")
    return targets, rewrite


def _server(targets: list[Any]) -> dict:
    return next(o for o in targets[0].objects if o["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"][0]


def _configmap(targets: list[Any]) -> dict:
    return next(o for o in targets[0].objects if o["kind"] == "ConfigMap" and "model-config" in o["metadata"]["name"])


def _second_object(targets: list[Any], rewrite: dict) -> None:
    other = copy.deepcopy(rewrite)
    other["metadata"]["name"] = "other"
    other["spec"]["rules"] = [{"matches": [{"model": {"value": "chat_lora_sql"}}],
                               "targets": [{"modelRewrite": "chat"}]}]
    targets[1].objects.append(other)


def _lora_off(targets: list[Any], rewrite: dict) -> None:
    data = _configmap(targets)["data"]
    data["chat__1__model.json"] = json.dumps({**json.loads(data["chat__1__model.json"]), "enable_lora": False})


CASES: dict[str, tuple[Callable[[list[Any], dict], None], set[tuple[str, str]], str]] = {
    "good": (lambda t, r: None, set(), ""),
    "unknown adapter": (lambda t, r: r["spec"]["rules"][0]["targets"][1].update(modelRewrite="chat_lora_nope"),
                        {("ModelRewriteTargetUnserved", "error")}, "chat_lora_nope is not a model"),
    "base model is served": (lambda t, r: r["spec"]["rules"][0]["targets"][1].update(modelRewrite="chat"), set(), ""),
    "weights all or none": (lambda t, r: r["spec"]["rules"][0]["targets"][1].pop("weight"),
                            {("ModelRewriteWeights", "error")}, "chat_lora_sql-v2 without a weight"),
    "pool missing": (lambda t, r: r["spec"]["poolRef"].update(name="ghost"),
                     {("ModelRewritePoolMissing", "error")}, "triton/ghost"),
    "another group": (lambda t, r: r["spec"]["poolRef"].update(group="inference.networking.x-k8s.io"),
                      {("ModelRewritePoolMissing", "error")}, "inference.networking.x-k8s.io"),
    "no matches": (lambda t, r: r["spec"]["rules"][0].pop("matches"), {("ModelRewriteOverlap", "warning")},
                   "rewrites every request"),
    "two rules for a name": (_second_object, {("ModelRewriteOverlap", "warning")}, "matches chat_lora_sql, as"),
    "no OpenAI frontend": (lambda t, r: (_server(t).pop("command"), _server(t).pop("args")),
                           {("ModelRewriteTargetUnserved", "error")}, "without the OpenAI-compatible frontend"),
    "no separator": (lambda t, r: _server(t)["args"].remove("--lora-separator=_lora_"),
                     {("ModelRewriteTargetUnserved", "error")}, "without --lora-separator"),
    "separator as two words": (lambda t, r: _server(t)["args"].__setitem__(
        slice(-1, None), ["--lora-separator", "_lora_"]), set(), ""),
    "enable_lora off": (_lora_off, {("ModelRewriteTargetUnserved", "error")}, "is not a model"),
    "pool selects no pods": (lambda t, r: t.__setitem__(0, SimpleNamespace(path=t[0].path, rel=t[0].rel,
                                                                           objects=[])),
                             {("ModelRewriteTargetUnserved", "info")}, "not checked"),
}


@pytest.fixture(scope="module")
def canary_renders(built: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any], dict]:
    root = tmp_path_factory.mktemp("renders") / "repo"
    shutil.copytree(built, root)
    assert _cli("canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10", "--repo", str(root)) == 0
    targets, rewrite = _rendered(root)
    return root, targets, rewrite


@pytest.mark.parametrize("case", list(CASES))
def test_check_findings(canary_renders, case: str):
    root, targets, rewrite = canary_renders
    targets = [SimpleNamespace(path=t.path, rel=t.rel, objects=copy.deepcopy(t.objects)) for t in targets]
    rewrite = next(o for o in targets[1].objects if o["kind"] == "InferenceModelRewrite")
    edit, expected, text = CASES[case]
    edit(targets, rewrite)
    found = modelrewrites.check(root, targets)
    assert {(f.code, f.severity) for f in found} == expected, [f.message for f in found]
    assert all(text in f.message for f in found)
    assert all(f.path == ROUTE for f in found)


def test_validate_runs_the_check(lora_repo: Path, run_cli):
    assert run_cli("canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10",
                   "--repo", str(lora_repo)).exit_code == 0
    result = run_cli("validate", str(lora_repo), "-o", "json")
    mine = [f for f in json.loads(result.stdout)["findings"] if MODEL in (f.get("path") or "")
            and f["severity"] != "info"]
    assert mine == [], mine
    text = (lora_repo / REWRITE).read_text().replace("modelRewrite: chat_lora_sql-v2", "modelRewrite: chat_lora_v3")
    (lora_repo / REWRITE).write_text(text)
    result = run_cli("validate", str(lora_repo), "-o", "json")
    codes = {(f["code"], f["path"]) for f in json.loads(result.stdout)["findings"] if f["severity"] == "error"}
    assert ("ModelRewriteTargetUnserved", ROUTE) in codes and result.exit_code == 1


# ---- refusals: exit 2, one line naming the file -------------------------------------------------------------

def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def _version_canary(root: Path) -> None:
    (root / f"overlays/{MODEL}/l40s-canary").mkdir()
    (root / f"overlays/{MODEL}/l40s-canary/kustomization.yaml").write_text("resources: [../l40s]\n")


def _separator_in_name(root: Path) -> None:
    config = _adapter_config(root.parent / "x.json")
    assert _cli("add-adapter", MODEL, "x_lora_y", "--adapter-config", str(config), "--repo", str(root)) == 0


REFUSALS: dict[str, tuple[Callable[[Path], None], list[str], str, str]] = {
    "no pool route": (lambda r: None, ["canary", "qwen25-7b", "--adapter", "sql", "--to", "x", "--weight", "10"],
                      "overlays/qwen25-7b/route/httproute.yaml", "no InferencePool route"),
    "route to Services": (lambda r: _edit(r / f"{ROUTE}/httproute.yaml", "kind: InferencePool, ", "kind: Service, "),
                          ["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10"],
                          f"{ROUTE}/httproute.yaml", "not to an InferencePool"),
    "NAME not an adapter": (lambda r: None, ["canary", MODEL, "--adapter", "nope", "--to", "sql-v2", "--weight", "10"],
                            MULTI_LORA, "--adapter 'nope' is not an adapter"),
    "NEW not an adapter": (lambda r: None, ["canary", MODEL, "--adapter", "sql", "--to", "nope", "--weight", "10"],
                           MULTI_LORA, "--to 'nope' is not an adapter"),
    "no OpenAI frontend": (lambda r: _edit(r / DEPLOYMENT, "openai_frontend/main.py", "other/main.py"),
                           ["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10"],
                           DEPLOYMENT, "does not run Triton's OpenAI-compatible frontend"),
    "no separator": (lambda r: _edit(r / DEPLOYMENT, "            - --lora-separator=_lora_\n", ""),
                     ["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10"],
                     DEPLOYMENT, "without --lora-separator"),
    "no adapters": (lambda r: (r / MULTI_LORA).unlink(),
                    ["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10"],
                    f"models/{MODEL}/", "lists LoRA adapters"),
    "version canary": (_version_canary, ["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10"],
                       f"overlays/{MODEL}/l40s-canary", "a version canary"),
    "separator in the name": (_separator_in_name,
                              ["canary", MODEL, "--adapter", "sql", "--to", "x_lora_y", "--weight", "10"],
                              MULTI_LORA, "more than once"),
    "weight 0": (lambda r: None, ["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "0"],
                 "--weight 0", "1 to 99"),
    "weight 100": (lambda r: None, ["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "100"],
                   "--weight 100", "promote sends everything"),
    "same adapter": (lambda r: None, ["canary", MODEL, "--adapter", "sql", "--to", "sql", "--weight", "10"],
                     "--to sql", "another adapter"),
    "weight without a canary": (lambda r: None, ["canary", MODEL, "--adapter", "sql", "--weight", "10"],
                                REWRITE, "no canary of adapter sql"),
    "promote without a canary": (lambda r: None, ["promote", MODEL, "--adapter", "sql"], f"{ROUTE}/",
                                 "no canary of adapter sql"),
    "abort without a canary": (lambda r: None, ["abort", MODEL, "--adapter", "sql"], f"{ROUTE}/",
                               "no canary of adapter sql"),
    "rule edited by hand": (lambda r: (r / f"{ROUTE}/inferencemodelrewrite.yaml").write_text(
        "apiVersion: inference.networking.x-k8s.io/v1alpha2\nkind: InferenceModelRewrite\nmetadata: {name: chat}\n"
        "spec:\n  poolRef: {name: chat}\n  rules:\n    - matches: [{model: {value: chat_lora_sql}}, "
        "{model: {value: x}}]\n      targets: [{modelRewrite: chat}]\n"),
        ["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10"], REWRITE, "edited by hand"),
    "another pool": (lambda r: (r / f"{ROUTE}/inferencemodelrewrite.yaml").write_text(
        "apiVersion: inference.networking.x-k8s.io/v1alpha2\nkind: InferenceModelRewrite\nmetadata: {name: chat}\n"
        "spec:\n  poolRef: {name: other}\n  rules: []\n"),
        ["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10"], REWRITE, "not the route's pool"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals(lora_repo: Path, run_cli, case: str):
    setup, args, where, text = REFUSALS[case]
    setup(lora_repo)
    before = {p: p.read_bytes() for p in lora_repo.rglob("*") if p.is_file()}
    result = run_cli(*args, "--repo", str(lora_repo))
    assert result.exit_code == 2, result.stderr
    line = result.stderr.strip().splitlines()[0]
    assert line.startswith(f"error: {where}") and text in line, line
    assert {p: p.read_bytes() for p in lora_repo.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("args", [
    ["canary", MODEL, "--to", "sql-v2", "--weight", "10"],
    ["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10", "--version", "2"],
    ["canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10", "--gateway", "other"],
    ["promote", MODEL, "--adapter", "sql", "--cluster", "production"],
])
def test_options_that_do_not_go_together(lora_repo: Path, run_cli, args: list[str]):
    result = run_cli(*args, "--repo", str(lora_repo))
    assert result.exit_code == 2 and "Error:" in result.stderr


def test_a_version_canary_is_refused_while_the_picker_rewrites(lora_repo: Path, run_cli):
    assert run_cli("canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10",
                   "--repo", str(lora_repo)).exit_code == 0
    result = run_cli("canary", MODEL, "--version", "2", "--weight", "10", "--repo", str(lora_repo))
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {REWRITE}: "), result.stderr


# ---- the OpenAI frontend's separator, add-adapter's hint ---------------------------------------------------

@pytest.mark.parametrize("tag,passed", [("24.12", False), ("25.04", False), ("25.05", True), ("26.03", True),
                                        ("25.05-custom", True), ("latest", False)])
def test_the_frontend_gets_the_separator_from_triton_25_05(tag: str, passed: bool):
    opts = scaffold.Options(name="chat", backend="tensorrtllm", gpus=("h200",), frontend="openai", image_tag=tag)
    doc = yamlio.loads_all(scaffold.deployment_patch(opts, ["ensemble"]))[0]
    args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ("--lora-separator=_lora_" in args) is passed


def test_add_adapter_says_how_openai_clients_name_it(lora_repo: Path, run_cli, tmp_path: Path):
    result = run_cli("add-adapter", MODEL, "sql-v3", "--adapter-config", str(_adapter_config(tmp_path / "a.json")),
                     "--repo", str(lora_repo))
    assert result.exit_code == 0
    assert 'OpenAI clients select it with "model": "chat_lora_sql-v3"' in result.stderr


# ---- a real API server with the extension's CRD ------------------------------------------------------------

def test_the_api_server_accepts_the_rewrite(lora_repo: Path, run_cli, tmp_path: Path):
    """Server-side dry run of the rendered rewrite on kube-apiserver 1.35 with the v1.3.1 CRD installed; the
    server's defaults match what the check assumes (poolRef.group, match type), and a weight of 0 is refused."""
    from kubectl_triton.adapters import controlplane
    from kubectl_triton.checks.server import load_crds
    from tests.cluster import assets

    assert run_cli("canary", MODEL, "--adapter", "sql", "--to", "sql-v2", "--weight", "10",
                   "--repo", str(lora_repo)).exit_code == 0
    objects = yamlio.loads_all(kustomize.build(lora_repo / ROUTE).yaml, ROUTE)
    rewrite = next(o for o in objects if o["kind"] == "InferenceModelRewrite")
    del rewrite["spec"]["poolRef"]["group"]  # left out, the server defaults it
    found = assets()
    # the extension's CRDs as hack/controlplane/crds.txt pins them (the release base/endpoint-picker runs)
    crd = next(c for c in load_crds(found.crds).get("inference.networking.x-k8s.io", [])
               if c["spec"]["names"]["kind"] == "InferenceModelRewrite")
    with controlplane.ControlPlane(found, tmp_path / "plane") as plane:
        kubectl = [str(plane.assets.binary("kubectl")), "--kubeconfig",
                   str(plane.kubeconfig_for("admin", ["system:masters"]))]

        def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*kubectl, *args], input=stdin, text=True, capture_output=True, check=check,
                                  timeout=120)

        run("apply", "-f", "-", stdin=json.dumps(crd))
        run("wait", "--for=condition=Established", "--timeout=60s",
            "crd/inferencemodelrewrites.inference.networking.x-k8s.io")
        run("create", "namespace", "triton")
        accepted = json.loads(run("apply", "--dry-run=server", "-o", "json", "-f", "-",
                                  stdin=json.dumps(rewrite)).stdout)
        assert accepted["spec"]["poolRef"]["group"] == "inference.networking.k8s.io"
        assert accepted["spec"]["rules"][0]["matches"][0]["model"]["type"] == "Exact"
        assert [t["weight"] for t in accepted["spec"]["rules"][0]["targets"]] == [90, 10]
        rewrite["spec"]["rules"][0]["targets"][1]["weight"] = 0
        refused = run("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(rewrite), check=False)
        assert refused.returncode != 0 and "weight" in refused.stderr
