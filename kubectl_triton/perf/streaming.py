"""Streaming load for LLMs over gRPC: closed-loop workers, each on its own bidirectional stream
(`ModelStreamInfer`), each sending its next request once the last one's final response arrived. Every response
that carries outputs is a token (TensorRT-LLM, vLLM and a decoupled python model stream one per decoding step);
the final one is marked by Triton (`triton_final_response`, asked for with `triton_enable_empty_final_response`).

Per request: time to first token (TTFT), the gaps between tokens (inter-token latency, ITL) and their mean
(time per output token, TPOT). A request is *good* when its TTFT and its TPOT both meet the targets; goodput is
good requests per second (DistServe's definition)."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.perf import PerfError
from kubectl_triton.perf.inputs import Tensor, encode
from kubectl_triton.perf.loadgen import percentile, relative_error

WORDS = ("triton", "serves", "models", "on", "kubernetes", "with", "flux", "and", "git")
MAX_WINDOWS_LONGER = 10  # a count window (min_requests) is at most this many steps of --duration


@dataclass(frozen=True)
class Slo:
    """Latency targets of a good request (None: no target)."""

    max_ttft_ms: float | None = None
    max_itl_ms: float | None = None

    def good(self, ttft_ms: float, tpot_ms: float | None) -> bool:
        if self.max_ttft_ms is not None and ttft_ms > self.max_ttft_ms:
            return False
        return self.max_itl_ms is None or tpot_ms is None or tpot_ms <= self.max_itl_ms


@dataclass(frozen=True)
class Completed:
    """One request: when it ended (seconds from the window's start), TTFT, token gaps (ms)."""

    end_s: float
    ttft_ms: float
    gaps_ms: tuple[float, ...]

    @property
    def tokens(self) -> int:
        return len(self.gaps_ms) + 1

    @property
    def tpot_ms(self) -> float | None:
        return sum(self.gaps_ms) / len(self.gaps_ms) if self.gaps_ms else None


@dataclass(frozen=True)
class StreamResult:
    """One concurrency level of streamed requests against `slo`."""

    concurrency: int
    requests: int
    requests_per_s: float
    output_tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    goodput: float  # good requests per second
    good_fraction: float
    noise: float | None  # relative standard error of the goodput, from the window's five fifths
    window_s: float = 0.0  # the window's length: --duration, or longer to hold --min-requests

    def to_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def summarize(concurrency: int, done: list[Completed], window_s: float, slo: Slo) -> StreamResult:
    """Pure: a level's figures from the requests that ended inside a window of `window_s`."""
    ttft = sorted(c.ttft_ms for c in done)
    gaps = sorted(g for c in done for g in c.gaps_ms)
    tpot = sorted(t for c in done if (t := c.tpot_ms) is not None)
    good = [c for c in done if slo.good(c.ttft_ms, c.tpot_ms)]
    per_s = 1 / window_s if window_s > 0 else 0.0
    return StreamResult(concurrency, len(done), len(done) * per_s, sum(c.tokens for c in done) * per_s,
                        percentile(ttft, 50), percentile(ttft, 99), percentile(gaps, 50), percentile(gaps, 99),
                        percentile(tpot, 50), percentile(tpot, 99), len(good) * per_s,
                        len(good) / len(done) if done else 0.0,
                        relative_error([c.end_s for c in good], window_s), window_s)


# -- requests ----------------------------------------------------------------------------------------------

def _inputs(config: dict) -> dict[str, dict]:
    return {i.get("name"): i for i in config.get("input") or []}


def _tensor(config: dict, spec: dict, value: Any, datatype: str) -> Tensor:
    import numpy as np

    arr = np.asarray(value, dtype=object if datatype == "BYTES" else None)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if int(config.get("max_batch_size") or 0) > 0:
        arr = arr.reshape((1, *arr.shape))
    return Tensor(spec["name"], datatype, tuple(arr.shape), encode(arr, datatype))


def llm_requests(config: dict, prompt_tokens: int, output_tokens: int, variants: int = 4) -> list[list[Tensor]]:
    """Requests for the LLM interfaces Triton serves, recognised by their inputs: a TensorRT-LLM ensemble or BLS
    model (`text_input`, `max_tokens`), Triton's vLLM backend (`text_input`, `sampling_parameters`) and the
    tensorrtllm model itself (`input_ids`, `request_output_len`). Prompts are `prompt_tokens` words; `stream` /
    `streaming` inputs are set. Raises InputError for other models."""
    import numpy as np

    ins = _inputs(config)
    name = config.get("name", "?")
    out = []
    for v in range(variants):
        words = " ".join(WORDS[(v + i) % len(WORDS)] for i in range(prompt_tokens))
        tensors = []
        if "text_input" in ins and "max_tokens" in ins:
            tensors += [_tensor(config, ins["text_input"], [words.encode()], "BYTES"),
                        _tensor(config, ins["max_tokens"], np.array([output_tokens], dtype=np.int32), "INT32")]
        elif "text_input" in ins and "sampling_parameters" in ins:
            params = json.dumps({"max_tokens": output_tokens, "min_tokens": output_tokens, "ignore_eos": True})
            tensors += [_tensor(config, ins["text_input"], [words.encode()], "BYTES"),
                        _tensor(config, ins["sampling_parameters"], [params.encode()], "BYTES")]
            if "exclude_input_in_output" in ins:
                tensors.append(_tensor(config, ins["exclude_input_in_output"], np.array([True]), "BOOL"))
        elif "input_ids" in ins and "request_output_len" in ins:
            ids = np.arange(100 + v, 100 + v + prompt_tokens, dtype=np.int32) % 30000
            tensors += [_tensor(config, ins["input_ids"], ids, "INT32"),
                        _tensor(config, ins["request_output_len"], np.array([output_tokens], dtype=np.int32),
                                "INT32")]
            if "input_lengths" in ins:
                tensors.append(_tensor(config, ins["input_lengths"], np.array([prompt_tokens], dtype=np.int32),
                                       "INT32"))
        else:
            raise InputError(f"model {name!r} has none of the LLM interfaces goodput measures",
                             hint="its inputs must be text_input + max_tokens (TensorRT-LLM ensemble), text_input "
                                  "+ sampling_parameters (vLLM) or input_ids + request_output_len (tensorrt_llm)")
        for flag in ("stream", "streaming"):
            if flag in ins:
                tensors.append(_tensor(config, ins[flag], np.array([True]), "BOOL"))
        out.append(tensors)
    return out


def require_decoupled(config: dict) -> None:
    """Streaming needs a decoupled model (one request, many responses)."""
    if not (config.get("model_transaction_policy") or {}).get("decoupled"):
        raise InputError(f"model {config.get('name', '?')!r} is not decoupled: it answers once per request, so "
                         "there is no first token to time", hint="goodput needs a streaming (decoupled) model")


# -- the load ----------------------------------------------------------------------------------------------

class _Stream:
    """One worker's bidirectional stream: `ask(request)` yields the arrival time of each token."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.outbox: queue.Queue[Any] = queue.Queue()
        self.responses = target.stub.ModelStreamInfer(iter(self.outbox.get, None))

    def ask(self, request: Any) -> Iterator[float]:
        self.outbox.put(request)
        for msg in self.responses:
            if msg.error_message:
                raise PerfError(f"stream {self.target.model}: {msg.error_message}")
            resp = msg.infer_response
            now = time.perf_counter()
            final = resp.parameters["triton_final_response"].bool_param if "triton_final_response" in \
                resp.parameters else False
            if len(resp.outputs) or len(resp.raw_output_contents):
                yield now
            if final:
                return
        raise PerfError(f"stream {self.target.model}: the server closed the stream")

    def close(self) -> None:
        self.outbox.put(None)
        self.responses.cancel()


def _request_messages(target: Any, requests: list[list[Tensor]]) -> list[Any]:
    msgs = []
    for i, tensors in enumerate(requests):
        req = target.pb.ModelInferRequest(model_name=target.model, id=f"kt-{i}")
        req.parameters["triton_enable_empty_final_response"].bool_param = True
        for t in tensors:
            inp = req.inputs.add()
            inp.name, inp.datatype = t.name, t.datatype
            inp.shape.extend(t.shape)
            req.raw_input_contents.append(t.data)
        msgs.append(req)
    return msgs


def run_stream_level(target: Any, requests: list[list[Tensor]], concurrency: int, duration_s: float,
                     warmup_s: float, slo: Slo, min_requests: int = 0) -> StreamResult:
    """Run one level of streamed requests (target: a GrpcTarget) and measure it against `slo` (see `collect`)."""
    done, window_s = collect(target, requests, concurrency, duration_s, warmup_s, min_requests)
    return summarize(concurrency, done, window_s, slo)


def collect(target: Any, requests: list[list[Tensor]], concurrency: int, duration_s: float,
            warmup_s: float, min_requests: int = 0) -> tuple[list[Completed], float]:
    """Run one level of streamed requests (target: a GrpcTarget): the requests that ended in its window, and the
    window's length in seconds. The window opens after the warm-up and once every worker has finished a request (a
    closed loop of long requests is not in its steady state before: the first requests meet an empty queue), but
    at most `duration_s` after the warm-up. It lasts `duration_s`, and by further steps of `duration_s` until
    `min_requests` requests have ended inside it, up to MAX_WINDOWS_LONGER steps (as perf_analyzer's count windows
    grow by whole steps); requests that end inside it count. The first worker error stops the level and raises
    PerfError; Ctrl-C stops every worker and cancels every stream."""
    import grpc

    msgs = _request_messages(target, requests)
    stop = threading.Event()
    errors: list[BaseException] = []
    ended: list[list[tuple[float, float, tuple[float, ...]]]] = [[] for _ in range(concurrency)]
    first = threading.Semaphore(0)
    streams: list[_Stream] = []
    threads: list[threading.Thread] = []

    def work(i: int) -> None:
        stream, mine, n = streams[i], ended[i], i
        try:
            while not stop.is_set():
                sent = time.perf_counter()
                times = list(stream.ask(msgs[n % len(msgs)]))
                n += 1
                if not times:
                    raise PerfError(f"stream {target.model}: a request ended without a token")
                mine.append((times[-1], (times[0] - sent) * 1e3,
                             tuple((b - a) * 1e3 for a, b in zip(times, times[1:], strict=False))))
                if len(mine) == 1:
                    first.release()
        except grpc.RpcError as err:
            if not stop.is_set():
                errors.append(PerfError(f"stream {target.model}: {err.details()}"))
                stop.set()
        except BaseException as err:  # noqa: BLE001 - handed to the main thread
            if not stop.is_set():  # after the window, a stream closed under a worker is no error
                errors.append(err)
                stop.set()
        finally:
            first.release()  # a worker that ends early does not hold the window shut

    start = end = 0.0
    try:
        for _ in range(concurrency):
            streams.append(_Stream(target))
        t0 = time.perf_counter()
        for i in range(concurrency):
            th = threading.Thread(target=work, args=(i,), daemon=True, name=f"stream-{i}")
            threads.append(th)
            th.start()
        stop.wait(warmup_s)
        cap = t0 + warmup_s + duration_s
        for _ in range(concurrency):
            if stop.is_set() or not first.acquire(timeout=max(0.0, cap - time.perf_counter())):
                break
        start = time.perf_counter()
        end = start + duration_s
        stop.wait(duration_s)
        # whole steps of duration_s: a window that ended on its N-th request would overstate the rate (requests
        # of one length end in waves, one per batch of sequences)
        while (end < start + MAX_WINDOWS_LONGER * duration_s - 1e-9 and not stop.is_set()
               and sum(start <= t <= end for worker in ended for t, _, _ in worker) < min_requests):
            end += duration_s
            stop.wait(max(0.0, end - time.perf_counter()))
    finally:
        stop.set()
        for s in streams:
            s.close()
        deadline = time.perf_counter() + 5
        for th in threads:
            if th.ident is not None:
                th.join(timeout=max(0.0, deadline - time.perf_counter()))
    if errors:
        err = errors[0]
        raise err if isinstance(err, PerfError) else PerfError(f"stream load generator: {err}")
    finished = [Completed(t - start, ttft, gaps) for worker in ended for t, ttft, gaps in worker if start <= t <= end]
    if not finished:
        raise PerfError(f"no streamed request ended within {end - start:.1f} s at concurrency {concurrency}",
                        hint="raise --duration (a window must hold several whole requests)")
    return finished, end - start
