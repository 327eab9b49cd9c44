"""Adapter for the kustomize binary (or `kubectl kustomize`): the only place that runs it."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_triton.errors import RenderError, ToolMissing, TritonCtlError
from kubectl_triton.formats import yamlio
from kubectl_triton.gitops.inputs import Memo, build_inputs, digest

# kustomize-controller builds with the repository root as the only boundary, so overlays may load
# files from elsewhere in the repo (here: models/). The same flag makes local renders match Flux.
FLUX_FLAGS = ("--load-restrictor", "LoadRestrictionsNone")


@dataclass(frozen=True)
class Rendered:
    """One kustomization directory and the multi-document YAML it built into (with the cache key it is stored
    under and, when the cache had them, its documents already parsed)."""

    path: Path
    yaml: str
    key: str | None = None
    docs: list[Any] | None = None


def go_env() -> dict[str, str]:
    """The environment kustomize runs in: the Go garbage collector set to run less often (GOGC=400) unless the
    user set GOGC. kustomize is a short-lived process; measured with kubectl 1.32's kustomize 5.5 on this
    project's overlays: one folder 0.31 -> 0.20 s, a batch of 32 1.6-1.9 -> 1.2-1.35 s, at most 130 MB."""
    return {"GOGC": "400", **os.environ}


def kustomize_command() -> list[str]:
    """The build command: `kustomize build` when on PATH, else `kubectl kustomize`."""
    if exe := shutil.which("kustomize"):
        return [exe, "build"]
    if exe := shutil.which("kubectl"):
        return [exe, "kustomize"]
    raise ToolMissing("neither kustomize nor kubectl is on PATH",
                      hint="install kubectl (it embeds kustomize) or the kustomize binary")


def build(path: Path, command: Sequence[str] | None = None) -> Rendered:
    """Build one kustomization directory; a kustomize failure becomes RenderError naming the path."""
    cmd = [*(command or kustomize_command()), *FLUX_FLAGS, str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=go_env())
    if proc.returncode != 0:
        raise RenderError(path, _first_error_line(proc.stderr))
    return Rendered(path, proc.stdout)


