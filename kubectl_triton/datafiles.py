"""Package data (kubectl_triton/data/…), read through importlib.resources so a zip application works too."""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.resources.abc is Python 3.11+; an annotation only here
    from importlib.resources.abc import Traversable


def data_file(*parts: str) -> Traversable:
    """kubectl_triton/data/<parts…> (one joinpath per part: Python 3.10's Traversable takes one)."""
    node = resources.files("kubectl_triton").joinpath("data")
    for part in parts:
        node = node.joinpath(part)
    return node


def data_text(*parts: str) -> str:
    return data_file(*parts).read_text(encoding="utf-8")
