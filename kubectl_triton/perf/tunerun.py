"""Measuring `search`'s candidates on a served model: `TuneRun` loads each into a target and always loads the
original configuration again (success, failure, Ctrl-C: see `guard`); `tune` runs a search (or an exhaustive
sweep) that way."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

from kubectl_triton.perf import PerfError
from kubectl_triton.perf.inputs import Tensor
from kubectl_triton.perf.loadgen import LevelResult, merge, run_level
from kubectl_triton.perf.search import Budget, Candidate, Objective, Search, Space, Trial, apply, current
from kubectl_triton.perf.target import Target

MAX_WINDOWS = 3  # an unstable window is followed by at most two more (see TuneRun)


class Guard:
    """Ctrl-C handling for a run that changes what a server serves. While `shielded` (the default inside
    `guard()`), SIGINT is held back; inside `interruptible()` it raises KeyboardInterrupt at once. A held-back
    SIGINT is raised when the next interruptible block begins, or when the guard ends. So a reload and the
    final restore always complete, and the process still ends as interrupted."""

    def __init__(self) -> None:
        self.pending = False
        self.open = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.open:
            raise KeyboardInterrupt
        self.pending = True

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt
        self.open = True
        try:
            yield
        finally:
            self.open = False


@contextlib.contextmanager
def guard() -> Iterator[Guard]:
    """Install a `Guard` as the SIGINT handler (main thread only; elsewhere signals cannot arrive)."""
    g = Guard()
    if threading.current_thread() is not threading.main_thread():
        g.open = True
        yield g
        return
    old = signal.signal(signal.SIGINT, g._handler)
    try:
        yield g
    finally:
        signal.signal(signal.SIGINT, old)
    if g.pending:
        raise KeyboardInterrupt


class TuneRun:
    """Loads candidates into `target` and measures them at one concurrency; `restore()` loads the original
    configuration again. Use inside `guard()`: loads are shielded from Ctrl-C, measurements are not.
    A window whose throughput is not stable (a fifth of it more than `stability` percent off their mean:
    perf_analyzer's criterion, applied to a window's slices) is followed by another, up to MAX_WINDOWS; the
    measurement is then their merge (mean throughput, worst p99)."""

    def __init__(self, target: Target, requests: list[list[Tensor]], concurrency: int, duration_s: float,
                 warmup_s: float, original: dict, guard: Guard, stability: float = 0.0,
                 baseline: Candidate | None = None) -> None:
        self.target, self.requests, self.concurrency = target, requests, concurrency
        self.duration_s, self.warmup_s, self.original, self.guard = duration_s, warmup_s, original, guard
        self.stability = stability
        self.baseline = baseline if baseline is not None else current(original)  # what the original serves
        self.loaded: Candidate | None = self.baseline
        self.changed = False

    def measure(self, cand: Candidate) -> LevelResult:
        if cand != self.loaded:
            changed, self.loaded = self.changed, None
            self.changed = True  # before the load: an interrupted load may have changed it
            try:
                self.target.load(apply(self.original, cand))
            except PerfError as err:
                if "not allowed" in err.message:  # model control is off: nothing was changed
                    self.changed, self.loaded = changed, self.baseline if not changed else None
                    raise PerfError(f"{err.message} (Triton's model control is not explicit)",
                                    hint="start tritonserver with --model-control-mode=explicit") from None
                raise
            self.loaded = cand
        with self.guard.interruptible():
            windows = [run_level(self.target, self.requests, self.concurrency, self.duration_s, self.warmup_s)]
            while len(windows) < MAX_WINDOWS and not windows[-1].stable(self.stability):
                windows.append(run_level(self.target, self.requests, self.concurrency, self.duration_s, 0.0))
        return windows[0] if len(windows) == 1 else merge(windows)

    def restore(self) -> None:
        """Load the original configuration again (if anything was changed)."""
        if not self.changed:
            return
        try:
            self.target.load(self.original)
        except PerfError as err:
            raise PerfError(f"could not restore the original configuration of {self.target.model}: {err.message}",
                            hint=f"reload it: curl -X POST {self.target.url}/v2/repository/models/"
                                 f"{self.target.model}/load") from None
        self.changed, self.loaded = False, self.baseline


class Fatal(Exception):
    """Wraps a PerfError that must end the search (model control refused), not just fail one candidate."""


def tune(target: Target, requests: list[list[Tensor]], concurrency: int, duration_s: float, space: Space,
         objective: Objective, budget: Budget, *, warmup_s: float = 0.5, original: dict | None = None,
         exhaustive: bool = False, on_trial: Callable[[Trial], None] | None = None,
         stability: float = 0.0) -> Search:
    """Search (or, `exhaustive`, measure every setting of, and the winner again) `space` on a served model, starting
    from its served setting, and load its original configuration again at the end, also after a failure or Ctrl-C
    (a Ctrl-C during a reload or the restore takes effect once it is done)."""
    with guard() as g:
        original = original if original is not None else target.config()
        run = TuneRun(target, requests, concurrency, duration_s, warmup_s, original, g, stability,
                      baseline=space.canonical(current(original)))  # as Triton serves it: no reload to the same

        def measure(cand: Candidate) -> LevelResult:
            try:
                return run.measure(cand)
            except PerfError as err:
                if "model control is not explicit" in err.message:
                    raise Fatal(err) from None
                raise

        search = Search(space, objective, measure, budget, on_trial)
        try:
            if exhaustive:
                search.sweep(run.baseline)
            else:
                search.run(run.baseline)
        except Fatal as err:
            raise err.args[0] from None
        finally:
            run.restore()
    return search
