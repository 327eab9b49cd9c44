"""Monitoring: which metric names dashboards and alert rules may use (the exporters' names, kept as data in
data/metrics.yaml, and the names a PromQL expression or a Grafana dashboard references); the queries
prometheus-adapter renders for an HPA and the HPA's replica formula; and, for `validate`, whether the Prometheus of
the repository's kube-prometheus-stack HelmRelease (install mode) or the existing Prometheus the layout file declares
(existing mode) selects every ServiceMonitor, PodMonitor and PrometheusRule."""

from __future__ import annotations

import math
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.registry import register
from kubectl_triton.formats import yamlio
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops.model import LAYOUT_FILE, Layout

NOT_SELECTED = register("MonitorNotSelected", "warning", "repository",
                        "a ServiceMonitor, PodMonitor or PrometheusRule (or the GPU Operator's DCGM ServiceMonitor) "
                        "lacks the labels the repository's Prometheus selects it by: never scraped or loaded",
                        "add the selector's labels (kube-prometheus-stack: release: <its Helm release name>; an "
                        "existing Prometheus: the layout file's monitoring selectors) to its metadata.labels "
                        "(dcgmExporter.serviceMonitor.additionalLabels for DCGM)")
NOT_JUDGED = register("MonitorsNotJudged", "info", "repository",
                      "the repository renders ServiceMonitors, PodMonitors or PrometheusRules, but neither a "
                      "kube-prometheus-stack HelmRelease of its own nor the layout file's `monitoring:` section names "
                      "the Prometheus that selects them: MonitorNotSelected was not checked",
                      "declare the cluster's Prometheus in kubectl-triton.yaml (`monitoring: {mode: existing, "
                      "prometheusUrl: ..., serviceMonitorSelector: ...}`, docs/layout-file.md), or install "
                      "kube-prometheus-stack from the repository")

SUFFIXES: dict[str, tuple[str, ...]] = {"summary": ("", "_sum", "_count"), "histogram": ("_bucket", "_sum", "_count")}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:$.])[a-zA-Z_:][\w:]*(?![\w:])")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan", "atan2"}
_LABEL_VALUES = re.compile(r"label_values\(\s*([a-zA-Z_:][\w:]*)")


@cache
def catalog() -> dict[str, dict[str, dict[str, Any]]]:
    """exporter -> metric name -> {type, cpu?, help}."""
    text = (resources.files("kubectl_triton") / "data" / "metrics.yaml").read_text("utf-8")
    return yamlio.load_data(text, "metrics.yaml")


def known_names(exporters: tuple[str, ...] | None = None) -> set[str]:
    """Every series name the exporters produce (summaries with _sum and _count)."""
    names: set[str] = set()
    for exporter, metrics in catalog().items():
        if exporters is None or exporter in exporters:
            for name, info in metrics.items():
                names.update(name + s for s in SUFFIXES.get(str(info.get("type")), ("",)))
    return names


def promql_metrics(expr: str) -> set[str]:
    """Metric names an expression selects (functions, keywords, labels, durations and $variables left out)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "{}", text)
    text = re.sub(r"\[[^\]]*\]", "[]", text)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    out = set()
    for m in _IDENT.finditer(text):
        name = m.group(0)
        if name.lower() in _KEYWORDS or text[m.end():].lstrip().startswith("("):
            continue
        out.add(name)
    return out


def dashboard_queries(dashboard: dict) -> list[str]:
    """Every PromQL expression of a Grafana dashboard: panel targets (rows' nested panels too) and the
    metric of each label_values() template variable."""
    exprs: list[str] = []

    def panels(items: list) -> None:
        for p in items or []:
            exprs.extend(t["expr"] for t in p.get("targets") or [] if t.get("expr"))
            panels(p.get("panels") or [])

    panels(dashboard.get("panels") or [])
    for var in (dashboard.get("templating") or {}).get("list") or []:
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if var.get("type") == "query" and isinstance(query, str):
            exprs += [m for m in _LABEL_VALUES.findall(query)]
    return exprs


def unknown_metrics(exprs: list[str], exporters: tuple[str, ...] | None = None,
                    recorded: set[str] | frozenset[str] = frozenset()) -> dict[str, set[str]]:
    """expr -> metric names it uses that no exporter (nor a recording rule in `recorded`) produces."""
    known = known_names(exporters) | set(recorded)
    out = {}
    for expr in exprs:
        bad = promql_metrics(expr) - known
        if bad:
            out[expr] = bad
    return out


_TEMPLATE_FIELD = re.compile(r"<<\s*(.*?)\s*>>", re.S)
ADAPTER_FIELDS = ("Series", "LabelMatchers", "GroupBy")


class AdapterTemplateError(ValueError):
    """A prometheus-adapter metricsQuery uses template features this renderer does not reproduce."""


def _go_quote(value: str) -> str:
    """Go's %q for the label values the adapter writes (ASCII: backslash, quote and control escapes)."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def adapter_pods_query(metrics_query: str, series: str, namespace: str, pods: list[str],
                       metric_selector: dict[str, str] | None = None, namespace_label: str = "namespace",
                       pod_label: str = "pod") -> str:
    """The PromQL prometheus-adapter sends for an HPA `Pods` metric (custom metrics API, resource pods).

    As the adapter's naming.metricsQuery.Build does: LabelMatchers are the HPA's metric selector (sorted by
    label, `=`), then `namespace="NS"`, then the pod label (`=` for one pod, `=~"a|b"` for several); GroupBy is
    the pod label; Series the series name its seriesQuery discovered. Only `<<.Field>>` substitutions are
    reproduced; any other template action raises AdapterTemplateError."""
    if not pods:
        raise ValueError("the adapter queries at least one pod")
    matchers = [f"{k}={_go_quote(v)}" for k, v in sorted((metric_selector or {}).items())]
    matchers.append(f"{namespace_label}={_go_quote(namespace)}")
    if len(pods) == 1:
        matchers.append(f"{pod_label}={_go_quote(pods[0])}")
    else:
        matchers.append(f"{pod_label}=~{_go_quote('|'.join(pods))}")
    args = {"Series": series, "LabelMatchers": ",".join(matchers), "GroupBy": pod_label}

    def field(m: re.Match[str]) -> str:
        name = m.group(1)
        if not name.startswith(".") or name[1:] not in args:
            raise AdapterTemplateError(f"unsupported template action <<{name}>> (only "
                                       + ", ".join(f"<<.{f}>>" for f in ADAPTER_FIELDS) + ")")
        return args[name[1:]]

    return _TEMPLATE_FIELD.sub(field, metrics_query)


