"""`kubectl triton tune --objective goodput`: streamed requests over gRPC against a real tritonserver serving a
decoupled in-flight batching LLM (bench/llm_models.py, sleep costs of a decoder's prefill and decode steps): TTFT,
ITL, TPOT and goodput measured by the plugin's own load generator; the knob search finds the max_num_seqs that
meets the targets, records a setting the server refuses as a failed trial, writes the winner and its evidence
into the repository's config.pbtxt, and restores the served configuration. The request builder is checked on
real LLM model configurations (TensorRT-LLM's in-flight batching repository, vLLM's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format

from kubectl_triton.errors import InputError
from kubectl_triton.formats import pbtxt
from kubectl_triton.perf import PerfError, llmtune, search, streaming
from kubectl_triton.perf.search import Budget

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from llm_models import write_model  # noqa: E402

from kubectl_triton.adapters.tritonserver import TritonServer  # noqa: E402

IFB = "conformance/real-world/tensorrtllm_backend-inflight_batcher_llm"
# decoding a sequence costs 0.8 ms a step: at 16 clients, 4 sequences at a time queue the rest for their first
# token (TTFT ~900 ms), 8 meet 750 ms / 17.5 ms (TTFT p99 ~660 ms, TPOT ~15 ms), 16 decode too slowly (TPOT ~20 ms);
# on a slower machine: 1200, 660 / 20 and 25 ms
COSTS = {"decode_ms": 0.8}
TARGETS = ("--max-ttft", "750ms", "--max-itl", "17.5ms")


def served_form(path: Path) -> dict:
    """A config.pbtxt in the JSON form Triton's gRPC ModelConfig answers with."""
    return json_format.MessageToDict(pbtxt.parse(path.read_text(), str(path)), preserving_proto_field_name=True)


def decode(tensor) -> list:
    import numpy as np

    if tensor.datatype == "BYTES":
        out, raw = [], tensor.data
        while raw:
            n = int.from_bytes(raw[:4], "little")
            out.append(raw[4:4 + n].decode())
            raw = raw[4 + n:]
        return out
    dtype = {"INT32": np.int32, "BOOL": np.bool_}[tensor.datatype]
    return np.frombuffer(tensor.data, dtype=dtype).tolist()


# -- requests for real LLM interfaces ---------------------------------------------------------------------------

def test_requests_for_the_tensorrtllm_ensemble_and_model(shared_dir):
    ens = served_form(shared_dir / IFB / "ensemble" / "config.pbtxt")
    reqs = streaming.llm_requests(ens, prompt_tokens=12, output_tokens=7)
    t = {x.name: x for x in reqs[0]}
    assert set(t) == {"text_input", "max_tokens", "stream"}  # what the ensemble streams with
    assert t["text_input"].shape == (1, 1) and len(decode(t["text_input"])[0].split()) == 12
    assert decode(t["max_tokens"]) == [7] and decode(t["stream"]) == [True]
    assert len({decode(r[0])[0] for r in reqs}) == len(reqs)  # different prompts

    model = served_form(shared_dir / IFB / "tensorrt_llm" / "config.pbtxt")
    t = {x.name: x for x in streaming.llm_requests(model, 12, 7)[0]}
    assert {"input_ids", "input_lengths", "request_output_len", "streaming"} <= set(t)
    assert t["input_ids"].shape == (1, 12) and decode(t["input_lengths"]) == [12]
    assert decode(t["request_output_len"]) == [7]
    streaming.require_decoupled(model)  # decoupled: True in the real file
    with pytest.raises(InputError, match="ensemble"):
        llmtune.knobs_for(ens, {}, None)
    knobs = llmtune.knobs_for(model, {}, None)
    assert [k.name for k in knobs] == ["kv_cache_free_gpu_mem_fraction", "batch_scheduler_policy",
                                       "enable_chunked_context"]
    served = llmtune.served_values(model, knobs, None)  # the deployment guide's values; chunked context left ${...}
    assert served == ("0.85", "max_utilization", "false")
    assert llmtune.with_served(knobs, served)[0].values == ("0.5", "0.7", "0.85", "0.9")


