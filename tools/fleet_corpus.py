"""Build the Flux fleet corpus of issue 28 (tools/fleet_survey.py, tests/test_init_syncroots.py) from git copies.

The corpus is third-party text, so it is not kept in this repository: tests/fixtures/flux-fleets-sources.json names
each public Flux repository (commit, license, layout kind, and the sync roots: the folders Flux really syncs, with the
file that shows it) and this script exports each one at that commit from a local git copy (a clone or a bare git
directory; nothing is downloaded):

    python tools/fleet_corpus.py --git-root DIR --out ../shared/conformance/flux-fleets

DIR holds one git copy per repository, as DIR/<owner>/<name>, DIR/<owner>__<name> or DIR/<owner>+<name>/repo. Each
repository becomes <owner>__<name>/ (every file of the commit below --max-size, symbolic links as links, submodules
left out) and SOURCES.json lists the manifest rows with their folder. The license of every repository is checked
against the manifest's SPDX id; only permissive ones are accepted. Written to a temporary folder, moved into place.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from realworld_corpus import CorpusError, Project, put_in_place

HERE = Path(__file__).resolve().parent
MANIFEST = HERE.parent / "tests" / "fixtures" / "flux-fleets-sources.json"
MAX_SIZE = 4 << 20  # the git copies lack larger files anyway


def folder(repository: str) -> str:
    return repository.replace("/", "__")


def export(project: Project, commit: str, dest: Path, max_size: int) -> tuple[int, list[str]]:
    """Write every file of `commit` below `max_size` bytes under `dest`; returns (written, the paths left out, each
    with why: a submodule, a file too large or absent from the git copy, a link leaving the repository)."""
    listing = project.git("ls-tree", "-r", "-z", "-l", "--full-tree", commit).decode(errors="surrogateescape")
    written = 0
    left_out: list[str] = []
    for entry in filter(None, listing.split("\0")):
        meta, _, path = entry.partition("\t")
        mode, kind, obj, size = meta.split()
        if kind != "blob" or path.startswith("/") or ".." in path.split("/"):
            left_out.append(f"{path} ({kind})")
            continue
        if not size.isdigit() or int(size) > max_size:  # "BAD": a blob the snapshot lacks
            left_out.append(f"{path} ({size} bytes)" if size.isdigit() else f"{path} (absent)")
            continue
        try:
            data = project.git("cat-file", "blob", obj)
        except CorpusError:  # a snapshot may lack its largest blobs
            left_out.append(f"{path} (absent)")
            continue
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            link = data.decode(errors="surrogateescape")
            if os.path.isabs(link) or os.path.normpath(os.path.join(os.path.dirname(path), link)).startswith(".."):
                left_out.append(f"{path} (a link out of the repository)")
                continue
            os.symlink(link, target)
        else:
            target.write_bytes(data)
            if mode == "100755":
                target.chmod(0o755)
        written += 1
    return written, left_out


def build(rows: list[dict[str, Any]], git_root: Path, out: Path, max_size: int) -> list[dict[str, Any]]:
    """Write the corpus to `out` (replaced whole); returns the SOURCES.json rows."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    sources = []
    try:
        for row in rows:
            project = Project(row["repo"], git_root)
            license_id, _, _ = project.license(row["commit"], "")
            if license_id != row["license"]:
                raise CorpusError(f"{row['repo']}: the license at {row['commit'][:12]} is "
                                  f"{license_id or 'not a permissive one'}, the manifest says {row['license']}")
            written, left_out = export(project, row["commit"], stage / folder(row["repo"]), max_size)
            sources.append({"folder": folder(row["repo"]), **row, "files": written, "left_out": left_out})
            print(f"{row['repo']}: {written} files ({len(left_out)} left out)", file=sys.stderr)
        (stage / "SOURCES.json").write_text(json.dumps(sources, indent=1) + "\n", encoding="utf-8")
        put_in_place(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-root", type=Path, required=True, help="folder holding one git copy per repository")
    parser.add_argument("--out", type=Path, required=True, help="corpus folder to write (replaced whole)")
    parser.add_argument("--sources", type=Path, default=MANIFEST, help="the manifest (default: %(default)s)")
    parser.add_argument("--max-size", type=int, default=MAX_SIZE, help="largest file kept, bytes (%(default)s)")
    args = parser.parse_args(argv)
    try:
        rows = json.loads(args.sources.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"fleet_corpus: cannot read {args.sources}: {exc}", file=sys.stderr)
        return 2
    try:
        sources = build(rows, args.git_root, args.out, args.max_size)
    except CorpusError as exc:
        print(f"fleet_corpus: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {len(sources)} repositories, {sum(s['files'] for s in sources)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
