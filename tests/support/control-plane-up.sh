#!/usr/bin/env bash
# control-plane-up.sh KIT DIR
# Runs KIT/start-control-plane.sh DIR (the envtest kit), on ports that no
# outgoing connection can hold, and again on new ports when a bind fails.
#
# Why: the kit picks its ports at random from 20000-59999, most of which is
# the kernel's ephemeral range (ports.sh says why that fails). Here they come
# from ports.sh, written to DIR/ports.env (unless DIR has one), which the kit
# reuses when free; and a bind failure is retried (3 attempts) after the kit
# has stopped what it started. Other failures are not retried. Output is the
# kit's, its stderr on stdout; exit status is its last attempt's. Env passes
# through (ETCD, ENVTEST_BIN_DIR, ...).
set -uo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 KIT DIR" >&2; exit 2; }
kit=$1 dir=$2
mkdir -p "$dir"

# shellcheck source=tests/support/ports.sh
source "$(dirname "${BASH_SOURCE[0]}")/ports.sh"
seed_ports() {
  local etcd peer kas
  random_free_port etcd && random_free_port peer && random_free_port kas || return 0  # left to the kit
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
