"""Entry point: a click group whose sub-commands are imported only when they run (LazyGroup)."""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import sys
import threading
import warnings

import click

from kubectl_triton import __version__
from kubectl_triton.cli.options import FORMATS
from kubectl_triton.errors import EXIT_INTERRUPTED, EXIT_USAGE, TritonCtlError

# command name -> (module under kubectl_triton.cli.commands exposing `command`, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "abort": ("abort", "Remove a model's canary; the stable version keeps all traffic."),
    "add-adapter": ("add_adapter", "Add a LoRA adapter to a vLLM-backend model (reviewed in git)."),
    "add-model": ("add_model", "Scaffold a model: config.pbtxt, metadata, overlays, Flux registration."),
    "bench": ("bench", "Measure a served model: throughput and latency per concurrency level."),
    "canary": ("canary", "Start a canary of a model version, or change its traffic share (HTTPRoute)."),
    "check-models": ("check_models", "Check one Triton model repository folder."),
    "compat": ("compat", "Explain engine-to-GPU compatibility verdicts."),
    "diff": ("diff", "What a change does to each cluster: objects added, removed, changed; rollouts."),
    "gpus": ("gpus", "GPU types in the cluster and which overlays can run there."),
    "init": ("init", "Make a folder or an existing Flux repository a kubectl-triton repository."),
    "package-model": ("package_model", "Build a model's files into an OCI image, push it, point the model at it."),
    "plan": ("plan", "KV-cache capacity and memory fit of an LLM on every GPU type."),
    "promote": ("promote", "Make a model's canary version the stable one."),
    "record-engine": ("record_engine", "Record a TensorRT-LLM engine's metadata for offline compat checks."),
    "render": ("render", "Render overlays with kustomize, as Flux would apply them."),
    "status": ("status", "Rollout health of Triton models in a cluster, with cause and fix."),
    "tune": ("tune", "Search dynamic batching and instance counts on a Triton server; write the best to git."),
    "validate": ("validate", "Pull-request gate: render, schema-check and validate model configs."),
    "version": ("version", "Print the plugin version."),
}


COMPLETE_VAR = "_KUBECTL_TRITON_COMPLETE"


class LazyGroup(click.Group):
    """Imports `kubectl_triton.cli.commands.<module>` only when its command is invoked or its help shown."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, (mod, _) in COMMANDS.items() if _module_exists(mod))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None or not _module_exists(entry[0]):
            return None
        module = importlib.import_module(f"kubectl_triton.cli.commands.{entry[0]}")
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _module_exists(module: str) -> bool:
    here = os.path.join(os.path.dirname(__file__), "commands")
    return os.path.exists(os.path.join(here, f"{module}.py"))


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--kubeconfig", envvar="KUBECONFIG", help="Path to the kubeconfig file.")
@click.option("--context", "kube_context", help="The kubeconfig context to use.")
@click.option("-n", "--namespace", help="Namespace scope for cluster commands.")
@click.option("-A", "--all-namespaces", is_flag=True, help="Every namespace (commands that span namespaces).")
@click.option("-o", "--output", type=click.Choice(list(FORMATS)),
              help="Output format (each command documents which it accepts).")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default=None, envvar="KUBECTL_TRITON_COLOR",
              help="Colour the output: auto (on a terminal, unless NO_COLOR is set), always, never.")
@click.version_option(__version__, prog_name="kubectl-triton", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, kubeconfig: str | None, kube_context: str | None, namespace: str | None,
        all_namespaces: bool, output: str | None, color: str | None) -> None:
    """GitOps toolkit for NVIDIA Triton Inference Server on Kubernetes.

    Manifests live in git and Flux applies them; this plugin scaffolds models, gates pull
    requests and explains why a rollout fails. It never changes a cluster.
    """
    from kubectl_triton.output.color import set_mode

    set_mode(color)
    ctx.ensure_object(dict)
    ctx.obj.update(kubeconfig=kubeconfig, context=kube_context, namespace=namespace, all_namespaces=all_namespaces,
                   output=output)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry and the one exit path: run the group, turn the error set into one line on stderr and
    an exit code (0 ok, 1 findings, 2 usage, 130 interrupted); a closed stdout (`| head`) ends quietly. Run as
    a program (no `argv`), the process then ends without tearing the interpreter down (see `_leave`)."""
    try:
        _run(argv)
    except SystemExit as done:
        if argv is None and (done.code is None or isinstance(done.code, int)):
            _leave(done.code or 0)
        raise


def _leave(code: int) -> None:
    """End the process as Python would (exit handlers run, output flushed) but skip freeing every object one by
    one: validate holds every rendered object of the repository, and that alone took 0.08 s of a 0.8 s
    `--changed-from` run. Only when no other thread is left (one would be waited for)."""
    if threading.active_count() > 1:
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def _run(argv: list[str] | None) -> None:
    warnings.filterwarnings("ignore")  # a library's warning is never the user's business on stderr
    try:
        # Shell completion (_KUBECTL_TRITON_COMPLETE=bash_source|zsh_source|fish_source) completes the
        # `kubectl-triton` executable; messages and usage name the command as kubectl users type it.
        prog = "kubectl-triton" if os.environ.get(COMPLETE_VAR) else "kubectl triton"
        code = cli.main(args=argv, prog_name=prog, complete_var=COMPLETE_VAR, standalone_mode=False)
    except TritonCtlError as err:
        click.echo(f"error: {err.message}", err=True)
        if err.hint:
            click.echo(f"hint: {err.hint}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
    except ModuleNotFoundError as err:  # the single-file release leaves bench/tune's numpy and grpcio out
        click.echo(f"error: this command needs the Python package {err.name}, which this installation lacks; "
                   "install the plugin with pipx (pipx install kubectl-triton) or pip", err=True)
        sys.exit(EXIT_USAGE)
    except (click.Abort, KeyboardInterrupt):
        click.echo("aborted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as err:
        err.show()
        sys.exit(EXIT_USAGE if isinstance(err, click.UsageError) else err.exit_code)
    except BrokenPipeError:
        _closed_stdout()
    except SystemExit as exc:
        # click answers EPIPE with exit 1 after wrapping stdout; a reader that stopped reading is no failure
        if type(sys.stdout).__name__.lstrip("_") == "PacifyFlushWrapper":
            _closed_stdout()
        raise exc
    sys.exit(code if isinstance(code, int) else 0)


def _closed_stdout() -> None:
    """The reader of stdout went away: point stdout at /dev/null (so the final flush cannot fail) and exit 0."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)
