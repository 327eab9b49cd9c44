"""The node-local cache of model weights (issue 26, point 2; docs/node-cache.md): `add-model --node-cache` and its
bad inputs, validate's gate (budget per cluster and GPU type, declared sizes and revisions, the local volume against
kubectl-triton.yaml, the Component order, hostPath only with the named exemption), the rendered overlay against the
schemas of the Kubernetes versions it claims, the real node-cache.sh (a restart skips the download, a new revision
gets a new folder, old revisions and failed downloads are cleaned up, two pods at once leave one copy, the real
`aws s3 sync` against an S3 endpoint), and the real API server, scheduler and Pod Security admission."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks.manifests import security
from kubectl_triton.formats import schemas, yamlio
from kubectl_triton.gitops import nodecache
from tests.cluster import cluster  # noqa: F401 - fixture
from tests.conftest import REPO

NODE_CODES = {"NodeCacheBudgetExceeded", "NodeCacheSizeMissing", "NodeCacheNotConfigured", "NodeCacheVolumeMismatch",
              "NodeCacheRevisionMismatch", "NodeCacheSyncMissing", "VolumeType", "SchemaInvalid"}
ADD = ("--backend", "onnxruntime", "--input", "input_ids:INT64:-1", "--output", "scores:FP32:1")
CACHE_PATH = "/mnt/nvme/triton-node-cache"


def _layout(root: Path, section: dict | None) -> None:
    yaml = YAML()
    path = root / "kubectl-triton.yaml"
    doc = yaml.load(path.read_text())
    if section is None:
        doc.pop("nodeCache", None)
    else:
        doc["nodeCache"] = section
    with path.open("w") as handle:
        yaml.dump(doc, handle)


def _add(run_cli, root: Path, name: str, size: str = "3Gi", gpu: str = "a10g", revision: str = "2025-06-01") -> None:
    result = run_cli("add-model", name, *ADD, "--gpu", gpu, "--artifact", f"s3://models/{name}", "--node-cache",
                     "--artifact-size", size, "--artifact-revision", revision, "--repo", str(root))
    assert result.exit_code == 0, result.stderr


@pytest.fixture
def cached(repo_copy, run_cli) -> Path:
    """The example repository with `reranker` (S3, a10g, 3Gi, 2 revisions kept) in the node cache, budget 200Gi."""
    _layout(repo_copy, {"path": CACHE_PATH, "budget": "200Gi"})
    _add(run_cli, repo_copy, "reranker")
    return repo_copy


def _errors(run_cli, root: Path) -> tuple[int, list[dict]]:
    result = run_cli("validate", str(root), "-o", "json")
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, [f for f in json.loads(result.stdout)["findings"] if f["severity"] == "error"]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def _hostpath(root: Path, exempt: bool) -> None:
    """The cache volume hand-written as a hostPath in reranker's overlay (what this design avoids)."""
    ops = [{"op": "replace", "path": "/spec/template/spec/volumes/1",
            "value": {"name": "node-cache", "hostPath": {"path": CACHE_PATH, "type": "DirectoryOrCreate"}}}]
    if exempt:
        ops.append({"op": "add", "path": "/metadata/annotations/triton.kubectl.io~1security-exempt",
                    "value": "VolumeType: the node-local model cache, a hostPath reviewed by the platform team"})
    kfile = root / "overlays/reranker/a10g/kustomization.yaml"
    kfile.write_text(kfile.read_text() + "patches:\n  - target:\n      kind: Deployment\n    patch: |-\n"
                     + "".join(f"      {line}\n" for line in json.dumps(ops, indent=1).splitlines()))


