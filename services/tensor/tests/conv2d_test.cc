#include "services/tensor/conv2d.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "services/tensor/conv2d_small.h"
#include "services/tensor/conv2d_winograd.h"
#include "services/tensor/precision.h"
#include "services/tensor/threads.h"

namespace tfjob {
namespace {

// Keras' geometry along one axis: output size and padding before, for
// "valid" (same = false) and "same".
void Axis(int64_t in, int64_t k, int64_t s, bool same, int64_t& out, int64_t& pad) {
  out = same ? (in + s - 1) / s : (in - k) / s + 1;
  pad = same ? std::max<int64_t>((out - 1) * s + k - in, 0) / 2 : 0;
}

Conv2DGeometry Make(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t f, int64_t sh,
                    int64_t sw, bool same) {
  Conv2DGeometry g{.batch = n,
                   .height = h,
                   .width = w,
                   .channels = c,
                   .kernel_h = kh,
                   .kernel_w = kw,
                   .filters = f,
                   .stride_h = sh,
                   .stride_w = sw};
  Axis(h, kh, sh, same, g.out_h, g.pad_top);
  Axis(w, kw, sw, same, g.out_w, g.pad_left);
  return g;
}

std::vector<float> RandomValues(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Calls f(x index, kernel index, y index) for every product the
// convolution's definition sums.
template <typename F>
void ForEachProduct(const Conv2DGeometry& g, F&& f) {
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t oy = 0; oy < g.out_h; ++oy)
      for (int64_t ox = 0; ox < g.out_w; ++ox)
        for (int64_t ky = 0; ky < g.kernel_h; ++ky)
          for (int64_t kx = 0; kx < g.kernel_w; ++kx) {
            const int64_t iy = oy * g.stride_h - g.pad_top + ky, ix = ox * g.stride_w - g.pad_left + kx;
            if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) continue;
            for (int64_t c = 0; c < g.channels; ++c)
              for (int64_t o = 0; o < g.filters; ++o)
                f(((b * g.height + iy) * g.width + ix) * g.channels + c,
                  ((ky * g.kernel_w + kx) * g.channels + c) * g.filters + o,
                  ((b * g.out_h + oy) * g.out_w + ox) * g.filters + o);
          }
}

// `magnitude` (may be empty): each element's sum of |terms|; a float32 sum
// of many terms (a weight gradient over a batch's pixels) rounds in
// proportion to it.
void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, const std::string& what,
                const std::vector<double>& magnitude = {}) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tolerance = 1e-4 * (1 + std::abs(want[i])) + (magnitude.empty() ? 0 : 2e-7 * magnitude[i]);
    ASSERT_NEAR(got[i], want[i], tolerance) << what << " " << i;
  }
}

