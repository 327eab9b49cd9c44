"""A decoupled python-backend LLM for `tune --objective goodput` (issue 27): an in-flight batching engine whose
step cost has the shape of a real decoder, on CPU (sleeps) or on a GPU (a GPT-2-sized torch decoder with random
weights and a KV cache).

The engine (one per instance) keeps up to `max_num_seqs` sequences in flight. Each step it admits waiting
requests (`batch_scheduler_policy`: `guaranteed_no_evict` admits a request only when its prompt and all of its
output fit the KV cache; `max_utilization` when its prompt fits, and evicts the newest sequence back to the queue
when the cache runs out), prefills them (`enable_chunked_context`: at most `max_num_tokens` prompt tokens per
step, so decoding sequences are not held up by a long prompt) and decodes one token for every other sequence.
Each sequence streams one response per token and a final flag. The KV cache holds
`kv_cache_free_gpu_mem_fraction` x KV_TOKENS tokens; a fraction above 0.9 fails to load (no room left for
activations: what a real engine's out-of-memory looks like to tune). The names are TensorRT-LLM's.

Step cost on CPU (`engine: sleep`), all under a lock the instances share (one device): STEP_MS + PREFILL_MS per
prompt token + DECODE_MS per decoding sequence + ATTN_MS per cached token of the decoding sequences.
On a GPU (`engine: torch`): the forward passes themselves.
"""

from __future__ import annotations

from pathlib import Path

CONFIG = """# {doc}
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
{io}
instance_group [ {{ count: 1 kind: {kind} }} ]
parameters [
  {{ key: "engine" value: {{ string_value: "{engine}" }} }},
  {{ key: "max_num_seqs" value: {{ string_value: "{max_num_seqs}" }} }},
  {{ key: "max_num_tokens" value: {{ string_value: "{max_num_tokens}" }} }},
  {{ key: "kv_cache_free_gpu_mem_fraction" value: {{ string_value: "{kv_fraction}" }} }},
  {{ key: "batch_scheduler_policy" value: {{ string_value: "{policy}" }} }},
  {{ key: "enable_chunked_context" value: {{ string_value: "{chunked}" }} }}
]
"""

