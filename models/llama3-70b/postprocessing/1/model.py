"""Detokenizes TOKENS_BATCH into text (Triton python backend), with the same tokenizer.json."""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config["parameters"]
        tokenizer_dir = params["tokenizer_dir"]["string_value"]
        self.tokenizer = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
        skip = params.get("skip_special_tokens", {}).get("string_value", "true")
        self.skip_special_tokens = skip.lower() in ("true", "1", "yes")

    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
            lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()
            texts = []
            # tokens: [batch, beam, length]; lengths: [batch, beam]
            for batch_tokens, batch_lengths in zip(tokens, lengths):
                for beam_tokens, length in zip(batch_tokens, batch_lengths):
                    ids = [int(t) for t in beam_tokens[: int(length)]]
                    texts.append(self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens))
            out = np.array(texts, dtype=object).reshape(len(tokens), -1)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", out)]))
        return responses
