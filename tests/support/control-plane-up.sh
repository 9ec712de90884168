#!/usr/bin/env bash
# control-plane-up.sh KIT DIR
# Runs KIT/start-control-plane.sh DIR (the envtest kit), on ports that no
# outgoing connection can hold, and again on new ports when a bind fails.
#
# Why: the kit picks its ports at random from 20000-59999 and checks only
# that nothing answers on them. Most of that range is the kernel's ephemeral
# range (32768-60999 by default), so a port can be some connection's local
# port by the time etcd binds it: "bind: address already in use" (CI, stop
# 41). Here the ports come from below the ephemeral range, written to
# DIR/ports.env (unless DIR has one), which the kit reuses when free; and a bind
# failure is retried (3 attempts) after the kit has stopped what it started.
# Other failures are not retried. Output is the kit's; exit status is its
# last attempt's, with its stderr on stdout. Env passes through (ETCD, ENVTEST_BIN_DIR, ...).
set -uo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 KIT DIR" >&2; exit 2; }
kit=$1 dir=$2
mkdir -p "$dir"

read -r ephemeral_low _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || ephemeral_low=32768
low=20000 high=$((ephemeral_low - 1))
used=" "
port_free() { [[ $used != *" $1 "* ]] && ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick() {
  local p
  for _ in {1..200}; do
    p=$((low + RANDOM % (high - low + 1)))
    if port_free "$p"; then used+="$p "; echo "$p"; return 0; fi
  done
  return 1
}
seed_ports() {
  # Too narrow a range below the ephemeral one: leave the choice to the kit.
  ((high - low >= 1000)) || return 0
  local etcd peer kas
  etcd=$(pick) && peer=$(pick) && kas=$(pick) || return 0
  printf 'ETCD_PORT=%s\nPEER_PORT=%s\nKAS_PORT=%s\n' "$etcd" "$peer" "$kas" > "$dir/ports.env"
}

log=$(mktemp "${TMPDIR:-/tmp}/control-plane-up.XXXXXX")
trap 'rm -f "$log"' EXIT
rc=1
for attempt in 1 2 3; do
  [[ -f $dir/pids || -f $dir/ports.env ]] || seed_ports
  bash "$kit/start-control-plane.sh" "$dir" > "$log" 2>&1
  rc=$?
  cat "$log"
  ((rc == 0)) && exit 0
  grep -q 'address already in use' "$log" || exit "$rc"
  echo "control-plane-up: attempt $attempt: a port was taken; starting again on new ports"
  # The kit stops what it started when it fails; what etcd wrote is dropped.
  bash "$kit/stop-control-plane.sh" "$dir" > /dev/null 2>&1 || true
  rm -rf "$dir/etcd" "$dir/ports.env"
done
exit "$rc"
