"""bench/llm_heldout.py's scoring (issue 27): the committed held-out goodput figures are what the goodput search
and the committed truth give, and a recorded window counts goodput at any targets as the load generator does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubectl_triton.perf import streaming
from tests import benchscripts

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "llm-heldout"
# the fourth set's models swept (with count windows, into count40/) before the screen's most sequences were added
FOURTH = {"llm-step4", "llm-attention4", "llm-kv4", "llm-mixed4"}


@pytest.fixture(scope="module")
def heldout():
    return benchscripts.load("llm_heldout")


def test_every_drawn_model_has_its_whole_space_committed(heldout):
    specs = heldout.specs()
    assert len(specs) == 28 and {s.part for s in specs} == {"first", "second", "third", "fourth"}
    assert {p.stem for p in (RESULTS / "count40").glob("llm-*4.json")} == FOURTH
    for s in specs:
        if s.part == "fourth" and s.name not in FOURTH:
            continue  # not swept: a model's sweep with count windows takes 10-20 minutes here
        doc = json.loads((RESULTS / ("count40" if s.part == "fourth" else "") / f"{s.name}.json").read_text())
        assert len(doc["settings"]) == 40 and all(len(r["windows"]) == heldout.WINDOWS for r in doc["settings"])
        assert doc["costs"] == s.costs and tuple(doc["served"]) in {tuple(r["values"]) for r in doc["settings"]}


def test_a_window_counts_goodput_at_the_targets_it_is_scored_at(heldout):
    doc = json.loads((RESULTS / "llm-decode1.json").read_text())
    truth = heldout.Truth(doc)
    window = doc["settings"][0]["windows"][0]
    loose = truth.result(window, streaming.Slo())  # no targets: every request is good
    assert loose.goodput == pytest.approx(len(window["requests"]) / doc["duration_s"]) and loose.good_fraction == 1
    ttft = sorted(r[1] for r in window["requests"])
    cut = ttft[len(ttft) // 2]
    half = truth.result(window, streaming.Slo(cut))  # about the faster half of the requests
    expected = sum(t <= cut for t in ttft) / len(ttft)
    assert half.good_fraction == pytest.approx(expected) and expected < 1
    # at the median targets: the best scores 1; a setting without a good request scores 0 and is no tie
    median = heldout.targets(doc)["median"]
    best, top = truth.best(median)
    assert top > 0 and truth.score(best, median) == 1.0
    worst = min(truth.windows, key=lambda v: truth.goodput(v, median))
    assert truth.goodput(worst, median) == truth.score(worst, median) == 0 and not truth.tie(worst, median)
    assert truth.score(None, median) == 0.0 and not truth.tie(None, median)  # none chosen where one exists


def test_the_committed_replay_is_what_the_goodput_search_gives(heldout):
    """replay-seeds30.json's `chosen` (the recorded window order) for every run: a change to the goodput search that
    moves a choice must come with the figures run again."""
    committed = {(r["model"], r["targets"]): r for r in json.loads((RESULTS / "replay-seeds30.json").read_text())}
    rows = heldout.run_replay(RESULTS)
    assert len(rows) == len(committed) == 42
    moved = [(r["model"], r["targets"], r["chosen"], committed[r["model"], r["targets"]]["chosen"])
             for r in rows if r["chosen"] != committed[r["model"], r["targets"]]["chosen"]]
    assert not moved, moved
    assert all(r["measured"] <= 6 for r in rows)  # 15% of the 40 settings


def test_the_committed_exhaustive_replay_is_what_tune_exhaustive_gives(heldout):
    """replay-exhaustive-seeds30.json (`tune --exhaustive` replayed: the ceiling the search is compared with)
    measured all 40 settings in every run, then its winner again, and chose what the sweep gives."""
    committed = {(r["model"], r["targets"]): r
                 for r in json.loads((RESULTS / "replay-exhaustive-seeds30.json").read_text())}
    rows = heldout.run_replay(RESULTS, exhaustive=True)
    assert len(rows) == len(committed) == 42
    assert all(r["measured"] == r["space"] == 40 and r["trials"] > 40 for r in rows if r["exists"])
    moved = [(r["model"], r["targets"], r["chosen"], committed[r["model"], r["targets"]]["chosen"])
             for r in rows if r["chosen"] != committed[r["model"], r["targets"]]["chosen"]]
    assert not moved, moved


def test_the_count_window_truth_and_its_committed_replay(heldout):
    """count40/ (swept with `--min-requests 40`): every window holds 40 requests or ran its ten steps of 2 s, its
    goodput is per second of its own length, and the committed replay (at the 2 s truth's targets) is what the
    goodput search gives."""
    docs = heldout.load_truth(RESULTS / "count40")
    assert {d["model"] for d in docs} == {"llm-step3", "llm-attention3", "llm-kv3", "llm-mixed3"} | FOURTH
    for doc in docs:
        assert doc["min_requests"] == 40 and len(doc["settings"]) == 40
        for row in doc["settings"]:
            for w in (w for w in row["windows"] if "error" not in w):
                steps = w["seconds"] / doc["duration_s"]
                assert steps == pytest.approx(round(steps), abs=1e-3) and 1 <= round(steps) <= 10
                assert len(w["requests"]) >= 40 or round(steps) == 10
        window = doc["settings"][0]["windows"][0]
        assert heldout.Truth(doc).result(window, streaming.Slo()).goodput == pytest.approx(
            len(window["requests"]) / window["seconds"])
    committed = {(r["model"], r["targets"]): r
                 for r in json.loads((RESULTS / "count40" / "replay-seeds30.json").read_text())}
    rows = heldout.run_replay(RESULTS / "count40", targets_from=RESULTS, part="third")
    assert len(rows) == len(committed) == 8
    assert [r["chosen"] for r in rows] == [committed[r["model"], r["targets"]]["chosen"] for r in rows]


def _goodput(truth, window: dict, slo: streaming.Slo) -> float:
    """A recorded window's goodput; a window that failed to load served nothing."""
    return 0.0 if "error" in window else truth.result(window, slo).goodput


@pytest.mark.parametrize("part, name", [("third", "cross-third.json"), ("fourth", "cross-fourth.json")])
def test_a_cross_choice_is_scored_on_the_window_it_did_not_see(heldout, part, name):
    """`cross`: --exhaustive chooses the best of the one window it saw of each setting, and it is scored on the
    other window; the committed figures are what the search and --exhaustive choose."""
    targets_from = RESULTS if part == "third" else None
    rows = heldout.run_cross(RESULTS / "count40", part, targets_from)
    committed = {(r["model"], r["targets"]): r for r in json.loads((RESULTS / "count40" / name).read_text())}
    assert len(rows) == len(committed) == 8
    for r in rows:
        c = committed[r["model"], r["targets"]]
        assert (r["chosen"], r["exhaustive_chosen"], r["ratio"]) == (c["chosen"], c["exhaustive_chosen"], c["ratio"])
    docs = {d["model"]: d for d in heldout.load_truth(RESULTS / "count40", part)}
    for r in rows:
        truth = heldout.Truth(docs[r["model"]])
        slo = streaming.Slo(r["max_ttft_ms"], r["max_itl_ms"])
        names = [k.name for k in truth.knobs]
        held = 0.0
        for a, pick in enumerate(r["exhaustive_chosen"]):
            seen = {v: _goodput(truth, ws[a], slo) for v, ws in truth.windows.items()}
            values = tuple(dict(x.split("=") for x in pick.split(", "))[n] for n in names) if pick else None
            assert (max(seen.values()) == 0) if values is None else (seen[values] == max(seen.values()))
            others = [b for b in range(heldout.WINDOWS) if b != a]
            if values is not None:
                held += sum(_goodput(truth, truth.windows[values][b], slo) for b in others) / len(others)
        assert r["exhaustive"] == pytest.approx(held / heldout.WINDOWS, abs=1e-3)
