"""tune's search over a model's serving settings: instance count, dynamic batching on/off, max queue delay,
preferred batch sizes (and max_batch_size when allowed).

The space is small and ordered along each axis, measurements are costly (a model reload and a load window each) and
noisy. So the strategy is coordinate descent with early stopping, then a local search: from the served setting, one
axis at a time (batching, instances, preferred sizes, delay, max batch size), step to the next value while that is
better by more than the noise, stop at the first step that is not; repeat passes while a pass moved. The first pass
tries every preferred size that can cap a batch, and the longest delay first; later passes skip a value that lost
by far. A step that lies within noise of the incumbent but ahead of it is measured again, and taken if it stays
ahead. Where a step of the first pass up in instances or to batching was faster but crossed the p99 bound, that step
capped below its batches is measured right after the instance walk (a cap evens uneven batches, whose tail
queues). Between the first pass and the second, the preferred sizes at the instance count the first pass
walked up from (fewer instances form larger batches, which a cap may trim) are measured, and the second pass walks
on from one that wins. What the budget has left goes to the unmeasured neighbours of the best setting, two axes
away (where axes interact: how many instances pay depends on the batches each forms, a delay pays only with a
preferred size) and then one. The winner is measured again before it is chosen (one measurement is kept for that).
Everything stops at the budget (measurements, settings and repeats, or time). A preferred size equal to the max
batch size is no setting of its own: Triton gives a batcher without preferred sizes that one.

Everything here is pure (a `measure` function is handed in: tests drive it with synthetic cost functions);
`kubectl_triton.perf.tunerun` measures on a served model."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kubectl_triton.perf import PerfError
from kubectl_triton.perf.loadgen import LevelResult

DELAYS_US = (0, 100, 500, 1000, 2000)
PREFERRED: tuple[tuple[int, ...], ...] = ((), (4,), (8,), (16,))
MAX_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
NOISE_FLOOR = 0.03  # two windows within 3% are a tie whatever their own spread says
# how the first pass moves along an axis (later passes walk step by step): every preferred size (a cap pays or
# not depending on the batches that form, not in the order of the sizes), the longest delay first (a short one
# mostly adds latency; a long one lets batches fill)
FIRST_PASS = {"preferred": "scan", "delay": "jump"}
BUDGET_SHARE = 0.15  # the default budget: 15% of the space's settings (see share_budget)
LOST_BY = 0.6  # a step below this share of the incumbent's throughput lost by far (see Search._lost)


@dataclass(frozen=True)
class Candidate:
    """A setting: instances per group, dynamic batching ({preferred_batch_size, max_queue_delay_microseconds}
    or None for no batching) and max_batch_size (None: the model's own)."""

    instance_count: int
    dynamic_batching: dict | None
    max_batch_size: int | None = None

    @property
    def key(self) -> tuple:
        db = self.dynamic_batching
        return (self.instance_count, None if db is None else
                (tuple(db.get("preferred_batch_size") or ()), int(db.get("max_queue_delay_microseconds") or 0)),
                self.max_batch_size)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Candidate) and self.key == other.key

    def to_dict(self) -> dict:
        out: dict = {"dynamic_batching": self.dynamic_batching, "instance_count": self.instance_count}
        if self.max_batch_size is not None:
            out["max_batch_size"] = self.max_batch_size
        return out

    def describe(self) -> str:
        db = self.dynamic_batching
        if db is None:
            batching = "no batching"
        else:
            pref = db.get("preferred_batch_size") or []
            batching = (f"dynamic batching, delay {db.get('max_queue_delay_microseconds', 0)} µs"
                        + (f", preferred {','.join(map(str, pref))}" if pref else ""))
        mbs = f", max batch {self.max_batch_size}" if self.max_batch_size is not None else ""
        return f"{self.instance_count} instance{'s' if self.instance_count != 1 else ''}, {batching}{mbs}"


def batching(delay_us: int, preferred: Sequence[int] = ()) -> dict:
    return {"preferred_batch_size": [int(x) for x in preferred], "max_queue_delay_microseconds": int(delay_us)}


