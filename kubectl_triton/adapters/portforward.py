"""Port-forwarding to a pod through the Kubernetes API, as `kubectl port-forward` does: the pods/portforward
subresource over a websocket (v4.channel.k8s.io), one websocket per local TCP connection.

`Forwarder` listens on a free 127.0.0.1 port and bridges every accepted connection to the pod's port, so
any client (HTTP keep-alive, gRPC) can use `127.0.0.1:<local_port>`. RBAC: `create` (older clusters:
`get`) on pods/portforward. `pick_pod` chooses one ready Triton pod of a model."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from typing import Any

from kubectl_triton.errors import ClusterError

TRITON_SELECTOR = "app.kubernetes.io/name=triton-inference-server"
INSTANCE_LABEL = "app.kubernetes.io/instance"
DEFAULT_PORTS = {"http": 8000, "grpc": 8001}


def _ready(pod: dict) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def container_port(pod: dict, name: str) -> int:
    """The pod's container port named `name` (http, grpc), else Triton's default."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == name and p.get("containerPort"):
                return int(p["containerPort"])
    return DEFAULT_PORTS[name]


def pick_pod(kube: Any, namespace: str, instances: list[str], pod: str | None = None) -> dict:
    """The named pod, else the first ready Triton pod (by name) whose instance label is one of `instances`."""
    if pod:
        obj = kube.get("pods", pod, namespace)
        if obj is None:
            raise ClusterError(f"pod {pod} not found in namespace {namespace!r}")
        if not _ready(obj):
            raise ClusterError(f"pod {pod} in namespace {namespace!r} is not ready")
        return obj
    pods, _ = kube.list("pods", namespace, label_selector=TRITON_SELECTOR)
    ready = sorted((p for p in pods if _ready(p)), key=lambda p: p["metadata"]["name"])
    mine = [p for p in ready if ((p["metadata"].get("labels") or {}).get(INSTANCE_LABEL)) in instances]
    if mine:
        return mine[0]
    seen = sorted({(p["metadata"].get("labels") or {}).get(INSTANCE_LABEL, "?") for p in ready})
    raise ClusterError(f"no ready Triton pod of {' / '.join(dict.fromkeys(instances))} in namespace {namespace!r}"
                       + (f" (ready instances: {', '.join(seen)})" if seen else ""),
                       hint="pass --pod NAME, or check `kubectl triton status`")


def _translate(err: BaseException, namespace: str, pod: str, host: str) -> ClusterError:
    text = str(getattr(err, "reason", None) or err)
    m = re.search(r"Handshake status (\d{3})", text)
    code = int(m.group(1)) if m else None
    if code in (401,):
        return ClusterError(f"unauthorized: the API server at {host} rejected the credentials")
    if code == 403:
        return ClusterError(f"forbidden: port-forward to pod {pod} in namespace {namespace!r} was refused",
                            hint="bench needs `create` on pods/portforward; or pass --url")
    if code == 404:
        return ClusterError(f"not found: pod {pod} in namespace {namespace!r}")
    if code:
        return ClusterError(f"port-forward to pod {pod}: API server answered {code}")
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return ClusterError(f"port-forward to pod {pod}: cannot reach the Kubernetes API at {host}: {first}")


PROXY_THREAD = "Kubernetes port forward proxy"
_hook_lock = threading.Lock()
_proxy_errors: list[str] = []


def _quiet_proxy_threads() -> None:
    """Keep a socket error that ends one of the kubernetes client's port-forward proxy threads (the peer
    reset a connection that was done anyway) off stderr: it is recorded, not printed as a thread traceback.
    Every other thread's exception goes to the previous hook."""
    with _hook_lock:
        previous = threading.excepthook
        if getattr(previous, "_kubectl_triton", False):
            return

        def hook(args: threading.ExceptHookArgs) -> None:
            name = getattr(args.thread, "name", "") or ""
            if name.startswith(PROXY_THREAD) and isinstance(args.exc_value, OSError):
                _proxy_errors.append(f"{name}: {args.exc_value}")
                return
            previous(args)

        hook._kubectl_triton = True  # type: ignore[attr-defined]
        threading.excepthook = hook


class Forwarder:
    """`with Forwarder(kube, ns, pod, port) as fw:` — clients connect to `fw.address`."""

    def __init__(self, kube: Any, namespace: str, pod: str, port: int) -> None:
        from kubernetes import client

        self.kube, self.namespace, self.pod, self.port = kube, namespace, pod, port
        self._api = client.CoreV1Api(client.ApiClient(kube.api.configuration))  # its own client: stream() patches it
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self.connections = 0
        self.last_error: str | None = None

    @property
    def address(self) -> str:
        assert self._listener is not None
        return f"127.0.0.1:{self._listener.getsockname()[1]}"

    def _open(self) -> Any:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import portforward

        with self._lock:  # portforward() swaps the client's request method while it connects
            try:
                pf = portforward(self._api.connect_get_namespaced_pod_portforward, self.pod, self.namespace,
                                 ports=str(self.port))
            except (ApiException, OSError) as err:
                raise _translate(err, self.namespace, self.pod, self.kube.host) from None
        self.connections += 1
        return pf

    def start(self) -> Forwarder:
        """Check the API lets us forward (one websocket, closed at once), then listen."""
        _quiet_proxy_threads()
        self._open().close()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        threading.Thread(target=self._accept, daemon=True, name="port-forward").start()
        return self

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="port-forward-conn").start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            pf = self._open()
        except ClusterError as err:
            self.last_error = err.message
            conn.close()
            return
        remote = pf.socket(self.port)

        def record() -> None:
            problem = pf.error(self.port)
            if problem:
                self.last_error = problem.strip()

        def pump(src: Any, dst: Any, at_end: Any = None) -> None:
            try:
                while True:
                    data = src.recv(256 * 1024)
                    if not data:
                        break
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                if at_end:  # the pod's side ended: its error (e.g. connection refused) is known before the client's
                    at_end()
                with contextlib.suppress(OSError):  # pass the end on (a half close): the other direction drains
                    dst.shutdown(socket.SHUT_WR)

        pumps = [threading.Thread(target=pump, args=(remote, conn, record), daemon=True, name="port-forward-pump"),
                 threading.Thread(target=pump, args=(conn, remote), daemon=True, name="port-forward-pump")]
        for th in pumps:
            th.start()
        for th in pumps:
            th.join()
        for s in (conn, remote):
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()

    def __enter__(self) -> Forwarder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