def adapter_metric_name(rule: dict, series: str) -> str | None:
    """The custom metric name an adapter rule gives a discovered series (name.matches / name.as, Go regexp
    expansion with $0/$1), None when the series does not match."""
    name = rule.get("name") or {}
    pattern = re.compile(name.get("matches") or ".*")
    m = pattern.search(series)
    if m is None:
        return None
    template = name.get("as") or ("$0" if pattern.groups == 0 else "$1")
    return re.sub(r"\$\{?(\d+)\}?", lambda g: m.group(int(g.group(1))) or "", template)


def hpa_desired_replicas(current_replicas: int, values: list[float], target: float, min_replicas: int,
                         max_replicas: int, tolerance: float = 0.1) -> int:
    """The HPA's replica count for a Pods metric with an AverageValue target (kube-controller-manager's
    replica calculator): ceil(current x average/target), kept when within the 10% tolerance, then bounded
    by minReplicas/maxReplicas. Pods without a value are left out of the average here."""
    if not values:
        return max(min_replicas, min(current_replicas, max_replicas))
    usage_ratio = (sum(values) / len(values)) / target
    within = abs(1.0 - usage_ratio) <= tolerance
    desired = current_replicas if within else math.ceil(usage_ratio * len(values))
    return max(min_replicas, min(desired, max_replicas))


# kube-prometheus-stack's prometheusSpec keys, per kind the Prometheus selects
SELECTOR_KEYS = {"ServiceMonitor": "serviceMonitor", "PodMonitor": "podMonitor", "PrometheusRule": "rule"}
STACK_CHART = "kube-prometheus-stack"


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def helm_release_name(release: dict) -> str:
    """The Helm release name Flux installs a HelmRelease as: spec.releaseName, else [targetNamespace-]name."""
    spec, meta = _dict(release.get("spec")), _dict(release.get("metadata"))
    if spec.get("releaseName"):
        return str(spec["releaseName"])
    name = str(meta.get("name", ""))
    return f"{spec['targetNamespace']}-{name}" if spec.get("targetNamespace") else name


def chart_name(release: dict, sources: dict[tuple[str, str], dict] | None = None) -> str:
    """The chart a HelmRelease installs: spec.chart.spec.chart, else through spec.chartRef the HelmChart's
    spec.chart or the last path segment of the OCIRepository's URL (oci://.../charts/kube-prometheus-stack, as
    fluxcd/flux2-monitoring-example does); a chartRef whose source is not rendered here: the source's name."""
    spec = _dict(release.get("spec"))
    named = _dict(_dict(spec.get("chart")).get("spec")).get("chart")
    if named:
        return str(named)
    ref = _dict(spec.get("chartRef"))
    if not ref:
        return ""
    kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
    source = (sources or {}).get((kind, name))
    if source is None:
        return name
    if kind == "HelmChart":
        return str(_dict(source.get("spec")).get("chart", ""))
    return str(_dict(source.get("spec")).get("url", "")).rstrip("/").rsplit("/", 1)[-1]


def stack_selectors(release: dict) -> dict[str, dict]:
    """kind -> the label selector kube-prometheus-stack's Prometheus gets from this HelmRelease's values, as the
    chart's prometheus.yaml template writes it: an explicit <kind>Selector wins; else, with
    <kind>SelectorNilUsesHelmValues (default true), matchLabels release: <Helm release name>; else {} (all)."""
    spec = _dict(_dict(_dict(_dict(release.get("spec")).get("values")).get("prometheus")).get("prometheusSpec"))
    out = {}
    for kind, key in SELECTOR_KEYS.items():
        explicit = spec.get(f"{key}Selector")
        if isinstance(explicit, dict) and explicit:
            out[kind] = explicit
        elif spec.get(f"{key}SelectorNilUsesHelmValues", True) is not False:
            out[kind] = {"matchLabels": {"release": helm_release_name(release)}}
        else:
            out[kind] = {}
    return out


