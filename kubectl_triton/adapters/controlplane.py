"""An ephemeral Kubernetes control plane on loopback: real etcd and kube-apiserver binaries (envtest's way).

`validate --server` applies a repository to one when it is given no kube context; the tests start the rest of a
cluster (controller manager, scheduler, kwok) on top of it. Binaries come from `KUBEBUILDER_ASSETS` (the folder
controller-runtime's setup-envtest fills: etcd, kube-apiserver) or from the project's build cache
(`make controlplane`: `$KUBECTL_TRITON_CACHE/controlplane/<version>-<key>/bin`). Certificates are made here: one
CA for serving and client certificates, a client certificate per user (`kubeconfig_for`), a service-account key.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kubectl_triton.errors import ToolMissing, TritonCtlError

REQUIRED = ("etcd", "kube-apiserver")
START_TIMEOUT = 90.0  # seconds for etcd and the API server to answer readyz on a loaded 2-core machine
HOW_TO_GET = ("no etcd and kube-apiserver binaries: set KUBEBUILDER_ASSETS to a folder that has them "
              "(setup-envtest use -p path), or run `make controlplane` in a clone of kubectl-triton")
# Admission plugins enabled beyond the API server's defaults (which include PodSecurity, ServiceAccount,
# NamespaceLifecycle, LimitRanger, ResourceQuota and the admission webhooks), as kubeadm enables them.
EXTRA_ADMISSION = ("NodeRestriction",)


class ControlPlaneError(TritonCtlError):
    """The ephemeral control plane did not start (a binary failed or never became ready)."""


def cache_root() -> Path:
    """Where `make controlplane` keeps its builds (and where validate --server looks for them)."""
    env = os.environ.get("KUBECTL_TRITON_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kubectl-triton"


@dataclass(frozen=True)
class Assets:
    """A folder of control-plane binaries, and the CRD manifests that came with them (None: none did)."""

    bin: Path
    crds: Path | None
    source: str  # how they were found, for messages

    def binary(self, name: str) -> Path:
        return self.bin / name


def find_assets(required: Sequence[str] = REQUIRED) -> Assets:
    """KUBEBUILDER_ASSETS first, then the newest complete build in the cache; ToolMissing naming the way to get
    them when neither has every binary in `required`."""
    env = os.environ.get("KUBEBUILDER_ASSETS")
    if env:
        folder = Path(env)
        missing = [n for n in required if not (folder / n).is_file()]
        if missing:
            raise ToolMissing(f"KUBEBUILDER_ASSETS={env} has no {', '.join(missing)}", hint=HOW_TO_GET)
        crds = folder.parent / "crds" if (folder.parent / "crds").is_dir() else None
        return Assets(folder, crds, f"KUBEBUILDER_ASSETS={env}")
    builds = sorted((p for p in (cache_root() / "controlplane").glob("*/complete")),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for stamp in builds:
        folder = stamp.parent / "bin"
        if all((folder / n).is_file() for n in required):
            crds = stamp.parent / "crds"
            return Assets(folder, crds if crds.is_dir() else None, str(stamp.parent))
    raise ToolMissing(HOW_TO_GET)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------------------------------------ certificates


@dataclass
class _CA:
    key: Any
    cert: Any

    @classmethod
    def new(cls, name: str) -> _CA:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=2))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    def issue(self, common_name: str, organizations: Sequence[str] = (), *, server: bool = False
              ) -> tuple[bytes, bytes]:
        """PEM certificate and key signed by this CA (a serving certificate for 127.0.0.1 when `server`)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        names = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        names += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(x509.Name(names)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                         else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.DNSName("kubernetes.default.svc"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return (cert.public_bytes(serialization.Encoding.PEM),
                key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                  serialization.NoEncryption()))

    def pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return bytes(self.cert.public_bytes(serialization.Encoding.PEM))


def _service_account_keys() -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return (key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                              serialization.NoEncryption()),
            key.public_key().public_bytes(serialization.Encoding.PEM,
                                          serialization.PublicFormat.SubjectPublicKeyInfo))


# ------------------------------------------------------------------------------------------------ processes


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path
    _handle: IO[bytes] | None = None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        if self._handle is not None:
            self._handle.close()


