"""The tritonserver adapter against the real server from nvidia-pytriton (one server for most tests)."""

from __future__ import annotations

import os
import socket
import textwrap
from pathlib import Path

import pytest

from kubectl_triton.adapters import tritonserver as ts
from kubectl_triton.errors import ToolMissing

ECHO = textwrap.dedent("""\
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)]) for r in requests]
    """)
BROKEN = ("class TritonPythonModel:\n"
          "    def initialize(self, args):\n        raise RuntimeError('no engine here')\n")


def config(name: str, max_batch_size: int = 4) -> str:
    return textwrap.dedent(f"""\
        name: "{name}"
        backend: "python"
        max_batch_size: {max_batch_size}
        input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 2 ] }} ]
        output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]
        instance_group [ {{ kind: KIND_CPU }} ]
        """)


def add_model(repo: Path, name: str, code: str = ECHO, max_batch_size: int = 4) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config(name, max_batch_size))
    (repo / name / "1" / "model.py").write_text(code)


def _install_or_skip() -> ts.TritonInstall:
    try:
        return ts.find_install()
    except ToolMissing as err:
        pytest.skip(err.message)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    _install_or_skip()
    repo = tmp_path_factory.mktemp("repo")
    add_model(repo, "echo")
    add_model(repo, "negative", max_batch_size=-2)
    add_model(repo, "broken", code=BROKEN)
    with ts.TritonServer(repo) as server:
        yield server


def test_find_install_locates_binary_backends_and_stub() -> None:
    install = _install_or_skip()
    assert os.access(install.binary, os.X_OK)
    assert (install.backends_dir / "python").is_dir()
    if install.stub is not None:  # nvidia-pytriton: the stub for this interpreter
        prepared = ts.prepared_backends(install)
        assert (prepared / "python" / "triton_python_backend_stub").is_file()
        assert ts.prepared_backends(install) == prepared  # once per process


def test_find_install_without_any_server_is_tool_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ts.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(ToolMissing) as err:
        ts.find_install()
    assert "tritonserver" in err.value.message and "\n" not in err.value.message


def test_server_answers_on_loopback_ports(server: ts.TritonServer) -> None:
    ports = {server.http_port, server.grpc_port, server.metrics_port}
    assert len(ports) == 3
    assert server.http_url == f"http://127.0.0.1:{server.http_port}"
    result = server.request("POST", "/v2/models/echo/infer", {
        "inputs": [{"name": "IN", "shape": [1, 2], "datatype": "FP32", "data": [1.5, 2]}]})
    assert result["outputs"][0]["data"] == [3.0, 4.0]
    with socket.create_connection(("127.0.0.1", server.metrics_port), timeout=2):
        pass


def test_repository_index_and_failures_carry_tritons_messages(server: ts.TritonServer) -> None:
    names = {entry["name"] for entry in ts.repository_index(server)}
    assert names == {"echo", "negative", "broken"}
    states = ts.model_states(server)
    assert states["echo"][0] == ts.READY
    failed = ts.failed_models(server)
    assert set(failed) == {"negative", "broken"}
    assert "'max_batch_size' must be non-negative value for negative" in failed["negative"]
    assert "no engine here" in failed["broken"]
    assert "failed to load" in server.log


def test_wait_ready_times_out_while_a_model_failed(server: ts.TritonServer) -> None:
    with pytest.raises(ts.TritonServerError, match="not ready"):
        server.wait_ready(timeout=0.3)


def test_exit_on_error_raises_one_line_with_the_reason(tmp_path: Path) -> None:
    _install_or_skip()
    add_model(tmp_path, "negative", max_batch_size=-2)
    server = ts.TritonServer(tmp_path, exit_on_error=True)
    with pytest.raises(ts.TritonServerError) as err:
        server.start(timeout=30)
    assert "\n" not in err.value.message
    assert not server.running


def test_server_is_stopped_when_the_block_raises(tmp_path: Path) -> None:
    _install_or_skip()
    add_model(tmp_path, "echo")
    with pytest.raises(KeyError), ts.TritonServer(tmp_path) as server:
        server.wait_ready(timeout=30)
        port = server.http_port
        raise KeyError("boom")
    assert not server.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_start_is_idempotent_so_with_start_runs_one_server(tmp_path: Path) -> None:
    _install_or_skip()
    add_model(tmp_path, "echo")
    with ts.TritonServer(tmp_path).start(timeout=30) as server:
        pid, port = server._proc.pid, server.http_port
        assert server.start() is server and server._proc.pid == pid and server.http_port == port
    assert not server.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_shared_memory_of_killed_stubs_is_removed_with_the_server(tmp_path: Path) -> None:
    """A python-backend stub keeps a 1 MiB region in /dev/shm that nobody removes when the stub is killed: by a
    server stopped with SIGKILL (what stop() does after its grace, and to stubs left behind), and, seen on long
    reload sweeps of decoupled models, by some unloads (12,000 regions, 13 GB of memory, had piled up on the
    development machine until the kernel killed a server). The server's own regions are gone once it stops."""
    _install_or_skip()
    add_model(tmp_path, "echo")
    server = ts.TritonServer(tmp_path, model_control_mode="explicit", extra_args=["--load-model=echo"]).start()
    try:
        server.wait_ready(timeout=30)
        server.request("POST", "/v2/repository/models/echo/load")
        assert list(ts.SHM.glob(f"{server.shm_prefix}*"))  # the stubs' regions carry this server's prefix
    finally:
        server.stop(grace=0)  # SIGKILL: no stub cleans up after itself
    assert not list(ts.SHM.glob(f"{server.shm_prefix}*"))


