"""`kubectl triton render`: build overlays with kustomize exactly as Flux would."""

from __future__ import annotations

from pathlib import Path

import click

from kubectl_triton.adapters import kustomize
from kubectl_triton.errors import InputError, RenderError
from kubectl_triton.gitops import repo


@click.command("render")
@click.argument("overlays", nargs=-1, type=click.Path(path_type=Path))
@click.option("--all", "render_all", is_flag=True, help="Render every overlay and every cluster folder.")
@click.option("--repo", "repo_dir", type=click.Path(path_type=Path), default=None,
              help="Repository root (default: the nearest parent holding overlays/).")
def command(overlays: tuple[Path, ...], render_all: bool, repo_dir: Path | None) -> None:
    """Render OVERLAY folders (or --all) to a YAML stream, each group headed by its source."""
    if not overlays and not render_all:
        raise click.UsageError("name at least one OVERLAY folder, or pass --all")
    root = repo.find_root(repo_dir)
    targets = _everything(root) if render_all else []
    for o in overlays:
        path = o if o.is_absolute() or not (root / o).exists() else root / o
        if not path.is_dir() or repo.kustomization_file(path) is None:
            raise InputError(f"{o}: not a kustomization folder (no kustomization.yaml)")
        targets.append(path)
    failures = []
    for result in kustomize.build_many(targets):
        if isinstance(result, RenderError):
            failures.append(result)
            continue
        click.echo(f"# Source: {repo.relative(root, result.path)}")
        click.echo(result.yaml.rstrip("\n"))
        click.echo("---")
    for err in failures:
        click.echo(f"error: {repo.relative(root, Path(str(err.path)))}: kustomize build failed: {err.detail}", err=True)
    if failures:
        raise click.exceptions.Exit(1)


def _everything(root: Path) -> list[Path]:
    """Every overlay, every cluster folder and every other path a Flux Kustomization applies, once each."""
    found: dict[Path, None] = {}
    for path in [*repo.overlays(root), *repo.clusters(root)]:
        found.setdefault(path.resolve())
    for ks in repo.flux_kustomizations(root):
        path = (root / ks.path).resolve()
        if root.resolve() in path.parents and repo.kustomization_file(path) is not None:
            found.setdefault(path)
    return [p for p in found if repo.kustomization_file(p) is not None]
