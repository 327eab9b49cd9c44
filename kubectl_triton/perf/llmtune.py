"""tune's goodput objective for LLMs: the knobs of an in-flight batching engine (data/llm_knobs.yaml, plus the
user's `--param`), each candidate loaded through Triton's model control (a config override, and a model.json
override for vLLM) and measured with streamed requests (perf.streaming): goodput against TTFT / TPOT targets.

The search: from the served setting, one step along each knob whose values are numbers (sequences per step,
instances, a memory share) — along the sequences, when that step is not ahead, the fewest sequences that admit every
client (goodput can dip before it peaks there: no client queues for its first token), and when neither is ahead the
most sequences — and those that came out ahead together (how many sequences pay depends on how many instances serve
them: one knob at a time misses the pair).
Then the throughput search's coordinate descent from the best so far (step along one knob while the step is better
by more than the noise; a step within noise but ahead is measured again; passes while one moved), then the
unmeasured neighbours of the best (one knob, then two knobs away) while the budget lasts, one measurement kept to
measure the winner again before it is chosen (and the next winner, while the one measured again no longer leads).
Ties on goodput go to the lower TTFT p99."""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kubectl_triton.datafiles import data_text
from kubectl_triton.errors import InputError
from kubectl_triton.perf import PerfError
from kubectl_triton.perf.inputs import Tensor
from kubectl_triton.perf.search import Budget
from kubectl_triton.perf.streaming import Slo, StreamResult, run_stream_level
from kubectl_triton.perf.tunerun import Fatal, Guard, guard

NOISE_FLOOR = 0.05  # streamed windows hold fewer requests than inference windows: 5% is a tie
RESERVE = 1  # measurements kept to measure the winner again
# knobs that bound the sequences an instance runs at once (vLLM's engine argument, bench/llm_models.py's engine):
# a client beyond them waits for a whole generation before its first token
SEQUENCES = frozenset({"max_num_seqs"})


@dataclass(frozen=True)
class Knob:
    name: str
    where: str  # parameter | model_json | instances
    values: tuple[str, ...]
    default: str | None = None  # what the engine runs with when the knob is not set


def _defaults() -> dict[str, list[Knob]]:
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(data_text("llm_knobs.yaml"))
    return {backend: [Knob(k["name"], k["where"], tuple(str(v) for v in k["values"]),
                           None if k.get("default") is None else str(k["default"])) for k in knobs]
            for backend, knobs in doc.items()}


def backend_of(config: dict) -> str:
    return str(config.get("backend") or config.get("platform") or "")


def knobs_for(config: dict, params: dict[str, list[str]], instances: list[int] | None) -> list[Knob]:
    """The knobs to search for a served model: its backend's defaults, `params` replacing or adding knobs (a
    new one is a config parameter, a model.json key for vllm; a replaced one keeps where it lives) and `instances`
    the instance counts."""
    backend = backend_of(config)
    if backend == "ensemble":
        raise InputError(f"model {config.get('name', '?')!r} is an ensemble: its engine's knobs live in one of its "
                         "steps", hint="tune the step that runs the engine (tensorrt_llm, or the vLLM model)")
    table = _defaults()
    knobs = list(table.get(backend, table["python"]))
    where = "model_json" if backend == "vllm" else "parameter"
    for name, values in params.items():
        old = next((k for k in knobs if k.name == name), None)
        new = Knob(name, old.where if old else where, tuple(values), old.default if old else None)
        knobs = [new if k.name == name else k for k in knobs] if old else [*knobs, new]
    if instances:
        knobs = [k for k in knobs if k.where != "instances"] + [
            Knob("instance_count", "instances", tuple(str(n) for n in instances), "1")]
    # the instance count last: an in-flight batching engine batches within one instance, so a second instance
    # mostly splits its batches (the walk starts with the engine's own knobs)
    return sorted(knobs, key=lambda k: k.where == "instances")


def _set_values(config: dict, knobs: list[Knob], model_json: dict | None) -> list[str | None]:
    """Each knob's value in the served config (None: not set, or a `${...}` template left in)."""
    params = {k: (v or {}).get("string_value") for k, v in (config.get("parameters") or {}).items()}
    groups = config.get("instance_group") or []
    out: list[str | None] = []
    for k in knobs:
        if k.where == "instances":
            v: object = int(groups[0].get("count") or 1) if groups else 1
        elif k.where == "model_json":
            v = (model_json or {}).get(k.name)
            v = json.dumps(v) if isinstance(v, bool) else v
        else:
            v = params.get(k.name)
        out.append(None if v is None or str(v).startswith("${") else str(v))
    return out


