"""Both tracks of a canary in the real tritonserver: each overlay's model repository is assembled by the pod's
own init script from its rendered ConfigMap (artifacts for versions 1 and 2 in the store), shadowed with
python stubs, and served; the stable pod serves only version 1, the canary pod only version 2."""

from __future__ import annotations

import pytest

from kubectl_triton.adapters.shadow import build_shadow
from tests.test_canary import MODEL, render
from tests.test_model_repositories import assemble

tritonserver = pytest.importorskip("kubectl_triton.adapters.tritonserver")


def _ready(server, version: int) -> bool:
    from kubectl_triton.adapters.tritonserver import _http_status

    return _http_status(f"{server.http_url}/v2/models/image_classifier/versions/{version}/ready") == 200


def test_stable_and_canary_serve_their_own_version(install, run_cli, repo_copy, tmp_path):
    res = run_cli("canary", "--repo", str(repo_copy), MODEL, "--version", "2", "--weight", "10")
    assert res.exit_code == 0, res.stderr
    for track, overlay, serves, not_serves in (("stable", f"overlays/{MODEL}/l4", 1, 2),
                                               ("canary", f"overlays/{MODEL}/l4-canary", 2, 1)):
        work = tmp_path / track
        for v in (1, 2):  # the artifact store holds both versions' model files
            (work / "artifacts" / "image_classifier" / str(v)).mkdir(parents=True)
            (work / "artifacts" / "image_classifier" / str(v) / "model.onnx").write_bytes(b"onnx")
        models = assemble(render(repo_copy, overlay), work)
        assert sorted(p.name for p in (models / "image_classifier").iterdir() if p.name.isdigit()) == ["1", "2"]
        build_shadow(models, work / "shadow")
        with tritonserver.TritonServer(work / "shadow").start(timeout=120) as server:
            assert _ready(server, serves), (track, server.log[-2000:])
            assert not _ready(server, not_serves), track
            index = {(m["name"], m.get("version"), m.get("state")) for m in tritonserver.repository_index(server)}
            assert ("image_classifier", str(serves), "READY") in index, index
