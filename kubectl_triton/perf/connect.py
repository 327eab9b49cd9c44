"""Where the measured server is: `--url`, or one ready pod of the model reached by port-forwarding through
the Kubernetes API."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kubectl_triton.adapters import kube as kube_mod
from kubectl_triton.adapters.portforward import Forwarder, container_port, pick_pod
from kubectl_triton.errors import InputError
from kubectl_triton.gitops.model import Repository
from kubectl_triton.perf.target import Target, connect


@dataclass(frozen=True)
class Where:
    """The target plus how it was reached (`pod` is None for --url)."""

    target: Target
    description: str
    pod: str | None = None


def repo_owner(model: str, root: Path | None = None) -> str | None:
    """The models/<name>/ folder that holds Triton model `model`, if exactly one does (cwd's repository)."""
    try:
        repository = Repository.at(root) if root else Repository.find()
    except InputError:
        return None
    owners = [m.name for m in repository.owners_of(model)]
    return owners[0] if len(owners) == 1 else None


@contextlib.contextmanager
def open_target(model: str, protocol: str, url: str | None, *, kubeconfig: str | None, context: str | None,
                namespace: str | None, pod: str | None) -> Iterator[Where]:
    """The model at --url, else on a ready pod of its Deployment through a port-forward (closed on exit)."""
    if url:
        target = connect(url, model, protocol)
        try:
            yield Where(target, target.url)
        finally:
            target.close()
        return
    kube = kube_mod.connect(kubeconfig, context, namespace)
    owner = repo_owner(model)
    instances = [model, model.replace("_", "-"), *([owner] if owner else [])]
    chosen = pick_pod(kube, kube.namespace, instances, pod)
    name = chosen["metadata"]["name"]
    port = container_port(chosen, protocol)
    with Forwarder(kube, kube.namespace, name, port) as fw:
        address = fw.address if protocol == "grpc" else f"http://{fw.address}"
        target = connect(address, model, protocol)
        where = Where(target, f"pod {kube.namespace}/{name}:{port} (port-forward)", name)
        try:
            yield where
        except InputError as err:
            if fw.last_error and "cannot reach Triton" in err.message:
                raise InputError(f"port-forward to pod {name}:{port}: {fw.last_error}") from None
            raise
        finally:
            target.close()