@dataclass
class Trial:
    """One measurement (a candidate measured twice is two trials)."""

    candidate: Candidate
    result: LevelResult | None = None
    error: str | None = None
    baseline: bool = False
    why: str = ""  # the search step that asked for it


def current(config: dict) -> Candidate:
    """The setting a served config has (instance count of its first group; 1 without groups)."""
    groups = config.get("instance_group") or []
    count = int(groups[0].get("count") or 1) if groups else 1
    db = config.get("dynamic_batching")
    if db is None:
        return Candidate(count, None)
    return Candidate(count, batching(int(db.get("max_queue_delay_microseconds") or 0),
                                     [int(x) for x in db.get("preferred_batch_size") or []]))


def auto_preferred(config: dict, concurrency: int) -> list[int]:
    """The largest power of two not above max_batch_size nor the concurrency."""
    limit = min(int(config.get("max_batch_size") or 0), max(concurrency, 1))
    p = 1
    while p * 2 <= limit:
        p *= 2
    return [p] if limit >= 1 else []


@dataclass(frozen=True)
class Space:
    """The settings tune may choose from. Every axis is ordered; `preferred` from no preference (the
    largest batch the queue allows) to the smallest cap. Preferred sizes above the max batch size are left
    out (no preference, if none fits); a model that cannot batch (max_batch_size 0) varies only its instance
    count."""

    instances: tuple[int, ...] = (1, 2, 3)
    delays_us: tuple[int, ...] = DELAYS_US
    preferred: tuple[tuple[int, ...], ...] = PREFERRED
    max_batch_sizes: tuple[int | None, ...] = (None,)
    can_batch: bool = True
    model_max_batch_size: int = 0

    @classmethod
    def for_config(cls, config: dict, *, instances: Sequence[int] = (1, 2, 3),
                   delays_us: Sequence[int] = DELAYS_US, preferred: Sequence[Sequence[int]] = PREFERRED,
                   max_batch_sizes: Sequence[int] = ()) -> Space:
        mbs = int(config.get("max_batch_size") or 0)
        prefs = sorted({tuple(int(x) for x in p) for p in preferred}, key=lambda p: (p != (), -max(p or (0,))))
        # the model's own max batch size is the served one (None), not a setting besides it
        sizes = tuple(None if m == mbs else m for m in sorted(set(max_batch_sizes)))
        return cls(tuple(sorted(set(instances))), tuple(sorted(set(int(d) for d in delays_us))) or (0,),
                   tuple(prefs) or ((),), sizes or (None,), mbs > 0, mbs)

    def limit(self, mbs: int | None) -> int:
        return self.model_max_batch_size if mbs is None else mbs

    def prefs_for(self, mbs: int | None) -> tuple[tuple[int, ...], ...]:
        """The preferred sizes that fit the max batch size (none fitting: no preference), each once: Triton
        gives a dynamic batcher without preferred sizes the max batch size as its one preferred size
        (model_config_utils.cc of triton-inference-server/core), so that size alone is no preference."""
        out: list[tuple[int, ...]] = []
        for p in self.preferred:
            if all(x <= self.limit(mbs) for x in p):
                p = () if p == (self.limit(mbs),) else p
                if p not in out:
                    out.append(p)
        return tuple(out) or ((),)

    def canonical(self, cand: Candidate) -> Candidate:
        """The candidate as Triton serves it: a preferred size equal to the max batch size is no preference."""
        db = cand.dynamic_batching
        if db is None or tuple(db.get("preferred_batch_size") or ()) != (self.limit(cand.max_batch_size),):
            return cand
        return Candidate(cand.instance_count, batching(int(db.get("max_queue_delay_microseconds") or 0)),
                         cand.max_batch_size)

    def all(self) -> list[Candidate]:
        """Every setting (what an exhaustive sweep measures), in axis order."""
        out = []
        for m in self.max_batch_sizes:
            for n in self.instances:
                out.append(Candidate(n, None, m))
                if self.can_batch and self.limit(m) > 0:
                    out.extend(Candidate(n, batching(d, p), m) for d in self.delays_us for p in self.prefs_for(m))
        return out

    def __len__(self) -> int:
        return len(self.all())

    # -- axes: the ordered values of one coordinate, and a candidate with it changed --------------------
    # the instance count before the preferred size: where instances pay, a cap pays only once several instances
    # share the queue (at one instance every cap may tie); neither order suits every model, this one scored higher
    # on bench/tune_heldout.py's sets (docs/bench-tune.md, "The search")
    AXES = ("batching", "instances", "preferred", "delay", "max_batch_size")

    def values(self, axis: str, cand: Candidate) -> list:
        if axis == "instances":
            return list(self.instances)
        if axis == "max_batch_size":
            return list(self.max_batch_sizes) if len(self.max_batch_sizes) > 1 else []
        if not self.can_batch or self.limit(cand.max_batch_size) <= 0:
            return []
        if axis == "batching":
            return [False, True]
        if cand.dynamic_batching is None:
            return []
        if axis == "delay":
            return list(self.delays_us)
        return list(self.prefs_for(cand.max_batch_size))  # preferred

    def value(self, axis: str, cand: Candidate) -> object:
        db = cand.dynamic_batching
        if axis == "instances":
            return cand.instance_count
        if axis == "max_batch_size":
            return cand.max_batch_size
        if axis == "batching":
            return db is not None
        if axis == "delay":
            return int((db or {}).get("max_queue_delay_microseconds") or 0)
        return tuple((db or {}).get("preferred_batch_size") or ())

    def with_value(self, axis: str, cand: Candidate, value: object) -> Candidate:
        db = cand.dynamic_batching
        if axis == "instances":
            return Candidate(int(value), db, cand.max_batch_size)  # type: ignore[call-overload]
        if axis == "max_batch_size":
            m = value  # preferred sizes the new max batch size cannot hold are dropped
            keep = [x for x in (db or {}).get("preferred_batch_size") or [] if x <= self.limit(m)]  # type: ignore
            return self.canonical(Candidate(cand.instance_count, None if db is None else batching(
                db.get("max_queue_delay_microseconds") or 0, keep), m))  # type: ignore[arg-type]
        if axis == "batching":
            if not value:
                return Candidate(cand.instance_count, None, cand.max_batch_size)
            return Candidate(cand.instance_count, batching(self.delays_us[0]), cand.max_batch_size)
        if axis == "delay":
            return Candidate(cand.instance_count, batching(int(value), self.value("preferred", cand)),  # type: ignore
                             cand.max_batch_size)
        return Candidate(cand.instance_count, batching(self.value("delay", cand), value),  # type: ignore[arg-type]
                         cand.max_batch_size)

    def snap(self, axis: str, cand: Candidate) -> int | None:
        """The index of the candidate's value on `axis` (nearest value for numbers); None off the axis."""
        vals = self.values(axis, cand)
        if not vals:
            return None
        v = self.value(axis, cand)
        if v in vals:
            return vals.index(v)
        if isinstance(v, int) and not isinstance(v, bool) and all(isinstance(x, int) for x in vals):
            return min(range(len(vals)), key=lambda i: abs(vals[i] - v))
        return 0


