// Every operation of the CUDA backend against the CPU's, on the same inputs:
// element-wise results to 1e-5 relative, matrix products and everything
// built on them to 1e-4. Then layers, losses, metrics, optimizers and a
// whole training step of a model. Where no GPU is visible every test here
// skips and says why (the kernels' arithmetic is still checked on the host
// by kernel_math_test).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "services/gpu/gpu.h"
#include "services/gpu/tests/device_fixture.h"
#include "services/model/activation.h"
#include "services/model/losses.h"
#include "services/model/metrics.h"
#include "services/model/model.h"
#include "services/model/optimizers.h"
#include "services/tensor/backend.h"
#include "services/tensor/ops.h"

namespace tfjob::gpu {
namespace {

TEST_F(DeviceTest, MatMulEveryTransposeMatchesTheCpu) {
  const Tensor a = Random({37, 53}, -1, 1, 1), b = Random({53, 29}, -1, 1, 2);
  const Tensor at = *ops::Transpose(a), bt = *ops::Transpose(b);
  const Tensor ga = OnGpu(a), gb = OnGpu(b), gat = OnGpu(at), gbt = OnGpu(bt);
  ExpectClose(ops::MatMul(ga, gb), ops::MatMul(a, b), 1e-4f, "a b");
  ExpectClose(ops::MatMul(gat, gb, true, false), ops::MatMul(at, b, true, false), 1e-4f, "a^T b");
  ExpectClose(ops::MatMul(ga, gbt, false, true), ops::MatMul(a, bt, false, true), 1e-4f, "a b^T");
  ExpectClose(ops::MatMul(gat, gbt, true, true), ops::MatMul(at, bt, true, true), 1e-4f, "a^T b^T");
  ExpectClose(ops::Transpose(ga), ops::Transpose(a), 0, "transpose");
  // Shapes are checked before anything is queued.
  EXPECT_EQ(ops::MatMul(ga, ga).status().code(), Code::kInvalidArgument);
  // Host and device operands do not mix.
  EXPECT_EQ(ops::MatMul(ga, b).status().code(), Code::kInvalidArgument);
}

TEST_F(DeviceTest, ElementwiseOpsMatchTheCpu) {
  const Tensor a = Random({6, 5, 4}, 0.1f, 2.f, 3), b = Random({6, 5, 4}, 0.1f, 2.f, 4);
  const Tensor row = Random({5, 4}, 0.5f, 1.5f, 5), scalar = *Tensor::FromVector({1}, std::vector<float>{1.5f});
  const Tensor ga = OnGpu(a);
  for (const Tensor* rhs : {&b, &row, &scalar}) {
    const Tensor g = OnGpu(*rhs);
    const std::string s = " with rhs " + rhs->DebugString();
    ExpectClose(ops::Add(ga, g), ops::Add(a, *rhs), 1e-5f, "Add" + s);
    ExpectClose(ops::Sub(ga, g), ops::Sub(a, *rhs), 1e-5f, "Sub" + s);
    ExpectClose(ops::Mul(ga, g), ops::Mul(a, *rhs), 1e-5f, "Mul" + s);
    ExpectClose(ops::Div(ga, g), ops::Div(a, *rhs), 1e-5f, "Div" + s);
  }
  EXPECT_EQ(ops::Add(ga, OnGpu(Random({3}))).status().code(), Code::kInvalidArgument);
  ExpectClose(ops::Scale(ga, -2.5f), ops::Scale(a, -2.5f), 1e-5f, "Scale");
  const Tensor signed_a = Random({6, 5, 4}, -3.f, 3.f, 6);
  const Tensor gs = OnGpu(signed_a);
  ExpectClose(ops::Relu(gs), ops::Relu(signed_a), 1e-5f, "Relu");
  ExpectClose(ops::Sigmoid(gs), ops::Sigmoid(signed_a), 1e-5f, "Sigmoid");
  ExpectClose(ops::Tanh(gs), ops::Tanh(signed_a), 1e-5f, "Tanh");
  ExpectClose(ops::Exp(gs), ops::Exp(signed_a), 1e-5f, "Exp");
  ExpectClose(ops::Square(gs), ops::Square(signed_a), 1e-5f, "Square");
  ExpectClose(ops::Log(ga), ops::Log(a), 1e-5f, "Log");
  ExpectClose(ops::Cast(*ops::Cast(gs, DType::kInt64), DType::kFloat32),
              ops::Cast(*ops::Cast(signed_a, DType::kInt64), DType::kFloat32), 0, "Cast both ways");
}

TEST_F(DeviceTest, ReductionsSoftmaxAndArgMaxMatchTheCpu) {
  // 300 along an axis takes the block-per-output kernel; 4 and 5 the serial one.
  for (const Shape& shape : {Shape{4, 5, 3}, Shape{300, 7}, Shape{3, 300}, Shape{2, 300, 5}}) {
    const Tensor a = Random(shape, -2.f, 2.f, 8);
    const Tensor g = OnGpu(a);
    const std::string s = " of " + ShapeString(shape);
    for (int axis = 0; axis < static_cast<int>(shape.size()); ++axis) {
      ExpectClose(ops::ReduceSum(g, axis), ops::ReduceSum(a, axis), 1e-4f,
                  "ReduceSum axis " + std::to_string(axis) + s);
      ExpectClose(ops::ReduceMean(g, axis), ops::ReduceMean(a, axis), 1e-4f, "ReduceMean" + s);
      ExpectClose(ops::ReduceMax(g, axis), ops::ReduceMax(a, axis), 0, "ReduceMax" + s);
    }
    ExpectClose(ops::ReduceSum(g), ops::ReduceSum(a), 1e-4f, "ReduceSum all" + s);
    ExpectClose(ops::ReduceMax(g), ops::ReduceMax(a), 0, "ReduceMax all" + s);
    ExpectClose(ops::Softmax(g), ops::Softmax(a), 1e-5f, "Softmax" + s);
    ExpectClose(ops::LogSoftmax(g), ops::LogSoftmax(a), 1e-5f, "LogSoftmax" + s);
    ExpectClose(ops::ArgMax(g), ops::ArgMax(a), 0, "ArgMax" + s);
  }
}

TEST_F(DeviceTest, GatherScatterAddStackAndConcatMatchTheCpu) {
  const Tensor table = Random({10, 6}, -1, 1, 9);
  const Tensor ids = Ids({3, 0, 9, 3, 7});
  ExpectClose(ops::Gather(OnGpu(table), OnGpu(ids)), ops::Gather(table, ids), 0, "Gather");
  Tensor ref = table.Clone();
  Tensor gref = OnGpu(table);
  const Tensor updates = Random({5, 6}, -1, 1, 10);
  ASSERT_TRUE(ops::ScatterAdd(ref, ids, updates).ok());
  ASSERT_TRUE(ops::ScatterAdd(gref, OnGpu(ids), OnGpu(updates)).ok());  // id 3 twice: accumulates
  ExpectHostClose(OnHost(gref), ref, 1e-5f, "ScatterAdd");
  const Tensor a = Random({2, 3}, -1, 1, 11), b = Random({2, 3}, -1, 1, 12), c = Random({4, 3}, -1, 1, 13);
  ExpectClose(ops::Stack({OnGpu(a), OnGpu(b)}), ops::Stack({a, b}), 0, "Stack");
  ExpectClose(ops::Concat({OnGpu(a), OnGpu(c)}), ops::Concat({a, c}), 0, "Concat");
}

TEST_F(DeviceTest, BiasColumnSumAndActivationGradientsMatchTheCpu) {
  Tensor y = Random({33, 17}, -1, 1, 14);
  const Tensor bias = Random({17}, -1, 1, 15);
  Tensor gy = OnGpu(y);
  ASSERT_TRUE(backend_->BiasAdd(gy, OnGpu(bias)).ok());
  ExpectHostClose(OnHost(gy), *ops::Add(y, bias), 1e-5f, "BiasAdd");
  Tensor sum = *Tensor::Create(DType::kFloat32, {17}, kGpu);
  ASSERT_TRUE(backend_->ColumnSum(gy, sum).ok());
  ExpectHostClose(OnHost(sum), *ops::ReduceSum(*ops::Add(y, bias), 0), 1e-4f, "ColumnSum");
  for (model::Activation act :
       {model::Activation::kRelu, model::Activation::kSigmoid, model::Activation::kTanh, model::Activation::kSoftmax}) {
    const std::string name(model::ActivationName(act));
    Tensor out = Random({9, 11}, -2, 2, 16);
    Tensor gout = OnGpu(out);
    model::ApplyActivation(act, out);
    ASSERT_TRUE(model::Activate(act, gout).ok());
    ExpectHostClose(OnHost(gout), out, 1e-5f, name + " forward");
    Tensor grad = Random({9, 11}, -1, 1, 17);
    Tensor ggrad = OnGpu(grad);
    model::ActivationBackward(act, out, grad);
    ASSERT_TRUE(model::ActivateBackward(act, gout, ggrad).ok());
    ExpectHostClose(OnHost(ggrad), grad, 1e-5f, name + " backward");
  }
}

// Losses and metrics on the device against ComputeLoss and UpdateMetric:
// a model with one Dense layer computes the predictions, the device sums
// land in a stats tensor.
TEST_F(DeviceTest, LossesAndMetricsMatchTheCpu) {
  struct Case {
    model::LossType loss;
    bool from_logits;
    model::MetricType metric;
    bool sparse_labels;
  };
  const std::vector<Case> cases{
      {model::LossType::kSparseCategoricalCrossentropy, true, model::MetricType::kSparseCategoricalAccuracy, true},
      {model::LossType::kSparseCategoricalCrossentropy, false, model::MetricType::kSparseCategoricalAccuracy, true},
      {model::LossType::kCategoricalCrossentropy, true, model::MetricType::kCategoricalAccuracy, false},
      {model::LossType::kCategoricalCrossentropy, false, model::MetricType::kCategoricalAccuracy, false},
      {model::LossType::kBinaryCrossentropy, true, model::MetricType::kBinaryAccuracy, false},
      {model::LossType::kBinaryCrossentropy, false, model::MetricType::kBinaryAccuracy, false},
      {model::LossType::kMeanSquaredError, false, model::MetricType::kAccuracy, false},
  };
  for (const Case& c : cases) {
    model::LossSpec loss;
    loss.type = c.loss;
    loss.from_logits = c.from_logits;
    const std::string what =
        std::string(model::LossName(c.loss)) + (c.from_logits ? " from logits" : " from probabilities");
    const int64_t batch = 16, classes = c.loss == model::LossType::kBinaryCrossentropy ? 1 : 4;
    // Probabilities must be positive (and < 1 for BCE); logits any sign.
    Tensor pred = c.from_logits ? Random({batch, classes}, -3, 3, 18) : Random({batch, classes}, 0.01f, 0.99f, 18);
    Tensor labels;
    if (c.sparse_labels) {
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < batch; ++i) ids.push_back((i * 7) % classes);
      labels = *Tensor::FromVector({batch}, ids);
    } else {
      labels = Tensor::Zeros(DType::kFloat32, {batch, classes});
      for (int64_t i = 0; i < batch; ++i) {
        if (c.loss == model::LossType::kMeanSquaredError) {
          labels.data<float>()[i * classes + (i % classes)] = 0.5f;
        } else {
          labels.data<float>()[i * classes + (i * 3) % classes] =
              (c.loss == model::LossType::kBinaryCrossentropy && i % 2) ? 0.f : 1.f;
        }
      }
    }
    auto want = model::ComputeLoss(loss, pred, labels);
    ASSERT_TRUE(want.ok()) << what << ": " << want.status();
    model::MetricState metric;
    ASSERT_TRUE(model::UpdateMetric(c.metric, pred, labels, c.from_logits, metric).ok());

    // The model's Targets() is what the device compares against.
    model::ModelSpec ms;
    ms.input_shape = {classes};
    model::LayerSpec flat;
    flat.type = model::LayerType::kFlatten;
    flat.name = "flatten";
    ms.layers.push_back(flat);
    auto m = model::Model::Create(ms, loss);
    ASSERT_TRUE(m.ok()) << m.status();
    auto targets = (*m)->Targets(labels);
    ASSERT_TRUE(targets.ok()) << what << ": " << targets.status();
    const device::Loss kind = c.loss == model::LossType::kMeanSquaredError     ? device::Loss::kMeanSquaredError
                              : c.loss == model::LossType::kBinaryCrossentropy ? device::Loss::kBinaryCrossentropy
                                                                               : device::Loss::kCategoricalCrossentropy;
    Tensor stats = *Tensor::Create(DType::kFloat32, {4}, kGpu);
    Tensor grad = *Tensor::Create(DType::kFloat32, pred.shape(), kGpu);
    const Tensor gpred = OnGpu(pred), gt = OnGpu(*targets);
    ASSERT_TRUE(backend_->LossAndGradient(kind, c.from_logits, gpred, gt, grad, stats, 0).ok()) << what;
    const device::Metric mk = c.metric == model::MetricType::kBinaryAccuracy ? device::Metric::kBinary
                              : c.metric == model::MetricType::kAccuracy     ? device::Metric::kEqual
                                                                             : device::Metric::kArgMaxMatch;
    ASSERT_TRUE(backend_->MetricUpdate(mk, c.from_logits, gpred, gt, stats, 2).ok()) << what;
    ExpectHostClose(OnHost(grad), want->grad, 1e-5f, what + " gradient");
    const Tensor s = OnHost(stats);
    EXPECT_NEAR(s.data<float>()[0], want->loss * batch, 1e-5f * std::fabs(want->loss * batch) + 1e-6f) << what;
    EXPECT_EQ(s.data<float>()[1], static_cast<float>(batch)) << what;
    EXPECT_EQ(s.data<float>()[2], static_cast<float>(metric.total)) << what;
    EXPECT_EQ(s.data<float>()[3], static_cast<float>(metric.count)) << what;
  }
}

TEST_F(DeviceTest, OptimizerUpdatesDenseSparseAndMaskedMatchTheCpu) {
  std::vector<model::OptimizerSpec> specs(4);
  specs[0].type = model::OptimizerType::kSGD;
  specs[0].momentum = 0.9;
  specs[0].nesterov = true;
  specs[1].type = model::OptimizerType::kAdagrad;
  specs[2].type = model::OptimizerType::kRMSprop;
  specs[2].momentum = 0.5;
  specs[2].centered = true;
  specs[3].type = model::OptimizerType::kAdam;
  specs[3].amsgrad = true;
  for (const auto& spec : specs) {
    model::Optimizer opt(spec);
    const std::string name(opt.name());
    Tensor var = Random({8, 3}, -1, 1, 19);
    model::SlotState st = opt.CreateSlots(var);
    Tensor gvar = OnGpu(var);
    model::SlotState gst = opt.CreateSlots(var);
    for (Tensor& s : gst.slots) s = OnGpu(s);
    for (int step = 0; step < 3; ++step) {
      const Tensor g = Random({8, 3}, -1, 1, 20 + step);
      ASSERT_TRUE(opt.ApplyDense(var, g, st).ok());
      ASSERT_TRUE(opt.ApplyDense(gvar, OnGpu(g), gst).ok()) << name;
      // Rows 1 and 6 only: sparse on the CPU, sparse and masked on the device.
      const Tensor rows = Ids({1, 6});
      const Tensor values = Random({2, 3}, -1, 1, 30 + step);
      ASSERT_TRUE(opt.ApplySparse(var, rows, values, st).ok());
      if (step % 2 == 0) {
        ASSERT_TRUE(opt.ApplySparse(gvar, OnGpu(rows), OnGpu(values), gst).ok()) << name;
      } else {
        Tensor dense = Tensor::Zeros(DType::kFloat32, {8, 3});
        ASSERT_TRUE(ops::ScatterAdd(dense, rows, values).ok());
        Tensor mask = Tensor::Zeros(DType::kFloat32, {8});
        mask.data<float>()[1] = mask.data<float>()[6] = 1;
        ASSERT_TRUE(opt.ApplyMaskedRows(gvar, OnGpu(dense), OnGpu(mask), gst).ok()) << name;
      }
    }
    EXPECT_EQ(gst.iterations, st.iterations) << name;
    ExpectHostClose(OnHost(gvar), var, 1e-5f, name + " variable");
    for (size_t k = 0; k < st.slots.size(); ++k)
      ExpectHostClose(OnHost(gst.slots[k]), st.slots[k], 1e-5f, name + " slot");
  }
}

model::LayerSpec Dense(const std::string& name, int64_t units, model::Activation act) {
  model::LayerSpec l;
  l.type = model::LayerType::kDense;
  l.name = name;
  l.units = units;
  l.activation = act;
  return l;
}

// One whole training step (forward, loss, metrics, backward, Adam update) of
// an MLP and of an embedding model, on the GPU and on the CPU from the same
// values and batch.
TEST_F(DeviceTest, AWholeTrainingStepMatchesTheCpuStep) {
  model::LossSpec loss;
  loss.type = model::LossType::kSparseCategoricalCrossentropy;
  model::OptimizerSpec adam;
  adam.type = model::OptimizerType::kAdam;
  adam.learning_rate = 0.01;

  model::ModelSpec mlp;
  mlp.input_shape = {20};
  mlp.layers = {Dense("hidden", 32, model::Activation::kRelu), Dense("out", 5, model::Activation::kSoftmax)};
  model::ModelSpec emb;
  emb.input_shape = {4};
  emb.input_dtype = DType::kInt64;
  model::LayerSpec e;
  e.type = model::LayerType::kEmbedding;
  e.name = "embedding";
  e.input_dim = 50;
  e.output_dim = 8;
  e.combiner = model::Combiner::kMean;
  emb.layers = {e, Dense("out", 5, model::Activation::kSoftmax)};

  for (const model::ModelSpec* spec : {&mlp, &emb}) {
    const std::string what = spec == &mlp ? "MLP" : "embedding model";
    auto cpu = model::Model::Create(*spec, loss);
    auto gpu = model::Model::Create(*spec, loss);
    ASSERT_TRUE(cpu.ok() && gpu.ok());
    const int64_t batch = 24;
    Tensor x;
    if (spec == &mlp) {
      x = Random({batch, 20}, -1, 1, 40);
    } else {
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < batch * 4; ++i) ids.push_back((i * 13) % 50);  // repeats: rows summed
      x = *Tensor::FromVector({batch, 4}, ids);
    }
    std::vector<int64_t> y;
    for (int64_t i = 0; i < batch; ++i) y.push_back(i % 5);
    const Tensor labels = *Tensor::FromVector({batch}, y);

    std::vector<Tensor> values = (*cpu)->InitialValues(3);
    std::vector<Tensor> gvalues;
    for (const Tensor& v : values) gvalues.push_back(OnGpu(v));
    model::Optimizer opt(adam);
    std::vector<model::SlotState> slots, gslots;
    for (const Tensor& v : values) {
      slots.push_back(opt.CreateSlots(v));
      model::SlotState g = opt.CreateSlots(v);
      for (Tensor& s : g.slots) s = OnGpu(s);
      gslots.push_back(std::move(g));
    }
    for (int step = 0; step < 2; ++step) {
      auto out = (*cpu)->ComputeGradients(values, x, labels);
      ASSERT_TRUE(out.ok()) << out.status();
      model::MetricState acc;
      ASSERT_TRUE(
          model::UpdateMetric(model::MetricType::kSparseCategoricalAccuracy, out->predictions, labels, out->logits, acc)
              .ok());

      Tensor stats = *Tensor::Create(DType::kFloat32, {4}, kGpu);
      auto gx = (*gpu)->PlaceFeatures(x, kGpu);
      ASSERT_TRUE(gx.ok());
      auto targets = (*gpu)->Targets(labels);
      ASSERT_TRUE(targets.ok());
      auto grads = (*gpu)->ComputeGradientsOnDevice(gvalues, *gx, OnGpu(*targets),
                                                    {model::MetricType::kSparseCategoricalAccuracy}, stats);
      ASSERT_TRUE(grads.ok()) << what << ": " << grads.status();
      ASSERT_EQ(grads->size(), out->grads.size());
      for (size_t v = 0; v < values.size(); ++v) {
        const model::Gradient& c = out->grads[v];
        const model::Gradient& g = (*grads)[v];
        ASSERT_EQ(c.sparse, g.sparse) << what;
        if (c.sparse) {
          ExpectHostClose(OnHost(g.indices), c.indices, 0, what + " sparse indices");
          ExpectHostClose(OnHost(g.values), c.values, 1e-4f, what + " sparse values");
        } else {
          ExpectHostClose(OnHost(g.dense), c.dense, 1e-4f, what + " gradient " + std::to_string(v));
        }
        ASSERT_TRUE(opt.Apply(values[v], c, slots[v]).ok());
        ASSERT_TRUE(opt.Apply(gvalues[v], g, gslots[v]).ok()) << what;
      }
      const Tensor s = OnHost(stats);
      EXPECT_NEAR(s.data<float>()[0] / batch, out->loss, 1e-4f * std::fabs(out->loss)) << what << " loss";
      EXPECT_EQ(s.data<float>()[2], static_cast<float>(acc.total)) << what << " accuracy";
      for (size_t v = 0; v < values.size(); ++v) {
        ExpectHostClose(OnHost(gvalues[v]), values[v], 1e-4f, what + " variable " + std::to_string(v) + " after step");
      }
    }
  }
}

