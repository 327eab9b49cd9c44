"""`kubectl triton canary`: start a canary of a model version, or change its traffic share."""

from __future__ import annotations

from pathlib import Path

import click

from kubectl_triton.cli.commands._plan import apply_plan
from kubectl_triton.errors import InputError
from kubectl_triton.gitops import adaptercanary, modelrewrite, repo
from kubectl_triton.gitops.canary import DEFAULT_GATEWAY, plan_start, plan_weight, read_facts


@click.command("canary")
@click.argument("model")
@click.option("--weight", type=int, required=True, metavar="PERCENT",
              help="Share of the model's traffic (0-100) the canary gets; the stable track gets the rest.")
@click.option("--version", "version", type=int, metavar="N",
              help="Triton model version the canary serves (required to start a canary).")
@click.option("--gpu", help="Stable overlay (GPU type) to put the canary beside (default: the only one in Flux).")
@click.option("--triton-model", help="The versioned Triton model (default: MODEL with '-' written '_').")
@click.option("--stable-version", type=int, metavar="S",
              help="Version the stable track serves when config.pbtxt does not pin one (default: the newest "
                   "committed version below N, else model.yaml's version, else 1).")
@click.option("--gateway", default=DEFAULT_GATEWAY, show_default=True, metavar="[NAMESPACE/]NAME",
              help="The Gateway a new HTTPRoute attaches to.")
@click.option("--adapter", metavar="NAME",
              help="A LoRA adapter of MODEL (InferencePool route, OpenAI frontend): split the requests naming it "
                   "between it and --to by weight, in the pool's endpoint picker.")
@click.option("--to", "to", metavar="NEW", help="With --adapter: the adapter that gets PERCENT of them.")
@click.option("--cluster", help="Folder under clusters/ (default: the only one).")
@click.option("--dry-run", is_flag=True, help="Print the files it would write; write nothing.")
@click.option("--repo", "repo_dir", type=click.Path(path_type=Path), default=None,
              help="Repository root (default: the nearest parent holding overlays/).")
def command(model: str, weight: int, version: int | None, gpu: str | None, triton_model: str | None,
            stable_version: int | None, gateway: str, adapter: str | None, to: str | None, cluster: str | None,
            dry_run: bool, repo_dir: Path | None) -> None:
    """Send PERCENT of MODEL's traffic to version N of it.

    \b
    With --version (no canary yet): writes overlays/MODEL/GPU-canary/ (the stable overlay serving
    version N), pins the stable config.pbtxt to its version, writes the Gateway API HTTPRoute
    overlays/MODEL/route/ and registers both with Flux. Without --version (a canary in progress):
    changes the split, one line of the HTTPRoute.

    \b
    With --adapter NAME --to NEW (a model routed through an InferencePool that runs the OpenAI
    frontend): overlays/MODEL/route/inferencemodelrewrite.yaml sends PERCENT of the requests naming
    adapter NAME to adapter NEW (the pool's endpoint picker rewrites their model); --adapter NAME
    without --to changes the split. Exit 2, nothing written, for bad input.
    """
    root = repo.find_root(repo_dir)
    if adapter is not None:
        for name, value in (("--version", version), ("--gpu", gpu), ("--triton-model", triton_model),
                            ("--stable-version", stable_version), ("--cluster", cluster),
                            ("--gateway", None if gateway == DEFAULT_GATEWAY else gateway)):
            if value is not None:
                raise click.UsageError(f"{name}: not for an adapter canary (--adapter)")
        todo, split = adaptercanary.plan_canary(adaptercanary.read_facts(root, model), adapter=adapter, to=to,
                                                weight=weight)
        apply_plan(root, todo, dry_run)
        if not dry_run:
            click.echo(f"next: kubectl triton validate && git add overlays/{model}; the cluster needs the Inference "
                       f"Extension's {modelrewrite.GROUP} CRDs (kubectl-triton.yaml cluster.provides.crds) and its "
                       "endpoint picker v1.3.1 or later, started after the CRDs were (it looks for the kind once, "
                       f"at start-up: restart it if they came later); clients keep sending \"model\": "
                       f"\"{split.client}\"",
                       err=True)
        return
    if to is not None:
        raise click.UsageError("--to: only with --adapter")
    conflict = adaptercanary.rewrite_in_route(root, model) if version is not None else None
    if conflict is not None:
        raise InputError(f"{conflict}: {model}'s endpoint picker rewrites adapter names; a version canary's second "
                         "pool would not: promote or abort the adapter canary (and remove the file) first")
    facts = read_facts(root, model, cluster)
    if facts.canary_overlay is None and version is not None:
        todo = plan_start(facts, version=version, weight=weight, gpu=gpu, triton_model=triton_model,
                          stable=stable_version, gateway=gateway)
    else:
        for name, value in (("--gpu", gpu), ("--triton-model", triton_model), ("--stable-version", stable_version),
                            ("--gateway", None if gateway == DEFAULT_GATEWAY else gateway)):
            if value is not None and facts.canary_overlay is not None:
                raise click.UsageError(f"{name}: a canary is in progress; only --weight can change")
        todo = plan_weight(facts, weight, version)
    apply_plan(root, todo, dry_run)
    if not dry_run:
        click.echo(f"next: kubectl triton validate && git add overlays/{model} models/{model} clusters", err=True)
