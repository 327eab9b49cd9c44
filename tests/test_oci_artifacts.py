"""Model files as OCI images mounted as image volumes (issue 26): `add-model --artifact oci://`, `package-model`
(a reproducible image pushed with oras-py to the CNCF distribution registry on loopback), validate's checks of
the image's layout and of each cluster's Kubernetes version, and the image pulled back, assembled by the real init
script and loaded in the real tritonserver.

The model of the end-to-end test is not ours: Triton model_analyzer's quick-start add/sub ensemble
(../shared/conformance/realworld-configs), its config.pbtxt files in git and its model.py files in the image."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from kubectl_triton.adapters import kustomize, oci
from kubectl_triton.adapters.tritonserver import free_ports
from kubectl_triton.errors import InputError
from kubectl_triton.formats import schemas, yamlio
from kubectl_triton.gitops import artifacts
from tests.cluster import assets, cluster  # noqa: F401 - fixture
from tests.conftest import REPO, SHARED
from tests.registry import registry

QUICKSTART = SHARED / "conformance" / "realworld-configs" / \
    "triton-inference-server__model_analyzer__examples__quick-start"
QUICKSTART_MODELS = ("add", "sub", "ensemble_add_sub")
MODEL_PY = REPO / "tests" / "fixtures" / "oci" / "add_sub_model.py"
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("text", "expected"), [
    ("oci://registry.example.com/models/llama:v1", ("registry.example.com", "models/llama", "v1", None)),
    (f"oci://ghcr.io/acme/llama@{DIGEST}", ("ghcr.io", "acme/llama", None, DIGEST)),
    (f"localhost:5000/llama:v2@{DIGEST}", ("localhost:5000", "llama", "v2", DIGEST)),
    ("oci://127.0.0.1:5123/models/add-sub:v1", ("127.0.0.1:5123", "models/add-sub", "v1", None)),
    ("oci://llama:v1", None),  # no registry: kubelet would read it as Docker Hub's library/llama
    ("oci://registry.example.com/Models/llama:v1", None),  # repository paths are lower case
    ("oci://registry.example.com/models/llama", None),  # neither tag nor digest
    ("oci://registry.example.com/models/llama@sha256:abc", None),  # a digest is 64 hex digits
    ("oci://registry.example.com/models/llama:v1 extra", None),
])
def test_references_parse_as_kubelet_reads_them(text, expected):
    if expected is None:
        with pytest.raises(InputError) as err:
            artifacts.parse_reference(text)
        assert "\n" not in err.value.message and text in err.value.message
        return
    ref = artifacts.parse_reference(text)
    assert (ref.host, ref.repository, ref.tag, ref.digest) == expected


def test_the_image_is_reproducible(tmp_path):
    """The same files give the same digest whatever their times, owners and the order they were written in; a
    changed byte gives another; a symlink is refused (an image volume would carry a link into the node)."""
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, order in ((first, ("x", "y")), (second, ("y", "x"))):
        for name in order:
            (folder / name / "1").mkdir(parents=True)
            (folder / name / "1" / "model.py").write_text(f"# {name}\n")
    os.utime(second / "x" / "1" / "model.py", (1, 1))
    digests = []
    for folder in (first, second):
        with oci.work_dir() as work:
            image = oci.build(folder, work, "m", "m")
            digests.append(image.digest)
            assert sorted(image.files) == ["m/x/1/model.py", "m/y/1/model.py"]
            assert len(image.layers) == 2 and len(image.manifests) == 2  # a layer per entry; amd64 and arm64
    assert digests[0] == digests[1]
    (second / "x" / "1" / "model.py").write_text("# changed\n")
    with oci.work_dir() as work:
        assert oci.build(second, work, "m", "m").digest != digests[0]
    (second / "link").symlink_to("/etc/passwd")
    with oci.work_dir() as work, pytest.raises(InputError, match="not a plain file"):
        oci.build(second, work, "m", "m")


def _set_kubernetes(root: Path, section: dict | None) -> None:
    yaml = YAML()
    path = root / "kubectl-triton.yaml"
    doc = yaml.load(path.read_text()) if path.is_file() else {}
    if section is None:
        doc.pop("kubernetes", None)
    else:
        doc["kubernetes"] = section
    with path.open("w") as handle:
        yaml.dump(doc, handle)


def _quickstart_model(root: Path, run_cli, reference: str) -> Path:
    """add-model add-sub (python, an oci:// artifact), its Triton models replaced by the quick-start's configs."""
    result = run_cli("add-model", "add-sub", "--backend", "python", "--gpu", "l4", "--artifact", reference,
                     "--repo", str(root))
    assert result.exit_code == 0, result.stderr
    models = root / "models" / "add-sub"
    shutil.rmtree(models / "add_sub")
    for name in QUICKSTART_MODELS:
        (models / name).mkdir()
        shutil.copy(QUICKSTART / name / "config.pbtxt", models / name / "config.pbtxt")
    component = root / "overlays" / "add-sub" / "model" / "kustomization.yaml"
    yaml = YAML()
    doc = yaml.load(component.read_text())
    doc["configMapGenerator"][0]["files"] = [f"{n}__config.pbtxt=../../../models/add-sub/{n}/config.pbtxt"
                                             for n in QUICKSTART_MODELS]
    with component.open("w") as handle:
        yaml.dump(doc, handle)
    patch = component.parent / "deployment.yaml"
    patch.write_text(patch.read_text().replace("triton-models: add_sub", "triton-models: "
                                               + ",".join(sorted(QUICKSTART_MODELS))))
    return models


def _image_folder(dest: Path, leave_out: str | None = None) -> Path:
    """The quick-start's files but its config.pbtxt (git holds those): the version folders, the model.py of add
    and sub (the corpus keeps their names only: ours, tests/fixtures/oci/add_sub_model.py, stands in)."""
    for name in QUICKSTART_MODELS:
        for path in (QUICKSTART / name).rglob("*"):
            rel = path.relative_to(QUICKSTART)
            if path.is_file() and path.name != "config.pbtxt" and rel.as_posix() != leave_out:
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(MODEL_PY if path.name == "model.py" else path, dest / rel)
    return dest


def _findings(run_cli, root: Path, model: str = "add-sub") -> list[dict]:
    result = run_cli("validate", str(root), "-o", "json")
    assert result.exit_code in (0, 1), result.stderr
    return [f for f in json.loads(result.stdout)["findings"]
            if f.get("model") == model or (f.get("path") or "").startswith(f"overlays/{model}/")]


def _pull(host: str, reference: str, dest: Path) -> Path:
    """The image pulled back with oras-py (the linux/amd64 manifest of its index) and its layers unpacked in
    order into `dest`, as the container runtime lays out an image volume."""
    import oras.provider

    registry = oras.provider.Registry(insecure=True)
    container = registry.get_container(reference)
    index = registry.get_manifest(container, allowed_media_type=[oci.INDEX])
    entry = next(m for m in index["manifests"] if m["platform"] == {"architecture": "amd64", "os": "linux"})
    manifest = registry.get_manifest(registry.get_container(f"{reference.split('@')[0]}@{entry['digest']}"),
                                     allowed_media_type=[oci.MANIFEST])
    dest.mkdir(parents=True)
    for number, layer in enumerate(manifest["layers"]):
        blob = dest.parent / f"layer-{number}.tar"
        registry.download_blob(container, layer["digest"], str(blob))
        assert "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest() == layer["digest"]
        with tarfile.open(blob) as tar:
            tar.extractall(dest, filter="data")
    return dest


def _assemble(docs: list[dict], image_root: Path, work: Path) -> Path:
    """base/triton/assemble-model-repository.sh on the overlay's ConfigMap, /artifacts being the image's root."""
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "artifacts")
    assert set(volume) == {"name", "image"}  # the PVC is gone: the image is the artifact store
    init = next(c for c in spec["initContainers"] if c["name"] == "assemble-model-repository")
    pod_dir = next(e["value"] for e in init["env"] if e["name"] == "ARTIFACTS_DIR")
    cm_name = next(v["configMap"]["name"] for v in spec["volumes"] if v["name"] == "model-config")
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == cm_name)
    config, models = work / "config", work / "models"
    config.mkdir(parents=True)
    for key, value in cm["data"].items():
        (config / key).write_text(value)
    env = {**os.environ, "CONFIG_DIR": str(config), "MODEL_REPOSITORY": str(models),
           "ARTIFACTS_DIR": str(image_root / artifacts.in_pod(pod_dir))}
    subprocess.run(["bash", str(REPO / "base/triton/assemble-model-repository.sh")], env=env, check=True,
                   capture_output=True)
    return models


