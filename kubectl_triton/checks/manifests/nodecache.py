"""The node-local cache of model weights (gitops/nodecache.py, docs/node-cache.md): every pod template that mounts the
cache volume, checked against the layout file's `nodeCache:` and the model's `artifacts.size` and `.revision`, and
the models cached on each GPU type of each cluster against one node's budget. Pure over rendered objects and
repository files."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import Finding
from kubectl_triton.checks.manifests import clusterversions
from kubectl_triton.checks.manifests.gpufacts import ModelMeta, read_models
from kubectl_triton.checks.registry import register
from kubectl_triton.compat.catalog import by_gfd_label
from kubectl_triton.compat.repo_check import admitted_labels
from kubectl_triton.errors import InputError
from kubectl_triton.formats.schemas import object_id
from kubectl_triton.gitops import nodecache, workloads
from kubectl_triton.gitops.layout import LAYOUT_FILE, NodeCacheLayoutError, NodeCacheSettings, read_node_cache
from kubectl_triton.gitops.model import Repository

BUDGET_EXCEEDED = register(
    "NodeCacheBudgetExceeded", "error", "cluster",
    "The models a cluster caches on the nodes of one GPU type take more than one node's cache budget together (each "
    "model's artifacts.size times the revisions a node keeps): any of them may land on any node of the type, and "
    "the node that holds them all runs out of cache disk (the download fails, \"No space left on device\"; on the "
    "node's root disk, kubelet reports DiskPressure and evicts pods).",
    "Raise nodeCache.budget (or nodeCache.gpus.<type>.budget) in kubectl-triton.yaml up to what the nodes' cache "
    "disk holds, lower NODE_CACHE_KEEP, or take a model off the cache (drop ../../artifacts/node-cache).")
SIZE_MISSING = register(
    "NodeCacheSizeMissing", "error", "model",
    "A model kept in the node cache declares no size of its files (models/<model>/model.yaml artifacts.size): the "
    "cache's budget is not checked for it.",
    "Declare artifacts.size (e.g. 16Gi: what `aws s3 ls --summarize --recursive` totals under its uri).")
NOT_CONFIGURED = register(
    "NodeCacheNotConfigured", "error", "repository",
    "An overlay uses the node cache, and kubectl-triton.yaml declares no usable nodeCache (the folder every cache "
    "node holds, not a system folder; its budget): the cache's volume and budget are not checked.",
    "Add nodeCache (path, budget) to kubectl-triton.yaml (docs/node-cache.md, docs/layout-file.md).")
VOLUME_MISMATCH = register(
    "NodeCacheVolumeMismatch", "error", "overlay",
    "The node cache's PersistentVolume is not the local volume kubectl-triton.yaml's nodeCache describes (another "
    "path, a hostPath, another node affinity): the pods would mount a folder the cache nodes do not prepare, or be "
    "scheduled onto nodes without it (\"path ... does not exist\", ContainerCreating).",
    "A PersistentVolume's local.path and node affinity cannot change once it exists: give the volume and its claim "
    "new names (or delete both) and write them from the layout file (`kubectl triton add-model ... --node-cache "
    "--force`); Flux then creates them anew.")
REVISION_MISMATCH = register(
    "NodeCacheRevisionMismatch", "error", "overlay",
    "The revision that keys a model's copy in the node cache (NODE_CACHE_REVISION of its artifact-source ConfigMap) "
    "is missing, malformed or not the one models/<model>/model.yaml declares (artifacts.revision): a pod would stop "
    "at its init container, or the files reviewed in git are not the ones cached.",
    "Set artifacts.revision in model.yaml and NODE_CACHE_REVISION in the model Component's artifact-source literals "
    "to the same value; change both whenever the files under the model's uri change.")
SYNC_MISSING = register(
    "NodeCacheSyncMissing", "error", "overlay",
    "A pod mounts the node cache, and no fetch-artifacts init container with an image runs node-cache.sh: the "
    "overlays/artifacts/node-cache Component wraps the S3 Component's sync, so it must be listed after "
    "../../artifacts/s3 (alone, or before it, it leaves an init container without an image, or two).",
    "List ../../artifacts/s3 and then ../../artifacts/node-cache in the overlay's components.")


@dataclass(frozen=True)
class _Use:
    """One pod template keeping `model` in the cache, on nodes of GPU type `gpu`."""

    model: str
    gpu: str | None  # the catalog type, else the product label, else None (any node)
    keep: int
    overlay: str


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _named(objects: list[dict], kind: str, name: Any) -> dict | None:
    return next((o for o in objects if o.get("kind") == kind and _dict(o.get("metadata")).get("name") == name), None)


def _container(spec: dict, key: str, name: str) -> dict:
    return next((c for c in _list(spec.get(key)) if isinstance(c, dict) and c.get("name") == name), {})


def _env(container: dict, name: str) -> dict:
    return next((e for e in _list(container.get("env")) if isinstance(e, dict) and e.get("name") == name), {})


def _source(objects: list[dict], container: dict) -> dict[str, str]:
    """The artifact-source ConfigMap's data the fetch container reads (NODE_CACHE_MODEL through env, the rest
    through envFrom)."""
    ref = _dict(_dict(_env(container, nodecache.MODEL_KEY).get("valueFrom")).get("configMapKeyRef"))
    names = [ref.get("name")] + [_dict(e.get("configMapRef")).get("name") for e in _list(container.get("envFrom"))
                                 if isinstance(e, dict)]
    data: dict[str, str] = {}
    for name in reversed([n for n in names if n]):
        found = _named(objects, "ConfigMap", name)
        data.update({str(k): str(v) for k, v in _dict((found or {}).get("data")).items()})
    return data


def _gpu(spec: dict) -> str | None:
    labels = admitted_labels(spec)
    if not labels:
        return None
    found = {g.key for g in (by_gfd_label(label) for label in labels) if g is not None}
    return next(iter(found)) if len(found) == 1 else ",".join(sorted(labels))


def _volume_findings(objects: list[dict], claim_name: Any, settings: NodeCacheSettings, rel: str, oid: str
                     ) -> Iterator[Finding]:
    """The claim's PersistentVolume against nodeCache (when the overlay renders both; ClaimMissing covers the rest)."""
    claim = _named(objects, "PersistentVolumeClaim", claim_name)
    volume = _named(objects, "PersistentVolume", _dict((claim or {}).get("spec")).get("volumeName"))
    if volume is None:
        return
    spec = _dict(volume.get("spec"))
    name = _dict(volume.get("metadata")).get("name")
    if "local" not in spec:
        kind = next((k for k in spec if k in ("hostPath", "nfs", "csi")), "no local")
        yield VOLUME_MISMATCH.finding(
            f"PersistentVolume {name} is a {kind} volume, not a local one: the node cache is a local volume at "
            f"nodeCache.path ({settings.path}) of every cache node", path=rel, object=oid)
        return
    path = str(_dict(spec.get("local")).get("path") or "").rstrip("/")
    if path != settings.path:
        yield VOLUME_MISMATCH.finding(
            f"PersistentVolume {name} is the folder {path or '(none)'} of the cache nodes, and {LAYOUT_FILE} "
            f"nodeCache.path is {settings.path}: the nodes prepare the latter (a local volume's folder must exist, "
            "or the pods stay in ContainerCreating)", path=rel, object=oid)
    terms = _list(_dict(_dict(spec.get("nodeAffinity")).get("required")).get("nodeSelectorTerms"))
    wanted = dict(settings.node_selector)
    for term in terms or [{}]:
        exprs = {str(e.get("key")): e for e in _list(_dict(term).get("matchExpressions")) if isinstance(e, dict)}
        missing = [f"{k}={v}" for k, v in wanted.items()
                   if _dict(exprs.get(k)).get("operator") != "In" or _list(_dict(exprs.get(k)).get("values")) != [v]]
        if missing:
            yield VOLUME_MISMATCH.finding(
                f"PersistentVolume {name}'s node affinity does not require {', '.join(missing)} ({LAYOUT_FILE} "
                "nodeCache.nodeSelector): its pods may be scheduled onto nodes that do not hold the cache folder",
                path=rel, object=oid)
            return


