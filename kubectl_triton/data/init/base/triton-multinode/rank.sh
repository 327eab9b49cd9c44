#!/bin/sh
# One MPI rank of a multi-node Triton group (started by leader.sh through mpirun): one tritonserver per rank.
# Rank 0 serves HTTP, gRPC and metrics with every model of the repository (the ensemble, pre/post-processing and
# tensorrt_llm); the other ranks serve nothing and load only tensorrt_llm, whose TensorRT-LLM engine joins rank
# 0's MPI world (TensorRT-LLM's multi-node Triton layout). Each rank gets its own python backend shared-memory
# prefix, so ranks that share a node do not collide in /dev/shm.
set -eu
rank=${OMPI_COMM_WORLD_RANK:?is not set: rank.sh is started by mpirun (leader.sh)}
repo=${MODEL_REPOSITORY:-/models}
set -- --model-repository="$repo" --disable-auto-complete-config \
    --backend-config="python,shm-region-prefix-name=rank${rank}_"
if [ -n "${TRITON_BACKEND_DIR:-}" ]; then
    set -- "$@" --backend-directory="$TRITON_BACKEND_DIR"
fi
if [ "$rank" -eq 0 ]; then
    addr=${TRITON_HTTP_ADDRESS:-0.0.0.0}
    set -- "$@" --http-address="$addr" --http-port=8000 --grpc-address="$addr" --grpc-port=8001 \
        --metrics-address="$addr" --metrics-port=8002 --allow-metrics=true
else
    set -- "$@" --allow-http=false --allow-grpc=false --allow-metrics=false \
        --model-control-mode=explicit --load-model=tensorrt_llm --log-info=false
fi
# shellcheck disable=SC2086 # TRITON_ARGS holds several flags
exec "${TRITONSERVER:-tritonserver}" "$@" ${TRITON_ARGS:-}