def test_requests_for_vllm_and_refusals(shared_dir):
    # the inputs Triton's vLLM backend fills in (auto_complete_config of vllm_backend's src/model.py) for the
    # sample model, whose config.pbtxt names only the backend
    cfg = served_form(shared_dir / "conformance/realworld-configs/triton-inference-server__vllm_backend__samples__"
                                   "model_repository/vllm_model/config.pbtxt")
    assert cfg["backend"] == "vllm" and "input" not in cfg
    cfg.update(input=[{"name": "text_input", "data_type": "TYPE_STRING", "dims": ["1"]},
                      {"name": "stream", "data_type": "TYPE_BOOL", "dims": ["1"], "optional": True},
                      {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": ["1"], "optional": True},
                      {"name": "exclude_input_in_output", "data_type": "TYPE_BOOL", "dims": ["1"],
                       "optional": True}],
               model_transaction_policy={"decoupled": True})
    t = {x.name: x for x in streaming.llm_requests(cfg, 5, 9)[0]}
    assert json.loads(decode(t["sampling_parameters"])[0]) == {"max_tokens": 9, "min_tokens": 9, "ignore_eos": True}
    assert t["text_input"].shape == (1,) and decode(t["exclude_input_in_output"]) == [True]
    knobs = llmtune.knobs_for(cfg, {"max_num_seqs": ["16", "32"]}, None)
    assert [(k.name, k.where, k.values[:2]) for k in knobs][0] == ("max_num_seqs", "model_json", ("16", "32"))
    python = {"backend": "python", "name": "m"}
    knobs = llmtune.knobs_for(python, {"instance_count": ["1", "2"], "temperature": ["0", "1"]}, None)
    # a --param naming a knob the backend has keeps it where it lives: still instance groups, not a parameter
    assert {(k.name, k.where, k.values) for k in knobs} == {("instance_count", "instances", ("1", "2")),
                                                           ("temperature", "parameter", ("0", "1"))}
    knobs = llmtune.knobs_for(cfg, {"max_num_seqs": ["16", "32"]}, None)
    config, files = llmtune.apply(cfg, knobs, ("32", "0.8", "true"), {"model": "facebook/opt-125m"})
    assert json.loads(files["file:1/model.json"]) == {"model": "facebook/opt-125m", "max_num_seqs": 32,
                                                      "gpu_memory_utilization": 0.8, "enable_chunked_prefill": True}

    resnet = {"name": "resnet", "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": ["3"]}]}
    with pytest.raises(InputError, match="none of the LLM interfaces"):
        streaming.llm_requests(resnet, 4, 4)
    with pytest.raises(InputError, match="not decoupled"):
        streaming.require_decoupled(resnet)


# -- goodput and the search, on synthetic figures ---------------------------------------------------------------

@pytest.mark.parametrize("ttft, tpot, slo, good", [
    (100.0, 10.0, streaming.Slo(200, 20), True),
    (300.0, 10.0, streaming.Slo(200, 20), False),
    (100.0, 30.0, streaming.Slo(200, 20), False),
    (300.0, 30.0, streaming.Slo(None, 40), True),
    (100.0, None, streaming.Slo(200, 20), True),  # one token: no gaps, TPOT does not apply
])
def test_a_good_request(ttft, tpot, slo, good):
    assert slo.good(ttft, tpot) is good


def test_summary_counts_goodput_tokens_and_gaps():
    done = [streaming.Completed(0.5, 80.0, (10.0, 12.0, 14.0)),  # good: TTFT 80, TPOT 12
            streaming.Completed(1.0, 250.0, (10.0, 10.0)),  # TTFT over
            streaming.Completed(1.5, 90.0, (30.0, 40.0))]  # TPOT 35 over
    r = streaming.summarize(8, done, 2.0, streaming.Slo(200, 20))
    assert r.requests == 3 and r.requests_per_s == 1.5 and r.goodput == 0.5
    assert r.output_tokens_per_s == (4 + 3 + 3) / 2 and round(r.good_fraction, 3) == 0.333
    assert r.itl_p50_ms == 12.0 and r.ttft_p50_ms == 90.0


