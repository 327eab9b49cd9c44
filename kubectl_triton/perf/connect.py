"""Where the measured server is: `--url`, or one ready pod of the model reached by port-forwarding through
the Kubernetes API. Also the option parsers bench and tune share."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from kubectl_triton.errors import InputError


@dataclass(frozen=True)
class Where:
    """The target plus how it was reached (`pod` is None for --url)."""

    target: Any
    description: str
    pod: str | None = None


def parse_duration(text: str, option: str) -> float:
    """`10s`, `500ms`, `1m30s` or plain seconds; must be positive."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        value = float(text)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise click.BadParameter(f"{text!r} is not a duration (e.g. 10s, 500ms, 1m)", param_hint=option)
        value = sum(float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u] for n, u in parts)
    if value <= 0:
        raise click.BadParameter("must be positive", param_hint=option)
    return value


def parse_ints(text: str, option: str, *, minimum: int = 1, maximum: int = 4096) -> list[int]:
    """`1,2,4` as a list of distinct ints within [minimum, maximum], in the given order."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers", param_hint=option) from None
    if not values or any(v < minimum or v > maximum for v in values):
        raise click.BadParameter(f"values must be between {minimum} and {maximum}", param_hint=option)
    return list(dict.fromkeys(values))


def repo_owner(model: str, root: Path | None = None) -> str | None:
    """The models/<name>/ folder that holds Triton model `model`, if exactly one does (cwd's repository)."""
    from kubectl_triton.gitops import repo

    try:
        base = root or repo.find_root()
    except InputError:
        return None
    owners = sorted(p.parent.parent.name for p in base.glob(f"models/*/{model}/config.pbtxt"))
    return owners[0] if len(owners) == 1 else None


@contextlib.contextmanager
def open_target(model: str, protocol: str, url: str | None, *, kubeconfig: str | None, context: str | None,
                namespace: str | None, pod: str | None) -> Iterator[Where]:
    """The model at --url, else on a ready pod of its Deployment through a port-forward (closed on exit)."""
    from kubectl_triton.perf.target import connect

    if url:
        target = connect(url, model, protocol)
        yield Where(target, target.url)
        return
    from kubectl_triton.adapters import kube as kube_mod
    from kubectl_triton.adapters.portforward import Forwarder, container_port, pick_pod

    kube = kube_mod.connect(kubeconfig, context, namespace)
    owner = repo_owner(model)
    instances = [model, model.replace("_", "-"), *([owner] if owner else [])]
    chosen = pick_pod(kube, kube.namespace, instances, pod)
    name = chosen["metadata"]["name"]
    port = container_port(chosen, protocol)
    with Forwarder(kube, kube.namespace, name, port) as fw:
        address = fw.address if protocol == "grpc" else f"http://{fw.address}"
        where = Where(connect(address, model, protocol), f"pod {kube.namespace}/{name}:{port} (port-forward)", name)
        try:
            yield where
        except InputError as err:
            if fw.last_error and "cannot reach Triton" in err.message:
                raise InputError(f"port-forward to pod {name}:{port}: {fw.last_error}") from None
            raise
