"""Confining paths to the repository: a name or symlink that leads outside it is refused."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from kubectl_triton.errors import InputError


def confine(root: Path, rel: str | Path) -> Path:
    """`root / rel`, refusing absolute paths, `..` parts, and symlinks (anywhere along the path, the last
    part included) that resolve outside `root`. Returns the unresolved path inside `root`."""
    text = str(rel)
    parts = PurePosixPath(text.replace("\\", "/")).parts
    if not text or text.startswith(("/", "\\")) or ".." in parts or "\x00" in text:
        raise InputError(f"{text!r}: refusing a path outside the repository")
    real_root = root.resolve()
    path = root / text
    real = path.resolve()
    if real != real_root and real_root not in real.parents:
        raise InputError(f"{text}: resolves to {real}, outside the repository {real_root} (symlink escape)")
    return path


def inside(root: Path, path: Path) -> bool:
    """Does `path` (symlinks resolved) lie inside `root`?"""
    real_root, real = root.resolve(), path.resolve()
    return real == real_root or real_root in real.parents
