"""`kubectl triton version`."""

from __future__ import annotations

import json
import platform

import click

from kubectl_triton import __version__


@click.command("version")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default=None, help="Output format.")
@click.pass_context
def command(ctx: click.Context, output: str | None) -> None:
    """Print the plugin version."""
    output = output or (ctx.obj or {}).get("output") or "text"
    info = {"version": __version__, "python": platform.python_version()}
    click.echo(json.dumps(info) if output == "json" else f"kubectl-triton {__version__}")
