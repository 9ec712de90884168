# Sourced (POSIX sh) by the GPU bundle's bin/ wrappers and run.sh, with
# TFJOB_BUNDLE set to the bundle's folder (scripts/gpu-bundle.sh packs it).
# Sets TFJOB_BUNDLE_LIBPATH, the library path the bundled loader gets
# (--library-path): the bundle's lib/, then the directories where the
# libraries the bundle leaves out were found, each looked for in this order:
#   1. the bundle's lib/
#   2. the Python nvidia-* packages' lib directories (PyTorch's CUDA:
#      nvidia/*/lib and nvidia/*/*/lib under the site-packages of
#      ${PYTHON:-python3}; CUDA 13 wheels use nvidia/cu13/lib)
#   3. /usr/local/cuda/lib64, then /usr/local/cuda/lib
#   4. /usr/lib/x86_64-linux-gnu, then /usr/lib64 (NVIDIA's distribution
#      packages, e.g. libnccl2)
# and, last, the directory of the driver's libcuda.so.1 where the loader
# would not find it by itself (not in /etc/ld.so.cache).
# For run.sh it also sets
#   TFJOB_BUNDLE_FOUND    one "SONAME DIR" line per CUDA library found
#   TFJOB_BUNDLE_MISSING  the SONAMEs found nowhere (space-separated)
#   TFJOB_BUNDLE_DRIVER   libcuda.so.1's path ("" when not found), and
#                         TFJOB_BUNDLE_DRIVER_HOW: how the loader finds it
# shellcheck disable=SC2034  # (the variables run.sh reads)
# Nothing here sets LD_LIBRARY_PATH: that would give the bundled glibc to
# the host's own programs (sh, python3) as well.

[ -n "${PATH:-}" ] || PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

tfjob_nl='
'
tfjob_ifs=$IFS
IFS=$tfjob_nl

# Directories to search, one a line.
tfjob_dirs="$TFJOB_BUNDLE/lib"
for tfjob_sp in $("${PYTHON:-python3}" -c 'import nvidia, os
for p in nvidia.__path__: print(os.path.dirname(p))' 2> /dev/null); do
  for tfjob_d in "$tfjob_sp"/nvidia/*/lib "$tfjob_sp"/nvidia/*/*/lib; do
    [ -d "$tfjob_d" ] && tfjob_dirs="$tfjob_dirs$tfjob_nl$tfjob_d"
  done
done
tfjob_dirs="$tfjob_dirs$tfjob_nl/usr/local/cuda/lib64$tfjob_nl/usr/local/cuda/lib"
# NVIDIA's Debian/Ubuntu packages (libnccl2, libcublas-13-*) install into the
# system's library directories.
tfjob_dirs="$tfjob_dirs$tfjob_nl/usr/lib/x86_64-linux-gnu$tfjob_nl/usr/lib64"

TFJOB_BUNDLE_LIBPATH=$TFJOB_BUNDLE/lib
TFJOB_BUNDLE_FOUND=
TFJOB_BUNDLE_MISSING=
for tfjob_lib in libcublas.so.13 libcublasLt.so.13 libcudart.so.13 libnccl.so.2; do
  tfjob_at=
  for tfjob_d in $tfjob_dirs; do
    if [ -e "$tfjob_d/$tfjob_lib" ]; then
      tfjob_at=$tfjob_d
      break
    fi
  done
  if [ -z "$tfjob_at" ]; then
    TFJOB_BUNDLE_MISSING="${TFJOB_BUNDLE_MISSING:+$TFJOB_BUNDLE_MISSING }$tfjob_lib"
    continue
  fi
  TFJOB_BUNDLE_FOUND="$TFJOB_BUNDLE_FOUND$tfjob_lib $tfjob_at$tfjob_nl"
  case ":$TFJOB_BUNDLE_LIBPATH:" in
    *":$tfjob_at:"*) ;;
    *) TFJOB_BUNDLE_LIBPATH="$TFJOB_BUNDLE_LIBPATH:$tfjob_at" ;;
  esac
done

# The driver: cudart dlopens libcuda.so.1 when a GPU is first asked for.
TFJOB_BUNDLE_DRIVER=
TFJOB_BUNDLE_DRIVER_HOW=
for tfjob_line in $(ldconfig -p 2> /dev/null); do
  case $tfjob_line in
    *"libcuda.so.1 (libc6,x86-64"*"=> "*)
      TFJOB_BUNDLE_DRIVER=${tfjob_line##*=> }
      TFJOB_BUNDLE_DRIVER_HOW="in /etc/ld.so.cache"
      break
      ;;
  esac
done
if [ -z "$TFJOB_BUNDLE_DRIVER" ]; then
  IFS=:
  for tfjob_d in ${LD_LIBRARY_PATH:-} /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/wsl/lib \
                 /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
    if [ -z "$tfjob_d" ] || [ ! -e "$tfjob_d/libcuda.so.1" ]; then continue; fi
    TFJOB_BUNDLE_DRIVER=$tfjob_d/libcuda.so.1
    case $tfjob_d in
      /usr/lib/x86_64-linux-gnu | /lib/x86_64-linux-gnu | /usr/lib | /lib)
        TFJOB_BUNDLE_DRIVER_HOW="in a default directory of the loader" ;;
      *)
        TFJOB_BUNDLE_DRIVER_HOW="added to the library path"
        case ":$TFJOB_BUNDLE_LIBPATH:" in
          *":$tfjob_d:"*) ;;
          *) TFJOB_BUNDLE_LIBPATH="$TFJOB_BUNDLE_LIBPATH:$tfjob_d" ;;
        esac
        ;;
    esac
    break
  done
fi

IFS=$tfjob_ifs
unset tfjob_nl tfjob_ifs tfjob_dirs tfjob_sp tfjob_d tfjob_lib tfjob_at tfjob_line
export TFJOB_BUNDLE_LIBPATH
