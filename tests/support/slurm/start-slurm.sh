#!/usr/bin/env bash
# start-slurm.sh DIR [--nodes N]
# Starts a private Slurm for tests and for trying the sbatch examples by
# hand: munged, slurmctld and one slurmd per node, from Debian's munge and
# slurm-wlm, as root, with their own ports, munge socket and key, and state,
# spool, pid and log files, all under DIR. Nothing of the machine's own
# Slurm or munge (/etc/slurm, /etc/munge, /run/munge) is read or changed.
# Writes DIR/slurm.conf, DIR/slurm.env (source it, and sbatch, srun, squeue
# and scontrol talk to this Slurm) and DIR/pids. Stop it with
# stop-slurm.sh DIR.
#
# One node (the default) is this host under its short name. With N >= 2
# nodes, node K is "tfjob-nodeK" in a network namespace of its own, joined to
# the others and to slurmctld by a bridge on a private 198.18.x.0/24 subnet,
# with an /etc/hosts of its own that names every node: N hosts on one
# machine, each with the whole port range to itself (so the examples' port
# layout, the same ports on every node, works as on a real cluster). That
# needs ip(8) and the right to make namespaces and links.
#
# Every node is declared with SLURM_TEST_CPUS CPUs (default 8) whatever the
# machine has (SlurmdParameters=config_overrides), so that the examples' 4
# tasks of 2 CPUs fit on a 2-core machine.
# Env: SLURM_TEST_CPUS, START_TIMEOUT (seconds, 60).
set -euo pipefail

usage() { echo "usage: $0 DIR [--nodes N]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$1"; DIR=$(cd "$1" && pwd); shift
NODES=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes) [[ $# -ge 2 && $2 =~ ^[1-9]$ ]] || usage; NODES=$2; shift 2 ;;
    *) usage ;;
  esac
done
TIMEOUT=${START_TIMEOUT:-60}
CPUS=${SLURM_TEST_CPUS:-8}
START=$(date +%s%N)
STARTED=0

die() {
  echo "start-slurm: error: $*" >&2
  if (( STARTED )); then "$KIT/stop-slurm.sh" "$DIR" >&2 || true; fi
  exit 1
}
alive() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; [[ ${s%% *} != Z ]]; }
elapsed() { echo "$(( ($(date +%s%N) - START) / 1000000 ))ms"; }

for t in slurmctld slurmd sbatch srun scontrol sinfo squeue; do
  command -v "$t" >/dev/null || die "'$t' not found: install Slurm with 'apt-get install slurm-wlm munge' (bash scripts/setup.sh does)"
done
MUNGED=$(command -v munged || echo /usr/sbin/munged)
[[ -x $MUNGED ]] || die "munged not found: install it with 'apt-get install munge'"
(( $(id -u) == 0 )) || die "slurmd starts job steps as their user, so it runs as root (this is uid $(id -u))"
id munge >/dev/null 2>&1 || die "no 'munge' user (the munge package makes it)"
(( NODES == 1 )) || command -v ip >/dev/null || die "ip not found: install iproute2 (needed for --nodes $NODES)"

if [[ -s $DIR/pids ]]; then
  ok=1; while read -r _ pid; do alive "$pid" || ok=0; done < "$DIR/pids"
  (( ok )) && { echo "already running (pids in $DIR/pids); . $DIR/slurm.env"; exit 0; }
  die "stale $DIR/pids (some processes are gone); run: $KIT/stop-slurm.sh $DIR"
fi

# --- munge: a key of its own, and a socket of its own so that a system
# munged, if any, is neither used nor disturbed. munged runs as the munge
# user and refuses a key or socket folder that others could write to. ---
chmod 755 "$DIR"
mkdir -p "$DIR/munge"
[[ -f $DIR/munge/munge.key ]] || head -c 1024 /dev/urandom > "$DIR/munge/munge.key"
chown -R munge:munge "$DIR/munge"
chmod 755 "$DIR/munge"  # clients reach the socket in it
chmod 400 "$DIR/munge/munge.key"
SOCKET=$DIR/munge/munge.socket