// Forward (with and without bias, with the fused ReLU), the kernel's and
// bias' gradients and the input's, against the convolution's definition
// summed in double. In bfloat16 the definition takes the input, kernel and
// dL/dy rounded to bfloat16 (products exact, sums in float32 or better).
void CheckAgainstTheDefinition(const Conv2DGeometry& g, std::mt19937& rng, const std::string& what, bool bf16 = false) {
  const size_t xs = g.batch * g.height * g.width * g.channels, ks = g.kernel_h * g.kernel_w * g.channels * g.filters,
               ys = g.batch * g.out_h * g.out_w * g.filters;
  const auto x = RandomValues(xs, rng), k = RandomValues(ks, rng), bias = RandomValues(g.filters, rng),
             dy = RandomValues(ys, rng);
  auto xr = x, kr = k, dyr = dy;
  if (bf16) {
    RoundTo(Precision::kBfloat16, xr.data(), static_cast<int64_t>(xs));
    RoundTo(Precision::kBfloat16, kr.data(), static_cast<int64_t>(ks));
    RoundTo(Precision::kBfloat16, dyr.data(), static_cast<int64_t>(ys));
  }
  PrecisionScope scope(bf16 ? Precision::kBfloat16 : Precision::kFloat32);
  for (bool with_bias : {false, true}) {
    for (bool relu : {false, true}) {
      std::vector<double> want(ys);
      for (size_t j = 0; j < ys; ++j) want[j] = with_bias ? bias[j % g.filters] : 0;
      ForEachProduct(g, [&](int64_t xi, int64_t ki, int64_t yi) { want[yi] += double(xr[xi]) * kr[ki]; });
      if (relu)
        for (double& v : want) v = std::max(v, 0.0);
      DirectConv2D conv;
      std::vector<float> y(ys);
      Status s = conv.Forward(g, x.data(), k.data(), with_bias ? bias.data() : nullptr, relu, y.data());
      ASSERT_TRUE(s.ok()) << what << ": " << s;
      ExpectNear(y, want, what + " forward bias=" + std::to_string(with_bias) + " relu=" + std::to_string(relu));

      std::vector<double> want_dk(ks), dk_magnitude(ks), want_db(g.filters), want_dx(xs);
      ForEachProduct(g, [&](int64_t xi, int64_t ki, int64_t yi) {
        want_dk[ki] += double(xr[xi]) * dyr[yi];
        dk_magnitude[ki] += std::abs(double(xr[xi]) * dyr[yi]);
        want_dx[xi] += double(dyr[yi]) * kr[ki];
      });
      for (size_t j = 0; j < ys; ++j) want_db[j % g.filters] += dyr[j];
      std::vector<float> dk(ks, 7.f), db(g.filters, 7.f), dx(xs, 7.f);  // overwritten, not added to
      s = conv.BackwardWeights(g, x.data(), dy.data(), dk.data(), with_bias ? db.data() : nullptr);
      ASSERT_TRUE(s.ok()) << what << ": " << s;
      ExpectNear(dk, want_dk, what + " dkernel", dk_magnitude);
      if (with_bias) ExpectNear(db, want_db, what + " dbias");
      s = conv.BackwardData(g, dy.data(), k.data(), dx.data());
      ASSERT_TRUE(s.ok()) << what << ": " << s;
      ExpectNear(dx, want_dx, what + " dx");
    }
  }
}

// The geometries the layers make: one input channel (an MNIST first
// layer), strides, "same" padding, a non-square kernel, 1x1, channels >= 16.
TEST(DirectConv2DTest, MatchesTheDefinitionForwardAndBackward) {
  if (!DirectConv2D::Available()) GTEST_SKIP() << "no oneDNN in this build (or TFJOB_CPU_KERNELS=eigen)";
  std::mt19937 rng(11);
  const std::vector<Conv2DGeometry> cases = {
      Make(2, 7, 6, 1, 3, 3, 5, 1, 1, false),  Make(2, 7, 7, 3, 3, 3, 4, 2, 2, true),
      Make(3, 9, 8, 16, 3, 2, 8, 2, 1, false), Make(2, 5, 5, 4, 1, 1, 6, 1, 1, false),
      Make(2, 6, 6, 17, 3, 3, 16, 1, 1, true), Make(1, 8, 8, 2, 5, 5, 3, 3, 3, true)};
  for (size_t i = 0; i < cases.size(); ++i) CheckAgainstTheDefinition(cases[i], rng, "case " + std::to_string(i));
}

// 3x3, stride 1, 32 channels and filters and up, over enough pixels: oneDNN's
// Winograd kernels (on a CPU that has them: AVX-512), "same" and "valid",
// channels and filters apart, at one and two threads. Winograd's rounding
// differs from a direct sum's; the definition's tolerance holds for it.
// With direct convolutions asked for, the same geometry takes those.
TEST(DirectConv2DTest, WinogradMatchesTheDefinitionWhereItApplies) {
  if (!DirectConv2D::Available()) GTEST_SKIP() << "no oneDNN in this build (or TFJOB_CPU_KERNELS=eigen)";
  std::mt19937 rng(13);
  const std::vector<Conv2DGeometry> cases = {Make(2, 14, 14, 32, 3, 3, 32, 1, 1, true),
                                             Make(3, 10, 12, 40, 3, 3, 48, 1, 1, false),
                                             Make(2, 7, 7, 64, 3, 3, 64, 1, 1, true)};
  const bool wino_cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const int threads = ComputeThreads();
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(DirectConv2D::WinogradApplies(cases[i])) << i;
    SetComputeThreads(1 + static_cast<int>(i % 2));
    CheckAgainstTheDefinition(cases[i], rng, "winograd case " + std::to_string(i));
    DirectConv2D conv;
    const Conv2DGeometry& g = cases[i];
    std::vector<float> x(g.batch * g.height * g.width * g.channels, 0.5f), k(9 * g.channels * g.filters, 0.25f),
        y(g.batch * g.out_h * g.out_w * g.filters);
    ASSERT_TRUE(conv.Forward(g, x.data(), k.data(), nullptr, false, y.data()).ok());
    if (wino_cpu) {
      EXPECT_NE(conv.ForwardKernel().find("wino"), std::string::npos) << conv.ForwardKernel();
    }
  }
  SetComputeThreads(threads);
  // Too few products per image, or 16 channels: the direct kernels.
  EXPECT_FALSE(DirectConv2D::WinogradApplies(Make(64, 7, 7, 32, 3, 3, 32, 1, 1, true)));
  EXPECT_FALSE(DirectConv2D::WinogradApplies(Make(64, 28, 28, 16, 3, 3, 16, 1, 1, true)));
  EXPECT_FALSE(DirectConv2D::WinogradApplies(Make(2, 14, 14, 32, 3, 3, 32, 2, 2, true)));
  UseDirectConvolutionsOnly();
  EXPECT_FALSE(DirectConv2D::WinogradApplies(cases[0]));
  CheckAgainstTheDefinition(cases[0], rng, "direct only");
  DirectConv2D conv;
  std::vector<float> x(2 * 14 * 14 * 32, 0.5f), k(9 * 32 * 32, 0.25f), y(2 * 14 * 14 * 32);
  ASSERT_TRUE(conv.Forward(cases[0], x.data(), k.data(), nullptr, false, y.data()).ok());
  EXPECT_EQ(conv.ForwardKernel().find("wino"), std::string::npos) << conv.ForwardKernel();
  UseDirectConvolutionsOnly(false);
}

