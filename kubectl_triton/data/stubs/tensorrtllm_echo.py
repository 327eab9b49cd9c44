"""TensorRT-LLM engine stand-in (python backend) written by `kubectl triton` shadow repositories.

Echoes: output_ids [batch, beam=1, len] are the request's input_ids (trimmed to input_lengths),
sequence_length [batch, 1] their length; every other configured output is zero-filled.
Decoupled configs answer through the response sender; with `streaming` true, one response per
token (as the engine streams new tokens), else one response; then the final flag.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _np_dtype(data_type):
    name = data_type if data_type.startswith("TYPE_") else "TYPE_" + data_type
    if name == "TYPE_STRING":
        return np.object_
    if name == "TYPE_BF16":  # numpy has no bfloat16: only the shape matters for a stand-in
        return np.float32
    return pb_utils.triton_string_to_numpy(name)


def _input(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.batching = int(config.get("max_batch_size", 0) or 0) > 0
        self.outputs = {o["name"]: (o.get("data_type", "TYPE_FP32"), [int(d) for d in o.get("dims", [])])
                        for o in config.get("output", [])}

    def _rows(self, request):
        """Token id rows of the request, one per batch entry, trimmed to input_lengths."""
        ids = _input(request, "input_ids")
        if ids is None:
            ids = np.zeros((1, 1), dtype=np.int32)
        ids = np.asarray(ids, dtype=np.int32)
        if not self.batching or ids.ndim == 1:
            ids = ids.reshape(1, -1)
        lengths = _input(request, "input_lengths")
        rows = []
        for i, row in enumerate(ids):
            n = int(np.asarray(lengths).reshape(-1)[i]) if lengths is not None and np.asarray(
                lengths).size > i else row.shape[0]
            rows.append(row[:n])
        return rows

    def _response(self, rows):
        width = max((len(r) for r in rows), default=0)
        output_ids = np.zeros((len(rows), 1, width), dtype=np.int32)
        for i, row in enumerate(rows):
            output_ids[i, 0, :len(row)] = row
        seq_len = np.array([[len(r)] for r in rows], dtype=np.int32)
        tensors = []
        for name, (data_type, dims) in self.outputs.items():
            if name == "output_ids":
                value = output_ids
            elif name == "sequence_length":
                value = seq_len
            else:
                shape = [1 if d < 0 else d for d in dims]
                dtype = _np_dtype(data_type)
                value = (np.full([len(rows)] + shape, b"", dtype=np.object_) if dtype is np.object_
                         else np.zeros([len(rows)] + shape, dtype=dtype))
            if not self.batching:
                value = value[0]
            tensors.append(pb_utils.Tensor(name, value))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests):
        if not self.decoupled:
            return [self._response(self._rows(r)) for r in requests]
        for request in requests:
            sender = request.get_response_sender()
            rows = self._rows(request)
            streaming = _input(request, "streaming")
            if streaming is not None and bool(np.asarray(streaming).reshape(-1)[0]) and len(rows) == 1:
                for token in rows[0]:
                    sender.send(self._response([np.array([token], dtype=np.int32)]))
            else:
                sender.send(self._response(rows))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def finalize(self):
        pass
