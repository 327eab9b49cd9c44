"""The model repository an overlay assembles: the Python twin of base/triton/assemble-model-repository.sh
(ConfigMap keys are repository paths with "/" written as "__")."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from kubectl_triton.errors import InputError
from kubectl_triton.gitops import workloads

CONFIG_VOLUME = "model-config"
SEPARATOR = "__"


def version_folder(name: str) -> int | None:
    """The model version a folder name is to Triton (VersionsToLoad in model_lifecycle.cc): decimal digits without
    a leading zero ("01" is ignored, with a warning); None for any other name."""
    if not (name.isascii() and name.isdigit()) or (len(name) > 1 and name.startswith("0")):
        return None
    return int(name)


def key_to_path(key: str) -> PurePosixPath:
    """ConfigMap key -> relative repository path; keys that would escape the repository are refused."""
    rel = PurePosixPath(key.replace(SEPARATOR, "/"))
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise InputError(f"ConfigMap key {key!r} does not name a path inside the model repository")
    return rel


def path_to_key(rel: str | PurePosixPath) -> str:
    return str(rel).replace("/", SEPARATOR)


def model_config_map(objects: list[dict]) -> dict | None:
    """The ConfigMap mounted as the `model-config` volume of the overlay's serving workload (a Deployment, a
    StatefulSet, or a LeaderWorkerSet group's pods), if the overlay has one."""
    for workload in objects:
        if workload.get("kind") not in workloads.SERVING_KINDS:
            continue
        namespace = (workload.get("metadata") or {}).get("namespace")
        for template in workloads.templates(workload):
            for volume in template.spec.get("volumes") or []:
                if isinstance(volume, dict) and volume.get("name") == CONFIG_VOLUME and \
                        isinstance(volume.get("configMap"), dict):
                    name = volume["configMap"].get("name")
                    for cm in objects:
                        meta = cm.get("metadata") or {}
                        if cm.get("kind") == "ConfigMap" and meta.get("name") == name and \
                                meta.get("namespace") == namespace:
                            return cm
    return None


def assemble(data: dict[str, str], dest: Path) -> list[PurePosixPath]:
    """Write the ConfigMap's files under `dest` and give every model a version folder, as the pod does."""
    written = []
    for key in sorted(data):
        rel = key_to_path(key)
        target = dest.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data[key], encoding="utf-8")
        written.append(rel)
    for model_dir in (p for p in dest.iterdir() if p.is_dir()) if dest.is_dir() else ():
        if not any(p.is_dir() and version_folder(p.name) is not None for p in model_dir.iterdir()):
            (model_dir / "1").mkdir()
    return written