def _synthetic(peak: dict[str, float]):
    def measure(values: tuple[str, ...]) -> streaming.StreamResult:
        if values[0] == "oom":
            raise PerfError("load llm: out of memory")
        g = peak.get(values[0], 0.0) * (1.2 if values[1] == "true" else 1.0)
        return streaming.StreamResult(16, 40, 4.0, 400.0, 100.0, 500.0 if g == 0 else 150.0, 10.0, 20.0, 10.0, 20.0,
                                      g, g / 4.0, 0.02)
    return measure


def test_search_climbs_to_the_peak_within_budget_and_skips_a_refused_setting():
    knobs = [llmtune.Knob("max_num_seqs", "parameter", ("2", "4", "8", "16", "32", "oom")),
             llmtune.Knob("enable_chunked_context", "parameter", ("false", "true"))]
    peak = {"2": 0.0, "4": 1.0, "8": 2.0, "16": 3.0, "32": 1.5}
    s = llmtune.GoodputSearch(knobs, _synthetic(peak), Budget(8))
    s.run(("4", "false"))
    assert llmtune.choose(s, streaming.Slo(200, 20)) == ("16", "true")
    assert len(s.trials) <= 8 and s.trials[0].baseline
    assert s.trials[-1].values == ("16", "true") and s.trials[-1].why == "winner: measured again"
    s = llmtune.GoodputSearch(knobs, _synthetic(peak), Budget(None))
    s.exhaustive(("4", "false"))
    assert len(s.figures) == 12 and sum(t.error is not None for t in s.trials) == 2
    assert [t.why for t in s.trials[12:]] == ["winner: measured again"]
    assert llmtune.choose(s, streaming.Slo(200, 20)) == ("16", "true")
    s = llmtune.GoodputSearch(knobs, _synthetic({"4": 0.0}), Budget(4))
    s.run(("4", "false"))
    with pytest.raises(PerfError, match="no setting served a request within TTFT <= 200 ms, TPOT <= 20 ms"):
        llmtune.choose(s, streaming.Slo(200, 20))
    assert "winner: measured again" not in [t.why for t in s.trials]  # nothing good: no winner to measure again


# the space of bench/llm_heldout.py: sequences x chunked context x scheduler policy x instances (40 settings)
ENGINE_KNOBS = [llmtune.Knob("max_num_seqs", "parameter", ("2", "4", "8", "16", "32")),
                llmtune.Knob("enable_chunked_context", "parameter", ("false", "true")),
                llmtune.Knob("batch_scheduler_policy", "parameter", ("guaranteed_no_evict", "max_utilization")),
                llmtune.Knob("instance_count", "instances", ("1", "2"))]


def _by_instances(one: dict[str, float], two: dict[str, float]):
    """A measure over ENGINE_KNOBS: goodput per max_num_seqs on one instance (`one`) and on two (`two`)."""
    def measure(values: tuple[str, ...]) -> streaming.StreamResult:
        g = (one if values[3] == "1" else two)[values[0]]
        return streaming.StreamResult(16, 40, 4.0, 400.0, 100.0, 500.0 if g == 0 else 150.0, 10.0, 20.0, 10.0, 20.0,
                                      g, g / 4.0, 0.02)
    return measure, ENGINE_KNOBS


def _screened(one: dict[str, float], two: dict[str, float], concurrency: int | None = None):
    """The search over ENGINE_KNOBS (`_by_instances(one, two)`) from 4 sequences on one instance: it and its trials
    as (why, setting)."""
    measure, knobs = _by_instances(one, two)
    s = llmtune.GoodputSearch(knobs, measure, search.share_budget(40), concurrency=concurrency)  # 6 settings of 40
    s.run(("4", "false", "guaranteed_no_evict", "1"))
    return s, [(t.why, t.values) for t in s.trials]


