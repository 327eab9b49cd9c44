"""Closed-loop load: `concurrency` workers, each sending its next request as soon as the last one is
answered (perf_analyzer's concurrency mode). Requests completing inside the measurement window count;
a short warm-up before it is not measured. Triton's statistics are read at both ends of the window."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from kubectl_triton.perf import PerfError
from kubectl_triton.perf.inputs import Tensor
from kubectl_triton.perf.target import Split, split, totals


@dataclass(frozen=True)
class LevelResult:
    """One concurrency level: throughput in inferences/s, client latency percentiles, Triton's split."""

    concurrency: int
    throughput: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    queue_us: float | None
    compute_us: float | None
    batch: float | None
    requests: int

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("throughput", "p50_ms", "p90_ms", "p99_ms", "queue_us", "compute_us", "batch"):
            if d[k] is not None:
                d[k] = round(d[k], 3 if k.endswith("_ms") or k == "batch" else 1)
        return d


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of already sorted values; 0 for none."""
    if not values:
        return 0.0
    pos = (len(values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def summarize(concurrency: int, latencies_s: Sequence[float], window_s: float, sp: Split,
              batch_size: int = 1) -> LevelResult:
    """Pure: a level's figures from the latencies of the requests completed in a window of `window_s`."""
    lat = sorted(x * 1e3 for x in latencies_s)
    return LevelResult(concurrency, len(lat) * batch_size / window_s if window_s > 0 else 0.0,
                       percentile(lat, 50), percentile(lat, 90), percentile(lat, 99),
                       sp.queue_us, sp.compute_us, sp.batch, len(lat))


def run_level(target, requests: list[list[Tensor]], concurrency: int, duration_s: float,
              warmup_s: float = 0.5) -> LevelResult:
    """Run one level and measure it. The first worker error stops the level and raises PerfError;
    Ctrl-C stops the workers before it propagates."""
    sessions = [target.session(requests) for _ in range(concurrency)]
    stop = threading.Event()
    errors: list[BaseException] = []
    lat: list[list[float]] = [[] for _ in range(concurrency)]
    t0 = time.perf_counter()
    start, end = t0 + warmup_s, t0 + warmup_s + duration_s

    def work(i: int) -> None:
        session, mine, n = sessions[i], lat[i], i
        try:
            while not stop.is_set():
                sent = time.perf_counter()
                if sent >= end:
                    return
                session.infer(n)
                done = time.perf_counter()
                n += 1
                if start <= done <= end:
                    mine.append(done - sent)
        except BaseException as err:  # noqa: BLE001 - handed to the main thread
            errors.append(err)
            stop.set()
        finally:
            session.close()

    threads = [threading.Thread(target=work, args=(i,), daemon=True, name=f"load-{i}") for i in range(concurrency)]
    try:
        for th in threads:
            th.start()
        stop.wait(max(0.0, start - time.perf_counter()))
        before = totals(target.stats()) if not stop.is_set() else None
        stop.wait(max(0.0, end - time.perf_counter()))
        after = totals(target.stats()) if not stop.is_set() else None
    finally:
        stop.set()
        for th in threads:
            th.join(timeout=target.timeout + 5)
    if errors:
        err = errors[0]
        raise err if isinstance(err, PerfError) else PerfError(f"load generator: {err}")
    all_lat = [x for worker in lat for x in worker]
    if not all_lat:
        raise PerfError(f"no request completed within {duration_s:g} s at concurrency {concurrency}",
                        hint="raise --duration")
    return summarize(concurrency, all_lat, duration_s, split(before, after))


def bench(target, requests: list[list[Tensor]], levels: Sequence[int], duration_s: float,
          warmup_s: float = 0.5, on_level: Callable[[LevelResult], None] | None = None) -> list[LevelResult]:
    """Every concurrency level in order; one request first so a broken model fails fast and clearly."""
    probe = target.session(requests)
    try:
        probe.infer(0)
    finally:
        probe.close()
    results = []
    for c in levels:
        res = run_level(target, requests, c, duration_s, warmup_s)
        results.append(res)
        if on_level:
            on_level(res)
    return results
