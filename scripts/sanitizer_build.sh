# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: configures the
# sanitizer builds they share.
#
# build-asan: clang, ASan + UBSan plus libFuzzer's coverage instrumentation.
# It serves both the fuzz harnesses and the ASan unit tests, so CI compiles
# the libraries they have in common once; -Wthread-safety is an error in it
# (TFJOB_THREAD_SAFETY), so scripts/thread-safety.sh need not parse again
# what it compiled. -O0 because UBSan's checks double
# clang's compile time at -O1 and CI has two cores; the tests and harnesses
# are fast enough unoptimised.
#
# build-tsan: GCC, ThreadSanitizer, -O1 (TSan's slowdown on top of -O0 would
# stretch the timeouts that the collective and coordinator tests exercise).
# GCC rather than clang: clang 14 cannot compile lambdas that capture
# structured bindings (C++20, used in services/collective/tests), and GCC
# compiles this code faster with TSan.
#
# Both keep line tables (reports name file:line) and leave NDEBUG undefined
# so asserts check too. CUDA is off: nvcc does not take these flags, and the
# GPU code has tests of its own. oneDNN is off (Eigen computes the products,
# services/tensor/gemm.h): it is not instrumented, and its GNU OpenMP
# runtime would meet clang's in the ASan build. Precompiled headers are off (clang refuses a
# header whose macros differ from the file's; see CMakeLists.txt).

# configure_sanitized DIR SANITIZER CC CXX FLAGS [extra cmake args...]
configure_sanitized() {
  local dir=$1 sanitizer=$2 cc=$3 cxx=$4 flags=$5
  shift 5
  # Configured every time (seconds when cached), so flags changed here reach
  # an existing build dir too.
  mkdir -p "$dir"
  CC=$cc CXX=$cxx cmake -S . -B "$dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_FLAGS_SANITIZE="$flags" \
    -DTFJOB_SANITIZE="$sanitizer" -DTFJOB_CUDA=OFF -DTFJOB_DNNL=OFF -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON "$@" \
    >"$dir/configure.log" 2>&1 || {
    cat "$dir/configure.log"
    return 1
  }
}

configure_asan() {
  configure_sanitized build-asan address clang clang++ "-O0 -gline-tables-only" -DTFJOB_FUZZ=ON -DTFJOB_THREAD_SAFETY=ON
}
configure_tsan() { configure_sanitized build-tsan thread gcc g++ "-O1 -g1"; }
