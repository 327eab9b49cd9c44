"""`diff`'s core: what a change to the repository does to each cluster.

Pure part: two snapshots (cluster -> object key -> rendered object) in, per-cluster added / removed / changed
objects and the workloads that will roll out out. Adapters at the bottom: rendering a tree into a snapshot the
way Flux applies it, and checking a git ref out into a temporary worktree that is always removed."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubectl_triton.adapters import kustomize
from kubectl_triton.errors import InputError, RenderError, ToolMissing, TritonCtlError
from kubectl_triton.formats import yamlio
from kubectl_triton.gitops.model import (
    FLUX_KUSTOMIZATION_API,
    LAYOUT_FILE,
    Layout,
    Repository,
    kustomization_file,
    relative,
)
from kubectl_triton.output.color import Style

UNAPPLIED = "(no cluster)"  # overlays that no Flux Kustomization applies
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "LeaderWorkerSet")  # a changed Job: Flux recreates it
# where each kind keeps its pod templates (a LeaderWorkerSet: the leader's and the workers')
POD_TEMPLATES = {"LeaderWorkerSet": ("spec.leaderWorkerTemplate.leaderTemplate",
                                     "spec.leaderWorkerTemplate.workerTemplate")}
HASHED_KINDS = ("ConfigMap", "Secret")
_HASH = re.compile(r"^(?P<stem>.+)-(?P<hash>[a-z0-9]{10})$")
_ABSENT = object()


@dataclass(frozen=True, order=True)
class Key:
    """An object's identity as the API server sees it (the API version is left out: v1beta1 -> v1 is a change)."""

    kind: str
    namespace: str
    name: str
    group: str = ""

    @classmethod
    def of(cls, obj: dict) -> Key:
        meta = obj.get("metadata") or {}
        api = str(obj.get("apiVersion", ""))
        return cls(str(obj.get("kind", "?")), str(meta.get("namespace") or ""), str(meta.get("name", "?")),
                   api.rpartition("/")[0])

    def __str__(self) -> str:
        return "/".join(p for p in (self.kind, self.namespace, self.name) if p)


@dataclass(frozen=True)
class Entry:
    """A rendered object and the folder it was rendered from (repository-relative)."""

    obj: dict
    source: str


Snapshot = dict[str, dict[Key, Entry]]  # cluster name -> objects that cluster receives


@dataclass(frozen=True)
class Change:
    """One field that differs; `before`/`after` are None when the field is absent on that side."""

    path: str
    before: Any = None
    after: Any = None


@dataclass
class Changed:
    object: str
    source: str
    changes: list[Change]
    renamed_from: str | None = None


@dataclass
class Roll:
    """A workload whose pod template changed: Kubernetes replaces its pods."""

    object: str
    source: str
    reasons: list[str]


@dataclass
class ClusterDiff:
    cluster: str
    added: list[tuple[str, str]] = field(default_factory=list)  # (object, source)
    removed: list[tuple[str, str]] = field(default_factory=list)
    changed: list[Changed] = field(default_factory=list)
    rolls: list[Roll] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


@dataclass
class Report:
    base: str  # the ref as given
    commit: str  # the commit rendered as the base
    clusters: list[ClusterDiff]
    errors: list[str] = field(default_factory=list)  # "side: path: reason" for folders that did not render

    @property
    def empty(self) -> bool:
        return all(c.empty for c in self.clusters)


# ---------------------------------------------------------------------------------------------- pure core


