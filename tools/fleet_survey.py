"""Measure `init`, `add-model` and `validate` on real Flux repositories (issue 28) and whether the model would deploy.

The corpus is third-party text, so it is not kept in this repository: ../shared/conformance/flux-fleets holds one
exported public Flux repository per folder (<owner>__<name>/) and SOURCES.json, which names for each its commit,
license, kind and sync roots (the folders Flux really syncs: a FluxInstance's spec.sync.path, or the path of
`flux bootstrap`), with the source the sync root reads and, for an OCI artifact pushed from a sub-folder, that folder.
tools/fleet_corpus.py writes it from git copies of the repositories tests/fixtures/flux-fleets-sources.json names.

For each folder, in a temporary git copy (the corpus itself is never written):

    kubectl-triton init . --gpu l4          (refused: retried with --cluster/--source as the sync roots suggest)
    kubectl-triton add-model resnet --backend onnxruntime --gpu l4 --input ... --output ...
    kubectl-triton validate . -o json

It records exit codes, the first lines of stderr, the error and warning findings by code, and whether the model
is reachable: every sync root is built as kustomize-controller builds it (LoadRestrictionsNone, a generated
kustomization.yaml where a path has none, the Flux Kustomization's components, patches and targetNamespace added,
postBuild `substitute` and `substituteFrom` ConfigMaps found in the builds applied), every Flux Kustomization found
is followed into its spec.path (this repository's source, or an ExternalArtifact an ArtifactGenerator copies out of
it), and the model's Deployment must appear in one of those builds, with the Kustomizations it dependsOn present.
Where init refuses, validate still runs through a minimal layout file (the cluster folders init looked at), and
for every repository once more on a plain copy whose layout names the sync roots' parents as the cluster folders:
those two measure the gate on the repository's own objects.

    python tools/fleet_survey.py --json ../shared/conformance/flux-fleets/baseline-report.json

prints a Markdown table and writes the JSON report. Commands run one at a time, pinned to one CPU (taskset).
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent.parent / "shared" / "conformance" / "flux-fleets"
MODEL = "resnet"
GPU = "l4"
ADD_MODEL = ["add-model", MODEL, "--backend", "onnxruntime", "--gpu", GPU,
             "--input", "input:FP32:3,224,224", "--output", "output:FP32:1000"]
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
FLUX_KS_API = "kustomize.toolkit.fluxcd.io/"
GENERATOR_API = "source.extensions.fluxcd.io/"
WORKLOADS = ("Deployment", "LeaderWorkerSet", "StatefulSet")
MAX_BUILDS = 800
VAR = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?::=([^}]*))?\}")


class Loader(yaml.SafeLoader):
    """YAML as kustomize and the API server read it: `=` is a string, unknown tags keep their value."""


Loader.yaml_implicit_resolvers = {k: [r for r in v if r[0] != "tag:yaml.org,2002:value"]
                                  for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def _any_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


Loader.add_multi_constructor("!", _any_tag)
Loader.add_multi_constructor("tag:yaml.org,2002:value", _any_tag)


def load_all(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(text, Loader=Loader) if isinstance(d, dict)]


@dataclass
class Step:
    """One command run: its arguments, exit status, duration and output."""

    args: list[str]
    rc: int
    seconds: float
    stdout: str
    stderr: str

    def summary(self, lines: int = 4) -> dict[str, Any]:
        err = [line for line in self.stderr.splitlines() if line.strip()]
        out = [line for line in self.stdout.splitlines() if line.strip()]
        return {"args": self.args, "rc": self.rc, "seconds": round(self.seconds, 1),
                "stderr_head": err[:lines], "stdout_tail": out[-lines:]}


class Runner:
    """Runs commands one at a time, pinned to one CPU when taskset is there."""

    def __init__(self, plugin: str, env: dict[str, str], timeout: int, one_cpu: bool) -> None:
        self.plugin = plugin
        self.env = env
        self.timeout = timeout
        self.prefix = ["taskset", "-c", "0"] if one_cpu and shutil.which("taskset") else []

    def run(self, args: list[str], cwd: Path, timeout: int | None = None) -> Step:
        start = time.monotonic()
        try:
            done = subprocess.run([*self.prefix, *args], cwd=cwd, env=self.env, capture_output=True, text=True,
                                  timeout=timeout or self.timeout)
            rc, out, err = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            rc = 124
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err = f"timed out after {exc.timeout}s"
        return Step(args, rc, time.monotonic() - start, out, err)

    def triton(self, args: list[str], cwd: Path) -> Step:
        """The plugin run in `cwd`, that folder's absolute path written relative in its output."""
        step = self.run([self.plugin, *args], cwd)
        step.args = ["kubectl-triton", *args]
        step.stdout = step.stdout.replace(f"{cwd}/", "").replace(str(cwd), ".")
        step.stderr = step.stderr.replace(f"{cwd}/", "").replace(str(cwd), ".")
        return step

    def commit(self, repo: Path, message: str) -> None:
        self.run(["git", "add", "-A"], repo)
        self.run(["git", "commit", "-q", "--allow-empty", "--no-verify", "-m", message], repo)