# case -> (what to change, the error codes validate reports, a text its message holds)
CASES = {
    "fits": (lambda r, run: None, set(), None),
    "overflows": (lambda r, run: _layout(r, {"path": CACHE_PATH, "budget": "5Gi"}), {"NodeCacheBudgetExceeded"},
                  "reranker 2 x 3Gi = 6Gi, more than one node's budget 5Gi (nodeCache.budget)"),
    "gpu-budget-overflows": (lambda r, run: _layout(r, {"path": CACHE_PATH, "budget": "200Gi",
                                                        "gpus": {"a10g": {"budget": "4Gi"}}}),
                             {"NodeCacheBudgetExceeded"}, "nodeCache.gpus.a10g.budget"),
    "gpu-budget-fits": (lambda r, run: _layout(r, {"path": CACHE_PATH, "budget": "1Gi",
                                                   "gpus": {"a10g": {"budget": "6Gi"}}}), set(), None),
    "two-models-overflow": (lambda r, run: _add(run, r, "ranker-xl", "100Gi"), {"NodeCacheBudgetExceeded"},
                            "ranker-xl 2 x 100Gi + reranker 2 x 3Gi = 206Gi"),
    "other-gpu-type-apart": (lambda r, run: _add(run, r, "ranker-xl", "100Gi", gpu="l4"), set(), None),
    "keep-one": (lambda r, run: (_layout(r, {"path": CACHE_PATH, "budget": "5Gi"}), _edit(
        r / "overlays/artifacts/node-cache/node-cache.yaml", 'value: "2"', 'value: "1"')), set(), None),
    "size-missing": (lambda r, run: _edit(r / "models/reranker/model.yaml", "  size: 3Gi\n", ""),
                     {"NodeCacheSizeMissing"}, "without artifacts.size"),
    "size-malformed": (lambda r, run: _edit(r / "models/reranker/model.yaml", "size: 3Gi", "size: 3GB"),
                       {"NodeCacheSizeMissing"}, "'3GB' is not a size"),
    "revision-mismatch": (lambda r, run: _edit(r / "models/reranker/model.yaml", '"2025-06-01"', '"2025-07-01"'),
                          {"NodeCacheRevisionMismatch"}, "NODE_CACHE_REVISION=2025-06-01"),
    "revision-malformed": (lambda r, run: _edit(r / "models/reranker/model.yaml", '"2025-06-01"', '"../v1"'),
                           {"NodeCacheRevisionMismatch"}, "artifacts.revision '../v1'"),
    "revision-missing": (lambda r, run: _edit(r / "overlays/reranker/model/kustomization.yaml",
                                              "      - NODE_CACHE_REVISION=2025-06-01\n", ""),
                         {"NodeCacheRevisionMismatch"}, "no NODE_CACHE_REVISION"),
    "not-configured": (lambda r, run: _layout(r, None), {"NodeCacheNotConfigured"}, "declares no nodeCache"),
    "path-mismatch": (lambda r, run: _layout(r, {"path": "/mnt/ssd/models", "budget": "200Gi"}),
                      {"NodeCacheVolumeMismatch"}, "nodeCache.path is /mnt/ssd/models"),
    "selector-mismatch": (lambda r, run: _layout(r, {"path": CACHE_PATH, "budget": "200Gi",
                                                     "nodeSelector": {"karpenter.sh/nodepool": "gpu-nvme"}}),
                          {"NodeCacheVolumeMismatch"}, "karpenter.sh/nodepool=gpu-nvme"),
    "s3-component-missing": (lambda r, run: _edit(r / "overlays/reranker/a10g/kustomization.yaml",
                                                  "  - ../../artifacts/s3\n", ""),
                             {"NodeCacheSyncMissing"}, "no image"),
    "hostpath-without-exemption": (lambda r, run: _hostpath(r, exempt=False), {"VolumeType"}, "docs/node-cache.md"),
    "hostpath-with-exemption": (lambda r, run: _hostpath(r, exempt=True), set(), None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_gate(cached, run_cli, case):
    change, expected, text = CASES[case]
    change(cached, run_cli)
    code, errors = _errors(run_cli, cached)
    assert {e["code"] for e in errors} & NODE_CODES == expected, [e["message"] for e in errors]
    assert code == (1 if errors else 0)
    if case != "s3-component-missing":  # there the init container lacks the S3 Component's securityContext too
        assert not [e for e in errors if e["code"] not in NODE_CODES], errors
    if text is not None:
        assert any(text in e["message"] for e in errors), [e["message"] for e in errors]


def test_add_model_writes_the_cache_and_it_renders_valid_for_the_versions_claimed(cached):
    meta = yamlio.load_all(cached / "models/reranker/model.yaml")[0]
    assert (meta["artifacts"]["size"], meta["artifacts"]["revision"]) == ("3Gi", "2025-06-01")
    docs = yamlio.loads_all(kustomize.build(cached / "overlays/reranker/a10g").yaml)
    # kubectl-triton.yaml declares 1.35; subPathExpr and fsGroupChangePolicy are GA since 1.17 and 1.23
    for version in ("1.35", "1.25"):
        assert [f"{i.object}: {i.message}" for d in docs for i in schemas.validate_object(d, version)] == [], version
    assert security.check_objects("overlays/reranker/a10g", docs) == []  # Pod Security "restricted", no exemption
    by_kind = {d["kind"]: d for d in docs}
    volume, claim = by_kind["PersistentVolume"], by_kind["PersistentVolumeClaim"]
    assert volume["spec"]["local"] == {"path": CACHE_PATH} and "namespace" not in volume["metadata"]
    assert volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": "triton.kubectl.io/node-cache", "operator": "In", "values": ["true"]}]}]
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"] == "reranker-node-cache"
    # a constant, whatever artifacts.size says: a bound claim without a StorageClass cannot be resized
    assert claim["spec"]["resources"]["requests"]["storage"] == volume["spec"]["capacity"]["storage"] == \
        nodecache.VOLUME_CAPACITY
    pod = by_kind["Deployment"]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-artifacts", "assemble-model-repository"]
    mounts = {c["name"]: m for c in [*pod["initContainers"], *pod["containers"]] for m in c["volumeMounts"]
              if m["name"] == "node-cache"}
    assert set(mounts) == {"fetch-artifacts", "assemble-model-repository", "tritonserver"}
    assert {m["subPathExpr"] for m in mounts.values()} == {"$(NODE_CACHE_MODEL)"}
    assert [n for n, m in mounts.items() if not m.get("readOnly")] == ["fetch-artifacts"]
    assert next(v for v in pod["volumes"] if v["name"] == "node-cache")["persistentVolumeClaim"] == {
        "claimName": "reranker-node-cache"}
    source = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith(
        "reranker-artifact-source-"))["data"]
    assert (source["NODE_CACHE_MODEL"], source["NODE_CACHE_REVISION"]) == ("reranker", "2025-06-01")
    # The package's copy is what this repository holds (and what `init` writes), byte for byte.
    ours = REPO / "overlays/artifacts/node-cache"
    package = REPO / "kubectl_triton/data/init/overlays/artifacts/node-cache"
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in package.iterdir())
    assert all((ours / p.name).read_bytes() == p.read_bytes() for p in package.iterdir())


