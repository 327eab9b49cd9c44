"""Closed-loop load: `concurrency` workers, each sending its next request as soon as the last one is
answered (perf_analyzer's concurrency mode). Requests completing inside the measurement window count;
a short warm-up before it is not measured. Triton's statistics are read at both ends of the window."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from kubectl_triton.perf import PerfError
from kubectl_triton.perf.inputs import Tensor
from kubectl_triton.perf.target import Session, Split, Target, split, totals

PARTS = 5


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
    noise: float | None = None  # relative standard error of the throughput, from the window's five fifths
    spread: float | None = None  # the largest deviation of a fifth's throughput from their mean, relative
    windows: int = 1

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("throughput", "p50_ms", "p90_ms", "p99_ms", "queue_us", "compute_us", "batch", "noise", "spread"):
            if d[k] is not None:
                d[k] = round(d[k], 3 if k.endswith("_ms") or k in ("batch", "noise", "spread") else 1)
        return d

    def stable(self, percent: float) -> bool:
        """perf_analyzer's stability criterion, inside one window: every fifth's throughput within `percent` of
        their mean (a window too short to judge counts as stable; 0 turns the criterion off)."""
        return percent <= 0 or self.spread is None or self.spread * 100 <= percent


def merge(results: Sequence[LevelResult]) -> LevelResult:
    """Equal windows of one setting as one result: mean throughput and percentiles, the worst p99."""
    n = len(results)

    def mean(values: list[float | None]) -> float | None:
        vals = [v for v in values if v is not None]
        return sum(vals) / len(vals) if vals else None

    noises = [r.noise for r in results if r.noise is not None]
    return LevelResult(results[0].concurrency, sum(r.throughput for r in results) / n,
                       sum(r.p50_ms for r in results) / n, sum(r.p90_ms for r in results) / n,
                       max(r.p99_ms for r in results), mean([r.queue_us for r in results]),
                       mean([r.compute_us for r in results]), mean([r.batch for r in results]),
                       sum(r.requests for r in results),
                       math.sqrt(sum(x * x for x in noises)) / len(noises) if noises else None,
                       results[-1].spread, sum(r.windows for r in results))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of already sorted values; 0 for none."""
    if not values:
        return 0.0
    pos = (len(values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def _slices(offsets_s: Sequence[float], window_s: float, parts: int) -> list[int] | None:
    """Completions in each of a window's `parts` equal slices; None with too few completions to judge."""
    if window_s <= 0 or len(offsets_s) < 2 * parts:
        return None
    counts = [0] * parts
    for t in offsets_s:
        counts[min(parts - 1, max(0, int(t / window_s * parts)))] += 1
    return counts


def relative_error(offsets_s: Sequence[float], window_s: float, parts: int = PARTS) -> float | None:
    """Relative standard error of a window's throughput, from the completions in each of its `parts` equal
    slices (`offsets_s`: completion times from the window's start). None with too few completions."""
    counts = _slices(offsets_s, window_s, parts)
    if counts is None:
        return None
    mean = sum(counts) / parts
    var = sum((c - mean) ** 2 for c in counts) / (parts - 1)
    return (var ** 0.5) / mean / parts ** 0.5 if mean > 0 else None


def spread(offsets_s: Sequence[float], window_s: float, parts: int = PARTS) -> float | None:
    """The largest deviation of a slice's completions from the slices' mean, relative to it."""
    counts = _slices(offsets_s, window_s, parts)
    if counts is None:
        return None
    mean = sum(counts) / parts
    return max(abs(c - mean) for c in counts) / mean if mean > 0 else None


def summarize(concurrency: int, latencies_s: Sequence[float], window_s: float, sp: Split,
              batch_size: int = 1, offsets_s: Sequence[float] = ()) -> LevelResult:
    """Pure: a level's figures from the latencies of the requests completed in a window of `window_s`."""
    lat = sorted(x * 1e3 for x in latencies_s)
    return LevelResult(concurrency, len(lat) * batch_size / window_s if window_s > 0 else 0.0,
                       percentile(lat, 50), percentile(lat, 90), percentile(lat, 99),
                       sp.queue_us, sp.compute_us, sp.batch, len(lat), relative_error(offsets_s, window_s),
                       spread(offsets_s, window_s))


def run_level(target: Target, requests: list[list[Tensor]], concurrency: int, duration_s: float,
              warmup_s: float = 0.5) -> LevelResult:
    """Run one level and measure it. The first worker error stops the level and raises PerfError.
    Ctrl-C (KeyboardInterrupt) at any point stops the workers that started, closes every session and
    propagates."""
    sessions: list[Session] = []
    threads: list[threading.Thread] = []
    stop = threading.Event()
    errors: list[BaseException] = []
    lat: list[list[tuple[float, float]]] = [[] for _ in range(concurrency)]
    try:
        for _ in range(concurrency):
            sessions.append(target.session(requests))
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
                        mine.append((done - sent, done - start))
            except BaseException as err:  # noqa: BLE001 - handed to the main thread
                errors.append(err)
                stop.set()

        for i in range(concurrency):
            th = threading.Thread(target=work, args=(i,), daemon=True, name=f"load-{i}")
            threads.append(th)  # before start(): a Ctrl-C inside start() still finds it below
            th.start()
        stop.wait(max(0.0, start - time.perf_counter()))
        before = totals(target.stats()) if not stop.is_set() else None
        stop.wait(max(0.0, end - time.perf_counter()))
        after = totals(target.stats()) if not stop.is_set() else None
    finally:
        stop.set()
        try:
            for th in threads:
                if th.ident is not None:  # started (a thread interrupted inside start() may never have run)
                    th.join(timeout=getattr(target, "timeout", 60.0) + 5)
        finally:
            for session in sessions:  # closed here, after the workers stopped: also those that never ran
                session.close()
    if errors:
        err = errors[0]
        raise err if isinstance(err, PerfError) else PerfError(f"load generator: {err}")
    done = [x for worker in lat for x in worker]
    if not done:
        raise PerfError(f"no request completed within {duration_s:g} s at concurrency {concurrency}",
                        hint="raise --duration")
    return summarize(concurrency, [x[0] for x in done], duration_s, split(before, after),
                     offsets_s=[x[1] for x in done])


def bench(target: Target, requests: list[list[Tensor]], levels: Sequence[int], duration_s: float,
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
