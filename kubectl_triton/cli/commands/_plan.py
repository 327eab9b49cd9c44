"""Printing or applying a scaffold Plan, shared by add-model, canary, promote and abort."""

from __future__ import annotations

from pathlib import Path

import click

from kubectl_triton.gitops.scaffold import Plan, write_plan


def _current(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def apply_plan(root: Path, todo: Plan, dry_run: bool) -> None:
    """--dry-run: print every file (`==> path <==` and its contents) and write nothing. Otherwise write the
    files whose content changes, all or nothing, and say per file: created, updated, unchanged, deleted."""
    if dry_run:
        for rel, text in todo.files.items():
            click.echo(f"==> {rel} <==")
            click.echo(text, nl=not text.endswith("\n"))
        for rel in todo.delete:
            click.echo(f"==> {rel} (deleted) <==")
        click.echo(f"dry run: {len(todo.files)} file(s) to write, {len(todo.delete)} to delete; nothing written",
                   err=True)
        return
    current = {rel: _current(root / rel) for rel in todo.files}
    changed = {rel: text for rel, text in todo.files.items() if current[rel] != text}
    if changed or todo.delete:
        write_plan(root, Plan(changed, todo.delete))
    for rel in todo.files:
        state = "unchanged" if rel not in changed else "updated" if current[rel] is not None else "created"
        click.echo(f"{state} {rel}")
    for rel in todo.delete:
        click.echo(f"deleted {rel}")
