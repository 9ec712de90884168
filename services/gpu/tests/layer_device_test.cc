// The CNN layers on the GPU against the same layers on the CPU: Conv2D,
// max, average and global average pooling, BatchNormalization (training and
// inference, with and without gamma and beta), Dropout and Flatten, each
// forward and backward from the same values, then a whole training step of
// a small CNN; and the backend's window, moments and broadcast kernels
// against kernel_math.h's arithmetic looped on the host. Device results within 1e-4 relative of the host's (matrix
// products and reductions run in another order there); where no GPU is
// visible every test skips and says why. The kernels' index arithmetic is
// checked on the host everywhere by kernel_math_test.
#include <gtest/gtest.h>

#include <memory>

#include "services/gpu/kernel_math.h"
#include "services/gpu/tests/device_fixture.h"
#include "services/model/layers.h"
#include "services/model/layer_shapes.h"
#include "services/model/model.h"
#include "services/model/optimizers.h"

namespace tfjob::gpu {
namespace {

using model::LayerSpec;
using model::LayerType;
using model::Padding;

std::unique_ptr<model::Layer> Built(const LayerSpec& spec, const Shape& in) {
  auto layer = model::MakeLayer(spec);
  EXPECT_TRUE(layer.ok()) << layer.status();
  if (!layer.ok()) return nullptr;
  auto out = (*layer)->Build(in, DType::kFloat32);
  EXPECT_TRUE(out.ok()) << spec.name << ": " << out.status();
  return out.ok() ? std::move(*layer) : nullptr;
}

LayerSpec Windowed(LayerType type, int64_t k, int64_t stride, Padding padding, int64_t filters = 0) {
  LayerSpec l;
  l.type = type;
  l.name = "layer";
  l.kernel_size = {k, k};
  l.strides = {stride, stride};
  l.padding = padding;
  l.filters = filters;
  return l;
}

class LayerDeviceTest : public DeviceTest {
 protected:
  // One forward (training) and backward pass of two instances of `spec`,
  // one on each side, from the same input, parameters and output gradient.
  void ExpectSamePasses(const LayerSpec& spec, const Shape& in, const std::string& what) {
    auto cpu = Built(spec, in), gpu = Built(spec, in);
    ASSERT_TRUE(cpu && gpu) << what;
    std::vector<Tensor> params, gparams;
    uint32_t seed = 50;
    for (const model::VariableSpec& v : cpu->Variables()) {
      // Positive values for variances; any for the rest.
      const bool variance = v.name.find("variance") != std::string::npos;
      params.push_back(Random(v.shape, variance ? 0.5f : -1.f, variance ? 2.f : 1.f, seed++));
      gparams.push_back(OnGpu(params.back()));
    }
    Shape batch_in{3};
    batch_in.insert(batch_in.end(), in.begin(), in.end());
    const Tensor x = Random(batch_in, -1, 1, 60);
    for (bool training : {true, false}) {
      auto y = cpu->Forward(params, x, training);
      auto gy = gpu->Forward(gparams, OnGpu(x), training);
      ExpectClose(gy, y, 1e-4f, what + (training ? " forward (training)" : " forward (inference)"));
      if (!training || !y.ok() || !gy.ok()) continue;
      // Uploaded before the CPU layer runs: a layer owns the dy it is
      // handed, and the CPU's BatchNormalization writes dx into it.
      const Tensor dy = Random(y->shape(), -1, 1, 61);
      const Tensor gdy = OnGpu(dy);
      std::vector<model::Gradient> grads(params.size()), ggrads(params.size());
      auto dx = cpu->Backward(params, dy, true, grads);
      auto gdx = gpu->Backward(gparams, gdy, true, ggrads);
      ExpectClose(gdx, dx, 1e-4f, what + " dx");
      for (size_t v = 0; v < grads.size(); ++v) {
        EXPECT_EQ(ggrads[v].delta, grads[v].delta) << what;
        ExpectClose(ggrads[v].dense, grads[v].dense, 1e-4f, what + " gradient of " + cpu->Variables()[v].name);
      }
    }
  }
};

// The backend's window kernels against kernel_math.h's functions looped on
// the host (which kernel_math_test checks against the CPU layers). Copies,
// selections and sums of the same terms in the same order agree to 1e-6
// absolute (the same bits, unless a multiply-add was fused on one side).
TEST_F(LayerDeviceTest, WindowKernelsComputeTheHostArithmetic) {
  struct Case {
    int64_t h, w, c, k, s;
    Padding padding;
  };
  for (const Case& k : {Case{7, 6, 3, 3, 1, Padding::kValid}, Case{7, 6, 3, 3, 2, Padding::kSame},
                        Case{8, 5, 2, 2, 2, Padding::kValid}, Case{6, 6, 4, 3, 1, Padding::kSame}}) {
    const std::string what = std::to_string(k.h) + "x" + std::to_string(k.w) + " window " + std::to_string(k.k) +
                             " stride " + std::to_string(k.s);
    const int64_t n = 2;
    const auto gh = model::internal::Geometry(k.h, k.k, k.s, k.padding);
    const auto gw = model::internal::Geometry(k.w, k.k, k.s, k.padding);
    const math::Window g{n, k.h, k.w, k.c, k.k, k.k, k.s, k.s, gh.out, gw.out, gh.pad_before, gw.pad_before};
    device::Window2D w;
    w.batch = n, w.height = k.h, w.width = k.w, w.channels = k.c, w.window_h = w.window_w = k.k;
    w.stride_h = w.stride_w = k.s, w.out_h = g.oh, w.out_w = g.ow, w.pad_top = g.pt, w.pad_left = g.pl;
    const Tensor x = Random({n, k.h, k.w, k.c}, -1, 1, 101);
    const Tensor gx = OnGpu(x);
    const int64_t rows = n * g.oh * g.ow, kk = k.k * k.k * k.c;

    Tensor patches = *Tensor::Create(DType::kFloat32, {rows, kk}, kGpu);
    {
      const Status st = backend_->Im2Col(gx, w, patches);
      ASSERT_TRUE(st.ok()) << what << ": " << st;
    }
    Tensor want_patches = Tensor::Zeros(DType::kFloat32, {rows, kk});
    for (int64_t i = 0; i < want_patches.size(); ++i)
      want_patches.data<float>()[i] = math::Im2ColAt(g, x.data<float>(), i);
    ExpectHostClose(OnHost(patches), want_patches, 0, what + " im2col");

    const Tensor dp = Random({rows, kk}, -1, 1, 102);
    Tensor dx = *Tensor::Create(DType::kFloat32, x.shape(), kGpu);
    {
      const Status st = backend_->Col2Im(OnGpu(dp), w, dx);
      ASSERT_TRUE(st.ok()) << what << ": " << st;
    }
    Tensor want_dx = Tensor::Zeros(DType::kFloat32, x.shape());
    for (int64_t i = 0; i < x.size(); ++i) want_dx.data<float>()[i] = math::Col2ImAt(g, dp.data<float>(), i);
    ExpectHostClose(OnHost(dx), want_dx, 0, what + " col2im");

    for (bool max : {true, false}) {
      const std::string pool = what + (max ? " max pool" : " average pool");
      Tensor y = *Tensor::Create(DType::kFloat32, {n, g.oh, g.ow, k.c}, kGpu);
      Tensor arg = *Tensor::Create(DType::kInt64, y.shape(), kGpu);
      {
        const Status st = backend_->Pool2D(max, gx, w, y, max ? &arg : nullptr);
        ASSERT_TRUE(st.ok()) << pool << ": " << st;
      }
      Tensor want_y = Tensor::Zeros(DType::kFloat32, y.shape());
      Tensor want_arg = Tensor::Zeros(DType::kInt64, y.shape());
      for (int64_t i = 0; i < y.size(); ++i) {
        want_y.data<float>()[i] = math::PoolAt(g, max, x.data<float>(), i, want_arg.data<int64_t>() + i);
      }
      ExpectHostClose(OnHost(y), want_y, 0, pool);
      if (max) ExpectHostClose(OnHost(arg), want_arg, 0, pool + " argmax");
      const Tensor dy = Random(y.shape(), -1, 1, 103);
      Tensor pdx = *Tensor::Create(DType::kFloat32, x.shape(), kGpu);
      {
        const Status st = backend_->Pool2DBackward(max, OnGpu(dy), max ? &arg : nullptr, w, pdx);
        ASSERT_TRUE(st.ok()) << pool << ": " << st;
      }
      Tensor want_pdx = Tensor::Zeros(DType::kFloat32, x.shape());
      for (int64_t i = 0; i < x.size(); ++i) {
        want_pdx.data<float>()[i] = math::PoolGradAt(g, max, dy.data<float>(), want_arg.data<int64_t>(), i);
      }
      ExpectHostClose(OnHost(pdx), want_pdx, max ? 0.f : 1e-6f, pool + " backward");
    }
  }

  // Moments, 1 / sqrt(v + eps) and the broadcast, against double sums.
  const Tensor x = Random({300, 7}, -2, 3, 104);
  Tensor mean = *Tensor::Create(DType::kFloat32, {7}, kGpu), var = *Tensor::Create(DType::kFloat32, {7}, kGpu);
  ASSERT_TRUE(backend_->Moments(OnGpu(x), mean, var).ok());
  Tensor want_mean = Tensor::Zeros(DType::kFloat32, {7}), want_var = Tensor::Zeros(DType::kFloat32, {7});
  Tensor want_inv = Tensor::Zeros(DType::kFloat32, {7});
  for (int64_t c = 0; c < 7; ++c) {
    double m = 0, v = 0;
    for (int64_t r = 0; r < 300; ++r) m += x.data<float>()[r * 7 + c];
    m /= 300;
    for (int64_t r = 0; r < 300; ++r) v += (x.data<float>()[r * 7 + c] - m) * (x.data<float>()[r * 7 + c] - m);
    v /= 300;
    want_mean.data<float>()[c] = static_cast<float>(m);
    want_var.data<float>()[c] = static_cast<float>(v);
    want_inv.data<float>()[c] = static_cast<float>(1 / std::sqrt(v + 1e-3));
  }
  ExpectHostClose(OnHost(mean), want_mean, 1e-5f, "moments: mean");
  ExpectHostClose(OnHost(var), want_var, 1e-5f, "moments: variance");
  Tensor inv = *Tensor::Create(DType::kFloat32, {7}, kGpu);
  ASSERT_TRUE(backend_->InverseSqrt(var, 1e-3f, inv).ok());
  ExpectHostClose(OnHost(inv), want_inv, 1e-5f, "inverse square root");
  Tensor wide = *Tensor::Create(DType::kFloat32, {2, 5, 7}, kGpu);
  const Tensor narrow = Random({2, 7}, -1, 1, 105);
  ASSERT_TRUE(backend_->BroadcastAxis(OnGpu(narrow), 2, 5, 7, 0.5f, wide).ok());
  const Tensor got = OnHost(wide);
  for (int64_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got.data<float>()[i], narrow.data<float>()[(i / 35) * 7 + i % 7] * 0.5f) << "broadcast element " << i;
  }
  // Geometry a layer could not have computed is refused, not launched.
  device::Window2D bad;
  bad.batch = 1, bad.height = 4, bad.width = 4, bad.channels = 1, bad.out_h = 0, bad.out_w = 2;
  Tensor any = *Tensor::Create(DType::kFloat32, {1, 4, 4, 1}, kGpu);
  EXPECT_EQ(backend_->Pool2D(false, any, bad, any, nullptr).code(), Code::kInvalidArgument);
}

TEST_F(LayerDeviceTest, Conv2DMatchesTheCpu) {
  for (Padding padding : {Padding::kValid, Padding::kSame}) {
    for (int64_t stride : {1, 2}) {
      LayerSpec conv = Windowed(LayerType::kConv2D, 3, stride, padding, 5);
      conv.activation = model::Activation::kRelu;
      ExpectSamePasses(conv, {9, 8, 3}, "Conv2D stride " + std::to_string(stride));
      conv.use_bias = false;
      conv.activation = model::Activation::kLinear;
      ExpectSamePasses(conv, {9, 8, 3}, "Conv2D without bias, stride " + std::to_string(stride));
    }
  }
}

TEST_F(LayerDeviceTest, PoolingMatchesTheCpu) {
  for (LayerType type : {LayerType::kMaxPooling2D, LayerType::kAveragePooling2D}) {
    for (Padding padding : {Padding::kValid, Padding::kSame}) {
      ExpectSamePasses(Windowed(type, 2, 2, padding), {7, 6, 4}, "pool 2 stride 2");
      ExpectSamePasses(Windowed(type, 3, 1, padding), {7, 6, 4}, "pool 3 stride 1 (overlapping)");
    }
  }
  LayerSpec global;
  global.type = LayerType::kGlobalAveragePooling2D;
  global.name = "global";
  for (bool keepdims : {false, true}) {
    global.keepdims = keepdims;
    ExpectSamePasses(global, {5, 6, 4}, keepdims ? "global average, keepdims" : "global average");
  }
}

TEST_F(LayerDeviceTest, BatchNormalizationMatchesTheCpu) {
  LayerSpec bn;
  bn.type = LayerType::kBatchNormalization;
  bn.name = "bn";
  ExpectSamePasses(bn, {4, 4, 6}, "BatchNormalization on images");
  ExpectSamePasses(bn, {10}, "BatchNormalization on features");
  bn.scale = false;
  bn.center = false;
  ExpectSamePasses(bn, {10}, "BatchNormalization without gamma and beta");
}

TEST_F(LayerDeviceTest, DropoutDropsTheSameUnitsAsTheCpu) {
  LayerSpec drop;
  drop.type = LayerType::kDropout;
  drop.name = "dropout";
  drop.rate = 0.4;
  drop.seed = 3;
  auto cpu = Built(drop, {50}), gpu = Built(drop, {50});
  ASSERT_TRUE(cpu && gpu);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = Random({4, 50}, -1, 1, 70 + static_cast<uint32_t>(step));
    auto y = cpu->Forward({}, x, true);
    auto gy = gpu->Forward({}, OnGpu(x), true);
    ExpectClose(gy, y, 0, "Dropout forward, step " + std::to_string(step));
    // Uploaded before the CPU layer runs: a layer owns the dy it is handed
    // and the CPU one scales it in place.
    const Tensor dy = Random({4, 50}, -1, 1, 80);
    const Tensor gdy = OnGpu(dy);
    auto dx = cpu->Backward({}, dy, true, {});
    auto gdx = gpu->Backward({}, gdy, true, {});
    ExpectClose(gdx, dx, 0, "Dropout backward");
  }
  auto inference = gpu->Forward({}, OnGpu(Random({4, 50})), false);
  ExpectClose(inference, Random({4, 50}), 0, "Dropout at inference");
}

