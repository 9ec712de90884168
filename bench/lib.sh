# Sourced by the benchmark scripts (bench/*.sh): the option parsing, paths
# and checks they share. After `source bench/lib.sh` the working directory is
# the project root, and $build, $runtime and $data name the build folder
# (BUILD_DIR, default build), its tfjob-runtime and the MNIST folder
# (MNIST_DIR, default ../shared/data/mnist).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${BUILD_DIR:-build}
runtime=$build/bin/tfjob-runtime
data=${MNIST_DIR:-../shared/data/mnist}

# bench_options NAMES ARGS...: each "--some-name VALUE" in ARGS sets
# $some_name, for the names in NAMES (space-separated, each already given
# its default by the script); any other argument exits 2.
bench_options() {
  local names=" $1 " name
  shift
  while (($#)); do
    name=${1#--}
    name=${name//-/_}
    if [[ $1 != --* || $names != *" $name "* ]] || (($# < 2)); then
      echo "unknown argument $1 (options: $(sed -E 's/(^| )([a-z])/\1--\2/g; s/_/-/g' <<< "${names:1:-1}"))" >&2
      exit 2
    fi
    printf -v "$name" '%s' "$2"
    shift 2
  done
}

# need_built FILE...: each exists and is executable, or the script exits 2.
# The bench_* executables are not in the default build: they are built here,
# in $build, when missing.
need_built() {
  local f
  for f; do
    if [[ ! -x $f && $(basename "$f") == bench_* && -f $build/build.ninja ]]; then
      cmake --build "$build" --target "$(basename "$f")" >&2 || exit 2
    fi
    [[ -x $f ]] || { echo "build first: $f is missing (ninja -C $build $(basename "$f"))" >&2; exit 2; }
  done
}

# need_torch [MODULE]: Debian's python3-torch (the peer) imports, or exit 2.
need_torch() {
  /usr/bin/python3 -c "import ${1:-torch}" 2> /dev/null \
    || { echo "python3-torch is missing (scripts/setup.sh installs it)" >&2; exit 2; }
}

# bench_tmp: $tmp, a folder removed when the script exits.
bench_tmp() {
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
}

# eps SUMMARY_JSON: the examples/s a `fit --summary-json` wrote.
eps() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["examples_per_second"])' "$1"; }

# report_vs_torch TITLE: the medians of the rounds' examples/s in the arrays
# $ours and $theirs, the last round's eval accuracies ($tmp/ours.json, the
# runtime's --summary-json, and $tmp/torch.json, the PyTorch peer's line),
# and their ratio, under TITLE and the thread count ($threads).
report_vs_torch() {
  /usr/bin/python3 - "$1" "$threads" "$tmp/ours.json" "$tmp/torch.json" "${#ours[@]}" "${ours[@]}" "${theirs[@]}" <<'PY'
import json, statistics, sys
title, threads, ours_json, torch_json, n = sys.argv[1:5] + [int(sys.argv[5])]
vals = [float(v) for v in sys.argv[6:]]
ours, theirs = statistics.median(vals[:n]), statistics.median(vals[n:])
peer = json.load(open(torch_json))
mine = json.load(open(ours_json))
print(f"{title}, threads {threads}, median of {n}")
print(f"  tfjob-runtime fit : {ours:10.0f} examples/s  (eval_accuracy {mine['eval_accuracy']:.4f})")
print(f"  {peer['peer']:<17} : {theirs:10.0f} examples/s  (eval_accuracy {peer['eval_accuracy']:.4f})")
print(f"  ratio tfjob/pytorch: {ours / theirs:.2f}")
PY
}