def field_changes(before: Any, after: Any, path: str = "") -> list[Change]:
    """Leaf-level differences; lists of objects with unique `name`s are matched by name (`containers[server]`)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in sorted(set(before) | set(after), key=str):
            sub = f"{path}.{key}" if path else str(key)
            out += _side_changes(before.get(key, _ABSENT), after.get(key, _ABSENT), sub)
        return out
    if isinstance(before, list) and isinstance(after, list):
        b_named, a_named = _by_name(before), _by_name(after)
        if b_named is not None and a_named is not None:
            out = []
            for name in [*b_named, *(n for n in a_named if n not in b_named)]:
                out += _side_changes(b_named.get(name, _ABSENT), a_named.get(name, _ABSENT), f"{path}[{name}]")
            return out
        if len(before) == len(after):
            out = []
            for i, (b, a) in enumerate(zip(before, after, strict=True)):
                out += field_changes(b, a, f"{path}[{i}]")
            return out
    return [] if before == after else [Change(path, before, after)]


def _side_changes(before: Any, after: Any, path: str) -> list[Change]:
    if before is _ABSENT:
        return [Change(path, None, after)]
    if after is _ABSENT:
        return [Change(path, before, None)]
    return field_changes(before, after, path)


def _by_name(items: list) -> dict[str, Any] | None:
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    named = {i["name"]: i for i in items}
    return named if len(named) == len(items) else None


def hash_stem(key: Key) -> str | None:
    """`model-config` for a kustomize-generated `ConfigMap/ns/model-config-<10-char hash>`, else None."""
    m = _HASH.match(key.name) if key.kind in HASHED_KINDS else None
    return m["stem"] if m else None


def diff_cluster(cluster: str, base: dict[Key, Entry], head: dict[Key, Entry]) -> ClusterDiff:
    """Added, removed and changed objects of one cluster; a generated ConfigMap/Secret whose hash suffix changed
    is one changed object (renamed), and a workload whose pod template changed is a roll."""
    out = ClusterDiff(cluster)
    removed = sorted(set(base) - set(head))
    added = sorted(set(head) - set(base))
    renames: dict[str, str] = {}  # old name -> new name, per (kind, namespace) of hashed kinds
    pairs: list[tuple[Key, Key]] = []
    for old in removed:
        stem = hash_stem(old)
        if stem is None:
            continue
        matches = [a for a in added if hash_stem(a) == stem and (a.kind, a.namespace, a.group)
                   == (old.kind, old.namespace, old.group)]
        olds = [r for r in removed if hash_stem(r) == stem and (r.kind, r.namespace) == (old.kind, old.namespace)]
        if len(matches) == 1 and len(olds) == 1:
            pairs.append((old, matches[0]))
    for old, new in pairs:
        removed.remove(old)
        added.remove(new)
        renames[f"{old.kind}/{old.namespace}/{old.name}"] = new.name
        changes = [c for c in field_changes(base[old].obj, head[new].obj) if c.path != "metadata.name"]
        out.changed.append(Changed(str(new), head[new].source, changes, renamed_from=old.name))
    out.added = [(str(k), head[k].source) for k in added]
    out.removed = [(str(k), base[k].source) for k in removed]
    for key in sorted(set(base) & set(head)):
        b, h = base[key].obj, head[key].obj
        if b == h:
            continue
        changes = field_changes(b, h)
        out.changed.append(Changed(str(key), head[key].source, changes))
        if key.kind in WORKLOADS:
            reasons = roll_reasons(key, b, h, renames)
            if reasons:
                out.rolls.append(Roll(str(key), head[key].source, reasons))
    out.changed.sort(key=lambda c: c.object)
    return out


def roll_reasons(key: Key, before: dict, after: dict, renames: dict[str, str]) -> list[str]:
    """Why a workload's pods are replaced: one line per pod-template change (empty: no roll)."""
    changes = []
    for path in POD_TEMPLATES.get(key.kind, ("spec.template",)):
        b_tpl, a_tpl = _at(before, path), _at(after, path)
        changes += field_changes(b_tpl, a_tpl, path.removeprefix("spec."))
    reasons = []
    for change in changes:
        ref_kind = "ConfigMap" if change.path.endswith(".configMap.name") else \
            "Secret" if change.path.endswith(".secret.secretName") else None
        if ref_kind and isinstance(change.before, str) and \
                renames.get(f"{ref_kind}/{key.namespace}/{change.before}") == change.after:
            stem = _HASH.match(change.after)
            reasons.append(f"{ref_kind} {stem['stem'] if stem else change.after} changed "
                           f"({change.before} → {change.after})")
        else:
            reasons.append(f"{change.path}: {short(change.before)} → {short(change.after)}")
    return reasons


def _at(obj: object, path: str) -> object:
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def diff(base: Snapshot, head: Snapshot) -> list[ClusterDiff]:
    """Every cluster of either side, in name order, with the unapplied overlays last."""
    names = sorted(set(base) | set(head), key=lambda n: (n == UNAPPLIED, n))
    return [diff_cluster(n, base.get(n, {}), head.get(n, {})) for n in names]


def short(value: Any, width: int = 60) -> str:
    """A value for one line: scalars as they are, structures as compact JSON, long text elided."""
    if value is None:
        return "(none)"
    if isinstance(value, str):
        text = value if "\n" not in value.strip("\n") else f"({len(value.splitlines())} lines)"
    else:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


