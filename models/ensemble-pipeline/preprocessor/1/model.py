"""Raw RGB bytes (224x224x3, uint8) -> normalized CHW float32 tensor, numpy only."""

import numpy as np
import triton_python_backend_utils as pb_utils

SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "IMAGE_BYTES").as_numpy()
            if raw.shape[1] != SIZE * SIZE * 3:
                error = pb_utils.TritonError(f"IMAGE_BYTES must hold {SIZE * SIZE * 3} bytes, got {raw.shape[1]}")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            images = raw.reshape(-1, SIZE, SIZE, 3).astype(np.float32) / 255.0
            pixels = (images.transpose(0, 3, 1, 2) - MEAN) / STD
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PIXELS", pixels.astype(np.float32))]))
        return responses