def test_package_push_pull_assemble_and_load(repo_copy, run_cli, tmp_path, install):
    """package-model pushes the image and points the model at its digest; validate passes it; the image pulled
    back and assembled loads in tritonserver and answers. The same model packaged without sub's model.py: validate
    names the missing file, and tritonserver refuses that model."""
    from kubectl_triton.adapters import tritonserver

    if not QUICKSTART.is_dir():
        pytest.skip(f"{QUICKSTART} is not beside this checkout")
    _set_kubernetes(repo_copy, {"version": "1.35"})
    with registry(tmp_path / "registry") as host:
        models = _quickstart_model(repo_copy, run_cli, f"oci://{host}/models/add-sub:v1")
        folder = _image_folder(tmp_path / "files")
        result = run_cli("package-model", "add-sub", str(folder), "--to", f"oci://{host}/models/add-sub:v1",
                         "--plain-http", "--repo", str(repo_copy))
        assert result.exit_code == 0, result.stderr
        meta = yamlio.load_all(models / "model.yaml")[0]["artifacts"]
        reference = meta["reference"]
        assert meta["source"] == "oci" and reference.startswith(f"{host}/models/add-sub@sha256:")
        layout = yamlio.load_all(models / artifacts.LAYOUT_FILE)[0]
        assert layout == {"reference": reference, "files": {
            f"add-sub/{n}/1/{f}": (MODEL_PY if f == "model.py" else QUICKSTART / n / "1" / f).stat().st_size
            for n, f in (("add", "model.py"), ("ensemble_add_sub", ".gitkeep"), ("sub", "model.py"))}}
        # The image is reproducible: the same folder again gives the digest git holds, and nothing changes.
        again = run_cli("package-model", "add-sub", str(folder), "--to", f"oci://{host}/models/add-sub:v1",
                        "--no-push", "--repo", str(repo_copy))
        assert again.exit_code == 0 and "updated" not in again.stdout and "created" not in again.stdout
        assert not [f for f in _findings(run_cli, repo_copy) if f["severity"] == "error"]

        rendered = kustomize.build(repo_copy / "overlays" / "add-sub" / "l4")
        docs = yamlio.loads_all(rendered.yaml)
        deployment = next(d for d in docs if d["kind"] == "Deployment")
        assert not schemas.validate_object(deployment, "1.35")
        image_root = _pull(host, reference, tmp_path / "image")
        assert sorted(p.relative_to(image_root).as_posix() for p in image_root.rglob("*") if p.is_file()) == \
            sorted(layout["files"])
        repo_dir = _assemble(docs, image_root, tmp_path / "pod")
        with tritonserver.TritonServer(repo_dir).start(timeout=120) as server:
            states = {m["name"]: m.get("state") for m in tritonserver.repository_index(server)}
            assert states == dict.fromkeys(QUICKSTART_MODELS, "READY"), server.log[-2000:]
            body = {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
                               {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [4, 3, 2, 1]}]}
            answer = server.request("POST", "/v2/models/ensemble_add_sub/infer", body)
            outputs = {o["name"]: o["data"] for o in answer["outputs"]}
            assert outputs == {"OUTPUT0": [5, 5, 5, 5], "OUTPUT1": [-3, -1, 1, 3]}

        # v2 lacks sub's model.py: the gate says so before a pod starts, and tritonserver agrees.
        broken = _image_folder(tmp_path / "broken", leave_out="sub/1/model.py")
        result = run_cli("package-model", "add-sub", str(broken), "--to", f"oci://{host}/models/add-sub:v2",
                         "--plain-http", "--repo", str(repo_copy))
        assert result.exit_code == 0, result.stderr
        missing = [f for f in _findings(run_cli, repo_copy) if f["code"] == "OciArtifactPathMissing"]
        assert [f["message"].split(" (")[0] for f in missing] == ["sub needs add-sub/sub/1/model.py"]
        reference = yamlio.load_all(models / "model.yaml")[0]["artifacts"]["reference"]
        docs = yamlio.loads_all(kustomize.build(repo_copy / "overlays" / "add-sub" / "l4").yaml)
        repo_dir = _assemble(docs, _pull(host, reference, tmp_path / "image2"), tmp_path / "pod2")
        server = tritonserver.TritonServer(repo_dir)
        try:  # the python backend waits on the stub that found no model.py: the server does not go live
            server.start(timeout=15)
            states = {m["name"]: m.get("state") for m in tritonserver.repository_index(server)}
        except tritonserver.TritonServerError:
            states = {}
        finally:
            server.stop()
        assert states.get("sub") != "READY"
        assert f"Python model file not found in '{repo_dir}/sub/1/model.py'" in server.log