// 3x3 "same" with 16 or 32 channels and filters, where oneDNN's Winograd
// does not apply: winograd's kernels (conv2d_winograd.h), F(4x4, 3x3) and
// F(2x2, 3x3), on a CPU with AVX-512F. Sizes the tiles divide and ones
// they do not (part-empty tiles, a single pixel), channels and filters
// apart both ways, tiles that fill a chunk and ones that do not, one and
// two threads; forward with bias and ReLU, and both gradients, against the
// definition summed in double.
TEST(DirectConv2DTest, OwnWinogradMatchesTheDefinitionWhereItApplies) {
  if (!DirectConv2D::Available()) GTEST_SKIP() << "no oneDNN in this build (or TFJOB_CPU_KERNELS=eigen)";
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "this CPU has no AVX-512F: the kernels do not apply";
  std::mt19937 rng(17);
  const std::vector<Conv2DGeometry> cases = {
      Make(2, 14, 14, 16, 3, 3, 16, 1, 1, true), Make(3, 7, 7, 16, 3, 3, 32, 1, 1, true),
      Make(2, 5, 9, 32, 3, 3, 16, 1, 1, true),   Make(4, 7, 7, 32, 3, 3, 32, 1, 1, true),
      Make(3, 1, 1, 16, 3, 3, 16, 1, 1, true),   Make(1, 6, 3, 32, 3, 3, 32, 1, 1, true)};
  const int threads = ComputeThreads();
  for (size_t i = 0; i < cases.size(); ++i) {
    const Conv2DGeometry& g = cases[i];
    ASSERT_TRUE(DirectConv2D::OwnWinogradApplies(g)) << i;
    ASSERT_FALSE(DirectConv2D::WinogradApplies(g)) << i;
    for (int tile : {2, 4}) {
      winograd::UseTile(tile);
      for (int t : {1, 2}) {
        SetComputeThreads(t);
        CheckAgainstTheDefinition(g, rng,
                                  "own winograd case " + std::to_string(i) + " tile " + std::to_string(tile) +
                                      " threads " + std::to_string(t));
      }
      DirectConv2D conv;
      std::vector<float> x(g.batch * g.height * g.width * g.channels, 0.5f), k(9 * g.channels * g.filters, 0.25f),
          y(g.batch * g.out_h * g.out_w * g.filters);
      ASSERT_TRUE(conv.Forward(g, x.data(), k.data(), nullptr, false, y.data()).ok());
      const std::string m = std::to_string(tile);
      EXPECT_EQ(conv.ForwardKernel(), "winograd_" + m + "x" + m + "_3x3:own");
    }
    winograd::UseTile(0);
    EXPECT_EQ(winograd::Tile(g), g.height >= 4 && g.width >= 4 ? 4 : 2) << i;
  }
  SetComputeThreads(threads);
  // Not "same", a stride, other channel counts, oneDNN's Winograd: not these.
  EXPECT_FALSE(DirectConv2D::OwnWinogradApplies(Make(2, 14, 14, 16, 3, 3, 16, 1, 1, false)));
  EXPECT_FALSE(DirectConv2D::OwnWinogradApplies(Make(2, 14, 14, 16, 3, 3, 16, 2, 2, true)));
  EXPECT_FALSE(DirectConv2D::OwnWinogradApplies(Make(2, 14, 14, 24, 3, 3, 16, 1, 1, true)));
  EXPECT_FALSE(DirectConv2D::OwnWinogradApplies(Make(2, 14, 14, 16, 5, 5, 16, 1, 1, true)));
  EXPECT_FALSE(DirectConv2D::OwnWinogradApplies(Make(2, 28, 28, 32, 3, 3, 32, 1, 1, true)));
  UseDirectConvolutionsOnly();
  EXPECT_FALSE(DirectConv2D::OwnWinogradApplies(cases[0]));
  DirectConv2D conv;
  std::vector<float> x(2 * 14 * 14 * 16, 0.5f), k(9 * 16 * 16, 0.25f), y(2 * 14 * 14 * 16);
  ASSERT_TRUE(conv.Forward(cases[0], x.data(), k.data(), nullptr, false, y.data()).ok());
  EXPECT_NE(conv.ForwardKernel(), "winograd_2x2_3x3:own");
  UseDirectConvolutionsOnly(false);
}

