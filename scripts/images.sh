#!/usr/bin/env bash
# Builds the images with podman and prints each one's size (docs/install.md):
#   tfjob/operator:V  tfjob/runtime-cpu:V  tfjob/runtime-gpu:V
# V is the project's version (CMakeLists.txt). No registry is needed: the base
# image, debian:bookworm (also tagged debian:bookworm-slim), is made here from
# Debian's archive with `debootstrap --variant=minbase`, once; it is kept while
# `podman image exists` finds it.
#
# usage: scripts/images.sh [--portable | --from-source] [IMAGE...]
#        scripts/images.sh --base
#   --base         only the base image (CI makes it in the background while
#                  scripts/test.sh builds: debootstrap waits on the network,
#                  the build on the CPUs)
#   IMAGE          operator, runtime-cpu or runtime-gpu. Named, each is built
#                  or the run fails. By default: what this machine can build,
#                  operator and runtime-cpu, and runtime-gpu where CMake
#                  found the CUDA toolkit (said and skipped where not)
#   (no option)    from the binaries of build/ (as scripts/test.sh configures
#                  it; $TFJOB_BUILD_DIR names another), built incrementally
#                  first: docker/IMAGE.prebuilt.Dockerfile over a context
#                  staged in BUILD/images/context. build/ is compiled with
#                  -march=native, so these images run on CPUs like this one:
#                  right for testing here, not for distribution.
#   --portable     the same from a -DTFJOB_NATIVE=OFF build in build/portable
#                  (any x86-64 node)
#   --from-source  docker/IMAGE.Dockerfile with the repository as context,
#                  compiling inside the image build, as `docker build` does
#                  (runtime-gpu then needs NVIDIA's nvidia/cuda images from a
#                  registry)
#
# The GPU image carries the CUDA libraries tfjob-runtime loads (cudart, and
# cuBLAS, cuBLASLt and NCCL, which it opens when a task uses a GPU), copied
# from the CUDA toolkit that compiled it;
# the NVIDIA driver's libcuda comes from the node (NVIDIA's container toolkit).
# Environment: DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR (the base image's apt
# sources; deb.debian.org by default), TFJOB_BUILD_DIR, CONTAINERS_CONF, and
# TFJOB_IMAGES_NO_BUILD=1: use the binaries as built, without running ninja
# (CI makes the images while scripts/test.sh's tests run on the same build
# directory, where a second ninja must not run); a missing one is an error.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
me=images.sh
# shellcheck source=podman/env.sh
source scripts/podman/env.sh

usage="usage: scripts/images.sh [--portable | --from-source] [operator] [runtime-cpu] [runtime-gpu] | --base"
mode=prebuilt
base_only=0
images=()
while (($#)); do
  case "$1" in
    --portable | --from-source)
      if [[ $mode != prebuilt ]]; then
        echo "$me: --portable and --from-source exclude each other ($usage)" >&2
        exit 2
      fi
      mode=${1#--}
      ;;
    --base) base_only=1 ;;
    operator | runtime-cpu | runtime-gpu) images+=("$1") ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "$me: unknown argument '$1' ($usage)" >&2; exit 2 ;;
  esac
  shift
