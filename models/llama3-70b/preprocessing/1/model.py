"""Tokenizes QUERY for the tensorrt_llm model (Triton python backend).

Reads `tokenizer.json` from the `tokenizer_dir` parameter (Llama 3 checkpoints ship one) with the
`tokenizers` library, which the TensorRT-LLM Triton image carries.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer


def _special_id(tokenizer, names, default):
    for name in names:
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return token_id
    return default


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        tokenizer_dir = config["parameters"]["tokenizer_dir"]["string_value"]
        self.tokenizer = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
        self.end_id = _special_id(self.tokenizer, ["<|eot_id|>", "</s>", "[SEP]"], 0)
        self.pad_id = _special_id(self.tokenizer, ["<|finetune_right_pad_id|>", "<pad>", "[PAD]"], self.end_id)

    def execute(self, requests):
        responses = []
        for request in requests:
            queries = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy()
            output_len = pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN").as_numpy()
            texts = [q[0].decode("utf-8") if isinstance(q[0], bytes) else str(q[0]) for q in queries]
            encoded = [self.tokenizer.encode(t).ids for t in texts]
            width = max(1, max(len(ids) for ids in encoded))
            ids = np.full((len(encoded), width), self.pad_id, dtype=np.int32)
            for row, token_ids in enumerate(encoded):
                ids[row, : len(token_ids)] = token_ids
            lengths = np.array([[len(t)] for t in encoded], dtype=np.int32)
            batch = len(encoded)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("INPUT_ID", ids),
                pb_utils.Tensor("REQUEST_INPUT_LEN", lengths),
                pb_utils.Tensor("REQUEST_OUTPUT_LEN", output_len.astype(np.int32)),
                pb_utils.Tensor("OUT_END_ID", np.full((batch, 1), self.end_id, dtype=np.int32)),
                pb_utils.Tensor("OUT_PAD_ID", np.full((batch, 1), self.pad_id, dtype=np.int32)),
            ]))
        return responses
