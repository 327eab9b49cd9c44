"""bench/tune_heldout.py's scoring (issue 27): the committed held-out figures are what the search and the
committed truth give, and a score, a tie and a bound mean what docs/bench-tune.md says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubectl_triton.perf import search
from tests import benchscripts

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "tune-heldout"


@pytest.fixture(scope="module")
def heldout():
    return benchscripts.load("tune_heldout")


def test_every_drawn_model_has_its_truth_committed(heldout):
    names = {s.name for s in heldout.specs()}
    assert len(names) == 118 and {f"{n}.json" for n in names} <= {p.name for p in RESULTS.glob("*.json")}


def test_score_and_tie_of_the_truths_own_best_and_of_no_batching(heldout):
    truth = heldout.Truth(json.loads((RESULTS / "host6.json").read_text()))
    best, top = truth.best(None)
    assert best is not None and truth.score(best, None) == 1.0 and truth.tie(best, None)
    plain = search.Candidate(1, None)  # the served setting: no batching, one instance
    assert truth.score(plain, None) < 0.5 and not truth.tie(plain, None)
    tight = heldout.bounds(truth.doc)["tight"]
    over = max(truth.windows, key=truth.p99)  # breaks any bound a fifth of the space meets
    assert truth.score(over, tight) == 0.0 and not truth.tie(over, tight)
    # a preferred size equal to the max batch size is the setting without one (Triton's default)
    same = search.Candidate(1, search.batching(0, [truth.doc["max_batch_size"]]))
    assert truth.score(same, None) == truth.score(search.Candidate(1, search.batching(0)), None)


def test_the_committed_replay_is_what_the_search_gives(heldout):
    """replay-seeds30.json's `chosen` (the recorded window order) for every run: a change to the search that
    moves a choice must come with the figures run again."""
    committed = {(r["model"], r["objective"]): r for r in json.loads((RESULTS / "replay-seeds30.json").read_text())}
    rows = heldout.run_replay("all", RESULTS)
    assert len(rows) == len(committed) == 354
    moved = [(r["model"], r["objective"], r["chosen"], committed[r["model"], r["objective"]]["chosen"])
             for r in rows if r["chosen"] != committed[r["model"], r["objective"]]["chosen"]]
    assert not moved, moved


def test_the_committed_exhaustive_replay_is_what_tune_exhaustive_gives(heldout):
    """replay-exhaustive-seeds30.json (`tune --exhaustive` replayed: the ceiling docs/bench-tune.md compares the
    search with) measured the whole space in every run, and chose what the sweep and its confirmation give."""
    committed = {(r["model"], r["objective"]): r
                 for r in json.loads((RESULTS / "replay-exhaustive-seeds30.json").read_text())}
    rows = heldout.run_replay("all", RESULTS, exhaustive=True)
    assert len(rows) == len(committed) == 354
    assert all(r["measured"] == r["space"] and r["trials"] > r["space"] for r in rows)
    moved = [(r["model"], r["objective"], r["chosen"], committed[r["model"], r["objective"]]["chosen"])
             for r in rows if r["chosen"] != committed[r["model"], r["objective"]]["chosen"]]
    assert not moved, moved
