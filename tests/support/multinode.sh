#!/usr/bin/env bash
# multinode.sh: several real Kubernetes nodes on this one machine, for a
# control plane started by ../shared/envtest's start-control-plane.sh (with
# ENVTEST_APISERVER_EXTRA_ARGS=--kubelet-preferred-address-types=InternalIP,Hostname).
#
#   multinode.sh up CP_DIR N        start a scheduler and nodes 1..N; wait until all are Ready
#   multinode.sh load CP_DIR IMAGE  podman save IMAGE into every node's containerd
#   multinode.sh kill CP_DIR I      node I loses power: every process of it SIGKILLed at once
#   multinode.sh start CP_DIR I     node I boots again (same state: images, pods' logs)
#   multinode.sh partition CP_DIR I node I cut off (its link down): its processes run on, unreachable
#   multinode.sh heal CP_DIR I      node I's link up again
#   multinode.sh down CP_DIR        stop everything; leave nothing behind
#
# Layout. The envtest kit's node (../shared/envtest/node) is one per host:
# fixed bridge, subnet, port 10250. Here each node I is:
#   - a network namespace tfmn-nI joined to the host bridge tfmn0 by a veth
#     (node IP 10.250.0.(10+I), the host 10.250.0.1), its pods on their own
#     bridge k8s-cni0 in 10.244.I.0/24 (no masquerading: a pod's packets
#     leave with its pod IP), the host routing each node's pod subnet to it,
#     so pods on different nodes reach each other by pod IP;
#   - its own PID and mount namespaces (tests/support/multinode-node.sh is
#     their PID 1 and says why), with containerd, node-dns (cluster DNS on
#     its pods' gateway and the ClusterIP rules) and a kubelet
#     (--hostname-override tfmn-nI) from the kit's binaries;
#   - one kube-scheduler for all, on the host.
# The API server listens on 127.0.0.1 only: the host DNATs 10.250.0.1:PORT
# from the node links to it (route_localnet on tfmn0), and the nodes'
# kubeconfig names the server "localhost" for TLS (a name its certificate
# holds).
#
# Everything lives in CP_DIR/multinode; `down` removes the namespaces, links,
# routes, iptables chains (TFMN-*), processes and the folders it created
# under /var/lib and /run and the cgroups the containers made.
# Needs root and what the kit's node needs (scripts/setup.sh installs it).
set -euo pipefail
me=multinode.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kit=${TFJOB_ENVTEST:-$(cd "$here/../../.." && pwd)/shared/envtest}
bridge=tfmn0 host_ip=10.250.0.1