def test_the_steps_that_pay_are_tried_together_before_the_walk():
    """More sequences pay at one instance (0 -> 5 -> 6 good requests/s at 4, 8, 16), a second instance pays at 4
    (4/s), and 8 sequences on two instances pay most (12/s): one knob at a time, the walk climbs to 16 and 32
    sequences and spends the engine's two switches before it reaches the instances. The search first steps once
    along each numeric knob from the served setting, measures the steps that came out ahead together, and walks
    from there."""
    one = {"2": 0.0, "4": 0.0, "8": 5.0, "16": 6.0, "32": 0.0}
    two = {"2": 1.0, "4": 4.0, "8": 12.0, "16": 7.0, "32": 0.0}
    s, steps = _screened(one, two)
    assert steps[:4] == [("served setting", ("4", "false", "guaranteed_no_evict", "1")),
                         ("screen: one step", ("8", "false", "guaranteed_no_evict", "1")),
                         ("screen: one step", ("4", "false", "guaranteed_no_evict", "2")),
                         ("screen: the steps ahead together", ("8", "false", "guaranteed_no_evict", "2"))], steps
    best = llmtune.choose(s, streaming.Slo(200, 20))
    assert best[0] == "8" and best[3] == "2" and len(s.figures) <= 6, steps


def test_past_a_dip_the_sequences_that_admit_every_client():
    """Goodput dips one step up from the served 4 sequences (a longer step, and half of the 16 clients still queue
    for a whole generation before their first token) and peaks once 16 sequences admit all of them; a second
    instance pays at 4 (the shape of bench/llm_heldout.py's attention models). A step along the sequences that is
    not ahead is followed by the fewest sequences that admit every client, so the peak is measured in the screen
    instead of the walk settling on two instances at 4."""
    one = {"2": 1.0, "4": 1.5, "8": 0.5, "16": 6.0, "32": 5.0}
    two = {"2": 3.0, "4": 4.75, "8": 0.0, "16": 0.0, "32": 0.0}
    s, steps = _screened(one, two, concurrency=16)
    assert steps[1:3] == [("screen: one step", ("8", "false", "guaranteed_no_evict", "1")),
                          ("screen: every client admitted", ("16", "false", "guaranteed_no_evict", "1"))], steps
    assert llmtune.choose(s, streaming.Slo(200, 20)) == ("16", "false", "guaranteed_no_evict", "1"), steps
    assert "screen: the most sequences" not in [t.why for t in s.trials]  # the admitting sequences were ahead
    # with two instances served, 8 sequences each admit the 16 clients; with 64 clients no value does
    assert s._admitting(0, ("4", "false", "guaranteed_no_evict", "2")) == ("8", "false", "guaranteed_no_evict", "2")
    measure, knobs = _by_instances(one, two)
    s = llmtune.GoodputSearch(knobs, measure, search.share_budget(40), concurrency=64)
    assert s._admitting(0, ("4", "false", "guaranteed_no_evict", "1")) is None
    s.run(("4", "false", "guaranteed_no_evict", "1"))
    assert "screen: every client admitted" not in [t.why for t in s.trials]


def test_when_neither_step_nor_admitting_pays_the_most_sequences():
    """Good settings at both ends of the sequences and none between (a large fixed cost per step, say): one step up
    from the served 4 sequences and the 16 that admit every client both read less than 4, and 32 sequences pay
    most. The screen measures the far end of the sequences when neither is ahead, and the walk goes on from there;
    when the step is ahead, the far end is not measured in the screen."""
    one = {"2": 0.5, "4": 2.0, "8": 1.0, "16": 1.5, "32": 6.0}
    two = {"2": 1.0, "4": 1.0, "8": 0.5, "16": 0.5, "32": 0.5}
    s, steps = _screened(one, two, concurrency=16)
    assert steps[1:4] == [("screen: one step", ("8", "false", "guaranteed_no_evict", "1")),
                          ("screen: every client admitted", ("16", "false", "guaranteed_no_evict", "1")),
                          ("screen: the most sequences", ("32", "false", "guaranteed_no_evict", "1"))], steps
    assert llmtune.choose(s, streaming.Slo(200, 20)) == ("32", "false", "guaranteed_no_evict", "1"), steps
    s, steps = _screened({**one, "8": 3.0}, two, concurrency=16)
    assert "screen: the most sequences" not in [why for why, _ in steps], steps


def _lucky(first: dict[str, float], then: dict[str, float]):
    """Goodput per max_num_seqs: `first` in a setting's first window, `then` in every later one."""
    seen: dict[tuple[str, ...], int] = {}

    def measure(values: tuple[str, ...]) -> streaming.StreamResult:
        n = seen[values] = seen.get(values, 0) + 1
        g = (first if n == 1 else then)[values[0]]
        return streaming.StreamResult(16, 40, 4.0, 400.0, 100.0, 150.0, 10.0, 20.0, 10.0, 20.0, g, g / 4.0, 0.02)
    return measure