def _layout_text(root: Path, text: str) -> None:
    path = root / "kubectl-triton.yaml"
    path.write_text(path.read_text() + text)


@pytest.mark.parametrize(("layout", "args", "message"), [
    (None, ("--artifact", "s3://models/x", "--node-cache", "--artifact-size", "1Gi"),
     "kubectl-triton.yaml declares no nodeCache"),
    ("nodeCache:\n  path: /mnt/nvme/c\n  budget: 1Ti\n", ("--artifact", "s3://models/x", "--node-cache"),
     "--node-cache: give --artifact-size"),
    ("nodeCache:\n  path: /mnt/nvme/c\n  budget: 1Ti\n", ("--node-cache", "--artifact-size", "1Gi"),
     "only for models synced from S3"),
    ("nodeCache:\n  path: /mnt/nvme/c\n  budget: 1Ti\n",
     ("--artifact", "oci://registry.example.com/m/x:v1", "--node-cache", "--artifact-size", "1Gi"),
     "kubelet already keeps an image volume per node"),
    ("nodeCache:\n  path: /mnt/nvme/c\n  budget: 1Ti\n",
     ("--artifact", "s3://models/x", "--node-cache", "--artifact-size", "16GB"), "--artifact-size '16GB'"),
    ("nodeCache:\n  path: /mnt/nvme/c\n  budget: 1Ti\n",
     ("--artifact", "s3://models/x", "--node-cache", "--artifact-size", "1Gi", "--artifact-revision", "../v1"),
     "--artifact-revision '../v1'"),
    (None, ("--artifact", "s3://models/x", "--artifact-size", "1Gi"), "only with --node-cache"),
    ("nodeCache:\n  path: /var/lib/kubelet/cache\n  budget: 1Ti\n",
     ("--artifact", "s3://models/x", "--node-cache", "--artifact-size", "1Gi"),
     "nodeCache/path /var/lib/kubelet/cache: a system folder"),
    ("nodeCache:\n  path: relative/cache\n  budget: 1Ti\n",
     ("--artifact", "s3://models/x", "--node-cache", "--artifact-size", "1Gi"), "kubectl-triton.yaml:"),
    ("nodeCache:\n  path: /mnt/nvme/c\n  budget: 0Gi\n",
     ("--artifact", "s3://models/x", "--node-cache", "--artifact-size", "1Gi"), "kubectl-triton.yaml:"),
])
def test_bad_input_is_one_line_and_writes_nothing(repo_copy, run_cli, layout, args, message):
    if layout is not None:
        _layout_text(repo_copy, layout)
    before = sorted(str(p.relative_to(repo_copy)) for p in repo_copy.rglob("*"))
    result = run_cli("add-model", "x", *ADD, "--gpu", "a10g", *args, "--repo", str(repo_copy))
    assert result.exit_code == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if not line.startswith("hint: ")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in result.stderr, result.stderr
    assert sorted(str(p.relative_to(repo_copy)) for p in repo_copy.rglob("*")) == before