def selector_matches(selector: dict, labels: dict) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) against a label map."""
    labels = {str(k): str(v) for k, v in _dict(labels).items()}
    for key, value in _dict(selector.get("matchLabels")).items():
        if labels.get(str(key)) != str(value):
            return False
    for expr in selector.get("matchExpressions") or []:
        expr = _dict(expr)
        key, op, values = str(expr.get("key")), expr.get("operator"), [str(v) for v in expr.get("values") or []]
        if ((op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values)
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels)):
            return False
    return True


def _describe(selector: dict) -> str:
    parts = [f"{k}={v}" for k, v in sorted(_dict(selector.get("matchLabels")).items())]
    parts += [f"{_dict(e).get('key')} {_dict(e).get('operator')} {_dict(e).get('values') or ''}".strip()
              for e in selector.get("matchExpressions") or []]
    return ", ".join(parts)


def _judges(root: Path, targets: list[Any]) -> tuple[list[tuple[str, dict[str, dict]]], str]:
    """(who, kind -> selector) of each Prometheus the repository's monitors are judged against, and why there is
    none when the list is empty. Existing mode: the layout file's declared Prometheus; else every
    kube-prometheus-stack HelmRelease the repository renders (install mode)."""
    declared = Layout.load(root, tolerant=True).prometheus  # a malformed file is LayoutInvalid; defaults here
    if declared.existing:
        return [(f"the existing Prometheus of {LAYOUT_FILE} ({declared.url})",
                 {kind: {"matchLabels": declared.labels(kind)} for kind in SELECTOR_KEYS})], ""
    objects = [(t, o) for t in targets for o in t.objects]
    sources = {(str(o.get("kind")), str(_dict(o.get("metadata")).get("name"))): o for _, o in objects
               if o.get("kind") in ("OCIRepository", "HelmChart")}
    judges: dict[str, tuple[str, dict[str, dict]]] = {}
    for target, obj in objects:
        if obj.get("kind") == "HelmRelease" and chart_name(obj, sources) == STACK_CHART:
            key = f"{_dict(obj.get('metadata')).get('namespace', '')}/{_dict(obj.get('metadata')).get('name')}"
            judges.setdefault(key, (f"the Prometheus of HelmRelease {helm_release_name(obj)} ({target.rel})",
                                    stack_selectors(obj)))
    if declared.declared:
        why = f"{LAYOUT_FILE} says `monitoring: {{mode: install}}` but no {STACK_CHART} HelmRelease is rendered"
    else:
        why = f"no {STACK_CHART} HelmRelease is rendered and {LAYOUT_FILE} declares no `monitoring:`"
    return list(judges.values()), why


def check(root: Path, targets: list[Any]) -> list[Finding]:
    """MonitorNotSelected for every rendered monitor or rule (and the GPU Operator's DCGM ServiceMonitor) that
    its Prometheus would not select: the layout file's existing Prometheus, else the Prometheus of each
    kube-prometheus-stack HelmRelease of the repository. With neither, one MonitorsNotJudged (info) says so."""
    judges, why = _judges(root, targets)
    monitors = [(t, o) for t in targets for o in t.objects
                if o.get("kind") in SELECTOR_KEYS and str(o.get("apiVersion", "")).startswith("monitoring.coreos.com/")]
    if not judges:
        if not monitors:
            return []
        kinds = ", ".join(sorted({str(o["kind"]) for _, o in monitors}))
        count = len({object_id(o) for _, o in monitors})
        return [NOT_JUDGED.finding(f"{why}: no Prometheus to judge the {count} rendered {kinds} object(s) "
                                   "against; MonitorNotSelected was not checked")]
    out: list[Finding] = []
    for who, selectors in judges:
        for target, obj in monitors:
            selector = selectors[str(obj["kind"])]
            if not selector_matches(selector, _dict(_dict(obj.get("metadata")).get("labels"))):
                out.append(NOT_SELECTED.finding(f"{who} selects {obj['kind']}s by {_describe(selector) or '(all)'}; "
                                                "this one is never used", path=target.rel, object=object_id(obj)))
        monitor_selector = selectors["ServiceMonitor"]
        for target in targets:
            for obj in target.objects:
                if obj.get("kind") != "HelmRelease" or chart_name(obj) != "gpu-operator":
                    continue
                dcgm = _dict(_dict(_dict(_dict(obj.get("spec")).get("values")).get("dcgmExporter")).get(
                    "serviceMonitor"))
                if dcgm.get("enabled") and not selector_matches(monitor_selector, _dict(dcgm.get("additionalLabels"))):
                    out.append(NOT_SELECTED.finding(
                        f"the DCGM exporter ServiceMonitor of this GPU Operator lacks {_describe(monitor_selector)}, "
                        f"which {who} selects ServiceMonitors by: GPU metrics are never scraped",
                        path=target.rel, object=object_id(obj)))
    return out
