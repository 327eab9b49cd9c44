"""Which metric names dashboards and alert rules may use: the exporters' names, kept as data
(data/metrics.yaml), and the metric names a PromQL expression or a Grafana dashboard references."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

SUFFIXES = {"summary": ("", "_sum", "_count"), "histogram": ("_bucket", "_sum", "_count")}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:$.])[a-zA-Z_:][\w:]*(?![\w:])")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan", "atan2"}
_LABEL_VALUES = re.compile(r"label_values\(\s*([a-zA-Z_:][\w:]*)")


@cache
def catalog() -> dict[str, dict[str, dict[str, Any]]]:
    """exporter -> metric name -> {type, cpu?, help}."""
    from importlib import resources

    import yaml

    return yaml.safe_load(resources.files("kubectl_triton").joinpath("data", "metrics.yaml").read_text("utf-8"))


def known_names(exporters: tuple[str, ...] | None = None) -> set[str]:
    """Every series name the exporters produce (summaries with _sum and _count)."""
    names = set()
    for exporter, metrics in catalog().items():
        if exporters is None or exporter in exporters:
            for name, info in metrics.items():
                names.update(name + s for s in SUFFIXES.get(info.get("type"), ("",)))
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
    exprs = []

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
                    recorded: set[str] = frozenset()) -> dict[str, set[str]]:
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
    import math

    usage_ratio = (sum(values) / len(values)) / target
    within = abs(1.0 - usage_ratio) <= tolerance
    desired = current_replicas if within else math.ceil(usage_ratio * len(values))
    return max(min_replicas, min(desired, max_replicas))
