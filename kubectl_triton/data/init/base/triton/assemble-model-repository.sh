#!/usr/bin/env bash
# Assembles Triton's model repository in $MODEL_REPOSITORY from
#  - $CONFIG_DIR: the model-config ConfigMap; each key is a repository path with "/" written as "__",
#    e.g. "ensemble__config.pbtxt" or "preprocessing__1__model.py";
#  - $ARTIFACTS_DIR/<model>/: large files (ONNX, TorchScript, engines) from the PVC or the S3 sync,
#    linked into place rather than copied.
set -euo pipefail
config_dir=${CONFIG_DIR:-/config}
artifacts_dir=${ARTIFACTS_DIR:-/artifacts}
repo=${MODEL_REPOSITORY:-/models}

for src in "$config_dir"/*; do
  key=$(basename "$src")
  case "$key" in ..*) continue ;; esac   # the ConfigMap volume's own bookkeeping entries
  rel=${key//__//}
  case "$rel" in /*|*../*) echo "refusing unsafe key: $key" >&2; exit 1 ;; esac
  mkdir -p "$repo/$(dirname "$rel")"
  cp -L "$src" "$repo/$rel"
done

for model_dir in "$repo"/*/; do
  model=$(basename "$model_dir")
  if [ -d "$artifacts_dir/$model" ]; then
    for item in "$artifacts_dir/$model"/*; do
      [ -e "$item" ] || continue
      target="$model_dir$(basename "$item")"
      if [ -d "$item" ] && [ -d "$target" ]; then
        for f in "$item"/*; do [ -e "$model_dir$(basename "$item")/$(basename "$f")" ] || ln -s "$f" "$target/"; done
      elif [ ! -e "$target" ]; then
        ln -s "$item" "$target"
      fi
    done
  fi
  # Triton needs at least one numeric version folder, even an empty one (ensembles, tensorrtllm).
  compgen -G "${model_dir}[0-9]*" > /dev/null || mkdir -p "${model_dir}1"
done
echo "model repository assembled:" && find "$repo" -maxdepth 3 | sort
