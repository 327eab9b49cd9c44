"""`kubectl triton tune` against a real tritonserver (explicit model control) on loopback: it finds a
setting with >= 3x the throughput of no batching at concurrency 16, writes it into the repository's
config.pbtxt through Triton's schema (only dynamic_batching / instance_group change), and leaves the
served configuration as it found it — on success, on failure and on Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kubectl_triton.formats import pbtxt
from kubectl_triton.perf import PerfError, configedit, inputs, search
from kubectl_triton.perf.target import HttpTarget
from tests.test_bench import config_text, explicit_server

ROOT = Path(__file__).resolve().parents[1]
QUICK = ("--concurrency", "16", "--duration", "1s", "--warmup", "0.2s", "--instances", "1")


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    with explicit_server(tmp_path_factory.mktemp("models"), ("fixedcost",)) as server:
        server.wait_ready(60)
        yield server


@pytest.fixture
def gitops(tmp_path: Path) -> Path:
    """A GitOps repository holding the model's config (with a comment) under models/fixed/fixedcost/."""
    (tmp_path / "overlays").mkdir()
    cfg = tmp_path / "models" / "fixed" / "fixedcost" / "config.pbtxt"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(config_text("fixedcost").replace('backend: "python"', 'backend: "python"  # keep me'))
    return tmp_path


def served(server) -> dict:
    return server.request("GET", "/v2/models/fixedcost/config")


def test_tune_finds_3x_and_writes_it(run_cli, triton, gitops):
    before = served(triton)
    res = run_cli("tune", "fixedcost", "--url", triton.http_url, *QUICK, "--max-queue-delay-us", "0,2000",
                  "--preferred-batch-sizes", "none", "--write", "--repo", str(gitops), "-o", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["model"] == "fixedcost" and doc["concurrency"] == 16
    assert doc["baseline"]["throughput"] < 55 and doc["gain"] >= 3, doc
    assert doc["best"]["throughput"] >= 3 * doc["baseline"]["throughput"]
    assert doc["best"]["config"]["dynamic_batching"] is not None and doc["best"]["config"]["instance_count"] == 1
    assert len(doc["candidates"]) == 3 and doc["candidates"][0]["baseline"]
    assert served(triton) == before  # the original configuration is back

    path = gitops / "models" / "fixed" / "fixedcost" / "config.pbtxt"
    assert doc["written"] == str(path)
    text = path.read_text()
    assert "# keep me" in text and text.startswith("# a model whose execute costs 20 ms")
    new, old = pbtxt.parse(text), pbtxt.parse(config_text("fixedcost"))
    db = doc["best"]["config"]["dynamic_batching"]
    assert new.dynamic_batching.max_queue_delay_microseconds == db["max_queue_delay_microseconds"]
    for msg in (new, old):
        msg.ClearField("dynamic_batching")
        msg.ClearField("instance_group")
    assert new == old  # nothing else changed
    assert not list(path.parent.glob(".config.pbtxt.*"))  # atomic write left no temp file

    # the text form: a table, the recommendation; writing again changes nothing
    res = run_cli("tune", "fixedcost", "--url", triton.http_url, *QUICK, "--max-queue-delay-us", "0",
                  "--preferred-batch-sizes", "none", "--write", "--repo", str(gitops))
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["INSTANCES", "BATCHING", "PREFERRED", "DELAY_US", "THROUGHPUT/S", "P99_MS",
                                "BATCH", "NOTE"]
    assert lines[1].split()[:2] == ["1", "off"] and lines[1].endswith("baseline")
    assert any(ln.startswith("best: 1 instance, dynamic batching") for ln in lines)


def test_budget_and_refused_candidates(run_cli, triton, gitops):
    before = served(triton)
    # a candidate Triton refuses (preferred size above max_batch_size) is reported; the rest goes on
    res = run_cli("tune", "fixedcost", "--url", triton.http_url, *QUICK, "--max-queue-delay-us", "0",
                  "--preferred-batch-sizes", "64", "-o", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    failed = [c for c in doc["candidates"] if c["error"]]
    assert len(failed) == 1 and failed[0]["config"]["dynamic_batching"]["preferred_batch_size"] == [64]
    assert doc["best"]["config"] == doc["baseline"]["config"] and doc["gain"] == 1.0
    assert served(triton) == before
    # nothing fits a 1 ms budget: exit 1, one line, nothing written
    res = run_cli("tune", "fixedcost", "--url", triton.http_url, *QUICK, "--max-queue-delay-us", "0",
                  "--preferred-batch-sizes", "none", "--latency-budget-ms", "1", "--write", "--repo", str(gitops))
    assert res.exit_code == 1 and res.stderr.startswith("error: no setting kept p99 within 1 ms")
    assert (gitops / "models/fixed/fixedcost/config.pbtxt").read_text() == \
        config_text("fixedcost").replace('backend: "python"', 'backend: "python"  # keep me')
    assert served(triton) == before


class _Interrupting(HttpTarget):
    """A target whose n-th load is followed by `exc` (as if Ctrl-C or a crash hit mid-search)."""

    def __init__(self, url: str, exc: BaseException, after_loads: int) -> None:
        super().__init__(url, "fixedcost")
        self.exc, self.after, self.loads = exc, after_loads, []

    def load(self, config: dict | None) -> None:
        super().load(config)
        self.loads.append(config)
        if len(self.loads) == self.after:
            raise self.exc


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), RuntimeError("boom")])
def test_restores_after_interrupt_or_failure(triton, exc):
    before = served(triton)
    target = _Interrupting(triton.http_url, exc, after_loads=2)
    reqs = inputs.generate(inputs.input_specs(before))
    cands = search.grid(before, 16, [1, 2], [0], [[]])
    with pytest.raises(type(exc)):
        search.tune(target, reqs, 16, 0.3, cands, warmup_s=0.05)
    assert len(target.loads) == 3 and target.loads[-1] == before  # the third load is the restore
    assert served(triton) == before


