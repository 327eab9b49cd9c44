"""Logits -> top-k class indices and softmax scores, numpy only."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.k = int(config["parameters"]["top_k"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy()
            shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = shifted / shifted.sum(axis=1, keepdims=True)
            top = np.argsort(-probs, axis=1)[:, : self.k]
            scores = np.take_along_axis(probs, top, axis=1)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("TOP_CLASSES", top.astype(np.int32)),
                pb_utils.Tensor("TOP_SCORES", scores.astype(np.float32)),
            ]))
        return responses