@pytest.mark.parametrize("how, trials, repeats", [("run", 6, None), ("run", 6, 2), ("exhaustive", None, None),
                                                   ("exhaustive", 5, None)])
def test_a_lucky_window_is_measured_again_before_it_is_chosen(how, trials, repeats):
    """16 sequences read 3 good requests/s once and 0.5 after: one look chooses it over 8 (2/s in every window).
    Measured again, it falls behind; the next winner, 8, is measured again too and chosen. A budget of trials
    keeps one for that."""
    budget = Budget(trials, max_repeats=repeats)
    knobs = [llmtune.Knob("max_num_seqs", "parameter", ("4", "8", "16"))]
    s = llmtune.GoodputSearch(knobs, _lucky({"4": 1.0, "8": 2.0, "16": 3.0}, {"4": 1.0, "8": 2.0, "16": 0.5}),
                              budget)
    getattr(s, how)(("4",))
    assert llmtune.choose(s, streaming.Slo(200, 20)) == ("8",)
    again = [t.values for t in s.trials if t.why == "winner: measured again"]
    assert again == [("16",), ("8",)], [(t.values, t.why) for t in s.trials]
    assert budget.max_trials is None or budget.used <= budget.max_trials + (budget.max_repeats or 0)


# -- against tritonserver ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llm_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm")
    write_model(root, "llm", costs=COSTS)
    with TritonServer(root, model_control_mode="explicit", extra_args=["--load-model=llm"]) as server:
        server.wait_ready(60)
        yield server


@pytest.fixture
def gitops(tmp_path: Path) -> Path:
    (tmp_path / "overlays").mkdir()
    src = tmp_path / "src"
    write_model(src, "llm", costs=COSTS)
    folder = tmp_path / "models" / "chat" / "llm"
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text((src / "llm" / "config.pbtxt").read_text())
    return tmp_path


def grpc(server) -> str:
    return f"127.0.0.1:{server.grpc_port}"


def served(server) -> dict:
    return server.request("GET", "/v2/models/llm/config")


GOODPUT = ("--protocol", "grpc", "--objective", "goodput", "--concurrency", "16", "--duration", "2s", "--warmup",
           "0.5s", "--prompt-tokens", "128", "--output-tokens", "32")


def _calibrated(run_cli, server) -> tuple[float, float] | dict:
    """TTFT and TPOT targets that only 8 sequences meet on this machine, from one sweep without targets: TTFT
    halfway between 8 sequences' p99 and 4's median, TPOT halfway between 8's p99 and 16's median. The stub's
    milliseconds are a sleep plus the python backend's own CPU work, and the latter varies threefold between
    machines (8 sequences' TPOT p99: 15 ms on one, 19-22 ms on another), so fixed targets do not hold."""
    res = run_cli("tune", "llm", "--url", grpc(server), *GOODPUT, "--max-ttft", "100s", "--max-itl", "100s",
                  "--param", "max_num_seqs=4,8,16", "--instances", "1", "--exhaustive", "-o", "json")
    assert res.exit_code == 0, res.stderr
    trials: dict[str, list[dict]] = {}
    for t in json.loads(res.stdout)["trials"]:
        trials.setdefault(t["setting"]["max_num_seqs"], []).append(t)

    def worst(seqs: str, key: str) -> float:
        return max(t[key] for t in trials[seqs])

    def least(seqs: str, key: str) -> float:
        return min(t[key] for t in trials[seqs])

    ttft4, ttft8 = least("4", "ttft_p50_ms"), worst("8", "ttft_p99_ms")
    tpot16, tpot8 = least("16", "tpot_p50_ms"), worst("8", "tpot_p99_ms")
    if not (ttft4 > ttft8 and tpot16 > tpot8):  # not the stub's cost shape (the comment on COSTS): the figures
        return {"TTFT p50 at 4": ttft4, "TTFT p99 at 8": ttft8, "TPOT p50 at 16": tpot16, "TPOT p99 at 8": tpot8}
    return round((ttft4 + ttft8) / 2), round(tpot16 + tpot8) / 2


