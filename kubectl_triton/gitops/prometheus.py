"""`init`'s monitoring stack: install kube-prometheus-stack (the package's infrastructure, as it is) or use an
existing Prometheus. For an existing one: find it in an adopted Flux repository (a kube-prometheus-stack
HelmRelease or a Prometheus object that the cluster's Kustomizations apply), parse `--prometheus-selector`, and
rewrite the files init writes so that every ServiceMonitor and PrometheusRule carries the labels that Prometheus
selects by, prometheus-adapter and KEDA query its URL, and no second kube-prometheus-stack is installed. Every edit
is a round trip through ruamel.yaml (comments kept)."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubectl_triton.checks.manifests.monitoring import STACK_CHART, chart_name, helm_release_name, stack_selectors
from kubectl_triton.errors import InputError
from kubectl_triton.formats.yamlio import load_all
from kubectl_triton.gitops.layout import inside
from kubectl_triton.gitops.model import (
    DEFAULT_SELECTOR,
    INSTALL_URL,
    LAYOUT_FILE,
    MONITOR_KINDS,
    FluxKustomization,
    Layout,
    Monitoring,
    kustomization_file,
)

# --prometheus-selector's optional KIND: prefix (label keys never hold a colon)
SELECTOR_PREFIXES = {"serviceMonitor": "ServiceMonitor", "podMonitor": "PodMonitor", "rule": "PrometheusRule"}
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
STACK_FILE = "helmrelease-kube-prometheus-stack.yaml"  # the installed stack, in the package's infrastructure


def parse_selectors(items: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """`--prometheus-selector [KIND:]KEY=VALUE` items as kind -> labels. Unprefixed labels apply to every kind that
    has no labels of its own (KIND: serviceMonitor, podMonitor or rule)."""
    common: dict[str, str] = {}
    own: dict[str, dict[str, str]] = {}
    for item in items:
        prefix, sep, rest = item.partition(":")
        kind = SELECTOR_PREFIXES.get(prefix) if sep else None
        if sep and kind is None:
            raise InputError(f"--prometheus-selector {item!r}: unknown kind {prefix!r} "
                             f"(one of {', '.join(SELECTOR_PREFIXES)})")
        key, eq, value = (rest if sep else item).partition("=")
        if not eq or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise InputError(f"--prometheus-selector {item!r}: expected [KIND:]KEY=VALUE with a Kubernetes label key "
                             "and value, e.g. release=kube-prometheus-stack")
        (own.setdefault(kind, {}) if kind else common)[key] = value
    if not common and not own:
        return {}
    return {kind: own.get(kind, common or dict(DEFAULT_SELECTOR)) for kind in MONITOR_KINDS}


@dataclass
class Found:
    """A Prometheus the adopted repository already deploys."""

    what: str  # e.g. "HelmRelease kube-prometheus-stack"
    file: str  # repository-relative
    namespace: str
    selectors: dict[str, dict[str, str]]
    kustomization: str | None  # the Flux Kustomization that applies it
    notes: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The Prometheus Operator's governing Service of every Prometheus in the namespace."""
        return f"http://prometheus-operated.{self.namespace}.svc:9090"


