#!/usr/bin/env bash
# multinode-node.sh NODE_DIR: one node of tests/support/multinode.sh, run as
# PID 1 of the node's own PID and mount namespaces inside its network
# namespace (multinode.sh enters them; do not run this by hand).
#
# Why namespaces: the kubelet keeps state at fixed host paths
# (/var/lib/kubelet/device-plugins, whose files every kubelet deletes at
# start) and garbage-collects /var/log/pods entries of pods it does not know,
# so two kubelets sharing a mount namespace would delete each other's socket
# and pod logs. Here those paths are this node's own folders, bind-mounted in
# a mount namespace that is a slave of the host's (host mounts still appear;
# the node's container and volume mounts stay in it). Being PID 1, this
# script's death takes every process of the node with it, containers
# included: a SIGKILL to it is the node losing power.
#
# NODE_DIR/env (written by multinode.sh) holds NODE_NAME, NODE_IP, POD_CIDR,
# POD_GW, KAS_ENDPOINT, KUBECONFIG_FILE, KIT_BIN (decompressed kubelet,
# node-dns) and PAUSE_TAR. Logs: NODE_DIR/{containerd,node-dns,kubelet}.log.
set -euo pipefail
node=$1
# shellcheck source=/dev/null
source "$node/env"

for path in /var/log /var/lib/kubelet /var/lib/cni /run/containerd; do
  own=$node/fs${path//\//_}
  mkdir -p "$own" "$path"
  mount --bind "$own" "$path"
done
mkdir -p /var/log/pods /var/log/containers

# The pods' bridge: made here so node-dns can listen on the gateway before the
# first pod; the CNI bridge plugin adopts it.
ip link show k8s-cni0 > /dev/null 2>&1 || {
  ip link add k8s-cni0 type bridge
  ip addr add "$POD_GW/24" dev k8s-cni0
}
ip link set k8s-cni0 up
# node-dns maps kubernetes.default to KAS_ENDPOINT (the host's side of the
# node link, DNATed there to the loopback API server).
sysctl -qw net.ipv4.conf.k8s-cni0.route_localnet=1

pids=()
start() {  # NAME COMMAND...: a node process, its output in NAME.log
  local name=$1
  shift
  "$@" >> "$node/$name.log" 2>&1 &
  pids+=($!)
}
sock=$node/containerd.sock
start containerd containerd --config "$node/containerd.toml"
for _ in $(seq 1 150); do
  ctr -a "$sock" version > /dev/null 2>&1 && break
  sleep 0.2
done
ctr -a "$sock" -n k8s.io images ls -q | grep -qx localhost/pause:local \
  || ctr -a "$sock" -n k8s.io images import "$PAUSE_TAR" > /dev/null
start node-dns "$KIT_BIN/node-dns" --kubeconfig="$KUBECONFIG_FILE" --listen="$POD_GW:53" --proxy \
  --kubernetes-endpoint="$KAS_ENDPOINT"
start kubelet "$KIT_BIN/kubelet" --config="$node/kubelet.yaml" --kubeconfig="$KUBECONFIG_FILE" \
  --container-runtime-endpoint="unix://$sock" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
  --root-dir="$node/kubelet" --cert-dir="$node/kubelet-pki" --pod-infra-container-image=localhost/pause:local \
  --v=2
echo "started: containerd, node-dns, kubelet (pids in the node's namespace: ${pids[*]})" >> "$node/init.log"
# PID 1 reaps the orphans the node leaves (containerd's shims re-parent here);
# when any of the three exits, the node is down: exiting ends the rest.
while true; do
  wait -n || true
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2> /dev/null || {
      echo "process $pid exited; the node stops" >> "$node/init.log"
      exit 1
    }
  done
done
