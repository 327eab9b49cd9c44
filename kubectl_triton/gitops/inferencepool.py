"""InferencePool routing (Gateway API Inference Extension, `inference.networking.k8s.io/v1`): the files a model
routed through an InferencePool has under overlays/MODEL/route/, as data dumped by ruamel.yaml.

A pool selects one track's pods (`app.kubernetes.io/instance` MODEL or MODEL-canary; a multi-node group's leader
only) on Triton's HTTP port and names its endpoint picker: one deployed by the repository per pool
(base/endpoint-picker, route/endpoint-picker[-canary]/), or the platform's, declared in the layout file:

    # kubectl-triton.yaml
    inferencePool:
      endpointPicker: {name: my-epp, port: 9002}

The HTTPRoute sends the model's paths to the pool(s) by weight (`canary` adds MODEL-canary and splits)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats import yamldump as Y
from kubectl_triton.formats.yamlio import load_all, loads_all
from kubectl_triton.gitops.labels import GROUP as LABEL_GROUP
from kubectl_triton.gitops.labels import INSTANCE_LABEL, NAME_LABEL, TRITON_NAME
from kubectl_triton.gitops.model import ROUTE_DIR, Layout

GROUP = "inference.networking.k8s.io"
API_VERSION = f"{GROUP}/v1"
KIND = "InferencePool"
EPP_BASE = "endpoint-picker"  # a base (Layout.base)
EPP_DIR = "endpoint-picker"
EPP_PORT = 9002
TARGET_PORT = 8000
OPENAI_PORT = 9000  # the OpenAI-compatible frontend's (add-model --frontend openai)
LEADER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
POOL_LABEL = f"{LABEL_GROUP}/inference-pool"  # a picker's pods: not a model's (no app.kubernetes.io/instance)
LAYOUT_SECTION = "inferencePool"


@dataclass(frozen=True)
class EndpointPicker:
    """An endpoint picker the platform provides (the layout file's inferencePool.endpointPicker)."""

    name: str
    port: int = EPP_PORT


def pool_name(model: str, canary: bool = False) -> str:
    return model + ("-canary" if canary else "")


def epp_dir(canary: bool = False) -> str:
    """The folder under route/ of a pool's repository-deployed endpoint picker."""
    return EPP_DIR + ("-canary" if canary else "")


def platform_picker(root: Path, layout_file: str) -> EndpointPicker | None:
    """The layout file's `inferencePool.endpointPicker`, or None (then the repository deploys one per pool)."""
    path = root / layout_file
    if not path.is_file():
        return None
    docs = load_all(path)
    doc = docs[0] if docs and isinstance(docs[0], dict) else {}
    section = doc.get(LAYOUT_SECTION)
    if section is None:
        return None
    picker = section.get("endpointPicker") if isinstance(section, dict) else None
    if not isinstance(picker, dict) or not isinstance(picker.get("name"), str) or not picker["name"]:
        raise InputError(f"{layout_file}: {LAYOUT_SECTION}.endpointPicker needs a name (the picker's Service)")
    port = picker.get("port", EPP_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise InputError(f"{layout_file}: {LAYOUT_SECTION}.endpointPicker.port must be a port number, got {port!r}")
    return EndpointPicker(picker["name"], port)


def pool_yaml(model: str, *, canary: bool = False, multinode: bool = False,
              picker: EndpointPicker | None = None, port: int = TARGET_PORT) -> str:
    """route/inferencepool[-canary].yaml."""
    name = pool_name(model, canary)
    # Triton's pods of this track only (the track's endpoint picker carries the instance label too).
    selector = Y.mapping([(NAME_LABEL, TRITON_NAME), (INSTANCE_LABEL, name)])
    if multinode:
        selector[LEADER_LABEL] = "0"  # rank 0 serves; workers have no HTTP
    ref = picker or EndpointPicker(f"{name}-{EPP_DIR}")
    doc = Y.mapping(
        apiVersion=API_VERSION, kind=KIND,
        metadata=Y.mapping(name=name, labels=Y.mapping([(INSTANCE_LABEL, model)])),
        spec=Y.mapping(selector=Y.mapping(matchLabels=selector), targetPorts=Y.seq([Y.mapping(number=port)]),
                       endpointPickerRef=Y.mapping(name=ref.name, port=Y.mapping(number=ref.port),
                                                   failureMode="FailClose")))
    track = "canary" if canary else "stable"
    where = "the platform's endpoint picker" if picker else f"the endpoint picker in route/{epp_dir(canary)}/"
    return Y.dumps(doc, f"The {track} track of {model} as an InferencePool: {where} picks the pod for each request.")


def epp_kustomization(model: str, canary: bool = False, layout: Layout | None = None) -> str:
    """route/endpoint-picker[-canary]/kustomization.yaml: the repository's picker for one pool."""
    name = pool_name(model, canary)
    layout = layout or Layout()
    base = Layout.reference(f"{layout.overlay_dir(model, ROUTE_DIR)}/{epp_dir(canary)}", layout.base(EPP_BASE))
    ops = Y.seq([Y.mapping(op="replace", path="/spec/template/spec/containers/0/args/1", value=name)])
    doc = Y.mapping(apiVersion="kustomize.config.k8s.io/v1beta1", kind="Kustomization", namePrefix=f"{name}-",
                    labels=Y.seq([Y.mapping(pairs=Y.mapping([(POOL_LABEL, name)]), includeSelectors=True)]),
                    resources=Y.seq([base]),
                    patches=Y.seq([Y.mapping(target=Y.mapping(kind="Deployment"), patch=Y.literal(Y.dumps(ops)))]))
    Y.comment(doc["patches"], 0, f"--pool-name {name}", 2)
    return Y.dumps(doc)


def refs(model: str, weight: int | None) -> list[dict]:
    """backendRefs: the stable pool (and the canary pool at `weight`)."""
    out = [{"group": GROUP, "kind": KIND, "name": pool_name(model), "weight": 100 - (weight or 0)}]
    if weight is not None:
        out.append({"group": GROUP, "kind": KIND, "name": pool_name(model, True), "weight": weight})
    return out


def route_files(model: str, triton_models: list[str], *, gateway: tuple[str | None, str], multinode: bool,
                picker: EndpointPicker | None, openai: bool = False, layout: Layout | None = None) -> dict[str, str]:
    """overlays/MODEL/route/ files of a model routed through an InferencePool (relative to route/)."""
    ns, gw = gateway
    # A pool has one target port: Triton's KServe HTTP port, or the OpenAI-compatible frontend's for /v1 clients.
    paths = ["/v1"] if openai else [f"/v2/models/{m}" for m in sorted(triton_models)]
    matches = Y.seq(Y.mapping(path=Y.flow({"type": "PathPrefix", "value": p})) for p in paths)
    backend = Y.flow([Y.flow(r) for r in refs(model, None)])
    route = Y.mapping(
        apiVersion="gateway.networking.k8s.io/v1", kind="HTTPRoute",
        metadata=Y.mapping(name=model, labels=Y.mapping([(INSTANCE_LABEL, model)])),
        spec=Y.mapping(parentRefs=Y.seq([Y.mapping(name=gw, namespace=ns)]),
                       rules=Y.seq([Y.mapping(matches=matches, backendRefs=backend)])))
    header = (f"{model} behind the Gateway through its InferencePool (the endpoint picker chooses the pod).\n"
              f"`kubectl triton canary {model}` adds the pool {pool_name(model, True)} and splits by weight here.")
    resources = Y.seq(["inferencepool.yaml", "httproute.yaml"] + ([] if picker else [EPP_DIR]))
    kust = Y.mapping(apiVersion="kustomize.config.k8s.io/v1beta1", kind="Kustomization",
                     namespace=(layout or Layout()).namespace, resources=resources)
    files = {"kustomization.yaml": Y.dumps(kust),
             "inferencepool.yaml": pool_yaml(model, multinode=multinode, picker=picker,
                                             port=OPENAI_PORT if openai else TARGET_PORT),
             "httproute.yaml": Y.dumps(route, header)}
    if picker is None:
        files[f"{EPP_DIR}/kustomization.yaml"] = epp_kustomization(model, layout=layout)
    return files


def is_pool_route(doc: Any) -> bool:
    """Does a loaded HTTPRoute send traffic to InferencePools?"""
    rules = ((doc or {}).get("spec") or {}).get("rules") or [] if isinstance(doc, dict) else []
    return any(isinstance(b, dict) and b.get("kind") == KIND and b.get("group") == GROUP
               for r in rules if isinstance(r, dict) for b in r.get("backendRefs") or [])


def pool_port(text: str, source: str) -> int:
    """The target port a pool file names (the canary pool uses the same)."""
    docs = loads_all(text, source)
    doc = docs[0] if docs and isinstance(docs[0], dict) else {}
    ports = (doc.get("spec") or {}).get("targetPorts") or [{}]
    number = ports[0].get("number") if isinstance(ports[0], dict) else None
    return number if isinstance(number, int) else TARGET_PORT


def pool_selector_is_multinode(text: str, source: str) -> bool:
    """Does the stable pool file select a group's leader only (so the canary pool must too)?"""
    docs = loads_all(text, source)
    doc = docs[0] if docs and isinstance(docs[0], dict) else {}
    labels = (((doc.get("spec") or {}).get("selector") or {}).get("matchLabels") or {})
    return LEADER_LABEL in labels


def picker_of(text: str, source: str) -> EndpointPicker | None:
    """The platform picker a pool file names (None: the repository's own, `<pool>-endpoint-picker`)."""
    docs = loads_all(text, source)
    doc = docs[0] if docs and isinstance(docs[0], dict) else {}
    name = str((doc.get("metadata") or {}).get("name") or "")
    ref = (doc.get("spec") or {}).get("endpointPickerRef") or {}
    if not ref.get("name") or ref.get("name") == f"{name}-{EPP_DIR}":
        return None
    return EndpointPicker(str(ref["name"]), int((ref.get("port") or {}).get("number") or EPP_PORT))