MODEL_PY = '''import collections
import fcntl
import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

STEP_MS, PREFILL_MS, DECODE_MS, ATTN_MS = {step_ms}, {prefill_ms}, {decode_ms}, {attn_ms}
KV_TOKENS = {kv_tokens}
MAX_LEN = 1024


class Seq:
    def __init__(self, sender, prompt, max_tokens):
        self.sender, self.prompt, self.max_tokens = sender, prompt, max_tokens
        self.prefilled, self.generated, self.slot, self.last = 0, 0, None, 0

    @property
    def cached(self):
        return self.prefilled + self.generated

    @property
    def reserve(self):
        return len(self.prompt) + self.max_tokens


class SleepDevice:
    def __init__(self, args, lock):
        self.lock = lock

    def step(self, prefill, decode):
        cost = STEP_MS + PREFILL_MS * sum(n for _, n in prefill) + DECODE_MS * len(decode)
        cost += ATTN_MS * sum(s.cached for s in decode)
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            time.sleep(cost / 1000)
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)
        return {{id(s): 17 for s, _ in prefill}} | {{id(s): 17 for s in decode}}

    def free(self, seq):
        pass


class TorchDevice:
    """GPT-2 small (12 layers, 768 wide, 12 heads), random weights, FP16, a KV cache slot per sequence."""

    def __init__(self, args, slots):
        import torch

        self.torch = torch
        self.dev = torch.device("cuda:" + str(args.get("model_instance_device_id", "0")))
        torch.manual_seed(0)
        self.L, self.D, self.H, self.V = 12, 768, 12, 50257
        self.hd = self.D // self.H
        t = lambda *shape: (torch.randn(*shape, device=self.dev, dtype=torch.float16) * 0.02)
        self.wte, self.wpe = t(self.V, self.D), t(MAX_LEN, self.D)
        self.layers = [dict(qkv=t(self.D, 3 * self.D), proj=t(self.D, self.D), fc=t(self.D, 4 * self.D),
                            out=t(4 * self.D, self.D)) for _ in range(self.L)]
        self.K = torch.zeros(self.L, slots, self.H, MAX_LEN, self.hd, device=self.dev, dtype=torch.float16)
        self.V_ = torch.zeros_like(self.K)
        self.free_slots = list(range(slots))

    def _ln(self, x):
        return self.torch.nn.functional.layer_norm(x, (self.D,))

    def _forward(self, tokens, positions, slots, lengths):
        """tokens/positions: [n, t]; writes K/V at the positions; attends to everything cached up to them."""
        torch, F = self.torch, self.torch.nn.functional
        n, t = tokens.shape
        x = self.wte[tokens] + self.wpe[positions]
        span = int(positions.max()) + 1
        keys = torch.arange(span, device=self.dev)
        mask = keys[None, None, None, :] <= positions[:, None, :, None]  # [n, 1, t, span]
        for li, w in enumerate(self.layers):
            q, k, v = (self._ln(x) @ w["qkv"]).split(self.D, dim=-1)
            q, k, v = (z.view(n, t, self.H, self.hd).transpose(1, 2) for z in (q, k, v))
            idx = slots[:, None].expand(n, t)
            self.K[li][idx, :, positions] = k.transpose(1, 2)
            self.V_[li][idx, :, positions] = v.transpose(1, 2)
            kk, vv = self.K[li][slots, :, :span], self.V_[li][slots, :, :span]
            a = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
            x = x + a.transpose(1, 2).reshape(n, t, self.D) @ w["proj"]
            x = x + F.gelu(self._ln(x) @ w["fc"]) @ w["out"]
        return (self._ln(x[:, -1]) @ self.wte.T).argmax(-1)

    def step(self, prefill, decode):
        torch = self.torch
        out = {{}}
        with torch.inference_mode():
            for s, n in prefill:
                if s.slot is None:
                    s.slot = self.free_slots.pop()
                toks = torch.tensor([s.prompt[s.prefilled:s.prefilled + n]], device=self.dev) % self.V
                pos = torch.arange(s.prefilled, s.prefilled + n, device=self.dev)[None]
                nxt = self._forward(toks, pos, torch.tensor([s.slot], device=self.dev), None)
                out[id(s)] = nxt
            if decode:
                toks = torch.tensor([[s.last] for s in decode], device=self.dev)
                pos = torch.tensor([[s.cached - 1] for s in decode], device=self.dev)
                slots = torch.tensor([s.slot for s in decode], device=self.dev)
                nxt = self._forward(toks, pos, slots, None)
                for i, s in enumerate(decode):
                    out[id(s)] = nxt[i]
            torch.cuda.synchronize(self.dev)
        return {{k: int(v) for k, v in out.items()}}

    def free(self, seq):
        if seq.slot is not None:
            self.free_slots.append(seq.slot)
            seq.slot = None


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        p = {{k: v["string_value"] for k, v in cfg.get("parameters", {{}}).items()}}
        self.max_seqs = int(p.get("max_num_seqs", "8"))
        self.max_tokens = int(p.get("max_num_tokens", "512"))
        fraction = float(p.get("kv_cache_free_gpu_mem_fraction", "0.5"))
        if fraction > 0.9:
            raise pb_utils.TritonModelException(
                f"out of memory: kv_cache_free_gpu_mem_fraction {{fraction}} leaves no room for activations")
        self.kv = int(KV_TOKENS * fraction)
        self.policy = p.get("batch_scheduler_policy", "guaranteed_no_evict")
        self.chunked = p.get("enable_chunked_context", "false").lower() == "true"
        if p.get("engine", "sleep") == "torch":
            self.device = TorchDevice(args, self.max_seqs)
        else:
            self.lock = open(os.path.join(args["model_repository"], "device.lock"), "a")
            self.device = SleepDevice(args, self.lock)
        self.waiting = collections.deque()
        self.ids = False
        self.active = []
        self.cv = threading.Condition()
        self.running = True
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def execute(self, requests):
        with self.cv:
            for r in requests:
                ids = pb_utils.get_input_tensor_by_name(r, "input_ids")
                if ids is not None:  # the tensorrt_llm model's interface
                    prompt = [int(x) for x in ids.as_numpy().reshape(-1)]
                    n = int(pb_utils.get_input_tensor_by_name(r, "request_output_len").as_numpy().reshape(-1)[0])
                else:  # a TensorRT-LLM ensemble's
                    text = pb_utils.get_input_tensor_by_name(r, "text_input").as_numpy().reshape(-1)[0]
                    words = text.decode().split() if isinstance(text, bytes) else str(text).split()
                    n = int(pb_utils.get_input_tensor_by_name(r, "max_tokens").as_numpy().reshape(-1)[0])
                    prompt = [sum(map(ord, w)) * 31 % 50000 for w in words]
                self.ids = ids is not None
                prompt = prompt[:MAX_LEN // 2] or [1]
                self.waiting.append(Seq(r.get_response_sender(), prompt, max(1, min(n, MAX_LEN // 2))))
            self.cv.notify()
        return None

    def used(self):
        if self.policy == "guaranteed_no_evict":
            return sum(s.reserve for s in self.active)
        return sum(s.cached + 1 for s in self.active)

    def admit(self):
        while self.waiting and len(self.active) < self.max_seqs:
            s = self.waiting[0]
            need = s.reserve if self.policy == "guaranteed_no_evict" else len(s.prompt) + 1
            if self.used() + need > self.kv and self.active:
                return
            self.active.append(self.waiting.popleft())

    def loop(self):
        while True:
            with self.cv:
                while self.running and not self.waiting and not self.active:
                    self.cv.wait(0.1)
                if not self.running:
                    return
                self.admit()
                if self.policy == "max_utilization":
                    while self.used() > self.kv and len(self.active) > 1:  # out of cache: evict the newest
                        s = self.active.pop()
                        self.device.free(s)
                        s.prefilled = s.generated = 0
                        self.waiting.appendleft(s)
                active = list(self.active)
            budget = self.max_tokens if self.chunked else 1 << 30
            prefill, decode = [], []
            for s in active:
                left = len(s.prompt) - s.prefilled
                if left > 0:
                    if budget <= 0:
                        continue
                    n = min(left, budget)
                    budget -= n
                    prefill.append((s, n))
                else:
                    decode.append(s)
            tokens = self.device.step(prefill, decode)
            finished = []
            for s, n in prefill:
                s.prefilled += n
                if s.prefilled == len(s.prompt):
                    self.emit(s, tokens[id(s)], finished)
            for s in decode:
                self.emit(s, tokens[id(s)], finished)
            with self.cv:
                for s in finished:
                    self.active.remove(s)
                    self.device.free(s)

    def emit(self, s, token, finished):
        if s.sender.is_cancelled():  # the client went away: stop decoding it
            finished.append(s)
            return
        s.generated += 1
        s.last = token
        if self.ids:
            out = pb_utils.Tensor("output_ids", np.array([token], dtype=np.int32))
        else:
            out = pb_utils.Tensor("text_output", np.array([("t%d " % token).encode()], dtype=object))
        s.sender.send(pb_utils.InferenceResponse([out]))
        if s.generated >= s.max_tokens:
            s.sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            finished.append(s)

    def finalize(self):
        with self.cv:
            self.running = False
            self.cv.notify()
        self.thread.join(timeout=5)
'''