@pytest.mark.parametrize(("path", "code"), [("/var/lib/kubelet/pods", "NodeCacheNotConfigured"),
                                          ("/etc/models", "NodeCacheNotConfigured"),
                                          ("relative/models", "LayoutInvalid")])
def test_a_bad_cache_folder_in_the_layout_is_named_with_its_line(cached, run_cli, path, code):
    _layout(cached, {"path": path, "budget": "200Gi"})
    _, errors = _errors(run_cli, cached)
    assert [e["code"] for e in errors if e["path"] == "kubectl-triton.yaml"] == [code], errors
    assert [e["line"] for e in errors if e["code"] == code][0], errors
    if code == "NodeCacheNotConfigured":  # the rest of the layout file stands: no other finding
        assert len(errors) == 1 and "a system folder" in errors[0]["message"], errors


# ---- node-cache.sh, for real --------------------------------------------------------------------------------------

class Node:
    """One node's cache folder and a pod's emptyDir, and node-cache.sh as the rendered ConfigMap holds it, run as the
    rendered fetch-artifacts init container runs it (its command, arguments and environment; the pod's paths moved
    under a temporary folder)."""

    def __init__(self, root: Path, tmp: Path) -> None:
        docs = yamlio.loads_all(kustomize.build(root / "overlays/reranker/a10g").yaml)
        pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
        self.fetch = next(c for c in pod["initContainers"] if c["name"] == "fetch-artifacts")
        configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
        script_cm = next(v["configMap"]["name"] for v in pod["volumes"] if v["name"] == "node-cache-script")
        self.script = tmp / "node-cache.sh"
        self.script.write_text(configmaps[script_cm][nodecache.SCRIPT])
        self.assembly = tmp / "assemble-model-repository.sh"
        self.assembly.write_text(next(d for n, d in configmaps.items() if n.startswith(
            "reranker-assemble-model-repository-"))["assemble-model-repository.sh"])
        self.config = next(d for n, d in configmaps.items() if n.startswith("reranker-model-config-"))
        env = {}
        for ref in self.fetch.get("envFrom", []):
            if "configMapRef" in ref:
                env.update(configmaps[ref["configMapRef"]["name"]])
        env.update({e["name"]: e["value"] for e in self.fetch["env"] if "value" in e})
        model = env[nodecache.MODEL_KEY]
        self.tmp, self.model = tmp, model
        self.cache = tmp / "node" / CACHE_PATH.strip("/") / model  # the subPath the pod mounts
        self.cache.mkdir(parents=True)
        self.env = {**env, "NODE_CACHE_DIR": str(self.cache),
                    "ARTIFACTS_DIR": str(tmp / "pod" / env["ARTIFACTS_DIR"].strip("/"))}

    def start(self, download: list[str] | None = None, pod: str = "reranker-triton-1", **env: str
              ) -> subprocess.CompletedProcess[str]:
        """One start of the init container: `download` replaces the rendered `aws s3 sync ...` (same contract:
        the destination folder is appended)."""
        full = {**self.env, **env}
        args = download or [re.sub(r"\$\((\w+)\)", lambda m: full[m.group(1)], a) for a in self.fetch["args"]]
        command = [self.fetch["command"][0], str(self.script)]
        return subprocess.run([*command, *args], env={**os.environ, **full, "HOSTNAME": pod}, capture_output=True,
                              text=True, timeout=120)

    @property
    def link(self) -> Path:
        return Path(self.env["ARTIFACTS_DIR"])

    def copies(self) -> list[str]:
        return sorted(p.name for p in self.cache.iterdir() if not p.name.startswith(".lock-"))


