#!/usr/bin/env bash
# stop-slurm.sh DIR
# Stops the Slurm that start-slurm.sh DIR started: cancels its jobs, stops
# exactly the processes recorded in DIR/pids (newest first: SIGTERM, then
# SIGKILL after 10 s; a pid is only signalled while its command line still
# names the recorded program, against pid reuse), then removes the nodes'
# network namespaces and bridge, if it made any. State and logs in DIR are
# kept.
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
DIR=$1
PIDS=$DIR/pids

alive() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; [[ ${s%% *} != Z ]]; }
ours() { alive "$1" && tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -q -- "$2"; }

rc=0
if [[ -f $PIDS ]]; then
  # A job still running would leave its slurmstepd and tasks behind once
  # slurmd is gone: cancel them while slurmctld and slurmd are up, and wait
  # (up to 30 s) until none is left.
  ctld=$(awk '$1=="slurmctld" {print $2}' "$PIDS")
  if [[ -n $ctld ]] && ours "$ctld" slurmctld && [[ -f $DIR/slurm.conf ]]; then
    export SLURM_CONF=$DIR/slurm.conf
    jobs=$(squeue -h -o %i 2>/dev/null || true)
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      for _ in $(seq 300); do [[ -z $(squeue -h -o %i 2>/dev/null || true) ]] && break; sleep 0.1; done
      left=$(squeue -h -o %i 2>/dev/null || true)
      echo "  cancelled job(s) ${jobs//$'\n'/ }${left:+; still there: ${left//$'\n'/ }}"
    fi
  fi

  while read -r name pid; do
    [[ -n ${pid:-} ]] || continue
    program=${name%%-*}  # slurmd-NODE: slurmd
    if ! ours "$pid" "$program"; then echo "  $name (pid $pid): not running"; continue; fi
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      echo "  $name (pid $pid): did not exit after SIGTERM, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      alive "$pid" && { echo "  $name (pid $pid): still alive!" >&2; rc=1; continue; }
    fi
    echo "  $name (pid $pid): stopped"
  done < <(tac "$PIDS")
  (( rc == 0 )) && rm -f "$PIDS"
fi

# The nodes' network (start-slurm.sh --nodes N, N >= 2). Deleting a
# namespace deletes its end of the veth pair, and with it the bridge's end.
if [[ -f $DIR/net.env ]]; then
  NET='' NODES=0
  # shellcheck source=/dev/null
  . "$DIR/net.env"
  namespaces=" $(ip netns list | awk '{print $1}' | tr '\n' ' ')"
  for ((k = 1; k <= NODES; k++)); do
    if [[ $namespaces == *" ${NET}n$k "* ]]; then ip netns delete "${NET}n$k" || rc=1; fi
  done
  if ip link show "${NET}br" >/dev/null 2>&1; then ip link delete "${NET}br" || rc=1; fi
  (( rc == 0 )) && rm -f "$DIR/net.env" && echo "  network $NET: removed"
fi
exit "$rc"
