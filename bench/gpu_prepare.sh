#!/usr/bin/env bash
# Build the folder that bench/gpu_tune.py needs on a GPU machine without network (Python 3.12, torch, no zstd):
#   DEST/bundle.tar.xz  tritonserver of the nvidia-pytriton wheel in a slim form (bin/, lib/ without the 3.13
#                       libpython, backends/python, the 3.12 stub) + NumPy 1.26 for Python 3.12 (the stub was
#                       built against NumPy 1.x); xz, because Python's own lzma unpacks it there
#   DEST/deps/          needs of the plugin that image may lack: tritonclient (model_config_pb2), protobuf 6.33
#                       (that gencode's runtime), python-rapidjson (tritonclient[grpc] imports it), click and
#                       ruamel.yaml
#   DEST/src/           this checkout's kubectl_triton/ and bench/
# Usage: bench/gpu_prepare.sh DEST   (run from the repository root, with the project's .venv; needs pip's network)
set -euo pipefail
DEST=$(realpath -m "${1:?usage: bench/gpu_prepare.sh DEST}")
PY=${PYTHON:-.venv/bin/python}
SP=$($PY -c 'import pytriton, pathlib; print(pathlib.Path(pytriton.__file__).parents[1])')
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$DEST" "$WORK/whl" "$WORK/stage/triton/bin" "$WORK/stage/triton/lib" "$WORK/stage/triton/backends/python" \
  "$WORK/stage/triton/stub" "$WORK/stage/np126"
dl() { $PY -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$WORK/whl" "$1"; }
dl numpy==1.26.4
dl protobuf==6.33.6
dl python-rapidjson==1.20
dl click==8.1.8
dl ruamel.yaml==0.18.10
cp "$SP/pytriton/tritonserver/bin/tritonserver" "$WORK/stage/triton/bin/"
cp "$SP"/nvidia_pytriton.libs/* "$WORK/stage/triton/lib/"
rm -f "$WORK"/stage/triton/lib/libpython3-*.so*
cp "$SP"/pytriton/tritonserver/backends/python/{libtriton_python.so,triton_python_backend_utils.py} \
  "$WORK/stage/triton/backends/python/"
cp "$SP/pytriton/tritonserver/python_backend_stubs/3.12/triton_python_backend_stub" "$WORK/stage/triton/stub/"
(cd "$WORK/stage/np126" && unzip -q "$WORK"/whl/numpy-1.26.4-*.whl && find . -name tests -type d -prune -exec rm -rf {} +)
(cd "$WORK/stage" && tar cf - triton np126 | xz -T2 -9 > "$DEST/bundle.tar.xz")
rm -rf "$DEST/deps" "$DEST/src"
mkdir -p "$DEST/deps" "$DEST/src"
for whl in protobuf-6.33.6 python_rapidjson-1.20 click-8.1.8 ruamel.yaml-0.18.10; do
  (cd "$DEST/deps" && unzip -qo "$WORK"/whl/"$whl"-*.whl)
done
cp -r "$SP/tritonclient" "$DEST/deps/"
cp -r kubectl_triton bench "$DEST/src/"
find "$DEST" -name __pycache__ -type d -prune -exec rm -rf {} +
du -sh "$DEST"/*
