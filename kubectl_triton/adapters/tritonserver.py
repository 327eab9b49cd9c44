"""Adapter for a real tritonserver process: find it, start it on free loopback ports, read its state.

The server comes from the `nvidia-pytriton` wheel in the current environment (preferred) or from a
`tritonserver` found on PATH (a Triton container). Only this module starts the binary.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from kubectl_triton.errors import EXIT_FINDINGS, ToolMissing, TritonCtlError

READY = "READY"


class TritonServerError(TritonCtlError):
    """tritonserver did not start, died, or did not answer in time."""

    exit_code = EXIT_FINDINGS


class TritonServerDied(TritonServerError):
    """tritonserver exited (or was killed) before it was ready."""


@dataclass(frozen=True)
class TritonInstall:
    """Where the server binary, its shared libraries, backends and python stub live."""

    binary: Path
    libs_dir: Path | None
    backends_dir: Path
    stub: Path | None  # triton_python_backend_stub for this interpreter (None: backends already have one)


def find_install() -> TritonInstall:
    """The tritonserver of nvidia-pytriton in this environment, else one on PATH; ToolMissing otherwise."""
    spec = importlib.util.find_spec("pytriton")
    if spec is not None and spec.submodule_search_locations:
        pkg = Path(next(iter(spec.submodule_search_locations)))
        root = pkg / "tritonserver"
        binary = root / "bin" / "tritonserver"
        if binary.is_file():
            libs = pkg.parent / "nvidia_pytriton.libs"
            stub = (root / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}"
                    / "triton_python_backend_stub")
            return TritonInstall(binary=binary, libs_dir=libs if libs.is_dir() else None,
                                 backends_dir=root / "backends", stub=stub if stub.is_file() else None)
    exe = shutil.which("tritonserver")
    if exe:
        binary = Path(exe).resolve()
        home = binary.parent.parent
        libs = home / "lib"
        return TritonInstall(binary=binary, libs_dir=libs if libs.is_dir() else None,
                             backends_dir=home / "backends", stub=None)
    raise ToolMissing("tritonserver not found (neither nvidia-pytriton in this environment nor on PATH)",
                      hint="pip install nvidia-pytriton, or run inside a Triton container")


_BACKENDS: dict[Path, Path] = {}
_BACKENDS_LOCK = threading.Lock()


def prepared_backends(install: TritonInstall) -> Path:
    """A backends directory with the python stub in place, made once per process in a temp dir."""
    if install.stub is None:
        return install.backends_dir
    with _BACKENDS_LOCK:
        return _prepare_backends(install)


def _prepare_backends(install: TritonInstall) -> Path:
    assert install.stub is not None
    if install.binary not in _BACKENDS:
        tmp = Path(tempfile.mkdtemp(prefix="kubectl-triton-backends-"))
        atexit.register(shutil.rmtree, tmp, True)
        dest = tmp / "backends"
        shutil.copytree(install.backends_dir, dest, ignore=shutil.ignore_patterns("__pycache__"))
        (dest / "python").mkdir(exist_ok=True)
        shutil.copy2(install.stub, dest / "python" / "triton_python_backend_stub")
        _BACKENDS[install.binary] = dest
    return _BACKENDS[install.binary]


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def server_env(install: TritonInstall) -> dict[str, str]:
    """Environment for the server: its libraries on LD_LIBRARY_PATH, this Python first on PATH
    (the python backend stub finds numpy through the `python` on PATH)."""
    env = dict(os.environ)
    if install.libs_dir:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(install.libs_dir), env.get("LD_LIBRARY_PATH", "")) if p)
    env["PATH"] = os.pathsep.join(p for p in (str(Path(sys.executable).parent), env.get("PATH", "")) if p)
    return env


_LIVE: weakref.WeakSet[TritonServer] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    """Servers still running when the interpreter exits are killed (a test that forgot stop())."""
    for server in list(_LIVE):
        server.stop(grace=0)


def _parent_death_signal() -> Callable[[], None] | None:
    """A preexec_fn that makes the server receive SIGTERM when the starting thread's process dies
    (Linux prctl PR_SET_PDEATHSIG), so a killed test run leaves no orphaned servers."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return preexec


