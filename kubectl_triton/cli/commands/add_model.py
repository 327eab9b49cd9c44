"""`kubectl triton add-model`: scaffold a model, its overlays and its Flux Kustomizations (all or nothing)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from kubectl_triton.cli.commands._plan import apply_plan
from kubectl_triton.compat import catalog
from kubectl_triton.errors import InputError
from kubectl_triton.gitops import nodecache, repo
from kubectl_triton.gitops.init import gpu_component_files
from kubectl_triton.gitops.layout import read_node_cache
from kubectl_triton.gitops.scaffold import (
    BACKENDS,
    DEFAULT_IMAGE_TAG,
    DTYPES,
    MODEL_FAMILIES,
    QUANTIZATIONS,
    SCHEDULER_POLICIES,
    LlmOptions,
    Options,
    parse_step,
    parse_tensor,
    plan,
    read_facts,
)
from kubectl_triton.gitops.scaffold_vllm import VllmOptions

_LLM = "TensorRT-LLM (--backend tensorrtllm): "


def _hf_config(path: Path | None) -> str | None:
    """The text of --hf-config, checked to be a config.json the capacity estimate reads (InputError naming it)."""
    if path is None:
        return None
    from kubectl_triton.compat.hfconfig import load_architecture

    load_architecture(path)
    return path.read_text(encoding="utf-8")


def _node_cache(root: Path, wanted: bool, size: str | None, revision: str | None) -> nodecache.Request | None:
    """--node-cache with its size and revision, and the layout file's cache settings (InputError naming them)."""
    if not wanted:
        if size is not None or revision is not None:
            raise InputError("--artifact-size, --artifact-revision: only with --node-cache")
        return None
    return nodecache.request(read_node_cache(root), size, revision)


@click.command("add-model")
@click.argument("name")
@click.option("--backend", required=True, metavar="BACKEND", help=f"One of: {', '.join(BACKENDS)}.")
@click.option("--gpu", "gpus", multiple=True, metavar="GPU",
              help="GPU type (a Component under overlays/gpus/, or a catalog or kubectl-triton.yaml type, whose "
                   "Component is then written); repeat for one overlay per GPU type.")
@click.option("--cluster", help="Folder under clusters/ to register with (default: the only one).")
@click.option("--max-batch-size", type=int, help="Triton max_batch_size (default 8; tensorrtllm 64; ensemble: "
              "the smallest of its models).")
@click.option("--dynamic-batching/--no-dynamic-batching", default=None,
              help="Dynamic batcher (default: on when max_batch_size > 0).")
@click.option("--preferred-batch-size", "preferred", type=int, multiple=True, help="Repeatable.")
@click.option("--max-queue-delay-us", type=int, help="Dynamic batcher delay (default 100; tensorrtllm 0).")
@click.option("--instances", type=int, default=1, show_default=True, help="Model instances per GPU.")
@click.option("--version", "version", type=int, default=1, show_default=True, help="Model version folder.")
@click.option("--artifact", help="Artifact folder on the model-artifacts PVC (default: NAME) or s3://BUCKET/PREFIX.")
@click.option("--node-cache", is_flag=True,
              help="s3:// artifacts: keep the files on each node's local disk (kubectl-triton.yaml nodeCache), so a "
                   "restarted or rescheduled pod on the same node starts without a download (docs/node-cache.md).")
@click.option("--artifact-size", metavar="SIZE",
              help="--node-cache: the size of the model's files (e.g. 16Gi), checked against the nodes' budget.")
@click.option("--artifact-revision", metavar="REV",
              help=f"--node-cache: keys the files in the cache; change it when they change (default "
                   f"{nodecache.DEFAULT_REVISION}).")
@click.option("--input", "inputs", multiple=True, metavar="NAME:TYPE:DIMS",
              help="Repeatable, e.g. input:FP32:3,224,224 (dims without the batch dimension).")
@click.option("--output", "outputs", multiple=True, metavar="NAME:TYPE:DIMS", help="Repeatable.")
@click.option("--step", "steps", multiple=True, metavar="MODEL[:IN=T,...][->OUT=T,...]",
              help="Ensemble: an existing model (models/*/MODEL, or DIR/MODEL), in order; repeatable.")