# --- ports: reuse DIR/ports.env when still free, else pick random free ones ---
# shellcheck source=tests/support/ports.sh
source "$KIT/../ports.sh"
pick_port() {
  local p=${!1:-}
  if [[ -n $p ]] && port_free "$p"; then PORTS_USED+="$p "; return 0; fi
  random_free_port "$1" || die "could not find a free port"
}
CTLD_PORT='' SLURMD_PORT=''
# shellcheck source=/dev/null
[[ -f $DIR/ports.env ]] && . "$DIR/ports.env"
pick_port CTLD_PORT; pick_port SLURMD_PORT
printf 'CTLD_PORT=%s\nSLURMD_PORT=%s\n' "$CTLD_PORT" "$SLURMD_PORT" > "$DIR/ports.env"

mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/run"
: > "$DIR/plugstack.conf"
: > "$DIR/pids"

# --- the nodes: their names and addresses, and for N >= 2 their network ---
names=() addrs=()
if (( NODES == 1 )); then
  CTLD_HOST=$(hostname -s) CTLD_ADDR=127.0.0.1
  names=("$CTLD_HOST") addrs=(127.0.0.1)
  # Jobs see the node by this name (SLURM_JOB_NODELIST), and the runtime's
  # tasks connect to each other by it.
  getent hosts "$CTLD_HOST" >/dev/null || die "this host's name '$CTLD_HOST' does not resolve; add it to /etc/hosts"
else
  # A /24 of 198.18.0.0/15 (set aside for network tests, RFC 2544) that no
  # interface here is on yet; the link names carry its number.
  subnet='' in_use=$(ip -o addr show)  # captured whole: grep -q in a pipe could SIGPIPE ip
  for _ in {1..50}; do
    n=$((RANDOM % 256))
    [[ $in_use == *" 198.18.$n."* ]] || { subnet=$n; break; }
  done
  [[ -n $subnet ]] || die "no free 198.18.x.0/24 subnet"
  NET="tfjs$subnet"  # link and namespace names: at most 15 characters
  CTLD_HOST=$(hostname -s) CTLD_ADDR=198.18.$subnet.1
  printf 'NET=%s\nNODES=%s\n' "$NET" "$NODES" > "$DIR/net.env"
  STARTED=1  # from here on, stop-slurm.sh removes what was made
  ip link add "${NET}br" type bridge || die "cannot make a bridge (ip link add type bridge); --nodes $NODES needs it"
  ip addr add "$CTLD_ADDR/24" dev "${NET}br"
  ip link set "${NET}br" up
  { grep -v -E '^[[:space:]]*#' /etc/hosts || true; echo "$CTLD_ADDR $CTLD_HOST-slurmctld"; } > "$DIR/hosts"
  for ((k = 1; k <= NODES; k++)); do
    names+=("tfjob-node$k") addrs+=("198.18.$subnet.$((k + 1))")
    echo "${addrs[k - 1]} ${names[k - 1]}" >> "$DIR/hosts"
  done
  for ((k = 1; k <= NODES; k++)); do
    ns="${NET}n$k"
    ip netns add "$ns" || die "cannot make network namespace $ns"
    ip link add "${ns}v" type veth peer name eth0 netns "$ns"
    ip link set "${ns}v" master "${NET}br"
    ip link set "${ns}v" up
    ip -n "$ns" addr add "${addrs[k - 1]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
fi

