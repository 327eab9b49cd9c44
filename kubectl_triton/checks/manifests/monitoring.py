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
