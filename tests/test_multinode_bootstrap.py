"""The multi-node bootstrap for real: base/triton-multinode's leader.sh, worker.sh and rank.sh under OpenMPI's
`mpirun` (Debian's openmpi-bin, installed by `make system-deps`) across two hosts made as network namespaces on
this machine, joined by a veth pair with addresses that exist only inside the two namespaces (no traffic leaves
the machine). Each namespace has its own /etc/hosts (ip netns exec binds /etc/netns/NS/hosts), so the group's
pod DNS names resolve as they do in a LeaderWorkerSet. Each rank runs a real tritonserver (nvidia-pytriton's)
with a python-backend stand-in for tensorrt_llm that records its rank.

What stands in for Kubernetes: `ip netns exec` for the SSH hop mpirun makes to a worker (no sshd on this
machine; the leader's MPI_RSH_AGENT is the one variable changed), and a TCP listener for the worker's sshd port
the leader waits for (MPI_WORKER_DAEMON). Everything else — hostfile, rank layout, per-rank Triton flags,
failure propagation — is the production script."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kubectl_triton.adapters import tritonserver
from tests.conftest import REPO

SCRIPTS = REPO / "base" / "triton-multinode"
STANDIN = Path(__file__).parent / "fixtures" / "multinode" / "standin" / "model.py"
LEADER, WORKER = "kt-0.kt.triton", "kt-0-1.kt.triton"  # <lws>-<group>.<lws>.<namespace>, worker index 1


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


class Hosts:
    """Two network namespaces "a" (leader) and "b" (worker) on a private veth link."""

    def __init__(self, tmp: Path) -> None:
        tag = f"{os.getpid() % 100000}"
        self.ns = {"a": f"ktmn{tag}a", "b": f"ktmn{tag}b"}
        self.addr = {"a": "10.251.18.1", "b": "10.251.18.2"}
        self.tmp = tmp

    def up(self) -> None:
        a, b = self.ns["a"], self.ns["b"]
        for ns in (a, b):
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", a, "link", "add", f"{a}v", "type", "veth", "peer", "name", f"{b}v", "netns", b)
        for side, ns in self.ns.items():
            _run("ip", "-n", ns, "addr", "add", f"{self.addr[side]}/30", "dev", f"{ns}v")
            _run("ip", "-n", ns, "link", "set", f"{ns}v", "up")
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{self.addr['a']} {LEADER}\n{self.addr['b']} {WORKER}\n")

    def pids(self, side: str) -> list[int]:
        out = _run("ip", "netns", "pids", self.ns[side], check=False).stdout
        return [int(p) for p in out.split()]

    def kill(self, side: str) -> None:
        for pid in self.pids(side):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def down(self) -> None:
        for side, ns in self.ns.items():
            self.kill(side)
            _run("ip", "netns", "del", ns, check=False)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)

    def exec(self, side: str) -> list[str]:
        """Run in the namespace with the pod's own hostname (a pod's hostname is its short DNS name)."""
        name = (LEADER if side == "a" else WORKER).split(".")[0]
        return ["ip", "netns", "exec", self.ns[side], "unshare", "--uts", "sh", "-c", f'hostname {name}; exec "$@"',
                "sh"]

    def inode(self, side: str) -> int:
        return os.stat(f"/run/netns/{self.ns[side]}").st_ino


@pytest.fixture
def hosts(tmp_path):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("the bootstrap test needs root and iproute2 (`ip netns`), as CI runs it")
    h = Hosts(tmp_path)
    try:
        h.up()
    except subprocess.CalledProcessError as err:
        h.down()
        pytest.fail(f"cannot make network namespaces: {err.stderr.strip()}")
    yield h
    h.down()


@pytest.fixture(scope="module")
def triton():
    return tritonserver.find_install()


def _repository(root: Path, reports: Path) -> Path:
    """tensorrt_llm (what every rank loads) and preprocessing (rank 0 only), both the recording stand-in."""
    for model in ("tensorrt_llm", "preprocessing"):
        (root / model / "1").mkdir(parents=True)
        shutil.copy(STANDIN, root / model / "1" / "model.py")
        (root / model / "config.pbtxt").write_text(
            f'name: "{model}"\nbackend: "python"\nmax_batch_size: 0\n'
            'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
            'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
            'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
            f'parameters {{ key: "report_dir" value: {{ string_value: "{reports}" }} }}\n')
    return root


def _agent(path: Path, hosts: Hosts) -> Path:
    """mpirun's rsh agent for the test: `AGENT HOST CMD...` runs CMD in HOST's namespace (as ssh would run it
    on HOST)."""
    path.write_text("#!/bin/sh\nhost=$1\nshift\ncase $host in\n"
                    f"  {WORKER}) ns={hosts.ns['b']} ;;\n  {LEADER}) ns={hosts.ns['a']} ;;\n"
                    "  *) echo \"agent: unknown host $host\" >&2; exit 255 ;;\nesac\n"
                    'exec ip netns exec "$ns" unshare --uts sh -c "hostname ${host%%.*}; $*"\n')
    path.chmod(0o755)
    return path


def _env(tmp: Path, hosts: Hosts, triton: tritonserver.TritonInstall, repo: Path, **extra: str) -> dict[str, str]:
    env = tritonserver.server_env(triton)
    env.update({
        "LWS_LEADER_ADDRESS": LEADER, "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0", "GPUS_PER_NODE": "1",
        "WORLD_SIZE": "2", "SCRIPTS_DIR": str(SCRIPTS), "MPI_HOSTFILE": str(tmp / "mpi" / "hostfile"),
        "MPI_RSH_AGENT": str(_agent(tmp / "agent.sh", hosts)), "WORKER_WAIT_SECONDS": "60",
        "MODEL_REPOSITORY": str(repo), "TRITONSERVER": str(triton.binary),
        "TRITON_BACKEND_DIR": str(tritonserver.prepared_backends(triton)),
        "TRITON_ARGS": "--exit-timeout-secs=2", "HOME": str(tmp),
        # CI runs as root; the pods run as uid 1000 and need neither.
        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    })
    env.update(extra)
    return env


def _worker(hosts: Hosts, tmp: Path) -> subprocess.Popen:
    """worker.sh in namespace b with its group key mounted; the SSH daemon's port is held by a listener."""
    keys = tmp / "mpi-ssh"
    keys.mkdir()
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id_ed25519"))
    shutil.copy(keys / "id_ed25519.pub", keys / "authorized_keys")
    env = dict(os.environ, LWS_LEADER_ADDRESS=LEADER, MPI_SSH_DIR=str(keys), MPI_SSHD_DIR=str(tmp / "sshd"),
               MPI_WORKER_DAEMON=f"exec {sys.executable} -m http.server --bind 0.0.0.0 2222")
    return subprocess.Popen([*hosts.exec("b"), "sh", str(SCRIPTS / "worker.sh")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _http_ready(hosts: Hosts) -> int | None:
    code = ("import urllib.request, sys\ntry:\n  print(urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready',"
            " timeout=2).status)\nexcept Exception as e:\n  print(getattr(e, 'code', 'down'))")
    out = _run(*hosts.exec("a"), sys.executable, "-c", code, check=False).stdout.strip()
    return int(out) if out.isdigit() else None


def _wait(predicate, timeout: float, what: str, leader: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if leader.poll() is not None:
            pytest.fail(f"the leader exited ({leader.returncode}) before {what}:\n{leader.stderr.read()[-4000:]}")
        time.sleep(0.5)
    pytest.fail(f"not within {timeout:g}s: {what}")


def test_two_node_group_starts_one_tritonserver_per_rank_and_dies_with_a_worker(hosts, tmp_path, triton):
    reports = tmp_path / "reports"
    reports.mkdir()
    repo = _repository(tmp_path / "models", reports)
    shm_before = set(_rank_shm())
    worker = _worker(hosts, tmp_path)
    leader = subprocess.Popen([*hosts.exec("a"), "sh", str(SCRIPTS / "leader.sh")],
                              env=_env(tmp_path, hosts, triton, repo), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        expected = {"tensorrt_llm-rank0.json", "preprocessing-rank0.json", "tensorrt_llm-rank1.json"}
        _wait(lambda: {p.name for p in reports.glob("*.json")} >= expected, 120, "every rank loaded", leader)
        _wait(lambda: _http_ready(hosts) == 200, 60, "rank 0 answers /v2/health/ready", leader)
        assert (tmp_path / "mpi" / "hostfile").read_text() == f"{LEADER} slots=1\n{WORKER} slots=1\n"

        records = {p.name: json.loads(p.read_text()) for p in reports.glob("*.json")}
        assert set(records) == expected  # rank 1 loaded tensorrt_llm only
        r0, r1 = records["tensorrt_llm-rank0.json"], records["tensorrt_llm-rank1.json"]
        # rank layout: one rank per host (1 GPU per node), world size 2, rank 0 on the leader
        assert (r0["rank"], r0["size"], r0["local_rank"], r0["netns"]) == ("0", "2", "0", hosts.inode("a"))
        assert (r1["rank"], r1["size"], r1["local_rank"], r1["netns"]) == ("1", "2", "0", hosts.inode("b"))
        assert r0["server"][0] == r1["server"][0] == str(triton.binary)
        assert "--http-port=8000" in r0["server"] and "--model-control-mode=explicit" not in r0["server"]
        assert {"--allow-http=false", "--allow-grpc=false", "--allow-metrics=false", "--model-control-mode=explicit",
                "--load-model=tensorrt_llm"} <= set(r1["server"])
        assert "--backend-config=python,shm-region-prefix-name=rank1_" in r1["server"]

        # The worker "pod" dies (every process in its namespace): mpirun loses its daemon, the leader exits.
        hosts.kill("b")
        try:
            code = leader.wait(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail("the leader kept running after its worker died")
        assert code != 0
        deadline = time.monotonic() + 30
        while hosts.pids("a") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert hosts.pids("a") == []  # rank 0's tritonserver went with it
    finally:
        for proc in (leader, worker):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        # the ranks' stubs die by SIGKILL with their "pods" and leave their shared memory (a pod's /dev/shm goes
        # with it; the namespaces here share the machine's)
        for region in set(_rank_shm()) - shm_before:
            region.unlink(missing_ok=True)


def _rank_shm() -> list[Path]:
    """The python backend's shared memory regions of rank.sh's stubs (prefix rank<N>_)."""
    return list(Path("/dev/shm").glob("rank[0-9]*_*"))


def test_leader_gives_up_on_a_missing_worker_naming_it(hosts, tmp_path, triton):
    env = _env(tmp_path, hosts, triton, tmp_path, WORKER_WAIT_SECONDS="3")
    started = time.monotonic()
    res = subprocess.run([*hosts.exec("a"), "sh", str(SCRIPTS / "leader.sh")], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 1
    assert f"worker {WORKER} did not accept connections on port 2222 within 3s" in res.stderr
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("world, message", [
    ("3", "world size 3 (tp x pp) is not 2 nodes x 1 GPUs per node"),
    ("16", "world size 16 (tp x pp) is not 2 nodes x 1 GPUs per node"),
])
def test_leader_refuses_a_world_size_the_group_does_not_have(hosts, tmp_path, triton, world, message):
    env = _env(tmp_path, hosts, triton, tmp_path, WORLD_SIZE=world)
    res = subprocess.run([*hosts.exec("a"), "sh", str(SCRIPTS / "leader.sh")], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 1 and message in res.stderr, res.stderr
    assert not (tmp_path / "mpi" / "hostfile").exists()


def test_worker_without_the_key_secret_says_so(tmp_path):
    env = dict(os.environ, LWS_LEADER_ADDRESS=LEADER, MPI_SSH_DIR=str(tmp_path / "none"))
    res = subprocess.run(["sh", str(SCRIPTS / "worker.sh")], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 1 and "authorized_keys is missing" in res.stderr