die() { echo "$me: $*" >&2; exit 1; }
usage() { sed -n '4,11p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2; exit 2; }
(($# >= 2)) || usage
cmd=$1 cp=$(cd "$2" 2> /dev/null && pwd) || die "no control-plane folder $2"
shift 2
state=$cp/multinode
kubectl=("${ENVTEST_BIN_DIR:-$cp/bin}/kubectl" --kubeconfig "$cp/admin.kubeconfig")
((EUID == 0)) || die "must run as root"

node_name() { echo "tfmn-n$1"; }
node_dir() { echo "$state/n$1"; }
# The host PID of node I's PID 1 (the namespaces' init), or nothing.
node_init() {
  local pid
  pid=$(cat "$(node_dir "$1")/init.pid" 2> /dev/null) || return 0
  [[ -d /proc/$pid && $(tr '\0' ' ' < "/proc/$pid/cmdline" 2> /dev/null) == *multinode-node.sh* ]] && echo "$pid"
  return 0
}
alive() { [[ -n $(node_init "$1") ]]; }

host_network_up() {
  local port=$1
  if ! ip link show "$bridge" > /dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add "$host_ip/24" dev "$bridge"
  fi
  ip link set "$bridge" up
  sysctl -qw "net.ipv4.conf.$bridge.route_localnet=1" net.ipv4.ip_forward=1
  iptables -w -t nat -N TFMN-PRE 2> /dev/null || iptables -w -t nat -F TFMN-PRE
  iptables -w -t nat -A TFMN-PRE -i "$bridge" -d "$host_ip" -p tcp --dport "$port" \
    -j DNAT --to-destination "127.0.0.1:$port"
  iptables -w -t nat -C PREROUTING -j TFMN-PRE 2> /dev/null || iptables -w -t nat -I PREROUTING -j TFMN-PRE
  # The nodes reach what the host reaches (node-dns forwards names outside
  # the cluster to the host's nameserver: unanswered, every lookup gRPC
  # makes for a task's service config waited 8 s), with the host's address.
  iptables -w -t nat -N TFMN-POST 2> /dev/null || iptables -w -t nat -F TFMN-POST
  iptables -w -t nat -A TFMN-POST -s 10.250.0.0/24 ! -d 10.250.0.0/24 ! -o lo -j MASQUERADE
  iptables -w -t nat -C POSTROUTING -j TFMN-POST 2> /dev/null || iptables -w -t nat -I POSTROUTING -j TFMN-POST
  # Forwarding between nodes, whatever policy another tool left on FORWARD.
  iptables -w -N TFMN-FWD 2> /dev/null || iptables -w -F TFMN-FWD
  iptables -w -A TFMN-FWD -i "$bridge" -j ACCEPT
  iptables -w -A TFMN-FWD -o "$bridge" -j ACCEPT
  iptables -w -C FORWARD -j TFMN-FWD 2> /dev/null || iptables -w -I FORWARD -j TFMN-FWD
}

# Writes node I's namespace, link, configuration; idempotent.
node_prepare() {
  local i=$1 dir ns ip port
  dir=$(node_dir "$i") ns=$(node_name "$i") ip=10.250.0.$((10 + i))
  port=$(awk -F= '$1=="KAS_PORT" {print $2}' "$cp/ports.env")
  mkdir -p "$dir"/{kubelet,kubelet-pki,cni/net.d,cni/ipam,containerd}
  if [[ ! -e /run/netns/$ns ]]; then
    ip netns add "$ns"
    ip link add "tfmn-v$i" type veth peer name eth0 netns "$ns"
    ip link set "tfmn-v$i" master "$bridge" up
    nsenter --net="/run/netns/$ns" sh -c "
      ip link set lo up && ip addr add $ip/24 dev eth0 && ip link set eth0 up &&
      ip route add default via $host_ip && sysctl -qw net.ipv4.ip_forward=1"
    ip route replace "10.244.$i.0/24" via "$ip" dev "$bridge"
  fi
  sed "s#server: \"https://127.0.0.1:$port\"#server: \"https://$host_ip:$port\", tls-server-name: localhost#" \
    "$cp/admin.kubeconfig" > "$dir/kubeconfig"
  grep -q tls-server-name "$dir/kubeconfig" || die "could not point $cp/admin.kubeconfig at $host_ip:$port"
  cat > "$dir/env" << EOF
NODE_NAME=$ns
NODE_IP=$ip
POD_GW=10.244.$i.1
KAS_ENDPOINT=$host_ip:$port
KUBECONFIG_FILE=$dir/kubeconfig
KIT_BIN=$state/bin
PAUSE_TAR=$state/pause.tar
EOF
  cat > "$dir/cni/net.d/10-tfmn.conflist" << EOF
{
  "cniVersion": "0.4.0",
  "name": "tfmn",
  "plugins": [
    {"type": "bridge", "bridge": "k8s-cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam", "routes": [{"dst": "0.0.0.0/0"}],
              "ranges": [[{"subnet": "10.244.$i.0/24", "gateway": "10.244.$i.1"}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
  cat > "$dir/containerd.toml" << EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:local"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
        Root = "$dir/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
EOF
  # As the kit's node (start-node.sh), but DNS on this node's pods' gateway.
  cat > "$dir/kubelet.yaml" << EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: [10.244.$i.1]
resolvConf: /etc/resolv.conf
evictionHard: {nodefs.available: "1%", imagefs.available: "1%", memory.available: "50Mi"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
EOF
}

# Boots node I: its namespaces' init, in the background.
node_boot() {
  local i=$1 dir ns
  dir=$(node_dir "$i") ns=$(node_name "$i")
  alive "$i" && return 0
  # unshare forks the init; its PID is the child of this unshare.
  setsid nsenter --net="/run/netns/$ns" unshare --mount --propagation slave --pid --fork --mount-proc \
    bash "$here/multinode-node.sh" "$dir" > "$dir/init.log" 2>&1 < /dev/null &
  local outer=$! pid=
  for _ in $(seq 1 50); do
    pid=$(pgrep -P "$outer" -f multinode-node.sh || true)
    [[ -n $pid ]] && break
    sleep 0.1
  done
  [[ -n $pid ]] || die "node $i's init did not start: $(tail -n 3 "$dir/init.log")"
  echo "$pid" > "$dir/init.pid"
}

node_ready() {
  [[ $("${kubectl[@]}" get node "$(node_name "$1")" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2> /dev/null) == True ]]
}
wait_ready() {  # I SECONDS
  local deadline=$((SECONDS + $2))
  until node_ready "$1"; do
    alive "$1" || die "node $1 stopped while starting; $(node_dir "$1")/*.log say why: $(tail -n 5 "$(node_dir "$1")/kubelet.log" 2> /dev/null)"
    ((SECONDS < deadline)) || die "node $1 was not Ready in $2 s; see $(node_dir "$1")/kubelet.log"
    sleep 0.5
  done
}

# Binaries and the pause image, from the kit, once per CP_DIR.
kit_parts() {
  mkdir -p "$state/bin"
  local b
  for b in kubelet kube-scheduler node-dns; do
    [[ -x $state/bin/$b ]] && continue
    xz -dc "$kit/node/bin/$b.xz" > "$state/bin/$b.tmp" && chmod +x "$state/bin/$b.tmp" && mv "$state/bin/$b.tmp" "$state/bin/$b"
  done
  [[ -f $state/pause.tar ]] && return 0
  # The kit's pause image, built as its start-node.sh builds it.
  local p=$state/pause diff cfg
  rm -rf "$p"
  mkdir -p "$p/img" "$p/root"
  gcc -static -Os -s -o "$p/root/pause" "$kit/node/pause/pause.c"
  tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$p/root" -cf "$p/img/layer.tar" pause
  diff=$(sha256sum < "$p/img/layer.tar")
  printf '{"architecture":"amd64","os":"linux","config":{"User":"65535:65535","Entrypoint":["/pause"],"Env":["PATH=/"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"envtest-node pause.c"}]}' \
    "${diff%% *}" > "$p/img/config.json"
  cfg=$(sha256sum < "$p/img/config.json")
  cfg=${cfg%% *}
  mv "$p/img/config.json" "$p/img/$cfg.json"
  printf '[{"Config":"%s.json","RepoTags":["localhost/pause:local"],"Layers":["layer.tar"]}]' "$cfg" > "$p/img/manifest.json"
  tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$p/img" -cf "$state/pause.tar" manifest.json "$cfg.json" layer.tar
  rm -rf "$p"
}

# What exists before `up`, so that `down` removes only what appeared since.
record_host() {
  [[ -f $state/host-before ]] && return 0
  local d
  for d in /var/lib/kubelet /var/lib/cni /run/containerd /sys/fs/cgroup/*/k8s.io; do
    if [[ -e $d ]]; then echo "$d"; fi
  done > "$state/host-before"
  ls /run/netns 2> /dev/null > "$state/netns-before" || true
}

up() {
  local n=${1:-2} i port t0=$SECONDS
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 9)) || die "N must be 1 to 9, not '$n'"
  [[ -f $cp/ports.env && -f $cp/admin.kubeconfig ]] || die "$cp is not a control plane started by the envtest kit"
  "${kubectl[@]}" get --raw /readyz --request-timeout=5s > /dev/null 2>&1 || die "the API server of $cp is not ready"
  port=$(awk -F= '$1=="KAS_PORT" {print $2}' "$cp/ports.env")
  mkdir -p "$state"
  record_host
  kit_parts
  host_network_up "$port"
  if [[ ! -f $state/scheduler.pid ]] || ! kill -0 "$(cat "$state/scheduler.pid")" 2> /dev/null; then
    setsid "$state/bin/kube-scheduler" --kubeconfig="$cp/admin.kubeconfig" \
      --authentication-kubeconfig="$cp/admin.kubeconfig" --authorization-kubeconfig="$cp/admin.kubeconfig" \
      --leader-elect=false --secure-port=0 > "$state/kube-scheduler.log" 2>&1 < /dev/null &
    echo $! > "$state/scheduler.pid"
  fi
  for i in $(seq 1 "$n"); do
    alive "$i" && continue
    node_prepare "$i"
    # A Node left by an earlier run would say Ready until the node monitor
    # noticed; the kubelet registers afresh.
    "${kubectl[@]}" delete node "$(node_name "$i")" --ignore-not-found --wait=true > /dev/null
    node_boot "$i"
  done
  for i in $(seq 1 "$n"); do wait_ready "$i" 90; done
  echo "$n nodes Ready in $((SECONDS - t0)) s: $(for i in $(seq 1 "$n"); do echo -n "$(node_name "$i") (10.250.0.$((10 + i)), pods 10.244.$i.0/24) "; done)"
}

# Power loss: SIGKILL to the init of the node's PID namespace ends every
# process in it at once (kubelet, containerd, node-dns, shims, containers).
kill_node() {
  local i=$1 pid
  pid=$(node_init "$i")
  [[ -n $pid ]] || die "node $i is not running"
  kill -KILL "$pid"
  for _ in $(seq 1 100); do
    [[ -d /proc/$pid ]] || break
    sleep 0.1
  done
  echo "node $i ($(node_name "$i")) killed: init $pid and every process of its namespaces"
}

start_node() {
  local i=$1 t0=$SECONDS
  [[ -d $(node_dir "$i") ]] || die "node $i was never started (use up)"
  alive "$i" && die "node $i is running"
  node_prepare "$i"
  node_boot "$i"
  wait_ready "$i" 90
  echo "node $i ($(node_name "$i")) Ready again in $((SECONDS - t0)) s"
}

# A partition: the host's end of node I's link down, so the node reaches
# neither the API server nor the other nodes, and nothing of it stops.
link_node() {  # I up|down
  [[ -e /run/netns/$(node_name "$1") ]] || die "node $1 was never started (use up)"
  ip link set "tfmn-v$1" "$2"
  echo "node $1 ($(node_name "$1")) link $2"
}

load() {
  local image=$1 tar=$state/image.tar dir ok=0
  podman save "$image" -o "$tar" > /dev/null || die "podman save $image failed"
  for dir in "$state"/n*/; do
    ctr -a "$dir/containerd.sock" -n k8s.io images import "$tar" > /dev/null || { rm -f "$tar"; die "ctr import into ${dir%/} failed"; }
    ok=$((ok + 1))
  done
  rm -f "$tar"
  echo "$image loaded into $ok nodes"
}

down() {
  [[ -d $state ]] || return 0
  local dir i pid
  # Pods first, while the kubelets run, so they tear down what they set up.
  if "${kubectl[@]}" get --raw /readyz --request-timeout=5s > /dev/null 2>&1; then
    "${kubectl[@]}" delete pods --all -A --grace-period=0 --force --wait=false > /dev/null 2>&1 || true
    "${kubectl[@]}" delete nodes $(for dir in "$state"/n*/; do [[ -f $dir/env ]] && awk -F= '$1=="NODE_NAME" {print $2}' "$dir/env"; done) \
      --ignore-not-found --wait=false > /dev/null 2>&1 || true
  fi
  for dir in "$state"/n*/; do
    [[ -d $dir ]] || continue
    i=${dir%/}
    i=${i##*/n}
    pid=$(node_init "$i")
    [[ -n $pid ]] && kill -KILL "$pid" 2> /dev/null
    for _ in $(seq 1 100); do
      [[ -z $pid || ! -d /proc/$pid ]] && break
      sleep 0.1
    done
    # containerd's shims outlive nothing here (PID namespace), but umount
    # what a half-dead node may have left in the host namespace.
    ip netns del "$(node_name "$i")" 2> /dev/null || true
    ip link del "tfmn-v$i" > /dev/null 2>&1 || true
    ip route del "10.244.$i.0/24" 2> /dev/null || true
  done
  if [[ -f $state/scheduler.pid ]]; then
    pid=$(cat "$state/scheduler.pid")
    if [[ $(tr '\0' ' ' < "/proc/$pid/cmdline" 2> /dev/null) == *kube-scheduler* ]]; then
      kill "$pid" 2> /dev/null
      for _ in $(seq 1 100); do  # until it is gone and reaped
        [[ -d /proc/$pid ]] || break
        sleep 0.1
      done
    fi
    rm -f "$state/scheduler.pid"
  fi
  ip link del "$bridge" 2> /dev/null || true
  iptables -w -t nat -D PREROUTING -j TFMN-PRE 2> /dev/null || true
  iptables -w -t nat -F TFMN-PRE 2> /dev/null && iptables -w -t nat -X TFMN-PRE 2> /dev/null || true
  iptables -w -t nat -D POSTROUTING -j TFMN-POST 2> /dev/null || true
  iptables -w -t nat -F TFMN-POST 2> /dev/null && iptables -w -t nat -X TFMN-POST 2> /dev/null || true
  iptables -w -D FORWARD -j TFMN-FWD 2> /dev/null || true
  iptables -w -F TFMN-FWD 2> /dev/null && iptables -w -X TFMN-FWD 2> /dev/null || true
  # containerd names each pod's network namespace in /run/netns; the mount
  # was the node's, but the file it was mounted on is the host's.
  local f
  for f in /run/netns/cni-*; do
    [[ -e $f ]] || continue
    grep -qxF "${f##*/}" "$state/netns-before" 2> /dev/null && continue
    umount "$f" 2> /dev/null || true
    rm -f "$f"
  done
  # Folders the nodes made at fixed paths (their contents were in the nodes'
  # own mounts), and the containers' cgroups, when they were not there before.
  local d
  for d in /var/lib/kubelet /var/lib/cni /run/containerd /sys/fs/cgroup/*/k8s.io; do
    [[ -e $d ]] || continue
    grep -qxF "$d" "$state/host-before" 2> /dev/null && continue
    if [[ $d == /sys/fs/cgroup/* ]]; then
      find "$d" -depth -type d -exec rmdir {} + 2> /dev/null || true
    else
      rmdir "$d" 2> /dev/null || true
    fi
  done
  # The nodes' overlay and tmpfs mounts went with their mount namespaces;
  # what remains under the state folder is plain files.
  rm -rf "$state"
  echo "nodes stopped; namespaces, links, routes, iptables chains TFMN-* and folders removed"
}

case $cmd in
  up) up "$@" ;;
  load) (($# == 1)) || usage; load "$1" ;;
  kill) (($# == 1)) || usage; kill_node "$1" ;;
  start) (($# == 1)) || usage; start_node "$1" ;;
  partition) (($# == 1)) || usage; link_node "$1" down ;;
  heal) (($# == 1)) || usage; link_node "$1" up ;;
  down) down ;;
  *) usage ;;
esac
