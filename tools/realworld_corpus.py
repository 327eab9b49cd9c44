"""Build the real-world conformance corpus (tests/realworld.py) from git copies of the public projects it names.

The corpus is third-party text, so it is not kept in this repository: tests/fixtures/realworld-sources.json names
each model repository (project, path, commit, license) and this script writes the corpus from local git copies of
those projects (a clone or a bare git directory each; nothing is downloaded):

    python tools/realworld_corpus.py --git-root DIR --out ../shared/conformance/realworld-configs

DIR holds one git copy per project, as DIR/<owner>/<name>, DIR/<owner>__<name> or DIR/<owner>+<name>/repo. For each
manifest row the output folder <slug>/ gets every model folder (a subfolder with a config.pbtxt) of that path at that
commit: config.pbtxt byte for byte, every other file under its own name but empty (no weights; the names still
matter, e.g. 1/model.py makes Triton pick the python backend). Beside them: sources.json (the manifest rows),
SOURCES.md (the same as a table) and LICENSES/ (each project's license text, the nearest license file at or above the
path, checked against the manifest's SPDX id). The output is written to a temporary folder and moved into place.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MANIFEST = HERE.parent / "tests" / "fixtures" / "realworld-sources.json"
CONFIG = "config.pbtxt"
LICENSE_NAMES = ("LICENSE", "LICENCE", "COPYING")


class CorpusError(Exception):
    """A one-line reason the corpus cannot be built."""


def spdx(text: str) -> str | None:
    """The SPDX id of a permissive license text, None for any other (copyleft, proprietary, unknown)."""
    flat = " ".join(text.split())
    if re.search(r"GNU (AFFERO |LESSER )?GENERAL PUBLIC", flat):
        return None
    if "DO WHAT THE FUCK YOU WANT TO PUBLIC LICENSE" in flat.upper():
        return "WTFPL"
    if "free and unencumbered software released into the public domain" in flat:
        return "Unlicense"
    if "Apache License" in flat and "Version 2.0" in flat:
        return "Apache-2.0"
    if "Permission is hereby granted, free of charge" in flat:
        return "MIT"
    if "Redistribution and use in source and binary forms" in flat:
        return "BSD-3-Clause" if ("Neither the name" in flat or "names of its contributors" in flat) else "BSD-2-Clause"
    return None


class Project:
    """One project's git copy, read with `git -C` (clone or bare directory alike)."""

    def __init__(self, repository: str, git_root: Path) -> None:
        owner, name = repository.split("/", 1)
        candidates = [git_root / owner / name, git_root / f"{owner}__{name}", git_root / f"{owner}+{name}" / "repo"]
        found = [c for c in candidates if c.is_dir()]
        if not found:
            raise CorpusError(f"{repository}: no git copy under {git_root} (looked for "
                              + ", ".join(str(c.relative_to(git_root)) for c in candidates) + ")")
        self.repository = repository
        self.dir = found[0]

    def git(self, *args: str) -> bytes:
        done = subprocess.run(["git", "-C", str(self.dir), *args], capture_output=True)
        if done.returncode:
            reason = done.stderr.decode(errors="replace").strip().splitlines()
            raise CorpusError(f"{self.repository}: git {' '.join(args)}: {reason[-1] if reason else 'failed'}")
        return done.stdout

    def files(self, commit: str, path: str) -> list[str]:
        """Paths relative to `path` of every file under it at `commit`."""
        out = self.git("ls-tree", "-r", "-z", "--name-only", commit, "--", path + "/").decode()
        return [f[len(path) + 1:] for f in out.split("\0") if f.startswith(path + "/")]

    def license(self, commit: str, path: str) -> tuple[str | None, str, str]:
        """(SPDX id, text, folder) of the nearest license file at or above `path`."""
        parts = path.split("/")
        for depth in range(len(parts), -1, -1):
            folder = "/".join(parts[:depth])
            names = self.git("ls-tree", "-z", "--name-only", f"{commit}:{folder}" if folder else commit).decode()
            for name in sorted(n for n in names.split("\0") if n.upper().startswith(LICENSE_NAMES)):
                text = self.git("show", f"{commit}:{folder + '/' if folder else ''}{name}").decode(errors="replace")
                kind = spdx(text)
                if kind:
                    return kind, text, folder
        return None, "", ""


