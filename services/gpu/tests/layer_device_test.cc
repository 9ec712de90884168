// The CNN layers on the GPU against the same layers on the CPU: Conv2D,
// max, average and global average pooling, BatchNormalization (training and
// inference, with and without gamma and beta), Dropout and Flatten, each
// forward and backward from the same values, then a whole training step of
// a small CNN. Device results within 1e-4 relative of the host's (matrix
// products and reductions run in another order there); where no GPU is
// visible every test skips and says why. The kernels' index arithmetic is
// checked on the host everywhere by kernel_math_test.
#include <gtest/gtest.h>

#include <memory>

#include "services/gpu/tests/device_fixture.h"
#include "services/model/layers.h"
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
      const Tensor dy = Random(y->shape(), -1, 1, 61);
      std::vector<model::Gradient> grads(params.size()), ggrads(params.size());
      auto dx = cpu->Backward(params, dy, true, grads);
      auto gdx = gpu->Backward(gparams, OnGpu(dy), true, ggrads);
      ExpectClose(gdx, dx, 1e-4f, what + " dx");
      for (size_t v = 0; v < grads.size(); ++v) {
        EXPECT_EQ(ggrads[v].delta, grads[v].delta) << what;
        ExpectClose(ggrads[v].dense, grads[v].dense, 1e-4f, what + " gradient of " + cpu->Variables()[v].name);
      }
    }
  }
};

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
    const Tensor dy = Random({4, 50}, -1, 1, 80);
    auto dx = cpu->Backward({}, dy, true, {});
    auto gdx = gpu->Backward({}, OnGpu(dy), true, {});
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
