"""Build dist/kubectl-triton: one executable file that runs on every CPython minor version it was built for.

Each interpreter given (python3.10 ... python3.13) installs the wheel with its dependencies into its own folder.
Every top-level entry (package, module, .dist-info) is stored once per distinct content, in a folder named after
the versions that share it: `common/` (all of them: the pure-Python part), `cp311-cp312-cp313/` (an abi3 wheel),
`cp310/` (a version's own compiled extension). A stdlib-only `__main__.py` unpacks the folders of the running
interpreter once into a cache (KUBECTL_TRITON_ROOT, default ~/.cache/kubectl-triton/<build id>) and runs the plugin
from there. `--exclude DIST` leaves a distribution out (the plugin names it in one line when a command needs it).

An interpreter given that is not on this machine (or is no CPython, another version than its name says, or has no
pip) is left out with a warning naming it and how to get it, and the file refuses that version when run; with
`--require-all`, or KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS=1 (CI, as for `make system-deps`), that is an error instead.

    python tools/zipapp.py --wheel dist/kubectl_triton-X-py3-none-any.whl -p python3.10 -p python3.11 -o OUT
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import NamedTuple

SKIP_TOP = {"bin", "pip", "setuptools", "_distutils_hack", "distutils-precedence.pth", "__pycache__"}

LAUNCHER = '''\
"""kubectl-triton launcher: unpack this file's site-packages for the running CPython once, then run the plugin."""
import os
import sys
import zipfile

BUILD = {build!r}
TAGS = {tags!r}
PARTS = {parts!r}


def main():
    tag = "cp%d%d" % sys.version_info[:2]
    if sys.implementation.name != "cpython" or tag not in TAGS:
        versions = ", ".join("%s.%s" % (t[2], t[3:]) for t in TAGS)
        sys.stderr.write("error: kubectl-triton needs CPython %s; this is %s %d.%d (or: pipx install kubectl-triton)\\n"
                         % (versions, sys.implementation.name, sys.version_info[0], sys.version_info[1]))
        sys.exit(2)
    archive = os.path.abspath(sys.argv[0])
    base = os.environ.get("KUBECTL_TRITON_ROOT") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "kubectl-triton")
    dest = os.path.join(base, BUILD)
    for part in [p for p in PARTS if tag in p.split("-") or p == "common"]:
        target = os.path.join(dest, part)
        if os.path.isdir(target):
            continue
        os.makedirs(dest, exist_ok=True)
        staging = target + ".%d.tmp" % os.getpid()
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if name.startswith(part + "/"):
                    zf.extract(name, staging)
        try:
            os.replace(os.path.join(staging, part), target)
        except OSError:  # another run unpacked it first
            pass
        import shutil
        shutil.rmtree(staging, ignore_errors=True)
    sys.path[0:1] = [os.path.join(dest, p) for p in PARTS if tag in p.split("-")] + [os.path.join(dest, "common")]
    from kubectl_triton.cli import main as run
    run()


