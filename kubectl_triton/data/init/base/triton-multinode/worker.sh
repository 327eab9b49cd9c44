#!/bin/sh
# Worker of a multi-node Triton group (a LeaderWorkerSet worker pod). It starts nothing by itself: it runs an
# SSH daemon for the leader's mpirun, which starts this node's ranks (rank.sh) through it. Only the group's key
# (the Secret mounted at MPI_SSH_DIR: authorized_keys) logs in, on MPI_SSH_PORT, as this container's user; no
# password, no Kubernetes API access. The daemon runs in the foreground: if it dies the pod restarts, and with
# RecreateGroupOnPodRestart the whole group with it.
set -eu

log() { echo "multinode worker: $*" >&2; }

: "${LWS_LEADER_ADDRESS:?is not set: worker.sh runs in a LeaderWorkerSet worker pod}"
MPI_SSH_PORT=${MPI_SSH_PORT:-2222}
MPI_SSH_DIR=${MPI_SSH_DIR:-/etc/mpi-ssh}
run=${MPI_SSHD_DIR:-/tmp/sshd}

if [ ! -r "$MPI_SSH_DIR/authorized_keys" ]; then
    log "$MPI_SSH_DIR/authorized_keys is missing: mount the group's SSH key Secret (docs/multinode.md)"
    exit 1
fi
mkdir -p "$run"
chmod 700 "$run"
[ -f "$run/host_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$run/host_key"
cp "$MPI_SSH_DIR/authorized_keys" "$run/authorized_keys"
chmod 600 "$run/authorized_keys"
cat > "$run/sshd_config" <<CONFIG
Port $MPI_SSH_PORT
HostKey $run/host_key
PidFile $run/sshd.pid
AuthorizedKeysFile $run/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
UsePAM no
StrictModes no
AllowTcpForwarding no
X11Forwarding no
PermitUserEnvironment no
CONFIG
log "waiting for the leader ${LWS_LEADER_ADDRESS} to start this node's ranks over SSH (port $MPI_SSH_PORT)"
# MPI_WORKER_DAEMON replaces the SSH daemon where none is installed (the repository's bootstrap test).
if [ -n "${MPI_WORKER_DAEMON:-}" ]; then
    exec sh -c "$MPI_WORKER_DAEMON"
fi
exec /usr/sbin/sshd -D -e -f "$run/sshd_config"
