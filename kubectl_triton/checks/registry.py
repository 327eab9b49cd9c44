"""The check registry: every finding code `validate` and `check-models` can report, declared once.

A check is a small declarative unit (kube-linter style): a PascalCase code, a severity, a scope, a one-line
description and a remediation. Rule functions are pure functions over the repository that build their findings
through the check (`CHECK.finding(message, path=..., ...)`), so no code exists outside the registry.
`kubectl triton validate --list-checks` and docs/checks.md are generated from it."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Literal

from kubectl_triton.checks.findings import Finding, Severity

Scope = Literal["model", "overlay", "cluster", "repository"]
SEVERITIES: tuple[str, ...] = ("error", "warning", "info")
SCOPES: tuple[str, ...] = ("model", "overlay", "cluster", "repository")
_CODE = re.compile(r"[A-Z][A-Za-z0-9]+")

# Every module that declares checks; importing them fills REGISTRY (listed, never discovered by file presence).
CHECK_MODULES: tuple[str, ...] = (
    "kubectl_triton.checks.gate",
    "kubectl_triton.checks.model.config",
    "kubectl_triton.checks.model.ensemble",
    "kubectl_triton.checks.model.tensorrtllm",
    "kubectl_triton.checks.model.modelrepo",
    "kubectl_triton.checks.model.triton",
    "kubectl_triton.checks.manifests.security",
    "kubectl_triton.checks.manifests.practices",
    "kubectl_triton.checks.manifests.routes",
    "kubectl_triton.checks.manifests.modelrewrites",
    "kubectl_triton.checks.manifests.enginebuild",
    "kubectl_triton.checks.manifests.monitoring",
    "kubectl_triton.checks.manifests.multinode",
    "kubectl_triton.checks.manifests.nodecache",
    "kubectl_triton.checks.manifests.convergence",
    "kubectl_triton.checks.manifests.gpufacts",
    "kubectl_triton.checks.server",
    "kubectl_triton.compat.repo_check",
)


@dataclass(frozen=True)
class Check:
    """One finding code and what it means."""

    code: str
    severity: Severity
    scope: Scope
    description: str
    remediation: str

    def finding(self, message: str, *, path: str | None = None, line: int | None = None, model: str | None = None,
                object: str | None = None, severity: Severity | None = None) -> Finding:
        """A finding of this check (`severity` overrides the declared one where a rule grades the case)."""
        return Finding(severity or self.severity, self.code, message, path=path, line=line, model=model,
                       object=object)

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "scope": self.scope,
                "description": self.description, "remediation": self.remediation}


REGISTRY: dict[str, Check] = {}


def register(code: str, severity: Severity, scope: Scope, description: str, remediation: str) -> Check:
    """Declare a check; codes are unique PascalCase words."""
    if not _CODE.fullmatch(code):
        raise ValueError(f"check code {code!r} is not PascalCase")
    if severity not in SEVERITIES or scope not in SCOPES:
        raise ValueError(f"check {code}: bad severity {severity!r} or scope {scope!r}")
    if code in REGISTRY:
        raise ValueError(f"check code {code} is declared twice")
    check = Check(code, severity, scope, description, remediation)
    REGISTRY[code] = check
    return check


def all_checks() -> list[Check]:
    """Every declared check, sorted by code (imports the check modules once)."""
    for name in CHECK_MODULES:
        importlib.import_module(name)
    return sorted(REGISTRY.values(), key=lambda c: c.code)
