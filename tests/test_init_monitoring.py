"""`init --monitoring install|existing`: an existing Prometheus is found in a real Flux repository (the Flux example of
../shared/conformance/yaml-corpus with the kube-prometheus-stack of fluxcd/flux2-monitoring-example, kept beside it
in the shared material), or named on the command line; every monitor and rule init and add-model write carries its
selector labels, prometheus-adapter and KEDA query its URL, and `validate` judges monitors against it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from kubectl_triton.adapters import kustomize
from kubectl_triton.checks.manifests import monitoring
from kubectl_triton.formats import yamlio
from tests.conftest import REPO
from tests.test_init import CORPUS, ONNX, adopt, git, tree

MONITORING_EXAMPLE = CORPUS / "flux2-monitoring-example"
KUBE_PROMETHEUS = CORPUS / "kube-prometheus"


def needs(*folders: Path) -> None:
    """Upstream files are shared material (../shared), never committed here: without them, say so and skip."""
    for folder in folders:
        if not folder.is_dir():
            pytest.skip(f"{folder} is not beside this checkout")
URL = "http://prom-kube-prometheus-stack-prometheus.observability.svc.cluster.local:9090"

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) is not on PATH")


def report(run_cli, root: Path) -> tuple[int, list[dict]]:
    result = run_cli("validate", str(root), "-o", "json")
    return result.exit_code, json.loads(result.stdout)["findings"]


def codes(found: list[dict], code: str) -> list[dict]:
    return [f for f in found if f["code"] == code]


@pytest.fixture
def with_stack(tmp_path: Path) -> Path:
    """The Flux example repository that also runs Flux's own monitoring example: kube-prometheus-stack as a
    HelmRelease whose chart comes through a chartRef (OCIRepository), and a PodMonitor labelled for its
    podMonitorSelector. The upstream files, committed."""
    needs(CORPUS / "flux2-kustomize-helm-example", MONITORING_EXAMPLE)
    root = tmp_path / "flux2-kustomize-helm-example"
    shutil.copytree(CORPUS / "flux2-kustomize-helm-example", root)
    shutil.copytree(MONITORING_EXAMPLE / "monitoring", root / "monitoring")
    shutil.copy(MONITORING_EXAMPLE / "clusters/test/monitoring.yaml", root / "clusters/production/monitoring.yaml")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "upstream")
    return root


def rendered_monitors(run_cli, root: Path) -> list[dict]:
    result = run_cli("render", "--all", "--repo", str(root))
    assert result.exit_code == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout)
            if d and d["kind"] in ("ServiceMonitor", "PodMonitor", "PrometheusRule")]


def test_a_deployed_kube_prometheus_stack_is_found_used_and_judged_against(run_cli, with_stack):
    root = with_stack
    result = run_cli("init", str(root), "--gpu", "l4", "--gpu", "h100-80gb")
    assert result.exit_code == 0, result.stderr
    assert ("review: monitoring: existing, found HelmRelease kube-prometheus-stack "
            "(monitoring/controllers/kube-prometheus-stack/release.yaml)") in result.stderr
    layout = yaml.safe_load((root / "kubectl-triton.yaml").read_text())
    # the release's own values: its podMonitorSelector; the chart's release-label default for the other kinds
    assert layout["monitoring"] == {
        "mode": "existing", "prometheusUrl": "http://prometheus-operated.monitoring.svc:9090",
        "namespace": "monitoring", "serviceMonitorSelector": {"release": "kube-prometheus-stack"},
        "podMonitorSelector": {"app.kubernetes.io/component": "monitoring"},
        "ruleSelector": {"release": "kube-prometheus-stack"}}
    assert "monitoring-controllers" in layout["flux"]["dependsOn"]
    for name, args in (("resnet", [*ONNX, "--gpu", "l4"]), ("llm", ["--backend", "tensorrtllm", "--gpu", "h100-80gb"])):
        added = run_cli("add-model", name, "--repo", str(root), *args)
        assert added.exit_code == 0, added.stderr
    flux = yaml.safe_load((root / "clusters/production/models/resnet-l4.yaml").read_text())
    assert {"name": "monitoring-controllers"} in flux["spec"]["dependsOn"]
    # a second monitoring stack is not added, and the upstream files are as they were
    charts = [d for p in root.rglob("*.yaml") if ".git" not in p.parts for d in yamlio.load_all(p)
              if isinstance(d, dict) and d.get("kind") == "HelmRelease"]
    assert [d["metadata"]["name"] for d in charts if "prometheus" in d["metadata"]["name"]] == ["kube-prometheus-stack"]
    assert git(root, "diff", "--stat") == ""
    code, found = report(run_cli, root)
    assert code == 0 and not [f for f in found if f["severity"] == "error"], found
    assert not codes(found, "MonitorNotSelected") and not codes(found, "MonitorsNotJudged"), found
    monitors = rendered_monitors(run_cli, root)
    assert {(m["kind"], m["metadata"]["name"]) for m in monitors} >= {
        ("ServiceMonitor", "resnet-triton"), ("ServiceMonitor", "llm-triton"), ("PrometheusRule", "triton"),
        ("PodMonitor", "flux-system")}
    # each as the upstream HelmRelease's Prometheus selects it (the chart template's reading of its values)
    release = yamlio.load_all(root / "monitoring/controllers/kube-prometheus-stack/release.yaml")[0]
    selectors = monitoring.stack_selectors(release)
    assert all(monitoring.selector_matches(selectors[m["kind"]], m["metadata"]["labels"]) for m in monitors)

    # a ServiceMonitor without its labels and a rule labelled for another Prometheus are reported, by object
    monitor = root / "base/triton/servicemonitor.yaml"
    monitor.write_text(monitor.read_text().replace("    release: kube-prometheus-stack\n", ""))
    rule = root / "base/monitoring/prometheusrule.yaml"
    rule.write_text(rule.read_text().replace("release: kube-prometheus-stack", "release: prometheus"))
    code, found = report(run_cli, root)
    bad = codes(found, "MonitorNotSelected")
    assert {(f["path"], f["object"]) for f in bad} == {
        ("overlays/resnet/l4", "ServiceMonitor/triton/resnet-triton"),
        ("overlays/llm/h100-80gb", "ServiceMonitor/triton/llm-triton"),
        ("base/monitoring", "PrometheusRule/monitoring/triton")}, bad
    assert all(f["severity"] == "warning" and "the existing Prometheus of kubectl-triton.yaml "
               "(http://prometheus-operated.monitoring.svc:9090)" in f["message"] for f in bad)

    # the upstream PodMonitor is judged too: against a podMonitorSelector it does not meet, it is reported
    text = (root / "kubectl-triton.yaml").read_text()
    (root / "kubectl-triton.yaml").write_text(text.replace("app.kubernetes.io/component: monitoring",
                                                           "team: ml"))
    _, found = report(run_cli, root)
    assert "PodMonitor/monitoring/flux-system" in {f["object"] for f in codes(found, "MonitorNotSelected")}


def test_init_for_an_existing_prometheus_named_on_the_command_line(run_cli, tmp_path):
    installed, existing = tmp_path / "installed", tmp_path / "existing"
    installed.mkdir()
    existing.mkdir()
    assert run_cli("init", str(installed), "--gpu", "l4").exit_code == 0
    result = run_cli("init", str(existing), "--gpu", "l4", "--monitoring", "existing", "--prometheus-url", URL,
                     "--prometheus-selector", "prometheus=main", "--prometheus-selector", "rule:role=alert-rules")
    assert result.exit_code == 0, result.stderr
    assert f"existing Prometheus at {URL}" in result.stderr
    before, after = tree(installed), tree(existing)
    # what differs from install mode: the stack is not installed, the rest names the existing Prometheus
    assert set(before) - set(after) == {"infrastructure/helmrelease-kube-prometheus-stack.yaml"}
    assert {p for p in after if after[p] != before[p]} == {
        "kubectl-triton.yaml", "base/triton/servicemonitor.yaml", "base/monitoring/prometheusrule.yaml",
        "base/monitoring/kustomization.yaml", "base/triton/networkpolicy.yaml",
        "overlays/autoscaling/keda/scaledobject.yaml",
        "infrastructure/kustomization.yaml", "infrastructure/helmrelease-prometheus-adapter.yaml",
        "infrastructure/helmrelease-gpu-operator.yaml"}
    infra = {d["metadata"]["name"]: d for d in yamlio.loads_all(kustomize.build(existing / "infrastructure").yaml, "x")
             if d["kind"] == "HelmRelease"}
    assert "kube-prometheus-stack" not in infra
    adapter = infra["prometheus-adapter"]["spec"]
    assert "dependsOn" not in adapter
    assert adapter["values"]["prometheus"] == {
        "url": "http://prom-kube-prometheus-stack-prometheus.observability.svc.cluster.local", "port": 9090}
    dcgm = infra["gpu-operator"]["spec"]["values"]["dcgmExporter"]["serviceMonitor"]
    assert dcgm["additionalLabels"] == {"prometheus": "main"}
    layout = yaml.safe_load((existing / "kubectl-triton.yaml").read_text())
    assert layout["monitoring"]["namespace"] == "observability"
    assert layout["monitoring"]["ruleSelector"] == {"role": "alert-rules"}
    assert {"name": "observability", "reason": layout["cluster"]["provides"]["namespaces"][0]["reason"]} \
        in layout["cluster"]["provides"]["namespaces"]

    added = run_cli("add-model", "resnet", "--repo", str(existing), *ONNX, "--gpu", "l4", "--autoscaler", "keda")
    assert added.exit_code == 0, added.stderr
    code, found = report(run_cli, existing)
    assert code == 0 and not [f for f in found if f["severity"] in ("error", "warning")], found
    rendered = run_cli("render", "--all", "--repo", str(existing))
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    [scaled] = [d for d in docs if d["kind"] == "ScaledObject"]
    assert {t["metadata"]["serverAddress"] for t in scaled["spec"]["triggers"]} == {URL}
    labels = {(d["kind"], d["metadata"]["namespace"]): d["metadata"]["labels"] for d in docs
              if d["kind"] in ("ServiceMonitor", "PrometheusRule")}
    assert labels[("ServiceMonitor", "triton")]["prometheus"] == "main"
    assert "release" not in labels[("ServiceMonitor", "triton")]
    assert labels[("PrometheusRule", "observability")]["role"] == "alert-rules"
    # the metrics port opens to the Prometheus's namespace, which the security check accepts (and no other)
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "resnet-triton"]
    peers = [p["namespaceSelector"]["matchLabels"] for r in policy["spec"]["ingress"] for p in r["from"]
             if {"port": "metrics"} in r["ports"]]
    assert peers == [{"kubernetes.io/metadata.name": "observability"}]
    policy_file = existing / "base/triton/networkpolicy.yaml"
    policy_file.write_text(policy_file.read_text().replace("metadata.name: observability", "metadata.name: monitoring"))
    _, found = report(run_cli, existing)
    assert [f["object"] for f in codes(found, "MetricsExposed")] == ["NetworkPolicy/triton/resnet-triton"]

    # running init again with the same options changes nothing; asking for another stack is refused
    again = run_cli("init", str(existing), "--gpu", "l4", "--monitoring", "existing", "--prometheus-url", URL,
                    "--prometheus-selector", "prometheus=main", "--prometheus-selector", "rule:role=alert-rules")
    assert again.exit_code == 0, again.stderr
    other = run_cli("init", str(existing), "--monitoring", "install")
    assert other.exit_code == 2 and "kubectl-triton.yaml already declares the monitoring stack" in other.stderr


def test_install_mode_stays_this_repositorys_and_a_flux_repository_without_prometheus_is_not_judged(run_cli,
                                                                                                   tmp_path):
    root = adopt("flux2-multi-tenancy", tmp_path)
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0 and "monitoring: existing" not in result.stderr
    assert (root / "base/triton/servicemonitor.yaml").read_bytes() == (REPO / "base/triton/servicemonitor.yaml"
                                                                         ).read_bytes()
    assert yaml.safe_load((root / "kubectl-triton.yaml").read_text())["monitoring"] == {"mode": "install"}
    assert run_cli("add-model", "resnet", "--repo", str(root), *ONNX, "--gpu", "l4").exit_code == 0
    code, found = report(run_cli, root)
    assert code == 0, found
    [info] = codes(found, "MonitorsNotJudged")
    assert info["severity"] == "info"
    assert "no kube-prometheus-stack HelmRelease is rendered" in info["message"]
    assert not codes(found, "MonitorNotSelected")
    # without the layout file's section it says so too, once
    text = (root / "kubectl-triton.yaml").read_text()
    (root / "kubectl-triton.yaml").write_text(text.replace("monitoring:\n  mode: install\n", ""))
    _, found = report(run_cli, root)
    assert [f["message"].split(":")[0] for f in codes(found, "MonitorsNotJudged")] == [
        "no kube-prometheus-stack HelmRelease is rendered and kubectl-triton.yaml declares no `monitoring"]


@pytest.mark.parametrize("args,message", [
    (["--prometheus-selector", "release"], "--prometheus-selector 'release': expected [KIND:]KEY=VALUE"),
    (["--prometheus-selector", "alerts:team=ml"], "--prometheus-selector 'alerts:team=ml': unknown kind 'alerts'"),
    (["--prometheus-url", "prometheus:9090"], "--prometheus-url 'prometheus:9090': expected http(s)://"),
    (["--monitoring", "install", "--prometheus-selector", "a=b"], "they do not go with --monitoring install"),
])
def test_bad_monitoring_options_are_one_line_and_write_nothing(run_cli, tmp_path, args, message):
    result = run_cli("init", str(tmp_path), "--gpu", "l4", *args)
    assert result.exit_code == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("section,message", [
    ({"mode": "install", "prometheusUrl": "http://p.monitoring.svc:9090"},
     "monitoring: prometheusUrl describe an existing Prometheus"),
    ({"mode": "existing", "ruleSelector": {"bad key!": "x"}}, "monitoring/ruleSelector"),
    ({"mode": "elsewhere"}, "monitoring/mode"),
])
def test_a_bad_monitoring_section_is_a_layout_finding_and_a_one_line_init_error(run_cli, tmp_path, section,
                                                                                message):
    (tmp_path / "kubectl-triton.yaml").write_text(yaml.safe_dump({"monitoring": section}))
    result = run_cli("validate", str(tmp_path), "-o", "json")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert [f for f in json.loads(result.stdout)["findings"]
            if f["code"] == "LayoutInvalid" and message in f["message"]], result.stdout
    result = run_cli("init", str(tmp_path), "--gpu", "l4")
    assert result.exit_code == 2 and "kubectl-triton.yaml" in result.stderr and message in result.stderr, \
        result.stderr
    assert "Traceback" not in result.stderr and sorted(p.name for p in tmp_path.iterdir()) == ["kubectl-triton.yaml"]


def test_a_chart_ref_names_its_chart_through_the_oci_repository():
    needs(MONITORING_EXAMPLE)
    folder = MONITORING_EXAMPLE / "monitoring/controllers/kube-prometheus-stack"
    release = yamlio.load_all(folder / "release.yaml")[0]
    source = yamlio.load_all(folder / "repository.yaml")[0]
    assert monitoring.chart_name(release, {("OCIRepository", "kube-prometheus-stack"): source}) == \
        "kube-prometheus-stack"
    renamed = {**source, "spec": {**source["spec"], "url": "oci://ghcr.io/example/charts/victoria-metrics-k8s-stack"}}
    assert monitoring.chart_name(release, {("OCIRepository", "kube-prometheus-stack"): renamed}) != \
        "kube-prometheus-stack"


def test_a_deployed_prometheus_object_is_found_with_its_selectors(run_cli, tmp_path):
    """kube-prometheus's own Prometheus (all selectors {}: it selects everything) in the multi-tenancy example."""
    needs(KUBE_PROMETHEUS)
    root = adopt("flux2-multi-tenancy", tmp_path)
    stack = root / "infrastructure/monitoring"
    stack.mkdir()
    shutil.copy(KUBE_PROMETHEUS / "prometheus-prometheus.yaml", stack)
    (stack / "kustomization.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
         "resources": ["prometheus-prometheus.yaml"]}))
    flux = yaml.safe_load((root / "clusters/production/infrastructure.yaml").read_text().split("---")[0])
    flux["metadata"]["name"], flux["spec"]["path"] = "monitoring-stack", "./infrastructure/monitoring"
    (root / "clusters/production/monitoring-stack.yaml").write_text(yaml.safe_dump(flux))
    result = run_cli("init", str(root), "--gpu", "l4")
    assert result.exit_code == 0, result.stderr
    assert ("monitoring: existing, found Prometheus k8s (infrastructure/monitoring/prometheus-prometheus.yaml): "
            "Prometheus at http://prometheus-operated.monitoring.svc:9090") in result.stderr
    section = yaml.safe_load((root / "kubectl-triton.yaml").read_text())["monitoring"]
    assert section["serviceMonitorSelector"] == section["podMonitorSelector"] == section["ruleSelector"] == {}
    # nothing to add: the installed stack's release label is dropped rather than kept as a stray label
    assert "labels" not in yaml.safe_load((root / "base/triton/servicemonitor.yaml").read_text())["metadata"]
    assert run_cli("add-model", "resnet", "--repo", str(root), *ONNX, "--gpu", "l4").exit_code == 0
    _, found = report(run_cli, root)
    assert not codes(found, "MonitorNotSelected") and not codes(found, "MonitorsNotJudged"), found


def test_a_layout_file_without_the_section_is_not_rewritten_for_another_stack(run_cli, tmp_path):
    (tmp_path / "kubectl-triton.yaml").write_text("namespace: triton\n")
    result = run_cli("init", str(tmp_path), "--gpu", "l4", "--prometheus-selector", "release=prometheus")
    assert result.exit_code == 2, result.stderr
    assert "kubectl-triton.yaml exists without a `monitoring:` section (install mode); init does not rewrite it" \
        in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kubectl-triton.yaml"]