def test_ctrl_c_restores_the_served_config(triton, gitops):
    """A real SIGINT to a running `kubectl triton tune`: exit 130 and the original config served again."""
    before = served(triton)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "kubectl_triton", "tune", "fixedcost", "--url", triton.http_url,
                             "--duration", "1s", "--warmup", "0.1s", "--instances", "1,2",
                             "--max-queue-delay-us", "0,100,200,300,400", "--preferred-batch-sizes", "none", "--write",
                             "--repo", str(gitops)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while "dynamic_batching" not in served(triton):  # the candidate is loaded and being measured
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().endswith("aborted")
    assert served(triton) == before
    assert "dynamic_batching" not in (gitops / "models/fixed/fixedcost/config.pbtxt").read_text()


def test_config_edit_keeps_everything_else():
    text = ('# header\nname: "m"\nmax_batch_size: 8\ninstance_group [\n  { count: 1 kind: KIND_GPU }  # gpu\n]\n'
            'dynamic_batching { priority_levels: 2 default_priority_level: 1 }\nparameters { key: "a" '
            'value: { string_value: "instance_group" } }\n')
    new = configedit.edit(text, "c", 3, {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 100})
    msg = pbtxt.parse(new)
    assert new.startswith('# header\nname: "m"\nmax_batch_size: 8\n') and "string_value: \"instance_group\"" in new
    assert [g.count for g in msg.instance_group] == [3] and msg.instance_group[0].kind == 1  # KIND_GPU kept
    assert list(msg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert msg.dynamic_batching.priority_levels == 2  # other batching fields kept
    assert configedit.edit(new, "c", 3, {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 100}) == new
    bare = configedit.edit('name: "m"\nmax_batch_size: 8\n', "c", 2, None)
    assert pbtxt.parse(bare).instance_group[0].count == 2 and not pbtxt.parse(bare).HasField("dynamic_batching")


def test_grid_and_choice():
    cfg = {"max_batch_size": 32, "instance_group": [{"count": 1, "kind": "KIND_CPU"}]}
    cands = search.grid(cfg, 16, [1, 2], [0, 500], [[], None])
    assert search.Candidate(1, None) not in cands  # the served setting is the baseline, not a candidate
    assert search.Candidate(2, None) in cands and len(cands) == 9
    assert {tuple(c.dynamic_batching["preferred_batch_size"]) for c in cands if c.dynamic_batching} == {(), (16,)}
    assert search.grid({"max_batch_size": 0}, 16, [1, 2], [0], [[]]) == [search.Candidate(2, None)]
    applied = search.apply({**cfg, "dynamic_batching": {"priority_levels": 2}}, cands[-1])
    assert applied["instance_group"][0]["count"] == 2 and applied["dynamic_batching"]["priority_levels"] == 2
    from kubectl_triton.perf.loadgen import LevelResult

    def trial(n: int, tput: float, p99: float) -> search.Trial:
        return search.Trial(search.Candidate(n, None), LevelResult(16, tput, 1, 1, p99, None, None, None, 1))

    trials = [trial(1, 50, 300), trial(2, 400, 60), trial(3, 500, 120)]
    assert search.choose(trials, None) is trials[2] and search.choose(trials, 100) is trials[1]
    with pytest.raises(PerfError, match="lowest: 60.0 ms"):
        search.choose(trials, 10)