@dataclass(frozen=True)
class Objective:
    """`throughput` (max_p99_ms None) or `latency`: the best throughput whose p99 stays within the bound."""

    max_p99_ms: float | None = None

    @property
    def name(self) -> str:
        return "throughput" if self.max_p99_ms is None else "latency"

    def met(self, p99_ms: float) -> bool:
        return self.max_p99_ms is None or p99_ms <= self.max_p99_ms


@dataclass
class Figures:
    """A candidate's measurements together: mean throughput, the worst p99 (so a bound holds in every
    window), and the relative noise of the mean."""

    results: list[LevelResult] = field(default_factory=list)
    error: str | None = None

    @property
    def throughput(self) -> float:
        return sum(r.throughput for r in self.results) / len(self.results) if self.results else 0.0

    @property
    def p99_ms(self) -> float:
        return max((r.p99_ms for r in self.results), default=math.inf)

    @property
    def p50_ms(self) -> float:
        return sum(r.p50_ms for r in self.results) / len(self.results) if self.results else math.inf

    @property
    def noise(self) -> float:
        """Relative standard error of the mean throughput: the windows' own spread, and between windows
        their disagreement, never below NOISE_FLOOR / 2."""
        rs = self.results
        own = [r.noise for r in rs if r.noise is not None]
        se = math.sqrt(sum(x * x for x in own)) / len(rs) if own else 0.0
        if len(rs) > 1 and self.throughput > 0:
            mean = self.throughput
            sd = math.sqrt(sum((r.throughput - mean) ** 2 for r in rs) / (len(rs) - 1))
            se = max(se, sd / mean / math.sqrt(len(rs)))
        return max(se, NOISE_FLOOR / 2)

    def score(self, objective: Objective) -> tuple[int, float]:
        """Larger is better: a failed candidate < one that misses the bound < one that meets it; within each,
        more throughput is better (`compare` also ranks two that miss the bound by their p99)."""
        if not self.results:
            return (0, 0.0)
        if objective.met(self.p99_ms):
            return (2, self.throughput)
        return (1, self.throughput)


