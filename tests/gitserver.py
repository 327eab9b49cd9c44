"""A git smart-HTTP server on loopback: Debian git's own `git http-backend` (CGI) behind a small HTTP server, so
Flux's source-controller clones a test repository as it clones one from a forge."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit


def _backend() -> str:
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True).stdout.strip()
    return str(Path(exec_path) / "git-http-backend")


class _Handler(BaseHTTPRequestHandler):
    root: Path
    backend: str

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
        pass

    def _cgi(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {"GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": url.path,
               "QUERY_STRING": url.query, "REQUEST_METHOD": self.command, "REMOTE_ADDR": "127.0.0.1",
               "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
               "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""), "PATH": os.environ.get("PATH", "")}
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        proc = subprocess.run([self.backend], input=body, env=env, capture_output=True, timeout=60)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status = 200
        headers = []
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _cgi
    do_POST = _cgi


@contextmanager
def serve(repositories: Path) -> Iterator[str]:
    """Serve every bare repository under `repositories`; yields the base URL (http://127.0.0.1:PORT)."""
    if shutil.which("git") is None:
        raise RuntimeError("git is not installed")
    handler = type("Handler", (_Handler,), {"root": repositories, "backend": _backend()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
