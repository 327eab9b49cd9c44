"""`kubectl triton package-model`: a model's files as a reproducible OCI image (adapters/oci.py), pushed to a
registry, and the model's files in git pointed at its digest (gitops/package.py)."""

from __future__ import annotations

from pathlib import Path

import click

from kubectl_triton.cli.commands._plan import apply_plan
from kubectl_triton.errors import InputError


@click.command("package-model")
@click.argument("model")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--to", "to", required=True, metavar="oci://REGISTRY/REPOSITORY:TAG",
              help="Where to push the image; git gets the reference pinned to its digest.")
@click.option("--platform", "platforms", multiple=True, metavar="OS/ARCH",
              help="Platforms the image index lists (repeatable; default linux/amd64 and linux/arm64): the data is "
                   "the same, containerd pulls only a manifest for its node's platform.")
@click.option("--pull-policy", type=click.Choice(["IfNotPresent", "Always", "Never"]), default="IfNotPresent",
              show_default=True, help="The image volume's pullPolicy.")
@click.option("--plain-http", is_flag=True, help="Talk HTTP to the registry (a registry on localhost, say).")
@click.option("--no-push", is_flag=True, help="Build and write git's files without pushing (the digest is the "
                                              "same once pushed: the image is reproducible).")
@click.option("--dry-run", is_flag=True, help="Build, print the files it would write; push and write nothing.")
@click.option("--repo", "repo_dir", type=click.Path(path_type=Path), default=None,
              help="Repository root (default: the nearest parent holding overlays/).")
def command(model: str, folder: Path, to: str, platforms: tuple[str, ...], pull_policy: str, plain_http: bool,
            no_push: bool, dry_run: bool, repo_dir: Path | None) -> None:
    """Package FOLDER (the files MODEL's Triton models take from its artifact store: model files, checkpoints,
    tokenizers, prebuilt engines) as an OCI image, push it to --to, and point MODEL at it: model.yaml
    `artifacts:`, its Component's image-volume patch (mounted read-only at /artifacts, the files under the
    model's artifact path) and models/MODEL/artifact-layout.yaml, the files validate checks. The same folder
    always gives the same digest. Exit 2 (nothing pushed or written) for bad input, 1 when the registry refuses."""
    from kubectl_triton.adapters import oci
    from kubectl_triton.formats.yamlio import load_all_shared
    from kubectl_triton.gitops import artifacts, package
    from kubectl_triton.gitops.model import MODEL_COMPONENT, Repository
    from kubectl_triton.gitops.scaffold import Plan

    repo = Repository.find(repo_dir)
    found = repo.model(model)
    if found is None:
        raise InputError(f"no model {model!r} under {repo.layout.models}/")
    meta_rel = repo.relative(found.metadata_file)
    if not found.metadata_file.is_file():
        raise InputError(f"{meta_rel}: no such file (add-model writes it)")
    docs = load_all_shared(found.metadata_file)
    meta = docs[0] if docs and isinstance(docs[0], dict) else None
    if meta is None:
        raise InputError(f"{meta_rel}: expected a mapping")
    art = package.packable(model, meta, meta_rel)
    reference = artifacts.parse_reference(to, "--to")
    if reference.digest is not None:
        raise InputError(f"--to {to!r}: give a tag; the digest is the image's, computed here")
    for platform in platforms:
        os_name, _, arch = platform.partition("/")
        if not os_name or not arch or "/" in arch:
            raise InputError(f"--platform {platform!r}: expected OS/ARCH, e.g. linux/arm64")
    component = repo.layout.overlay_dir(model, MODEL_COMPONENT)
    component_file = repo.path(f"{component}/kustomization.yaml")
    if not component_file.is_file():
        raise InputError(f"{component}/kustomization.yaml: no such file (the model's Component)")
    with oci.work_dir() as work:
        image = oci.build(folder, work, model, art.path, tuple(dict.fromkeys(platforms)) or oci.PLATFORMS)
        layout = oci.layout(image, reference)
        files = package.plan_package(
            model, art, layout, pull_policy, metadata_rel=meta_rel,
            metadata_text=found.metadata_file.read_text(encoding="utf-8"), component_rel=component,
            component_text=component_file.read_text(encoding="utf-8"), models_rel=repo.relative(found.path))
        size = layout.size or 0
        click.echo(f"built {layout.reference.pinned}: {len(layout.files)} files, {size:,} bytes, "
                   f"{len(image.layers)} layer(s)", err=True)
        if not dry_run and not no_push:
            oci.push(image, reference, plain_http)
            click.echo(f"pushed {reference} ({image.digest})", err=True)
    apply_plan(repo.root, Plan(files), dry_run)
    if not dry_run:
        click.echo("next: kubectl triton validate && git add " + " ".join(sorted(files)), err=True)