def compare(a: Figures, b: Figures, objective: Objective) -> int:
    """+1 when `a` is better than `b` by more than noise, -1 when worse by more, 0 within noise."""
    sa, sb = a.score(objective), b.score(objective)
    if sa[0] != sb[0]:
        return 1 if sa[0] > sb[0] else -1
    if sa[0] == 0:
        return 0
    if sa[0] == 1:  # both miss the bound: the one closer to it (10% counts), else the faster
        pa, pb = a.p99_ms, b.p99_ms
        if abs(pa - pb) > 0.1 * max(pa, pb):
            return 1 if pa < pb else -1
    ta, tb = a.throughput, b.throughput
    band = max(NOISE_FLOOR, 2 * math.sqrt(a.noise ** 2 + b.noise ** 2)) * max(ta, tb)
    return 0 if abs(ta - tb) <= band else (1 if ta > tb else -1)


class Budget:
    """At most `max_trials` measurements, and none started when the time left is less than the mean
    duration of one so far (`seconds`). With `max_repeats`, `max_trials` counts the settings measured and
    `max_repeats` the measurements of a setting again (a tie settled, the winner confirmed)."""

    def __init__(self, max_trials: int | None = None, seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic, max_repeats: int | None = None) -> None:
        self.max_trials, self.seconds, self.clock, self.max_repeats = max_trials, seconds, clock, max_repeats
        self.start = clock()
        self.used = 0  # every measurement
        self.repeated = 0  # of which a setting measured again

    def spend(self, repeat: bool = False) -> None:
        """Count a measurement (`repeat`: of a setting measured before)."""
        self.used += 1
        self.repeated += repeat

    @property
    def settings(self) -> int:
        return self.used - self.repeated

    def allows(self, reserve: int = 0, repeat: bool = False) -> bool:
        """Whether another measurement (`repeat`: of a setting measured before) may start, keeping `reserve`
        repeated measurements for later."""
        if self.max_trials is not None:
            if self.max_repeats is None:
                if self.used + reserve >= self.max_trials:
                    return False
            elif (self.repeated + reserve >= self.max_repeats if repeat else self.settings >= self.max_trials):
                return False
        if self.seconds is not None:
            elapsed = self.clock() - self.start
            mean = elapsed / self.used if self.used else 0.0
            return elapsed + mean * (1 + reserve) <= self.seconds
        return True