main()
'''


def clean_env() -> dict[str, str]:
    """This environment without what would point another interpreter at this one's packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


PROBE = "import importlib.util, sys; print(sys.implementation.name, '%d.%d' % sys.version_info[:2], " \
        "importlib.util.find_spec('pip') is not None)"
_NAMED = re.compile(r"python(\d+\.\d+)")  # python3.12: the name says the version


class Missing(NamedTuple):
    """An interpreter given that cannot build the file, why, and the pyenv version when it is a pyenv shim of
    a version installed but not selected."""

    python: str
    why: str
    pyenv: str = ""


def probe(python: str) -> str | Missing:
    """The CPython version (3.11) of interpreter `python`, or why it cannot build the file: not found (also a
    pyenv shim of a version pyenv does not select), no CPython, another version than its name says, no pip
    (which installs the wheel)."""
    try:
        proc = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, env=clean_env(), timeout=120)
    except OSError:
        return Missing(python, "not found")
    except subprocess.TimeoutExpired:
        return Missing(python, "does not answer")
    if proc.returncode != 0:
        if shim := re.search(r"command exists in these Python versions:\n((?:[ \t]+\S+\n?)+)", proc.stderr):
            versions = shim.group(1).split()
            return Missing(python, f"pyenv's {', '.join(versions)}, not selected", versions[-1])
        return Missing(python, "not found" if proc.returncode == 127 else f"does not run (exit {proc.returncode})")
    impl, version, pip = (proc.stdout.split() + ["", "", ""])[:3]
    named = _NAMED.fullmatch(Path(python).name)
    if impl != "cpython":
        return Missing(python, f"is {impl or 'unknown'}, not CPython")
    if named and named.group(1) != version:
        return Missing(python, f"is CPython {version}")
    if pip != "True":
        return Missing(python, f"has no pip: {python} -m ensurepip")
    return version


def choose(pythons: list[str], require_all: bool) -> tuple[list[str], list[Missing]]:
    """The interpreters of `pythons` that can build, and those that cannot; exits when none can or, with
    `require_all`, when one cannot. Says on stdout which versions the file is built for."""
    usable: list[tuple[str, str]] = []
    missing: list[Missing] = []
    for python in pythons:
        found = probe(python)
        if isinstance(found, Missing):
            missing.append(found)
        else:
            usable.append((python, found))
    if missing and (require_all or not usable):
        print(f"error: cannot build for {listed(missing)}", file=sys.stderr)
        print(f"hint: {how_to_get(missing)}", file=sys.stderr)
        sys.exit(1)
    print(f"building for CPython {', '.join(v for _, v in usable)} ({', '.join(p for p, _ in usable)})")
    return [p for p, _ in usable], missing


def listed(missing: list[Missing]) -> str:
    return ", ".join(f"{m.python} ({m.why})" for m in missing)


def how_to_get(missing: list[Missing]) -> str:
    """How to get the interpreters `missing`, one line."""
    ways = []
    if shims := [m.pyenv for m in missing if m.pyenv]:
        ways.append(f"select pyenv's: pyenv global $(pyenv global) {' '.join(shims)}")
    if others := [m for m in missing if not m.pyenv]:
        versions = [n.group(1) for m in others if (n := _NAMED.fullmatch(Path(m.python).name))] or ["3.X"]
        ways.append(f"install them: pyenv install {' '.join(versions)}; apt-get install "
                    f"{' '.join('python' + v for v in versions)} (on Ubuntu from the deadsnakes PPA); brew install "
                    f"{' '.join('python@' + v for v in versions)}; in GitHub Actions, actions/setup-python")
    return "; ".join(ways) + "; or name the interpreters you have: make dist DIST_PYTHONS='python3.11 " \
        "/opt/python3.12/bin/python3.12'"


def install(python: str, wheel: Path, into: Path, deps: bool = True) -> str:
    """Install `wheel` and its dependencies with `python` into `into`; returns its tag (cp311)."""
    env = clean_env()
    tag = subprocess.run([python, "-c", "import sys; print('cp%d%d' % sys.version_info[:2])"], check=True,
                         capture_output=True, text=True, env=env).stdout.strip()
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
                    "--target", str(into / tag), *([] if deps else ["--no-deps"]), str(wheel)], check=True, env=env)
    return tag


def shipped(path: Path) -> list[Path]:
    """The files of a top-level entry that go into the archive (no byte code, no RECORD: it lists bin/ scripts
    whose interpreter line differs per version, and nothing reads it at run time)."""
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return [f for f in files if f.is_file() and "__pycache__" not in f.parts
            and not (f.name == "RECORD" and f.parent.name.endswith(".dist-info"))]


def excluded(site: Path, names: list[str]) -> set[str]:
    """Top-level entries of the distributions `names` (their .dist-info/RECORD's first path parts)."""
    want = {n.lower().replace("-", "_") for n in names}
    out = set()
    for info in site.glob("*.dist-info"):
        if info.name.removesuffix(".dist-info").rsplit("-", 1)[0].lower().replace("-", "_") in want:
            out.add(info.name)
            record = info / "RECORD"
            for row in record.read_text(encoding="utf-8").splitlines() if record.is_file() else []:
                top = row.split(",", 1)[0].split("/", 1)[0]
                if top and top != "..":
                    out.add(top)
    return out


def digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in shipped(path):
        h.update(p.relative_to(path).as_posix().encode() if path.is_dir() else b"")
        h.update(p.read_bytes())
    return h.hexdigest()


def build(wheel: Path, pythons: list[str], out: Path, deps: bool = True, exclude: tuple[str, ...] = ()) -> None:
    with tempfile.TemporaryDirectory(prefix="kubectl-triton-dist-") as tmp:
        root = Path(tmp)
        tags = [install(py, wheel, root, deps) for py in pythons]
        if len(set(tags)) != len(tags):
            sys.exit(f"error: the interpreters {pythons} are not distinct CPython versions ({tags})")
        entries: dict[str, dict[str, str]] = {}
        for tag in tags:
            skip = SKIP_TOP | excluded(root / tag, list(exclude))
            for entry in (root / tag).iterdir():
                if entry.name not in skip:
                    entries.setdefault(entry.name, {})[tag] = digest(entry)
        # entry -> [(folder, tag whose copy is stored)]: one copy per distinct content
        placed: dict[str, list[tuple[str, str]]] = {}
        for name, by_tag in entries.items():
            groups: dict[str, list[str]] = {}
            for tag in tags:
                if tag in by_tag:
                    groups.setdefault(by_tag[tag], []).append(tag)
            placed[name] = [("common" if members == tags else "-".join(members), members[0])
                            for members in groups.values()]
        parts = sorted({folder for spots in placed.values() for folder, _ in spots})
        build_id = hashlib.sha256(repr(sorted((k, sorted(v.items())) for k, v in entries.items())).encode())
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.with_name(out.name + ".tmp")
        with open(staging, "wb") as fh:
            fh.write(b"#!/usr/bin/env python3\n")
            with zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
                zf.writestr("__main__.py", LAUNCHER.format(build=build_id.hexdigest()[:16], tags=tuple(tags),
                                                           parts=tuple(parts)))
                for name, spots in sorted(placed.items()):
                    for folder, tag in spots:
                        for f in shipped(root / tag / name):
                            arc = f"{folder}/{f.relative_to(root / tag).as_posix()}"
                            info = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
                            info.external_attr = (f.stat().st_mode & 0o777 | 0o100000) << 16
                            info.compress_type = zipfile.ZIP_DEFLATED
                            zf.writestr(info, f.read_bytes(), compresslevel=9)
        staging.chmod(0o755)
        os.replace(staging, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("-p", "--python", action="append", required=True, help="interpreter; repeat per version")
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--no-deps", action="store_true", help="the plugin only (tests: dependencies on PYTHONPATH)")
    parser.add_argument("--exclude", action="append", default=[], metavar="DIST", help="leave a distribution out")
    parser.add_argument("--require-all", action="store_true",
                        default=os.environ.get("KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS") == "1",
                        help="fail when an interpreter given cannot build (default under "
                             "KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS=1) instead of leaving its version out")
    args = parser.parse_args()
    pythons, missing = choose(args.python, args.require_all)
    build(args.wheel, pythons, args.output, deps=not args.no_deps, exclude=tuple(args.exclude))
    if missing:  # after pip's output, where it is read
        print(f"warning: not built for {listed(missing)}: {args.output} refuses to run on those versions",
              file=sys.stderr)
        print(f"hint: {how_to_get(missing)}; KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS=1 (or --require-all) makes this "
              "an error", file=sys.stderr)


if __name__ == "__main__":
    main()