// Strides 1 and 2, few input channels and 16..64 filters take small_conv's own
// kernels (conv2d_small.h): one and several filter vectors, 4-pixel steps
// with a remainder, "same" padding, taps over several weight-gradient
// passes, bfloat16, and the batch split over two threads. A kernel with
// more taps than small_conv takes stays with oneDNN and matches too.
TEST(DirectConv2DTest, FewInputChannelsMatchTheDefinitionThroughTheirOwnKernels) {
  if (!DirectConv2D::Available()) GTEST_SKIP() << "no oneDNN in this build (or TFJOB_CPU_KERNELS=eigen)";
  const bool avx512 = __builtin_cpu_supports("avx512f");
  std::mt19937 rng(12);
  const std::vector<Conv2DGeometry> small = {
      Make(2, 7, 6, 1, 3, 3, 16, 1, 1, false), Make(3, 9, 10, 1, 3, 3, 32, 1, 1, true),
      Make(2, 6, 5, 3, 3, 3, 48, 1, 1, false), Make(1, 5, 7, 4, 2, 2, 64, 1, 1, true),
      Make(2, 4, 9, 1, 1, 5, 32, 1, 1, false),
      // Strides: a residual network's stem ("same", 28 -> 14 with the
      // padding after), odd sizes, "valid", strides apart.
      Make(2, 28, 28, 1, 3, 3, 16, 2, 2, true), Make(2, 9, 7, 1, 3, 3, 32, 2, 2, true),
      Make(2, 9, 8, 3, 3, 3, 16, 2, 2, false), Make(3, 7, 9, 2, 3, 2, 48, 1, 2, true)};
  for (size_t i = 0; i < small.size(); ++i) {
    EXPECT_EQ(small_conv::Applies(small[i]), avx512) << i;
    CheckAgainstTheDefinition(small[i], rng, "small case " + std::to_string(i));
    CheckAgainstTheDefinition(small[i], rng, "small case " + std::to_string(i) + " bfloat16", true);
  }
  const Conv2DGeometry many_taps = Make(2, 8, 9, 2, 5, 5, 32, 1, 1, true);
  EXPECT_FALSE(small_conv::Applies(many_taps));
  EXPECT_FALSE(small_conv::Applies(Make(2, 9, 9, 1, 3, 3, 16, 3, 3, true)));
  EXPECT_FALSE(small_conv::AppliesPooled(Make(2, 28, 28, 1, 3, 3, 16, 2, 2, true), 2, 2));
  CheckAgainstTheDefinition(many_taps, rng, "many taps");
  const int threads = ComputeThreads();
  SetComputeThreads(2);
  CheckAgainstTheDefinition(Make(32, 28, 28, 1, 3, 3, 32, 1, 1, false), rng, "MNIST's first layer, two threads");
  SetComputeThreads(threads);
}

