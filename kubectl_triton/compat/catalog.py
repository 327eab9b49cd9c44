"""The GPU catalog (data/gpus.yaml): look GPUs up by key, GFD product label or nvidia-smi name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from kubectl_triton.compat.data import load


@dataclass(frozen=True)
class GPU:
    """One GPU type of the catalog."""

    key: str
    gfd_products: tuple[str, ...]
    smi_names: tuple[str, ...]
    compute_capability: str
    memory_mib: int
    family: str
    name: str = ""  # what people call it ("NVIDIA L4 24 GB"); the header comment of its GPU Component
    gpus_per_node: int | None = None  # GPUs of the usual server (HGX baseboard: 8); None where servers vary
    max_gpus_per_node: int | None = None  # the most one node has: the largest node we can name (its source below)
    max_source: str = ""  # where max_gpus_per_node comes from (a URL, or the layout file's key)

    @property
    def label(self) -> str:
        """The canonical GFD product label."""
        return self.gfd_products[0]

    @property
    def node_limit(self) -> int | None:
        """The most GPUs of this type one node can have: the layout file's count for the repository's clusters,
        else the catalog's largest known node, else the usual server's."""
        return self.max_gpus_per_node or self.gpus_per_node


def cc_tuple(cc: str | None) -> tuple[int, int] | None:
    """ "8.9" -> (8, 9); None or malformed -> None."""
    if cc is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(cc))
    return (int(m.group(1)), int(m.group(2))) if m else None


_EXTRA: dict[str, GPU] = {}  # GPU types a repository declares in its layout file (see `register`)


@cache
def bundled() -> dict[str, GPU]:
    """The catalog shipped in the package (data/gpus.yaml), by key."""
    out = {}
    for key, entry in load("gpus.yaml")["gpus"].items():
        out[key] = GPU(key=key, gfd_products=tuple(entry["gfd_products"]),
                       smi_names=tuple(entry["smi_names"]),
                       compute_capability=str(entry["compute_capability"]),
                       memory_mib=int(entry["memory_mib"]), family=str(entry["family"]),
                       name=str(entry.get("name") or entry["gfd_products"][0]),
                       gpus_per_node=int(entry["gpus_per_node"]) if entry.get("gpus_per_node") else None,
                       max_gpus_per_node=int(entry["max_gpus_per_node"]) if entry.get("max_gpus_per_node") else None,
                       max_source=str(entry.get("max_gpus_per_node_source") or ""))
    return out


def gpus() -> dict[str, GPU]:
    """Every GPU type known to this process: the bundled catalog, then the repository's own types."""
    return {**bundled(), **_EXTRA} if _EXTRA else bundled()


def register(extra: tuple[GPU, ...]) -> None:
    """Make a repository's declared GPU types (its layout file's `gpus:`) known to every lookup; a declared
    key replaces the bundled entry of that key. Called when the repository is read."""
    _EXTRA.clear()
    _EXTRA.update({g.key: g for g in extra})


def _norm(text: str) -> str:
    return re.sub(r"[\s_-]+", "-", text.strip()).lower()


def strip_gfd_suffix(label: str) -> tuple[str, int | None]:
    """A GFD product label without the -SHARED / -MIG-<profile> suffix, and a MIG slice's memory
    in MiB when the suffix names one (e.g. -MIG-1g.10gb -> 10240)."""
    mig_mib = None
    for suffix in load("gpus.yaml").get("gfd_suffixes", []):
        at = label.find(suffix)
        if at > 0:
            if suffix == "-MIG-":
                m = re.search(r"\.(\d+)gb", label[at:], re.IGNORECASE)
                mig_mib = int(m.group(1)) * 1024 if m else None
            label = label[:at]
    return label, mig_mib


def by_gfd_label(label: str) -> GPU | None:
    """The catalog entry whose GFD product label is `label` (suffixes and case ignored)."""
    base, _ = strip_gfd_suffix(label.strip())
    want = _norm(base)
    for gpu in gpus().values():
        if any(_norm(p) == want for p in gpu.gfd_products):
            return gpu
    return None


def by_smi_name(name: str) -> GPU | None:
    """The catalog entry for an nvidia-smi device name (GFD's label is that name with dashes)."""
    want = _norm(name)
    for gpu in gpus().values():
        if any(_norm(n) == want for n in gpu.smi_names + gpu.gfd_products):
            return gpu
    return None


def resolve(key_or_label: str) -> GPU | None:
    """A GPU named by catalog key, GFD product label or nvidia-smi name."""
    text = key_or_label.strip()
    if text.lower() in gpus():
        return gpus()[text.lower()]
    return by_gfd_label(text) or by_smi_name(text)


def gfd_label_for(smi_name: str) -> str:
    """What GFD makes of an nvidia-smi device name: spaces become dashes."""
    return re.sub(r"\s+", "-", smi_name.strip())
