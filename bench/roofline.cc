// The machine's own compute limits, measured in the run that reports a
// model's speed against them (bench/roofline.sh):
//   fp32_fma   one core's (and N cores') single-precision FMA peak for the
//              widest vector ISA this CPU has: 12 independent FMA chains per
//              thread (more than latency x ports on every x86-64 core here,
//              so the FMA units, not the dependency, set the rate), each FMA
//              counted as 2 FLOPs per lane;
//   bf16_dot   where the CPU has AVX512-BF16: the same with VDPBF16PS (32
//              bfloat16 products summed into 16 float32 lanes: 64 FLOPs per
//              instruction);
//   sgemm      the sustained single-precision rate of a large square matrix
//              product through the runtime's own Gemm (services/tensor/
//              gemm.h: oneDNN where the build has it, else Eigen; the
//              library is printed), which Dense and the convolutions' im2col
//              path use (C = A * B, 2 n^3 FLOPs).
// Each figure is the best of --reps timed runs of about --seconds each (the
// limit is what the machine can do, so the best run, not the median).
//
//   line_handoff  above one thread: nanoseconds for a cache line to pass
//              from the first CPU to the second (LineHandoffNs);
// With --probe, only fp32_fma and line_handoff (roofline.sh's probe around
// each run above one thread).
//
// Output: one line per figure,
//   roofline: NAME threads=T gflops=G [isa=ISA] [n=N]
// and, with --json FILE, the same as a JSON object.
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/cli.h"
#include "common/flags.h"
#include "services/tensor/gemm.h"
#include "services/tensor/threads.h"

namespace tfjob::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kChains = 12;
constexpr long kInner = 1 << 16;  // FMAs per chain between clock reads

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// GCC 12's _mm512_reduce_add_ps extracts halves from an "undefined" vector
// that -Wuninitialized reports, wrongly.
#pragma GCC diagnostic ignored "-Wuninitialized"

// Each kernel runs FMA chains for about `seconds` and returns the FLOPs done.
// The chains' results are summed into `sink` so the compiler keeps them.
// Three near-copies on purpose: each needs its own target attribute for its
// intrinsics to inline, and GCC gives a shared template or lambda none.
__attribute__((target("avx512f"))) double FmaAvx512(double seconds, float* sink) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * c);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  double rounds = 0;
  const auto start = Clock::now();
  do {
    for (long i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    }
    rounds += 1;
  } while (Seconds(start) < seconds);
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  *sink += _mm512_reduce_add_ps(sum);
  return rounds * kInner * kChains * 16 * 2;
}

__attribute__((target("avx2,fma"))) double FmaAvx2(double seconds, float* sink) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * c);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  double rounds = 0;
  const auto start = Clock::now();
  do {
    for (long i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    }
    rounds += 1;
  } while (Seconds(start) < seconds);
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  for (float v : lanes) *sink += v;
  return rounds * kInner * kChains * 8 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) double DotBf16(double seconds, float* sink) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * c);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(1e-4f));
  double rounds = 0;
  const auto start = Clock::now();
  do {
    for (long i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    }
    rounds += 1;
  } while (Seconds(start) < seconds);
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  *sink += _mm512_reduce_add_ps(sum);
  return rounds * kInner * kChains * 32 * 2;
}

using Kernel = double (*)(double, float*);

// Pins the calling thread to the index-th CPU this process may use, so two
// threads measure two cores (not two time slices of one).
// The CPUs this process may use, as it started: a thread created by a
// pinned one inherits its pin, so later threads cannot ask their own.
const cpu_set_t& AllowedCpus() {
  static const cpu_set_t allowed = [] {
    cpu_set_t a;
    CPU_ZERO(&a);
    if (sched_getaffinity(0, sizeof a, &a) != 0) CPU_SET(0, &a);
    return a;
  }();
  return allowed;
}

void PinToAllowed(int index) {
  const cpu_set_t& allowed = AllowedCpus();
  int seen = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (seen++ == index) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);
      return;
    }
  }
}