def share_budget(size: int) -> Budget:
    """The default budget over a space of `size` settings: BUDGET_SHARE of them measured (at least 5), and
    measurements of a setting again (a tie settled, the winner confirmed) up to a third as many besides."""
    settings = max(5, int(BUDGET_SHARE * size))
    return Budget(settings, max_repeats=max(2, settings // 3))


Measure = Callable[[Candidate], LevelResult]


class Search:
    """Coordinate descent over a `Space` (see the module's docstring). `measure` raises PerfError for a
    candidate that cannot be loaded or measured; it is recorded and never chosen."""

    def __init__(self, space: Space, objective: Objective, measure: Measure, budget: Budget,
                 on_trial: Callable[[Trial], None] | None = None) -> None:
        self.space, self.objective, self.measure, self.budget = space, objective, measure, budget
        self.on_trial = on_trial
        self.trials: list[Trial] = []
        self.figures: dict[Candidate, Figures] = {}
        self.lost: set[tuple[str, object]] = set()  # (axis, value) steps that lost by far: see `_lost`
        self.settled = False  # the first pass is over
        self.fork: Candidate | None = None  # where the first pass's instance walk moved up from: see `forked`
        self.crossed: list[Candidate] = []  # steps up, faster but past the bound: see `cap_crossed`

    def _run(self, cand: Candidate, why: str, baseline: bool = False) -> Figures:
        trial = Trial(cand, baseline=baseline, why=why)
        fig = self.figures.setdefault(cand, Figures())
        self.budget.spend(repeat=bool(fig.results))
        try:
            trial.result = self.measure(cand)
            fig.results.append(trial.result)
        except PerfError as err:
            trial.error = fig.error = err.message
        self.trials.append(trial)
        if self.on_trial:
            self.on_trial(trial)
        return fig

    def _reserve(self) -> int:
        return 1  # keep one trial to measure the winner again

    def get(self, cand: Candidate, why: str) -> Figures | None:
        """The candidate's figures, measuring it first if it never was; None when the budget is spent."""
        if cand in self.figures:
            return self.figures[cand]
        if not self.budget.allows(self._reserve()):
            return None
        return self._run(cand, why)

    def better(self, challenger: Candidate, incumbent: Candidate) -> bool | None:
        """Whether to move from the incumbent to the challenger: it is better beyond noise, or within noise but
        still ahead after it was measured again (a tie does not stop a walk that is going up). None when the
        budget ran out before the challenger was measured."""
        fc = self.get(challenger, "step")
        if fc is None:
            return None
        fi = self.figures[incumbent]
        verdict = compare(fc, fi, self.objective)
        if verdict != 0 or not fc.results or fc.score(self.objective) <= fi.score(self.objective):
            return verdict > 0
        if len(fc.results) <= len(fi.results):
            if not self.budget.allows(self._reserve(), repeat=True):
                return False
            self._run(challenger, "within noise: measured again")
            verdict = compare(fc, fi, self.objective)
            if verdict != 0:
                return verdict > 0
        return fc.score(self.objective) > fi.score(self.objective)

    def line(self, axis: str, cur: Candidate) -> tuple[Candidate, bool]:
        """Move `cur` along `axis` while each step is better: upwards first, downwards when the first step up
        is not. While `cur` misses the p99 bound, a step that is not better does not end the walk (the axis is
        walked to its end: a later value may meet the bound). In the first pass, a step up in instances or to
        batching that lost only by its p99 is kept in `crossed` (see `cap_crossed`). Returns the new position and
        whether the budget ran out."""
        vals = self.space.values(axis, cur)
        i = self.space.snap(axis, cur)
        if i is None or len(vals) < 2:
            return cur, False
        for direction in (1, -1):
            moved = False
            j = i + direction
            while 0 <= j < len(vals):
                cand = self.space.with_value(axis, cur, vals[j])
                if cand == cur or self._pointless(axis, cur, vals[j]):
                    j += direction
                    continue
                verdict = self.better(cand, cur)
                if verdict is None:
                    return cur, True
                self._lost(axis, cand, cur, verdict)
                if not verdict and not self.settled and self._step_up(axis, cand, cur) and self._crossing(cand, cur):
                    self.crossed.append(cand)
                if verdict:
                    cur, moved, i = cand, True, j
                elif self.figures[cur].score(self.objective)[0] == 2:
                    break
                j += direction
            if moved:
                break
        return cur, False

    def _pointless(self, axis: str, cur: Candidate, value: object) -> bool:
        """A preferred batch size at or above twice the batches the incumbent forms on average caps next to
        nothing (it can only make the batcher wait for more): skipped, going by Triton's own count of inferences
        per execution. A cap just above the mean still trims the larger batches of a mix."""
        if self.settled and (axis, value) in self.lost:
            return True
        if axis != "preferred" or not value:
            return False
        results = self.figures[cur].results
        formed = results[-1].batch if results else None
        return formed is not None and max(value) >= 2 * formed  # type: ignore[call-overload]

    def run(self, start: Candidate) -> list[Trial]:
        """Measure `start` (the served setting), descend from it, spend what the budget has left around the best,
        and measure the winner again."""
        self._run(start, "served setting", baseline=True)
        if not self.figures[start].results:
            return self.trials  # the served setting itself fails: nothing to compare against
        if not self.descend(start):
            self.explore()
        self.confirm()
        return self.trials

    def sweep(self, start: Candidate) -> list[Trial]:
        """Measure `start` (the served setting), every other setting of the space once, as the budget allows (one
        measurement kept), and the winner again (`confirm`): one window of many settings is lucky somewhere, and a
        lucky window that meets a p99 bound is the one a single look would choose."""
        self._run(start, "served setting", baseline=True)
        for cand in self.space.all():
            if cand not in self.figures and self.budget.allows(self._reserve()):
                self._run(cand, "exhaustive")
        self.confirm()
        return self.trials

    def descend(self, cur: Candidate) -> bool:
        """Passes over the axes from `cur` until one moves nothing: in the first, steps up that crossed the bound
        measured capped (`cap_crossed`); after it, the preferred sizes left behind (`back_to_fork`). Returns
        whether the budget ran out."""
        while True:
            before = cur
            for axis in self.space.AXES:
                mode = "walk" if self.settled else FIRST_PASS.get(axis, "walk")
                came = cur
                cur, spent = self.jump(axis, cur) if mode == "jump" else self.scan(axis, cur) if mode == "scan" \
                    else self.line(axis, cur)
                if not self.settled and axis == "instances":
                    if not spent:
                        cur, spent = self.cap_crossed(cur)
                    if cur.instance_count > came.instance_count:
                        self.fork = came
                if spent:
                    return True
            if not self.settled:
                self.settled = True
                cur, spent = self.back_to_fork(cur)
                if spent:
                    return True
            if cur == before:
                return False

    def _move(self, axis: str, cur: Candidate, value: object) -> tuple[Candidate, bool | None]:
        cand = self.space.with_value(axis, cur, value)
        if cand == cur:
            return cur, False
        verdict = self.better(cand, cur)
        self._lost(axis, cand, cur, verdict)
        return (cand if verdict else cur), verdict

    def _lost(self, axis: str, cand: Candidate, cur: Candidate, verdict: bool | None) -> None:
        """Remember the side of a step that was measured and lost by far (less than LOST_BY of the other's
        throughput): later passes and the neighbours do not try that value of the axis again (turning batching off
        where it tripled throughput does not pay after another axis moved). A setting that failed is only never
        chosen: its failure may be transient, or belong to its other values."""
        if verdict is None:
            return
        win, lose = (cand, cur) if verdict else (cur, cand)
        fw, fl = self.figures[win], self.figures[lose]
        if fw.results and fl.results and fl.throughput < LOST_BY * fw.throughput:
            self.lost.add((axis, self.space.value(axis, lose)))

    def scan(self, axis: str, cur: Candidate) -> tuple[Candidate, bool]:
        """Every value of a short axis whose values are not ordered by effect (preferred sizes: a cap pays or not
        depending on the batches that form), each against the best so far."""
        for value in self.space.values(axis, cur):
            if self._pointless(axis, cur, value):
                continue
            cur, verdict = self._move(axis, cur, value)
            if verdict is None:
                return cur, True
        return cur, False

    def jump(self, axis: str, cur: Candidate) -> tuple[Candidate, bool]:
        """The far end of an ordered axis first (the longest delay: a small step there often ties or loses where
        a large one pays), then, if it paid, the values between, nearest the far end first."""
        vals = self.space.values(axis, cur)
        i = self.space.snap(axis, cur)
        if i is None or len(vals) < 2:
            return cur, False
        far = len(vals) - 1 if i < len(vals) - 1 else 0
        start = cur
        cur, verdict = self._move(axis, cur, vals[far])
        if verdict is None:
            return cur, True
        if cur == start:
            return cur, False
        between = range(far - 1, i, -1) if far > i else range(far + 1, i)
        for j in between:
            cur, verdict = self._move(axis, cur, vals[j])
            if verdict is None:
                return cur, True
        return cur, False

    def neighbours(self, cand: Candidate) -> list[Candidate]:
        """The settings two steps away from `cand`, along two axes at once (the pairs whose effects depend on each
        other: how many instances pay depends on the batches each one forms, a delay pays only with a preferred
        size that makes the batcher wait for it), then one step away along one axis (the passes that ended at
        `cand` measured most of those already)."""
        def steps(axis: str, c: Candidate) -> list[Candidate]:
            vals = self.space.values(axis, c)
            i = self.space.snap(axis, c)
            if i is None:
                return []
            return [self.space.with_value(axis, c, vals[j]) for j in (i - 1, i + 1)
                    if 0 <= j < len(vals) and (axis, vals[j]) not in self.lost]

        out: list[Candidate] = []
        for a, b in (("instances", "preferred"), ("preferred", "delay"), ("instances", "delay")):
            for first in steps(a, cand):
                out.extend(steps(b, first))
        for axis in self.space.AXES:
            out.extend(steps(axis, cand))
        seen: set[Candidate] = {cand}
        return [c for c in out if not (c in seen or seen.add(c))]  # type: ignore[func-returns-value]

    @staticmethod
    def _step_up(axis: str, cand: Candidate, cur: Candidate) -> bool:
        """Whether `cand` adds to `cur` what lets requests run side by side: more instances, or batching."""
        if axis == "instances":
            return cand.instance_count > cur.instance_count
        return axis == "batching" and cur.dynamic_batching is None

    def _crossing(self, cand: Candidate, cur: Candidate) -> bool:
        """Whether `cand` lost to `cur` only by its p99: faster beyond noise, but past the bound `cur` meets."""
        fc, fi = self.figures[cand], self.figures[cur]
        return (fc.score(self.objective)[0] == 1 and fi.score(self.objective)[0] == 2
                and compare(fc, fi, Objective()) > 0)

    def _caps(self, at: Candidate, below_first: bool = False) -> list[Candidate]:
        """`at` with each preferred size that caps the batches formed there (see `_pointless`), the size nearest
        them first (`below_first`: the sizes below their mean before the others); none when Triton did not say which
        batches formed (no statistics)."""
        results = self.figures[at].results
        formed = results[-1].batch if results else None
        if not formed:
            return []
        caps = [v for v in self.space.values("preferred", at) if v and not self._pointless("preferred", at, v)]
        caps.sort(key=lambda v: (below_first and max(v) >= formed, abs(math.log2(max(v) / formed)), max(v)))
        return [self.space.with_value("preferred", at, v) for v in caps]

    def _challenge(self, cands: list[Candidate], why: str, cur: Candidate) -> tuple[Candidate, bool]:
        """Each unmeasured candidate measured against `cur`, which one better beyond noise replaces. Returns the
        position and whether the budget ran out."""
        for cand in cands:
            if cand in self.figures:
                continue
            if not self.budget.allows(self._reserve()):
                return cur, True
            if compare(self._run(cand, why), self.figures[cur], self.objective) > 0:
                cur = cand
        return cur, False

    def cap_crossed(self, cur: Candidate) -> tuple[Candidate, bool]:
        """After the first pass's instance walk, for each step up (more instances, batching turned on) that was
        faster but crossed the p99 bound (`crossed`: its batches queue behind each other in the tail): that step
        with the preferred size nearest below its batches (a cap at or above their mean trims only the larger ones
        of a mix), else nearest above; none without Triton's batch statistics, or already measured. One better
        than `cur` beyond noise replaces it. Returns the position and whether the budget ran out."""
        crossed, self.crossed = self.crossed, []
        caps = [cap for step in crossed for cap in self._caps(step, below_first=True)[:1]]
        return self._challenge(caps, "capped where a step up crossed the bound", cur)

    def forked(self) -> list[Candidate]:
        """The preferred sizes at the instance count the first pass walked up from (the instance count goes
        first, and fewer instances form larger batches: a cap that pays there, where a large batch costs more per
        item, was never tried), those that cap the batches formed there, the size nearest them first. None when
        that instance count lost by far, or Triton did not say which batches formed (no statistics)."""
        fork = self.fork
        if fork is None or ("instances", fork.instance_count) in self.lost:
            return []
        return self._caps(fork)

    def back_to_fork(self, cur: Candidate) -> tuple[Candidate, bool]:
        """After the first pass: each preferred size left behind (`forked`) against `cur`, which the one better
        beyond noise replaces, so that the later passes walk on from there. Returns the position and whether the
        budget ran out."""
        return self._challenge(self.forked(), "preferred size left behind", cur)

    def explore(self) -> None:
        """Spend what the budget has left on the unmeasured neighbours of the best setting so far (a walk along one
        axis at a time stops where two axes must move together), the best's neighbours again whenever a new one
        takes the lead."""
        while self.budget.allows(self._reserve()):
            best = self.best() or self._closest()
            if best is None:
                return
            todo = [c for c in self.neighbours(best) if c not in self.figures]
            if not todo:
                return
            self._run(todo[0], "neighbour of the best")

    def confirm(self) -> None:
        """Measure the winner again (one window may have been lucky: a tail that stalls now and then shows in
        some windows only); repeat with the next winner if it no longer leads or meets the bound, as long as the
        budget lasts."""
        checked: set[Candidate] = set()
        while self.budget.allows(repeat=True):
            best = self.best()
            if best is None or best in checked:
                return
            fig = self.figures[best]
            if len(fig.results) > 1:
                return
            checked.add(best)
            self._run(best, "winner: measured again")

    def best(self) -> Candidate | None:
        return choose(self.figures, self.objective, required=False)

    def _closest(self) -> Candidate | None:
        """While nothing meets the p99 bound: the measured setting with the lowest p99."""
        measured = [(c, f) for c, f in self.figures.items() if f.results]
        return min(measured, key=lambda cf: cf[1].p99_ms)[0] if measured else None


def choose(figures: dict[Candidate, Figures], objective: Objective, *, required: bool = True) -> Candidate | None:
    """The measured candidate with the best throughput among those whose p99 meets the bound (ties: lower p99).
    Raises PerfError when none does and `required`."""
    ok = [(c, f) for c, f in figures.items() if f.results and objective.met(f.p99_ms)]
    if ok:
        return max(ok, key=lambda cf: (cf[1].throughput, -cf[1].p99_ms))[0]
    if not required:
        return None
    measured = [(c, f) for c, f in figures.items() if f.results]
    if not measured:
        raise PerfError("no candidate could be measured: " + "; ".join(
            f"{c.describe()}: {f.error}" for c, f in figures.items() if f.error)[:400])
    low_c, low_f = min(measured, key=lambda cf: cf[1].p99_ms)
    raise PerfError(f"no setting kept p99 within {objective.max_p99_ms:g} ms (lowest: {low_f.p99_ms:.1f} ms with "
                    f"{low_c.describe()}: --max-p99 {math.ceil(low_f.p99_ms)}ms is achievable at this concurrency)",
                    hint="raise --max-p99 or lower --concurrency")


def grid(config: dict, concurrency: int, instances: Sequence[int], delays_us: Sequence[int],
         preferred: Sequence[list[int] | None], max_batch_sizes: Sequence[int] = ()) -> Space:
    """The space of explicit option lists (None in `preferred`: the automatic size for the concurrency)."""
    prefs = [tuple(auto_preferred(config, concurrency) if p is None else p) for p in preferred]
    return Space.for_config(config, instances=instances, delays_us=delays_us, preferred=prefs,
                            max_batch_sizes=max_batch_sizes)


def apply(config: dict, cand: Candidate) -> dict:
    """The served config with the candidate's setting: every instance group's count, dynamic_batching
    (its other fields, e.g. priorities and queue policy, kept) set or removed, max_batch_size if given."""
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
    if cand.max_batch_size is not None:
        out["max_batch_size"] = cand.max_batch_size
    return out