# -------------------------------------------------------------------------------------------------- output


def to_dict(report: Report) -> dict:
    """The documented -o json / -o yaml document."""

    def cluster(c: ClusterDiff) -> dict:
        return {"cluster": c.cluster,
                "added": [{"object": o, "source": s} for o, s in c.added],
                "removed": [{"object": o, "source": s} for o, s in c.removed],
                "changed": [{"object": ch.object, "source": ch.source, "renamed_from": ch.renamed_from,
                             "changes": [asdict(x) for x in ch.changes]} for ch in c.changed],
                "rolls": [asdict(r) for r in c.rolls]}

    doc = {"base": {"ref": report.base, "commit": report.commit}, "head": "working tree",
           "changed": not report.empty, "errors": report.errors,
           "clusters": [cluster(c) for c in report.clusters if not c.empty]}
    return json.loads(json.dumps(doc, default=str))


def to_json(report: Report) -> str:
    return json.dumps(to_dict(report), indent=2)


def _title(c: ClusterDiff) -> str:
    name = "overlays no cluster applies" if c.cluster == UNAPPLIED else f"cluster {c.cluster}"
    return f"{name}: {len(c.added)} added, {len(c.removed)} removed, {len(c.changed)} changed"


def to_text(report: Report, style: Any = None) -> str:
    """Readable in a terminal: `+`/`-`/`~` per object, the changed fields, then the rolls."""
    st = style or Style(False)
    lines = [f"base {report.base} ({report.commit[:12]}) → working tree"]
    for err in report.errors:
        lines.append(st.red(f"error: {err}"))
    if report.empty:
        lines.append("No changes.")
        return "\n".join(lines)
    for c in report.clusters:
        if c.empty:
            continue
        lines += ["", st.bold(_title(c))]
        lines += [st.green(f"  + {o}") + f"  ({s})" for o, s in c.added]
        lines += [st.red(f"  - {o}") + f"  ({s})" for o, s in c.removed]
        for ch in c.changed:
            renamed = f" (was {ch.renamed_from})" if ch.renamed_from else ""
            lines.append(st.yellow(f"  ~ {ch.object}") + f"{renamed}  ({ch.source})")
            lines += [f"      {x.path}: {short(x.before)} → {short(x.after)}" for x in ch.changes]
        if c.rolls:
            lines.append(st.bold("  will roll out (pods replaced):"))
            for r in c.rolls:
                lines.append(f"    {r.object}  ({r.source})")
                lines += [f"      {reason}" for reason in r.reasons]
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(report: Report) -> str:
    """A pull-request comment / GitHub step summary."""
    lines = ["## kubectl triton diff", "",
             f"Base `{report.base}` (`{report.commit[:12]}`) → this change."]
    for err in report.errors:
        lines += ["", f"> **Error:** {_md(err)}"]
    if report.empty:
        lines += ["", "No changes to what any cluster runs."]
        return "\n".join(lines) + "\n"
    for c in report.clusters:
        if c.empty:
            continue
        lines += ["", f"### {_title(c)}", ""]
        if c.rolls:
            lines.append("**Will roll out** (pods replaced):")
            lines.append("")
            for r in c.rolls:
                lines.append(f"- `{r.object}` ({_md(r.source)}): " + "; ".join(_md(x) for x in r.reasons))
            lines.append("")
        lines += ["| | object | source | what changed |", "|---|---|---|---|"]
        lines += [f"| ➕ added | `{o}` | {s} | |" for o, s in c.added]
        lines += [f"| ➖ removed | `{o}` | {s} | |" for o, s in c.removed]
        for ch in c.changed:
            what = [f"`{x.path}`: {_md(short(x.before, 40))} → {_md(short(x.after, 40))}" for x in ch.changes[:8]]
            if len(ch.changes) > 8:
                what.append(f"… {len(ch.changes) - 8} more")
            if ch.renamed_from:
                what.insert(0, f"renamed from `{ch.renamed_from}`")
            lines.append(f"| ✏️ changed | `{ch.object}` | {ch.source} | {'<br>'.join(what)} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ adapters


def _flux_paths(root: Path, objects: list[dict], layout: Layout) -> tuple[list[Path], list[str]]:
    """The buildable folders that the Flux Kustomizations of this repository's own source among `objects` apply,
    and why others cannot be built (a path outside the repository or missing: Flux would fail that Kustomization).
    A Kustomization of another source applies another artifact's path: not this repository's to compare."""
    top, out, problems = root.resolve(), [], []
    for obj in objects:
        api = str(obj.get("apiVersion", ""))
        if obj.get("kind") == "Kustomization" and api.startswith(FLUX_KUSTOMIZATION_API):
            spec: dict[str, Any] = obj["spec"] if isinstance(obj.get("spec"), dict) else {}
            ref: dict[str, Any] = spec["sourceRef"] if isinstance(spec.get("sourceRef"), dict) else {}
            meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
            namespace = str(ref.get("namespace") or meta.get("namespace") or layout.source_namespace)
            if not layout.is_own_source(str(ref.get("kind", "")), str(ref.get("name", "")), namespace):
                continue
            rel = str(spec.get("path", "./"))
            path = (root / rel).resolve()
            name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
            if top not in (path, *path.parents) or not path.is_dir():
                problems.append(f"Kustomization {name}: spec.path {rel} is not a folder of the repository")
            elif kustomization_file(path):
                out.append(path)
    return out, problems


def snapshots(roots: list[Path]) -> tuple[list[Snapshot], list[str]]:
    """Render every tree in `roots` the way Flux applies it: each cluster folder, then the paths of the Flux
    Kustomizations it renders (round by round, each round one parallel batch); then the overlays that no
    cluster applies, under UNAPPLIED. Returns the snapshots and the folders that did not render."""
    snaps: list[Snapshot] = [{} for _ in roots]
    errors: list[str] = []
    done: list[set[tuple[str, Path]]] = [set() for _ in roots]
    todo: list[tuple[int, str, Path]] = []
    layouts: list[Layout] = []
    for i, root in enumerate(roots):
        try:  # a malformed layout file: no comparison (exit 2), whichever side has it
            layouts.append(Layout.load(root))
        except InputError as err:
            raise InputError(f"cannot compare: {_side_problem(_side(i, roots), root, err)}") from None
        for folder in Repository.at(root, tolerant=True).clusters:  # a malformed file fails its render
            snaps[i].setdefault(folder.name, {})
            if kustomization_file(folder.path):
                todo.append((i, folder.name, folder.path.resolve()))
            else:  # no kustomization.yaml: Flux applies every YAML file below it
                todo += [(i, folder.name, (root / ks.path).resolve()) for ks in folder.kustomizations
                         if (root / ks.path).is_dir() and kustomization_file(root / ks.path)]
    unapplied_round = False
    while todo:
        todo = [t for t in dict.fromkeys(todo) if t[1:] not in done[t[0]]]
        for i, cluster, path in todo:
            done[i].add((cluster, path))
        nxt: list[tuple[int, str, Path]] = []
        for (i, cluster, path), result in zip(todo, kustomize.build_many(p for _, _, p in todo), strict=True):
            rel = relative(roots[i], path)
            side = _side(i, roots)
            if isinstance(result, RenderError):
                errors.append(_side_problem(side, roots[i], result))
                continue
            try:
                docs = [d for d in yamlio.loads_all(result.yaml, rel) if isinstance(d, dict) and d.get("kind")]
            except TritonCtlError as err:
                errors.append(_side_problem(side, roots[i], err))
                continue
            objects = snaps[i].setdefault(cluster, {})
            for obj in docs:
                objects.setdefault(Key.of(obj), Entry(obj, rel))
            if cluster != UNAPPLIED:
                paths, problems = _flux_paths(roots[i], docs, layouts[i])
                nxt += [(i, cluster, p) for p in paths]
                errors += [_side_problem(side, roots[i], f"{rel}: {problem}") for problem in problems]
        todo = nxt
        if not todo and not unapplied_round:
            unapplied_round = True
            todo = [(i, UNAPPLIED, o.resolve()) for i, root in enumerate(roots) for o in _overlay_paths(root)
                    if o.resolve() not in {p for _, p in done[i]}]
    return snaps, list(dict.fromkeys(errors))  # a broken Component fails every overlay using it alike


def _side(i: int, roots: list[Path]) -> str:
    return "base" if i == 0 and len(roots) > 1 else "head"


def _side_problem(side: str, root: Path, problem: RenderError | TritonCtlError | str) -> str:
    """A side's problem on one line: `head: clusters/production/platform.yaml:18:1: invalid YAML: …`. The one
    place diff words its errors: a kustomize failure traced to the file it is about (adapters.kustomize.locate)
    names that file (a file that is no YAML as validate says it, else with kustomize's reason), another names the
    folder that did not build; every path under `root` (the base side's is a temporary worktree) is written
    repository-relative."""
    if isinstance(problem, RenderError):
        folder = Path(str(problem.path))
        found = kustomize.locate(problem.detail, folder)
        if found is not None:
            text = f"{relative(root, found.file)}{f':{found.line}' if found.line else ''}: {found.problem}"
            try:  # a file that is no YAML: as validate words it (YamlInvalid), line and column of the same parser
                yamlio.load_all(found.file)
            except InputError as err:
                text = err.message if "invalid YAML" in err.message else text
        else:
            text = f"{relative(root, folder)}: kustomize build failed: {problem.detail}"
    else:
        text = problem.message if isinstance(problem, TritonCtlError) else problem
    top = str(root.resolve())
    text = text.replace(top + os.sep, "").replace(top, ".")
    return f"{side}: {' '.join(text.split())}"


def _overlay_paths(root: Path) -> list[Path]:
    # tolerant: a malformed kustomization file counts as an overlay, whose build fails and says why
    return [o.path for o in Repository.at(root, tolerant=True).overlays]


def git(cwd: Path, *args: str) -> str:
    """Run git; a failure is an InputError carrying git's own first line."""
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as err:
        raise ToolMissing("git is not on PATH", hint="install git: diff renders the base ref from history") \
            from err
    if proc.returncode != 0:
        first = next((ln for ln in proc.stderr.splitlines() if ln.strip()), "failed")
        raise InputError(f"git {' '.join(args)}: {first.removeprefix('fatal: ')}")
    return proc.stdout.strip()


def resolve_base(root: Path, ref: str) -> str:
    """The commit to compare with: the merge base of REF and HEAD (what a pull request changes), or REF itself
    when they share no history."""
    try:
        git(root, "rev-parse", "--git-dir")
    except InputError:
        raise InputError(f"{root}: not a git repository (diff compares the working tree with a commit)") from None
    try:
        git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    except InputError:
        raise InputError(f"{root}: the repository has no commit yet: commit once, then diff compares with it") \
            from None
    try:
        commit = git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except InputError as err:
        raise InputError(f"--base {ref}: not a commit in this repository",
                         hint="fetch it first (actions/checkout: fetch-depth: 0)") from err
    try:
        return git(root, "merge-base", commit, "HEAD")
    except InputError:
        return commit


@contextlib.contextmanager
def worktree(root: Path, commit: str) -> Iterator[Path]:
    """Check `commit` out into a temporary `git worktree`; yields the repository root inside it (the same
    sub-folder of the checkout as `root`). The worktree and its folder are removed whatever happens."""
    top = Path(git(root, "rev-parse", "--show-toplevel")).resolve()
    prefix = root.resolve().relative_to(top)
    tmp = Path(tempfile.mkdtemp(prefix="kubectl-triton-diff-"))
    tree = tmp / "base"
    try:
        git(top, "worktree", "add", "--detach", "--quiet", str(tree), commit)
        yield tree / prefix
    finally:
        with contextlib.suppress(InputError):
            git(top, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(InputError):
            git(top, "worktree", "prune")


def compare(root: Path, ref: str) -> Report:
    """Render the merge base of `ref` (in a temporary worktree) and the working tree at `root`, and diff them.
    Raises InputError when either side does not render: a side missing objects would read as removals."""
    commit = resolve_base(root, ref)
    with worktree(root, commit) as base_root:
        try:
            layout = Layout.load(base_root) if (base_root / LAYOUT_FILE).is_file() else Layout()
        except InputError as err:
            raise InputError(f"cannot compare: {_side_problem('base', base_root, err)}") from None
        if not (base_root / layout.overlays).is_dir() and not (base_root / layout.clusters).is_dir():
            snaps, errors = snapshots([root])
            snaps.insert(0, {})
        else:
            snaps, errors = snapshots([base_root, root])
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InputError(f"cannot compare: {errors[0]}{more}",
                         hint="fix the render error (kubectl triton validate shows every one), then diff again")
    return Report(ref, commit, diff(snaps[0], snaps[1]), errors)