done
# asked: the images named on the command line, which must all be built.
asked=${#images[@]}
((asked)) || images=(operator runtime-cpu runtime-gpu)

require_podman
version=$(project_version)
base=debian:bookworm
work=$(mktemp -d "${TMPDIR:-/var/tmp}/tfjob-images.XXXXXX")
cleanup() {
  # debootstrap mounts /proc and /sys in the root it makes; a failed run can
  # leave them there. Unmount before removing, and never cross into a mount.
  local m
  while read -r m; do
    [[ -n $m && $m != "$work" ]] && umount -l "$m" 2>/dev/null || true
  done < <(findmnt -R -n -l -o TARGET --target "$work" 2>/dev/null | grep -F "$work/" | sort -r || true)
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # so that cleanup runs then too

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# ---- the base image: Debian bookworm from Debian's archive ---------------
make_base_image() {
  if pm image exists "$base" && pm image exists "$base-slim"; then
    echo "$me: base image $base (made earlier; 'podman rmi $base $base-slim' makes it anew)"
    return
  fi
  if ! command -v debootstrap >/dev/null; then
    echo "$me: debootstrap is not installed (bash scripts/setup.sh installs it)" >&2
    exit 1
  fi
  local mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  local security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
  local root=$work/rootfs start=$SECONDS
  echo "$me: making $base: debootstrap --variant=minbase bookworm from $mirror"
  if ! debootstrap --variant=minbase bookworm "$root" "$mirror" > "$work/debootstrap.log" 2>&1; then
    echo "$me: debootstrap failed; the end of its log:" >&2
    tail -n 5 "$work/debootstrap.log" >&2
    exit 1
  fi
  # apt sources as Debian's own images have them: the release, its updates
  # and security updates (the runtime libraries get their fixes).
  rm -f "$root/etc/apt/sources.list"
  cat > "$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # Slim as Debian's -slim images: no documentation, manuals or translations
  # (now or from later installs), no package lists or downloaded packages.
  cat > "$root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  cat > "$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
Acquire::Languages "none";
Binary::apt::APT::Keep-Downloaded-Packages "false";
EOF
  find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/{man,groff,info,lintian,linda}/* "$root"/var/lib/apt/lists/* \
    "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
  tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -C "$root" -c . \
    | pm import --quiet --change 'CMD ["bash"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$base" > /dev/null
  pm tag "$base" "$base-slim"
  echo "$me: made $base and $base-slim ($(mib "$(pm image inspect --format '{{.Size}}' "$base")")) in $((SECONDS - start)) s"
}

# ---- the binaries, and the context of the prebuilt Dockerfiles ------------
build=
stage_context() {
  local flags=()
  if [[ $mode == portable ]]; then
    build=${TFJOB_BUILD_DIR:-build/portable}
    flags=(-DTFJOB_NATIVE=OFF)
  else
    build=${TFJOB_BUILD_DIR:-build}
  fi
  [[ -z ${TFJOB_BUILD_DIR:-} || $build == /* ]] || build=$caller/$build
  [[ -f $build/build.ninja ]] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${flags[@]}"
  local cache=$build/CMakeCache.txt
  if [[ $(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache") != Release ]]; then
    echo "$me: $build is not a Release build; the images are made from one" >&2
    exit 1
  fi
  local native
  native=$(sed -n 's/^TFJOB_NATIVE:BOOL=//p' "$cache")
  if [[ $mode == portable && $native != OFF ]]; then
    echo "$me: --portable: $build was configured with TFJOB_NATIVE=$native; it needs -DTFJOB_NATIVE=OFF" >&2
    exit 1
  fi
  [[ $native == OFF ]] || echo "$me: note: $build is compiled with -march=native: these images run on CPUs like this machine's (--portable: any x86-64)"

  local targets=() img
  for img in "${images[@]}"; do
    case $img in
      operator) targets+=(tfjob-operator) ;;
      runtime-cpu) targets+=(tfjob-runtime-cpu tfjob custom_training_loop) ;;
      runtime-gpu) targets+=(tfjob-runtime tfjob custom_training_loop) ;;
    esac
  done
  if [[ " ${images[*]} " == *" runtime-gpu "* ]]; then
    # The GPU library's target, read from build.ninja rather than asked of
    # ninja, so that nothing runs ninja under TFJOB_IMAGES_NO_BUILD.
    if ! grep -q '^build tfjob_gpu:' "$build/build.ninja"; then
      local why="CMake did not find the CUDA toolkit in $build (no tfjob_gpu target; see 'tfjob: CUDA support' in its configure output)"
      [[ $(sed -n 's/^TFJOB_CUDA:BOOL=//p' "$cache") == OFF ]] && why="$build is configured with -DTFJOB_CUDA=OFF (no GPU code)"
      if ((asked)); then
        echo "$me: runtime-gpu: $why" >&2
        exit 1
      fi
      echo "$me: skipping runtime-gpu: $why; operator and runtime-cpu are built"
      images=(operator runtime-cpu)
      targets=(tfjob-operator tfjob-runtime-cpu tfjob custom_training_loop)
    fi
  fi
  # Once each (both runtime images need tfjob and custom_training_loop).
  mapfile -t targets < <(printf '%s\n' "${targets[@]}" | sort -u)
  local t
  if [[ ${TFJOB_IMAGES_NO_BUILD:-0} == 1 ]]; then
    for t in "${targets[@]}"; do
      [[ -x $build/bin/$t ]] || { echo "$me: TFJOB_IMAGES_NO_BUILD=1 but $build/bin/$t is not built" >&2; exit 1; }
    done
  else
    cmake --build "$build" --target "${targets[@]}"
  fi

  # Laid out as the repository is (build/bin/..., examples/, docker/...), so
  # the prebuilt Dockerfiles name the same paths; cuda/ is the GPU image's.
  ctx=$build/images/context
  rm -rf "$ctx"
  mkdir -p "$ctx/build/bin" "$ctx/docker" "$ctx/cuda"
  for t in "${targets[@]}"; do
    strip --strip-unneeded -o "$ctx/build/bin/$t" "$build/bin/$t"
  done
  cp -r examples "$ctx/examples"
  cp -p docker/runtime-entrypoint.sh "$ctx/docker/"
  for t in "${targets[@]}"; do
    stage_libraries "$t"
  done
}

# Every shared library a binary loads comes from a Debian package (installed
# by apt in the Dockerfile) or, for tfjob-runtime with CUDA, from the CUDA
# toolkit that compiled it: those are copied into cuda/. Anything else is an
# error, since the image could not load it.
# usr_twin /lib/x/y -> /usr/lib/x/y and back: with merged /usr, dpkg knows a
# library under one of the two names, ldd may print the other.
usr_twin() {
  case $1 in
    /usr/*) echo "${1#/usr}" ;;
    *) echo "/usr$1" ;;
  esac
}
stage_libraries() {
  local binary=$1 name arrow path rest real file
  local -A path_of=()
  local cuda=
  [[ $binary == tfjob-runtime ]] && cuda=$(cuda_toolkit_root)
  local files=("$build/bin/$binary")
  # tfjob-runtime opens cuBLAS and NCCL on first use (common/
  # shared_library.h), so ldd does not list them: they are the sonames the
  # binary names, found where CMake found them, with what they load.
  if [[ -n $cuda ]]; then
    local soname dir
    for soname in $(grep -aoE 'lib(cublas|nccl)\.so\.[0-9]+' "$build/bin/$binary" | sort -u); do
      path=
      for dir in $(sed -n 's/^\(CUDA_cublas_LIBRARY\|TFJOB_NCCL_LIBRARY\):FILEPATH=\(.*\)\/[^/]*$/\2/p' "$build/CMakeCache.txt"); do
        [[ -e $dir/$soname ]] && path=$dir/$soname && break
      done
      if [[ -z $path ]]; then
        echo "$me: $build/bin/$binary opens $soname, which is not beside the cuBLAS or NCCL CMake found" >&2
        exit 1
      fi
      path_of[$soname]=$path
      files+=("$path")
    done
  fi
  for file in "${files[@]}"; do
    while read -r name arrow path rest; do
      [[ $arrow == "=>" ]] || continue
      if [[ $path == not ]]; then
        echo "$me: $file: ldd finds no $name here" >&2
        exit 1
      fi
      path_of[$name]=$path
    done < <(ldd "$file")
  done
  # One dpkg -S for all of them (it reads its database once per call): the
  # paths it names are the ones a package owns.
  local candidates=() owned
  for name in "${!path_of[@]}"; do
    path=${path_of[$name]}
    candidates+=("$path" "$(usr_twin "$path")" "$(readlink -f "$path")")
  done
  # (Lines are "pkg[:arch][, pkg...]: /path"; the path holds no ": ".)
  owned=$(dpkg -S "${candidates[@]}" 2> /dev/null | sed -n 's|^.*: \(/.*\)$|\1|p' | sort -u) || true
  local -A is_owned=()
  while read -r path; do
    [[ -n $path ]] && is_owned[$path]=1
  done <<< "$owned"
  for name in "${!path_of[@]}"; do
    path=${path_of[$name]}
    real=$(readlink -f "$path")
    [[ -n ${is_owned[$path]:-} || -n ${is_owned[$(usr_twin "$path")]:-} || -n ${is_owned[$real]:-} ]] && continue
    if [[ -n $cuda && $real == "$cuda"/* ]]; then
      cp "$real" "$ctx/cuda/$name"
      continue
    fi
    echo "$me: $build/bin/$binary loads $name from $real, which neither a Debian package nor the CUDA toolkit provides" >&2
    exit 1
  done
}
# The toolkit CMake compiled with (its nvcc's folder, links resolved); ""
# in a build without CUDA.
cuda_toolkit_root() {
  local nvcc
  nvcc=$(sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")$/\1/p' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake 2> /dev/null | head -n 1) || true
  [[ -z $nvcc ]] || dirname "$(dirname "$(readlink -f "$nvcc")")"
}
cuda_version() {
  sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\([0-9]*\.[0-9]*\).*")$/\1/p' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake | head -n 1
}

# ---- the images ------------------------------------------------------------
build_image() {
  local img=$1 ref=tfjob/$1:$version start=$SECONDS log dockerfile context args=()
  log=$work/$img.log
  if [[ $mode == from-source ]]; then
    dockerfile=docker/$img.Dockerfile
    context=.
  else
    dockerfile=docker/$img.prebuilt.Dockerfile
    context=$ctx
    if [[ $img == runtime-gpu ]]; then
      local v
      v=$(cuda_version)
      [[ -n $v ]] || { echo "$me: runtime-gpu: no CUDA compiler version in $build/CMakeFiles" >&2; exit 1; }
      args=(--build-arg "CUDA_VERSION=$v")
    fi
  fi
  echo "$me: building $ref from $dockerfile"
  # --network host: the RUN steps reach Debian's archive through the
  # host's network. --pull=never for our own base image: no registry here.
  local pull=(--pull=never)
  [[ $mode == from-source && $img == runtime-gpu ]] && pull=()
  if ! pm build --network host "${pull[@]}" "${args[@]}" -f "$dockerfile" -t "$ref" "$context" > "$log" 2>&1; then
    echo "$me: podman build of $ref failed; the end of its log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  echo "$me: built $ref in $((SECONDS - start)) s"
}

make_base_image
((base_only)) && exit 0
ctx=
[[ $mode == from-source ]] || stage_context
if [[ -d ${ctx:-} && -n $(ls -A "$ctx/cuda") ]]; then
  echo "$me: runtime-gpu carries from $(cuda_toolkit_root): $(cd "$ctx/cuda" && ls | tr '\n' ' ')($(mib "$(du -sb "$ctx/cuda" | cut -f1)"))"
fi
for img in "${images[@]}"; do
  build_image "$img"
done
echo "== images =="
for img in "${images[@]}"; do
  printf '%-28s %s\n' "tfjob/$img:$version" "$(mib "$(pm image inspect --format '{{.Size}}' "tfjob/$img:$version")")"
done