class RenderCache:
    """Renders on disk, keyed by the content of every file the build can read (gitops.inputs), the kustomize
    binary and the flags: an edit to any input is a new key, so a stale render is never served. Failed builds
    and builds with remote inputs are never cached. Writes are atomic (temporary file, then rename)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or default_cache_dir()
        self.hits = 0
        self.misses = 0
        self._digests: dict[str, str] = {}
        self.memo = Memo()  # folders read and paths resolved by gitops.inputs in this run
        self._folders: dict[str, str] = {}  # folder -> digest of what a build of it reads (gitops.inputs.digest)
        self._exe: dict[str, str] = {}

    def _digest(self, path: str) -> str:
        found = self._digests.get(path)
        if found is None:
            try:
                with open(path, "rb") as fh:
                    found = hashlib.sha256(fh.read()).hexdigest()
            except OSError:
                found = "missing"
            self._digests[path] = found
        return found

    def key(self, path: Path, command: Sequence[str]) -> str | None:
        """The content key of a build of `path`, or None when its inputs cannot all be known."""
        inputs = digest(path, self._digest, self.memo, self._folders)
        if inputs is None:
            return None
        if command[0] not in self._exe:
            exe = Path(command[0])
            st = exe.stat() if exe.is_file() else None
            self._exe[command[0]] = f"{st.st_size}:{st.st_mtime_ns}" if st else ""
        h = hashlib.sha256()
        for part in (*command, *FLUX_FLAGS, self.memo.resolve(str(path.absolute()))):
            h.update(part.encode() + b"\0")
        h.update(f"{self._exe[command[0]]}\0{inputs}\0".encode())
        return h.hexdigest()

    def get(self, key: str) -> tuple[str, list[Any] | None] | None:
        """The cached render and, when stored, its parsed documents."""
        try:
            text = (self.directory / f"{key}.yaml").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        docs = None
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads((self.directory / f"{key}.json").read_text(encoding="utf-8"))
            docs = loaded if isinstance(loaded, list) else None
        self.hits += 1
        return text, docs

    def put_docs(self, key: str, docs: list[Any]) -> None:
        """Store a render's parsed documents beside it (JSON parses far faster than YAML), when JSON holds them
        exactly (no dates, no non-string keys)."""
        try:
            text = json.dumps(docs, separators=(",", ":"))
        except (TypeError, ValueError):
            return
        if json.loads(text) == docs:
            self._write(f"{key}.json", text)

    def prune(self, keep: int = 2048) -> None:
        """Keep the `keep` most recently written renders."""
        with contextlib.suppress(OSError):
            entries = sorted(self.directory.glob("*.yaml"), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in entries[keep:]:
                old.unlink(missing_ok=True)
                old.with_suffix(".json").unlink(missing_ok=True)

    def _parsed_file(self, root: Path) -> Path:
        return self.directory / f"parsed-{hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]}.json"

    def load_parsed(self, root: Path) -> None:
        """Prime formats.yamlio's parse memo with what the last run on `root` parsed (keyed by content digest, so
        an edited file is parsed anew)."""
        with contextlib.suppress(OSError, ValueError):
            entries = json.loads(self._parsed_file(root).read_text(encoding="utf-8"))
            if isinstance(entries, dict):
                yamlio.prime_parsed(entries)

    def save_parsed(self, root: Path) -> None:
        """Keep what this run parsed for the next run on `root` (only those files: the store does not grow)."""
        parsed = yamlio.parsed_since_prime()
        if parsed is not None:  # None: the store holds exactly these already
            self._write(self._parsed_file(root).name, json.dumps(parsed, separators=(",", ":")))

    def put(self, key: str, text: str) -> None:
        self._write(f"{key}.yaml", text)

    def _write(self, name: str, text: str) -> None:
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs speed
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, self.directory / name)


def default_cache_dir() -> Path:
    """$KUBECTL_TRITON_CACHE_DIR, else $XDG_CACHE_HOME/kubectl-triton/renders (~/.cache by default)."""
    if os.environ.get("KUBECTL_TRITON_CACHE_DIR"):
        return Path(os.environ["KUBECTL_TRITON_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kubectl-triton" / "renders"


def build_many(paths: Iterable[Path], cache: RenderCache | None = None) -> list[Rendered | RenderError]:
    """Build several directories, keeping order; failures are returned, not raised. With `cache`, a build whose
    inputs are unchanged is read from it instead of run. The others are built in batches, one kustomize process
    per CPU (or per BATCH_SIZE folders) rather than one per folder (see `build_batch`), in parallel."""
    return start_many(paths, cache).results()


class Early:
    """Builds started before the cache lookups, one kustomize process per folder: `validate --changed-from`
    starts the folders a change most likely needs rebuilt. `start_many` adopts the ones its lookups miss; the
    others are waited for and dropped."""

    def __init__(self, paths: Iterable[Path]) -> None:
        cmd = kustomize_command()
        self.pool = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 2))
        self.futures = {path: self.pool.submit(build_batch, [path], cmd) for path in paths}

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def cancel(self) -> None:
        """Start no further build (those running finish on their own)."""
        self.pool.shutdown(wait=False, cancel_futures=True)


class Builds:
    """Builds under way (see `start_many`): `results()` waits for them."""

    def __init__(self, paths: list[Path], cache: RenderCache | None, early: Early | None = None) -> None:
        self.paths = paths
        self.cache = cache
        self.early = early
        self.keys: list[str | None] = [None] * len(paths)
        self.done: dict[int, Rendered | RenderError] = {}
        self.started: list[tuple[list[int], Future[list[Rendered | RenderError]]]] = []
        self.pool = ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 2) * 2))

    def running(self) -> bool:
        """Whether a build is still under way."""
        return any(not future.done() for _, future in self.started)

    def cached(self) -> list[Rendered]:
        """The renders the cache gave (the others are being built)."""
        return [r for r in self.done.values() if isinstance(r, Rendered)]

    def cancel(self) -> None:
        """Start no further build (those running finish on their own)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.early is not None:
            self.early.cancel()

    def results(self) -> list[Rendered | RenderError]:
        """Every folder's result in the order given (waits for the builds still running)."""
        try:
            for group, future in self.started:
                for i, result in zip(group, future.result(), strict=True):
                    self.done[i] = result
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
            if self.early is not None:
                self.early.close()
        out: list[Rendered | RenderError] = []
        for i in range(len(self.paths)):
            result = self.done[i]
            key = self.keys[i]
            if self.cache is not None and key is not None and isinstance(result, Rendered) and result.key is None:
                self.cache.put(key, result.yaml)
                result = Rendered(result.path, result.yaml, key)
            out.append(result)
        return out