def build_row(row: dict[str, Any], project: Project, out: Path, licenses: dict[str, str]) -> int:
    """Write one model repository; returns its number of models."""
    commit, path = row["commit"], row["path"].strip("/")
    kind, text, folder = project.license(commit, path)
    if kind != row["license"]:
        raise CorpusError(f"{row['slug']}: the license at {commit[:12]} is {kind or 'not a permissive one'}, "
                          f"the manifest says {row['license']}")
    licenses[row["repository"].replace("/", "__") + (f"__{folder.replace('/', '__')}" if folder else "")] = text
    files = project.files(commit, path)
    models = {f.split("/")[0] for f in files if f.count("/") == 1 and f.endswith("/" + CONFIG)}
    if not models:
        raise CorpusError(f"{row['slug']}: no model folder with a {CONFIG} under {path} at {commit[:12]}")
    for name in files:
        model = name.split("/")[0]
        if model not in models:
            continue
        target = out / row["slug"] / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if name == f"{model}/{CONFIG}":
            target.write_bytes(project.git("show", f"{commit}:{path}/{name}"))
        else:
            target.write_bytes(b"")
    return len(models)


def sources_table(rows: list[dict[str, Any]]) -> str:
    lines = ["# Real-world Triton model repositories", "",
             "Each folder is one model repository as committed in a public project at the commit named below, built",
             "by tools/realworld_corpus.py from tests/fixtures/realworld-sources.json: every `config.pbtxt` byte for",
             "byte, every other file of a model folder under its own name but empty (no weights). Only projects under",
             "a permissive license; their license texts are in LICENSES/.", "",
             "| folder | repository | path | commit | license |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['slug']} | {r['repository']} | {r['path']} | {r['commit'][:12]} | {r['license']} |" for r in rows]
    return "\n".join(lines) + "\n"


def put_in_place(stage: Path, out: Path) -> None:
    """Replace the folder `out` (if any) with `stage`, each step a rename."""
    if out.exists():
        old = out.with_name(f".{out.name}-old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
        os.replace(stage, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(stage, out)


def build(rows: list[dict[str, Any]], git_root: Path, out: Path) -> tuple[int, int]:
    """Write the corpus to `out` (replaced whole); returns (repositories, models)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        projects: dict[str, Project] = {}
        licenses: dict[str, str] = {}
        models = 0
        for row in rows:
            if row["repository"] not in projects:
                projects[row["repository"]] = Project(row["repository"], git_root)
            models += build_row(row, projects[row["repository"]], stage, licenses)
        (stage / "LICENSES").mkdir()
        for name, text in sorted(licenses.items()):
            (stage / "LICENSES" / f"{name}.txt").write_text(text, encoding="utf-8")
        (stage / "sources.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        (stage / "SOURCES.md").write_text(sources_table(rows), encoding="utf-8")
        put_in_place(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return len(rows), models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-root", type=Path, required=True, help="folder holding one git copy per project")
    parser.add_argument("--out", type=Path, required=True, help="corpus folder to write (replaced whole)")
    parser.add_argument("--sources", type=Path, default=MANIFEST, help="the manifest (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        rows = json.loads(args.sources.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"realworld_corpus: cannot read {args.sources}: {exc}", file=sys.stderr)
        return 2
    try:
        repos, models = build(rows, args.git_root, args.out)
    except CorpusError as exc:
        print(f"realworld_corpus: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {repos} model repositories, {models} models, "
          f"{len({r['repository'] for r in rows})} projects")
    return 0


if __name__ == "__main__":
    sys.exit(main())