def _match_labels(selector: Any, kind: str, what: str, notes: list[str]) -> dict[str, str]:
    selector = selector if isinstance(selector, dict) else {}
    if selector.get("matchExpressions"):
        notes.append(f"{what}'s {MONITOR_KINDS[kind]} has matchExpressions: only its matchLabels are written; "
                     f"check {LAYOUT_FILE} monitoring.{MONITOR_KINDS[kind]}")
    labels = selector.get("matchLabels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _namespace(root: Path, top: Path, file: Path, obj: dict[str, Any]) -> str:
    """Where a found object lands: its own namespace, else that of the nearest kustomization.yaml between its
    folder and the Flux path `top` (kustomize sets it), else the HelmRelease's targetNamespace rule's default."""
    meta = _mapping(obj.get("metadata"))
    if meta.get("namespace"):
        return str(meta["namespace"])
    folder = file.parent
    while True:
        kfile = kustomization_file(folder)
        if kfile is not None:
            for doc in _load(kfile):
                if doc.get("namespace"):
                    return str(doc["namespace"])
        if folder in (top, root) or top not in folder.parents:
            return "monitoring"
        folder = folder.parent


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _load(path: Path) -> list[dict[str, Any]]:
    try:
        return [d for d in load_all(path) if isinstance(d, dict)]
    except InputError:  # a malformed file is validate's to report
        return []


def _flux_files(root: Path, kustomizations: list[FluxKustomization]) -> Iterator[tuple[FluxKustomization, Path,
                                                                                        Path]]:
    for k in kustomizations:
        top = root / k.path.strip("/").removeprefix("./")
        if not top.is_dir() or not inside(root, top):
            continue
        for f in sorted(top.rglob("*.y*ml")):
            if ".git" not in f.relative_to(root).parts:
                yield k, top, f


def find_prometheus(root: Path, kustomizations: list[FluxKustomization]) -> list[Found]:
    """Every kube-prometheus-stack HelmRelease (chart named directly or through a chartRef) and every Prometheus
    object in the paths the cluster's own Flux Kustomizations apply, in path order."""
    files = [(k, top, f, _load(f)) for k, top, f in _flux_files(root, kustomizations)]
    sources = {(str(d.get("kind")), str((d.get("metadata") or {}).get("name"))): d for *_, docs in files
               for d in docs if d.get("kind") in ("OCIRepository", "HelmChart")}
    out: list[Found] = []
    for k, top, f, docs in files:
        rel = f.relative_to(root).as_posix()
        for doc in docs:
            api, kind = str(doc.get("apiVersion", "")), doc.get("kind")
            spec = _mapping(doc.get("spec"))
            notes: list[str] = []
            if api.startswith("helm.toolkit.fluxcd.io/") and kind == "HelmRelease" \
                    and chart_name(doc, sources) == STACK_CHART:
                what = f"HelmRelease {helm_release_name(doc)}"
                selectors = {kind: _match_labels(sel, kind, what, notes) if sel else {}
                             for kind, sel in stack_selectors(doc).items()}
                namespace = str(spec.get("targetNamespace") or _namespace(root, top, f, doc))
            elif api.startswith("monitoring.coreos.com/") and kind == "Prometheus":
                what = f"Prometheus {(doc.get('metadata') or {}).get('name')}"
                selectors = {}
                for mkind, key in MONITOR_KINDS.items():
                    if spec.get(key) is None:
                        notes.append(f"{what} has no {key}: it selects no {mkind}; give it one and name its "
                                     f"labels in {LAYOUT_FILE} monitoring.{key}")
                    selectors[mkind] = _match_labels(spec.get(key), mkind, what, notes)
                namespace = _namespace(root, top, f, doc)
            else:
                continue
            out.append(Found(what, rel, namespace, selectors, k.name, notes))
    return out


def choose(layout: Layout, adopted_with: list[FluxKustomization] | None, root: Path, mode: str | None,
           url: str | None, selector_items: tuple[str, ...]) -> tuple[Monitoring, str | None, list[str]]:
    """(the monitoring section, the Flux Kustomization the models should also wait for, notes) for a repository
    without a layout file. `adopted_with`: the cluster's Kustomizations of an existing Flux repository (None for a
    new one). Without --monitoring: existing when a Prometheus is found or --prometheus-* is given, else install."""
    selectors = parse_selectors(selector_items)
    if url is not None and not re.match(r"^https?://[^/\s]+(/\S*)?$", url):
        raise InputError(f"--prometheus-url {url!r}: expected http(s)://HOST[:PORT][/PATH], e.g. {INSTALL_URL}")
    if mode == "install" and (url or selectors):
        raise InputError("--prometheus-url and --prometheus-selector describe an existing Prometheus; they do not go "
                         "with --monitoring install")
    found = find_prometheus(root, adopted_with) if adopted_with else []
    notes: list[str] = []
    if mode is None:
        mode = "existing" if found or url or selectors else "install"
    if mode == "install":
        if found:
            notes.append(f"monitoring: install (--monitoring install), although {found[0].what} ({found[0].file}) "
                         "exists; ServiceMonitors and rules are labelled release: kube-prometheus-stack")
        return Monitoring(declared=True), None, notes
    first = found[0] if found else None
    if first is not None:
        chosen = {kind: selectors.get(kind, first.selectors[kind]) for kind in MONITOR_KINDS}
        monitoring = Monitoring.existing_stack(url or first.url, chosen, None if url else first.namespace)
        notes.append(f"monitoring: existing, found {first.what} ({first.file}): Prometheus at {monitoring.url}; "
                     "init writes no kube-prometheus-stack (override: --monitoring install)")
        notes += first.notes
        notes += [f"also found {f.what} ({f.file}); name another with --prometheus-url and --prometheus-selector"
                  for f in found[1:]]
    else:
        monitoring = Monitoring.existing_stack(url or INSTALL_URL, selectors)
        notes.append(f"monitoring: existing Prometheus at {monitoring.url} (none found in the repository); "
                     "init writes no kube-prometheus-stack")
    shown = "; ".join(f"{key} {_show(monitoring.labels(kind))}" for kind, key in MONITOR_KINDS.items())
    notes.append(f"monitors and rules are labelled for it ({shown}); kept in {LAYOUT_FILE} `monitoring:`")
    after = first.kustomization if first is not None and first.kustomization not in layout.depends_on else None
    return monitoring, after, notes


def _show(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "{} (all)"


# ---- rewriting init's files for an existing Prometheus ---------------------------------------------------------

def _edit(text: str, change: Callable[[Any], None], header: str | None = None) -> str:
    """`text` loaded round trip, changed in place by `change`, dumped as init dumps (header: a new top comment)."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    yaml.preserve_quotes = True
    doc = yaml.load(text)
    change(doc)
    if header is not None:
        doc.ca.comment = None
        doc.yaml_set_start_comment(header)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def _relabel(labels: dict[str, str]) -> Callable[[Any], None]:
    """Replace the installed stack's selector labels in metadata.labels with `labels`."""
    def change(doc: Any) -> None:
        meta = doc["metadata"]
        current = meta.get("labels") or {}
        for key in DEFAULT_SELECTOR:
            current.pop(key, None)
        current.update(labels)
        if current:
            meta["labels"] = current
        else:
            meta.pop("labels", None)
    return change


def _adapter_endpoint(url: str) -> tuple[str, int, str]:
    """prometheus-adapter's prometheus.url (scheme://host), port and path from a Prometheus URL."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{parts.hostname}", port, parts.path.rstrip("/")


HEADERS = {
    "triton/networkpolicy.yaml":
        "Inference ports only from namespaces labelled as Triton clients; metrics only from the namespace of the\n"
        "cluster's existing Prometheus (kubectl-triton.yaml `monitoring.namespace`).",
    "triton/servicemonitor.yaml":
        "Scraped by the cluster's existing Prometheus (kubectl-triton.yaml `monitoring:`), which selects\n"
        "ServiceMonitors by the labels below (serviceMonitorSelector). The Prometheus Operator labels every series\n"
        "with namespace, service, pod, container and endpoint: the dashboard, the alerts and prometheus-adapter rely\n"
        "on namespace, service and pod.",
    "monitoring/prometheusrule.yaml":
        "Recording rules and alerts for every Triton model. Every alert names the model; `kubectl triton status\n"
        "MODEL` explains a failing rollout. The labels below are what the cluster's existing Prometheus selects\n"
        "rules by (kubectl-triton.yaml `monitoring.ruleSelector`).\n"
        "promtool unit tests for every alert: base/monitoring/tests/ (run by `make test`; add your own cases there).",
    "helmrelease-prometheus-adapter.yaml":
        "prometheus-adapter: serves Triton's per-model queue-to-compute ratio to the HorizontalPodAutoscalers as the\n"
        "custom metric triton_queue_compute_ratio (and the TensorRT-LLM in-flight batcher's own signals). It queries\n"
        "the cluster's existing Prometheus (kubectl-triton.yaml `monitoring.prometheusUrl`).",
}


def existing_files(files: dict[str, str], layout: Layout, infrastructure: str) -> dict[str, str]:
    """init's files (repository-relative path -> text) for an existing Prometheus: monitors and rules labelled for
    it, base/monitoring applied in its namespace, KEDA's and prometheus-adapter's queries sent to its URL, the GPU
    Operator's DCGM ServiceMonitor labelled for it, and no kube-prometheus-stack HelmRelease."""
    mon = layout.prometheus
    out = dict(files)

    def edit(rel: str, change: Callable[[Any], None], header: str | None = None) -> None:
        if rel in out:
            out[rel] = _edit(out[rel], change, header)

    edit(f"{layout.bases}/triton/servicemonitor.yaml", _relabel(mon.labels("ServiceMonitor")),
         HEADERS["triton/servicemonitor.yaml"])
    edit(f"{layout.bases}/monitoring/prometheusrule.yaml", _relabel(mon.labels("PrometheusRule")),
         HEADERS["monitoring/prometheusrule.yaml"])
    if mon.namespace != "monitoring":
        edit(f"{layout.bases}/monitoring/kustomization.yaml", lambda doc: doc.__setitem__("namespace", mon.namespace))

        def metrics_peer(doc: Any) -> None:  # the metrics port opens to the namespace Prometheus scrapes from
            for rule in doc["spec"]["ingress"]:
                for peer in rule.get("from") or []:
                    labels = (peer.get("namespaceSelector") or {}).get("matchLabels") or {}
                    if labels.get("kubernetes.io/metadata.name") == "monitoring":
                        labels["kubernetes.io/metadata.name"] = mon.namespace

        edit(f"{layout.bases}/triton/networkpolicy.yaml", metrics_peer, HEADERS["triton/networkpolicy.yaml"])

    def keda(doc: Any) -> None:
        for trigger in doc["spec"]["triggers"]:
            if trigger.get("type") == "prometheus":
                trigger["metadata"]["serverAddress"] = mon.url

    edit(f"{layout.shared_component('autoscaling/keda')}/scaledobject.yaml", keda)
    out.pop(f"{infrastructure}/{STACK_FILE}", None)

    def resources(doc: Any) -> None:
        doc["resources"] = [r for r in doc["resources"] if r != STACK_FILE]

    edit(f"{infrastructure}/kustomization.yaml", resources)

    def adapter(doc: Any) -> None:
        host, port, path = _adapter_endpoint(mon.url)
        prometheus = doc["spec"]["values"]["prometheus"]
        prometheus["url"], prometheus["port"] = host, port
        if path:
            prometheus["path"] = path
        depends = [d for d in doc["spec"].get("dependsOn") or [] if d.get("name") != STACK_CHART]
        if depends:
            doc["spec"]["dependsOn"] = depends
        else:
            doc["spec"].pop("dependsOn", None)

    edit(f"{infrastructure}/helmrelease-prometheus-adapter.yaml", adapter,
         HEADERS["helmrelease-prometheus-adapter.yaml"])

    def dcgm(doc: Any) -> None:
        monitor = doc["spec"]["values"]["dcgmExporter"]["serviceMonitor"]
        labels = mon.labels("ServiceMonitor")
        if labels:
            monitor["additionalLabels"] = labels
        else:
            monitor.pop("additionalLabels", None)

    edit(f"{infrastructure}/helmrelease-gpu-operator.yaml", dcgm)
    return out
