#!/usr/bin/env bash
# What parameter-server training asks of the machine, and what the machine
# gives: why PS/single (bench/mlp_ps_vs_single.sh) differs between machines
# of the same kind. On the MNIST MLP (examples/mnist/mlp.json, batch 64,
# --threads 1), in the same run:
#   - `perf stat` of single-process `fit` and of 1 PS + 1 worker
#     (`tfjob-runtime local`: a chief, a PS and a worker process) with steps
#     per execution 8 and 1, every process of the run: CPU ms, context
#     switches, CPU migrations and threads started per step (a server that
#     ends idle threads only to start new ones shows there). Each mode runs for E1 and E2
#     epochs; the longer run less the shorter, over the steps between them,
#     leaves start-up out;
#   - two-process scaling: the examples/s of two single-process runs at once
#     (summed) over one alone: 2.00 where two busy processes have a core
#     each, less where the virtual CPUs share physical cores or the host is
#     busy;
#   - each process of a PS run, halfway through it: its role, its threads
#     and the CPUs it may run on (Cpus_allowed_list);
#   - how long waking a sleeping thread takes: `perf bench sched pipe`
#     round trips between two processes free to use either CPU, and with
#     both on one CPU, beside the guest's idle polling setting (a VM whose
#     idle virtual CPU halts at once pays the host's exit and entry on
#     every wake-up that lands on it; a PS step hands off several times);
#   - the bound that follows: PS/single can reach at most
#       scaling x (single's CPU per step) / (PS's CPU per step)
#     and only while both cores are kept busy (the "bound" printed; with a
#     scaling of 2.00 it is the two-core ceiling).
#
# usage: bench/ps_cpu_per_step.sh [--rounds R] [--epochs E1,E2]
#        (from the project root, after the build; BUILD_DIR=build by default;
#         perf from linux-perf, which scripts/setup.sh installs; data from
#         ../shared/data/mnist or $MNIST_DIR)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=3 epochs=16,48
bench_options "rounds epochs" "$@"
IFS=, read -r e1 e2 <<< "$epochs"
((e2 > e1)) || { echo "--epochs E1,E2 needs E2 > E1" >&2; exit 2; }
command -v perf > /dev/null || { echo "perf is missing: apt-get install linux-perf (scripts/setup.sh)" >&2; exit 2; }
need_built "$runtime"
bench_tmp
steps_per_epoch=125  # 8000 examples (the config's train take) / batch 64
common=(--config examples/mnist/mlp.json --data-dir "$data" --threads 1)

mode_args() {  # MODE: the runtime's arguments before the common ones
  case "$1" in
    single) echo fit ;;
    ps8) echo local --ps 1 --workers 1 -- fit --steps-per-execution 8 ;;
    ps1) echo local --ps 1 --workers 1 -- fit --steps-per-execution 1 ;;
  esac
}

# counters MODE EPOCHS: "cpu_ms context_switches migrations threads_started"
# of one run.
counters() {
  # shellcheck disable=SC2046
  timeout 300 perf stat -x, -e task-clock,context-switches,cpu-migrations,task:task_newtask -o "$tmp/perf" \
    "$runtime" $(mode_args "$1") "${common[@]}" --epochs "$2" > "$tmp/log" 2>&1 \
    || { cat "$tmp/log" "$tmp/perf" >&2; exit 1; }
  awk -F, '$3 == "task-clock" { t = $1 } $3 == "context-switches" { c = $1 } $3 == "cpu-migrations" { m = $1 }
           $3 == "task:task_newtask" { n = $1 }
           END { if (t == "" || c == "" || m == "" || n == "") exit 1; print t, c, m, n }' "$tmp/perf" \
    || { echo "perf stat counted nothing:" >&2; cat "$tmp/perf" >&2; exit 1; }
}

# scaling: examples/s of two concurrent single runs (summed) over one alone.
scaling() {
  local a b i
  timeout 120 "$runtime" fit "${common[@]}" --epochs "$e2" --summary-json "$tmp/one.json" > "$tmp/log" 2>&1 \
    || { cat "$tmp/log" >&2; exit 1; }
  timeout 120 "$runtime" fit "${common[@]}" --epochs "$e2" --summary-json "$tmp/a.json" > "$tmp/log-a" 2>&1 &
  a=$!
  timeout 120 "$runtime" fit "${common[@]}" --epochs "$e2" --summary-json "$tmp/b.json" > "$tmp/log-b" 2>&1 &
  b=$!
  for i in a b; do
    wait "${!i}" || { cat "$tmp/log-$i" >&2; exit 1; }
  done
  /usr/bin/python3 -c 'import sys; print((float(sys.argv[2]) + float(sys.argv[3])) / float(sys.argv[1]))' \
    "$(eps "$tmp/one.json")" "$(eps "$tmp/a.json")" "$(eps "$tmp/b.json")"
}

proc_field() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2> /dev/null || echo "(ended)"; }  # PID FIELD

