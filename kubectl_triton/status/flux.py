"""Flux's side of a model's status: the Kustomizations that apply a workload, and what their conditions say."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kubectl_triton.status.model import SEV_FAILED, SEV_PROGRESSING, SEV_WARNING, Reason
from kubectl_triton.status.objects import condition, first_line, ns_name, short_revision
from kubectl_triton.status.reasons import reason

FLUX_PROGRESSING = {"Progressing", "ProgressingWithRetry", "DependencyNotReady"}
FLUX_RETRYING = {"HealthCheckFailed"}  # Flux retries; the pod-level reasons say why


def kustomizations_of(deployment: dict, kustomizations: Iterable[dict]) -> list[dict]:
    """Flux Kustomizations whose status.inventory holds the Deployment (id `ns_name_apps_Deployment`; for a
    LeaderWorkerSet `ns_name_leaderworkerset.x-k8s.io_LeaderWorkerSet`)."""
    ns, name = ns_name(deployment)
    api_version = str(deployment.get("apiVersion") or "apps/v1")
    group = api_version.split("/")[0] if "/" in api_version else ""
    wanted = f"{ns}_{name}_{group}_{deployment.get('kind') or 'Deployment'}"
    return [k for k in kustomizations
            if any(e.get("id") == wanted for e in (((k.get("status") or {}).get("inventory") or {})
                                                    .get("entries") or []))]


_WAITED_FOR = re.compile(r"(\w+)/([^/\s\[\]]+)/([^\s\[\]]+) status: '")  # Flux: [Deployment/ns/name status: '...']


def _stale_health_check(ready: dict, workload: tuple[str, str, str] | None) -> bool:
    """A health check Flux gave up on while the workload was still rolling out, the workload healthy since:
    Flux's message names only this workload (or names nothing), and the workload has no reason of its own.
    Flux says Ready again at its next reconciliation."""
    if workload is None or ready.get("reason") not in FLUX_RETRYING:
        return False
    waited = _WAITED_FOR.findall(str(ready.get("message") or ""))
    return all(tuple(w) == workload for w in waited)


def flux_reasons(k: dict, settled: tuple[str, str, str] | None = None) -> list[Reason]:
    """The Kustomization's reasons; `settled`: (kind, namespace, name) of the workload it applies, when that is
    rolled out and has no reason of its own."""
    ns, name = ns_name(k)
    ref = f"Kustomization {ns}/{name}"
    spec, status = k.get("spec") or {}, k.get("status") or {}
    out = []
    if spec.get("suspend"):
        out.append(reason("FluxSuspended", f"{ref} is suspended: merged changes are not applied", SEV_WARNING))
    ready = condition(k, "Ready")
    stale = ready is not None and ready.get("status") == "False" and _stale_health_check(ready, settled)
    if stale and ready is not None:
        out.append(reason("FluxNotReady", f"{ref} is not ready ({ready.get('reason')}): "
                          f"{first_line(ready.get('message'))}; {'/'.join(settled or ())} has rolled out since, "
                          f"and Flux says Ready at its next reconciliation (at once: flux reconcile kustomization "
                          f"{name} -n {ns})", SEV_PROGRESSING, situation="flux-reconciling"))
    elif ready and ready.get("status") == "False":
        rsn = ready.get("reason", "")
        if rsn in FLUX_PROGRESSING:
            sev, terminal, situation = SEV_PROGRESSING, False, "flux-reconciling"
        else:
            sev, terminal, situation = SEV_FAILED, rsn not in FLUX_RETRYING, None
        out.append(reason("FluxNotReady", f"{ref} is not ready ({rsn}): {first_line(ready.get('message'))}",
                          sev, terminal=terminal, situation=situation))
    elif ready and ready.get("status") == "Unknown":
        out.append(reason("FluxNotReady", f"{ref} is reconciling ({ready.get('reason', '')}): "
                          f"{first_line(ready.get('message'))}", SEV_PROGRESSING, situation="flux-reconciling"))
    applied, attempted = status.get("lastAppliedRevision"), status.get("lastAttemptedRevision")
    if attempted and attempted != applied:
        failed = (ready is not None and ready.get("status") == "False" and ready.get("reason") not in FLUX_PROGRESSING
                  and not stale)
        out.append(reason("FluxRevisionBehind", f"{ref} attempted {short_revision(attempted)} but the cluster "
                          f"runs {short_revision(applied) or 'nothing applied yet'}",
                          SEV_FAILED if failed else SEV_PROGRESSING))
    return out