@dataclass
class ControlPlane:
    """etcd and kube-apiserver on loopback ports; `start()` then `kubeconfig_for(user)`; `stop()` ends them."""

    assets: Assets
    workdir: Path | None = None
    apiserver_flags: Sequence[str] = ()
    processes: list[Process] = field(default_factory=list)
    port: int = 0
    _ca: _CA | None = None
    _owns_workdir: bool = False

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def dir(self) -> Path:
        assert self.workdir is not None
        return self.workdir

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="kubectl-triton-controlplane-"))
            self._owns_workdir = True
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        pki = self.dir / "pki"
        pki.mkdir(exist_ok=True)
        self._ca = _CA.new("kubectl-triton-ephemeral-ca")
        (pki / "ca.crt").write_bytes(self._ca.pem())
        serving_cert, serving_key = self._ca.issue("kube-apiserver", server=True)
        (pki / "apiserver.crt").write_bytes(serving_cert)
        (pki / "apiserver.key").write_bytes(serving_key)
        kubelet_cert, kubelet_key = self._ca.issue("kube-apiserver-kubelet-client", ["system:masters"])
        (pki / "kubelet-client.crt").write_bytes(kubelet_cert)
        (pki / "kubelet-client.key").write_bytes(kubelet_key)
        sa_key, sa_pub = _service_account_keys()
        (pki / "sa.key").write_bytes(sa_key)
        (pki / "sa.pub").write_bytes(sa_pub)

        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.spawn("etcd", [str(self.assets.binary("etcd")), "--data-dir", str(self.dir / "etcd"),
                            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                            "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
                            "--unsafe-no-fsync", "--log-level", "warn"])
        self._wait_http(f"{etcd_url}/health", "etcd")
        self.port = free_port()
        self.spawn("kube-apiserver", [
            str(self.assets.binary("kube-apiserver")), "--etcd-servers", etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(self.port),
            "--cert-dir", str(pki), "--tls-cert-file", str(pki / "apiserver.crt"),
            "--tls-private-key-file", str(pki / "apiserver.key"), "--client-ca-file", str(pki / "ca.crt"),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki / "sa.pub"),
            "--service-account-signing-key-file", str(pki / "sa.key"),
            "--service-cluster-ip-range", "10.96.0.0/16", "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", ",".join(EXTRA_ADMISSION), "--allow-privileged=true",
            "--kubelet-client-certificate", str(pki / "kubelet-client.crt"),
            "--kubelet-client-key", str(pki / "kubelet-client.key"),
            "--kubelet-preferred-address-types", "InternalIP", "--disable-http2-serving",
            *self.apiserver_flags])
        admin = self.kubeconfig_for("kubectl-triton-admin", ["system:masters"])
        self._wait_ready(admin)

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> Process:
        """Start one program of the cluster, its output in `<workdir>/logs/<name>.log`."""
        logs = self.dir / "logs"
        logs.mkdir(exist_ok=True)
        log = logs / f"{name}.log"
        handle = log.open("ab")
        try:
            popen = subprocess.Popen(list(argv), stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **(env or {})}, start_new_session=True)
        except OSError as err:
            handle.close()
            raise ControlPlaneError(f"{name}: cannot start {argv[0]}: {err.strerror}") from err
        process = Process(name, popen, log, handle)
        self.processes.append(process)
        return process

    def _failed(self, process: Process, what: str) -> ControlPlaneError:
        last = process.tail(5).replace("\n", " | ")
        return ControlPlaneError(f"{process.name} {what} (log {process.log}): {last}")

    def _wait_http(self, url: str, name: str) -> None:
        process = next(p for p in self.processes if p.name == name)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise self._failed(process, f"exited with code {process.popen.returncode}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - a loopback URL we built
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise self._failed(process, f"did not answer {url} within {START_TIMEOUT:.0f} s")

    def _wait_ready(self, kubeconfig: Path) -> None:
        process = next(p for p in self.processes if p.name == "kube-apiserver")
        pki = self.dir / "pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(self.dir / "users" / "kubectl-triton-admin.crt"),
                                str(self.dir / "users" / "kubectl-triton-admin.key"))
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise self._failed(process, f"exited with code {process.popen.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=5, context=context) as resp:  # noqa: S310
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise self._failed(process, f"was not ready within {START_TIMEOUT:.0f} s")

    def kubeconfig_for(self, user: str, groups: Sequence[str] = (), namespace: str | None = None) -> Path:
        """A kubeconfig file authenticating as `user` (member of `groups`) with a client certificate."""
        import yaml

        assert self._ca is not None, "start() first"
        users = self.dir / "users"
        users.mkdir(exist_ok=True)
        cert, key = self._ca.issue(user, groups)
        (users / f"{user}.crt").write_bytes(cert)
        (users / f"{user}.key").write_bytes(key)
        context: dict[str, Any] = {"cluster": "ephemeral", "user": user}
        if namespace:
            context["namespace"] = namespace
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": user,
               "clusters": [{"name": "ephemeral", "cluster": {
                   "server": self.url, "certificate-authority-data": base64.b64encode(self._ca.pem()).decode()}}],
               "users": [{"name": user, "user": {"client-certificate-data": base64.b64encode(cert).decode(),
                                                 "client-key-data": base64.b64encode(key).decode()}}],
               "contexts": [{"name": user, "context": context}]}
        path = users / f"{user}.kubeconfig"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
        if self._owns_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