# processes: role, threads and allowed CPUs of each process of a PS run,
# halfway through it (its task type and index from its TF_CONFIG).
processes() {
  # shellcheck disable=SC2046
  "$runtime" $(mode_args ps1) "${common[@]}" --epochs "$e2" > "$tmp/log" 2>&1 &
  local launcher=$! pid role n=0
  while ((n < 100)) && (($(pgrep -P "$launcher" | wc -l) < 3)); do sleep 0.1; n=$((n + 1)); done
  sleep 1
  printf '  %-28s threads %3s, CPUs %s\n' "launcher (local)" "$(proc_field "$launcher" Threads)" \
    "$(proc_field "$launcher" Cpus_allowed_list)"
  for pid in $(pgrep -P "$launcher"); do
    role=$(tr '\0' '\n' < "/proc/$pid/environ" | sed -n 's/^TF_CONFIG=//p' | /usr/bin/python3 -c '
import json, sys
t = json.load(sys.stdin)["task"]
print(t["type"], t["index"])' 2> /dev/null || echo "?")
    printf '  %-28s threads %3s, CPUs %s\n' "$role" "$(proc_field "$pid" Threads)" "$(proc_field "$pid" Cpus_allowed_list)"
  done
  wait "$launcher" || { cat "$tmp/log" >&2; exit 1; }
}

: > "$tmp/all.txt"
for ((r = 1; r <= rounds; r++)); do
  for mode in single ps8 ps1; do
    echo "$mode $(counters "$mode" "$e1") $(counters "$mode" "$e2")" >> "$tmp/all.txt"
  done
  echo "scaling $(scaling)" >> "$tmp/all.txt"
  echo "round $r done" >&2
done
/usr/bin/python3 - "$tmp/all.txt" "$e1" "$e2" "$steps_per_epoch" "$(nproc)" <<'PY'
import statistics, sys
path, e1, e2, spe, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
per, scaling = {}, []
steps = (e2 - e1) * spe
for line in open(path):
    f = line.split()
    if f[0] == "scaling":
        scaling.append(float(f[1]))
        continue
    a, b = [float(x) for x in f[1:5]], [float(x) for x in f[5:9]]
    per.setdefault(f[0], []).append([(y - x) / steps for x, y in zip(a, b)])
med = {m: [statistics.median(col) for col in zip(*v)] for m, v in per.items()}
s = statistics.median(scaling)
print(f"MNIST MLP batch 64, --threads 1, medians of {len(scaling)} rounds ({e1} vs {e2} epochs), {cores} cores")
print(f"  two-process scaling {s:.2f} (min {min(scaling):.2f}, max {max(scaling):.2f}; 2.00 = a core each)")
print(f"  per step                         CPU ms  context switches  CPU migrations  threads started  ceiling ({cores} cores)  bound")
names = {"single": "single process (fit)", "ps8": "1 PS + 1 worker, steps/exec 8", "ps1": "1 PS + 1 worker, steps/exec 1"}
for m in ("single", "ps8", "ps1"):
    cpu, cs, mig, started = med[m]
    ceiling = bound = ""
    if m != "single":
        ceiling, bound = f"{cores * med['single'][0] / cpu:.2f}", f"{s * med['single'][0] / cpu:.2f}"
    print(f"  {names[m]:<32} {cpu:6.3f}  {cs:16.2f}  {mig:14.3f}  {started:15.4f}  {ceiling:>17}  {bound:>5}")
PY
echo "processes of a PS run (steps/exec 1), halfway through it:"
processes

# wake ROUNDS [PREFIX...]: median microseconds of one round trip of
# `perf bench sched pipe` (two processes, each waking the other through a
# pipe), run under PREFIX (e.g. taskset -c 0); exits when perf prints none.
wake() {
  local n=$1 i
  shift
  for ((i = 0; i < n; i++)); do
    "$@" perf bench sched pipe -l 20000 2> /dev/null | awk '/usecs\/op/ { print $1 }'
  done | sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print v[int((NR + 1) / 2)] }' \
    || { echo "perf bench sched pipe printed nothing" >&2; exit 1; }
}
echo "waking a sleeping thread, perf bench sched pipe, us per round trip (median of $rounds):"
free=$(wake "$rounds") || exit 1
same=$(wake "$rounds" taskset -c 0) || exit 1
printf '  %-28s %6s\n' "either CPU" "$free" "both on CPU 0" "$same"
# A VM's idle virtual CPU halts; waking it costs the host an exit and an
# entry unless the guest polls a while before halting (haltpoll).
poll=/sys/module/haltpoll/parameters/guest_halt_poll_ns
printf '  %-28s %s\n' "cpuidle driver" "$(cat /sys/devices/system/cpu/cpuidle/current_driver 2> /dev/null || echo none)" \
  "guest_halt_poll_ns" "$(cat "$poll" 2> /dev/null || echo "(no haltpoll)")"
