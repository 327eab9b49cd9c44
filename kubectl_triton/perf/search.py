"""tune's search: candidate batching settings, loading each through Triton's model-control API, and the
choice. `grid`, `apply` and `choose` are pure; `tune` drives a target and always restores the model's
original configuration (success, failure, Ctrl-C)."""

from __future__ import annotations

import copy
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kubectl_triton.perf import PerfError
from kubectl_triton.perf.inputs import Tensor
from kubectl_triton.perf.loadgen import LevelResult, run_level


@dataclass(frozen=True)
class Candidate:
    """A setting: instances per group and dynamic batching ({preferred_batch_size, max_queue_delay_microseconds}
    or None for no batching)."""

    instance_count: int
    dynamic_batching: dict | None

    @property
    def key(self) -> tuple:
        db = self.dynamic_batching
        return (self.instance_count, None if db is None else
                (tuple(db.get("preferred_batch_size") or ()), int(db.get("max_queue_delay_microseconds") or 0)))

    def to_dict(self) -> dict:
        return {"dynamic_batching": self.dynamic_batching, "instance_count": self.instance_count}

    def describe(self) -> str:
        db = self.dynamic_batching
        if db is None:
            batching = "no batching"
        else:
            pref = db.get("preferred_batch_size") or []
            batching = (f"dynamic batching, delay {db.get('max_queue_delay_microseconds', 0)} µs"
                        + (f", preferred {','.join(map(str, pref))}" if pref else ""))
        return f"{self.instance_count} instance{'s' if self.instance_count != 1 else ''}, {batching}"


@dataclass
class Trial:
    candidate: Candidate
    result: LevelResult | None = None
    error: str | None = None
    baseline: bool = False


def current(config: dict) -> Candidate:
    """The setting a served config has (instance count of its first group; 1 without groups)."""
    groups = config.get("instance_group") or []
    count = int(groups[0].get("count") or 1) if groups else 1
    db = config.get("dynamic_batching")
    if db is None:
        return Candidate(count, None)
    return Candidate(count, {"preferred_batch_size": [int(x) for x in db.get("preferred_batch_size") or []],
                             "max_queue_delay_microseconds": int(db.get("max_queue_delay_microseconds") or 0)})


def auto_preferred(config: dict, concurrency: int) -> list[int]:
    """The largest power of two not above max_batch_size nor the concurrency."""
    limit = min(int(config.get("max_batch_size") or 0), max(concurrency, 1))
    p = 1
    while p * 2 <= limit:
        p *= 2
    return [p] if limit >= 1 else []


def grid(config: dict, concurrency: int, instances: Sequence[int], delays_us: Sequence[int],
         preferred: Sequence[list[int] | None]) -> list[Candidate]:
    """Candidates: for each instance count, no batching and dynamic batching at each delay and preferred
    sizes (None in `preferred` means the automatic choice). A model with max_batch_size 0 cannot batch:
    only instance counts vary. The served setting itself is left out (it is the baseline)."""
    can_batch = int(config.get("max_batch_size") or 0) > 0
    settings: list[dict | None] = [None]
    if can_batch:
        for pref in preferred:
            sizes = auto_preferred(config, concurrency) if pref is None else list(pref)
            for d in delays_us:
                settings.append({"preferred_batch_size": sizes, "max_queue_delay_microseconds": int(d)})
    base = current(config).key
    out, seen = [], {base}
    for n in instances:
        for db in settings:
            cand = Candidate(int(n), db)
            if cand.key not in seen:
                seen.add(cand.key)
                out.append(cand)
    return out


def apply(config: dict, cand: Candidate) -> dict:
    """The served config with the candidate's setting: every instance group's count, and dynamic_batching
    (its other fields, e.g. priorities and queue policy, kept) set or removed."""
    out = copy.deepcopy(config)
    groups = out.get("instance_group") or []
    for g in groups:
        g["count"] = cand.instance_count
    if not groups:
        out["instance_group"] = [{"count": cand.instance_count}]
    if cand.dynamic_batching is None:
        out.pop("dynamic_batching", None)
    else:
        db = dict(out.get("dynamic_batching") or {})
        db.update(cand.dynamic_batching)
        out["dynamic_batching"] = db
    return out


def choose(trials: Sequence[Trial], budget_ms: float | None) -> Trial:
    """The measured trial with the best throughput whose p99 is within the budget (ties: lower p99)."""
    ok = [t for t in trials if t.result is not None and (budget_ms is None or t.result.p99_ms <= budget_ms)]
    if not ok:
        measured = [t for t in trials if t.result is not None]
        if not measured:
            raise PerfError("no candidate could be measured: " + "; ".join(
                f"{t.candidate.describe()}: {t.error}" for t in trials if t.error)[:400])
        low = min(measured, key=lambda t: t.result.p99_ms)  # type: ignore[union-attr]
        raise PerfError(f"no setting kept p99 within {budget_ms:g} ms (lowest: {low.result.p99_ms:.1f} ms with "
                        f"{low.candidate.describe()})", hint="raise --latency-budget-ms or lower --concurrency")
    return max(ok, key=lambda t: (t.result.throughput, -t.result.p99_ms))  # type: ignore[union-attr]


def restore(target, original: dict) -> None:
    """Load the original configuration again; a second Ctrl-C cannot interrupt it."""
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        target.load(original)
    except PerfError as err:
        raise PerfError(f"could not restore the original configuration of {target.model}: {err.message}",
                        hint=f"reload it: curl -X POST {getattr(target, 'url', '')}/v2/repository/models/"
                             f"{target.model}/load") from None
    finally:
        if main:
            signal.signal(signal.SIGINT, old)


def tune(target, requests: list[list[Tensor]], concurrency: int, duration_s: float, candidates: Sequence[Candidate],
         *, warmup_s: float = 0.5, original: dict | None = None,
         on_trial: Callable[[Trial], None] | None = None) -> list[Trial]:
    """Measure the served setting (baseline, first trial) and every candidate at `concurrency`. A candidate
    Triton refuses to load is recorded with its error. The original config is loaded again at the end."""
    original = original if original is not None else target.config()
    trials = [Trial(current(original), baseline=True)]
    trials[0].result = run_level(target, requests, concurrency, duration_s, warmup_s)
    if on_trial:
        on_trial(trials[0])
    changed = False
    try:
        for cand in candidates:
            trial = Trial(cand)
            trials.append(trial)
            try:
                target.load(apply(original, cand))
            except PerfError as err:
                if "not allowed" in err.message:  # model control is off: nothing was changed
                    raise PerfError(f"{err.message} (Triton's model control is not explicit)",
                                    hint="start tritonserver with --model-control-mode=explicit") from None
                trial.error = err.message
            changed = True
            if trial.error is None:
                try:
                    trial.result = run_level(target, requests, concurrency, duration_s, warmup_s)
                except PerfError as err:
                    trial.error = err.message
            if on_trial:
                on_trial(trial)
    finally:
        if changed:
            restore(target, original)
    return trials