def _files(folder: Path) -> None:
    (folder / "reranker" / "1").mkdir(parents=True)
    (folder / "reranker" / "1" / "model.onnx").write_bytes(b"\x08\x07onnx" * 100)


@pytest.fixture
def node(cached, tmp_path) -> Node:
    return Node(cached, tmp_path)


def test_a_restart_on_the_same_node_skips_the_download(node, tmp_path):
    bucket = tmp_path / "bucket"
    _files(bucket)
    copy = ["cp", "-R", f"{bucket}/."]
    first = node.start(copy)
    assert first.returncode == 0, first.stderr
    assert "node-cache: miss: downloading 2025-06-01-" in first.stdout
    [key] = node.copies()
    assert key.startswith("2025-06-01-") and (node.cache / key / ".complete").is_file()
    assert node.link.resolve() == (node.cache / key).resolve()
    # The real assembly script, as the next init container runs it, links the model file through the cache.
    config, models = tmp_path / "config", tmp_path / "models"
    config.mkdir()
    for name, text in node.config.items():
        (config / name).write_text(text)
    subprocess.run(["bash", str(node.assembly)], check=True, capture_output=True, env={
        **os.environ, "CONFIG_DIR": str(config), "ARTIFACTS_DIR": str(node.link), "MODEL_REPOSITORY": str(models)})
    assert (models / "reranker" / "1" / "model.onnx").read_bytes() == b"\x08\x07onnx" * 100
    assert (models / "reranker" / "1").resolve() == (node.cache / key / "reranker" / "1").resolve()
    # The pod restarts (or another pod of the model comes to this node): the bucket is gone, nothing is downloaded.
    shutil.rmtree(bucket)
    again = node.start(copy, pod="reranker-triton-2")
    assert again.returncode == 0, again.stderr
    assert "node-cache: hit" in again.stdout and "downloading" not in again.stdout
    assert node.copies() == [key] and node.link.resolve() == (node.cache / key).resolve()


def test_revisions_get_their_own_folders_and_a_node_keeps_two(node, tmp_path):
    bucket = tmp_path / "bucket"
    _files(bucket)
    copy = ["cp", "-R", f"{bucket}/."]
    keys = []
    for revision in ("r1", "r2", "r3"):
        (bucket / "revision").write_text(revision)
        started = node.start(copy, NODE_CACHE_REVISION=revision)
        assert started.returncode == 0, started.stderr
        keys.append(next(k for k in node.copies() if k.startswith(f"{revision}-")))
        assert (node.link / "revision").read_text() == revision
    assert node.copies() == sorted(keys[1:])  # r1, the least recently used of three, removed
    # ... before r3's download: the node never holds more than two revisions (the budget)
    assert started.stdout.index("removing r1-") < started.stdout.index("downloading r3-")
    # The same revision from another prefix is another folder: a copy is never taken for other files.
    other = node.start(copy, NODE_CACHE_REVISION="r3", ARTIFACTS_URI="s3://models/reranker-v2")
    assert other.returncode == 0 and "downloading r3-" in other.stdout
    assert len([k for k in node.copies() if k.startswith("r3-")]) == 2
    # A download that fails leaves nothing behind, and the pod does not start.
    failed = node.start(["false"], NODE_CACHE_REVISION="r4")
    assert failed.returncode != 0 and not [k for k in node.copies() if k.startswith(("r4", ".partial"))]
    # A missing or empty prefix syncs nothing and exits 0: never cached (a later start downloads again).
    empty = node.start(["true"], NODE_CACHE_REVISION="r5")
    assert empty.returncode == 1 and "gave no files; nothing is cached" in empty.stderr
    assert not [k for k in node.copies() if k.startswith(("r5", ".partial"))]
    # A revision that cannot name a folder stops the init container before anything is touched.
    before = node.copies()
    refused = node.start(copy, NODE_CACHE_REVISION="../../etc")
    assert refused.returncode == 2 and "NODE_CACHE_REVISION" in refused.stderr and node.copies() == before


