# shellcheck shell=bash
# Sourced (bash): free loopback ports for the test clusters' daemons.
# random_free_port VAR sets VAR to a port that nothing answers on, from
# 20000 up to just below the kernel's ephemeral range: a port inside that
# range can become some outgoing connection's local port before the daemon
# binds it ("bind: address already in use", CI stop 41). Ports handed out
# are remembered in PORTS_USED, so one caller never gets the same one twice.
# Returns 1 after 200 tries without a free one.
read -r PORTS_EPHEMERAL_LOW _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || PORTS_EPHEMERAL_LOW=32768
# A range below it too narrow to pick from (an unusual setting): 20000-59999.
PORTS_SPAN=$((PORTS_EPHEMERAL_LOW > 21000 ? PORTS_EPHEMERAL_LOW - 20000 : 40000))
PORTS_USED=" "
port_free() { [[ $PORTS_USED != *" $1 "* ]] && ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
random_free_port() {
  local _port
  for _ in {1..200}; do
    _port=$((20000 + RANDOM % PORTS_SPAN))
    if port_free "$_port"; then PORTS_USED+="$_port "; printf -v "$1" %s "$_port"; return 0; fi
  done
  return 1
}
