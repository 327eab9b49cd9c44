"""`kubectl triton record-engine`: copy an engine's metadata (never its engine files) into
models/MODEL/engines/GPU/ so pull requests can be checked for compatibility offline."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kubectl_triton.cli.options import ClusterArgs, cluster_args, cluster_options
from kubectl_triton.errors import ClusterError, InputError

LOG_TAIL_LINES = 5000


def job_log(where: ClusterArgs, job: str) -> tuple[str, str]:
    """The log of the build Job's latest pod, through kubectl_triton.adapters.kube."""
    try:
        from kubectl_triton.adapters import kube
    except ImportError:
        raise InputError("--from-job needs cluster access, which this build lacks",
                         hint="save the log (kubectl logs job/NAME > build.log) and pass --from-log") from None
    client = kube.connect(where.kubeconfig, where.context, where.namespace)
    pods, _ = client.list("pods", label_selector=f"job-name={job}")
    if not pods:
        raise ClusterError(f"job {job}: no pods in namespace {client.namespace}",
                           hint="check the Job's name and -n NAMESPACE")
    pods.sort(key=lambda p: (p.get("status", {}).get("phase") == "Succeeded",
                             p.get("metadata", {}).get("creationTimestamp", "")))
    pod = pods[-1]
    name = pod["metadata"]["name"]
    containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    text = "\n".join(client.log(client.namespace, name, c, tail_lines=LOG_TAIL_LINES) for c in containers)
    return text, f"job/{job} (pod {name})"


@click.command("record-engine")
@click.argument("model")
@click.option("--from", "from_dir", type=click.Path(path_type=Path), help="Engine directory to record.")
@click.option("--from-job", help="Build Job whose log carries the build info and engine config.")
@click.option("--from-log", type=click.Path(path_type=Path, allow_dash=True),
              help="A saved build Job log ('-' for stdin).")
@click.option("--gpu", "gpu", help="GPU catalog key (default: the build GPU's).")
@click.option("--repo", "repo_dir", type=click.Path(path_type=Path), default=None,
              help="Repository root (default: the nearest parent holding overlays/).")
@cluster_options()
@click.pass_context
def command(ctx: click.Context, model: str, from_dir: Path | None, from_job: str | None,
            from_log: Path | None, gpu: str | None, repo_dir: Path | None, kubeconfig: str | None,
            kube_context: str | None, namespace: str | None) -> None:
    """Record MODEL's engine metadata (config.json, build-info.json, rank file sizes) under
    models/MODEL/engines/GPU/, atomically. Engine files are never copied."""
    from kubectl_triton.compat import record
    from kubectl_triton.gitops import repo

    sources = [s for s in (from_dir, from_job, from_log) if s is not None]
    if len(sources) != 1:
        raise click.UsageError("give exactly one of --from DIR, --from-job JOB, --from-log FILE")
    root = repo.find_root(repo_dir)
    if from_dir is not None:
        meta = record.from_dir(from_dir)
    elif from_log is not None:
        if str(from_log) == "-":
            meta = record.from_log(sys.stdin.read(), "stdin")
        else:
            try:
                text = from_log.read_text(encoding="utf-8", errors="replace")
            except OSError as err:
                raise InputError(f"{from_log}: cannot read: {err.strerror or err}") from None
            meta = record.from_log(text, str(from_log))
    else:
        assert from_job is not None  # exactly one source was given
        text, source = job_log(cluster_args(ctx, kubeconfig, kube_context, namespace), from_job)
        meta = record.from_log(text, source)
    key = record.gpu_key(meta, gpu)
    dest = record.destination(root, model, key)
    if gpu and meta.build_info:
        from kubectl_triton.compat.catalog import by_smi_name

        built = by_smi_name(meta.build_info["gpu_name"])
        if built is not None and built.key != gpu:
            click.echo(f"warning: engine was built on {meta.build_info['gpu_name']} ({built.key}), "
                       f"recorded for {gpu}: compat will compare them", err=True)
    written = record.write(dest, meta)
    click.echo(f"recorded {repo.relative(root, dest)}/ ({', '.join(written)}) from {meta.source}")
