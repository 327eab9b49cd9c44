"""Start-up cost: median wall time of `kubectl-triton --help` over that of `kubectl version --client`,
measured side by side (interleaved) in one run. Goal: ratio <= 1.5."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROUNDS = 15


def _time(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> dict:
    plugin = str(Path(sys.executable).parent / "kubectl-triton")
    kubectl = shutil.which("kubectl")
    if kubectl is None or not Path(plugin).exists():
        print("startup: skipped (kubectl or the installed kubectl-triton is missing)")
        return {}
    pairs = {"kubectl-triton --help": [plugin, "--help"], "kubectl version --client": [kubectl, "version", "--client"],
             "python -c 'import click'": [sys.executable, "-c", "import click"]}
    for cmd in pairs.values():  # warm the page cache
        _time(cmd)
    samples: dict[str, list[float]] = {k: [] for k in pairs}
    for _ in range(ROUNDS):
        for name, cmd in pairs.items():
            samples[name].append(_time(cmd))
    med = {k: statistics.median(v) for k, v in samples.items()}
    ratio = med["kubectl-triton --help"] / med["kubectl version --client"]
    for name, value in med.items():
        print(f"startup: {name:28s} median {value * 1000:7.1f} ms over {ROUNDS} runs")
    print(f"startup: ratio kubectl-triton --help / kubectl version --client = {ratio:.2f} (goal <= 1.5)")
    return {"startup_ratio": ratio}


if __name__ == "__main__":
    main()
