// Times DirectConv2D's forward, data-gradient and weight-gradient calls for
// 3x3 "same" convolutions, with the kernels DirectConv2D picks (Winograd,
// its own or oneDNN's, where they apply) against the direct kernels only
// (TFJOB_CPU_KERNELS=direct's), at the compute threads given. Prints one
// line per geometry: milliseconds per call of each pass, and the ratio.
//
// usage: bench_conv [--threads N] [--reps R] [--tile 2|4] [B:H:W:C:F ...]
// (--tile forces the output block of the project's own Winograd kernels).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "services/tensor/conv2d.h"
#include "services/tensor/conv2d_winograd.h"
#include "services/tensor/threads.h"

namespace {

using tfjob::Conv2DGeometry;
using tfjob::DirectConv2D;

double Seconds(const std::chrono::steady_clock::time_point& since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

struct Times {
  double forward = 0, data = 0, weights = 0;
  double Total() const { return forward + data + weights; }
};

// The best of `reps` rounds of 20 calls each, per pass.
Times Measure(const Conv2DGeometry& g, int reps, std::string& kernel) {
  std::vector<float> x(g.batch * g.height * g.width * g.channels), k(9 * g.channels * g.filters),
      y(g.batch * g.out_h * g.out_w * g.filters), dx(x.size()), dk(k.size()), db(g.filters);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 1000) / 1000.f - 0.5f;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>((i * 104729) % 1000) / 1000.f - 0.5f;
  DirectConv2D conv;
  Times best{1e9, 1e9, 1e9};
  constexpr int kCalls = 20;
  for (int r = 0; r < reps + 1; ++r) {  // the first round warms up
    auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) (void)conv.Forward(g, x.data(), k.data(), nullptr, false, y.data());
    const double f = Seconds(t) / kCalls;
    t = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) (void)conv.BackwardData(g, y.data(), k.data(), dx.data());
    const double d = Seconds(t) / kCalls;
    t = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) (void)conv.BackwardWeights(g, x.data(), y.data(), dk.data(), nullptr);
    const double w = Seconds(t) / kCalls;
    if (r > 0) best = {std::min(best.forward, f), std::min(best.data, d), std::min(best.weights, w)};
  }
  kernel = conv.ForwardKernel();
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 5;
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--tile") && i + 1 < argc) {
      tfjob::winograd::UseTile(std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      specs.emplace_back(argv[i]);
    }
  }
  if (specs.empty()) specs = {"64:14:14:16:16", "64:7:7:32:32", "64:14:14:32:32", "64:28:28:16:16"};
  if (!DirectConv2D::Available()) {
    std::fprintf(stderr, "bench_conv: this build computes convolutions without oneDNN\n");
    return 2;
  }
  tfjob::SetComputeThreads(threads);
  std::printf("%-16s %-24s %8s %8s %8s %8s | %-20s %8s %8s %8s | %s\n", "B:H:W:C:F", "kernel", "fwd ms", "data ms",
              "wgt ms", "GFLOP/s", "direct kernel", "fwd ms", "data ms", "wgt ms", "speed-up");
  for (const std::string& s : specs) {
    Conv2DGeometry g;
    if (std::sscanf(s.c_str(), "%ld:%ld:%ld:%ld:%ld", &g.batch, &g.height, &g.width, &g.channels, &g.filters) != 5) {
      std::fprintf(stderr, "bench_conv: '%s' is not B:H:W:C:F\n", s.c_str());
      return 2;
    }
    g.kernel_h = g.kernel_w = 3;
    g.out_h = g.height, g.out_w = g.width, g.pad_top = g.pad_left = 1;
    std::string kernel, direct_kernel;
    tfjob::UseDirectConvolutionsOnly(false);
    const Times picked = Measure(g, reps, kernel);
    tfjob::UseDirectConvolutionsOnly(true);
    const Times direct = Measure(g, reps, direct_kernel);
    // Direct-convolution FLOPs of the three passes.
    const double flops = 3.0 * 2 * g.batch * g.height * g.width * 9 * g.channels * g.filters;
    std::printf("%-16s %-24s %8.3f %8.3f %8.3f %8.1f | %-20s %8.3f %8.3f %8.3f | %.2fx\n", s.c_str(), kernel.c_str(),
                picked.forward * 1e3, picked.data * 1e3, picked.weights * 1e3, flops / picked.Total() / 1e9,
                direct_kernel.c_str(), direct.forward * 1e3, direct.data * 1e3, direct.weights * 1e3,
                direct.Total() / picked.Total());
  }
  return 0;
}
