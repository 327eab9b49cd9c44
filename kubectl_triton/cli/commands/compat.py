"""`kubectl triton compat`: engine-to-GPU compatibility, as a models x GPU types matrix or for one
engine directory against one GPU type."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from kubectl_triton.cli.options import output_format, output_option
from kubectl_triton.errors import InputError
from kubectl_triton.output.compat import format_matrix, format_single, results_document
from kubectl_triton.output.document import dumps

FORMATS = ("text", "json", "yaml")

def single_result(engine_dir: Path, gpu: str, image: str | None, gpus_per_pod: int | None,
                  config: Path | None, model: str | None):
    """One engine directory against one GPU type (key, GFD product label or nvidia-smi name)."""
    from kubectl_triton.compat.catalog import resolve
    from kubectl_triton.compat.engine import read_engine_dir
    from kubectl_triton.compat.rules import Target, evaluate

    engine = read_engine_dir(engine_dir)
    found = resolve(gpu)
    limits: dict = {}
    if config is not None:
        from kubectl_triton.compat.repo_check import config_limits
        from kubectl_triton.formats import pbtxt

        limits = config_limits(pbtxt.to_dict(pbtxt.load(config)))
    target = Target(name=found.key if found else gpu, gpus=(found,) if found else (),
                    unknown_labels=() if found else (gpu,), image=image,
                    gpus_per_pod=gpus_per_pod if gpus_per_pod is not None else engine.world_size, **limits)
    return evaluate(engine, target, model=model)


def _color() -> bool | None:
    """True when --color asks for colour (click.echo would strip it off a pipe otherwise)."""
    from kubectl_triton.output.color import enabled

    return True if enabled() else None


def _failed(results: list) -> bool:
    return any(r.compatible is False or any(x.severity == "error" for x in r.reasons) for r in results)


@click.command("compat")
@click.argument("repo_dir", required=False, type=click.Path(path_type=Path))
@click.option("--model", help="Only this model (repo mode); the model name to report (--engine-dir).")
@click.option("--gpu", help="GPU type: catalog key (h100-80gb), GFD product label or nvidia-smi name.")
@click.option("--engine-dir", type=click.Path(path_type=Path),
              help="Check one engine directory (config.json, rank*.engine, build-info.json).")
@click.option("--image", help="Serving image for --engine-dir (without it, no version check).")
@click.option("--gpus-per-pod", type=click.IntRange(min=0),
              help="nvidia.com/gpu per pod for --engine-dir (default: the engine's tp x pp).")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="The tensorrt_llm model's config.pbtxt, for --engine-dir.")
@output_option(FORMATS)
@click.pass_context
def command(ctx: click.Context, repo_dir: Path | None, model: str | None, gpu: str | None,
            engine_dir: Path | None, image: str | None, gpus_per_pod: int | None,
            config_path: Path | None, output: str | None) -> None:
    """Explain engine-to-GPU compatibility verdicts.

    Without --engine-dir: every TensorRT-LLM model with engine metadata in REPO_DIR (default: the
    nearest parent holding overlays/) against every GPU overlay that deploys it, as a matrix of
    ✓ (compatible), ✗ (incompatible) and ? (unknown) with the first reason. With --engine-dir and
    --gpu: one engine against one GPU type. Exits 0 when all pairs are compatible, 1 when any is
    not (or a target GPU is unknown), 2 on bad input.
    """
    output = output_format(ctx, output, FORMATS)
    if engine_dir is not None:
        if repo_dir is not None:
            raise click.UsageError("REPO_DIR and --engine-dir are exclusive")
        if not gpu:
            raise click.UsageError("--engine-dir needs --gpu")
        from kubectl_triton.gitops.model import Repository

        with contextlib.suppress(InputError):
            Repository.find()  # inside a repository, its own GPU types (kubectl-triton.yaml `gpus:`) count too
        result = single_result(engine_dir, gpu, image, gpus_per_pod, config_path, model)
        click.echo(format_single(result, engine_dir) if output == "text" else dumps(results_document([result]), output),
                   color=_color())
        if _failed([result]):
            raise click.exceptions.Exit(1)
        return
    for name, value in (("--image", image), ("--gpus-per-pod", gpus_per_pod), ("--config", config_path)):
        if value is not None:
            raise click.UsageError(f"{name} only applies with --engine-dir")
    from kubectl_triton.compat.repo_check import matrix
    from kubectl_triton.gitops import repo

    if repo_dir is not None and not repo_dir.is_dir():
        raise InputError(f"{repo_dir}: not a directory")
    root = repo.find_root(repo_dir)
    results, failures = matrix(root, model=model, gpu=gpu)
    click.echo(format_matrix(results) if output == "text" else dumps(results_document(results), output),
               color=_color())
    for err in failures:
        click.echo(f"error: {err.message}", err=True)
    if failures or _failed(results):
        raise click.exceptions.Exit(1)
