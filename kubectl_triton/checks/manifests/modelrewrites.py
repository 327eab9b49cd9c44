"""InferenceModelRewrites (gitops/modelrewrite.py; `kubectl triton canary --adapter`) in the rendered repository,
judged against what the endpoint picker and the pool's pods do with them, for `validate`:

- ModelRewritePoolMissing: spec.poolRef names an InferencePool (inference.networking.k8s.io) the repository
  renders in the rewrite's namespace; the picker (pkg/epp/controller/inferencemodelrewrite_reconciler.go) ignores a
  rewrite of another pool or group;
- ModelRewriteTargetUnserved: each target is a model name the pool's pods answer: they run Triton's
  OpenAI-compatible frontend (a KServe request has no `model` to rewrite), which serves each Triton model of the
  overlay's model-config ConfigMap and, with --lora-separator, `<model><SEP><adapter>` for each adapter of the
  latest version folder's multi_lora.json (a vLLM model only with enable_lora);
- ModelRewriteWeights: a rule's targets set a weight all or none (the API's rule; the picker counts a missing
  weight as 0, so that target gets nothing);
- ModelRewriteOverlap: a rule without matches rewrites every request of the pool, and a name matched by two rules
  of one pool is rewritten by one of them only (the oldest object, which git cannot show).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import INFO, Finding
from kubectl_triton.checks.registry import register
from kubectl_triton.errors import TritonCtlError
from kubectl_triton.formats import pbtxt
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops import assembly, modelrewrite, repo, workloads
from kubectl_triton.gitops.assembly import version_folder
from kubectl_triton.gitops.lora import MULTI_LORA

POOL_MISSING = register(
    "ModelRewritePoolMissing", "error", "cluster",
    "An InferenceModelRewrite's spec.poolRef names no InferencePool (inference.networking.k8s.io) that the "
    "repository renders in its namespace: no endpoint picker applies it.",
    "Name the model's pool (overlays/MODEL/route/inferencepool.yaml); `kubectl triton canary MODEL --adapter` writes "
    "the rewrite beside it.")
TARGET_UNSERVED = register(
    "ModelRewriteTargetUnserved", "error", "cluster",
    "An InferenceModelRewrite target names a model the pool's pods do not serve: Triton's OpenAI-compatible frontend "
    "answers each Triton model's name and, with --lora-separator, `<model><SEP><adapter>` for the adapters of its "
    "multi_lora.json; other names (and any name, on pods without that frontend) fail the request.",
    "Target an adapter of the model's multi_lora.json (kubectl triton add-adapter), run the OpenAI frontend with "
    "--lora-separator (add-model --frontend openai, Triton 25.05 or later), or fix the name.")
WEIGHTS = register(
    "ModelRewriteWeights", "error", "cluster",
    "Some targets of an InferenceModelRewrite rule set a weight and others do not: the API requires all or none, "
    "and the endpoint picker sends nothing to a target without one.",
    "Give every target of the rule a weight (`kubectl triton canary MODEL --adapter NAME --weight P` writes both).")
OVERLAP = register(
    "ModelRewriteOverlap", "warning", "cluster",
    "An InferenceModelRewrite rule without matches rewrites every request of its pool, or one model name is matched "
    "by two rules of the same pool: the picker applies one of them only (the oldest object's, which git cannot "
    "show).",
    "Give each rule the exact names it rewrites, one rule per name and pool.")

POOL_API = f"{modelrewrite.POOL_GROUP}/v1"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _target_namespaces(root: Path) -> dict[Path, str | None]:
    """Folder -> the spec.targetNamespace the Flux Kustomizations applying it agree on (None: none, or several)."""
    found: dict[Path, set[str]] = defaultdict(set)
    for ks in repo.flux_kustomizations(root, tolerant=True):  # malformed Flux files are reported by the gate
        if ks.spec.get("targetNamespace"):
            found[repo.resolved(root / ks.path)].add(str(ks.spec["targetNamespace"]))
    return {path: names.pop() if len(names) == 1 else None for path, names in found.items()}


def served_models(data: dict[str, Any]) -> dict[str, list[str]]:
    """Triton model -> the adapters the OpenAI frontend lists for it, from a model-config ConfigMap's data (keys are
    repository paths with "/" written "__"; the frontend reads the highest version folder's multi_lora.json)."""
    parts = {key: key.split(assembly.SEPARATOR) for key in data}
    out: dict[str, list[str]] = {}
    for key, path in parts.items():
        if len(path) != 2 or path[1] != "config.pbtxt":
            continue
        model = path[0]
        versions = sorted({v for p in parts.values()
                           if len(p) >= 3 and p[0] == model and (v := version_folder(p[1])) is not None})
        adapters: list[str] = []
        if versions:
            folder = f"{model}{assembly.SEPARATOR}{versions[-1]}{assembly.SEPARATOR}"
            try:
                multi = json.loads(str(data.get(folder + MULTI_LORA) or "null"))
                backend = pbtxt.parse(str(data[key]), key).backend
                args = json.loads(str(data.get(folder + "model.json") or "{}")) if backend == "vllm" else {}
            except (json.JSONDecodeError, TritonCtlError):
                multi = None  # the model and LoRA checks report the file; the frontend lists no adapter then
            enabled = backend != "vllm" or (isinstance(args, dict) and str(args.get("enable_lora")).lower() == "true")
            if isinstance(multi, dict) and enabled:
                adapters = [str(name) for name in multi]
        out[model] = adapters
    return out


