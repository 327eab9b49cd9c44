"""Catalog lookup for a GPU as nvidia-smi names it; standard library only (PyYAML optional).

    python3 -m kubectl_triton.compat.lookup --gpu-name "NVIDIA H200" --compute-capability 9.0
    python3 -m kubectl_triton.compat.lookup --build-info ENGINE_DIR/build-info.json

Prints one JSON object (catalog key, GFD product label GFD derives from the name, catalog compute
capability and memory, whether they agree); exits 1 when the GPU is not in the catalog or the
compute capability disagrees, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys

from kubectl_triton.compat.catalog import by_gfd_label, by_smi_name, cc_tuple, gfd_label_for


def lookup(gpu_name: str, compute_capability: str | None = None,
           memory_mib: int | None = None) -> dict:
    """The catalog's view of one GPU reading."""
    gfd = gfd_label_for(gpu_name)
    gpu = by_smi_name(gpu_name) or by_gfd_label(gfd)
    out: dict = {"gpu_name": gpu_name, "gfd_product": gfd, "key": gpu.key if gpu else None,
                 "catalog_compute_capability": gpu.compute_capability if gpu else None,
                 "catalog_memory_mib": gpu.memory_mib if gpu else None,
                 "family": gpu.family if gpu else None}
    if compute_capability is not None:
        out["compute_capability"] = compute_capability
        out["compute_capability_matches"] = gpu is not None and cc_tuple(compute_capability) == cc_tuple(
            gpu.compute_capability)
    if memory_mib is not None:
        out["gpu_memory_mib"] = memory_mib
        out["memory_matches"] = gpu is not None and gpu.memory_mib == memory_mib
    out["found"] = gpu is not None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m kubectl_triton.compat.lookup",
                                     description="Look a GPU up in kubectl-triton's GPU catalog.")
    parser.add_argument("--gpu-name", help="device name as nvidia-smi prints it")
    parser.add_argument("--compute-capability", help='"major.minor" as nvidia-smi prints it')
    parser.add_argument("--memory-mib", type=int, help="memory.total in MiB")
    parser.add_argument("--build-info", help="a build-info.json to read the three fields from")
    args = parser.parse_args(argv)
    name, cc, mib = args.gpu_name, args.compute_capability, args.memory_mib
    if args.build_info:
        try:
            with open(args.build_info, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as err:
            print(f"error: {args.build_info}: {err}", file=sys.stderr)
            return 2
        name = name or doc.get("gpu_name")
        cc = cc or doc.get("compute_capability")
        mib = mib if mib is not None else doc.get("gpu_memory_mib")
    if not name:
        parser.error("--gpu-name or --build-info is required")
    result = lookup(name, cc, mib)
    print(json.dumps(result, indent=2))
    return 0 if result["found"] and result.get("compute_capability_matches", True) else 1


if __name__ == "__main__":
    sys.exit(main())
