"""Export the tensorrtllm_backend's own `tensorrt_llm` model template of each release, for
tests/test_tensorrtllm_release.py (what validate expects of a release against what that release ships):

    python tools/trtllm_templates.py --git-root DIR --out ../shared/conformance/trtllm-templates

DIR holds a git copy of triton-inference-server/tensorrtllm_backend (DIR/triton-inference-server+tensorrtllm_backend/
repo, as `fetch` leaves it, or DIR/triton-inference-server/tensorrtllm_backend). Each tag below becomes
<tag>/config.pbtxt (all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt at the pinned commit) beside the
repository's LICENSE (Apache-2.0, checked); SOURCES.json lists them. Third-party text: never committed here. Written
to a temporary folder, moved into place. From v0.20.0 the template moved to NVIDIA/TensorRT-LLM (not exported).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from realworld_corpus import CorpusError, Project, put_in_place

REPOSITORY = "triton-inference-server/tensorrtllm_backend"
TEMPLATE = "all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt"
LICENSE = "Apache-2.0"
TAGS = {  # tag -> commit (the TensorRT-LLM release of the tag: data/triton_images.yaml maps Triton releases to it)
    "v0.9.0": "76464e9be06600f3979acad9c14857938a66ff9f",
    "v0.10.0": "b92bdd79b6c50fb67203b6064e73662163012fe3",
    "v0.11.0": "6791733e64fe7edd9eda7e0d804d0d04d30fb057",
    "v0.12.0": "9a78477873574098c32467f0fd8a9d3b4c243d9b",
    "v0.13.0": "f80395e67a464e229b6595acd8f9305b344a5d54",
    "v0.14.0": "9958c21167e1a8e6bbddafc09b284904aaf22ab1",
    "v0.15.0": "8534b1cfd341399e046f60ef63a7d6beb549070b",
    "v0.16.0": "ad209ced188cbae19c7041d968dd4e6d3800ece2",
    "v0.17.0": "368eea9b13481a342caec025022c08c37ab816e8",
    "v0.18.0": "86542b637bbccdd708ab892337c8ad3a95932131",
    "v0.18.2": "c575d8cb980883efca12fe89ba918499c29459be",
    "v0.19.0": "c1e19638304d287f554f738c1411746555ed348c",
}


def build(git_root: Path, out: Path) -> list[dict[str, str]]:
    project = Project(REPOSITORY, git_root)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    rows = []
    try:
        for tag, commit in TAGS.items():
            license_id, text, _ = project.license(commit, "")
            if license_id != LICENSE:
                raise CorpusError(f"{REPOSITORY}: the license at {tag} is {license_id or 'not a permissive one'}")
            (stage / tag).mkdir()
            (stage / tag / "config.pbtxt").write_bytes(project.git("show", f"{commit}:{TEMPLATE}"))
            (stage / tag / "LICENSE").write_text(text, encoding="utf-8")
            rows.append({"tag": tag, "commit": commit, "repository": REPOSITORY, "path": TEMPLATE,
                         "license": LICENSE})
        (stage / "SOURCES.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        put_in_place(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-root", type=Path, required=True, help="folder holding the git copy")
    parser.add_argument("--out", type=Path, required=True, help="folder to write (replaced whole)")
    args = parser.parse_args(argv)
    try:
        rows = build(args.git_root, args.out)
    except CorpusError as exc:
        print(f"trtllm_templates: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {len(rows)} templates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