def served_values(config: dict, knobs: list[Knob], model_json: dict | None) -> tuple[str, ...]:
    """The served setting: a knob the config does not set runs with its default (none known: its first value,
    which the baseline then loads explicitly, see `unknown`)."""
    return tuple(v if v is not None else k.default if k.default is not None else k.values[0]
                 for k, v in zip(knobs, _set_values(config, knobs, model_json), strict=True))


def unknown(config: dict, knobs: list[Knob], model_json: dict | None) -> list[str]:
    """The knobs whose served value is not known: not set, and no default."""
    return [k.name for k, v in zip(knobs, _set_values(config, knobs, model_json), strict=True)
            if v is None and k.default is None]


def with_served(knobs: list[Knob], served: tuple[str, ...]) -> list[Knob]:
    """Knobs whose value lists hold the served value (added in numeric order where it is a number)."""
    out = []
    for k, v in zip(knobs, served, strict=True):
        if v in k.values:
            out.append(k)
            continue
        vals = [*k.values, v]
        try:
            vals.sort(key=float)
        except ValueError:
            vals = [v, *k.values]
        out.append(Knob(k.name, k.where, tuple(vals), k.default))
    return out


def _json_value(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def apply(config: dict, knobs: list[Knob], values: tuple[str, ...], model_json: dict | None,
          version: str = "1") -> tuple[dict, dict[str, bytes]]:
    """The served config with the setting, and the files to override (model.json knobs)."""
    out = copy.deepcopy(config)
    doc = dict(model_json or {})
    for k, v in zip(knobs, values, strict=True):
        if k.where == "instances":
            groups = out.get("instance_group") or [{}]
            for g in groups:
                g["count"] = int(v)
            out["instance_group"] = groups
        elif k.where == "model_json":
            doc[k.name] = _json_value(v)
        else:
            out.setdefault("parameters", {})[k.name] = {"string_value": v}
    files = {}
    if any(k.where == "model_json" for k in knobs):
        files[f"file:{version}/model.json"] = (json.dumps(doc, indent=2) + "\n").encode()
    return out, files


@dataclass
class Figures:
    """A setting's windows together: mean goodput, the worst TTFT p99, the noise of the mean."""

    results: list[StreamResult] = field(default_factory=list)
    error: str | None = None

    def _mean(self, attr: str) -> float:
        return sum(getattr(r, attr) for r in self.results) / len(self.results) if self.results else 0.0

    @property
    def goodput(self) -> float:
        return self._mean("goodput")

    @property
    def ttft_p99_ms(self) -> float:
        return max((r.ttft_p99_ms for r in self.results), default=math.inf)

    @property
    def noise(self) -> float:
        own = [r.noise for r in self.results if r.noise is not None]
        se = math.sqrt(sum(x * x for x in own)) / len(own) if own else NOISE_FLOOR
        if len(self.results) > 1 and self.goodput > 0:
            sd = math.sqrt(sum((r.goodput - self.goodput) ** 2 for r in self.results) / (len(self.results) - 1))
            se = max(se, sd / self.goodput / math.sqrt(len(self.results)))
        return max(se, NOISE_FLOOR / 2)

    def summary(self) -> dict:
        rs = self.results
        worst = {k: round(max(getattr(r, k) for r in rs), 3) for k in ("ttft_p99_ms", "itl_p99_ms", "tpot_p99_ms")}
        means = {k: round(self._mean(k), 3) for k in ("goodput", "requests_per_s", "output_tokens_per_s",
                                                      "ttft_p50_ms", "tpot_p50_ms", "good_fraction")}
        return {**means, **worst, "measurements": len(rs)}


def compare(a: Figures, b: Figures) -> int:
    """+1 when `a` is better than `b` beyond noise, -1 when worse, 0 within noise (or neither measured)."""
    if not a.results or not b.results:
        return (1 if a.results else -1) if (a.results or b.results) else 0
    ga, gb = a.goodput, b.goodput
    band = max(NOISE_FLOOR, 2 * math.sqrt(a.noise ** 2 + b.noise ** 2)) * max(ga, gb)
    if abs(ga - gb) > band:
        return 1 if ga > gb else -1
    if ga == gb == 0:  # nothing good on either side: the lower TTFT is closer to the target
        ta, tb = a.ttft_p99_ms, b.ttft_p99_ms
        if abs(ta - tb) > 0.1 * max(ta, tb):
            return 1 if ta < tb else -1
    return 0


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _ahead(a: Figures, b: Figures) -> bool:
    return (a.goodput, -a.ttft_p99_ms) > (b.goodput, -b.ttft_p99_ms)


@dataclass
class Trial:
    values: tuple[str, ...]
    result: StreamResult | None = None
    error: str | None = None
    baseline: bool = False
    why: str = ""


class GoodputSearch:
    """Coordinate descent over the knobs (see the module's docstring). `measure` raises PerfError for a setting
    that cannot be loaded or measured; it is recorded and never chosen."""

    def __init__(self, knobs: list[Knob], measure: Callable[[tuple[str, ...]], StreamResult], budget: Budget,
                 on_trial: Callable[[Trial], None] | None = None, concurrency: int | None = None) -> None:
        self.knobs, self.measure, self.budget, self.on_trial = knobs, measure, budget, on_trial
        self.concurrency = concurrency
        self.trials: list[Trial] = []
        self.figures: dict[tuple[str, ...], Figures] = {}

    def space(self) -> list[tuple[str, ...]]:
        return list(itertools.product(*(k.values for k in self.knobs)))

    def _run(self, values: tuple[str, ...], why: str, baseline: bool = False) -> Figures:
        trial = Trial(values, baseline=baseline, why=why)
        fig = self.figures.setdefault(values, Figures())
        self.budget.spend(repeat=bool(fig.results))
        try:
            trial.result = self.measure(values)
            fig.results.append(trial.result)
        except PerfError as err:
            trial.error = fig.error = err.message
        self.trials.append(trial)
        if self.on_trial:
            self.on_trial(trial)
        return fig

    def _reserve(self) -> int:
        """Measurements kept to measure the winner again: none while a single setting was measured (a budget of
        two measures the served setting and a step, not the served setting twice)."""
        return RESERVE if sum(bool(f.results) for f in self.figures.values()) > 1 else 0

    def better(self, challenger: tuple[str, ...], incumbent: tuple[str, ...]) -> bool | None:
        if challenger not in self.figures:
            if not self.budget.allows(self._reserve()):
                return None
            self._run(challenger, "step")
        fc, fi = self.figures[challenger], self.figures[incumbent]
        verdict = compare(fc, fi)
        if verdict == 0 and fc.results and _ahead(fc, fi) and len(fc.results) <= len(fi.results):
            if not self.budget.allows(self._reserve(), repeat=True):
                return False
            self._run(challenger, "within noise: measured again")
            verdict = compare(fc, fi)
            if verdict == 0:
                return _ahead(fc, fi)
        return verdict > 0

    def line(self, axis: int, cur: tuple[str, ...]) -> tuple[tuple[str, ...], bool]:
        vals = self.knobs[axis].values
        i = vals.index(cur[axis])
        for direction in (1, -1):
            moved, j = False, i + direction
            while 0 <= j < len(vals):
                cand = cur[:axis] + (vals[j],) + cur[axis + 1:]
                verdict = self.better(cand, cur)
                if verdict is None:
                    return cur, True
                if not verdict:
                    break
                cur, moved, j = cand, True, j + direction
            if moved:
                break
        return cur, False

    def run(self, start: tuple[str, ...]) -> list[Trial]:
        """Measure `start` (the served setting), screen the numeric knobs from it, descend from the best so far,
        spend what the budget has left around the best, and measure the winner again."""
        self._run(start, "served setting", baseline=True)
        if not self.figures[start].results:
            return self.trials
        if not self.screen(start) and not self.descend(self.best() or start):
            self.explore()
        self.confirm()
        return self.trials

    def screen(self, start: tuple[str, ...]) -> bool:
        """One step along each knob whose values are numbers (up, or down from the top); along the sequences knob,
        when that step is not ahead, the fewest sequences that admit every client (`_admitting`: more sequences a
        step cost more than a shorter queue gains until no client queues for its first token), and when that is not
        ahead either, the most sequences (a large fixed cost per step pays only in large batches). Then the values
        that came out ahead of `start` together. Returns whether the budget ran out."""
        ahead: dict[int, str] = {}
        for axis, knob in enumerate(self.knobs):
            if not all(_number(v) for v in knob.values) or len(knob.values) < 2:
                continue
            i = knob.values.index(start[axis])
            step = start[:axis] + (knob.values[i + 1 if i + 1 < len(knob.values) else i - 1],) + start[axis + 1:]
            admit = self._admitting(axis, start)
            far = start[:axis] + (max(knob.values, key=float),) + start[axis + 1:] if knob.name in SEQUENCES else None
            for cand, why in ((step, "screen: one step"), (admit, "screen: every client admitted"),
                              (far, "screen: the most sequences")):
                if cand is None or cand == start:
                    continue
                if cand not in self.figures:
                    if not self.budget.allows(self._reserve()):
                        return True
                    self._run(cand, why)
                if self.figures[cand].results and _ahead(self.figures[cand], self.figures[start]):
                    ahead[axis] = cand[axis]
                    break
        both = tuple(ahead.get(a, v) for a, v in enumerate(start))
        if len(ahead) > 1 and both not in self.figures:
            if not self.budget.allows(self._reserve()):
                return True
            self._run(both, "screen: the steps ahead together")
        return False

    def _admitting(self, axis: int, start: tuple[str, ...]) -> tuple[str, ...] | None:
        """For a knob that bounds the sequences an instance runs at once (SEQUENCES): `start` with the fewest
        sequences that admit every client of the load (with `start`'s instances); None for other knobs, without a
        known concurrency, or when no value does."""
        if self.knobs[axis].name not in SEQUENCES or not self.concurrency:
            return None
        inst = next((int(v) for k, v in zip(self.knobs, start, strict=True) if k.where == "instances"), 1)
        fit = [v for v in self.knobs[axis].values if float(v) * inst >= self.concurrency]
        return None if not fit else start[:axis] + (fit[0],) + start[axis + 1:]

    def descend(self, cur: tuple[str, ...]) -> bool:
        """Passes over the knobs from `cur` until one moves nothing. Returns whether the budget ran out."""
        while True:
            before = cur
            for axis in range(len(self.knobs)):
                cur, spent = self.line(axis, cur)
                if spent:
                    return True
            if cur == before:
                return False

    def neighbours(self, values: tuple[str, ...]) -> list[tuple[str, ...]]:
        """One step along each knob, then along two knobs at once."""
        def steps(axis: int, v: tuple[str, ...]) -> list[tuple[str, ...]]:
            vals = self.knobs[axis].values
            i = vals.index(v[axis])
            return [v[:axis] + (vals[j],) + v[axis + 1:] for j in (i - 1, i + 1) if 0 <= j < len(vals)]

        out = [n for a in range(len(self.knobs)) for n in steps(a, values)]
        out += [m for a, b in itertools.combinations(range(len(self.knobs)), 2) for n in steps(a, values)
                for m in steps(b, n)]
        return list(dict.fromkeys(x for x in out if x != values))

    def explore(self) -> None:
        """What the budget has left goes to the unmeasured neighbours of the best setting so far."""
        while self.budget.allows(self._reserve()):
            best = self.best()
            todo = [n for n in self.neighbours(best) if n not in self.figures] if best else []
            if not todo:
                return
            self._run(todo[0], "neighbour of the best")

    def exhaustive(self, start: tuple[str, ...]) -> list[Trial]:
        """Measure `start` (the served setting), every other setting once as the budget allows (one measurement
        kept), and the winner again (`confirm`): one window of many settings is lucky somewhere."""
        self._run(start, "served setting", baseline=True)
        for values in self.space():
            if values not in self.figures and self.budget.allows(self._reserve()):
                self._run(values, "exhaustive")
        self.confirm()
        return self.trials

    def confirm(self) -> None:
        """Measure the winner again (a streamed window holds few requests, and its goodput turns on how many of
        them met the targets); repeat with the next winner while the one measured again no longer leads, as long as
        the budget lasts. A winner without one good request is not measured again (nothing met the targets), nor
        the only setting measured."""
        checked: set[tuple[str, ...]] = set()
        if sum(bool(f.results) for f in self.figures.values()) < 2:
            return  # nothing to choose between
        while self.budget.allows(repeat=True):
            best = self.best()
            if best is None or best in checked or self.figures[best].goodput <= 0:
                return
            if len(self.figures[best].results) > 1:
                return
            checked.add(best)
            self._run(best, "winner: measured again")

    def best(self) -> tuple[str, ...] | None:
        measured = [(v, f) for v, f in self.figures.items() if f.results]
        if not measured:
            return None
        return max(measured, key=lambda vf: (vf[1].goodput, -vf[1].ttft_p99_ms))[0]


def choose(search: GoodputSearch, slo: Slo) -> tuple[str, ...]:
    """The best setting; PerfError when none was measured or none served a single good request."""
    best = search.best()
    if best is None:
        raise PerfError("no setting could be measured: " + "; ".join(
            f"{describe(search.knobs, v)}: {f.error}" for v, f in search.figures.items() if f.error)[:400])
    fig = search.figures[best]
    if fig.goodput <= 0:
        targets = ", ".join(x for x in (f"TTFT <= {slo.max_ttft_ms:g} ms" if slo.max_ttft_ms else "",
                                        f"TPOT <= {slo.max_itl_ms:g} ms" if slo.max_itl_ms else "") if x)
        low = min((f for f in search.figures.values() if f.results), key=lambda f: f.ttft_p99_ms)
        s = low.summary()
        raise PerfError(f"no setting served a request within {targets} (closest: TTFT p99 {s['ttft_p99_ms']:.0f} ms, "
                        f"TPOT p99 {s['tpot_p99_ms']:.1f} ms)",
                        hint="raise --max-ttft / --max-itl, or lower --concurrency")
    return best


def describe(knobs: list[Knob], values: tuple[str, ...]) -> str:
    return ", ".join(f"{k.name}={v}" for k, v in zip(knobs, values, strict=True))


class LlmRun:
    """Loads settings into a target and measures them; `restore()` loads the original configuration (and files)
    again. Use inside `guard()`: loads are shielded from Ctrl-C, measurements are not."""

    def __init__(self, target, requests: list[list[Tensor]], concurrency: int, duration_s: float, warmup_s: float,
                 slo: Slo, original: dict, knobs: list[Knob], model_json: dict | None, g: Guard,
                 min_requests: int = 0) -> None:
        self.target, self.requests, self.concurrency, self.min_requests = target, requests, concurrency, min_requests
        self.duration_s, self.warmup_s, self.slo, self.original = duration_s, warmup_s, slo, original
        self.knobs, self.model_json, self.guard = knobs, model_json, g
        # a served value not known is loaded explicitly, so the baseline is what its name says
        self.loaded: tuple[str, ...] | None = None if unknown(original, knobs, model_json) else \
            served_values(original, knobs, model_json)
        self.changed = False

    def measure(self, values: tuple[str, ...]) -> StreamResult:
        self.load(values)
        with self.guard.interruptible():
            return run_stream_level(self.target, self.requests, self.concurrency, self.duration_s, self.warmup_s,
                                    self.slo, self.min_requests)

    def load(self, values: tuple[str, ...]) -> None:
        """Load the setting `values` unless it is the one loaded."""
        if values != self.loaded:
            changed, self.loaded, self.changed = self.changed, None, True
            config, files = apply(self.original, self.knobs, values, self.model_json)
            try:
                self.target.load(config, files)
            except PerfError as err:
                if "not allowed" in err.message:  # model control is off: nothing was changed
                    self.changed = changed
                    raise Fatal(PerfError(f"{err.message} (Triton's model control is not explicit)",
                                          hint="start tritonserver with --model-control-mode=explicit")) from None
                raise
            self.loaded = values

    def restore(self) -> None:
        if not self.changed:
            return
        try:
            self.target.load(self.original)  # no file override: the model folder's own files again
        except PerfError as err:
            raise PerfError(f"could not restore the original configuration of {self.target.model}: {err.message}",
                            hint=f"reload it: curl -X POST .../v2/repository/models/{self.target.model}/load") from None
        self.changed = False


def tune_goodput(target, requests: list[list[Tensor]], concurrency: int, duration_s: float, knobs: list[Knob],
                 slo: Slo, budget: Budget, *, warmup_s: float, original: dict, model_json: dict | None,
                 exhaustive: bool = False, on_trial: Callable[[Trial], None] | None = None,
                 min_requests: int = 0) -> GoodputSearch:
    """Search (or measure every setting of) the knobs on a served model from its served setting; the original
    configuration is loaded again at the end, also after a failure or Ctrl-C."""
    with guard() as g:
        run = LlmRun(target, requests, concurrency, duration_s, warmup_s, slo, original, knobs, model_json, g,
                     min_requests)
        search = GoodputSearch(knobs, run.measure, budget, on_trial, concurrency)
        start = served_values(original, knobs, model_json)
        try:
            if exhaustive:
                search.exhaustive(start)
            else:
                search.run(start)
        except Fatal as err:
            raise err.args[0] from None
        finally:
            run.restore()
    return search