def _template_findings(objects: list[dict], spec: dict, volume: dict, settings: NodeCacheSettings | None,
                       models: dict[str, ModelMeta], models_dir: str, rel: str, oid: str
                       ) -> tuple[list[Finding], _Use | None]:
    out: list[Finding] = []
    fetch = _container(spec, "initContainers", nodecache.FETCH_CONTAINER)
    fetches = [c for c in _list(spec.get("initContainers"))
               if isinstance(c, dict) and c.get("name") == nodecache.FETCH_CONTAINER]
    runs = any(nodecache.SCRIPT in str(part) for part in _list(fetch.get("command")) + _list(fetch.get("args")))
    if len(fetches) != 1 or not fetch.get("image") or not runs:
        why = ("two fetch-artifacts init containers" if len(fetches) > 1 else
               "no fetch-artifacts init container" if not fetches else
               "the fetch-artifacts init container has no image" if not fetch.get("image") else
               f"the fetch-artifacts init container does not run {nodecache.SCRIPT}")
        out.append(SYNC_MISSING.finding(
            f"volume {volume.get('name')} is the node cache and {why}: list ../../artifacts/s3, then "
            "../../artifacts/node-cache, in the overlay's components", path=rel, object=oid))
        return out, None
    claim = _dict(volume.get("persistentVolumeClaim")).get("claimName")
    if settings is not None:
        out.extend(_volume_findings(objects, claim, settings, rel, oid))
    source = _source(objects, fetch)
    model = source.get(nodecache.MODEL_KEY)
    if not model:
        return out, None  # ConfigMapMissing / the API server report an unresolved reference
    revision = source.get(nodecache.REVISION_KEY)
    meta = models.get(model)
    declared = nodecache.declared(meta.meta) if meta is not None else nodecache.Declared(None, None)
    meta_path = meta.path if meta is not None else f"{models_dir}/{model}/model.yaml"
    if revision is None or not nodecache.revision_ok(revision):
        out.append(REVISION_MISMATCH.finding(
            f"{model}: the artifact-source ConfigMap has " + (f"no {nodecache.REVISION_KEY}" if revision is None else
                                                             f"{nodecache.REVISION_KEY}={revision!r}, not a folder "
                                                             "name (letters, digits, '.', '_', '-')")
            + ": the fetch-artifacts init container stops before any download", path=rel, object=oid, model=model))
    elif declared.revision_problem is not None:
        out.append(REVISION_MISMATCH.finding(f"{declared.revision_problem} (the model is kept in the node cache by "
                                             f"{rel})", path=meta_path, model=model))
    elif declared.revision != revision:
        said = f"artifacts.revision {declared.revision}" if declared.revision else "no artifacts.revision"
        out.append(REVISION_MISMATCH.finding(
            f"{model}: the pods key the cache by {nodecache.REVISION_KEY}={revision}, and {meta_path} declares "
            f"{said}: the revision reviewed in git is not the one cached", path=rel, object=oid, model=model))
    if declared.size_problem is not None:
        out.append(SIZE_MISSING.finding(f"{declared.size_problem} (the model is kept in the node cache by {rel})",
                                        path=meta_path, model=model))
    elif declared.size is None:
        out.append(SIZE_MISSING.finding(
            f"kept in the node cache by {rel} " + ("without artifacts.size" if meta is not None else
                                                    f"and there is no {meta_path} to declare artifacts.size")
            + ": its share of the nodes' cache budget is not checked; declare the size of its files (e.g. 16Gi)",
            path=meta_path, model=model))
    keep_text = _env(fetch, nodecache.KEEP_ENV).get("value")
    keep = nodecache.DEFAULT_KEEP
    if isinstance(keep_text, str) and keep_text.isascii() and keep_text.isdigit() and int(keep_text) > 0:
        keep = int(keep_text)
    return out, _Use(model, _gpu(spec), keep, rel)


