"""The one adapter for the Kubernetes API.

Every request of the plugin goes through `Kube._request`, and every failure of the `kubernetes` client
(ApiException, urllib3 errors, kubeconfig problems) becomes a one-line `ClusterError` here and nowhere
else. Objects come back as plain dicts in the API's own JSON shape (camelCase), so the diagnosis code is
pure functions over the same documents `kubectl get -o json` shows. Towards a user's cluster only GET requests
are made (get, list, watch, pods/log, the GET pod proxy) and server-side apply dry runs (`apply(dry_run=True)`,
for `validate --server`); real writes go only to the ephemeral control plane validate --server starts itself.
The `kubernetes` package is imported lazily.
"""

from __future__ import annotations

import builtins
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload
from urllib.parse import quote

from kubectl_triton.errors import ClusterError

ALL_NAMESPACES = "*"
SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_ATTEMPTS = 4
REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read (seconds)
PAGE_SIZE = 500  # items per list page (limit/continue), as kubectl's --chunk-size


@dataclass(frozen=True)
class Resource:
    """One API resource: enough to build its REST paths and name it in error messages."""

    plural: str
    group: str  # "" for the core group
    version: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def display(self) -> str:
        """The name kubectl and RBAC use: `deployments.apps`, `pods`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace and namespace != ALL_NAMESPACES:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe=':')}"
        if sub:
            base += f"/{sub}"
        return base


RESOURCES: dict[str, Resource] = {
    "pods": Resource("pods", "", "v1"),
    "nodes": Resource("nodes", "", "v1", namespaced=False),
    "events": Resource("events", "", "v1"),
    "events.k8s.io": Resource("events", "events.k8s.io", "v1"),
    "jobs": Resource("jobs", "batch", "v1"),
    "deployments": Resource("deployments", "apps", "v1"),
    "horizontalpodautoscalers": Resource("horizontalpodautoscalers", "autoscaling", "v2"),
    "kustomizations": Resource("kustomizations", "kustomize.toolkit.fluxcd.io", "v1"),
    "httproutes": Resource("httproutes", "gateway.networking.k8s.io", "v1"),
    "leaderworkersets": Resource("leaderworkersets", "leaderworkerset.x-k8s.io", "v1"),
}


@dataclass(frozen=True)
class HttpError:
    """A non-2xx answer, returned instead of raised where the caller decides what it means."""

    status: int
    reason: str | None
    body: Any
    headers: Any = None


@dataclass(frozen=True)
class ProxyResponse:
    """What came back from a GET through the pod proxy. `error` is set when the API server could not
    reach the pod at all (status is then the API server's, not the pod's)."""

    status: int
    body: str
    error: str | None = None


class Kube:
    """A connected client: the resolved default namespace plus thin GET helpers returning dicts."""

    def __init__(self, api_client: Any, namespace: str, context: str | None = None,
                 request_timeout: float = REQUEST_TIMEOUT[1]) -> None:
        self.api = api_client
        self.timeout = (min(REQUEST_TIMEOUT[0], request_timeout), request_timeout)
        self.namespace = namespace
        self.context = context
        self.requests = 0  # requests sent (retries included), for benchmarks and --verbose tools

    @property
    def host(self) -> str:
        return self.api.configuration.host

    # -- the one place requests are sent and errors translated -------------------------------------
    def _request(self, path: str, query: list[tuple[str, str]] | None = None, *, verb: str,
                 what: str, namespace: str | None, stream: bool = False,
                 timeout: tuple[float, float] | None = None, retry: bool = True,
                 raw_errors: bool = False, method: str = "GET", body: Any = None,
                 content_type: str | None = None) -> Any:
        """Send `method` (GET unless an apply) to `path`; return the urllib3 response (unread when `stream`).
        `verb`/`what`/`namespace` name the request in errors. `raw_errors` returns a non-2xx answer as HttpError
        instead of raising."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config.config_exception import ConfigException
        from urllib3.exceptions import HTTPError, NewConnectionError, ProtocolError
        from urllib3.exceptions import TimeoutError as U3Timeout

        timeout = timeout or self.timeout
        attempts = MAX_ATTEMPTS if retry else 1
        for attempt in range(1, attempts + 1):
            self.requests += 1
            try:
                headers = {"Accept": "application/json"}
                if content_type:
                    headers["Content-Type"] = content_type
                return self.api.call_api(
                    path, method, query_params=query or [], header_params=headers, body=body,
                    auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
                    _request_timeout=timeout)
            except ApiException as err:
                if err.status in RETRY_STATUSES and attempt < attempts:
                    time.sleep(_retry_delay(err, attempt))
                    continue
                if raw_errors:
                    return HttpError(err.status, err.reason, err.body, err.headers)
                raise _translate_status(err, verb, what, namespace, self) from None
            except (HTTPError, ProtocolError, OSError) as err:
                cause = getattr(err, "reason", None) or err  # MaxRetryError wraps the cause
                # (NewConnectionError subclasses ConnectTimeoutError: a refused connection is no timeout)
                if isinstance(cause, U3Timeout) and not isinstance(cause, NewConnectionError):
                    raise ClusterError(f"{verb} {what}: no answer from the Kubernetes API at {self.host} "
                                       f"within {timeout[1]:g}s") from None
                raise ClusterError(f"cannot reach the Kubernetes API at {self.host}: {_root_cause(err)}",
                                   hint=self._context_hint()) from None
            except ConfigException as err:
                raise ClusterError(f"kubeconfig: {err}") from None
            except ValueError as err:  # http.client refusing a header: the kubeconfig's credentials
                raise ClusterError(f"{verb} {what}: the kubeconfig's credentials cannot be sent ({err})",
                                   hint="check the user's token or tokenFile in the kubeconfig") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _context_hint(self) -> str:
        return f"context {self.context!r}: is the cluster up and the server URL right?" if self.context \
            else "is the cluster up and the server URL right?"

    def _json(self, resp: Any, request: str = "request") -> Any:
        """The response body as JSON; a body cut short or not JSON is a one-line ClusterError."""
        from urllib3.exceptions import HTTPError

        try:
            return json.loads(resp.data)
        except (HTTPError, OSError) as err:
            raise ClusterError(f"{request}: the answer from {self.host} broke off: {_root_cause(err)}") from None
        except (ValueError, RecursionError):
            raise ClusterError(f"{request}: the answer from {self.host} is not valid JSON (truncated?)") from None
        finally:
            resp.release_conn()

    # -- helpers --------------------------------------------------------------------------------------
    @overload
    def list(self, resource: str, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, page_size: int | None = None) -> tuple[list[dict], str]: ...

    @overload
    def list(self, resource: str, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, tolerate: tuple[int, ...],
             page_size: int | None = None) -> tuple[list[dict], str] | None: ...

    def list(self, resource: str, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, tolerate: tuple[int, ...] = (),
             page_size: int | None = None) -> tuple[list[dict], str] | None:
        """All objects of `resource` in `namespace` (ALL_NAMESPACES for every namespace), with the list's
        resourceVersion (where a watch starts), read in pages of `page_size` (limit/continue; 0: one
        request). An answer whose HTTP status is in `tolerate` (404: the API is not served, e.g. a CRD not
        installed; 403: not allowed at this scope) gives None. A continue token that expired mid-way (410)
        restarts the list once, unpaged, as kubectl does."""
        res = RESOURCES[resource]
        ns = namespace or self.namespace
        page_size = PAGE_SIZE if page_size is None else page_size
        items: list[dict] = []
        token, kind, rv = "", "List", ""
        while True:
            query = _selectors(label_selector, field_selector)
            if page_size:
                query.append(("limit", str(page_size)))
            if token:
                query.append(("continue", token))
            resp = self._request(res.path(ns), query, verb="list", what=res.display, namespace=ns,
                                 raw_errors=True)
            if isinstance(resp, HttpError):
                if resp.status == 410 and token and page_size:
                    return self.list(resource, namespace, label_selector=label_selector,
                                     field_selector=field_selector, tolerate=tolerate, page_size=0)
                if resp.status in tolerate:
                    return None
                raise _translate_status(resp, "list", res.display, ns, self)
            doc = self._json(resp, f"list {res.display} {_scope(ns)}")
            kind = doc.get("kind", "List").removesuffix("List")
            items += doc.get("items") or []
            meta = doc.get("metadata") or {}
            rv = meta.get("resourceVersion", "") or rv
            token = meta.get("continue") or ""
            if not token:
                break
        for item in items:  # lists omit kind/apiVersion on items; restore them
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", res.api_version)
        return items, rv

    def get(self, resource: str, name: str, namespace: str | None = None) -> dict | None:
        """One object, or None when it does not exist."""
        res = RESOURCES[resource]
        ns = namespace or self.namespace
        resp = self._request(res.path(ns, name), verb="get", what=f"{res.display} {name}", namespace=ns,
                             raw_errors=True)
        if isinstance(resp, HttpError):
            if resp.status == 404:
                return None
            raise _translate_status(resp, "get", f"{res.display} {name}", ns, self)
        return self._json(resp, f"get {res.display} {name} {_scope(ns)}")

    def watch(self, resource: str, namespace: str | None = None, *, resource_version: str = "",
              label_selector: str | None = None, field_selector: str | None = None,
              timeout_seconds: int = 300) -> Iterator[dict]:
        """The API's watch: yields events {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}
        until the server ends the stream (after `timeout_seconds`) or the caller stops iterating.
        An ERROR event with code 410 means `resource_version` expired: list again."""
        res = RESOURCES[resource]
        ns = namespace or self.namespace
        query = _selectors(label_selector, field_selector) + [
            ("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(int(timeout_seconds)))]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        resp = self._request(res.path(ns), query, verb="watch", what=res.display, namespace=ns, stream=True,
                             timeout=(self.timeout[0], timeout_seconds + 15.0))
        from urllib3.exceptions import HTTPError

        pending = b""
        try:
            for chunk in resp.stream(amt=None, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        except (HTTPError, OSError):
            return  # the stream broke: the caller re-watches from its last resourceVersion
        finally:
            resp.release_conn()

    def get_path(self, path: str, what: str) -> Any:
        """GET any API path (discovery: /api, /apis/GROUP/VERSION) as JSON; a non-2xx answer is an HttpError."""
        resp = self._request(path, verb="get", what=what, namespace=None, raw_errors=True)
        return resp if isinstance(resp, HttpError) else self._json(resp, f"get {what}")

    def apply(self, path: str, obj: dict, *, dry_run: bool, field_manager: str, what: str
              ) -> tuple[dict, builtins.list[str]] | HttpError:
        """Server-side apply of `obj` at its object `path` (force, strict field validation, as Flux's
        kustomize-controller applies); `dry_run` persists nothing. The stored (or would-be) object with the
        server's warnings (`Warning` headers: PodSecurity, deprecations), or its refusal as an HttpError."""
        query = [("fieldManager", field_manager), ("force", "true"), ("fieldValidation", "Strict")]
        if dry_run:
            query.append(("dryRun", "All"))
        resp = self._request(path, query, verb="apply", what=what, namespace=None, raw_errors=True,
                             method="PATCH", body=obj, content_type="application/apply-patch+yaml")
        if isinstance(resp, HttpError):
            return resp
        warnings = [_warning_text(w) for w in resp.headers.getlist("Warning")]
        return self._json(resp, f"apply {what}"), warnings

    def log(self, namespace: str, pod: str, container: str, *, previous: bool = False,
            tail_lines: int = 60) -> str:
        """The last lines of a container's log ("" when there is none, e.g. no previous instance)."""
        query = [("container", container), ("tailLines", str(tail_lines))]
        if previous:
            query.append(("previous", "true"))
        path = RESOURCES["pods"].path(namespace, pod, "log")
        resp = self._request(path, query, verb="get", what=f"pods/log {pod}", namespace=namespace,
                             raw_errors=True)
        if isinstance(resp, HttpError):
            if resp.status in (400, 404):  # no previous container / pod gone / container not started
                return ""
            raise _translate_status(resp, "get", f"pods/log {pod}", namespace, self)
        try:
            return resp.data.decode("utf-8", "replace")
        finally:
            resp.release_conn()

    def proxy_get(self, namespace: str, pod: str, port: int, path: str,
                  timeout: float = 5.0) -> ProxyResponse:
        """GET `path` on the pod's `port` through the API server (the pods/proxy subresource; no local
        port is opened). A 403 raises like any forbidden request; the pod's own status codes and the API
        server's "cannot reach the pod" answers come back as a ProxyResponse."""
        api_path = RESOURCES["pods"].path(namespace, f"{pod}:{port}", "proxy/" + path.lstrip("/"))
        try:
            resp = self._request(api_path, verb="get", what=f"pods/proxy {pod}", namespace=namespace,
                                 timeout=(self.timeout[0], min(timeout, self.timeout[1])), retry=False,
                                 raw_errors=True)
        except ClusterError as err:
            return ProxyResponse(0, "", err.message)
        if isinstance(resp, HttpError):
            if resp.status in (401, 403):
                raise _translate_status(resp, "get", f"pods/proxy {pod}", namespace, self,
                                        hint="pass --no-probe to skip the Triton probe")
            status = _status_doc(resp)
            if status is not None:  # the API server's own answer: the pod could not be reached
                return ProxyResponse(resp.status, "", status.get("message") or f"HTTP {resp.status}")
            return ProxyResponse(resp.status, (resp.body or b"").decode("utf-8", "replace")
                                 if isinstance(resp.body, bytes) else str(resp.body or ""))
        try:
            return ProxyResponse(resp.status, resp.data.decode("utf-8", "replace"))
        finally:
            resp.release_conn()


# -- construction ----------------------------------------------------------------------------------------

def connect(kubeconfig: str | None = None, context: str | None = None,
            namespace: str | None = None, request_timeout: float = REQUEST_TIMEOUT[1]) -> Kube:
    """A client configured as kubectl would be: --kubeconfig (or $KUBECONFIG, colon-separated files
    merged), else ~/.kube/config, else the in-cluster service account. The namespace is the flag's,
    else the context's, else the pod's (in-cluster), else `default`."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException
    from urllib3.util.retry import Retry

    cfg = client.Configuration()
    files = kubeconfig or os.environ.get("KUBECONFIG") or ""
    default_file = Path("~/.kube/config").expanduser()
    use_file = bool(files) or default_file.exists()
    in_cluster = not use_file and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    ctx_name: str | None = context
    ctx_namespace: str | None = None
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)
            ctx_namespace = _read_sa_namespace()
        elif use_file:
            path = files or str(default_file)
            missing = [p for p in path.split(os.pathsep) if p and not Path(p).expanduser().exists()]
            if missing and len(missing) == len([p for p in path.split(os.pathsep) if p]):
                raise ClusterError(f"kubeconfig {path}: no such file")
            contexts, active = config.list_kube_config_contexts(config_file=path)
            chosen = next((c for c in contexts if c["name"] == context), None) if context else active
            if context and chosen is None:
                raise ClusterError(f"context {context!r} not found in kubeconfig {path}",
                                   hint="kubectl config get-contexts lists them")
            ctx_name = (chosen or {}).get("name")
            ctx_namespace = ((chosen or {}).get("context") or {}).get("namespace")
            config.load_kube_config(config_file=path, context=context, client_configuration=cfg,
                                    persist_config=False)
        else:
            raise ClusterError("no kubeconfig: pass --kubeconfig, set KUBECONFIG, or create ~/.kube/config")
    except ConfigException as err:
        raise ClusterError(f"kubeconfig: {str(err).splitlines()[0]}") from None
    except (OSError, ValueError) as err:
        raise ClusterError(f"kubeconfig: {err}") from None
    except (AttributeError, TypeError, KeyError, IndexError) as err:  # a kubeconfig of the wrong shape
        where = files or str(default_file)
        raise ClusterError(f"kubeconfig {where}: malformed ({type(err).__name__}); expected a Config with "
                           "clusters, users and contexts lists") from None
    except Exception as err:  # noqa: BLE001 - the YAML parser's errors, without importing yaml here
        if type(err).__module__.split(".")[0] != "yaml":
            raise
        where = files or str(default_file)
        raise ClusterError(f"kubeconfig {where}: invalid YAML: {str(err).splitlines()[0]}") from None
    _trim_token(cfg)
    hook = cfg.refresh_api_key_hook  # a tokenFile is read again before each request (rotated tokens)
    if hook is not None:
        def refresh(c: Any) -> None:
            hook(c)  # the kubeconfig loader installs its own hook again while it refreshes
            _trim_token(c)
            c.refresh_api_key_hook = refresh
        cfg.refresh_api_key_hook = refresh
    # One quick retry on a refused connection, none on reads (a watch must never be replayed blindly).
    cfg.retries = Retry(total=1, connect=1, read=0, status=0, redirect=0, backoff_factor=0.2,
                        respect_retry_after_header=False)  # 429/5xx are retried in Kube._request
    return Kube(client.ApiClient(cfg), namespace or ctx_namespace or "default", ctx_name, request_timeout)


def _trim_token(cfg: Any) -> None:
    """A token read from a file ending in a newline (echo $TOKEN > file), trimmed as kubectl trims it."""
    auth = cfg.api_key.get("authorization")
    if isinstance(auth, str):
        cfg.api_key["authorization"] = auth.strip()


def _read_sa_namespace() -> str | None:
    try:
        return SA_NAMESPACE_FILE.read_text().strip() or None
    except OSError:
        return None


# -- error translation ----------------------------------------------------------------------------------

def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str]]:
    query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


def _retry_delay(err: Any, attempt: int) -> float:
    """Retry-After when the server sends one (capped), else exponential backoff from 0.2 s."""
    headers = getattr(err, "headers", None) or {}
    try:
        return min(float(headers.get("Retry-After", "")), 5.0)
    except (TypeError, ValueError):
        return 0.2 * 2 ** (attempt - 1)


def _status_doc(err: Any) -> dict | None:
    """The API server's Status object in an error body, if the body is one."""
    body = err.body.decode("utf-8", "replace") if isinstance(err.body, bytes) else err.body
    try:
        doc = json.loads(body or "")
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("kind") == "Status" else None


def _scope(namespace: str | None) -> str:
    return "in all namespaces" if not namespace or namespace == ALL_NAMESPACES else f"in namespace {namespace!r}"


def _translate_status(err: Any, verb: str, what: str, namespace: str | None, kube: Kube,
                      hint: str | None = None) -> ClusterError:
    """An HTTP error answer from the API server as one line naming the request."""
    status = _status_doc(err) or {}
    detail = ((status.get("message") or err.reason or "").strip().splitlines() or [""])[0]
    if err.status == 401:
        return ClusterError(f"unauthorized: the API server at {kube.host} rejected the credentials"
                            + (f" of context {kube.context!r}" if kube.context else ""),
                            hint="log in again or refresh the token in your kubeconfig")
    if err.status == 403:
        return ClusterError(f"forbidden: {verb} {what} {_scope(namespace)} was refused ({detail})",
                            hint=hint or "bind the ClusterRole in rbac/ to your user (read-only: get, list, "
                                         "watch, pods/log, pods/proxy get)")
    if err.status == 404:
        return ClusterError(f"not found: {verb} {what} {_scope(namespace)}: {detail}")
    return ClusterError(f"{verb} {what} {_scope(namespace)}: API server answered {err.status}: {detail}")


def _warning_text(header: str) -> str:
    """The text of one RFC 7234 Warning header as the API server sends it: `299 - "text"`."""
    parts = header.split(" ", 2)
    text = parts[2] if len(parts) == 3 and parts[0].isascii() and parts[0].isdigit() else header
    return text.strip().removeprefix('"').removesuffix('"').replace('\\"', '"')


def _root_cause(err: BaseException) -> str:
    """The innermost reason of a urllib3 error, e.g. `connection refused`."""
    reason = getattr(err, "reason", None)
    while reason is not None and getattr(reason, "reason", None) is not None:
        reason = reason.reason
    text = str(reason or err)
    for marker in ("Connection refused", "Name or service not known", "timed out", "No route to host"):
        if marker.lower() in text.lower():
            return marker.lower()
    return text.split(": ")[-1] if ": " in text else text
