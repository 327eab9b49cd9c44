"""Engine-build Job entry point: Hugging Face checkpoint -> TensorRT-LLM checkpoint -> engine -> build-info.json.

Runs inside the Triton TensorRT-LLM image (tensorrt_llm, PyYAML and trtllm-build are installed there). All
options come from the model's model.yaml `engine:` section, so git is the single source of truth.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import yaml

# model_family -> TensorRT-LLM model class (tensorrt_llm.models)
MODEL_CLASSES = {
    "llama": "LLaMAForCausalLM",
    "mistral": "LLaMAForCausalLM",
    "qwen": "QWenForCausalLM",
    "gemma": "GemmaForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gpt": "GPTForCausalLM",
    "falcon": "FalconForCausalLM",
}
# quantization option -> (QuantAlgo name, needs calibration)
QUANT = {
    "none": (None, False),
    "w8a16": ("W8A16", False),
    "w4a16": ("W4A16", False),
    "fp8": ("FP8", True),
    "int4_awq": ("W4A16_AWQ", True),
    "int8_sq": ("W8A8_SQ_PER_CHANNEL", True),
    "nvfp4": ("NVFP4", True),
}


def convert(engine: dict, checkpoint_dir: str) -> None:
    import tensorrt_llm.models as models
    from tensorrt_llm.mapping import Mapping
    from tensorrt_llm.models.modeling_utils import QuantConfig
    from tensorrt_llm.quantization import QuantAlgo

    cls = getattr(models, MODEL_CLASSES[engine["model_family"]])
    tp, pp = int(engine.get("tp", 1)), int(engine.get("pp", 1))
    algo, calibrate = QUANT[str(engine.get("quantization", "none"))]
    quant = QuantConfig(quant_algo=getattr(QuantAlgo, algo)) if algo else QuantConfig()
    if calibrate:
        cls.quantize(engine["checkpoint"], checkpoint_dir, dtype=engine["dtype"],
                     mapping=Mapping(world_size=tp * pp, tp_size=tp, pp_size=pp), quant_config=quant)
        return
    for rank in range(tp * pp):
        mapping = Mapping(world_size=tp * pp, rank=rank, tp_size=tp, pp_size=pp)
        model = cls.from_hugging_face(engine["checkpoint"], dtype=engine["dtype"], mapping=mapping,
                                      quant_config=quant)
        model.save_checkpoint(checkpoint_dir, save_config=(rank == 0))
        del model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="path to the model's model.yaml")
    args = parser.parse_args()
    with open(args.model, encoding="utf-8") as fh:
        engine = yaml.safe_load(fh)["engine"]
    checkpoint_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), "trtllm-checkpoint")
    convert(engine, checkpoint_dir)
    build = ["trtllm-build", "--checkpoint_dir", checkpoint_dir, "--output_dir", engine["engine_dir"],
             "--gemm_plugin", "auto"]
    for option in ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens"):
        if engine.get(option) is not None:
            build += [f"--{option}", str(engine[option])]
    lora = engine.get("lora")
    if lora:  # adapters are served (kubectl triton add-adapter): the LoRA plugin, its rank and modules
        build += ["--lora_plugin", "auto", "--max_lora_rank", str(lora["max_rank"]),
                  "--lora_target_modules", *lora["target_modules"]]
    print("+", " ".join(build), flush=True)
    subprocess.run(build, check=True)
    here = os.path.dirname(os.path.abspath(__file__))
    info = [sys.executable, os.path.join(here, "build-info.py"), "--engine-dir", engine["engine_dir"],
            "--image", os.environ.get("TRITON_IMAGE", "")]
    return subprocess.run(info, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