def _budget_findings(groups: dict[tuple[str | None, str | None], dict[str, _Use]], settings: NodeCacheSettings,
                     sizes: dict[str, int | None]) -> Iterator[Finding]:
    for (cluster, gpu), uses in sorted(groups.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "")):
        counted = {m: u for m, u in sorted(uses.items()) if sizes.get(m) is not None}
        total = sum(nodecache.footprint(sizes[m] or 0, u.keep) for m, u in counted.items())
        budget, budget_text, where = settings.budget_of(gpu)
        if total <= budget:
            continue
        parts = " + ".join(f"{m} {u.keep} x {nodecache.human(sizes[m] or 0)}" for m, u in counted.items())
        unknown = sorted(set(uses) - set(counted))
        on = f"cluster {cluster}" if cluster else "the overlays no cluster applies"
        overlays = ", ".join(sorted({u.overlay for u in uses.values()}))
        nodes = f"{gpu} nodes" if gpu else "any node"
        yield BUDGET_EXCEEDED.finding(
            f"{on}, {nodes}: the models kept in the node cache take {parts} = {nodecache.human(total)}, more than "
            f"one node's budget {budget_text} ({where})"
            + (f" (not counting {', '.join(unknown)}, whose size is not declared)" if unknown else "")
            + f": a node that runs them all runs out of cache disk ({overlays})",
            path=LAYOUT_FILE)


