#!/usr/bin/env bash
# Prove the engine-build Job's build-info capture on a real GPU (issue 5, "Real GPU").
# Run from the repository root on a GPU machine; results go under $OUT (default ./out-device):
#   nvidia-smi.csv        the raw query the capture parses
#   build-info.log        the capture's stdout (the KUBECTL_TRITON_BUILD_INFO line the Job logs)
#   h200-build-info.json  the build-info.json it wrote (copy to tests/fixtures/device/)
#   lookup.json           catalog lookup of that reading (PyYAML if installed)
#   lookup-stdlib.json    the same lookup with site-packages disabled (standard library only)
#   env.txt               python and driver versions, exit codes
# Needs only python3 and nvidia-smi; tensorrt_llm/tensorrt may be absent (versions become null).
set -u
OUT="${OUT:-$PWD/out-device}"
IMAGE="${TRITON_IMAGE:-nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3}"
mkdir -p "$OUT/engine"
{
  echo "python: $(python3 --version 2>&1)"
  echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -n1)"
  echo "image: $IMAGE"
} > "$OUT/env.txt"
nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader > "$OUT/nvidia-smi.csv" 2>&1
python3 base/engine-build/build-info.py --engine-dir "$OUT/engine" --image "$IMAGE" \
  > "$OUT/build-info.log" 2> "$OUT/build-info.err"
echo "build-info rc=$?" >> "$OUT/env.txt"
if [ -f "$OUT/engine/build-info.json" ]; then
  cp "$OUT/engine/build-info.json" "$OUT/h200-build-info.json"
  python3 -m kubectl_triton.compat.lookup --build-info "$OUT/engine/build-info.json" > "$OUT/lookup.json"
  echo "lookup rc=$?" >> "$OUT/env.txt"
  python3 -S -c 'import sys; sys.path.insert(0, "."); from kubectl_triton.compat.lookup import main; sys.exit(main(sys.argv[1:]))' \
    --build-info "$OUT/engine/build-info.json" > "$OUT/lookup-stdlib.json"
  echo "lookup-stdlib rc=$?" >> "$OUT/env.txt"
fi
cat "$OUT/env.txt" "$OUT/nvidia-smi.csv" "$OUT/build-info.log" "$OUT/build-info.err" "$OUT"/lookup*.json 2>/dev/null
