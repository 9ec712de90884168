# Sourced by scripts/images.sh and tests/images/smoke.sh: podman as they run
# it, and the project's version (the images' tag).
#
# podman reads scripts/podman/containers.conf (through CONTAINERS_CONF, so the
# host's own configuration is neither read nor changed) and runs containers
# with runc: on these machines crun fails ("cgroups in hybrid mode not
# supported") and podman's default ulimits exceed the hard limits. Set
# CONTAINERS_CONF yourself to use another file.
# Needs: the caller has cd'd to the repository root and set `me` (its name,
# for messages).

export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/scripts/podman/containers.conf}

pm() { podman --runtime runc "$@"; }

# Fails with one line when podman is missing or cannot run here.
require_podman() {
  if ! command -v podman >/dev/null; then
    echo "$me: podman is not installed (bash scripts/setup.sh installs podman, runc and debootstrap)" >&2
    exit 1
  fi
  if ! command -v runc >/dev/null; then
    echo "$me: runc is not installed (bash scripts/setup.sh installs it)" >&2
    exit 1
  fi
  local out
  if ! out=$(pm info --format '{{.Host.OCIRuntime.Name}}' 2>&1); then
    echo "$me: podman does not work here (podman info: ${out%%$'\n'*})" >&2
    exit 1
  fi
}

# The project's version (CMakeLists.txt's project VERSION), the images' tag.
project_version() {
  local v
  v=$(sed -n 's/^project(tfjob .*VERSION \([0-9][0-9.]*\)).*/\1/p' CMakeLists.txt)
  if [[ -z $v ]]; then
    echo "$me: no 'project(tfjob ... VERSION X.Y.Z)' in CMakeLists.txt" >&2
    exit 1
  fi
  echo "$v"
}
