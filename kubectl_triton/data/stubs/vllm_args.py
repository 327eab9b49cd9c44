"""Triton vLLM backend stand-in (python backend) written by `kubectl triton` shadow repositories.

Checks what the real backend checks before it starts vLLM (vllm_backend src/model.py): the decoupled transaction
policy, `<model dir>/<version>/model.json` present and a JSON object, and, when the shadow put the engine
arguments of the image's vLLM beside it (engine_args.json: name -> JSON types), every key an argument of that
version with a value of its type (vLLM's AsyncEngineArgs(**model_json) raises TypeError otherwise). LoRA as the backend
serves it: enable_lora needs multi_lora.json beside model.json, and a request's "lora_name" (in its
sampling_parameters) must name one of its adapters. What it received is written to received.json in the version
folder. Answers text_input with text_output: the words of
the input, one response per word when `stream` is true, else one response, then the final flag.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

_TYPES = {"string": (str,), "boolean": (bool,), "object": (dict,), "array": (list,), "integer": (int,),
          "number": (int, float)}


def _matches(value, types):
    if value is None:
        return "null" in types
    for name in types:
        kinds = _TYPES.get(name, ())
        if isinstance(value, kinds) and (name == "boolean" or not isinstance(value, bool)):
            return True
    return False


def _input(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise ValueError("vLLM Triton backend must be configured to use decoupled model transaction policy")
        folder = os.path.join(args["model_repository"], args["model_version"])
        path = os.path.join(folder, "model.json")
        if not os.path.isfile(path):
            raise ValueError(f"'model.json' containing vllm engine args must be provided in '{folder}'")
        with open(path) as handle:
            engine = json.load(handle)
        if not isinstance(engine, dict) or not engine.get("model"):
            raise ValueError("model.json: a JSON object of engine arguments with `model`")
        schema_path = os.path.join(folder, "engine_args.json")
        if os.path.isfile(schema_path):
            with open(schema_path) as handle:
                schema = json.load(handle)
            for key, value in engine.items():
                if key not in schema:
                    raise TypeError(f"__init__() got an unexpected keyword argument '{key}'")
                if not _matches(value, schema[key]) and not ("boolean" in schema[key] and isinstance(value, str)):
                    raise TypeError(f"engine argument {key}={value!r} is not {' or '.join(schema[key])}")
        # LoRA as the backend's _setup_lora and _verify_loras do: enable_lora (a bool or a string) needs
        # multi_lora.json, and a request's "lora_name" must be one of its adapters
        self.loras = None
        if str(engine.get("enable_lora")).lower() == "true":
            lora_path = os.path.join(folder, "multi_lora.json")
            if not os.path.isfile(lora_path):
                raise FileNotFoundError(f"Triton backend cannot find {lora_path}.")
            with open(lora_path) as handle:
                self.loras = list(json.load(handle))
        with open(os.path.join(folder, "received.json"), "w") as handle:
            json.dump({"engine_args": engine, "instance_kind": args.get("model_instance_kind"),
                       "loras": self.loras}, handle)

    def _lora_error(self, request):
        params = _input(request, "sampling_parameters")
        name = json.loads(params.reshape(-1)[0].decode()).get("lora_name") if params is not None else None
        if name is None:
            return None
        if self.loras is None:
            return "LoRA feature is not enabled."
        if name not in self.loras:
            return f"LoRA {name} is not supported, we currently support {self.loras}"
        return None

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            error = self._lora_error(request)
            if error is not None:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(error)),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            text = _input(request, "text_input")
            words = (text.reshape(-1)[0].decode() if text is not None else "").split()
            stream = _input(request, "stream")
            parts = words if stream is not None and bool(stream.reshape(-1)[0]) else [" ".join(words)]
            for part in parts:
                out = pb_utils.Tensor("text_output", np.array([part.encode()], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