// A max pooling whose windows tile the output, fused into the convolution
// (ForwardMaxPool, which never stores the convolution's output): the
// pooled values are exactly the pooling of Forward's output, each window's
// winner is its first tap holding the maximum (ties are made on purpose:
// ReLU's zeros, and an image of zeros whose outputs all equal the bias),
// MaxPoolGradient puts the pooled gradient on the winners alone (none where
// a ReLU window's maximum is 0) and the backward passes run after it as
// after Forward; in float32, and in bfloat16 where this CPU has its path
// (both then round the input, kernel and gradient alike).
TEST(DirectConv2DTest, AFusedMaxPoolingIsExactlyThePoolingOfTheConvolution) {
  if (!DirectConv2D::Available()) GTEST_SKIP() << "no oneDNN in this build (or TFJOB_CPU_KERNELS=eigen)";
  if (!__builtin_cpu_supports("avx512f")) {
    EXPECT_FALSE(DirectConv2D::CanPool(Make(2, 9, 10, 1, 3, 3, 32, 1, 1, false), 2, 2));
    GTEST_SKIP() << "the fused kernels need AVX-512F, which this CPU lacks";
  }
  struct Case {
    Conv2DGeometry g;
    int64_t ph, pw;
    bool relu;
    int threads;
  };
  const std::vector<Case> cases = {
      {Make(3, 9, 10, 1, 3, 3, 32, 1, 1, false), 2, 2, true, 1},   // 7x8: the last row no window covers
      {Make(2, 8, 8, 2, 3, 3, 16, 1, 1, true), 2, 2, false, 1},    // "same", no activation
      {Make(2, 11, 9, 1, 3, 3, 48, 1, 1, false), 3, 2, true, 1},   // 9x7 in 3x2 windows
      {Make(32, 28, 28, 1, 3, 3, 32, 1, 1, false), 2, 2, true, 2}  // MNIST's, two threads
  };
  EXPECT_FALSE(DirectConv2D::CanPool(cases[0].g, 8, 2));    // taller than the output
  EXPECT_FALSE(DirectConv2D::CanPool(cases[3].g, 17, 15));  // more taps than a byte names
  std::vector<float> none(16);
  std::vector<uint8_t> no_winners(16);
  DirectConv2D never_ran;
  EXPECT_EQ(
      never_ran
          .BackwardWeightsPooled(cases[0].g, 2, 2, none.data(), no_winners.data(), none.data(), none.data(), nullptr)
          .code(),
      Code::kFailedPrecondition);
  std::mt19937 rng(21);
  const int threads = ComputeThreads();
  std::vector<Precision> precisions = {Precision::kFloat32};
  if (CpuPathFor(Precision::kBfloat16).ok()) precisions.push_back(Precision::kBfloat16);
  for (size_t run = 0; run < cases.size() * precisions.size(); ++run) {
    const size_t ci = run % cases.size();
    const Case& c = cases[ci];
    PrecisionScope scope(precisions[run / cases.size()]);
    SCOPED_TRACE(std::string(PrecisionName(ComputePrecision())));
    const Conv2DGeometry& g = c.g;
    SetComputeThreads(c.threads);
    ASSERT_TRUE(DirectConv2D::CanPool(g, c.ph, c.pw)) << ci;
    const int64_t f = g.filters, ph_n = g.out_h / c.ph, pw_n = g.out_w / c.pw,
                  taps = g.kernel_h * g.kernel_w * g.channels;
    std::vector<float> x = RandomValues(static_cast<size_t>(g.batch * g.height * g.width * g.channels), rng);
    std::fill(x.begin(), x.begin() + g.height * g.width * g.channels, 0.f);  // image 0: every output the bias
    const std::vector<float> kernel = RandomValues(static_cast<size_t>(taps * f), rng);
    std::vector<float> bias = RandomValues(static_cast<size_t>(f), rng);
    bias[0] = 0.5f, bias[1] = -0.5f;
    std::vector<float> y(static_cast<size_t>(g.batch * g.out_h * g.out_w * f));
    std::vector<float> pooled(static_cast<size_t>(g.batch * ph_n * pw_n * f));
    std::vector<uint8_t> winners(pooled.size());
    DirectConv2D plain, fused;
    ASSERT_TRUE(plain.Forward(g, x.data(), kernel.data(), bias.data(), c.relu, y.data()).ok()) << ci;
    // A bfloat16 layer's output is rounded to it (by the model, after the
    // layer): a pooling apart compares those values.
    RoundTo(ComputePrecision(), y.data(), static_cast<int64_t>(y.size()));
    ASSERT_TRUE(
        fused.ForwardMaxPool(g, x.data(), kernel.data(), bias.data(), c.relu, c.ph, c.pw, pooled.data(), winners.data())
            .ok())
        << ci;
    std::vector<float> dpooled = RandomValues(pooled.size(), rng);
    std::vector<float> want_dz(y.size(), 0.f), dz(y.size(), -1.f);
    int64_t mismatches = 0, ties = 0;
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t py = 0; py < ph_n; ++py) {
        for (int64_t px = 0; px < pw_n; ++px) {
          for (int64_t k = 0; k < f; ++k) {
            const size_t at = static_cast<size_t>(((b * ph_n + py) * pw_n + px) * f + k);
            auto pos = [&](int64_t t) {
              return static_cast<size_t>(((b * g.out_h + py * c.ph + t / c.pw) * g.out_w + px * c.pw + t % c.pw) * f +
                                         k);
            };
            int64_t best = 0;
            for (int64_t t = 1; t < c.ph * c.pw; ++t) {
              if (y[pos(t)] > y[pos(best)]) best = t;
              ties += y[pos(t)] == y[pos(0)];
            }
            const bool passes = !c.relu || y[pos(best)] > 0.f;  // a ReLU window's maximum of 0 passes nothing
            mismatches += pooled[at] != y[pos(best)] || winners[at] != (passes ? best : small_conv::kNoWinner);
            if (passes) want_dz[pos(best)] = dpooled[at];
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << ci;
    EXPECT_GT(ties, 0) << ci;
    DirectConv2D::MaxPoolGradient(g, c.ph, c.pw, winners.data(), dpooled.data(), dz.data());
    EXPECT_EQ(dz, want_dz) << ci;
    // The weight gradient from the pooled gradient (dL/dy made in registers)
    // is the one from the stored dL/dy, and so is the plain layer's.
    std::vector<float> dk(static_cast<size_t>(taps * f)), db(static_cast<size_t>(f));
    std::vector<float> want_dk(dk.size()), want_db(db.size()), stored_dk(dk.size()), stored_db(db.size());
    const Status pooled_backward =
        fused.BackwardWeightsPooled(g, c.ph, c.pw, x.data(), winners.data(), dpooled.data(), dk.data(), db.data());
    if (f > 32) {  // wider layers store dL/dy: the caller's fallback below
      EXPECT_EQ(pooled_backward.code(), Code::kUnimplemented) << ci;
      ASSERT_TRUE(fused.BackwardWeights(g, x.data(), dz.data(), dk.data(), db.data()).ok()) << ci;
    } else {
      ASSERT_TRUE(pooled_backward.ok()) << ci << " " << pooled_backward;
    }
    ASSERT_TRUE(fused.BackwardWeights(g, x.data(), dz.data(), stored_dk.data(), stored_db.data()).ok()) << ci;
    ASSERT_TRUE(plain.BackwardWeights(g, x.data(), dz.data(), want_dk.data(), want_db.data()).ok()) << ci;
    EXPECT_EQ(dk, want_dk) << ci;
    EXPECT_EQ(db, want_db) << ci;
    EXPECT_EQ(stored_dk, want_dk) << ci;
    EXPECT_EQ(stored_db, want_db) << ci;
    std::vector<float> dx(x.size()), want_dx(x.size());
    ASSERT_TRUE(fused.BackwardData(g, dz.data(), kernel.data(), dx.data()).ok()) << ci;
    ASSERT_TRUE(plain.BackwardData(g, dz.data(), kernel.data(), want_dx.data()).ok()) << ci;
    EXPECT_EQ(dx, want_dx) << ci;
  }
  SetComputeThreads(threads);
}

TEST(DirectConv2DTest, ABackwardWithoutItsForwardIsAnErrorNotACrash) {
  DirectConv2D conv;
  const Conv2DGeometry g = Make(1, 4, 4, 1, 3, 3, 2, 1, 1, false);
  std::vector<float> x(16), dy(8), dk(18), dx(16);
  EXPECT_NE(conv.BackwardWeights(g, x.data(), dy.data(), dk.data(), nullptr).code(), Code::kOk);
  EXPECT_NE(conv.BackwardData(g, dy.data(), dk.data(), dx.data()).code(), Code::kOk);
}

}  // namespace
}  // namespace tfjob
