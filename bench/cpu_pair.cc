// What handing work between two CPUs costs right now, for reading a
// benchmark round beside it (bench/mlp_ps_vs_single.sh prints it after each
// parameter-server round). Two threads, pinned to the first two CPUs this
// process may use, pass:
//   - one cache line back and forth (an atomic flag, no system call):
//     nanoseconds per round trip. Two cores that share a last-level cache
//     answer in about 100 ns; across caches (two CCDs of an AMD EPYC, two
//     sockets) it takes several times that;
//   - a 400 KiB buffer (the MNIST MLP's variables, about what a PS step
//     pushes and pulls each way): each side copies it and overwrites it,
//     then hands it over; microseconds per hand-off, beside the same work
//     with both turns on one CPU.
// A virtual machine's CPUs can move between host cores while it runs, so
// the figures can change from one second to the next: that is the point of
// measuring them beside each round.
//
// Output, one line: round_trip_ns=N handoff_us=X one_cpu_us=Y
// Exit 2 when fewer than two CPUs are usable (nothing to measure).
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/cli.h"

namespace {

constexpr int kRoundTrips = 100000;
constexpr int kHandOffs = 1000;
constexpr size_t kFloats = 400 * 1024 / sizeof(float);

alignas(64) std::atomic<int> turn{0};
std::vector<float> buffer(kFloats), scratch(kFloats);
std::atomic<float> sink{0};

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// One side's work on the buffer: read all of it, write all of it.
void Touch(int i) {
  std::memcpy(scratch.data(), buffer.data(), kFloats * sizeof(float));
  std::memset(buffer.data(), i & 0xff, kFloats * sizeof(float));
  sink.store(scratch[static_cast<size_t>(i) % kFloats], std::memory_order_relaxed);
}

// Thread `me` (0 or 1) waits for its turn `rounds` times, works (or not),
// then gives the turn to the other.
void Alternate(int me, int rounds, bool work) {
  for (int i = 0; i < rounds; ++i) {
    while (turn.load(std::memory_order_acquire) != me) {
    }
    if (work) Touch(i);
    turn.store(1 - me, std::memory_order_release);
  }
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const std::string usage =
      "usage: bench_cpu_pair\n"
      "Measures what handing work between the first two CPUs this process may use costs now.\n"
      "Prints one line: round_trip_ns=N handoff_us=X one_cpu_us=Y. Takes no flags.\n";
  if (auto code = tfjob::bench::AnswerHelpOrVersion(args, "bench_cpu_pair", usage)) return *code;
  if (!args.empty()) {
    std::fprintf(stderr, "bench_cpu_pair: unknown argument '%s'\n%s", args[0].c_str(), usage.c_str());
    return 2;
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 2;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  if (cpus.size() < 2) {
    std::fprintf(stderr, "cpu_pair: fewer than two CPUs usable\n");
    return 2;
  }
  if (!Pin(cpus[0])) return 2;

  // Each phase: the other thread on the second CPU, this one on the first.
  auto phase = [&](int rounds, bool work) {
    turn.store(0);
    std::thread other([&] {
      Pin(cpus[1]);
      Alternate(1, rounds, work);
    });
    const auto start = std::chrono::steady_clock::now();
    Alternate(0, rounds, work);
    other.join();
    return Seconds(start);
  };
  Touch(0);  // pages in
  const double round_trips = phase(kRoundTrips, false);
  const double handoffs = phase(kHandOffs, true);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 2 * kHandOffs; ++i) Touch(i);
  const double one_cpu = Seconds(start);
  std::printf("round_trip_ns=%.0f handoff_us=%.1f one_cpu_us=%.1f\n", round_trips / kRoundTrips * 1e9,
              handoffs / (2 * kHandOffs) * 1e6, one_cpu / (2 * kHandOffs) * 1e6);
  return 0;
}