class _Pods:
    """What the pods of one pool serve, as the overlays rendering them say."""

    def __init__(self, pool: dict, servers: list[tuple[dict, Any]]) -> None:
        self.pool = pool
        self.servers = servers  # (workload, target)
        self.problems: list[str] = []
        names: set[str] | None = None
        for workload, target in servers:
            template = workloads.serving_template(workload)
            front = modelrewrite.frontend(workloads.server_container(template.spec) if template else None)
            where = f"{object_id(workload)} ({target.rel})"
            if not front.openai:
                self.problems.append(f"{where} runs Triton without the OpenAI-compatible frontend: its requests carry "
                                     "no model name the endpoint picker could match or rewrite")
                continue
            cm = assembly.model_config_map(target.objects)
            mine = modelrewrite.served_names(served_models(_dict((cm or {}).get("data"))), front.separator)
            if front.separator is None:
                self.problems.append(f"{where} runs the OpenAI-compatible frontend without "
                                     f"{modelrewrite.SEPARATOR_FLAG}: no adapter has a name of its own")
            names = mine if names is None else names & mine
        self.names = names or set()


def check(root: Path, targets: list[Any]) -> list[Finding]:
    """Findings for every InferenceModelRewrite among the rendered targets."""
    namespaces = _target_namespaces(root)
    pools: dict[tuple[str, str], dict] = {}
    serving: list[tuple[str, dict, Any]] = []
    rewrites: list[tuple[str, dict, Any]] = []
    for target in targets:
        for obj in target.objects:
            if not isinstance(obj, dict):
                continue
            ns = namespaces.get(target.path) or str(_dict(obj.get("metadata")).get("namespace") or "default")
            if obj.get("apiVersion") == POOL_API and obj.get("kind") == modelrewrite.POOL_KIND:
                pools[(ns, str(_dict(obj.get("metadata")).get("name")))] = obj
            elif modelrewrite.is_rewrite(obj):
                rewrites.append((ns, obj, target))
            elif workloads.serving_template(obj) is not None:
                serving.append((ns, obj, target))
    out: list[Finding] = []
    pods: dict[tuple[str, str], _Pods] = {}
    matched: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)  # pool -> name -> where it is matched
    for ns, obj, target in rewrites:
        oid = object_id(obj)
        group, kind, name = modelrewrite.pool_ref(obj)
        key = (ns, name)
        if (group, kind) != (modelrewrite.POOL_GROUP, modelrewrite.POOL_KIND):
            out.append(POOL_MISSING.finding(f"spec.poolRef names a {kind} of {group or 'the core group'}; the endpoint "
                                            f"picker applies the rewrites of its {modelrewrite.POOL_KIND} "
                                            f"({modelrewrite.POOL_GROUP}) only", path=target.rel, object=oid))
        elif key not in pools:
            out.append(POOL_MISSING.finding(f"spec.poolRef names the InferencePool {ns}/{name}, which no folder of "
                                            "the repository renders: no endpoint picker applies this rewrite",
                                            path=target.rel, object=oid))
        elif key not in pods:
            selector = _dict(_dict(_dict(pools[key].get("spec")).get("selector")).get("matchLabels"))
            pods[key] = _Pods(pools[key], [(w, t) for wns, w, t in serving if wns == ns and _selects(selector, w)])
        found = pods.get(key) if (group, kind) == (modelrewrite.POOL_GROUP, modelrewrite.POOL_KIND) else None
        out += _rules(obj, oid, target, name, found, matched[key])
    return out


def _selects(selector: dict[str, Any], workload: dict) -> bool:
    template = workloads.serving_template(workload)
    labels = _dict(template.metadata.get("labels")) if template else {}
    return bool(selector) and all(str(labels.get(k)) == str(v) for k, v in selector.items())


def _rules(obj: dict, oid: str, target: Any, pool: str, pods: _Pods | None, matched: dict[str, str]) -> list[Finding]:
    out: list[Finding] = []
    told = False
    for i, rule in enumerate(modelrewrite.rules(obj)):
        weights = [t.weight is not None for t in rule.targets]
        if any(weights) and not all(weights):
            unset = ", ".join(t.model for t in rule.targets if t.weight is None)
            out.append(WEIGHTS.finding(f"rules[{i}]: {unset} without a weight while another target has one: the "
                                       "endpoint picker sends it nothing (the API asks for a weight on all targets "
                                       "or none)", path=target.rel, object=oid))
        if not rule.matches:
            out.append(OVERLAP.finding(f"rules[{i}] has no matches: it rewrites every request of the pool {pool}",
                                       path=target.rel, object=oid))
        for name in rule.matches:
            here = f"{oid} rules[{i}]"
            if name in matched and matched[name] != here:
                out.append(OVERLAP.finding(f"rules[{i}] matches {name}, as {matched[name]} does for the same pool "
                                           f"{pool}: the picker applies one of them only (the oldest object's)",
                                           path=target.rel, object=oid))
            matched.setdefault(name, here)
        if pods is None:
            continue
        if not pods.servers:
            if not told:
                out.append(TARGET_UNSERVED.finding(
                    f"not checked: no workload the repository renders runs the pods the pool {pool} selects",
                    path=target.rel, object=oid, severity=INFO))
                told = True
            continue
        for j, t in enumerate(rule.targets):
            if t.model in pods.names:
                continue
            why = "; ".join(pods.problems) if pods.problems else \
                f"they serve {', '.join(sorted(pods.names)[:8]) or 'no model'}"
            out.append(TARGET_UNSERVED.finding(f"rules[{i}].targets[{j}]: {t.model} is not a model the pods of the "
                                               f"pool {pool} serve ({why}): its requests fail", path=target.rel,
                                               object=oid))
    return out
