"""The served model, over Triton's HTTP/REST or gRPC API: config, statistics, model control, inference.

`HttpTarget` speaks HTTP/1.1 with keep-alive and Triton's binary tensor extension (no gevent, one
connection per worker); `GrpcTarget` uses tritonclient's generated stubs on one shared channel. Both build
each request's bytes once, so a worker's loop costs one send and one receive."""

from __future__ import annotations

import base64
import http.client
import json
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from kubectl_triton.errors import InputError, ToolMissing
from kubectl_triton.perf import PerfError
from kubectl_triton.perf.inputs import Tensor

TIMEOUT_S = 60.0


class Session(Protocol):
    """One worker's connection: `infer` sends prepared request `variant`; `close` may be called twice."""

    def infer(self, variant: int) -> None: ...
    def close(self) -> None: ...


class Target(Protocol):
    """A served model: what bench and tune need of `HttpTarget` / `GrpcTarget`."""

    model: str
    url: str
    timeout: float

    def config(self) -> dict: ...
    def stats(self) -> dict | None: ...
    def load(self, config: dict | None, files: dict[str, bytes] | None = None) -> None: ...
    def session(self, requests: list[list[Tensor]]) -> Session: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class Split:
    """Triton's own time split over a window (statistics extension): per inference, in µs."""

    count: int
    queue_us: float | None
    compute_us: float | None
    batch: float | None  # inferences per execution (the batch size the batcher formed)


def _num(doc: dict, *path: str) -> int:
    cur: Any = doc
    for key in path:
        cur = (cur or {}).get(key) if isinstance(cur, dict) else None
    return int(cur or 0)


def totals(stats: dict | None) -> dict[str, int] | None:
    """Summed counters of every version of the model from a /v2/models/M/stats document."""
    if not stats:
        return None
    out = dict.fromkeys(("success", "queue_ns", "compute_ns", "executions", "inferences"), 0)
    for m in stats.get("model_stats") or []:
        inf = m.get("inference_stats") or {}
        out["success"] += _num(inf, "success", "count")
        out["queue_ns"] += _num(inf, "queue", "ns")
        out["compute_ns"] += sum(_num(inf, k, "ns") for k in ("compute_input", "compute_infer", "compute_output"))
        out["executions"] += _num(m, "execution_count")
        out["inferences"] += _num(m, "inference_count")
    return out


def split(before: dict[str, int] | None, after: dict[str, int] | None) -> Split:
    """The queue/compute split of the inferences that completed between two `totals`."""
    if before is None or after is None:
        return Split(0, None, None, None)
    count = after["success"] - before["success"]
    if count <= 0:
        return Split(0, None, None, None)
    execs = after["executions"] - before["executions"]
    infs = after["inferences"] - before["inferences"]
    # the counters of one statistics document need not agree: one may count an execution whose inferences it does
    # not yet count (a model without batching measured 44 inferences in 45 executions over a window)
    return Split(count, (after["queue_ns"] - before["queue_ns"]) / count / 1e3,
                 (after["compute_ns"] - before["compute_ns"]) / count / 1e3,
                 max(1.0, infs / execs) if execs > 0 else None)


class HttpTarget:
    """A model on Triton's HTTP endpoint, e.g. http://127.0.0.1:8000."""

    protocol = "http"

    def __init__(self, url: str, model: str, timeout: float = TIMEOUT_S) -> None:
        if "://" not in url:
            url = "http://" + url
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise InputError(f"--url {url}: expected http://HOST:PORT (https is not supported)")
        try:
            port = parts.port or 80
        except ValueError:  # urlsplit checks the port only when asked for it
            raise InputError(f"--url {url}: the port must be a number from 1 to 65535") from None
        self.url = url.rstrip("/")
        self.host, self.port = parts.hostname, port
        self.model = model
        self.timeout = timeout
        self._mpath = f"/v2/models/{quote(model, safe='')}"

    def _request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
            resp = conn.getresponse()
            raw = resp.read()
        except OSError as err:
            raise InputError(f"cannot reach Triton at {self.url}: {err.strerror or err}",
                             hint="is the server up? pass --url or -n NAMESPACE") from None
        except http.client.HTTPException as err:  # e.g. the gRPC port answering HTTP/2
            raise InputError(f"{self.url} does not answer as Triton's HTTP endpoint ({type(err).__name__})",
                             hint="the gRPC port? pass --protocol grpc, or the HTTP port (8000)") from None
        finally:
            conn.close()
        try:
            doc = json.loads(raw) if raw.strip() else None
        except ValueError:
            doc = raw.decode(errors="replace")
        return resp.status, doc

    @staticmethod
    def _error(doc: Any) -> str:
        return doc.get("error", json.dumps(doc)) if isinstance(doc, dict) else str(doc or "")

    def config(self) -> dict:
        status, doc = self._request("GET", f"{self._mpath}/config")
        if status != 200:
            raise InputError(f"model {self.model!r} at {self.url}: {self._error(doc)}",
                             hint="is the model loaded and READY?")
        if not isinstance(doc, dict):
            raise InputError(f"model {self.model!r} at {self.url}: the config reply is not a JSON object "
                             "(not Triton's HTTP endpoint?)")
        return doc

    def stats(self) -> dict | None:
        status, doc = self._request("GET", f"{self._mpath}/stats")
        return doc if status == 200 and isinstance(doc, dict) else None

    def load(self, config: dict | None, files: dict[str, bytes] | None = None) -> None:
        """Model control: (re)load the model, with `config` as the override when given, and `files` ("file:1/x":
        content) in place of the model folder's files (Triton then reads only those)."""
        params = {"config": json.dumps(config)} if config is not None else {}
        params.update({name: base64.b64encode(data).decode() for name, data in (files or {}).items()})
        body = {"parameters": params} if params else {}
        status, doc = self._request("POST", f"/v2/repository/models/{quote(self.model, safe='')}/load", body,
                                    timeout=max(self.timeout, 300))
        if status != 200:
            raise PerfError(f"load {self.model}: {self._error(doc)}")

    def session(self, requests: list[list[Tensor]]) -> HttpSession:
        return HttpSession(self, requests)

    def close(self) -> None:
        """Nothing to close: each request and session opens its own connection."""