def prepare(src: Path, dest: Path, runner: Runner) -> None:
    """A writable git copy of a corpus folder (symbolic links kept as links)."""
    shutil.copytree(src, dest, symlinks=True)
    for path in [dest, *dest.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    runner.run(["git", "init", "-q", "-b", "main"], dest)
    runner.commit(dest, "import")


# ---- init and add-model ---------------------------------------------------------------------------------------

def cluster_suggestions(message: str, sync_roots: list[dict[str, Any]]) -> list[str]:
    """--cluster values to retry init with: of the cluster folders init listed, those a sync root's path passes
    through (deepest first), else each sync root's own folder name."""
    listed = re.search(r"several cluster folders \(([^)]*)\)", message)
    names = [n.strip() for n in listed.group(1).split(",")] if listed else []
    out: list[str] = []
    for root in sync_roots:
        parts = [p for p in str(root["path"]).strip("./").split("/") if p]
        hits = [p for p in reversed(parts) if p in names]
        for name in hits or [parts[-1] if parts else ""]:
            if re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and name not in out:
                out.append(name)
    return out


def do_init(repo: Path, row: dict[str, Any], runner: Runner) -> dict[str, Any]:
    base = ["init", ".", "--gpu", GPU]
    attempts = [runner.triton(base, repo)]
    if attempts[-1].rc != 0:
        text = attempts[-1].stderr + attempts[-1].stdout
        extra: list[list[str]] = []
        if "several Flux sources" in text:
            extra += [["--source", root["source"]] for root in row["sync_roots"]][:1]
        extra += [["--cluster", name] for name in cluster_suggestions(text, row["sync_roots"])]
        for args in extra:
            attempts.append(runner.triton([*base, *args], repo))
            if attempts[-1].rc == 0:
                break
    last = attempts[-1]
    found = re.search(r"\(cluster ([^,)]+)", last.stderr + last.stdout)
    written = [line.split(" ", 1)[1] for line in last.stdout.splitlines()
               if line.startswith(("created ", "updated "))]
    flux_files = [p for p in written if p.endswith(".yaml") and not p.startswith(("base/", "overlays/", ".github/"))
                  and p != "kubectl-triton.yaml"]
    review = [line for line in (last.stderr + last.stdout).splitlines()
              if line.startswith(("review:", "adopted", "initialised"))]
    return {"ok": last.rc == 0, "rc": last.rc, "attempts": [a.summary() for a in attempts],
            "cluster": found.group(1) if found else None, "flux_files": flux_files, "review": review}


def do_add_model(repo: Path, cluster: str | None, runner: Runner) -> dict[str, Any]:
    attempts = [runner.triton(ADD_MODEL, repo)]
    if attempts[-1].rc != 0 and cluster and "--cluster" in attempts[-1].stderr + attempts[-1].stdout:
        attempts.append(runner.triton([*ADD_MODEL, "--cluster", cluster], repo))
    last = attempts[-1]
    written = [line.split(" ", 1)[1] for line in last.stdout.splitlines()
               if line.startswith(("created ", "updated "))]
    flux_file = next((p for p in written if re.search(rf"(^|/){MODEL}-{GPU}\.yaml$", p)
                      and not p.startswith(("overlays/", "models/"))), None)
    return {"ok": last.rc == 0, "rc": last.rc, "attempts": [a.summary() for a in attempts],
            "written": written, "flux_file": flux_file}


# ---- validate ------------------------------------------------------------------------------------------------

def do_validate(repo: Path, runner: Runner) -> dict[str, Any]:
    step = runner.triton(["validate", ".", "-o", "json"], repo)
    out: dict[str, Any] = {"rc": step.rc, "seconds": round(step.seconds, 1),
                           "stderr_head": [x for x in step.stderr.splitlines() if x.strip()][:6]}
    try:
        report = json.loads(step.stdout)
    except ValueError:
        out["parsed"] = False
        out["stdout_head"] = step.stdout.splitlines()[:6]
        return out
    findings = report.get("findings") or []
    out["parsed"] = True
    out["ok"] = report.get("ok")
    out["counts"] = dict(Counter(str(f.get("severity")) for f in findings))
    for severity in ("error", "warning"):
        out[f"{severity}s_by_code"] = dict(Counter(str(f.get("code")) for f in findings
                                                   if f.get("severity") == severity).most_common())
    out["error_findings"] = [{k: (str(v)[:500] if k == "message" else v) for k, v in f.items()}
                             for f in findings if f.get("severity") == "error"]
    return out


# ---- reachability: the repository as Flux builds it ------------------------------------------------------------

def is_flux_ks(doc: dict[str, Any]) -> bool:
    return doc.get("kind") == "Kustomization" and str(doc.get("apiVersion", "")).startswith(FLUX_KS_API)


def substitute(text: str, values: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) in values:
            return values[m.group(1)]
        return m.group(2) if m.group(2) is not None else m.group(0)
    return VAR.sub(one, text)


@dataclass
class Built:
    """One folder as Flux builds it: its objects, or why it does not build."""

    docs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    generated: bool = False


class Fleet:
    """Builds folders of one repository copy as kustomize-controller does."""

    def __init__(self, repo: Path, runner: Runner) -> None:
        self.repo = repo
        self.runner = runner
        self.cache: dict[str, tuple[str, str | None, bool]] = {}
        self.builds = 0
        self.generators = self._generators()

    def _generators(self) -> dict[str, list[dict[str, Any]]]:
        """ArtifactGenerator artifacts by name, from every YAML file of the repository."""
        out: dict[str, list[dict[str, Any]]] = {}
        for path in sorted(self.repo.rglob("*.y*ml")):
            if ".git" in path.parts or not path.is_file():
                continue
            text = path.read_text(errors="replace")
            if "ArtifactGenerator" not in text:
                continue
            try:
                docs = load_all(text)
            except yaml.YAMLError:
                continue
            for doc in docs:
                if doc.get("kind") != "ArtifactGenerator" or not str(doc.get("apiVersion", "")).startswith(
                        GENERATOR_API):
                    continue
                spec = doc.get("spec") or {}
                aliases = {str(s.get("alias")): f"{s.get('kind')}/{s.get('name')}"
                           for s in spec.get("sources") or [] if isinstance(s, dict)}
                for art in spec.get("artifacts") or []:
                    if isinstance(art, dict):
                        out.setdefault(str(art.get("name")), []).append({"aliases": aliases, "copy": art.get("copy")
                                                                         or [], "file": str(path.relative_to(
                                                                             self.repo))})
        return out

    def _raw(self, rel: str, extra: dict[str, Any]) -> tuple[str, str | None, bool]:
        """kustomize's output for folder `rel` with what the Flux Kustomization adds to its kustomization.yaml
        (`extra`: components, patches, namespace), as kustomize-controller builds it."""
        key = rel + json.dumps(extra, sort_keys=True)
        if key in self.cache:
            return self.cache[key]
        self.builds += 1
        folder = self.repo / rel
        if not folder.is_dir():
            result: tuple[str, str | None, bool] = ("", f"{rel}: no such folder", False)
            self.cache[key] = result
            return result
        existing = next((folder / n for n in KUSTOMIZATION_FILES if (folder / n).is_file()), None)
        target = existing or folder / "kustomization.yaml"
        before = existing.read_bytes() if existing else None
        if existing is None:
            doc: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                   "resources": self._scan(folder)}
        elif extra:
            try:
                loaded = yaml.load(before or b"", Loader=Loader)
            except yaml.YAMLError:
                loaded = None
            doc = loaded if isinstance(loaded, dict) else {}
        if existing is None or (extra and doc):
            for name in ("components", "patches"):
                if extra.get(name):
                    doc[name] = [*(doc.get(name) or []), *extra[name]]
            if extra.get("namespace"):
                doc["namespace"] = extra["namespace"]
            target.write_text(yaml.safe_dump(doc, sort_keys=False))
        try:
            step = self.runner.run(["kubectl", "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(folder)],
                                   self.repo, timeout=300)
        finally:
            if before is None:
                target.unlink(missing_ok=True)
            else:
                target.write_bytes(before)
        error = None
        if step.rc != 0:
            flat = " ".join(step.stderr.split())
            error = re.sub(r"^E\d{4} [\d:.]+\s+\d+ \S+\] ", "", flat)[:400] or f"kustomize exited {step.rc}"
        result = (step.stdout, error, existing is None)
        self.cache[key] = result
        return result

    def _scan(self, folder: Path) -> list[str]:
        """What Flux's generated kustomization.yaml lists: sub-folders holding a kustomization file (not descended
        into) and every .yaml/.yml file of Kubernetes objects."""
        out: list[str] = []
        for dirpath, dirnames, filenames in os.walk(folder):
            here = Path(dirpath)
            if here != folder and any((here / n).is_file() for n in KUSTOMIZATION_FILES):
                out.append(here.relative_to(folder).as_posix())
                dirnames[:] = []
                continue
            dirnames.sort()
            for name in sorted(filenames):
                path = here / name
                if path.suffix not in (".yaml", ".yml") or path.is_symlink():
                    continue
                try:
                    docs = load_all(path.read_text(errors="replace"))
                except yaml.YAMLError:
                    continue
                if docs and all("apiVersion" in d and "kind" in d for d in docs):
                    out.append(path.relative_to(folder).as_posix())
        return out

    def build(self, rel: str, values: dict[str, str], extra: dict[str, Any] | None = None) -> Built:
        text, error, generated = self._raw(rel, extra or {})
        if error:
            return Built(error=error, generated=generated)
        try:
            return Built(load_all(substitute(text, values)), generated=generated)
        except yaml.YAMLError as exc:
            return Built(error=f"{rel}: built YAML does not parse: {str(exc).splitlines()[0]}", generated=generated)

    def artifact_path(self, name: str, path: str, own: str, root: str) -> str | None:
        """The repository folder a path inside ExternalArtifact `name` comes from, when its ArtifactGenerator
        copies it out of this repository's own source `own`."""
        inside = posixpath.normpath(path.strip() or ".").lstrip("/")
        inside = "" if inside == "." else inside
        best: tuple[int, str] | None = None
        for art in self.generators.get(name, []):
            for rule in art["copy"]:
                if not isinstance(rule, dict):
                    continue
                src = re.fullmatch(r"@([^/]+)/?(.*?)(/\*\*|/\*)?", str(rule.get("from", "")))
                dst = re.fullmatch(r"@artifact/?(.*?)/?", str(rule.get("to", "")))
                if not src or not dst or art["aliases"].get(src.group(1)) != own:
                    continue
                prefix, dest = src.group(2).strip("/"), dst.group(1).strip("/")
                if dest and inside != dest and not inside.startswith(dest + "/"):
                    continue
                rest = inside[len(dest):].lstrip("/") if dest else inside
                target = posixpath.normpath(posixpath.join(root, prefix, rest)) if (root or prefix or rest) else "."
                if best is None or len(dest) > best[0]:
                    best = (len(dest), target)
        return best[1] if best else None


def walk(fleet: Fleet, sync_root: dict[str, Any], workloads: set[tuple[str, str]], platform: str | None,
         model_ks: str | None) -> dict[str, Any]:
    """Follow one sync root through every Flux Kustomization it applies; report where the model turns up."""
    own = str(sync_root.get("source") or "GitRepository/flux-system")
    root = str(sync_root.get("artifact_root") or "").strip("/")
    start = posixpath.normpath(str(sync_root["path"]).strip("/"))
    queue: list[tuple[str, dict[str, str], dict[str, Any], str]] = [(start, {}, {}, f"sync root {start}")]
    seen: set[str] = set()
    kustomizations: dict[tuple[str, str], dict[str, Any]] = {}
    found: list[str] = []
    errors: list[str] = []
    unresolved: Counter[str] = Counter()
    settings: dict[tuple[str, str], dict[str, str]] = {}  # ConfigMaps and plain Secrets built so far
    suspended: list[str] = []
    generated = 0
    while queue and fleet.builds < MAX_BUILDS:
        rel, values, extra, via = queue.pop(0)
        key = rel + json.dumps([values, extra], sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        built = fleet.build(rel, values, extra)
        generated += built.generated
        if built.error:
            errors.append(f"{via}: {built.error}")
            continue
        for doc in built.docs:
            meta = doc.get("metadata") or {}
            if doc.get("kind") in ("ConfigMap", "Secret") and doc.get("apiVersion") == "v1" and "sops" not in doc:
                data = {**(doc.get("data") or {} if doc.get("kind") == "ConfigMap" else {}),
                        **(doc.get("stringData") or {})}
                settings[(str(meta.get("namespace") or "flux-system"), str(meta.get("name")))] = {
                    str(k): str(v) for k, v in data.items()}
            if (str(doc.get("kind")), str(meta.get("name"))) in workloads:
                found.append(f"{doc.get('kind')}/{meta.get('name')} in {rel} ({via})")
            if not is_flux_ks(doc):
                continue
            spec = doc.get("spec") or {}
            name, namespace = str(meta.get("name")), str(meta.get("namespace") or "default")
            kustomizations[(namespace, name)] = {"path": spec.get("path"), "file_folder": rel,
                                                 "depends_on": [(str(d.get("namespace") or namespace), str(d.get(
                                                     "name"))) for d in spec.get("dependsOn") or []
                                                     if isinstance(d, dict)]}
            if spec.get("suspend") is True:
                suspended.append(f"{namespace}/{name}")
                continue
            ref = spec.get("sourceRef") or {}
            source = f"{ref.get('kind')}/{ref.get('name')}"
            path = str(spec.get("path") or ".")
            target: str | None
            if source == own:
                target = posixpath.normpath(posixpath.join(root, path.lstrip("/")))
            elif ref.get("kind") == "ExternalArtifact":
                target = fleet.artifact_path(str(ref.get("name")), path, own, root)
            else:
                target = None
            if target is None or target.startswith(".."):
                unresolved[source] += 1
                continue
            post = spec.get("postBuild") or {}
            subs: dict[str, str] = {}
            for item in post.get("substituteFrom") or []:  # Flux: later entries win, inline substitute wins last
                if isinstance(item, dict):
                    named = [v for (_, n), v in settings.items() if n == str(item.get("name"))]
                    subs.update(settings.get((namespace, str(item.get("name"))), named[0] if len(named) == 1 else {}))
            subs.update({str(k): str(v) for k, v in (post.get("substitute") or {}).items()})
            adds = {"components": spec.get("components") or [], "patches": spec.get("patches") or [],
                    "namespace": spec.get("targetNamespace")}
            queue.append((target, subs, {k: v for k, v in adds.items() if v}, f"Kustomization {namespace}/{name}"))
    model = next((v for (_, n), v in kustomizations.items() if n == model_ks), None) if model_ks else None
    missing: list[str] = []
    if model is not None:
        missing = [f"{ns}/{n}" for ns, n in model["depends_on"] if (ns, n) not in kustomizations]
    return {"cluster": sync_root.get("cluster"), "path": start, "folders_built": len(seen),
            "generated_kustomizations": generated, "flux_kustomizations": len(kustomizations),
            "model_workload_found": found[:3], "model_kustomization": model,
            "platform_kustomization": any(n == platform for _, n in kustomizations) if platform else None,
            "missing_depends_on": missing, "unresolved_sources": dict(unresolved), "suspended": suspended[:20],
            "build_errors": errors[:15], "build_error_count": len(errors), "truncated": bool(queue)}


def reachability(repo: Path, row: dict[str, Any], add: dict[str, Any], runner: Runner) -> dict[str, Any]:
    fleet = Fleet(repo, runner)
    flux_file = add.get("flux_file")
    model_ks: str | None = None
    overlay: str | None = None
    if flux_file and (repo / flux_file).is_file():
        for doc in load_all((repo / flux_file).read_text()):
            if is_flux_ks(doc):
                model_ks = str((doc.get("metadata") or {}).get("name"))
                inside = str((doc.get("spec") or {}).get("path") or ".").lstrip("/")
                roots = {str(r.get("artifact_root") or "") for r in row.get("sync_roots") or []
                         if not r.get("dev_only")}
                overlay = posixpath.normpath(posixpath.join(roots.pop() if len(roots) == 1 else "", inside))
    workloads: set[tuple[str, str]] = set()
    overlay_error = None
    if overlay:
        built = fleet.build(overlay, {})
        overlay_error = built.error
        workloads = {(str(d.get("kind")), str((d.get("metadata") or {}).get("name"))) for d in built.docs
                     if d.get("kind") in WORKLOADS}
    layout = repo / "kubectl-triton.yaml"
    platform = None
    if layout.is_file():
        flux = (yaml.safe_load(layout.read_text()) or {}).get("flux") or {}
        platform = flux.get("platform")
    roots = [walk(fleet, root, workloads, platform, model_ks) for root in row.get("sync_roots") or []]
    deploys = [r for r in roots if r["model_workload_found"] and not r["missing_depends_on"]]
    return {"model_kustomization": model_ks, "overlay": overlay, "overlay_error": overlay_error,
            "workloads": sorted("/".join(w) for w in workloads), "reachable": bool(deploys),
            "reachable_outside_dev": any(r in deploys and not root.get("dev_only")
                                         for root, r in zip(row.get("sync_roots") or [], roots, strict=True)),
            "reachable_from": [r["path"] for r in deploys],
            "found_but_blocked": [r["path"] for r in roots if r["model_workload_found"] and r["missing_depends_on"]],
            "roots": roots}


# ---- the survey ----------------------------------------------------------------------------------------------

def survey_one(row: dict[str, Any], corpus: Path, work: Path, runner: Runner, reach: bool) -> dict[str, Any]:
    repo = work / row["folder"]
    out: dict[str, Any] = {"repo": row["repo"], "folder": row["folder"], "commit": row["commit"],
                           "kind": row["kind"], "sync_roots": [r["path"] for r in row["sync_roots"]],
                           "dev_roots": [r["path"] for r in row["sync_roots"] if r.get("dev_only")]}
    start = time.monotonic()
    prepare(corpus / row["folder"], repo, runner)
    out["init"] = init = do_init(repo, row, runner)
    if init["ok"]:
        runner.commit(repo, "kubectl triton init")
        out["add_model"] = add = do_add_model(repo, init["cluster"], runner)
        if add["ok"]:
            runner.commit(repo, "kubectl triton add-model")
        out["validate"] = do_validate(repo, runner)
        if reach and add["ok"]:
            out["reachability"] = reachability(repo, row, add, runner)
    elif row.get("sync_roots"):
        # init refused: validate the repository's own objects through a minimal layout file (as a user forcing
        # it through would): the cluster folders where init looked for them, else the first sync root's parent.
        first = init["attempts"][0]["stderr_head"]
        looked = re.match(r"error: (\S+)/: several cluster folders", first[0]) if first else None
        layout = forced_layout(looked.group(1) if looked else sync_parent(row["sync_roots"][0]), row["sync_roots"][0])
        (repo / "kubectl-triton.yaml").write_text(layout)
        runner.commit(repo, "forced layout")
        out["validate"] = do_validate(repo, runner)
        out["validate"]["forced_layout"] = layout
    # The gate on the repository alone (no kubectl-triton files), its cluster folders being the sync roots' parents.
    out["validate_sync_layout"] = []
    roots = [r for r in row.get("sync_roots") or [] if not r.get("dev_only")]
    for parent in dict.fromkeys(sync_parent(r) for r in roots):
        copy = work / f"{row['folder']}--{parent.replace('/', '_')}"
        prepare(corpus / row["folder"], copy, runner)
        layout = forced_layout(parent, next(r for r in roots if sync_parent(r) == parent))
        (copy / "kubectl-triton.yaml").write_text(layout)
        runner.commit(copy, "sync-root layout")
        result = do_validate(copy, runner)
        result["layout"] = layout
        out["validate_sync_layout"].append(result)
    out["seconds"] = round(time.monotonic() - start, 1)
    return out


def sync_parent(root: dict[str, Any]) -> str:
    """The folder holding a sync root (the repository's top, '.', for a top-level one)."""
    return posixpath.dirname(posixpath.normpath(str(root["path"]).strip("/"))) or "."


def forced_layout(clusters: str, root: dict[str, Any]) -> str:
    """The smallest layout file that lets validate run on a repository: its cluster folders and Flux source."""
    kind, _, name = str(root.get("source") or "GitRepository/flux-system").partition("/")
    return yaml.safe_dump({"paths": {"clusters": clusters}, "flux": {"sourceRef": {"kind": kind, "name": name}}},
                          sort_keys=False)


def cell_steps(attempts: list[dict[str, Any]]) -> str:
    codes = "→".join(str(a["rc"]) for a in attempts)
    extra = " ".join(a["args"][-1] for a in attempts[1:] if a["rc"] == 0 and a["args"][-2].startswith("--"))
    return f"{codes} ({attempts[-1]['args'][-2]} {extra})" if extra else codes


def markdown(results: list[dict[str, Any]]) -> str:
    lines = ["| repo | kind | init | add-model | validate | errors | warnings | top error codes | model deploys "
             "| errors, sync-root layout |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        init, add, val, reach = r.get("init"), r.get("add_model"), r.get("validate"), r.get("reachability")
        dev = set(r.get("dev_roots") or [])
        init_cell = cell_steps(init["attempts"]) if init else "-"
        if init and not init["ok"]:
            init_cell += ": " + "; ".join(init["attempts"][-1]["stderr_head"][:1])[:120].replace("|", "/")
        add_cell = cell_steps(add["attempts"]) if add else "-"
        if add and not add["ok"]:
            add_cell += ": " + "; ".join(add["attempts"][-1]["stderr_head"][:1])[:120].replace("|", "/")
        counts = (val or {}).get("counts") or {}
        top = ", ".join(f"{c} {n}" for c, n in list(((val or {}).get("errors_by_code") or {}).items())[:4])
        if reach is None:
            deploys = "-"
        elif reach["reachable"]:
            deploys = "yes (" + ", ".join(reach["reachable_from"]) + ")"
            if all(p in dev for p in reach["reachable_from"]):
                deploys = "dev only: " + deploys
        elif reach["found_but_blocked"]:
            blocked = sorted({d for root in reach["roots"] for d in root["missing_depends_on"]})
            deploys = "no: dependsOn " + ", ".join(blocked) + " not applied"
        else:
            deploys = "no: not under any sync root"
        val_cell = str((val or {}).get("rc", "-")) + (" (forced layout)" if (val or {}).get("forced_layout") else "")
        lines.append(f"| {r['repo']} | {r['kind']} | {init_cell} | {add_cell} | {val_cell} | "
                     f"{counts.get('error', 0) if val else '-'} | {counts.get('warning', 0) if val else '-'} | "
                     f"{top or '-'} | {deploys} | {sync_cell(r.get('validate_sync_layout') or [])} |")
    inits = sum(1 for r in results if (r.get("init") or {}).get("ok"))
    adds = sum(1 for r in results if (r.get("add_model") or {}).get("ok"))
    deployed = sum(1 for r in results if (r.get("reachability") or {}).get("reachable_outside_dev"))
    lines += ["", f"{len(results)} repositories: init succeeded in {inits}, add-model in {adds}, the model deploys "
              f"where Flux applies it (outside development-only sync roots) in {deployed}."]
    return "\n".join(lines) + "\n"


def sync_cell(results: list[dict[str, Any]]) -> str:
    cells = []
    for res in results:
        errors = (res.get("counts") or {}).get("error", 0)
        top = ", ".join(f"{c} {n}" for c, n in list((res.get("errors_by_code") or {}).items())[:3])
        clusters = (yaml.safe_load(res.get("layout") or "") or {}).get("paths", {}).get("clusters")
        cells.append(f"{clusters}: {errors}" + (f" ({top})" if top else ""))
    return "; ".join(cells) or "-"


def project_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(HERE.parent), *args], capture_output=True, text=True)
        return done.stdout.strip()
    return {"commit": git("rev-parse", "HEAD"), "modified_files": len(git("status", "--porcelain").splitlines())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="corpus folder (default: %(default)s)")
    parser.add_argument("--only", action="append", default=[], help="folder or owner/name to run; repeatable")
    parser.add_argument("--json", type=Path, help="write the JSON report here")
    parser.add_argument("--keep", type=Path, help="keep the repository copies under this folder")
    parser.add_argument("--plugin", default=shutil.which("kubectl-triton") or "kubectl-triton",
                        help="the plugin executable (default: kubectl-triton on PATH)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per command (default: %(default)s)")
    parser.add_argument("--no-reach", action="store_true", help="skip the reachability walk")
    parser.add_argument("--all-cpus", action="store_true", help="do not pin commands to one CPU")
    args = parser.parse_args(argv)
    try:
        rows = json.loads((args.corpus / "SOURCES.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"fleet_survey: cannot read {args.corpus / 'SOURCES.json'}: {exc}", file=sys.stderr)
        return 2
    if args.only:
        rows = [r for r in rows if r["folder"] in args.only or r["repo"] in args.only]
    work = Path(tempfile.mkdtemp(prefix="fleet-survey-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KUBECTL_TRITON_CACHE_DIR": str(work / ".render-cache"), "GIT_AUTHOR_NAME": "survey",
           "GIT_AUTHOR_EMAIL": "survey@example.invalid", "GIT_COMMITTER_NAME": "survey",
           "GIT_COMMITTER_EMAIL": "survey@example.invalid", "NO_COLOR": "1"}
    runner = Runner(args.plugin, env, args.timeout, not args.all_cpus)
    version = runner.run([args.plugin, "version"], Path.cwd()).stdout.strip()
    results: list[dict[str, Any]] = []
    try:
        for row in rows:
            print(f"fleet_survey: {row['repo']} ...", file=sys.stderr, flush=True)
            results.append(survey_one(row, args.corpus, work, runner, not args.no_reach))
            if args.json:
                write_report(args.json, version, results)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        write_report(args.json, version, results)
    sys.stdout.write(markdown(results))
    return 0


def write_report(path: Path, version: str, results: list[dict[str, Any]]) -> None:
    report = {"tool": "tools/fleet_survey.py", "plugin": version, "project": project_state(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "model": ADD_MODEL, "results": results}
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