def test_push_to_an_unreachable_registry_writes_nothing(repo_copy, run_cli, tmp_path):
    (port,) = free_ports(1)
    result = run_cli("add-model", "add-sub", "--backend", "python", "--gpu", "l4", "--artifact",
                     f"oci://127.0.0.1:{port}/models/add-sub:v1", "--repo", str(repo_copy))
    assert result.exit_code == 0, result.stderr
    before = {p: p.read_bytes() for p in (repo_copy / "models" / "add-sub").rglob("*") if p.is_file()}
    folder = tmp_path / "files" / "add_sub" / "1"
    folder.mkdir(parents=True)
    (folder / "model.py").write_text("# model\n")
    result = run_cli("package-model", "add-sub", str(tmp_path / "files"), "--to",
                     f"oci://127.0.0.1:{port}/models/add-sub:v1", "--plain-http", "--repo", str(repo_copy))
    assert result.exit_code == 1
    built, failed = result.stderr.strip().splitlines()
    assert built.startswith(f"built 127.0.0.1:{port}/models/add-sub@sha256:")
    assert failed == f"error: 127.0.0.1:{port}: cannot reach the registry: Connection refused"
    assert {p: p.read_bytes() for p in (repo_copy / "models" / "add-sub").rglob("*") if p.is_file()} == before


