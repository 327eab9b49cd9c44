"""Who installs a CustomResourceDefinition: what a HelmRelease's chart installs, for the apply-order simulation
(convergence.py).

A HelmRelease names its chart in spec.chart.spec.chart, or through spec.chartRef an OCIRepository (the chart is
the last segment of its URL: oci://quay.io/jetstack/charts/cert-manager) or a HelmChart (its spec.chart).
data/chart_crds.yaml says, per chart, the API groups of the CRDs it installs and the values that switch them
(cert-manager's crds.enabled, external-secrets' installCRDs); `install.crds: Skip` skips them whatever the values.
A chart without data here may install anything: the simulation then says "not checked", naming the HelmRelease
it suspects, instead of an error.

Pure: objects in, facts out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from kubectl_triton.datafiles import data_text
from kubectl_triton.formats import yamlio


@cache
def data() -> dict[str, Any]:
    """data/chart_crds.yaml (charts, Flux and Kubernetes baselines, run-time objects)."""
    return yamlio.load_data(data_text("chart_crds.yaml"), "chart_crds.yaml")


def chart_groups(chart: str) -> tuple[str, ...] | None:
    """API groups the Helm chart installs CRDs of (None: a chart this plugin knows nothing about)."""
    entry = data()["charts"].get(chart)
    return tuple(entry["groups"]) if entry is not None else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _name(obj: dict) -> str:
    return str(_dict(obj.get("metadata")).get("name", ""))


def _ns(obj: dict) -> str | None:
    ns = _dict(obj.get("metadata")).get("namespace")
    return str(ns) if ns else None


_TAG = re.compile(r"(@sha256:[0-9a-f]+|:[^/:@]+)$")


def chart_from_url(url: str) -> str:
    """The chart an OCI URL points at: its last path segment, without a tag or digest
    (oci://ghcr.io/home-operations/charts-mirror/external-dns:1.15 -> external-dns)."""
    last = str(url).strip().rstrip("/").rsplit("/", 1)[-1]
    return _TAG.sub("", last) if "://" in str(url) or "/" in str(url) else last


@dataclass(frozen=True)
class Chart:
    """The chart of a HelmRelease: its name ("" when the chartRef's source is not rendered here) and where the
    name comes from, for messages."""

    name: str
    via: str


def release_chart(release: dict, objects: list[dict]) -> Chart:
    """The chart a HelmRelease installs (`objects`: where to look for its chartRef's OCIRepository/HelmChart; the
    one in the release's namespace, else any of that name)."""
    spec = _dict(release.get("spec"))
    named = _dict(_dict(spec.get("chart")).get("spec")).get("chart")
    if named:
        return Chart(str(named).rstrip("/").rsplit("/", 1)[-1], "spec.chart")
    ref = _dict(spec.get("chartRef"))
    if not ref:
        return Chart("", "no chart")
    kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
    namespace = str(ref.get("namespace") or _ns(release) or "")
    found = [o for o in objects if o.get("kind") == kind and _name(o) == name]
    source = next((o for o in found if (_ns(o) or "") == namespace), found[0] if found else None)
    if source is None:
        return Chart("", f"chartRef {kind}/{name}, not rendered here")
    source_spec = _dict(source.get("spec"))
    if kind == "HelmChart":
        return Chart(str(source_spec.get("chart", "")).rstrip("/").rsplit("/", 1)[-1], f"HelmChart {name}")
    if kind == "OCIRepository":
        return Chart(chart_from_url(str(source_spec.get("url", ""))), f"OCIRepository {name}")
    return Chart("", f"chartRef {kind}/{name}")


def _value(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "yes", "1", "on")


@dataclass(frozen=True)
class ReleaseCRDs:
    """What a HelmRelease installs: `groups` (empty when it installs none), `known` (False: a chart without data
    here, or one whose CRD switch comes from valuesFrom, so it may install anything), and why, for messages."""

    groups: tuple[str, ...]
    known: bool
    chart: str
    why: str


def _crds_switch(switch: dict[str, Any], values: dict[str, Any]) -> tuple[tuple[str, Any] | None, bool]:
    """A chart's CRD switch (its crds_values entry) under `values`: the (key, value) that decides it, None where
    `values` leave it at the chart's default, and whether the chart installs its CRDs."""
    chosen = next(((key, _value(values, key)) for key in switch.get("keys") or []
                   if _value(values, key) is not None), None)
    inverted = bool(switch.get("inverted"))  # the value skips the CRDs (cilium's operator.skipCRDCreation)
    return chosen, (_truthy(chosen[1]) if chosen is not None else bool(switch.get("default"))) != inverted


def release_crds(release: dict, objects: list[dict]) -> ReleaseCRDs:
    """The CRD groups `release` installs (`objects`: the cluster's, for its chartRef source)."""
    spec = _dict(release.get("spec"))
    chart = release_chart(release, objects)
    install = _dict(spec.get("install"))
    if install.get("crds") == "Skip":
        return ReleaseCRDs((), True, chart.name, "install.crds: Skip")
    if not chart.name:
        return ReleaseCRDs((), False, "", chart.via)
    entry = data()["charts"].get(chart.name)
    if entry is None:
        return ReleaseCRDs((), False, chart.name, f"chart {chart.name} has no CRD data here")
    groups = tuple(entry["groups"])
    switch = _dict(entry.get("crds_values"))
    if groups and switch:
        chosen, on = _crds_switch(switch, _dict(spec.get("values")))
        if chosen is None and not on and spec.get("valuesFrom"):
            return ReleaseCRDs((), False, chart.name, f"chart {chart.name}: whether it installs its CRDs comes "
                               f"from valuesFrom ({', '.join(switch.get('keys') or [])})")
        if not on:
            said = f"{chosen[0]}: {chosen[1]}" if chosen is not None else \
                f"{(switch.get('keys') or ['?'])[0]} defaults to {str(switch.get('default')).lower()}"
            return ReleaseCRDs((), True, chart.name, f"chart {chart.name} with {said} installs no CRD")
    return ReleaseCRDs(groups, True, chart.name, f"chart {chart.name}")


def chart_crds_with(chart: str, values: dict[str, Any]) -> tuple[str, ...]:
    """The CRD groups a chart installs with `values` (its own defaults where they do not say): none for a chart
    without data here, or whose CRD switch (crds_values) is off by default and not turned on in `values`."""
    entry = data()["charts"].get(chart)
    if entry is None:
        return ()
    switch = _dict(entry.get("crds_values"))
    return tuple(entry["groups"]) if not switch or _crds_switch(switch, values)[1] else ()


def platform_group(group: str) -> str | None:
    """Who serves `group` when the platform is configured so (Talos), or None."""
    entry = data().get("platform_groups", {}).get(group)
    return str(entry["by"]) if entry is not None else None


_GENERIC = {"io", "com", "dev", "org", "net", "sh", "app", "k8s", "x-k8s", "sigs", "cncf", "github", "home-operations",
            "operator", "crds", "crd", "charts", "helm", "controller", "kubernetes"}


def _tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[.\-_/]", text.lower()) if len(t) >= 3 and t not in _GENERIC}


def suspicion(group: str, release_name: str, chart: str) -> int:
    """How much a HelmRelease looks like the installer of `group` (0: no more than any other): the group's words
    (cert-manager.io: cert, manager) among the chart's and the release's."""
    words = _tokens(group)
    named = _tokens(chart) | _tokens(release_name)
    return len(words & named) * 2 + int(any(w in chart.lower() or w in release_name.lower() for w in words))