class HttpSession:
    """One keep-alive connection and the prepared request bodies."""

    def __init__(self, target: HttpTarget, requests: list[list[Tensor]]) -> None:
        self.target = target
        self.path = f"{target._mpath}/infer"
        self.bodies = []
        for tensors in requests:
            header = json.dumps({
                "inputs": [{"name": t.name, "shape": list(t.shape), "datatype": t.datatype,
                            "parameters": {"binary_data_size": len(t.data)}} for t in tensors],
                "parameters": {"binary_data_output": True}}).encode()
            self.bodies.append((b"".join([header, *(t.data for t in tensors)]), len(header)))
        self.conn: Any = None

    def infer(self, variant: int) -> None:
        body, hlen = self.bodies[variant % len(self.bodies)]
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.target.host, self.target.port,
                                                       timeout=self.target.timeout)
            try:
                self.conn.request("POST", self.path, body=body, headers={
                    "Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(hlen)})
                resp = self.conn.getresponse()
                raw = resp.read()
                break
            except (OSError, http.client.HTTPException) as err:
                self.close()
                if attempt == 2:
                    raise PerfError(f"infer {self.target.model} at {self.target.url}: {err}") from None
        if resp.status != 200:
            try:
                msg = json.loads(raw).get("error", "")
            except (ValueError, AttributeError):
                msg = raw[:200].decode(errors="replace")
            raise PerfError(f"infer {self.target.model}: HTTP {resp.status}: {msg}")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class GrpcTarget:
    """A model on Triton's gRPC endpoint, e.g. 127.0.0.1:8001, through tritonclient's generated stubs."""

    protocol = "grpc"

    def __init__(self, url: str, model: str, timeout: float = TIMEOUT_S) -> None:
        try:
            import grpc
            from tritonclient.grpc import service_pb2, service_pb2_grpc
        except (ImportError, RuntimeError) as err:  # tritonclient raises RuntimeError when its grpc extra is missing
            cause = err.__cause__ or err
            raise ToolMissing(f"the gRPC client cannot be loaded: {type(cause).__name__}: {cause}",
                              hint="pip install 'tritonclient[grpc]', or use --protocol http") from None

        self.url = url.split("://", 1)[-1].rstrip("/")
        self.model, self.timeout = model, timeout
        self.pb = service_pb2
        opts = [("grpc.max_send_message_length", 2**31 - 1), ("grpc.max_receive_message_length", 2**31 - 1)]
        self.channel = grpc.insecure_channel(self.url, options=opts)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def _call(self, name: str, request: Any, what: str, timeout: float | None = None) -> Any:
        import grpc

        try:
            return getattr(self.stub, name)(request, timeout=timeout or self.timeout)
        except grpc.RpcError as err:
            refused = "not allowed" in (err.details() or "")  # Triton answers a refused load UNAVAILABLE too
            if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and \
                    name != "ModelInfer" and not refused:
                raise InputError(f"cannot reach Triton at {self.url} (gRPC): {err.details()}",
                                 hint="is the server up? pass --url or -n NAMESPACE") from None
            raise PerfError(f"{what} {self.model}: {err.details()}") from None

    @staticmethod
    def _dict(message: Any) -> dict:
        from google.protobuf import json_format

        return json_format.MessageToDict(message, preserving_proto_field_name=True)

    def config(self) -> dict:
        resp = self._call("ModelConfig", self.pb.ModelConfigRequest(name=self.model), "config")
        return self._dict(resp).get("config") or {}

    def stats(self) -> dict | None:
        try:
            return self._dict(self._call("ModelStatistics", self.pb.ModelStatisticsRequest(name=self.model),
                                         "stats"))
        except PerfError:
            return None

    def load(self, config: dict | None, files: dict[str, bytes] | None = None) -> None:
        req = self.pb.RepositoryModelLoadRequest(model_name=self.model)
        if config is not None:
            req.parameters["config"].string_param = json.dumps(config)
        for name, data in (files or {}).items():
            req.parameters[name].bytes_param = data
        self._call("RepositoryModelLoad", req, "load", timeout=max(self.timeout, 300))

    def session(self, requests: list[list[Tensor]]) -> GrpcSession:
        return GrpcSession(self, requests)

    def close(self) -> None:
        """Close the shared channel (before a port-forward under it closes)."""
        self.channel.close()


class GrpcSession:
    def __init__(self, target: GrpcTarget, requests: list[list[Tensor]]) -> None:
        self.target = target
        self.requests = []
        for tensors in requests:
            req = target.pb.ModelInferRequest(model_name=target.model)
            for t in tensors:
                inp = req.inputs.add()
                inp.name, inp.datatype = t.name, t.datatype
                inp.shape.extend(t.shape)
                req.raw_input_contents.append(t.data)
            self.requests.append(req)

    def infer(self, variant: int) -> None:
        self.target._call("ModelInfer", self.requests[variant % len(self.requests)], "infer")

    def close(self) -> None:
        pass


def connect(url: str, model: str, protocol: str = "http") -> HttpTarget | GrpcTarget:
    """A target for `model` at `url` over `protocol`."""
    return GrpcTarget(url, model) if protocol == "grpc" else HttpTarget(url, model)