def test_missing_repository_is_refused_before_starting(tmp_path: Path) -> None:
    _install_or_skip()
    with pytest.raises(ts.TritonServerError, match="not a directory"):
        ts.TritonServer(tmp_path / "nope").start()


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = ts.free_ports(5)
    assert len(set(ports)) == 5
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


LOG = '''\
I1202 11:14:44.790 8587 server.cc:1] "loading: ok:1"
E1202 11:14:44.791 8587 server.cc:241] "CudaDriverHelper has not been initialized."
E1202 11:14:44.792 8587 model_repository_manager.cc:1460] "Poll failed for model directory 'bad': 'max_batch_size' must be non-negative value for bad"
E1202 11:14:44.792 8587 model_repository_manager.cc:703] "Invalid argument: ensemble pipe contains models that are not available or ambiguous: vit"
E1202 11:14:44.800 8587 model_lifecycle.cc:641] "failed to load 'engine' version 1: Internal: RuntimeError: no engine"
E1202 11:14:44.962 8587 tritonserver.cc:2607] "Internal: failed to load all models"
'''  # noqa: E501


def test_log_error_for_a_model_without_a_version_to_load() -> None:
    """Triton 2.51 lists no such model in its index; its message is the `failed to load model 'M'` line, not the
    per-version notes before it."""
    log = (
        'E1203 06:31:02.101 901 model_repository_manager.cc:1] "version 2 is specified for model \'ce\', but the '
        'version directory is not present"\n'
        'E1203 06:31:02.102 901 model_repository_manager.cc:1] "failed to load model \'ce\': at least one version '
        'must be available under the version policy of model \'ce\'"\n')
    expected = "at least one version must be available under the version policy of model 'ce'"
    assert ts.log_error_for(log, "ce") == expected


def test_log_parsing_attributes_each_error_to_its_model() -> None:
    assert ts.error_messages(LOG)[0].startswith("Poll failed")
    assert len(ts.error_messages(LOG)) == 3  # start-up noise dropped
    assert ts.log_error_for(LOG, "bad") == "'max_batch_size' must be non-negative value for bad"
    assert ts.log_error_for(LOG, "engine") == "Internal: RuntimeError: no engine"
    assert ts.log_error_for(LOG, "pipe").endswith("not available or ambiguous: vit")
    assert ts.log_error_for(LOG, "pip") is None
    # the last error that names a cause: "failed to load all models" and start-up noise are passed over
    assert ts.last_error_line(LOG) == "failed to load 'engine' version 1: Internal: RuntimeError: no engine"


def assassin(times: int, delay: float = 1.5) -> str:
    """A python model whose initialize kills its tritonserver with SIGSEGV, the first `times` times it loads
    (counted in a file in its folder), after the other models had time to load or be refused."""
    return textwrap.dedent(f"""\
        import os, signal, time
        from pathlib import Path

        class TritonPythonModel:
            def initialize(self, args):
                count = Path(args["model_repository"]) / "kills"
                done = int(count.read_text()) if count.exists() else 0
                if done < {times}:
                    count.write_text(str(done + 1))
                    time.sleep({delay})
                    os.kill(os.getppid(), signal.SIGSEGV)
                    time.sleep(30)

            def execute(self, requests):
                return []
        """)


def files(repo: Path) -> list[str]:
    return sorted(str(p.relative_to(repo)) for p in repo.rglob("*")
                  if p.name != "kills" and "__pycache__" not in p.parts)


def test_a_server_that_dies_after_refusing_a_model_is_started_again_without_it(tmp_path: Path) -> None:
    """tritonserver 2.51 sometimes dies after refusing a model: the refusal it logged is kept, the model set
    aside, the server started again on the rest; the repository is left as it was."""
    _install_or_skip()
    repo = tmp_path / "repo"
    add_model(repo, "echo")
    add_model(repo, "broken", code=BROKEN)
    add_model(repo, "assassin", code=assassin(2))  # start() itself retries a crash once: two kills, one restart
    before = files(repo)
    loaded = ts.load_repository(repo)
    assert loaded.crashes == 1
    assert "no engine here" in loaded.failures["broken"]
    assert loaded.states["echo"][0] == loaded.states["assassin"][0] == "READY"
    assert "broken" not in loaded.states  # judged from the log of the server that died
    assert files(repo) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]


def test_a_server_that_keeps_dying_without_naming_a_model_is_an_error(tmp_path: Path) -> None:
    _install_or_skip()
    repo = tmp_path / "repo"
    add_model(repo, "echo")
    add_model(repo, "assassin", code=assassin(100, delay=0))
    with pytest.raises(ts.TritonServerDied) as err:
        ts.load_repository(repo, max_fruitless=2)
    assert err.value.message.startswith("tritonserver was killed by SIGSEGV")
    assert "CudaDriverHelper" not in err.value.message and "\n" not in err.value.message
    assert (repo / "assassin" / "kills").read_text() == "4"  # two loads, each retried once by start()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]