@pytest.mark.serial
def test_goodput_tune_finds_the_batch_that_meets_the_targets_and_writes_it(run_cli, llm_server, gitops):
    before = served(llm_server)
    # One instance: on two cores the python backend's own CPU work, not the device lock, bounds the stub, so 4
    # sequences on each of 2 instances tie with 8 on one (12.5 against 12.0 good requests/s seen): a tie is no
    # test of the search. A search over two knobs: test_search_climbs_to_the_peak_within_budget_and_skips_...
    for _ in range(3):
        calibrated = _calibrated(run_cli, llm_server)
        if isinstance(calibrated, dict):  # a burst of load blurred the shape: measured again, up to twice more
            continue
        ttft, tpot = calibrated
        targets = ("--max-ttft", f"{ttft:g}ms", "--max-itl", f"{tpot:g}ms")
        res = run_cli("tune", "llm", "--url", grpc(llm_server), *GOODPUT, *targets, "--param",
                      "max_num_seqs=2,4,8,16", "--instances", "1", "--max-trials", "6", "--write", "--repo",
                      str(gitops), "-o", "json")
        if not (res.exit_code == 1 and "no setting served a request within" in res.stderr):
            break
        # the targets are milliseconds of a sleeping stub, measured a minute ago: where a burst of load made every
        # setting miss them since, tune says so and writes nothing. Calibrated and tried up to twice more
        assert served(llm_server) == before and "# tune goodput:" not in (
            gitops / "models" / "chat" / "llm" / "config.pbtxt").read_text()
    assert not isinstance(calibrated, dict), calibrated
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["objective"] == "goodput" and doc["targets"] == {"max_ttft_ms": ttft, "max_itl_ms": tpot}
    assert [k["name"] for k in doc["knobs"]] == ["max_num_seqs", "instance_count"] and doc["space"] == 4
    base, best = doc["baseline"], doc["best"]
    assert base["setting"] == {"max_num_seqs": "4", "instance_count": "1"}
    trials = json.dumps(doc["trials"], indent=0)
    assert base["goodput"] < 0.2 * best["goodput"] and base["ttft_p99_ms"] > ttft, trials
    assert best["setting"] == {"max_num_seqs": "8", "instance_count": "1"}, trials
    # some of the winner's requests meet both targets: how many depends on the machine's load (0.67-1.0 seen on the
    # 2-core machine alone, 0.17 beside three other pytest workers), not on the search; the ratio above does not
    assert best["good_fraction"] > 0 and best["goodput"] > 0
    assert doc["measurements"] == len(doc["trials"]) <= 6
    assert all({"ttft_p99_ms", "itl_p99_ms", "tpot_p99_ms", "output_tokens_per_s", "goodput"} <= set(t)
               for t in doc["trials"] if not t["error"])
    assert served(llm_server) == before  # the served configuration is back

    path = gitops / "models" / "chat" / "llm" / "config.pbtxt"
    assert doc["written"] == [str(path)]
    text = path.read_text()
    cfg = pbtxt.parse(text)
    assert cfg.parameters["max_num_seqs"].string_value == "8"
    assert cfg.parameters["kv_cache_free_gpu_mem_fraction"].string_value == "0.5"  # untouched
    lines = [x for x in text.splitlines() if x.startswith("# tune goodput:")]
    assert len(lines) == 2 and f"targets TTFT <= {ttft:g} ms, TPOT <= {tpot:g} ms" in lines[0]
    assert "goodput" in lines[1]
    # a second --write replaces the evidence instead of piling it up
    res = run_cli("tune", "llm", "--url", grpc(llm_server), *GOODPUT, *targets,
                  "--param", "max_num_seqs=8", "--instances", "1", "--write", "--repo", str(gitops), "-o", "json")
    assert res.exit_code == 0, res.stderr
    assert len([x for x in path.read_text().splitlines() if x.startswith("# tune goodput:")]) == 2