{
  echo "# Written by $KIT/start-slurm.sh"
  cat <<EOF
ClusterName=tfjob-test
SlurmctldHost=$CTLD_HOST($CTLD_ADDR)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCKET
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
PlugStackConfig=$DIR/plugstack.conf
MailProg=/bin/true
# No cgroups: processes are tracked by parentage, tasks are not bound to CPUs.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# Finished jobs stay in 'scontrol show job' for an hour (there is no slurmdbd for sacct).
MinJobAge=3600
# The nodes' CPU counts below are taken as declared, not as found.
SlurmdParameters=config_overrides
EOF
  for ((k = 0; k < NODES; k++)); do
    echo "NodeName=${names[k]} NodeAddr=${addrs[k]} CPUs=$CPUS RealMemory=1 State=UNKNOWN"
  done
  echo "PartitionName=tfjob Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} > "$DIR/slurm.conf"
echo "export SLURM_CONF=$DIR/slurm.conf" > "$DIR/slurm.env"
export SLURM_CONF=$DIR/slurm.conf

start() { # name cmd...
  local name=$1; shift
  nohup "$@" > "$DIR/log/$name.out" 2>&1 &
  echo "$name $!" >> "$DIR/pids"; STARTED=1
}
wait_for() { # name description command...
  local name=$1 what=$2 pid deadline=$(( $(date +%s) + TIMEOUT )); shift 2
  pid=$(awk -v n="$name" '$1==n {print $2}' "$DIR/pids")
  until "$@" >/dev/null 2>&1; do
    alive "$pid" || die "$name exited; last log lines:"$'\n'"$(tail -n 20 "$DIR/log/$name.out" "$DIR/log/$name.log" 2>/dev/null)"
    (( $(date +%s) < deadline )) || die "timed out after ${TIMEOUT}s waiting for $what; see $DIR/log/"
    sleep 0.2
  done
  echo "  $what after $(elapsed)"
}

echo "starting Slurm in $DIR (nodes ${names[*]}; slurmctld on $CTLD_HOST:$CTLD_PORT, slurmd :$SLURMD_PORT)"
start munged setpriv --reuid=munge --regid=munge --clear-groups "$MUNGED" --foreground --socket="$SOCKET" \
  --key-file="$DIR/munge/munge.key" --log-file="$DIR/log/munged.log" --pid-file="$DIR/munge/munged.pid" \
  --seed-file="$DIR/munge/munged.seed"
wait_for munged "munged answering on $SOCKET" test -S "$SOCKET"

start slurmctld slurmctld -D -i -f "$DIR/slurm.conf"
ctld_up() { [[ $(scontrol ping 2>/dev/null) == *" is UP"* ]]; }
wait_for slurmctld "slurmctld answering" ctld_up

for ((k = 0; k < NODES; k++)); do
  node=${names[k]}
  mkdir -p "$DIR/spool/$node"
  if (( NODES == 1 )); then
    start "slurmd-$node" slurmd -D -f "$DIR/slurm.conf" -N "$node"
  else
    # In the node's network namespace (nsenter: 'ip netns exec' would mount a
    # /sys without the cgroup file system that slurmd looks for), with its
    # hosts file over /etc/hosts in a mount namespace of its own. Each
    # program execs the next, so the recorded pid ends up slurmd's.
    # shellcheck disable=SC2016 # $1..$3 are the inner shell's arguments
    start "slurmd-$node" nsenter --net="/run/netns/${NET}n$((k + 1))" unshare --mount --propagation private \
      /bin/sh -c 'mount --bind "$1" /etc/hosts && exec slurmd -D -f "$2" -N "$3"' sh "$DIR/hosts" "$DIR/slurm.conf" "$node"
  fi
done
for node in "${names[@]}"; do
  node_idle() { [[ $(sinfo -h -n "$1" -o %t) == idle ]]; }
  wait_for "slurmd-$node" "node $node idle" node_idle "$node"
done

sleep 0.5; while read -r name pid; do alive "$pid" || die "$name (pid $pid) died during startup; see $DIR/log/"; done < "$DIR/pids"
echo "Slurm ready in $(elapsed); . $DIR/slurm.env"
