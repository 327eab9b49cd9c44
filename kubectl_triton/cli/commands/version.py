"""`kubectl triton version`."""

from __future__ import annotations

import platform

import click

from kubectl_triton import __version__
from kubectl_triton.cli.options import output_format, output_option
from kubectl_triton.output.document import dumps

FORMATS = ("text", "json", "yaml")


@click.command("version")
@output_option(FORMATS)
@click.pass_context
def command(ctx: click.Context, output: str | None) -> None:
    """Print the plugin version."""
    output = output_format(ctx, output, FORMATS)
    info = {"version": __version__, "python": platform.python_version()}
    click.echo(f"kubectl-triton {__version__}" if output == "text" else dumps(info, output))