def _resnet(root: Path, run_cli, tmp_path: Path, reference: str = "oci://registry.example.com/models/resnet:v1",
            package: bool = True) -> None:
    """add-model resnet (onnxruntime) from an image; with `package`, its layout written by package-model
    --no-push (the digest git holds), the image holding resnet/1/model.onnx."""
    result = run_cli("add-model", "resnet", "--backend", "onnxruntime", "--gpu", "l4", "--artifact", reference,
                     "--repo", str(root))
    assert result.exit_code == 0, result.stderr
    if package:
        folder = tmp_path / "resnet-files" / "resnet" / "1"
        folder.mkdir(parents=True)
        (folder / "model.onnx").write_bytes(b"\x08\x07" * 64)
        result = run_cli("package-model", "resnet", str(folder.parent.parent), "--to", reference, "--no-push",
                         "--repo", str(root))
        assert result.exit_code == 0, result.stderr


OCI_CODES = {"ImageVolumeUnsupported", "ImageVolumeVersionUnknown", "SchemaInvalid", "OciReferenceMutable",
             "OciReferenceInvalid", "OciArtifactLayoutMissing", "OciArtifactLayoutInvalid", "OciArtifactLayoutStale",
             "OciArtifactPathMissing"}


@pytest.mark.parametrize(("kubernetes", "expected"), [
    (None, {"ImageVolumeVersionUnknown"}),
    ({"version": "1.35"}, set()),
    ({"version": "1.33"}, {"ImageVolumeUnsupported"}),  # beta, off by default
    ({"version": "1.33", "featureGates": {"ImageVolume": True}}, set()),
    ({"version": "1.35", "featureGates": {"ImageVolume": False}}, {"ImageVolumeUnsupported"}),
    ({"version": "1.35", "clusters": {"production": {"version": "1.32"}}}, {"ImageVolumeUnsupported"}),
    ({"version": "1.30"}, {"SchemaInvalid"}),  # no volumes[].image in 1.30's schema
], ids=["undeclared", "1.35", "1.33", "1.33-gate-on", "1.35-gate-off", "cluster-1.32", "1.30"])
def test_image_volumes_are_judged_per_cluster_version(repo_copy, run_cli, tmp_path, kubernetes, expected):
    _resnet(repo_copy, run_cli, tmp_path)
    _set_kubernetes(repo_copy, kubernetes)
    found = _findings(run_cli, repo_copy, "resnet")
    assert {f["code"] for f in found} & OCI_CODES == expected, [f["message"] for f in found]
    if kubernetes == {"version": "1.30"}:
        assert any("'image' was unexpected" in f["message"] for f in found)


