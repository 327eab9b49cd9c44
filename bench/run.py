"""Runs every benchmark under bench/ (each prints its own side-by-side ratios)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    names = sys.argv[1:] or sorted(p.stem for p in HERE.glob("bench_*.py"))
    for name in names:
        spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"== {name}")
        module.main()


if __name__ == "__main__":
    main()
