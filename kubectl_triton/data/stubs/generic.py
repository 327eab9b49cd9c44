"""Generic python-backend stand-in written by `kubectl triton` shadow repositories.

Answers every request with zero-filled (numbers) or empty (STRING) tensors of each configured
output's data type and shape (-1 becomes 1; batching models get the request's batch size).
Decoupled models answer through the response sender: one response, then the final flag.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _dtype(data_type):
    name = data_type if data_type.startswith("TYPE_") else "TYPE_" + data_type
    if name == "TYPE_STRING":
        return np.object_
    if name == "TYPE_BF16":  # numpy has no bfloat16: only the shape matters for a stand-in
        return np.float32
    return pb_utils.triton_string_to_numpy(name)


def _zeros(shape, data_type):
    dtype = _dtype(data_type)
    if dtype is np.object_:
        return np.full(shape, b"", dtype=np.object_)
    return np.zeros(shape, dtype=dtype)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.batching = int(config.get("max_batch_size", 0) or 0) > 0
        self.outputs = []
        for out in config.get("output", []):
            dims = [int(d) for d in out.get("dims", [])]
            self.outputs.append((out["name"], out.get("data_type", "TYPE_FP32"),
                                 [1 if d < 0 else d for d in dims]))
        self.inputs = [inp["name"] for inp in config.get("input", [])]

    def _batch_size(self, request):
        for name in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None and tensor.shape():
                return int(tensor.shape()[0])
        return 1

    def _response(self, request):
        batch = [self._batch_size(request)] if self.batching else []
        tensors = [pb_utils.Tensor(name, _zeros(batch + shape, data_type))
                   for name, data_type, shape in self.outputs]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests):
        if not self.decoupled:
            return [self._response(r) for r in requests]
        for request in requests:
            sender = request.get_response_sender()
            sender.send(self._response(request))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def finalize(self):
        pass