def _layout_edit(root: Path, change) -> None:  # noqa: ANN001
    path = root / "models" / "resnet" / artifacts.LAYOUT_FILE
    path.write_text(change(path.read_text()))


@pytest.mark.parametrize(("case", "expected"), [
    ("tag-only", {"OciReferenceMutable", "OciArtifactLayoutMissing"}),
    ("stale", {"OciArtifactLayoutStale"}),
    ("other-repository", {"OciArtifactLayoutStale"}),
    ("unreadable", {"OciArtifactLayoutInvalid"}),
    ("file-missing", {"OciArtifactPathMissing"}),
    ("file-present", set()),
])
def test_the_layout_file_is_what_the_gate_checks(repo_copy, run_cli, tmp_path, case, expected):
    _set_kubernetes(repo_copy, {"version": "1.35"})
    _resnet(repo_copy, run_cli, tmp_path, package=case != "tag-only")
    if case == "stale":
        _layout_edit(repo_copy, lambda t: t.replace("@sha256:", "@sha256:0").replace(
            t.split("@sha256:")[1][:64], t.split("@sha256:")[1][:63]))
    elif case == "other-repository":
        _layout_edit(repo_copy, lambda t: t.replace("models/resnet@", "models/other@"))
    elif case == "unreadable":
        _layout_edit(repo_copy, lambda t: t.replace(": 128", ": many"))
    elif case == "file-missing":
        _layout_edit(repo_copy, lambda t: t.replace("model.onnx", "model.plan"))
    found = _findings(run_cli, repo_copy, "resnet")
    assert {f["code"] for f in found} & OCI_CODES == expected, [f["message"] for f in found]
    errors = [f for f in found if f["severity"] == "error"]
    assert bool(errors) == bool(expected - {"OciReferenceMutable", "OciArtifactLayoutMissing"})


def test_the_api_server_agrees_on_image_volumes(cluster, repo_copy, run_cli, tmp_path):  # noqa: F811
    """The rendered Deployment, server-side dry run: the real 1.35 API server keeps its image volume; the same API
    server with the ImageVolume gate off accepts the Deployment with the volume and its mounts silently dropped,
    which validate reports (ImageVolumeUnsupported) of a cluster declared so."""
    from kubectl_triton.adapters import controlplane

    _resnet(repo_copy, run_cli, tmp_path)
    docs = yamlio.loads_all(kustomize.build(repo_copy / "overlays" / "resnet" / "l4").yaml)
    deployment = json.dumps(next(d for d in docs if d["kind"] == "Deployment"))
    namespace = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "triton"}})
    cluster.kubectl("apply", "-f", "-", input=namespace)
    accepted = cluster.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", input=deployment)
    assert _artifact_mounts(json.loads(accepted.stdout)) == (["artifacts"], ["assemble-model-repository",
                                                                               "tritonserver"])
    with controlplane.ControlPlane(assets(), tmp_path / "gate-off",
                                   apiserver_flags=["--feature-gates=ImageVolume=false"]) as plane:
        admin = plane.kubeconfig_for("admin", ["system:masters"])
        kubectl = [str(plane.assets.binary("kubectl")), "--kubeconfig", str(admin)]
        subprocess.run([*kubectl, "apply", "-f", "-"], input=namespace, text=True, check=True, capture_output=True)
        dropped = subprocess.run([*kubectl, "apply", "--dry-run=server", "-o", "json", "-f", "-"], input=deployment,
                                 text=True, capture_output=True, check=True)
    assert _artifact_mounts(json.loads(dropped.stdout)) == ([], [])


def _artifact_mounts(deployment: dict) -> tuple[list[str], list[str]]:
    """The image volumes of a Deployment and the containers mounting the artifacts volume."""
    spec = deployment["spec"]["template"]["spec"]
    volumes = [v["name"] for v in spec["volumes"] if "image" in v]
    mounting = [c["name"] for key in ("initContainers", "containers") for c in spec.get(key) or []
                if any(m["name"] == "artifacts" for m in c.get("volumeMounts") or [])]
    return volumes, mounting