// GFLOP/s of `threads` threads running `kernel` at once, best of `reps`.
double PeakOf(Kernel kernel, int threads, double seconds, int reps, float* sink) {
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> flops(threads, 0);
    std::vector<float> sinks(threads, 0);
    std::vector<std::thread> pool;
    std::atomic<int> ready{0};
    const auto start = Clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        PinToAllowed(t);
        ready++;
        while (ready < threads) std::this_thread::yield();
        flops[t] = kernel(seconds, &sinks[t]);
      });
    }
    for (auto& t : pool) t.join();
    const double elapsed = Seconds(start);
    double total = 0;
    for (int t = 0; t < threads; ++t) {
      total += flops[t];
      *sink += sinks[t];
    }
    best = std::max(best, total / elapsed / 1e9);
  }
  return best;
}

// Nanoseconds for one cache line to pass from the first CPU this process
// may use to the second (half a round trip of a flag two pinned threads
// hand back and forth), median of `reps` runs. On a VM the two vCPUs may
// sit on cores that share a cache (tens of ns) or on two dies (well over a
// hundred), and the host moves them: a training step's threads hand every
// layer's data across, so the two-thread figures follow it.
double LineHandoffNs(int reps) {
  constexpr int kRounds = 100000;
  std::vector<double> runs;
  for (int r = 0; r < reps; ++r) {
    alignas(64) std::atomic<int> flag{0};
    std::thread other([&] {
      PinToAllowed(1);
      for (int i = 0; i < kRounds; ++i) {
        while (flag.load(std::memory_order_acquire) != 2 * i + 1) {
        }
        flag.store(2 * i + 2, std::memory_order_release);
      }
    });
    PinToAllowed(0);
    const auto start = Clock::now();
    for (int i = 0; i < kRounds; ++i) {
      flag.store(2 * i + 1, std::memory_order_release);
      while (flag.load(std::memory_order_acquire) != 2 * i + 2) {
      }
    }
    runs.push_back(Seconds(start) * 1e9 / kRounds / 2);
    other.join();
    pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t), &AllowedCpus());
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

// The runtime's single-precision product (tfjob::Gemm) of two n x n
// matrices on `threads` threads, best of `reps` runs of at least `seconds`
// each.
// In `precision` (precision.h): bfloat16 is the runtime's mixed-precision
// product, operand conversion included.
double SgemmGflops(int n, int threads, double seconds, int reps, float* sink,
                   tfjob::Precision precision = tfjob::Precision::kFloat32) {
  tfjob::SetComputeThreads(threads);
  tfjob::PrecisionScope scope(precision);
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
  auto product = [&] { tfjob::Gemm(false, false, n, n, n, a.data(), n, b.data(), n, 0.f, c.data(), n); };
  product();  // warm: pages touched, blocking buffers and kernels made
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    int products = 0;
    const auto start = Clock::now();
    do {
      product();
      ++products;
    } while (Seconds(start) < seconds);
    best = std::max(best, 2.0 * n * n * static_cast<double>(n) * products / Seconds(start) / 1e9);
  }
  *sink += c(0, 0);
  return best;
}

