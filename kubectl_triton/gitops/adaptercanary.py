"""Canary rollouts of LoRA adapters behind an InferencePool: pure planning over the repository's files.

A model routed through an InferencePool (add-model --route inferencepool) that runs Triton's OpenAI-compatible
frontend with a LoRA separator (gitops/modelrewrite.py) serves each adapter of its multi_lora.json under
`<triton model><SEP><adapter>`. `canary MODEL --adapter NAME --to NEW --weight P` writes
overlays/MODEL/route/inferencemodelrewrite.yaml: one InferenceModelRewrite of the model's pool with one rule per
adapter in rollout, matching the name clients send for NAME and splitting it between NAME (100 - P) and NEW (P).
The pool's endpoint picker rewrites each request's `model` by weight; no pod restarts, clients keep their name.

- `--weight P` again changes the two weights;
- `promote --adapter NAME`: the rule keeps one target, NEW: every request naming NAME is served by NEW (an alias,
  as the extension's own adapter rollout ends). multi_lora.json is not changed: swapping NAME's folder would roll
  every pod (its ConfigMap changes) and leave NAME's reviewed adapter_config.json describing weights it no longer
  serves. A later canary of NAME starts from NEW;
- `abort --adapter NAME`: the rule goes back to what it was before the canary (no rule at all, or the promoted
  alias); the file and its kustomization entry go with the last rule.

The commands read `Facts` (`read_facts`) and turn them into a scaffold `Plan` that `scaffold.write_plan` applies
all or nothing; each refusal is one InputError naming the file that shows why."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubectl_triton.errors import InputError
from kubectl_triton.formats import yamldump as Y
from kubectl_triton.formats.yamledit import edit_resources
from kubectl_triton.formats.yamlio import loads_all
from kubectl_triton.gitops import inferencepool, lora, modelrewrite, workloads
from kubectl_triton.gitops.assembly import version_folder
from kubectl_triton.gitops.labels import INSTANCE_LABEL
from kubectl_triton.gitops.lora import MULTI_LORA
from kubectl_triton.gitops.model import CANARY_SUFFIX, MODEL_COMPONENT, ROUTE_DIR, Layout, Repository
from kubectl_triton.gitops.scaffold import LORA_SEPARATOR, Plan, validate_name

ROUTE_FILE = "httproute.yaml"
POOL_FILE = "inferencepool.yaml"
CANARY_POOL_FILE = "inferencepool-canary.yaml"
KUSTOMIZATION = "kustomization.yaml"
DEPLOYMENT_PATCH = "deployment.yaml"  # the model Component's patch of the base Deployment (add-model writes it)


@dataclass(frozen=True)
class Facts:
    """What the adapter canary commands read from the repository (paths repository-relative)."""

    model: str
    layout: Layout
    texts: dict[str, str]  # path -> text of the route files and the Component's Deployment patch that exist
    version_canary: str | None = None  # a folder or file that shows a version canary in progress
    triton_model: str | None = None  # the Triton model whose latest version folder has a multi_lora.json
    multi_lora_rel: str | None = None
    adapters: tuple[str, ...] = ()
    lora_models: tuple[str, ...] = ()  # every Triton model with a multi_lora.json (more than one: ambiguous)

    @property
    def route_dir(self) -> str:
        return self.layout.overlay_dir(self.model, ROUTE_DIR)

    def route(self, name: str) -> str:
        return f"{self.route_dir}/{name}"

    @property
    def rewrite_rel(self) -> str:
        return self.route(modelrewrite.FILE)

    @property
    def deployment_rel(self) -> str:
        return f"{self.layout.overlay_dir(self.model, MODEL_COMPONENT)}/{DEPLOYMENT_PATCH}"


@dataclass(frozen=True)
class Split:
    """An adapter's rollout as a command reports it: the name clients send for `adapter`, the adapter that serves
    the rest of them (`stable`), the canary adapter and its share."""

    adapter: str
    client: str
    stable: str
    canary: str | None = None
    weight: int | None = None


# ---- reading the repository ---------------------------------------------------------------------------

def read_facts(root: Path, model: str) -> Facts:
    """The model's route folder, its Component's Deployment patch and the multi_lora.json of its Triton models."""
    validate_name(model)
    layout = Repository.at(root).layout
    mdir = root / layout.model_dir(model)
    if not mdir.is_dir():
        raise InputError(f"{model}: no such model ({layout.model_dir(model)}/)",
                         hint="kubectl triton add-model creates one")
    texts: dict[str, str] = {}
    route = layout.overlay_dir(model, ROUTE_DIR)
    deployment = f"{layout.overlay_dir(model, MODEL_COMPONENT)}/{DEPLOYMENT_PATCH}"
    for rel in [f"{route}/{n}" for n in (ROUTE_FILE, POOL_FILE, KUSTOMIZATION, modelrewrite.FILE)] + [deployment]:
        text = _read(root, rel)
        if text is not None:
            texts[rel] = text
    version_canary = None
    overlays = root / layout.overlay_dir(model)
    canaries = sorted(p.parent.name for p in overlays.glob(f"*{CANARY_SUFFIX}/kustomization.yaml"))
    if canaries:
        version_canary = layout.overlay_dir(model, canaries[0])
    elif (root / route / CANARY_POOL_FILE).is_file():
        version_canary = f"{route}/{CANARY_POOL_FILE}"
    lora_models: list[tuple[str, str]] = []
    for config in sorted(mdir.glob("*/config.pbtxt")):
        versions = sorted(v for p in config.parent.iterdir()
                          if p.is_dir() and (v := version_folder(p.name)) is not None)
        if versions and (config.parent / str(versions[-1]) / MULTI_LORA).is_file():
            lora_models.append((config.parent.name, f"{layout.model_dir(model)}/{config.parent.name}/"
                                                    f"{versions[-1]}/{MULTI_LORA}"))
    triton_model = multi_rel = None
    adapters: tuple[str, ...] = ()
    if len(lora_models) == 1:
        triton_model, multi_rel = lora_models[0]
        adapters = tuple(lora.read_multi_lora(_read(root, multi_rel) or "", multi_rel))
    return Facts(model=model, layout=layout, texts=texts, version_canary=version_canary, triton_model=triton_model,
                 multi_lora_rel=multi_rel, adapters=adapters, lora_models=tuple(m for m, _ in lora_models))


def _read(root: Path, rel: str) -> str | None:
    path = root / rel
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{rel}: cannot read: {getattr(err, 'strerror', None) or err}") from None


def rewrite_in_route(root: Path, model: str) -> str | None:
    """The model's InferenceModelRewrite file, if it has one (a version canary's second pool would not apply it)."""
    rel = f"{Repository.at(root).layout.overlay_dir(model, ROUTE_DIR)}/{modelrewrite.FILE}"
    return rel if (root / rel).is_file() else None


# ---- what a plan needs, refused one line at a time ------------------------------------------------------

@dataclass
class _Context:
    pool: str
    triton_model: str
    separator: str
    doc: dict[str, Any] = field(default_factory=dict)  # the current rewrite object ({} when there is none)


def _first(text: str, source: str) -> dict[str, Any]:
    docs = loads_all(text, source)
    return docs[0] if docs and isinstance(docs[0], dict) else {}


def _context(facts: Facts) -> _Context:
    route_rel, pool_rel = facts.route(ROUTE_FILE), facts.route(POOL_FILE)
    if route_rel not in facts.texts:
        raise InputError(f"{route_rel}: no such file: {facts.model} has no InferencePool route (add-model --route "
                         "inferencepool); only an endpoint picker can rewrite the adapter a request names")
    if not inferencepool.is_pool_route(_first(facts.texts[route_rel], route_rel)):
        raise InputError(f"{route_rel}: the route sends {facts.model}'s traffic to Services, not to an InferencePool "
                         "(add-model --route inferencepool); only an endpoint picker can rewrite the adapter a "
                         "request names")
    if pool_rel not in facts.texts or facts.route(KUSTOMIZATION) not in facts.texts:
        raise InputError(f"{facts.route_dir}/: the route sends traffic to an InferencePool but {POOL_FILE} or "
                         f"{KUSTOMIZATION} is missing")
    pool = str((_first(facts.texts[pool_rel], pool_rel).get("metadata") or {}).get("name") or "")
    if not pool:
        raise InputError(f"{pool_rel}: the InferencePool has no metadata.name")
    if facts.version_canary is not None:
        raise InputError(f"{facts.version_canary}: a version canary of {facts.model} is in progress; its second pool's "
                         "endpoint picker would not apply the rewrite: promote or abort it first")
    dep_rel = facts.deployment_rel
    if dep_rel not in facts.texts:
        raise InputError(f"{dep_rel}: no such file; cannot tell whether {facts.model} runs Triton's OpenAI-compatible "
                         "frontend")
    patch = _first(facts.texts[dep_rel], dep_rel)
    template = next(iter(workloads.templates(patch)), None)
    front = modelrewrite.frontend(workloads.server_container(template.spec) if template else None)
    if not front.openai:
        raise InputError(f"{dep_rel}: {facts.model} does not run Triton's OpenAI-compatible frontend (add-model "
                         "--frontend openai): its requests carry no model name for the endpoint picker to rewrite")
    if front.separator is None:
        raise InputError(f"{dep_rel}: the OpenAI-compatible frontend runs without {modelrewrite.SEPARATOR_FLAG}, so "
                         "no adapter has a name clients can send (Triton 25.05 and later: add "
                         f"{modelrewrite.SEPARATOR_FLAG}={LORA_SEPARATOR} to the tritonserver container's args)")
    model_dir = facts.layout.model_dir(facts.model)
    if len(facts.lora_models) > 1:
        raise InputError(f"{model_dir}/: several Triton models have a {MULTI_LORA} ({', '.join(facts.lora_models)}); "
                         "an adapter canary handles a model with one")
    if facts.triton_model is None or facts.multi_lora_rel is None:
        raise InputError(f"{model_dir}/: no Triton model of {facts.model} lists LoRA adapters (no {MULTI_LORA} in "
                         "its latest version folder; kubectl triton add-adapter adds them)")
    context = _Context(pool, facts.triton_model, front.separator)
    if facts.rewrite_rel in facts.texts:
        doc = _first(facts.texts[facts.rewrite_rel], facts.rewrite_rel)
        if not modelrewrite.is_rewrite(doc):
            raise InputError(f"{facts.rewrite_rel}: not an {modelrewrite.KIND} ({modelrewrite.API_VERSION})")
        group, kind, name = modelrewrite.pool_ref(doc)
        if (group, kind, name) != (modelrewrite.POOL_GROUP, modelrewrite.POOL_KIND, pool):
            raise InputError(f"{facts.rewrite_rel}: spec.poolRef names {kind} {name!r} ({group}), not the route's "
                             f"pool {pool!r}")
        context.doc = doc
    return context


def _adapter(facts: Facts, context: _Context, name: str, option: str) -> None:
    if name not in facts.adapters:
        raise InputError(f"{facts.multi_lora_rel}: {option} {name!r} is not an adapter of {facts.triton_model} "
                         f"(adapters: {', '.join(facts.adapters) or 'none'}; kubectl triton add-adapter adds one)")
    if context.separator in name or context.separator in context.triton_model:
        raise InputError(f"{facts.multi_lora_rel}: {option} {name!r}: the frontend's separator "
                         f"{context.separator!r} is in the name {context.triton_model}{context.separator}{name} more "
                         "than once, so clients cannot select the adapter (the frontend splits the name at it)")


def check_weight(weight: int) -> None:
    if not 1 <= weight <= 99:
        raise InputError(f"--weight {weight}: an adapter canary gets 1 to 99 percent (both targets of an "
                         "InferenceModelRewrite need a weight of at least 1); promote sends everything to it, abort "
                         "nothing")


def _rules(context: _Context) -> list[dict[str, Any]]:
    spec = context.doc.get("spec") if isinstance(context.doc.get("spec"), dict) else {}
    found = spec.get("rules") if isinstance(spec, dict) else None
    return [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []


def _find(facts: Facts, context: _Context, client: str) -> tuple[int | None, modelrewrite.Rule | None]:
    """The index and parsed form of the rule that rewrites exactly `client` (None, None: no rule names it)."""
    for i, raw in enumerate(_rules(context)):
        rule = modelrewrite.rules({"spec": {"rules": [raw]}})[0]
        if client not in rule.matches:
            continue
        if _simple(raw) is None or rule.matches != (client,):
            raise InputError(f"{facts.rewrite_rel}: rules[{i}] matches {client} among other names or with more than "
                             "two targets (edited by hand); an adapter canary needs a rule of its own")
        return i, rule
    return None, None


def _simple(raw: dict[str, Any]) -> tuple[str, list[modelrewrite.Target]] | None:
    """(the name, the targets) of a rule of the shape this module writes: one exact match, one or two targets."""
    matches = raw.get("matches")
    if not isinstance(matches, list) or len(matches) != 1 or not isinstance(matches[0], dict):
        return None
    model = matches[0].get("model")
    if not isinstance(model, dict) or model.get("type", "Exact") != "Exact" or set(model) - {"type", "value"}:
        return None
    if set(raw) - {"matches", "targets"} or any(not isinstance(t, dict) or set(t) - {"modelRewrite", "weight"}
                                                 for t in raw.get("targets") or [{}]):
        return None
    rule = modelrewrite.rules({"spec": {"rules": [raw]}})[0]
    if not 1 <= len(rule.targets) <= 2 or not rule.matches[0]:
        return None
    return rule.matches[0], list(rule.targets)


def _rule(client: str, targets: list[modelrewrite.Target]) -> Any:
    return Y.mapping(matches=Y.seq([Y.mapping(model=Y.flow({"type": "Exact", "value": client}))]),
                     targets=Y.seq(Y.flow({"modelRewrite": t.model, "weight": t.weight}) for t in targets))


def _short(context: _Context, name: str) -> str:
    """An adapter's name for a client name of the model's adapters (other names as they are)."""
    prefix = f"{context.triton_model}{context.separator}"
    return name[len(prefix):] if name.startswith(prefix) and len(name) > len(prefix) else name


def _note(facts: Facts, context: _Context, client: str, targets: tuple[modelrewrite.Target, ...]) -> str | None:
    if _short(context, client) == client:
        return None
    name = _short(context, client)
    shown = [_short(context, t.model) for t in targets]
    if len(targets) == 2:
        return (f"{name}: canary of {shown[1]} (kubectl triton promote|abort {facts.model} "
                f"--adapter {name})")
    if len(targets) == 1:
        return f"{name}: promoted, served by {shown[0]}"
    return None


def _file(facts: Facts, context: _Context, rules: list[Any]) -> str:
    """The rewrite file holding `rules` (the object's metadata kept when the file exists)."""
    meta = context.doc.get("metadata") if isinstance(context.doc.get("metadata"), dict) else None
    metadata = meta if meta else Y.mapping(name=facts.model, labels=Y.mapping([(INSTANCE_LABEL, facts.model)]))
    seq = Y.seq()
    for raw in rules:
        simple = _simple(raw)  # written the same way every time, so a weight change is a one-line diff
        seq.append(_rule(*simple) if simple else raw)
        note = _note(facts, context, simple[0], tuple(simple[1])) if simple else None
        if note:
            Y.comment(seq, len(seq) - 1, note, 4)
    doc = Y.mapping(apiVersion=modelrewrite.API_VERSION, kind=modelrewrite.KIND, metadata=metadata,
                    spec=Y.mapping(poolRef=Y.mapping(group=modelrewrite.POOL_GROUP, kind=modelrewrite.POOL_KIND,
                                                     name=context.pool), rules=seq))
    header = (f"{facts.model}'s LoRA adapters in rollout: the endpoint picker of the InferencePool {context.pool} "
              "rewrites the model a request\nnames, by weight (kubectl triton canary " + facts.model
              + " --adapter NAME --to NEW --weight P; promote|abort --adapter NAME).")
    return Y.dumps(doc, header)


def _write(facts: Facts, context: _Context, rules: list[Any]) -> Plan:
    """The plan that leaves `rules` in the rewrite file (deleted, with its kustomization entry, when empty)."""
    kust_rel = facts.route(KUSTOMIZATION)
    kust = facts.texts[kust_rel]
    if not rules:
        files = {}
        new = edit_resources(kust, remove=[modelrewrite.FILE], source=kust_rel)
        if new != kust:
            files[kust_rel] = new
        return Plan(files, (facts.rewrite_rel,) if facts.rewrite_rel in facts.texts else ())
    files = {facts.rewrite_rel: _file(facts, context, rules)}
    new = edit_resources(kust, add=[modelrewrite.FILE], source=kust_rel)
    if new != kust:
        files[kust_rel] = new
    return Plan(files)


# ---- the commands ---------------------------------------------------------------------------------------

def plan_canary(facts: Facts, *, adapter: str, to: str | None, weight: int) -> tuple[Plan, Split]:
    """Start the canary of adapter `to` for the requests naming `adapter` (with `to`), or change its share."""
    check_weight(weight)
    context = _context(facts)
    client = modelrewrite.client_name(context.triton_model, context.separator, adapter)
    index, rule = _find(facts, context, client)
    rules: list[Any] = list(_rules(context))
    new = modelrewrite.client_name(context.triton_model, context.separator, to) if to is not None else None
    if rule is not None and len(rule.targets) == 2:
        if new is not None and new != rule.targets[1].model:
            raise InputError(f"{facts.rewrite_rel}: {adapter}'s canary of {rule.targets[1].model} is in progress; "
                             f"promote or abort it (--adapter {adapter}) before starting another")
        stable, new = rule.targets[0].model, rule.targets[1].model
    else:
        if new is None or to is None:
            raise InputError(f"{facts.rewrite_rel}: no canary of adapter {adapter} in progress; start one with "
                             "--to NEW --weight P")
        if rule is None:  # a promoted name may have left multi_lora.json: its rule answers it
            _adapter(facts, context, adapter, "--adapter")
        _adapter(facts, context, to, "--to")
        stable = rule.targets[0].model if rule is not None else client
        if new == stable and rule is None:
            raise InputError(f"--to {to}: the canary must be another adapter than --adapter")
        if new == stable:
            raise InputError(f"{facts.rewrite_rel}: the requests naming {adapter} are served by {to} already")
    targets = [modelrewrite.Target(stable, 100 - weight), modelrewrite.Target(new, weight)]
    if index is None:
        rules.append(_rule(client, targets))
    else:
        rules[index] = _rule(client, targets)
    return _write(facts, context, rules), Split(adapter, client, _short(context, stable), _short(context, new), weight)


def _in_progress(facts: Facts, adapter: str) -> tuple[_Context, str, int, modelrewrite.Rule]:
    context = _context(facts)
    client = modelrewrite.client_name(context.triton_model, context.separator, adapter)
    index, rule = _find(facts, context, client)
    if index is None or rule is None or len(rule.targets) != 2:
        where = facts.rewrite_rel if facts.rewrite_rel in facts.texts else facts.route_dir + "/"
        raise InputError(f"{where}: no canary of adapter {adapter} in progress (kubectl triton canary {facts.model} "
                         f"--adapter {adapter} --to NEW --weight P starts one)")
    return context, client, index, rule


def plan_promote(facts: Facts, adapter: str) -> tuple[Plan, Split]:
    """Every request naming `adapter` goes to the canary adapter: the rule keeps that one target."""
    context, client, index, rule = _in_progress(facts, adapter)
    rules: list[Any] = list(_rules(context))
    rules[index] = _rule(client, [modelrewrite.Target(rule.targets[1].model, None)])
    return _write(facts, context, rules), Split(adapter, client, _short(context, rule.targets[1].model))


def plan_abort(facts: Facts, adapter: str) -> tuple[Plan, Split]:
    """The canary's share goes back: the rule becomes what it was before (none, or the promoted alias)."""
    context, client, index, rule = _in_progress(facts, adapter)
    rules: list[Any] = list(_rules(context))
    stable = rule.targets[0].model
    if stable == client:
        del rules[index]
    else:
        rules[index] = _rule(client, [modelrewrite.Target(stable, None)])
    return _write(facts, context, rules), Split(adapter, client, _short(context, stable),
                                                _short(context, rule.targets[1].model))


def how_clients_select(root: Path, model: str, triton_model: str, adapter: str) -> str:
    """How a client names `adapter` of `triton_model`: in sampling_parameters (KServe generate), and where the
    model runs the OpenAI-compatible frontend with a LoRA separator, as the request's model (add-adapter's hint)."""
    kserve = "{\"lora_name\": \"" + adapter + "\"} in sampling_parameters"
    layout = Repository.at(root).layout
    rel = f"{layout.overlay_dir(model, MODEL_COMPONENT)}/{DEPLOYMENT_PATCH}"
    try:
        patch = _first(_read(root, rel) or "", rel)
    except InputError:
        patch = {}
    template = next(iter(workloads.templates(patch)), None)
    front = modelrewrite.frontend(workloads.server_container(template.spec) if template else None)
    if not front.openai:
        return f"clients select it with {kserve}"
    if front.separator is None:
        return (f"KServe clients select it with {kserve}; OpenAI clients cannot name it until the frontend runs with "
                f"{modelrewrite.SEPARATOR_FLAG} (Triton 25.05 and later; {rel})")
    name = modelrewrite.client_name(triton_model, front.separator, adapter)
    return f"OpenAI clients select it with \"model\": \"{name}\" (KServe clients with {kserve})"
