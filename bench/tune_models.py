"""Three python-backend models whose cost structures differ, for bench/bench_tune.py and tests/test_tune.py.

Each execution sleeps (no CPU is burnt, so a shared machine measures them fairly). A "device" lock held
across every instance of a model (an flock on a file in the model's folder) stands for a GPU that the
instances share: time spent under it does not overlap between instances, time outside it does.

- `amortized`: batching pays. 20 ms per execution + 0.5 ms per item, all on the device.
- `parallel`: a second instance pays, batching does not. Per item: 4 ms of host work (instances overlap) and
  4 ms on the device; no fixed cost, so a batch costs what its items cost one by one.
- `tail`: large batches break a latency bound. 10 ms per execution + 0.25 ms per item on the device; every
  16th batch larger than 4 stalls 150 ms (an allocation on a slow path): the requests in and behind a stall
  (several percent) break a p99 bound that batches capped at 4 keep.
"""

from __future__ import annotations

from pathlib import Path

CONFIG = """# {doc}
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""
MODEL_PY = """import fcntl
import os
import time

import triton_python_backend_utils as pb_utils

FIXED_S, ITEM_S, HOST_ITEM_S, HOST_FIXED_S = {fixed}, {item}, {host_item}, {host_fixed}
STALL_ABOVE, STALL_EVERY, STALL_S = {stall_above}, {stall_every}, {stall}
EXPLODE_ABOVE, EXPLODE = {explode_above}, {explode}  # per-item cost grows by EXPLODE per item above the size


class TritonPythonModel:
    def initialize(self, args):
        self.lock = open(os.path.join(args["model_repository"], "device.lock"), "a")
        self.large = 0

    def execute(self, requests):
        n = len(requests)
        time.sleep(HOST_FIXED_S + HOST_ITEM_S * n)  # host work: instances overlap here
        fcntl.flock(self.lock, fcntl.LOCK_EX)  # the device the instances share
        try:
            over = max(0, n - EXPLODE_ABOVE) if EXPLODE_ABOVE else 0
            time.sleep(FIXED_S + ITEM_S * n * (1 + EXPLODE * over))
            if STALL_EVERY and n > STALL_ABOVE:
                self.large += 1
                if self.large % STALL_EVERY == 0:
                    time.sleep(STALL_S)
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(
            r, "INPUT0").as_numpy())]) for r in requests]

    def finalize(self):
        self.lock.close()
"""

DEFAULTS = {"fixed": 0.0, "item": 0.0, "host_item": 0.0, "host_fixed": 0.0, "stall_above": 0, "stall_every": 0,
            "stall": 0.0, "explode_above": 0, "explode": 0.0}

# name -> (one-line description, cost parameters)
MODELS: dict[str, tuple[str, dict[str, float]]] = {
    "amortized": ("batching pays: 20 ms per execution + 0.5 ms per item on a shared device",
                  {"fixed": 0.020, "item": 0.0005, "host_item": 0.0, "stall_above": 0, "stall_every": 0,
                   "stall": 0.0}),
    "parallel": ("a second instance pays, batching does not: 4 ms host + 4 ms device per item",
                 {"fixed": 0.0, "item": 0.004, "host_item": 0.004, "stall_above": 0, "stall_every": 0,
                  "stall": 0.0}),
    "tail": ("large batches break a latency bound: 10 ms + 0.25 ms per item; every 16th batch above 4 "
             "stalls 150 ms", {"fixed": 0.010, "item": 0.00025, "host_item": 0.0, "stall_above": 4,
                               "stall_every": 16, "stall": 0.150}),
}


def config_text(name: str, doc: str | None = None, max_batch_size: int = 32) -> str:
    return CONFIG.format(name=name, doc=MODELS[name][0] if doc is None else doc, max_batch_size=max_batch_size)


def write_model(root: Path, name: str, doc: str, costs: dict[str, float], max_batch_size: int = 32) -> None:
    """One model folder (version 1) with the cost parameters `costs` (missing ones: DEFAULTS)."""
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config_text(name, doc, max_batch_size))
    params = {k: repr(v) for k, v in {**DEFAULTS, **costs}.items()}
    (root / name / "1" / "model.py").write_text(MODEL_PY.format(**params))


def make_repo(root: Path, names: tuple[str, ...] = tuple(MODELS)) -> Path:
    """A model repository holding `names` (version 1 each)."""
    for name in names:
        write_model(root, name, MODELS[name][0], MODELS[name][1])
    return root