int Main(int argc, char** argv) {
  Flags f;
  f.Value("threads", "thread counts, comma-separated", "1,2")
      .Value("seconds", "about how long each timed run lasts", "0.5")
      .Value("reps", "timed runs per figure (the best is kept)", "3")
      .Value("gemm-n", "the matrices' side in the sgemm figure", "1536")
      .Value("json", "also write the figures to this file as JSON")
      .Bool("probe",
            "only the FP32 FMA peak and, above one thread, the cache-line handoff between the first two CPUs "
            "(roofline.sh's probe around each run above one thread)");
  const std::vector<std::string> args(argv + 1, argv + argc);
  const std::string usage = "usage: bench_roofline [flags] (bench/roofline.sh runs it)\n" + f.Usage();
  if (auto code = AnswerHelpOrVersion(args, "bench_roofline", usage)) return *code;
  if (Status s = f.Parse(args); !s.ok()) {
    std::cerr << "bench_roofline: " << s.message() << "\n" << usage;
    return 2;
  }
  auto seconds = f.GetDouble("seconds");
  auto reps = f.GetInt("reps");
  auto n = f.GetInt("gemm-n");
  std::vector<int> threads;
  {
    std::string list = f.Get("threads");
    size_t start = 0;
    while (start < list.size()) {
      const size_t comma = std::min(list.find(',', start), list.size());
      threads.push_back(std::atoi(list.substr(start, comma - start).c_str()));
      start = comma + 1;
    }
  }
  if (!seconds.ok() || *seconds <= 0 || !reps.ok() || *reps < 1 || !n.ok() || *n < 64 || threads.empty() ||
      *std::min_element(threads.begin(), threads.end()) < 1) {
    std::cerr << "bench_roofline: --seconds > 0, --reps >= 1, --gemm-n >= 64 and --threads of counts >= 1\n" << usage;
    return 2;
  }
  __builtin_cpu_init();
  Kernel fma = nullptr;
  std::string isa;
  if (__builtin_cpu_supports("avx512f")) {
    fma = FmaAvx512, isa = "avx512";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    fma = FmaAvx2, isa = "avx2";
  } else {
    std::cerr << "bench_roofline: this CPU has neither AVX-512 nor AVX2 with FMA\n";
    return 2;
  }
  const bool bf16 = __builtin_cpu_supports("avx512bf16");
  const bool probe = f.GetBool("probe");
  float sink = 0;
  nlohmann::json out = nlohmann::json::object();
  for (int t : threads) {
    const std::string key = "threads_" + std::to_string(t);
    const double peak = PeakOf(fma, t, *seconds, static_cast<int>(*reps), &sink);
    std::printf("roofline: fp32_fma threads=%d gflops=%.1f isa=%s\n", t, peak, isa.c_str());
    out[key]["fp32_fma"] = peak;
    if (t > 1 && CPU_COUNT(&AllowedCpus()) > 1) {
      const double ns = LineHandoffNs(static_cast<int>(*reps));
      std::printf("roofline: line_handoff threads=%d ns=%.0f (one cache line from the first CPU to the second)\n", t,
                  ns);
      out[key]["line_handoff_ns"] = ns;
    }
    if (probe) continue;
    if (bf16) {
      const double dot = PeakOf(DotBf16, t, *seconds, static_cast<int>(*reps), &sink);
      std::printf("roofline: bf16_dot threads=%d gflops=%.1f isa=avx512_bf16\n", t, dot);
      out[key]["bf16_dot"] = dot;
    }
    const double gemm = SgemmGflops(static_cast<int>(*n), t, *seconds, static_cast<int>(*reps), &sink);
    std::printf("roofline: sgemm threads=%d gflops=%.1f n=%lld library=\"%s\" fraction_of_fma=%.2f\n", t, gemm,
                static_cast<long long>(*n), tfjob::GemmLibrary(), gemm / peak);
    out[key]["sgemm"] = gemm;
    if (tfjob::BfloatPath().ok()) {
      const double low =
          SgemmGflops(static_cast<int>(*n), t, *seconds, static_cast<int>(*reps), &sink, tfjob::Precision::kBfloat16);
      std::printf("roofline: bf16_gemm threads=%d gflops=%.1f n=%lld (bfloat16 operands, float32 accumulation)\n", t,
                  low, static_cast<long long>(*n));
      out[key]["bf16_gemm"] = low;
    }
  }
  out["isa"] = isa;
  out["bf16"] = bf16;
  out["gemm_n"] = *n;
  out["gemm_library"] = tfjob::GemmLibrary();
  if (f.Has("json")) std::ofstream(f.Get("json")) << out.dump(1) << "\n";
  // (The sum of every result, so no kernel's work is optimized away.)
  if (sink == 1.2345f) std::printf("\n");
  return 0;
}

}  // namespace
}  // namespace tfjob::bench

int main(int argc, char** argv) { return tfjob::bench::Main(argc, argv); }
