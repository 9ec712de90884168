#!/usr/bin/env bash
# clang's thread-safety analysis (-Wthread-safety) over every production
# source, as CI runs it: each translation unit of BUILD_DIR's
# compile_commands.json (a GCC build: its generated headers are reused) that
# is not a test, a benchmark or a fuzzer is parsed by clang++ with the same
# include paths and definitions, -fsyntax-only, and any thread-safety warning
# is an error. Nothing is compiled to code, so it costs a fraction of a build.
#
# Before the tree, it checks that the check can fail: a member written
# without its mutex must be refused.
#
# With --skip-compiled-in DIR, a clang build configured with
# TFJOB_THREAD_SAFETY=ON (CI's build-asan, where -Wthread-safety is an
# error), built just before: a translation unit whose every source DIR
# compiled (its object is there) is not parsed again, unless a source of it
# has code for an optional library (#if TFJOB_HAVE_...), which DIR leaves
# out and BUILD_DIR may not.
#
# Usage: bash scripts/thread-safety.sh [BUILD_DIR] [--skip-compiled-in DIR]
#        (BUILD_DIR defaults to build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
skip_dir=
while (($#)); do
  case $1 in
    --skip-compiled-in)
      [[ $# -ge 2 ]] || { echo "thread-safety: --skip-compiled-in needs a build directory" >&2; exit 2; }
      skip_dir=$2
      shift 2
      ;;
    -*) echo "usage: $0 [BUILD_DIR] [--skip-compiled-in DIR]" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
db="$build/compile_commands.json"
[[ -f $db ]] || { echo "thread-safety: $db not found: configure and build $build first" >&2; exit 2; }
if [[ -n $skip_dir ]]; then
  [[ -f $skip_dir/compile_commands.json ]] \
    || { echo "thread-safety: $skip_dir/compile_commands.json not found: configure and build $skip_dir first" >&2; exit 2; }
  grep -qx 'TFJOB_THREAD_SAFETY:BOOL=ON' "$skip_dir/CMakeCache.txt" \
    || { echo "thread-safety: $skip_dir is not configured with -DTFJOB_THREAD_SAFETY=ON: its objects prove nothing" >&2; exit 2; }
fi
command -v clang++ > /dev/null || { echo "thread-safety: clang++ not found (Debian's clang; scripts/setup.sh installs it)" >&2; exit 2; }

flags=(-std=c++20 -fsyntax-only -Wno-everything -Wthread-safety -Werror=thread-safety)

probe=$(mktemp --suffix=.cc)
trap 'rm -f "$probe"' EXIT
cat > "$probe" <<'EOF'
#include "common/mutex.h"
struct Counter {
  void Unguarded() { ++n; }
  tfjob::Mutex mu;
  int n TFJOB_GUARDED_BY(mu) = 0;
};
EOF
if clang++ "${flags[@]}" -I. "$probe" 2> /dev/null; then
  echo "thread-safety: the probe that writes a guarded member without its mutex was accepted: the check cannot fail" >&2
  exit 1
fi

# One line per translation unit: the file, then its arguments (GCC-only
# flags and the precompiled header left out), NUL-separated for xargs. A
# unity build's batch (CMakeFiles/<target>.dir/Unity/unity_N_cxx.cxx, which
# #includes the target's sources) is parsed whole when every source in it is
# production code, which is how a library's batches are; a batch of test
# sources is skipped, and production sources in a mixed batch are parsed
# one by one with the batch's arguments.
python3 - "$db" "$PWD" "$skip_dir" > "$build/thread-safety.args" <<'EOF'
import json, re, shlex, sys, os
db, root, skip_dir = sys.argv[1], sys.argv[2], sys.argv[3]
def unity_sources(f):
    return [os.path.realpath(m) for m in re.findall(r'^#include "([^"]+)"', open(f).read(), re.M)]
# The sources skip_dir compiled with the analysis as errors; none with code
# for an optional library, which that build leaves out.
checked = set()
if skip_dir:
    for e in json.load(open(os.path.join(skip_dir, "compile_commands.json"))):
        args = e.get("arguments") or shlex.split(e["command"])
        if "-o" not in args or not os.path.exists(os.path.join(e["directory"], args[args.index("-o") + 1])):
            continue
        f = os.path.realpath(os.path.join(e["directory"], e["file"]))
        for s in unity_sources(f) if "/Unity/unity_" in f else [f]:
            if "TFJOB_HAVE_" not in open(s, errors="replace").read():
                checked.add(s)
skipped = 0
skip_parts = ("/tests/", "/bench/", "/fuzz/", "/examples/")
drop = {"-Winvalid-pch", "-Wno-maybe-uninitialized", "-fno-fat-lto-objects"}
def production(f):
    if not f.startswith(root + "/") or not f.endswith(".cc"):
        return False
    rel = f[len(root):]
    return not (any(p in rel for p in skip_parts) or rel.startswith("/build") or rel.startswith("/tests/"))
for e in json.load(open(db)):
    f = os.path.realpath(os.path.join(e["directory"], e["file"]))
    if "/Unity/unity_" in f:
        included = unity_sources(f)
        mine = [s for s in included if production(s)]
        if not mine:
            continue
        todo = [s for s in mine if s not in checked]
        skipped += len(mine) - len(todo)
        if not todo:
            continue
        files = [f] if todo == included else todo
    elif production(f):
        if f in checked:
            skipped += 1
            continue
        files = [f]
    else:
        continue
    args = e.get("arguments") or shlex.split(e["command"])
    out, i = [], 1
    while i < len(args):
        a = args[i]
        if a in ("-o", "-MF", "-MT", "-MQ"):
            i += 2; continue
        if a == "-include" and i + 1 < len(args) and "cmake_pch" in args[i + 1]:
            i += 2; continue
        if a in ("-c", "-MD") or a in drop or a.startswith("-march") or a == f or a == e["file"]:
            i += 1; continue
        out.append(a); i += 1
    for one in files:
        sys.stdout.write("\0".join([one] + out) + "\n")
if skip_dir:
    sys.stderr.write(f"thread-safety: {skipped} production sources left out: {skip_dir} compiled them with -Wthread-safety as errors\n")
EOF

count=$(wc -l < "$build/thread-safety.args")
echo "thread-safety: clang++ -Wthread-safety over $count translation units of production sources"
fail=0
# Two parsers at a time: clang's front end on these sources takes about a
# gigabyte each.
python3 - "$build/thread-safety.args" "${flags[@]}" <<'EOF' || fail=1
import subprocess, sys, concurrent.futures, os
path, flags = sys.argv[1], sys.argv[2:]
jobs = []
for line in open(path, "rb").read().decode().splitlines():
    parts = line.split("\0")
    jobs.append((parts[0], parts[1:]))
def run(job):
    f, args = job
    p = subprocess.run(["clang++"] + args + flags + ["-Wno-unknown-warning-option", f],
                       capture_output=True, text=True)
    return f, p.returncode, p.stderr
bad = 0
with concurrent.futures.ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as ex:
    for f, rc, err in ex.map(run, jobs):
        if rc != 0:
            bad += 1
            sys.stderr.write(err)
print(f"thread-safety: {len(jobs) - bad} clean, {bad} with errors")
sys.exit(1 if bad else 0)
EOF
exit $fail
