"""`kubectl triton validate` (static) against the naive per-overlay loop that Flux's example repository uses
in CI (`kustomize build` piped into a schema validator; here `kubectl kustomize` + `kubernetes-validate
--strict`), on generated repositories of 50 and 200 model overlays, measured side by side in one run; and a pull
request that changes one model of the 200: `validate --changed-from HEAD` (render cache warm from the base tree's
run, as a previous CI run leaves it) against a cold full validate of the same tree (empty cache), the median of
three pairs measured alternately.
Goals: validate <= 0.25x the naive loop at 50 overlays; validate(200) <= 4.4x validate(50); the one-model change
<= 0.1x the cold full validate at 200 overlays."""

from __future__ import annotations

import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def make_repo(dest: Path, count: int) -> list[Path]:
    """A copy of this repository's base and GPU components plus `count` ONNX models, one overlay each."""
    for part in ("base", "overlays/gpus", "overlays/artifacts"):
        shutil.copytree(ROOT / part, dest / part)
    template_model = ROOT / "models/image-classifier"
    template_overlay = ROOT / "overlays/image-classifier"
    gpus = ["t4", "l4", "a10g", "l40s", "a100-80gb", "h100-80gb"]
    overlays = []
    cluster = dest / "clusters/bench/models"
    cluster.mkdir(parents=True)
    entries = []
    for i in range(count):
        name, gpu = f"model-{i:03d}", gpus[i % len(gpus)]
        shutil.copytree(template_model, dest / "models" / name)
        (dest / "models" / name / "model.yaml").write_text(
            (template_model / "model.yaml").read_text().replace("image-classifier", name))
        for sub in ("model",):
            shutil.copytree(template_overlay / sub, dest / "overlays" / name / sub)
            kfile = dest / "overlays" / name / sub / "kustomization.yaml"
            kfile.write_text(kfile.read_text().replace("image-classifier", name))
            dfile = dest / "overlays" / name / sub / "deployment.yaml"
            dfile.write_text(dfile.read_text().replace("image-classifier", name))
        overlay = dest / "overlays" / name / gpu
        overlay.mkdir()
        (overlay / "kustomization.yaml").write_text(
            (template_overlay / "l4/kustomization.yaml").read_text().replace("image-classifier", name)
            .replace("gpus/l4", f"gpus/{gpu}"))
        overlays.append(overlay)
        (cluster / f"{name}.yaml").write_text(
            (ROOT / "clusters/production/models/image-classifier-l4.yaml").read_text()
            .replace("image-classifier-l4", f"{name}-{gpu}").replace("image-classifier/l4", f"{name}/{gpu}"))
        entries.append(f"  - {name}.yaml\n")
    (cluster / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n" + "".join(entries))
    infra = dest / "clusters/bench/infrastructure.yaml"
    infra.write_text((ROOT / "clusters/production/infrastructure.yaml").read_text()
                     .replace("./clusters/production/infrastructure", "./clusters/bench/models"))
    # The triton Namespace and the model-artifacts PVC every model needs (validate checks that the cluster
    # converges), and what the cluster provides.
    shutil.copy(ROOT / "clusters/production/platform.yaml", dest / "clusters/bench/platform.yaml")
    layout = yaml.safe_load((ROOT / "kubectl-triton.yaml").read_text())
    layout["cluster"]["provides"]["crds"].append(  # no kube-prometheus-stack HelmRelease in the bench cluster
        {"group": "monitoring.coreos.com", "reason": "the bench cluster's monitoring stack"})
    (dest / "kubectl-triton.yaml").write_text(yaml.safe_dump(layout, sort_keys=False))
    return overlays


def naive_loop(overlays: list[Path]) -> float:
    start = time.perf_counter()
    kubectl = shutil.which("kubectl")
    validator = str(BIN / "kubernetes-validate")
    for overlay in overlays:
        built = subprocess.run([kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(overlay)],
                               capture_output=True, check=True)
        with tempfile.NamedTemporaryFile(suffix=".yaml") as fh:
            fh.write(built.stdout)
            fh.flush()
            subprocess.run([validator, "--strict", "--quiet", "-k", "1.32.0", fh.name], capture_output=True,
                           check=True)
    return time.perf_counter() - start


# The plugin runs from compiled bytecode, as a pip-installed one does (pip compiles it at install time). An
# environment with PYTHONDONTWRITEBYTECODE set (this project's machines) would otherwise compile the package's
# modules from source in every run; the first run below writes the bytecode here.
PYCACHE = tempfile.mkdtemp(prefix="bench-validate-pycache-")
atexit.register(shutil.rmtree, PYCACHE, True)


def plugin(repo: Path, *args: str, cache: Path | None = None, expect: int = 0) -> float:
    """Seconds one `kubectl triton validate` takes; a fresh (cold) render cache unless `cache` is given."""
    with tempfile.TemporaryDirectory() as cold:
        env = {**os.environ, "KUBECTL_TRITON_CACHE_DIR": str(cache or cold), "PYTHONPYCACHEPREFIX": PYCACHE}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        start = time.perf_counter()
        proc = subprocess.run([str(BIN / "kubectl-triton"), "validate", str(repo), "-o", "json", *args],
                              capture_output=True, env=env)
        elapsed = time.perf_counter() - start
    if proc.returncode != expect:
        raise SystemExit(f"validate exited {proc.returncode} on the generated repository: {proc.stdout[-2000:]!r}")
    return elapsed


def one_model_change(repo: Path, cache: Path, rounds: int = 3) -> tuple[list[float], list[float]]:
    """A pull request editing one model of `repo` (a git repository): `rounds` pairs, side by side, of a cold full
    validate and `--changed-from HEAD` with the cache the base tree's run left (restored before each), both on
    the edited tree. Returns (full seconds, changed seconds)."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)
    plugin(repo, cache=cache)  # the base tree's run (CI on main) fills the cache
    kept = cache.with_name(cache.name + "-base")
    shutil.copytree(cache, kept)
    config = repo / "models/model-007/image_classifier/config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 32", "max_batch_size: 0"))
    full, changed = [], []
    for _ in range(rounds):
        full.append(plugin(repo, expect=1))  # cold
        shutil.rmtree(cache)
        shutil.copytree(kept, cache)
        changed.append(plugin(repo, "--changed-from", "HEAD", cache=cache, expect=1))
    return full, changed


def main() -> dict:
    if shutil.which("kubectl") is None:
        print("validate: skipped (kubectl missing)")
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        repo50, repo200 = Path(tmp) / "r50", Path(tmp) / "r200"
        overlays50 = make_repo(repo50, 50)
        make_repo(repo200, 200)
        plugin(repo50)  # writes the bytecode (PYCACHE): not measured, as pip compiles it at install time
        v50 = plugin(repo50)
        naive50 = naive_loop(overlays50)
        v200 = plugin(repo200)
        fulls, changeds = one_model_change(repo200, Path(tmp) / "cache")
    full, changed = statistics.median(fulls), statistics.median(changeds)
    print(f"validate: 50 overlays: kubectl triton validate {v50:6.2f}s, naive kustomize+kubernetes-validate loop "
          f"{naive50:6.2f}s, ratio {v50 / naive50:.2f} (goal <= 0.25)")
    print(f"validate: 200 overlays: {v200:6.2f}s, ratio 200/50 = {v200 / v50:.2f} (goal <= 4.4)")
    print(f"validate: one model changed of 200 (median of {len(fulls)} pairs): --changed-from HEAD {changed:6.2f}s "
          f"({', '.join(f'{c:.2f}' for c in changeds)}), cold full validate {full:6.2f}s "
          f"({', '.join(f'{f:.2f}' for f in fulls)}), ratio {changed / full:.3f} (goal <= 0.1)")
    return {"validate_vs_naive_50": v50 / naive50, "validate_200_over_50": v200 / v50,
            "changed_from_vs_full_200": changed / full}


if __name__ == "__main__":
    main()