TEST_F(LayerDeviceTest, FlattenAndReshapeKeepTheTensorOnTheDevice) {
  LayerSpec flat;
  flat.type = LayerType::kFlatten;
  flat.name = "flatten";
  auto layer = Built(flat, {3, 4, 2});
  ASSERT_TRUE(layer);
  const Tensor x = Random({2, 3, 4, 2});
  auto y = layer->Forward({}, OnGpu(x), true);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->device(), kGpu);
  EXPECT_EQ(y->shape(), (Shape{2, 24}));
  auto dx = layer->Backward({}, *y, true, {});
  ExpectClose(dx, x, 0, "Flatten backward");
}

// The MNIST CNN's shape with every new layer: forward, loss, backward and an
// Adam update (moving statistics by their deltas) on each side, two steps.
TEST_F(LayerDeviceTest, ACnnTrainingStepMatchesTheCpuStep) {
  model::ModelSpec spec;
  spec.input_shape = {12, 12};
  LayerSpec reshape;
  reshape.type = LayerType::kReshape;
  reshape.name = "reshape";
  reshape.target_shape = {12, 12, 1};
  LayerSpec conv = Windowed(LayerType::kConv2D, 3, 1, Padding::kValid, 6);
  conv.name = "conv";
  conv.activation = model::Activation::kRelu;
  LayerSpec bn;
  bn.type = LayerType::kBatchNormalization;
  bn.name = "bn";
  LayerSpec pool = Windowed(LayerType::kMaxPooling2D, 2, 2, Padding::kValid);
  pool.name = "pool";
  LayerSpec drop;
  drop.type = LayerType::kDropout;
  drop.name = "dropout";
  drop.rate = 0.25;
  LayerSpec flat;
  flat.type = LayerType::kFlatten;
  flat.name = "flatten";
  LayerSpec out;
  out.type = LayerType::kDense;
  out.name = "out";
  out.units = 4;
  spec.layers = {reshape, conv, bn, pool, drop, flat, out};
  model::LossSpec loss;
  loss.type = model::LossType::kSparseCategoricalCrossentropy;
  loss.from_logits = true;
  auto cpu = model::Model::Create(spec, loss);
  auto gpu = model::Model::Create(spec, loss);
  ASSERT_TRUE(cpu.ok() && gpu.ok()) << cpu.status();
  ASSERT_TRUE((*gpu)->CheckDeviceSupport().ok()) << (*gpu)->CheckDeviceSupport();

  model::OptimizerSpec adam;
  adam.type = model::OptimizerType::kAdam;
  adam.learning_rate = 0.01;
  model::Optimizer opt(adam);
  std::vector<Tensor> values = (*cpu)->InitialValues(5), gvalues;
  std::vector<model::SlotState> slots, gslots;
  for (const Tensor& v : values) {
    gvalues.push_back(OnGpu(v));
    slots.push_back(opt.CreateSlots(v));
    model::SlotState g = opt.CreateSlots(v);
    for (Tensor& s : g.slots) s = OnGpu(s);
    gslots.push_back(std::move(g));
  }
  const int64_t batch = 8;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < batch; ++i) y.push_back(i % 4);
  const Tensor labels = *Tensor::FromVector({batch}, y);
  for (int step = 0; step < 2; ++step) {
    const Tensor x = Random({batch, 12, 12}, 0, 1, 90 + static_cast<uint32_t>(step));
    auto c = (*cpu)->ComputeGradients(values, x, labels);
    ASSERT_TRUE(c.ok()) << c.status();
    Tensor stats = *Tensor::Create(DType::kFloat32, {4}, kGpu);
    auto targets = (*gpu)->Targets(labels);
    ASSERT_TRUE(targets.ok()) << targets.status();
    auto g = (*gpu)->ComputeGradientsOnDevice(gvalues, OnGpu(x), OnGpu(*targets),
                                              {model::MetricType::kSparseCategoricalAccuracy}, stats);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_EQ(g->size(), c->grads.size());
    const Tensor s = OnHost(stats);
    EXPECT_NEAR(s.data<float>()[0] / batch, c->loss, 1e-4f * (1 + std::fabs(c->loss))) << "loss, step " << step;
    for (size_t v = 0; v < values.size(); ++v) {
      const std::string name = (*cpu)->variables()[v].name;
      EXPECT_EQ((*g)[v].delta, c->grads[v].delta) << name;
      ExpectClose((*g)[v].dense, c->grads[v].dense, 1e-3f, name + " gradient, step " + std::to_string(step));
      ASSERT_TRUE(opt.Apply(values[v], c->grads[v], slots[v]).ok());
      ASSERT_TRUE(opt.Apply(gvalues[v], (*g)[v], gslots[v]).ok()) << name;
      ExpectClose(gvalues[v], values[v], 1e-3f, name + " after step " + std::to_string(step));
    }
  }
}

}  // namespace
}  // namespace tfjob::gpu