def test_two_pods_downloading_at_once_leave_one_copy(node, tmp_path):
    bucket = tmp_path / "bucket"
    _files(bucket)
    slow = ["sh", "-c", f'sleep 1; cp -R "{bucket}/." "$0"']
    full = {**node.env}
    procs = [subprocess.Popen(["bash", str(node.script), *slow], env={**os.environ, **full, "HOSTNAME": pod},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for pod in ("reranker-triton-a", "reranker-triton-b")]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    [key] = node.copies()  # no .partial-* left, one copy
    # they take turns: one downloads, the other finds its copy
    assert sorted("miss: downloading" in out for out, _ in outs) == [False, True], outs
    assert sum("node-cache: hit" in out for out, _ in outs) == 1, outs
    assert (node.cache / key / "reranker" / "1" / "model.onnx").is_file()


def test_a_pod_deleted_mid_download_ends_at_once_and_leaves_nothing(node, tmp_path):
    """bash as PID 1 ignores SIGTERM unless it traps it: the pod's deletion would wait its whole grace period and
    SIGKILL it, leaving the partial download."""
    proc = subprocess.Popen(["bash", str(node.script), "sh", "-c", 'touch "$0/half"; exec sleep 120'],
                            env={**os.environ, **node.env, "HOSTNAME": "reranker-triton-x"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not list(node.cache.glob(".partial-*/half")) and time.monotonic() < deadline:
        time.sleep(0.1)
    started = time.monotonic()
    proc.terminate()
    proc.communicate(timeout=60)
    assert proc.returncode == 143 and time.monotonic() - started < 30  # at once, not after the 120 s sleep
    assert node.copies() == []


def test_an_abandoned_download_is_removed_after_six_hours(node, tmp_path):
    bucket = tmp_path / "bucket"
    _files(bucket)
    old, fresh = node.cache / ".partial-r0-abc-reranker-triton-dead", node.cache / ".partial-r0-abc-reranker-triton-now"
    old.mkdir()
    fresh.mkdir()
    stamp = time.time() - 7 * 3600
    os.utime(old, (stamp, stamp))
    assert node.start(["cp", "-R", f"{bucket}/."]).returncode == 0
    assert not old.exists() and fresh.exists()  # a pod downloading right now keeps its folder


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_rendered_aws_s3_sync_fills_the_cache_from_an_s3_endpoint(node, tmp_path):
    """The rendered init container's own arguments (aws s3 sync --no-progress $(ARTIFACTS_URI)) against moto's S3
    server on loopback; then the bucket is emptied and a restart still starts, from the cache."""
    aws, moto = shutil.which("aws"), shutil.which("moto_server")
    if not aws or not moto:
        pytest.skip("the aws CLI and moto_server are not on PATH")
    port = _free_port()
    server = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
        _files(tmp_path / "upload")
        for args in (["s3", "mb", "s3://models"], ["s3", "cp", "--recursive", str(tmp_path / "upload"),
                                                   "s3://models/reranker"]):
            subprocess.run([aws, *args], env=env, check=True, capture_output=True, timeout=60)
        credentials = {k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                                           "AWS_ENDPOINT_URL")}
        first = node.start(**credentials)
        assert first.returncode == 0, first.stderr
        assert "downloading" in first.stdout and "(aws s3 sync --no-progress s3://models/reranker)" in first.stdout
        assert (node.link / "reranker" / "1" / "model.onnx").read_bytes() == b"\x08\x07onnx" * 100
        subprocess.run([aws, "s3", "rm", "--recursive", "s3://models/reranker"], env=env, check=True,
                       capture_output=True, timeout=60)
        again = node.start(**credentials)
        assert again.returncode == 0 and "node-cache: hit" in again.stdout, again.stdout + again.stderr
        assert (node.link / "reranker" / "1" / "model.onnx").is_file()
    finally:
        server.terminate()
        server.wait(timeout=30)


# ---- the real API server, scheduler and Pod Security admission ------------------------------------------------------

NAMESPACE = "node-cache-test"


def test_the_cluster_binds_admits_and_schedules_onto_cache_nodes_only(cluster, cached):  # noqa: F811
    """The rendered volume, claim and Deployment applied for real (three replicas that may not share a node): the
    claim binds, Pod Security "restricted" admits the pods, and the scheduler puts two on the two cache nodes of the
    GPU type and leaves the third Pending (the node without the label "didn't match PersistentVolume's node
    affinity"); the same Deployment with a hostPath volume has its pods refused by the namespace's Pod Security
    admission."""
    docs = yamlio.loads_all(kustomize.build(cached / "overlays/reranker/a10g").yaml)
    platform = yamlio.loads_all(kustomize.build(cached / "base/platform").yaml)
    namespace = next(d for d in platform if d["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    namespace["metadata"]["name"] = NAMESPACE
    kinds = ("PersistentVolume", "PersistentVolumeClaim", "ConfigMap", "ServiceAccount", "Deployment")
    kept = [d for d in docs if d["kind"] in kinds]
    for doc in kept:
        if doc["kind"] != "PersistentVolume":
            doc["metadata"]["namespace"] = NAMESPACE
    volume = next(d for d in kept if d["kind"] == "PersistentVolume")
    volume["metadata"]["name"] = "reranker-node-cache-test"
    claim = next(d for d in kept if d["kind"] == "PersistentVolumeClaim")
    claim["spec"]["volumeName"] = volume["metadata"]["name"]
    deployment = next(d for d in kept if d["kind"] == "Deployment")
    deployment["spec"]["replicas"] = 3  # one pod per node: two cache nodes take two
    labels = deployment["spec"]["selector"]["matchLabels"]
    deployment["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": labels},
                                                            "topologyKey": "kubernetes.io/hostname"}]}}
    nodes = {"nc-a10g-0": True, "nc-a10g-1": True, "nc-a10g-2": False}
    try:
        for name, cache in nodes.items():
            cluster.add_gpu_node(name, "NVIDIA-A10G", 4)
            if cache:
                cluster.kubectl("label", "node", name, "triton.kubectl.io/node-cache=true")
        # The claim Bound before any pod asks for it: a pod the scheduler first sees with an unbound claim waits for
        # its retry, which a loaded machine may push past the wait below.
        cluster.apply([namespace, *[d for d in kept if d is not deployment]])
        cluster.wait_for("the claim Bound", lambda: cluster.get(
            "pvc", claim["metadata"]["name"], "-n", NAMESPACE)["status"].get("phase") == "Bound")
        cluster.apply([deployment])

        def placed() -> tuple[list[str], str] | None:
            selector = f"app.kubernetes.io/instance={labels['app.kubernetes.io/instance']}"
            pods = cluster.get("pods", "-n", NAMESPACE, "-l", selector)["items"]
            where = sorted(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName"))
            events = cluster.get("events", "-n", NAMESPACE, "--field-selector", "reason=FailedScheduling")["items"]
            why = next((e["message"] for e in events if "node affinity" in e["message"]), "")
            return (where, why) if len(pods) == 3 and len(where) == 2 and why else None

        try:
            where, why = cluster.wait_for("two pods scheduled, one not", placed)
        except AssertionError as err:
            events = cluster.get("events", "-n", NAMESPACE)["items"]
            raise AssertionError(f"{err}: {[(e['reason'], e['message']) for e in events]}") from None
        # The two cache nodes, one pod each (both mount the one ReadWriteOnce volume); never the node without it.
        assert where == ["nc-a10g-0", "nc-a10g-1"]
        assert "1 node(s) didn't match PersistentVolume's node affinity" in why, why
        # The same pods with the cache as a hostPath: the namespace's admission refuses every one of them.
        cluster.kubectl("delete", "deployment", deployment["metadata"]["name"], "-n", NAMESPACE, "--wait=true")
        spec = deployment["spec"]["template"]["spec"]
        spec["volumes"] = [v if v["name"] != "node-cache" else
                           {"name": "node-cache", "hostPath": {"path": CACHE_PATH, "type": "DirectoryOrCreate"}}
                           for v in spec["volumes"]]
        deployment["metadata"]["name"] = "reranker-hostpath"
        cluster.apply([deployment])

        def refused() -> str | None:
            events = cluster.get("events", "-n", NAMESPACE, "--field-selector", "reason=FailedCreate")["items"]
            return next((e["message"] for e in events if "hostPath" in e["message"]), None)

        message = cluster.wait_for("the ReplicaSet's FailedCreate", refused)
        assert 'violates PodSecurity "restricted:latest"' in message and "restricted volume types" in message
        pods = cluster.get("pods", "-n", NAMESPACE)["items"]
        assert not [p for p in pods if p["metadata"]["name"].startswith("reranker-hostpath")]
    finally:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        cluster.kubectl("delete", "pv", volume["metadata"]["name"], "--wait=false", check=False)
        for name in nodes:
            cluster.kubectl("delete", "node", name, "--wait=false", check=False)
