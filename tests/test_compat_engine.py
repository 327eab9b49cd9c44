"""Engine metadata: current and pre-0.8 config.json, rank engine files, build-info.json; the catalog."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from kubectl_triton.compat import catalog
from kubectl_triton.compat.data import DATA_DIR, parse_plain_yaml
from kubectl_triton.compat.engine import legacy_quant, legacy_rank_name, read_engine_dir
from kubectl_triton.errors import InputError

ENGINES = Path(__file__).parent / "fixtures" / "engines"


@pytest.mark.parametrize("fixture,fmt,version,dtype,quant,kv,tp,pp", [
    ("llama3-8b-bf16-tp1-h100", "current", "0.16.0", "bfloat16", None, None, 1, 1),
    ("llama3-70b-fp8-tp4-h100", "current", "0.16.0", "bfloat16", "FP8", "FP8", 4, 1),
    ("llama3-8b-int4awq-tp2-a100", "current", "0.12.0", "float16", "W4A16_AWQ", None, 2, 1),
    ("mistral-nemo-12b-fp16-tp1-l40s", "current", "0.16.0", "float16", None, None, 1, 1),
    ("gptj-6b-fp16-tp1-legacy", "legacy", None, "float16", None, None, 1, 1),
])
def test_reads_both_config_formats(fixture, fmt, version, dtype, quant, kv, tp, pp):
    info = read_engine_dir(ENGINES / fixture)
    assert (info.format, info.version, info.dtype, info.quant_algo, info.kv_cache_quant_algo, info.tp, info.pp) \
        == (fmt, version, dtype, quant, kv, tp, pp)
    assert len(info.rank_bytes) == tp * pp


def test_legacy_lengths_and_heads():
    info = read_engine_dir(ENGINES / "gptj-6b-fp16-tp1-legacy")
    assert (info.max_batch_size, info.max_input_len, info.max_seq_len) == (8, 512, 712)
    assert (info.num_layers, info.num_kv_heads, info.head_size) == (28, 16, 256)
    assert info.tensorrt_version == "9.2.0.post5"
    assert info.build_info.gpu_name == "NVIDIA A10G"


@pytest.mark.parametrize("mode,int8,expected", [
    (0, False, (None, None)), (2, False, ("W8A16", None)), (1, False, ("W4A16", None)),
    (1 | 32, False, ("W4A16_AWQ", None)), (2 | 4 | 8 | 16, False, ("W8A8_SQ_PER_CHANNEL", None)),
    (256 | 128, False, ("FP8", "FP8")), (64, False, (None, "INT8")), (0, True, ("W8A8_SQ_PER_CHANNEL", None)),
])
def test_legacy_quant_mode_bits(mode, int8, expected):
    assert legacy_quant(mode, int8) == expected


def test_rank_files_sizes_from_sparse_engines(tmp_path):
    shutil.copy(ENGINES / "llama3-70b-fp8-tp4-h100" / "config.json", tmp_path / "config.json")
    for rank, size in enumerate([18 << 30, 19 << 30, 18 << 30, 18 << 30]):
        with open(tmp_path / f"rank{rank}.engine", "wb") as fh:
            os.truncate(fh.fileno(), size)
    info = read_engine_dir(tmp_path)
    assert info.rank_bytes[1] == 19 << 30 and info.largest_rank_bytes == 19 << 30
    assert info.build_info is None


def test_legacy_rank_file_names(tmp_path):
    shutil.copy(ENGINES / "gptj-6b-fp16-tp1-legacy" / "config.json", tmp_path / "config.json")
    with open(tmp_path / "gptj_float16_tp1_rank0.engine", "wb") as fh:
        os.truncate(fh.fileno(), 12 << 30)
    assert read_engine_dir(tmp_path).rank_bytes == {0: 12 << 30}
    assert legacy_rank_name("llama_float16_tp2_pp2_rank3.engine") == {
        "name": "llama", "dtype": "float16", "tp": 2, "pp": 2, "rank": 3}


@pytest.mark.parametrize("content,fragment", [
    ({"gpu_name": "NVIDIA H200", "compute_capability": 9.0}, "compute_capability"),
    ({"compute_capability": "9.0"}, "gpu_name"),
    ({"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "gpu": "x"}, "unknown key"),
])
def test_bad_build_info_is_an_input_error_naming_the_file(tmp_path, content, fragment):
    shutil.copy(ENGINES / "llama3-8b-bf16-tp1-h100" / "config.json", tmp_path / "config.json")
    (tmp_path / "build-info.json").write_text(json.dumps(content))
    with pytest.raises(InputError, match=fragment) as err:
        read_engine_dir(tmp_path)
    assert "build-info.json" in err.value.message


def test_not_an_engine_dir(tmp_path):
    with pytest.raises(InputError, match="no config.json"):
        read_engine_dir(tmp_path)
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')  # a HF checkpoint
    with pytest.raises(InputError, match="not a TensorRT-LLM engine config"):
        read_engine_dir(tmp_path)


ISSUE_KEYS = ["t4", "v100", "a10", "a10g", "a30", "a100-40gb", "a100-80gb", "l4", "l40", "l40s", "h100-80gb",
              "h100-pcie", "h100-nvl", "h200", "gh200", "b200"]


@pytest.mark.parametrize("label,key,cc", [
    ("NVIDIA-A100-SXM4-80GB", "a100-80gb", "8.0"), ("NVIDIA-H100-80GB-HBM3", "h100-80gb", "9.0"),
    ("NVIDIA-H200", "h200", "9.0"), ("NVIDIA-L4", "l4", "8.9"), ("NVIDIA-A10G", "a10g", "8.6"),
    ("Tesla-T4", "t4", "7.5"), ("NVIDIA-L40S", "l40s", "8.9"), ("NVIDIA-A100-SXM4-40GB", "a100-40gb", "8.0"),
    ("NVIDIA-B200", "b200", "10.0"), ("NVIDIA-H100-80GB-HBM3-SHARED", "h100-80gb", "9.0"),
])
def test_gfd_labels_resolve(label, key, cc):
    gpu = catalog.by_gfd_label(label)
    assert (gpu.key, gpu.compute_capability) == (key, cc)


def test_catalog_has_the_issue_keys_and_no_label_twice():
    assert set(ISSUE_KEYS) <= set(catalog.gpus())
    labels = [lab for g in catalog.gpus().values() for lab in g.gfd_products]
    assert len(labels) == len(set(labels))
    for gpu in catalog.gpus().values():  # GFD's label is nvidia-smi's name with dashes
        assert [catalog.gfd_label_for(n) for n in gpu.smi_names] == list(gpu.gfd_products)


def test_mig_slice_memory_from_the_label():
    assert catalog.strip_gfd_suffix("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb") == ("NVIDIA-A100-SXM4-40GB", 5120)
    assert catalog.by_gfd_label("NVIDIA-A100-SXM4-40GB-MIG-3g.20gb").key == "a100-40gb"


def test_h200_reading_from_the_issue():
    gpu = catalog.by_smi_name("NVIDIA H200")
    assert (gpu.key, gpu.compute_capability, gpu.memory_mib) == ("h200", "9.0", 143771)
    assert catalog.gfd_label_for("NVIDIA H200") == "NVIDIA-H200"


def test_plain_reader_agrees_with_pyyaml_on_the_catalog():
    text = (DATA_DIR / "gpus.yaml").read_text()
    assert parse_plain_yaml(text) == yaml.safe_load(text)


def test_plain_reader_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="line 2"):
        parse_plain_yaml("a:\n  - b\n")