TEST_F(DeviceTest, DeviceFailuresAreStatusesNotCrashes) {
  // More memory than any GPU has: an error to report, not an abort.
  auto huge = backend_->Allocate(0, size_t{1} << 52);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), Code::kFailedPrecondition);
  EXPECT_THAT(huge.status().message(), ::testing::HasSubstr("CUDA error"));
  // A device that is not visible.
  EXPECT_EQ(Tensor::Create(DType::kFloat32, {2}, Device::Cuda(1 << 20)).status().code(), Code::kFailedPrecondition);
  // The device stays usable afterwards, and the failure is not reported
  // again by the next kernel launch.
  auto t = Tensor::Create(DType::kFloat32, {2}, kGpu);
  ASSERT_TRUE(t.ok()) << t.status();
  auto again = backend_->Allocate(0, size_t{1} << 52);
  ASSERT_FALSE(again.ok());
  const Status fill = backend_->Fill(*t, 2.5f);
  EXPECT_TRUE(fill.ok()) << fill;
}

// Runs everywhere: what a process without a usable GPU says.
TEST(NoDeviceTest, DeviceTensorsWithoutAGpuAreFailedPrecondition) {
  RegisterBackend();
  device::Backend* b = device::CudaBackend();
  ASSERT_NE(b, nullptr);
  if (b->DeviceCount() > 0) GTEST_SKIP() << "a GPU is visible here; the no-GPU path is not reachable";
  auto t = Tensor::Create(DType::kFloat32, {2}, kGpu);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kFailedPrecondition);
  EXPECT_THAT(t.status().message(), ::testing::HasSubstr("no CUDA device is visible"));
}

}  // namespace
}  // namespace tfjob::gpu
