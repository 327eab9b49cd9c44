#!/usr/bin/env bash
# The node-local cache of a model's files (docs/node-cache.md). Usage: node-cache.sh DOWNLOAD-COMMAND [ARG...]
# The command (the S3 Component's `aws s3 sync --no-progress $(ARTIFACTS_URI)`) runs with the destination folder
# appended, and only when this node's cache lacks the revision; then $ARTIFACTS_DIR becomes a link to the copy.
#  - $NODE_CACHE_DIR: the model's folder of the node cache (its local volume, mounted with subPath <model>);
#  - $NODE_CACHE_REVISION: what keys a copy (model.yaml artifacts.revision), with a hash of $ARTIFACTS_URI, so a
#    copy is never taken for the files of another prefix;
#  - $ARTIFACTS_DIR: where the assembly script reads the model's files (/artifacts/<model>, an emptyDir);
#  - $NODE_CACHE_KEEP: revisions of the model the node keeps, the most recently used (default 2).
# A copy is complete when its .complete marker exists: a download goes into a .partial-* folder of its own, the
# marker is written last, and the folder is renamed into place (atomic), so an interrupted download never leaves a
# half copy where a pod would take it for the files; pods of the model starting at once on a node take turns
# (flock), so one downloads and the others find its copy.
set -euo pipefail

cache=${NODE_CACHE_DIR:?the folder of the model in the node cache}
revision=${NODE_CACHE_REVISION:?set it in the artifact-source ConfigMap, as artifacts.revision in model.yaml}
link=${ARTIFACTS_DIR:?where the model repository assembly reads the files of the model}
keep=${NODE_CACHE_KEEP:-2}
if [ "$#" -eq 0 ]; then
  echo "node-cache: no download command given" >&2
  exit 2
fi
case "$revision" in
  [A-Za-z0-9]*) ;;
  *) echo "node-cache: NODE_CACHE_REVISION '$revision' must start with a letter or digit" >&2; exit 2 ;;
esac
case "$revision" in
  *[!A-Za-z0-9._-]*) echo "node-cache: NODE_CACHE_REVISION '$revision': letters, digits, '.', '_', '-' only" >&2
                     exit 2 ;;
esac
case "$keep" in
  '' | *[!0-9]* | 0) echo "node-cache: NODE_CACHE_KEEP '$keep' must be a positive number" >&2; exit 2 ;;
esac

key="$revision-$(printf '%s' "${ARTIFACTS_URI:-}" | sha256sum | cut -c1-12)"
copy="$cache/$key"
partial=""
child=""
cleanup() {
  if [ -n "$child" ]; then kill "$child" 2>/dev/null || true; wait "$child" 2>/dev/null || true; fi
  if [ -n "$partial" ]; then rm -rf "$partial"; fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # bash as PID 1 ignores SIGTERM otherwise: the pod's deletion would wait its grace period

# Keep at most $1 revisions besides this one, the most recently used: before a download (so that the new copy fits
# the budget of $keep revisions) and after it.
prune() {
  local limit=$1 count=0 used dir trash
  while IFS= read -r used; do
    dir=${used%/.last-used}
    [ "$dir" != "$copy" ] || continue
    count=$((count + 1))
    if [ "$count" -gt "$limit" ]; then
      echo "node-cache: removing $(basename "$dir") (the node keeps the $keep most recently used revisions)"
      trash="$cache/.partial-removed-$(basename "$dir")-$$"
      mv -T "$dir" "$trash" && rm -rf "$trash"
    fi
  done < <(ls -1t "$cache"/*/.last-used 2>/dev/null || true)
}

# One download of a revision per node at a time: the other pods of the model wait for it, then take the copy.
exec 9>"$cache/.lock-$key"
if command -v flock > /dev/null; then flock 9; fi
if [ -f "$copy/.complete" ]; then
  echo "node-cache: hit: $key is on this node (downloaded $(cat "$copy/.complete")); nothing to download"
else
  if [ -e "$copy" ]; then  # not made by this script (no marker): never served
    echo "node-cache: $key has no .complete marker: setting it aside"
    mv -T "$copy" "$cache/.partial-stale-$key-$$" && rm -rf "$cache/.partial-stale-$key-$$"
  fi
  prune $((keep - 1))
  partial="$cache/.partial-$key-${HOSTNAME:-$$}"
  rm -rf "$partial"
  mkdir -p "$partial"
  echo "node-cache: miss: downloading $key ($*)"
  started=$SECONDS
  "$@" "$partial" &
  child=$!
  wait "$child"
  child=""
  if [ -z "$(ls -A "$partial")" ]; then  # a missing or empty prefix syncs nothing, successfully: never cache that
    echo "node-cache: ${ARTIFACTS_URI:-the download} gave no files; nothing is cached" >&2
    exit 1
  fi
  date -u +%Y-%m-%dT%H:%M:%SZ > "$partial/.complete"
  if mv -T "$partial" "$copy" 2>/dev/null; then
    partial=""
    echo "node-cache: $key complete after $((SECONDS - started)) s: $(du -sh "$copy" | cut -f1)"
  elif [ -f "$copy/.complete" ]; then  # without flock: another pod of the model finished the same revision first
    echo "node-cache: $key was completed by another pod meanwhile; using that copy"
  else
    echo "node-cache: cannot move the download into place as $copy" >&2
    exit 1
  fi
fi
exec 9>&-
touch "$copy/.last-used"
mkdir -p "$(dirname "$link")"
ln -sfn "$copy" "$link"

# Keep the $keep most recently used revisions (this one among them), and drop the downloads left behind by pods
# that died more than 6 hours ago.
stale=$(mktemp -p "$cache" .prune.XXXXXX)
touch -d '6 hours ago' "$stale"
for dir in "$cache"/.partial-*; do
  if [ -d "$dir" ] && [ "$dir" != "$partial" ] && [ "$dir" -ot "$stale" ]; then
    echo "node-cache: removing an abandoned download: $(basename "$dir")"
    rm -rf "$dir"
  fi
done
rm -f "$stale"
prune $((keep - 1))
echo "node-cache: $link -> $copy"
