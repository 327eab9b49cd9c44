"""The engine-build Job's build-info capture, as it ran on a real NVIDIA H200 (the `device` machine;
command and output in the issue note). The fixtures are that run's raw files."""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, timezone

from kubectl_triton.compat.catalog import by_smi_name, gfd_label_for
from tests.conftest import REPO

FIXTURES = REPO / "tests/fixtures/device"


def _capture_module():
    spec = importlib.util.spec_from_file_location("build_info", REPO / "base/engine-build/build-info.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_real_nvidia_smi_reading_parses_to_the_recorded_build_info():
    capture = _capture_module()
    rows = capture.parse_smi((FIXTURES / "h200-nvidia-smi.csv").read_text())
    recorded = json.loads((FIXTURES / "h200-build-info.json").read_text())
    built_at = datetime.strptime(recorded["built_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    versions = {"tensorrt_llm": recorded["tensorrt_llm_version"], "tensorrt": recorded["tensorrt_version"]}
    again = capture.build_info(capture.pick_gpu(rows), versions, recorded["image"], built_at)
    assert again == recorded
    assert (recorded["gpu_name"], recorded["compute_capability"], recorded["gpu_memory_mib"]) == \
        ("NVIDIA H200", "9.0", 143771)


def test_real_reading_maps_to_the_h200_catalog_entry_and_gfd_label():
    recorded = json.loads((FIXTURES / "h200-build-info.json").read_text())
    gpu = by_smi_name(recorded["gpu_name"])
    assert gpu is not None and gpu.key == "h200"
    assert gpu.compute_capability == recorded["compute_capability"]
    assert gfd_label_for(recorded["gpu_name"]) == "NVIDIA-H200"
    # The repo's h200 GPU Component selects nodes with exactly that GFD label.
    assert "nvidia.com/gpu.product: NVIDIA-H200\n" in (REPO / "overlays/gpus/h200/gpu.yaml").read_text()


def test_job_log_prints_the_same_build_info_on_one_marked_line():
    lines = (FIXTURES / "h200-build-info.log").read_text().splitlines()
    marked = [ln for ln in lines if ln.startswith("KUBECTL_TRITON_BUILD_INFO ")]
    assert len(marked) == 1
    assert json.loads(marked[0].split(" ", 1)[1]) == json.loads((FIXTURES / "h200-build-info.json").read_text())