# The CPU cost shape: a step of 3 ms, 0.04 ms per prompt token, 0.5 ms per decoding sequence, 0.002 ms per
# cached token attended to; a cache of 4096 tokens at a fraction of 1.0.
COSTS = {"step_ms": 3.0, "prefill_ms": 0.04, "decode_ms": 0.5, "attn_ms": 0.002, "kv_tokens": 4096}
# The inputs and outputs: a TensorRT-LLM ensemble's (text in, text out) or the tensorrt_llm model's (token ids)
INTERFACES = {
    "text": """input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]""",
    "ids": """input [
  { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "input_lengths" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "request_output_len" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "streaming" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [ { name: "output_ids" data_type: TYPE_INT32 dims: [ -1 ] } ]""",
}
KNOBS = {"max_num_seqs": 4, "max_num_tokens": 256, "kv_fraction": 0.5, "policy": "guaranteed_no_evict",
         "chunked": "false"}


def write_model(root: Path, name: str, *, engine: str = "sleep", kind: str = "KIND_CPU", costs: dict | None = None,
                interface: str = "text", **knobs: object) -> Path:
    """A model folder `root/name` (version 1) of this engine, with the knobs' served values."""
    folder = root / name
    (folder / "1").mkdir(parents=True)
    doc = (f"a decoupled in-flight batching LLM ({engine}): step cost of a decoder, one response per token")
    (folder / "config.pbtxt").write_text(CONFIG.format(doc=doc, name=name, engine=engine, kind=kind,
                                                      io=INTERFACES[interface], **{**KNOBS, **knobs}))
    (folder / "1" / "model.py").write_text(MODEL_PY.format(**{**COSTS, **(costs or {})}))
    return folder
