"""Starting point for a Triton python-backend model, written by `kubectl triton add-model`.

It already serves: every configured output is answered with zeros (numbers) or empty strings
(STRING), shaped as config.pbtxt declares (-1 becomes 1). Replace `compute` with the model's code.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _numpy_dtype(data_type):
    if data_type == "TYPE_STRING":
        return np.object_
    if data_type == "TYPE_BF16":  # numpy has no bfloat16
        return np.float32
    return pb_utils.triton_string_to_numpy(data_type)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.batching = int(config.get("max_batch_size", 0) or 0) > 0
        self.inputs = [i["name"] for i in config.get("input", [])]
        self.outputs = [(o["name"], o["data_type"], [1 if int(d) < 0 else int(d) for d in o.get("dims", [])])
                        for o in config.get("output", [])]

    def compute(self, inputs, batch_size):
        """inputs: input name -> numpy array. Returns output name -> numpy array."""
        lead = [batch_size] if self.batching else []
        out = {}
        for name, data_type, dims in self.outputs:
            dtype = _numpy_dtype(data_type)
            out[name] = (np.full(lead + dims, b"", dtype=dtype) if dtype is np.object_
                         else np.zeros(lead + dims, dtype=dtype))
        return out

    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = {}
            for name in self.inputs:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    inputs[name] = tensor.as_numpy()
            batch_size = next((int(a.shape[0]) for a in inputs.values() if a.ndim), 1)
            outputs = self.compute(inputs, batch_size)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, value) for name, value in outputs.items()]))
        return responses