SHM = Path("/dev/shm")


class TritonServer:
    """A tritonserver process on a model repository; a context manager that always stops it.

    The server dies with the process (and thread) that started it: stop it from the thread that
    started it, or keep that thread alive while it is in use."""

    def __init__(self, model_repository: Path, *, model_control_mode: str = "none",
                 exit_on_error: bool = False, extra_args: Sequence[str] = (),
                 install: TritonInstall | None = None, strict_model_config: bool = True) -> None:
        self.model_repository = Path(model_repository)
        self.model_control_mode = model_control_mode
        self.exit_on_error = exit_on_error
        self.extra_args = list(extra_args)
        self.strict_model_config = strict_model_config
        self.install = install or find_install()
        self.http_port = self.grpc_port = self.metrics_port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._logfile: Path | None = None
        # the python backend's shared-memory regions (1 MiB each in /dev/shm, one per stub) outlive stubs that are
        # killed (with the server, after stop()'s grace) and some unloaded ones (seen on long reload sweeps of
        # decoupled models): named apart, so that stop() removes them
        # (a shm-region-prefix-name of the caller's own in extra_args comes later and wins: those are the caller's)
        self.shm_prefix = f"kubectl_triton_{uuid.uuid4().hex[:12]}_"

    # -- properties ---------------------------------------------------------------------------
    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def log(self) -> str:
        """Everything the server wrote to stdout and stderr so far."""
        if self._logfile is None or not self._logfile.exists():
            return ""
        return self._logfile.read_text(encoding="utf-8", errors="replace")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        """The full tritonserver command line for the current ports."""
        return [str(self.install.binary), f"--model-repository={self.model_repository}",
                f"--backend-directory={prepared_backends(self.install)}",
                f"--model-control-mode={self.model_control_mode}",
                *(["--disable-auto-complete-config"] if self.strict_model_config else []),
                f"--exit-on-error={'true' if self.exit_on_error else 'false'}",
                "--exit-timeout-secs=2", "--allow-metrics=true",
                "--http-address=127.0.0.1", f"--http-port={self.http_port}",
                "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}",
                "--metrics-address=127.0.0.1", f"--metrics-port={self.metrics_port}",
                f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
                *self.extra_args]

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, timeout: float = 60) -> TritonServer:
        """Start the server and wait until its HTTP endpoint is live (all start-up loads done).

        Retries with new ports when one was taken meanwhile; raises TritonServerError when the
        server exits (e.g. exit_on_error and a model failed) or is not live within `timeout`."""
        if self.running:  # `with TritonServer(...).start() as s:` must not start a second process
            return self
        if not self.model_repository.is_dir():
            raise TritonServerError(f"{self.model_repository}: model repository is not a directory")
        for attempt in range(3):
            self._spawn()
            try:
                self._wait_live(timeout)
                return self
            except TritonServerError:
                log, code = self.log, self._returncode()
                self.stop()
                taken = "address already in use" in log.lower() or "failed to bind" in log.lower()
                # Killed by a signal while starting (seen rarely on loaded CI hosts: SIGABRT before any model
                # loaded) says nothing about the repository; a reproducible crash fails the second time too.
                crashed = code is not None and code < 0
                if attempt < 2 and (taken or (crashed and attempt == 0)):
                    continue
                raise
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        fd, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
        self._logfile = Path(name)
        atexit.register(self._logfile.unlink, True)
        with os.fdopen(fd, "wb") as out:
            self._proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=server_env(self.install),
                                          start_new_session=True, preexec_fn=_parent_death_signal())
        _LIVE.add(self)

    def _wait_live(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise TritonServerDied(f"{self._exit_text()}: {last_error_line(self.log)}")
            if _http_status(f"{self.http_url}/v2/health/live") == 200:
                return
            time.sleep(0.05)
        raise TritonServerError(f"tritonserver was not live within {timeout:g} s: "
                                f"{last_error_line(self.log)}")

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait until /v2/health/ready answers 200 (server live and every model READY)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise TritonServerDied(f"{self._exit_text()}: {last_error_line(self.log)}")
            if _http_status(f"{self.http_url}/v2/health/ready") == 200:
                return
            time.sleep(0.05)
        raise TritonServerError(f"tritonserver was not ready within {timeout:g} s: "
                                f"{last_error_line(self.log)}")

    def _returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def _exit_text(self) -> str:
        code = self._returncode()
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return f"tritonserver was killed by {signal.Signals(-code).name}"
        return f"tritonserver exited with code {code}"

    def stop(self, grace: float = 10) -> None:
        """Terminate the server (SIGTERM and up to `grace` s, then SIGKILL to its process group)."""
        proc, self._proc = self._proc, None
        _LIVE.discard(self)
        if proc is None:
            return
        if proc.poll() is None and grace > 0:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
        # the python backend stubs run in the server's session: make sure none outlives it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for region in SHM.glob(f"{self.shm_prefix}*"):
            region.unlink(missing_ok=True)

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __del__(self) -> None:  # last resort; normal paths call stop()
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()

    # -- HTTP ---------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
        """A JSON request to the server's HTTP API; returns the decoded JSON (or None)."""
        return http_json(method, f"{self.http_url}{path}", body, timeout)


def _http_status(url: str) -> int | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except (OSError, ValueError):
        return None


def http_json(method: str, url: str, body: Any = None, timeout: float = 30) -> Any:
    """Send JSON, decode JSON; HTTP errors become TritonServerError with the server's error text."""
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as err:
        text = err.read().decode(errors="replace")
        with contextlib.suppress(ValueError, AttributeError):
            text = json.loads(text).get("error", text)
        raise TritonServerError(f"{method} {url}: HTTP {err.code}: {text}") from None
    except OSError as err:
        raise TritonServerError(f"{method} {url}: {err}") from None
    return json.loads(raw) if raw.strip() else None


def repository_index(server: TritonServer) -> list[dict]:
    """POST /v2/repository/index: [{"name", "version"?, "state"?, "reason"?}, …] for every model."""
    return server.request("POST", "/v2/repository/index", {}) or []


def model_states(server: TritonServer) -> dict[str, tuple[str, str]]:
    """Model name -> (state, reason) of its latest-listed version ("" when Triton gives none)."""
    states: dict[str, tuple[str, str]] = {}
    for entry in repository_index(server):
        name = entry.get("name", "")
        state, reason = entry.get("state", ""), entry.get("reason", "")
        # a model that failed keeps its failure even when another version row says something else
        if name in states and states[name][0] != READY and state == READY:
            continue
        states[name] = (state, reason)
    return states


def failed_models(server: TritonServer) -> dict[str, str]:
    """Model name -> Triton's reason, for every model that is not READY."""
    return _failures(model_states(server), server.log)


def _failures(states: dict[str, tuple[str, str]], log: str) -> dict[str, str]:
    return {name: reason or log_error_for(log, name) or f"model is {state or 'not loaded'}"
            for name, (state, reason) in states.items() if state != READY}


_NOISE = ("failed to load all models", "CudaDriverHelper", "Failed to initialize NVML")


def error_messages(log: str) -> list[str]:
    """The messages of every error line (`E…] "message"`) in a tritonserver log, in order."""
    pat = re.compile(r'^E\d{4} [\d:.]+\s+\d+ [^\]]+\] "?(.*?)"?$')
    out = []
    for line in log.splitlines():
        m = pat.match(line.strip())
        if m and not any(noise in m.group(1) for noise in _NOISE):
            out.append(m.group(1))
    return out


def log_error_for(log: str, model: str) -> str | None:
    """Triton's own load-failure message for `model` from the server log, if any: a `failed to load 'M'`,
    `failed to load model 'M'` (no version to load) or `Poll failed for model directory 'M'` line, else the first
    error line that names the model as a whole word (ensemble validation errors name it that way)."""
    name = re.escape(model)
    direct = (re.compile(r"failed to load (?:model )?'" + name + r"'(?: version \d+)?: (.*)$"),
              re.compile(r"Poll failed for model directory '" + name + r"': (.*)$"))
    messages = error_messages(log)
    for msg in messages:
        for pat in direct:
            m = pat.search(msg)
            if m:
                return m.group(1).strip()
    word = re.compile(r"(?<![\w.-])" + name + r"(?![\w.-])")
    for msg in messages:
        if word.search(msg) and not msg.startswith(("failed to load '", "Poll failed for model")):
            return msg.strip()
    return None


def last_error_line(log: str) -> str:
    """The last `E…` line (Triton's error log format) or the last line of the log."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not any(n in ln for n in _NOISE)]
    for ln in reversed(lines):
        if ln.startswith("E") and "]" in ln:
            return ln.split("]", 1)[1].strip().strip('"')
        if ln.startswith("error:"):
            return ln
    return lines[-1] if lines else "no output"


@dataclass
class Loaded:
    """What one tritonserver made of every model folder of a repository."""

    states: dict[str, tuple[str, str]]  # from the server that stayed up (model_states)
    failures: dict[str, str]  # every model not READY -> Triton's message, those of crashed servers included
    log: str  # the log of the server that stayed up
    crashes: int  # servers that died on the way

    def verdict(self, model: str) -> str | None:
        """Triton's failure message for the model folder `model`; None when it is READY. A model the server does
        not list (its version policy selects no version folder) failed with what the log says of it."""
        if model in self.failures:
            return self.failures[model]
        if self.states.get(model, ("",))[0] == READY:
            return None
        return log_error_for(self.log, model) or "Triton loaded no version of it"


_LOGGED_FAILURE = re.compile(r"failed to load '([^']+)' version \d+: (.*)")


def load_repository(repo: Path, *, timeout: float = 120, max_fruitless: int = 5,
                    **server_args: Any) -> Loaded:
    """Load every model of `repo` in tritonserver and read what became of each.

    tritonserver 2.51 sometimes dies of SIGSEGV right after refusing a model (seen after a refused implicit-state
    `initial_state` and after a warmup batch above max_batch_size; on some hosts nearly every time). Its log names
    the models it refused before dying (`failed to load 'M' version N: ...`): those keep that message, are set
    aside and the server starts again on the rest, until it stays up. Every folder is back in place on return.
    Raises TritonServerError when the server dies `max_fruitless` times in a row without naming a refused model
    (it also dies before logging anything: a loaded CI machine saw three such starts in a row)."""
    folders = {p.name for p in repo.iterdir() if p.is_dir()}
    refused: dict[str, str] = {}
    aside: Path | None = None
    crashes = fruitless = 0
    try:
        while True:
            server = TritonServer(repo, **server_args)
            try:
                server.start(timeout=timeout)
                states, log = model_states(server), server.log
                break
            except TritonServerDied:
                crashes += 1
                logged = (_LOGGED_FAILURE.match(m) for m in error_messages(server.log))
                settled = {m[1]: m[2] for m in logged if m and m[1] in folders and m[1] not in refused}
                fruitless = 0 if settled else fruitless + 1
                if fruitless >= max_fruitless:
                    raise
                if settled:
                    aside = aside or Path(tempfile.mkdtemp(prefix=".refused-", dir=repo.parent))
                    for name in settled:
                        shutil.move(str(repo / name), str(aside / name))
                    refused.update(settled)
            finally:
                server.stop(grace=0)
    finally:
        if aside is not None:
            for name in refused:
                shutil.move(str(aside / name), str(repo / name))
            shutil.rmtree(aside, ignore_errors=True)
    return Loaded(states, {**_failures(states, log), **refused}, log, crashes)