@click.option("--image-tag", default=DEFAULT_IMAGE_TAG, show_default=True, help="Triton release of the image.")
@click.option("--model-family", default="llama", show_default=True, help=_LLM + ", ".join(MODEL_FAMILIES) + ".")
@click.option("--hf-model", help=_LLM + "checkpoint location (default /artifacts/ARTIFACT/hf).")
@click.option("--tokenizer-dir", help=_LLM + "tokenizer.json folder (default: the checkpoint).")
@click.option("--engine-dir", help=_LLM + "engine folder (default /artifacts/ARTIFACT/engines/GPU).")
@click.option("--tp", type=int, default=1, show_default=True, help=_LLM + "tensor parallelism.")
@click.option("--pp", type=int, default=1, show_default=True, help=_LLM + "pipeline parallelism.")
@click.option("--nodes", type=int, default=1, show_default=True,
              help=_LLM + "nodes of a multi-node group (a LeaderWorkerSet, MPI across pods); tp x pp = nodes x GPUs "
              "per node.")
@click.option("--gpus-per-node", type=int, help=_LLM + "GPUs each pod of a group asks for (default: the GPU "
              "catalog's node shape, 8 on HGX boards).")
@click.option("--frontend", type=click.Choice(["kserve", "openai"]), default="kserve", show_default=True,
              help="openai: also serve Triton's OpenAI-compatible frontend (/v1/chat/completions; tensorrtllm, "
              "single node).")
@click.option("--route", type=click.Choice(["none", "inferencepool"]), default="none", show_default=True,
              help="inferencepool: route the model through a Gateway API Inference Extension InferencePool "
              "(overlays/NAME/route/, with an endpoint picker unless the layout file names the platform's).")
@click.option("--gateway", default="triton-gateway", show_default=True, metavar="[NAMESPACE/]NAME",
              help="The Gateway the --route attaches to.")
@click.option("--dtype", help=_LLM + ", ".join(DTYPES) + " (default bfloat16); vllm: auto (default), "
              "bfloat16, float16, float32.")
@click.option("--quantization", default="none", show_default=True, help=_LLM + ", ".join(QUANTIZATIONS) + ".")
@click.option("--max-input-len", type=int, default=4096, show_default=True)
@click.option("--max-seq-len", type=int, help="tensorrtllm: the engine's max_seq_len (default 8192); vllm: "
              "max_model_len (default: the model's context length).")
@click.option("--max-num-tokens", type=int, default=8192, show_default=True)
@click.option("--kv-cache-free-gpu-mem-fraction", type=float, default=0.85, show_default=True)
@click.option("--batch-scheduler-policy", default="max_utilization", show_default=True,
              help=", ".join(SCHEDULER_POLICIES) + ".")
@click.option("--streaming/--no-streaming", default=True, show_default=True,
              help=_LLM + "decoupled tensorrt_llm model and a `stream` input.")
@click.option("--gpu-memory-utilization", type=float, default=0.9, show_default=True,
              help="vllm: share of each GPU's memory vLLM takes (weights, activations, KV cache).")
@click.option("--kv-cache-dtype", help="vllm: KV-cache precision (auto, fp8, ...; default auto).")
@click.option("--enforce-eager", is_flag=True, help="vllm: no CUDA graphs (less memory, slower decoding).")
@click.option("--hf-config", type=click.Path(path_type=Path),
              help="tensorrtllm, vllm: the checkpoint's config.json, copied to models/NAME/ so that validate and "
                   "`kubectl triton plan` size the KV cache (docs/capacity.md).")
@click.option("--autoscaler", type=click.Choice(["hpa", "keda"]), default="hpa", show_default=True,
              help="hpa: HorizontalPodAutoscaler on the queue-to-compute ratio; keda: KEDA, scaling to zero.")
@click.option("--dry-run", is_flag=True, help="Print the files it would write; write nothing.")
@click.option("--force", is_flag=True, help="Rewrite an existing model's files (only that model's).")
@click.option("--repo", "repo_dir", type=click.Path(path_type=Path), default=None,
              help="Repository root (default: the nearest parent holding overlays/).")
