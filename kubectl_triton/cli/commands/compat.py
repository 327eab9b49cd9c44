"""`kubectl triton compat`: engine-to-GPU compatibility, as a models x GPU types matrix or for one
engine directory against one GPU type."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kubectl_triton.errors import InputError

MARKS = {True: "✓", False: "✗", None: "?"}
ASCII_MARKS = {True: "ok", False: "x", None: "?"}


def _marks() -> dict:
    enc = (getattr(sys.stdout, "encoding", None) or "").lower()
    return MARKS if "utf" in enc else ASCII_MARKS


def table(rows: list[list[str]], paint=None) -> str:
    """kubectl-style table: upper-case header, columns padded by three spaces. `paint(row, col, padded)`
    may colour a padded cell (colour codes added after padding keep the columns aligned)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def line(i: int, r: list[str]) -> str:
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=True)]
        cells[-1] = cells[-1].rstrip()
        return "   ".join(paint(i, j, c) if paint else c for j, c in enumerate(cells)).rstrip()

    return "\n".join(line(i, r) for i, r in enumerate(rows))


def _painter(marks: dict):
    """Bold header, cells green/red/yellow by their verdict mark; None when colour is off."""
    from kubectl_triton.output.color import current

    st = current()
    if not st.on:
        return None
    verdicts = {marks[k]: k for k in marks}

    def paint(i: int, j: int, text: str) -> str:
        if i == 0:
            return st.bold(text)
        mark = text.split(" ", 1)[0].rstrip(",")
        return st.verdict(text, verdicts[mark]) if j > 0 and mark in verdicts else text

    return paint


def cell(result, marks: dict) -> str:
    mark = marks[result.compatible]
    first = result.first_reason
    return f"{mark} {first.code}" if first else mark


def format_matrix(results: list) -> str:
    """Models as rows, GPU types as columns, each cell ✓/✗/? and its first reason's code; then
    the first reason of every cell that has one."""
    from kubectl_triton.compat.catalog import gpus

    if not results:
        return "No TensorRT-LLM model with GPU overlays found."
    order = list(gpus())
    columns = sorted({r.gpu for r in results}, key=lambda g: (order.index(g) if g in order else 99, g))
    models = sorted({r.model or "-" for r in results})
    marks = _marks()
    by_pair: dict[tuple[str, str], list] = {}
    for r in results:
        by_pair.setdefault((r.model or "-", r.gpu), []).append(r)
    rows = [["MODEL", *[c.upper() for c in columns]]]
    for m in models:
        row = [m]
        for c in columns:
            found = by_pair.get((m, c), [])
            row.append(", ".join(cell(r, marks) for r in found) if found else "-")
        rows.append(row)
    notes = [f"{r.model or '-'} on {r.gpu}" + (f" ({r.overlay})" if r.overlay else "")
             + f": {r.first_reason.severity} [{r.first_reason.code}] {r.first_reason.message}"
             for r in results if r.first_reason]
    return table(rows, _painter(marks)) + ("\n\n" + "\n".join(notes) if notes else "")


def format_single(result, engine_dir: Path) -> str:
    verdict = {True: "compatible", False: "incompatible", None: "unknown"}[result.compatible]
    from kubectl_triton.output.color import current

    head = f"{engine_dir} on {result.gpu}: " + current().verdict(f"{_marks()[result.compatible]} {verdict}",
                                                                  result.compatible)
    if not result.reasons:
        return head
    rows = [["SEVERITY", "CODE", "MESSAGE"]] + [[r.severity, r.code, r.message] for r in result.reasons]
    return head + "\n\n" + table(rows, _painter(_marks()))


def to_json(results: list) -> str:
    return json.dumps({"results": [r.as_dict() for r in results]}, indent=2, ensure_ascii=False)


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
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default=None, help="Output format.")
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
    output = output or ((ctx.obj or {}).get("output") if (ctx.obj or {}).get("output") in ("text", "json")
                        else None) or "text"
    if engine_dir is not None:
        if repo_dir is not None:
            raise click.UsageError("REPO_DIR and --engine-dir are exclusive")
        if not gpu:
            raise click.UsageError("--engine-dir needs --gpu")
        result = single_result(engine_dir, gpu, image, gpus_per_pod, config_path, model)
        click.echo(to_json([result]) if output == "json" else format_single(result, engine_dir), color=_color())
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
    click.echo(to_json(results) if output == "json" else format_matrix(results), color=_color())
    for err in failures:
        click.echo(f"error: {err.message}", err=True)
    if failures or _failed(results):
        raise click.exceptions.Exit(1)