def test_goodput_exhaustive_records_a_refused_setting(run_cli, llm_server):
    # what is asserted is the refused setting and the sweep, not 8 sequences' TPOT against 17.5 ms (on a slower
    # machine it read 19-22 ms, nothing was good and tune exited 1): a TPOT target of 30 ms still leaves 4 sequences
    # with no good request (every client but four waits past 750 ms for its first token)
    res = run_cli("tune", "llm", "--url", grpc(llm_server), *GOODPUT, "--max-ttft", "750ms", "--max-itl", "30ms",
                  "--param", "max_num_seqs=8",
                  "--param", "kv_cache_free_gpu_mem_fraction=0.5,0.95", "--instances", "1", "--exhaustive",
                  "-o", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["space"] == 4  # the served max_num_seqs (4) joins the values
    # every setting once, then the winner again (and the next, should the first one measured again fall behind)
    steps = [t["step"] for t in doc["trials"]]
    assert len({json.dumps(t["setting"]) for t in doc["trials"]}) == 4 and steps[:4].count("exhaustive") == 3
    assert doc["measurements"] == len(steps) >= 5 and set(steps[4:]) == {"winner: measured again"}
    refused = [t for t in doc["trials"] if t["setting"]["kv_cache_free_gpu_mem_fraction"] == "0.95"]
    assert len(refused) == 2 and all("out of memory" in t["error"] and "goodput" not in t for t in refused)
    assert doc["best"]["setting"] == {"max_num_seqs": "8", "kv_cache_free_gpu_mem_fraction": "0.5",
                                      "instance_count": "1"}


def test_goodput_that_no_setting_meets_exits_1_with_the_closest(run_cli, llm_server):
    res = run_cli("tune", "llm", "--url", grpc(llm_server), *GOODPUT, "--max-ttft", "5ms", "--param",
                  "max_num_seqs=4", "--instances", "1")
    assert res.exit_code == 1
    rows = res.stdout.splitlines()
    assert rows[0].split() == ["#", "MAX_NUM_SEQS", "INSTANCE_COUNT", "GOODPUT/S", "GOOD%", "TTFT_P99_MS",
                               "TPOT_P99_MS", "TOKENS/S", "NOTE"]
    assert rows[1].split()[:5] == ["1", "4", "1", "0.00", "0"] and rows[1].endswith("baseline")
    assert "no setting served a request within TTFT <= 5 ms (closest: TTFT p99" in res.stderr


@pytest.mark.parametrize("args, message", [
    (("--objective", "goodput", "--max-ttft", "1s"), "streams tokens over gRPC"),
    (("--objective", "goodput", "--protocol", "grpc"), "needs --max-ttft and/or --max-itl"),
    (("--max-ttft", "1s"), "belong to --objective goodput"),
    (("--min-requests", "50"), "belong to --objective goodput"),
    (("--objective", "goodput", "--protocol", "grpc", "--max-itl", "1s", "--param", "max_num_seqs"),
     "expected NAME=VALUE"),
])
def test_goodput_usage_errors(run_cli, llm_server, args, message):
    url = grpc(llm_server) if "grpc" in args else llm_server.http_url
    res = run_cli("tune", "llm", "--url", url, *args)
    assert res.exit_code == 2 and message in res.stderr and "Traceback" not in res.stderr


def test_a_count_window_lasts_until_its_requests_have_ended(run_cli, llm_server):
    """--min-requests: each window goes on past --duration until that many requests ended inside it; goodput and
    the other rates are per second of the window actually measured."""
    res = run_cli("tune", "llm", "--url", grpc(llm_server), *GOODPUT[:6], "--duration", "0.4s", "--min-requests",
                  "20", "--warmup", "0.3s", "--prompt-tokens", "128", "--output-tokens", "32", "--max-ttft", "10s",
                  "--param", "max_num_seqs=8", "--instances", "1", "--exhaustive", "-o", "json")
    assert res.exit_code == 0, res.stderr
    trials = json.loads(res.stdout)["trials"]
    # 16 clients of 32-token requests, 4 or 8 sequences at a time: 4-12 requests a second alone, a third of that
    # beside other test workers, so 20 take 2-15 steps of 0.4 s (a window of 10 steps holds what it holds)
    steps = [t["window_s"] / 0.4 for t in trials]
    assert trials and all(n == pytest.approx(round(n)) and 2 <= round(n) <= 10 for n in steps), trials
    assert all(t["requests"] >= 20 or round(n) == 10 for t, n in zip(trials, steps, strict=True)), trials
    # per second of the window measured, not of --duration
    assert all(t["requests_per_s"] == pytest.approx(t["requests"] / t["window_s"], rel=0.01) for t in trials)

    # a window that cannot fill ends at ten times --duration with what it holds
    from kubectl_triton.perf.target import GrpcTarget

    target = GrpcTarget(grpc(llm_server), "llm")
    try:
        reqs = streaming.llm_requests(target.config(), 16, 4)
        done, seconds = streaming.collect(target, reqs, 2, 0.1, 0.1, min_requests=1_000_000)
        assert seconds == pytest.approx(1.0) and len(done) > 0
        done, seconds = streaming.collect(target, reqs, 2, 0.3, 0.1)  # no count: --duration alone
        assert seconds == pytest.approx(0.3)
    finally:
        target.close()


def test_goodput_on_a_model_that_does_not_stream(run_cli, tmp_path):
    from tests.test_bench import explicit_server

    with explicit_server(tmp_path / "models", ("fixedcost",)) as server:
        server.wait_ready(60)
        res = run_cli("tune", "fixedcost", "--url", grpc(server), "--protocol", "grpc", "--objective", "goodput",
                      "--max-ttft", "1s")
    assert res.exit_code == 2 and "is not decoupled" in res.stderr and len(res.stderr.strip().splitlines()) <= 2


def test_unknown_served_values_are_loaded_and_the_evidence_tolerates_a_failed_baseline():
    from kubectl_triton.cli.commands import _tune_goodput

    cfg = {"name": "vllm_model", "backend": "vllm"}
    knobs = llmtune.knobs_for(cfg, {}, None)
    # gpu_memory_utilization runs at vLLM's default (0.9) when model.json leaves it out; max_num_seqs and chunked
    # prefill have no default that holds across versions: the baseline loads their first values explicitly
    assert llmtune.served_values(cfg, knobs, {"model": "m"}) == ("32", "0.9", "false")
    assert llmtune.unknown(cfg, knobs, {"model": "m"}) == ["max_num_seqs", "enable_chunked_prefill"]
    assert llmtune.unknown(cfg, knobs, {"model": "m", "max_num_seqs": 64, "enable_chunked_prefill": True}) == []
    doc = {"baseline": {"setting": {}}, "targets": {"max_ttft_ms": 500.0, "max_itl_ms": None}, "measurements": 3,
           "space": 4, "concurrency": 8, "prompt_tokens": 16, "output_tokens": 8,
           "best": {"goodput": 2.5, "ttft_p99_ms": 120.0, "tpot_p99_ms": 9.0, "output_tokens_per_s": 80.0}}
    lines = _tune_goodput.evidence(doc)
    assert "targets TTFT <= 500 ms" in lines[0] and "goodput - -> 2.50 req/s, TTFT p99 - -> 120 ms" in lines[1]


def test_goodput_on_a_server_without_model_control_says_so_and_changes_nothing(run_cli, tmp_path):
    write_model(tmp_path, "llm", costs=COSTS)
    with TritonServer(tmp_path) as server:  # model control "none": loads are refused
        server.wait_ready(60)
        res = run_cli("tune", "llm", "--url", grpc(server), *GOODPUT, *TARGETS, "--param", "max_num_seqs=4,8",
                      "--instances", "1")
    assert res.exit_code != 0 and "model control is not explicit" in res.stderr
    assert "could not restore" not in res.stderr and "Traceback" not in res.stderr


def test_a_budget_of_two_measures_a_step_not_the_served_setting_twice():
    knobs = [llmtune.Knob("max_num_seqs", "parameter", ("4", "8", "16"))]
    s = llmtune.GoodputSearch(knobs, _lucky({"4": 1.0, "8": 2.0, "16": 3.0}, {"4": 1.0, "8": 2.0, "16": 0.5}),
                              Budget(2))
    s.run(("4",))
    assert [(t.why, t.values) for t in s.trials] == [("served setting", ("4",)), ("screen: one step", ("8",))]