def check(root: Path, targets: list[Any]) -> list[Finding]:
    """validate's hook: every pod template mounting the node cache, and the budget of each cluster's GPU types."""
    repository = Repository.at(root, tolerant=True)
    out: list[Finding] = []
    try:
        settings = read_node_cache(root)
        layout_ok = True
    except NodeCacheLayoutError as err:  # valid by the schema, refused by the reader
        settings, layout_ok = None, False
        out.append(NOT_CONFIGURED.finding(f"{err.problem}: the node cache is not checked", path=err.path,
                                          line=err.line))
    except InputError:  # LayoutInvalid, from the gate's own layout check
        settings, layout_ok = None, False
    models = read_models(root)
    clusters = clusterversions.target_clusters(root, targets)
    groups: dict[tuple[str | None, str | None], dict[str, _Use]] = defaultdict(dict)
    overlays = f"{repository.layout.overlays}/"
    for target in targets:
        if not target.rel.startswith(overlays):
            continue
        objects = [o for o in target.objects if isinstance(o, dict)]
        for obj in objects:
            if obj.get("kind") not in workloads.SERVING_KINDS:
                continue
            for template in workloads.templates(obj):
                volume = next((v for v in _list(template.spec.get("volumes")) if isinstance(v, dict)
                               and v.get("name") == nodecache.CACHE_VOLUME), None)
                if volume is None:
                    continue
                if settings is None and layout_ok:
                    out.append(NOT_CONFIGURED.finding(
                        f"{target.rel} keeps its model in the node cache, and {LAYOUT_FILE} declares no nodeCache "
                        "(path, budget): add it (docs/node-cache.md)", path=LAYOUT_FILE))
                found, use = _template_findings(objects, template.spec, volume, settings, models,
                                                repository.layout.models, target.rel, object_id(obj))
                out.extend(found)
                if use is not None:
                    names: list[str | None] = [*clusters.get(target.path, [])] or [None]
                    for cluster in names:
                        groups[(cluster, use.gpu)].setdefault(use.model, use)
    if settings is not None:
        sizes = {m: nodecache.declared(meta.meta).size for m, meta in models.items()}
        out.extend(_budget_findings(groups, settings, sizes))
    return list(dict.fromkeys(out))
