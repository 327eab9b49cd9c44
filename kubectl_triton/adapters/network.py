"""Whether this machine reaches the internet at all, for messages that must tell a repository's broken URL from a
machine without a network (a sandboxed CI runner): one name lookup of a host every remote kustomize resource
needs a resolver for, answered once per process."""

from __future__ import annotations

import functools
import socket
import threading

PROBE_HOST = "github.com"
PROBE_SECONDS = 3.0


@functools.lru_cache(maxsize=1)
def offline() -> bool:
    """True when PROBE_HOST does not resolve within PROBE_SECONDS (no resolver, no route, a refused lookup)."""
    answer: list[bool] = []

    def look() -> None:
        try:
            socket.getaddrinfo(PROBE_HOST, 443, proto=socket.IPPROTO_TCP)
            answer.append(True)
        except OSError:
            answer.append(False)

    worker = threading.Thread(target=look, daemon=True)
    worker.start()
    worker.join(PROBE_SECONDS)
    return not (answer and answer[0])