def start_many(paths: Iterable[Path], cache: RenderCache | None = None, early: Early | None = None) -> Builds:
    """Look every folder up in `cache` and start building the others (as `build_many` does) without waiting
    for them: the caller goes on while kustomize runs, then asks `results()`. A folder `early` builds already
    is not built again."""
    cmd = kustomize_command()
    builds = Builds(list(paths), cache, early)
    paths, results, keys = builds.paths, builds.done, builds.keys

    def lookup(i: int) -> None:
        if cache is None:
            return
        key = keys[i] = cache.key(paths[i], cmd)
        if key is not None:
            found = cache.get(key)
            if found is not None:
                results[i] = Rendered(paths[i], found[0], key, found[1])
                return
            cache.misses += 1

    def start(group: list[int]) -> None:
        builds.started.append((group, builds.pool.submit(build_batch, [paths[i] for i in group], cmd)))

    def adopt(i: int) -> bool:
        future = early.futures.pop(paths[i], None) if early is not None else None
        if future is not None:
            builds.started.append(([i], future))
        return future is not None

    try:
        for i in range(len(paths)):  # in this thread: the lookups are CPU-bound Python, threads only add contention
            lookup(i)
            if i not in results and not adopt(i) and not builds.started:
                start([i])  # the first folder to build starts now, while the others are looked up
        begun = {i for group, _ in builds.started for i in group}
        todo = [i for i in range(len(paths)) if i not in results and i not in begun]
        batched = [i for i in todo if batchable(paths[i], cache)]
        cpus = os.cpu_count() or 2
        for group in _groups(batched, paths, max(cpus, -(-len(batched) // BATCH_SIZE))):
            start(group)
        for i in sorted(set(todo) - set(batched)):
            start([i])
    except BaseException:
        builds.pool.shutdown(wait=True, cancel_futures=True)
        raise
    return builds


# Folders per kustomize process: a build's cost grows faster than linearly with its objects (measured with
# kubectl 1.32's kustomize 5.5 on 9-object overlays: 30 ms a folder at 32, 78 at 100, 140 at 200; 120-180 alone).
BATCH_SIZE = 32

# Kustomization fields whose effect depends on being the top of the build (sortOptions, openapi) or that record
# the build's root in the output (buildMetadata): folders using them are built on their own.
_ROOT_SENSITIVE = (b"sortOptions", b"openapi", b"buildMetadata")


def batchable(path: Path, cache: RenderCache | None = None) -> bool:
    """Whether `path` builds the same inside a batch as on its own: all its inputs are local files and no
    kustomization it reads uses a root-sensitive field."""
    inputs = build_inputs(path, cache.memo if cache is not None else None)
    if not inputs.complete:
        return False
    for file in inputs.files:
        if file.name in KUSTOMIZATION_FILES:
            try:
                text = file.read_bytes()
            except OSError:
                return False
            if any(field in text for field in _ROOT_SENSITIVE):
                return False
    return True


KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def _groups(indices: list[int], paths: list[Path], count: int) -> list[list[int]]:
    """`indices` dealt into at most `count` batches so that folders of one parent (a model's overlays, a
    repository's clusters, which tend to declare objects of the same name) land in different batches."""
    batches: list[list[int]] = [[] for _ in range(max(1, min(count, len(indices))))]
    by_parent: dict[Path, list[int]] = {}
    for i in indices:
        by_parent.setdefault(paths[i].resolve().parent, []).append(i)
    turn = 0
    for members in by_parent.values():
        for i in members:
            batches[turn % len(batches)].append(i)
            turn += 1
    return [b for b in batches if b]


_MEMBER = "kubectl-triton.io/batch-member"
_MEMBER_LINE = re.compile(rf"^( +){re.escape(_MEMBER)}: \"?m(\d+)\"?\n", re.M)


def build_batch(paths: Sequence[Path], command: Sequence[str]) -> list[Rendered | RenderError]:
    """Build `paths` with one kustomize process: a temporary kustomization lists one wrapper per folder, each
    adding an annotation (metadata only) that names its member, and the output is split back by it and the
    annotation removed, giving each folder's own build byte for byte. When the batch fails (a folder that does
    not build, or two folders declaring the same object), it is halved until each failure is a folder's own."""
    if len(paths) == 1:
        try:
            return [build(paths[0], command)]
        except RenderError as err:
            return [err]
    with tempfile.TemporaryDirectory(prefix="kubectl-triton-batch-") as tmp:
        top = Path(tmp).resolve()
        for n, path in enumerate(paths):
            wrapper = top / f"m{n}"
            wrapper.mkdir()
            _dump(wrapper / "kustomization.yaml", {
                "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "resources": [os.path.relpath(path.resolve(), wrapper)], "transformers": ["member.yaml"]})
            _dump(wrapper / "member.yaml", {
                "apiVersion": "builtin", "kind": "AnnotationsTransformer", "metadata": {"name": "batch-member"},
                "annotations": {_MEMBER: f"m{n}"}, "fieldSpecs": [{"path": "metadata/annotations", "create": True}]})
        _dump(top / "kustomization.yaml", {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                           "resources": [f"m{n}" for n in range(len(paths))]})
        proc = subprocess.run([*command, *FLUX_FLAGS, str(top)], capture_output=True, text=True, check=False,
                              env=go_env())
    split = _split(proc.stdout, len(paths)) if proc.returncode == 0 else None
    if split is None:
        half = len(paths) // 2
        return [*build_batch(paths[:half], command), *build_batch(paths[half:], command)]
    return [Rendered(path, text) for path, text in zip(paths, split, strict=True)]


def _split(output: str, count: int) -> list[str] | None:
    """A batch's output as each member's own, or None when a document does not carry exactly one member mark."""
    members: list[list[str]] = [[] for _ in range(count)]
    if output:
        for doc in output.removesuffix("\n").split("\n---\n"):
            marks = list(_MEMBER_LINE.finditer(doc + "\n"))
            if len(marks) != 1 or int(marks[0].group(2)) >= count:
                return None
            mark = marks[0]
            before, after = doc[:mark.start()], (doc + "\n")[mark.end():]
            head, _, last = before.rstrip("\n").rpartition("\n")
            alone = last.strip() == "annotations:" and not after.startswith(mark.group(1)) \
                and len(last) - len(last.lstrip()) < len(mark.group(1))
            if alone:  # the wrapper created the annotations map: remove it with the mark
                before = head + "\n" if head else ""
            members[int(mark.group(2))].append(before + after)
    return ["---\n".join(docs) for docs in members]


def _dump(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc), encoding="utf-8")  # JSON is YAML: kustomize reads it as such


# kubectl kustomize reports through klog: E1203 05:34:56.161372    5568 run.go:72] "command failed" err="..."
# and, for a reason of several lines, err=< then the lines (tab-indented) then " >".
_KLOG = re.compile(r'^[EWIF]\d{4} [\d:.]+\s+\d+ [^\]]+\] "command failed" err=(".*"|<)$')


def _first_error_line(stderr: str) -> str:
    """kustomize's reason on one line: the `Error:` line of the kustomize binary, or the err value of kubectl's
    klog line; a reason of several lines (go-yaml's `unmarshal errors:` and the lines it lists) is joined."""
    raw = stderr.strip().splitlines()
    for n, ln in enumerate(raw):
        text = ln.strip()
        if text.lower().startswith("error:"):  # the kustomize binary indents a reason's further lines
            more = itertools.takewhile(lambda cont: cont[:1].isspace() and cont.strip(), raw[n + 1:])
            return _one_line([text[len("error:"):], *more])
        if m := _KLOG.match(text):
            if m.group(1) == "<":
                return _one_line(list(itertools.takewhile(lambda cont: cont.strip() != ">", raw[n + 1:])))
            try:
                return _one_line(str(json.loads(m.group(1))).splitlines())
            except ValueError:
                return m.group(1)[1:-1]
    lines = [ln.strip() for ln in raw if ln.strip()]
    return lines[-1] if lines else "no output"


# go-yaml prefixes an unmarshal error with the Go value it was decoding into: `map[string]interface {}(nil): `.
_GO_VALUE = re.compile(r"^map\[string\]interface \{\}\(nil\): ")


def _one_line(lines: list[str]) -> str:
    """Lines `yaml: unmarshal errors:`, `line 16: a`, `line 17: b` as `yaml: unmarshal errors: line 16: a; line
    17: b` (a message is one line), without go-yaml's Go value prefix."""
    first, *rest = [ln.strip() for ln in lines if ln.strip()] or ["no output"]
    first = _GO_VALUE.sub("", first)
    return f"{first}{' ' if first.endswith(':') else '; '}{'; '.join(rest)}" if rest else first


@dataclass(frozen=True)
class Located:
    """A kustomize failure traced to the file it is about (absolute) and, when kustomize gave it, the line."""

    file: Path
    problem: str
    line: int | None = None


# Folders kustomize names as it descends into them: a file named after one is relative to the last named.
_FOLDER = re.compile(r"(?:recursed accumulation of path|couldn't make target for path) '([^']+)'")
# A resource file that is no YAML: "MalformedYAMLError: yaml: line 17: did not find expected node content in
# File: platform.yaml" (File: as listed in the kustomization that reads it).
_MALFORMED = re.compile(r"MalformedYAMLError: (?:yaml: )?(?:line (\d+): )?(.+?) in File: ([^\s'\"\\]+)")
# The same from kustomize 4 (kubectl 1.21-1.26): "accumulation err='accumulating resources from 'platform.yaml':
# yaml: line 17: did not find expected node content': got file 'platform.yaml', but '…' must be a directory …".
_MALFORMED_4 = re.compile(r"accumulating resources from '([^']+)': yaml: (?:line (\d+): )?(.+?)': got file ")
# A kustomization file that is no YAML or no Kustomization: "invalid Kustomization: yaml: line 18: did not find
# expected '-' indicator", "invalid Kustomization: json: unknown field \"resourcez\"".
_INVALID = re.compile(r"invalid Kustomization: (.+)")
# A patch file kustomize cannot read (no YAML, or no patch): the path as listed in the kustomization.
_PATCH = re.compile(r'unable to parse SM or JSON patch from \[path: \\?"([^"\\]+)\\?"\]')
_YAML_LINE = re.compile(r"^yaml: (?:unmarshal errors: )?(?:line (\d+): )?(.+)$")


def locate(detail: str, folder: Path) -> Located | None:
    """The file a build of `folder` failed on, when kustomize's reason (`RenderError.detail`) names one: a
    resource or kustomization file that is not valid YAML (with kustomize's line), a kustomization kustomize
    refuses, a patch it cannot parse. None for any other reason."""

    def base(at: int) -> Path:
        named = [m.group(1) for m in _FOLDER.finditer(detail, 0, at)]
        return Path(named[-1]) if named else folder

    if m := _MALFORMED.search(detail):
        return Located(Path(os.path.normpath(base(m.start()) / m.group(3))), f"invalid YAML: {m.group(2)}",
                       int(m.group(1)) if m.group(1) else None)
    if m := _MALFORMED_4.search(detail):
        return Located(Path(os.path.normpath(base(m.start()) / m.group(1))), f"invalid YAML: {m.group(3)}",
                       int(m.group(2)) if m.group(2) else None)
    if m := _INVALID.search(detail):
        top = base(m.start())
        kfile = next((top / n for n in KUSTOMIZATION_FILES if (top / n).is_file()), top / KUSTOMIZATION_FILES[0])
        reason = re.split(r"'(?=: )", m.group(1), maxsplit=1)[0]  # the end of an err='…' it is quoted in
        if len(re.findall(r'(?<!\\)"', detail[:m.start()])) % 2:  # inside a Go-quoted "…" (accumulateDirectory)
            reason = re.split(r'(?<!\\)"', reason, maxsplit=1)[0].replace('\\"', '"')
        if y := _YAML_LINE.match(reason):
            return Located(kfile, f"invalid YAML: {y.group(2)}", int(y.group(1)) if y.group(1) else None)
        return Located(kfile, f"invalid Kustomization: {reason.removeprefix('json: ')}")
    if m := _PATCH.search(detail):
        return Located(Path(os.path.normpath(base(m.start()) / m.group(1))),
                       "not a patch kustomize can read (invalid YAML, or neither a strategic-merge nor a JSON patch)")
    return None


# ---- the kustomization kustomize-controller builds a Flux Kustomization's path with --------------------------
# (fluxcd/pkg kustomize Generator.GenerateManifest): the folder's own kustomization file, or one generated for a
# folder without it (every manifest below it), with what the Flux Kustomization adds to it: spec.targetNamespace
# as `namespace`, namePrefix/nameSuffix, its patches, components and images, and buildMetadata. kustomize itself
# then builds it; nothing here interprets a kustomization beyond writing those fields.

# source-controller's default exclusions (fluxcd/pkg sourceignore: VCS, CI and extra patterns): never in an artifact.
_NOT_IN_ARTIFACT_FILES = frozenset({".travis.yml", ".gitlab-ci.yml", "appveyor.yml", ".drone.yml", "cloudbuild.yaml",
                                    "codeship-services.yml", "codeship-steps.yml", ".goreleaser.yml", ".sops.yaml",
                                    ".flux.yaml"})
_NOT_IN_ARTIFACT_FOLDERS = frozenset({".git", ".github", ".circleci"})
FLUX_KUSTOMIZATION_API = "kustomize.config.k8s.io/v1beta1"


@dataclass(frozen=True)
class FluxKustomizationFile:
    """The kustomization kustomize-controller writes into a Flux path before it builds it: `doc`, written as
    `name` (the folder's own kustomization file, or kustomization.yaml when it has none: `generated`), and the
    files of a generated one's folder that Flux's generator refuses (not Kubernetes objects), left out of it."""

    doc: dict[str, Any]
    name: str
    generated: bool
    refused: tuple[tuple[str, str], ...] = ()  # (path relative to the folder, why)


def _not_objects(path: Path) -> str | None:
    """Why kustomize's resource factory refuses the YAML file `path` (as Flux's generator reads every manifest
    it lists: each document needs a kind and, unless a List, metadata.name), None when it reads it."""
    try:
        docs = yamlio.load_all_shared(path)
    except TritonCtlError as err:
        return err.message.removeprefix(str(path)).lstrip(": ") or "invalid YAML"
    for doc in docs:
        if not isinstance(doc, dict):
            return "a document is not a mapping"
        if not doc.get("kind"):
            return "not a Kubernetes object (no kind)"
        meta = doc.get("metadata")
        if not str(doc["kind"]).endswith("List") and not (isinstance(meta, dict) and meta.get("name")):
            return "not a Kubernetes object (no metadata.name)"
    return None


def flux_manifests(folder: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """What kustomize-controller's generated kustomization.yaml lists for `folder` (one without a kustomization
    file), in its walk's order: every sub-folder holding a kustomization file (not descended into) and every
    `.yaml`/`.yml` file below, as `./relative/path`; and the files its generator refuses (with why). Symlinked
    folders are not walked (filepath.Walk); files source-controller never puts in an artifact are left out."""
    listed: list[str] = []
    refused: list[tuple[str, str]] = []

    def walk(here: Path, rel: str) -> None:
        try:
            with os.scandir(here) as found:
                entries = sorted(found, key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            path = Path(entry.path)
            sub = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_dir(follow_symlinks=False):
                if entry.name in _NOT_IN_ARTIFACT_FOLDERS:
                    continue
                if any((path / n).is_file() for n in KUSTOMIZATION_FILES):
                    listed.append(f"./{sub}")
                else:
                    walk(path, sub)
            elif os.path.splitext(entry.name)[1] in (".yaml", ".yml") and entry.name not in _NOT_IN_ARTIFACT_FILES:
                if not path.is_file():
                    continue
                why = _not_objects(path)
                if why is None:
                    listed.append(f"./{sub}")
                else:
                    refused.append((sub, why))

    walk(folder, "")
    return listed, refused


def _selector(target: Any) -> dict[str, Any] | None:
    if not isinstance(target, dict):
        return None
    keys = ("group", "version", "kind", "name", "namespace", "labelSelector", "annotationSelector")
    out = {k: target[k] for k in keys if target.get(k)}
    return out or None


def flux_kustomization(folder: Path, spec: dict[str, Any]) -> FluxKustomizationFile | None:
    """The kustomization kustomize-controller builds `folder` with for a Flux Kustomization of `spec`. None when
    the folder's own kustomization file cannot be read (kustomize's build of the folder says why)."""
    own = next((folder / n for n in KUSTOMIZATION_FILES if (folder / n).is_file()), None)
    refused: list[tuple[str, str]] = []
    if own is None:
        listed, refused = flux_manifests(folder)
        doc: dict[str, Any] = {"apiVersion": FLUX_KUSTOMIZATION_API, "kind": "Kustomization"}
        if listed:
            doc["resources"] = listed
        else:  # kustomize refuses an empty kustomization
            doc["namespace"] = "_placeholder"
    else:
        try:
            docs = yamlio.load_all_shared(own)
        except TritonCtlError:
            return None
        if not docs or not isinstance(docs[0], dict):
            return None
        doc = json.loads(json.dumps(docs[0], default=str))  # a copy (the parsed documents are shared)
        if not doc.get("resources"):
            doc["buildMetadata"] = ["originAnnotations"]  # what Flux writes so that kustomize builds it
    for field, key in (("targetNamespace", "namespace"), ("namePrefix", "namePrefix"),
                       ("nameSuffix", "nameSuffix")):
        if isinstance(spec.get(field), str):
            if spec[field]:
                doc[key] = spec[field]
            else:
                doc.pop(key, None)
    for patch in spec.get("patches") or []:
        if isinstance(patch, dict):
            entry: dict[str, Any] = {"patch": str(patch.get("patch") or "")}
            if (target := _selector(patch.get("target"))) is not None:
                entry["target"] = target
            doc["patches"] = [*(doc.get("patches") or []), entry]
    for component in spec.get("components") or []:
        if isinstance(component, str):
            if spec.get("ignoreMissingComponents") is True and not (folder / component).exists():
                continue
            doc["components"] = [*(doc.get("components") or []), component]
    for patch in spec.get("patchesStrategicMerge") or []:
        if isinstance(patch, dict):
            doc["patchesStrategicMerge"] = [*(doc.get("patchesStrategicMerge") or []), json.dumps(patch)]
    for patch in spec.get("patchesJson6902") or []:
        if isinstance(patch, dict):
            entry = {"patch": json.dumps(patch.get("patch") or [])}
            if (target := _selector(patch.get("target"))) is not None:
                entry["target"] = target
            doc["patchesJson6902"] = [*(doc.get("patchesJson6902") or []), entry]
    for image in spec.get("images") or []:
        if not isinstance(image, dict) or not image.get("name"):
            continue
        images = doc["images"] = list(doc.get("images") or [])
        same = next((i for i, old in enumerate(images) if isinstance(old, dict) and old.get("name") == image["name"]),
                    None)
        new = {k: image[k] for k in ("name", "newName", "newTag", "digest") if image.get(k)}
        if same is None:
            images.append(new)
            continue
        merged = dict(images[same])
        if new.get("newName"):
            merged["newName"] = new["newName"]
        if new.get("newTag") or new.get("digest"):  # tag and digest select the version together
            merged.pop("newTag", None)
            merged.pop("digest", None)
            merged.update({k: new[k] for k in ("newTag", "digest") if k in new})
        images[same] = merged
    metadata = spec.get("buildMetadata")
    if isinstance(metadata, list) and metadata:
        doc["buildMetadata"] = [str(m) for m in metadata]
    return FluxKustomizationFile(doc, own.name if own is not None else KUSTOMIZATION_FILES[0], own is None,
                                 tuple(refused))


def flux_build_folder(root: Path, folder: Path, kfile: FluxKustomizationFile, work: Path) -> Path:
    """A folder kustomize builds exactly as `folder` with `kfile` in place of its kustomization file, the
    repository left untouched: under `work`, the folders from `root` down to `folder` are re-created and every
    other entry of each is a symbolic link to the original (kustomize resolves links to the real folders, so every
    relative path, `../` ones included, reads the repository's own files). Its place depends only on `root`,
    `folder` and the document, so the render cache keeps its builds between runs; it is brought up to date on
    every call (entries added or removed since)."""
    root, folder = root.resolve(), folder.resolve()
    text = json.dumps(kfile.doc, sort_keys=True)
    key = hashlib.sha256(f"{root}\0{folder}\0{kfile.name}\0{text}".encode()).hexdigest()[:24]
    top = work / key
    rel = folder.relative_to(root).parts if folder != root else ()
    here, real = top, root
    for depth in range(len(rel) + 1):
        here.mkdir(parents=True, exist_ok=True)
        keep = rel[depth] if depth < len(rel) else None
        wanted: dict[str, str] = {}
        with contextlib.suppress(OSError), os.scandir(real) as originals:
            for entry in originals:
                if entry.name != keep and not (keep is None and entry.name in KUSTOMIZATION_FILES):
                    wanted[entry.name] = entry.path
        with os.scandir(here) as entries:
            present = list(entries)
        for entry in present:
            if entry.name == keep or (keep is None and entry.name == kfile.name):
                continue
            if entry.is_symlink() and wanted.get(entry.name) == os.readlink(entry.path):
                wanted.pop(entry.name)
            elif entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
        for name, target in wanted.items():
            with contextlib.suppress(FileExistsError):
                os.symlink(target, here / name)
        if keep is not None:
            here, real = here / keep, real / keep
    kpath = here / kfile.name
    try:
        current = kpath.read_text(encoding="utf-8")
    except OSError:
        current = None
    if current != text:
        fd, tmp = tempfile.mkstemp(dir=here, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)  # JSON is YAML: kustomize reads it as such
        os.replace(tmp, kpath)
    with contextlib.suppress(OSError):
        os.utime(top)
    return here


def flux_work_dir() -> Path:
    """Where `flux_build_folder` keeps its folders: beside the render cache (so that their builds stay cached),
    the oldest beyond 512 removed; a temporary folder, removed at exit, where that cannot be written."""
    global _FLUX_WORK
    if _FLUX_WORK is None:
        work = default_cache_dir() / "flux-builds"
        try:
            work.mkdir(parents=True, exist_ok=True)
            probe = Path(tempfile.mkdtemp(dir=work, prefix=".probe-"))
            probe.rmdir()
            with contextlib.suppress(OSError):
                folders = sorted((p for p in work.iterdir() if p.is_dir() and not p.name.startswith(".")),
                                 key=lambda p: p.stat().st_mtime, reverse=True)
                for old in folders[512:]:
                    shutil.rmtree(old, ignore_errors=True)
        except OSError:
            work = Path(tempfile.mkdtemp(prefix="kubectl-triton-flux-"))
            atexit.register(shutil.rmtree, work, True)
        _FLUX_WORK = work
    return _FLUX_WORK


_FLUX_WORK: Path | None = None