def command(name: str, backend: str, gpus: tuple[str, ...], cluster: str | None, max_batch_size: int | None,
            dynamic_batching: bool | None, preferred: tuple[int, ...], max_queue_delay_us: int | None,
            instances: int, version: int, artifact: str | None, inputs: tuple[str, ...], outputs: tuple[str, ...],
            steps: tuple[str, ...], image_tag: str, model_family: str, hf_model: str | None,
            tokenizer_dir: str | None, engine_dir: str | None, tp: int, pp: int, dtype: str | None,
            quantization: str, max_input_len: int, max_seq_len: int | None, max_num_tokens: int,
            kv_cache_free_gpu_mem_fraction: float,
            batch_scheduler_policy: str, streaming: bool, autoscaler: str, nodes: int, gpus_per_node: int | None,
            frontend: str, route: str, gateway: str, gpu_memory_utilization: float, kv_cache_dtype: str | None,
            enforce_eager: bool, hf_config: Path | None, node_cache: bool, artifact_size: str | None,
            artifact_revision: str | None, dry_run: bool, force: bool,
            repo_dir: Path | None) -> None:
    """Scaffold model NAME: models/NAME/ (config.pbtxt, model.yaml), overlays/NAME/ (one overlay per --gpu,
    plus the engine build for tensorrtllm) and its Flux Kustomizations, registered in
    clusters/CLUSTER/models/kustomization.yaml. Exit 2 (nothing written) for bad input or an existing model
    without --force."""
    root = repo.find_root(repo_dir)
    vllm_backend = backend == "vllm"
    llm = LlmOptions(model_family=model_family, hf_model=hf_model, tokenizer_dir=tokenizer_dir,
                     engine_dir=engine_dir, tp=tp, pp=pp, dtype=(None if vllm_backend else dtype) or "bfloat16",
                     quantization=quantization, max_input_len=max_input_len,
                     max_seq_len=(None if vllm_backend else max_seq_len) or 8192, max_num_tokens=max_num_tokens,
                     kv_cache_free_gpu_mem_fraction=kv_cache_free_gpu_mem_fraction,
                     batch_scheduler_policy=batch_scheduler_policy, streaming=streaming, nodes=nodes,
                     gpus_per_node=gpus_per_node)
    opts = Options(name=name, backend=backend, gpus=tuple(dict.fromkeys(gpus)), max_batch_size=max_batch_size,
                   dynamic_batching=dynamic_batching, preferred_batch_sizes=preferred,
                   max_queue_delay_us=max_queue_delay_us, instances=instances, version=version, artifact=artifact,
                   inputs=tuple(parse_tensor(t, "--input") for t in inputs),
                   outputs=tuple(parse_tensor(t, "--output") for t in outputs), image_tag=image_tag, llm=llm,
                   steps=tuple(parse_step(s) for s in steps), autoscaler=autoscaler, frontend=frontend, route=route,
                   gateway=gateway, vllm=VllmOptions(
                       gpu_memory_utilization=gpu_memory_utilization, kv_cache_dtype=kv_cache_dtype,
                       enforce_eager=enforce_eager, dtype=(dtype or "auto") if vllm_backend else "auto",
                       max_model_len=max_seq_len if vllm_backend else None),
                   hf_config=_hf_config(hf_config), node_cache=_node_cache(root, node_cache, artifact_size,
                                                                         artifact_revision))
    facts = read_facts(root, opts, cluster)
    # A GPU type of the catalog or of kubectl-triton.yaml without a Component yet: its Component is written too.
    components = {rel: text for gpu in opts.gpus if gpu not in facts.gpus and gpu in catalog.gpus()
                  for rel, text in gpu_component_files(facts.layout, gpu).items()}
    if components:
        facts = replace(facts, gpus=tuple(sorted({*facts.gpus, *opts.gpus} & {*facts.gpus, *catalog.gpus()})))
    todo = plan(opts, facts, force=force)
    todo = replace(todo, files={**components, **todo.files})
    apply_plan(root, todo, dry_run)
    if dry_run:
        return
    layout = facts.layout
    overlays = " ".join(layout.overlay_dir(name, g) for g in opts.gpus)
    click.echo(f"next: kubectl triton render {overlays} && git add {layout.model_dir(name)} "
               f"{layout.overlay_dir(name)} {layout.clusters}", err=True)

