#!/bin/sh
# Leader of a multi-node Triton group (a LeaderWorkerSet group: this pod is worker index 0).
#
# 1. checks the world size: tp x pp (WORLD_SIZE) must be LWS_GROUP_SIZE nodes x GPUS_PER_NODE;
# 2. writes the MPI hostfile from the group's pod DNS names (LWS_LEADER_ADDRESS is
#    <lws>-<group>.<lws>.<namespace>; worker i is <lws>-<group>-<i>.<lws>.<namespace>), GPUS_PER_NODE slots each;
# 3. waits for every worker's SSH port, at most WORKER_WAIT_SECONDS, and fails naming the missing worker;
# 4. execs mpirun: one rank per GPU across the group, each running rank.sh (one tritonserver per rank).
# mpirun ends when any rank or any worker dies, and this container with it: with the LeaderWorkerSet's
# restartPolicy RecreateGroupOnPodRestart, the whole group is then recreated (MPI ranks cannot rejoin a job).
set -eu

log() { echo "multinode leader: $*" >&2; }
fail() { log "$*"; exit 1; }

: "${LWS_LEADER_ADDRESS:?is not set: leader.sh runs in a LeaderWorkerSet leader pod}"
: "${LWS_GROUP_SIZE:?is not set: leader.sh runs in a LeaderWorkerSet leader pod}"
: "${GPUS_PER_NODE:?is not set (GPUs each pod of the group requests)}"
: "${WORLD_SIZE:?is not set (tp x pp of the engine)}"
SCRIPTS_DIR=${SCRIPTS_DIR:-/scripts}
MPI_SSH_PORT=${MPI_SSH_PORT:-2222}
MPI_SSH_DIR=${MPI_SSH_DIR:-/etc/mpi-ssh}
WORKER_WAIT_SECONDS=${WORKER_WAIT_SECONDS:-600}
MPI_HOSTFILE=${MPI_HOSTFILE:-/tmp/mpi/hostfile}
# How mpirun starts its daemon on each worker: SSH with the group's key (see docs/multinode.md).
MPI_RSH_AGENT=${MPI_RSH_AGENT:-ssh -p $MPI_SSH_PORT -i $MPI_SSH_DIR/id_ed25519 -o UserKnownHostsFile=/dev/null \
-o StrictHostKeyChecking=no -o BatchMode=yes -o LogLevel=ERROR}

if [ "${LWS_WORKER_INDEX:-0}" != 0 ]; then
    fail "LWS_WORKER_INDEX is $LWS_WORKER_INDEX: leader.sh belongs in the leader pod (worker index 0)"
fi
nodes=$LWS_GROUP_SIZE
if [ "$((nodes * GPUS_PER_NODE))" -ne "$WORLD_SIZE" ]; then
    fail "world size $WORLD_SIZE (tp x pp) is not $nodes nodes x $GPUS_PER_NODE GPUs per node; rebuild the" \
         "engine for $((nodes * GPUS_PER_NODE)) GPUs or change the group size (kubectl triton validate checks this)"
fi

first=${LWS_LEADER_ADDRESS%%.*}
rest=${LWS_LEADER_ADDRESS#"$first"}
mkdir -p "$(dirname "$MPI_HOSTFILE")"
: > "$MPI_HOSTFILE.tmp"
i=0
while [ "$i" -lt "$nodes" ]; do
    if [ "$i" -eq 0 ]; then host=$LWS_LEADER_ADDRESS; else host="$first-$i$rest"; fi
    echo "$host slots=$GPUS_PER_NODE" >> "$MPI_HOSTFILE.tmp"
    i=$((i + 1))
done
mv "$MPI_HOSTFILE.tmp" "$MPI_HOSTFILE"
log "group of $nodes nodes x $GPUS_PER_NODE GPUs = world size $WORLD_SIZE; hostfile $MPI_HOSTFILE:"
sed 's/^/  /' "$MPI_HOSTFILE" >&2

reachable() {
    python3 -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 2).close()' \
        "$1" "$2" 2>/dev/null
}
deadline=$(($(date +%s) + WORKER_WAIT_SECONDS))
tail -n +2 "$MPI_HOSTFILE" | while read -r host _; do
    until reachable "$host" "$MPI_SSH_PORT"; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            fail "worker $host did not accept connections on port $MPI_SSH_PORT within ${WORKER_WAIT_SECONDS}s;" \
                 "is its pod running (kubectl get pods -l leaderworkerset.sigs.k8s.io/name) and its SSH key" \
                 "Secret mounted?"
        fi
        sleep 1
    done
    log "worker $host is up"
done

# Variables every rank needs, forwarded by mpirun (only those set: mpirun warns about the others).
set --
for name in PATH LD_LIBRARY_PATH HOME MODEL_REPOSITORY TRITONSERVER TRITON_BACKEND_DIR TRITON_HTTP_ADDRESS TRITON_ARGS; do
    if eval "[ -n \"\${$name+set}\" ]"; then set -- "$@" -x "$name"; fi
done
log "starting $WORLD_SIZE ranks"
# orte_keep_fqdn_hostnames: the workers are reached by their pod DNS names (a short pod name does not resolve).
exec mpirun -np "$WORLD_SIZE" --hostfile "$MPI_HOSTFILE" --map-by "ppr:$GPUS_PER_NODE:node" \
    --mca plm_rsh_agent "$MPI_RSH_AGENT" --mca orte_keep_fqdn_hostnames 1 --tag-output "$@" \
    sh "$SCRIPTS_DIR/rank.sh"
