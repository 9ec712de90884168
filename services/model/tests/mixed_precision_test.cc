// Mixed precision (services/tensor/precision.h) at the model's level: the
// Keras dtype policies as Keras 2 and 3 write them, every computing layer
// in bfloat16 and float16 against the same layer in float32 (tolerances per
// op below), and loss scaling.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "services/model/keras_model.h"
#include "services/model/model.h"
#include "tests/support/subprocess.h"

namespace tfjob::model {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

json MpPolicy(const std::string& name) {
  return {
      {"module", "keras"}, {"class_name", "DTypePolicy"}, {"config", {{"name", name}}}, {"registered_name", nullptr}};
}

json MpMnistCnn() {
  return json::parse(std::ifstream(tfjob::testing::SourceDir() + "/examples/keras/mnist_cnn.keras3.json"));
}

// The layer configs of MnistCnn, by name.
json& MpLayerConfig(json& doc, const std::string& name) {
  for (json& l : doc["config"]["layers"]) {
    if (l["config"].value("name", "") == name) return l["config"];
  }
  ADD_FAILURE() << "no layer " << name;
  return doc;
}

TEST(MixedPrecisionPolicyTest, KerasTwoAndThreePoliciesAreRead) {
  json doc = MpMnistCnn();
  MpLayerConfig(doc, "conv2d")["dtype"] = MpPolicy("mixed_bfloat16");  // Keras 3
  MpLayerConfig(doc, "dense")["dtype"] = "mixed_float16";              // Keras 2's name
  MpLayerConfig(doc, "dense_1")["dtype"] = {{"class_name", "Policy"}, {"config", {{"name", "float32"}}}};  // Keras 2.4+
  auto spec = ParseKerasModel(doc, "cnn");
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::map<std::string, Precision> got;
  for (const LayerSpec& l : spec->layers) got[l.name] = l.precision;
  EXPECT_EQ(got["conv2d"], Precision::kBfloat16);
  EXPECT_EQ(got["dense"], Precision::kFloat16);
  EXPECT_EQ(got["dense_1"], Precision::kFloat32);
  EXPECT_EQ(got["max_pooling2d"], Precision::kFloat32);
  auto m = Model::Create(*spec, LossSpec{LossType::kSparseCategoricalCrossentropy});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->compute_precision(), Precision::kFloat16);
  // Mixed layers go to a GPU too (services/gpu: tensor-core products);
  // fit checks the GPU's compute capability for them.
  Status dev = (*m)->CheckDeviceSupport();
  EXPECT_TRUE(dev.ok()) << dev;
}

TEST(MixedPrecisionPolicyTest, PureLowPrecisionPoliciesAreRefusedNamingTheLayer) {
  for (const json& bad : {json("bfloat16"), MpPolicy("float16"), json("float64")}) {
    json doc = MpMnistCnn();
    MpLayerConfig(doc, "dense")["dtype"] = bad;
    auto spec = ParseKerasModel(doc, "cnn");
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_THAT(spec.status().message(), HasSubstr("dense"));
    EXPECT_THAT(spec.status().message(), HasSubstr("mixed_bfloat16"));
  }
}

// A Sequential of one computing layer (after an input of `shape`), as Keras
// 3 writes it, with the layer's dtype policy.
ModelSpec MpOneLayer(const std::vector<int64_t>& shape, json layer, const std::string& policy) {
  json batch_shape = json::array({nullptr});
  for (int64_t d : shape) batch_shape.push_back(d);
  layer["config"]["dtype"] = MpPolicy(policy);
  layer["config"]["name"] = "under_test";
  json input = {{"class_name", "InputLayer"}, {"config", {{"batch_shape", batch_shape}, {"name", "in"}}}};
  json doc;
  doc["class_name"] = "Sequential";
  doc["config"]["name"] = "s";
  doc["config"]["layers"] = json::array({input, layer});
  auto spec = ParseKerasModel(doc, "one layer");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ModelSpec{};
}

Tensor MpRandom(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::Zeros(DType::kFloat32, shape);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> n(0.f, 1.f);
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = n(rng);
  return t;
}

// max |a - b| / max |a|: the error relative to the tensor's scale.
double MpRelativeError(const Tensor& a, const Tensor& b) {
  double err = 0, scale = 1e-12;
  for (int64_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(a.data<float>()[i])));
  }
  return err / scale;
}

struct MpLayerCase {
  std::string name;
  std::vector<int64_t> input;
  json layer;
  // Bounds on the relative error of the output, dL/dx and every dL/dw
  // against float32: about 4x the bfloat16 (float16) unit roundoff, 2^-8
  // (2^-11), times the growth sums of many rounded terms allow.
  double bf16_tolerance, f16_tolerance;
};

std::vector<MpLayerCase> MpCases() {
  return {
      {"Dense", {40}, {{"class_name", "Dense"}, {"config", {{"units", 24}, {"activation", "tanh"}}}}, 2e-2, 3e-3},
      {"Conv2D",
       {9, 9, 16},
       {{"class_name", "Conv2D"}, {"config", {{"filters", 8}, {"kernel_size", {3, 3}}, {"padding", "same"}}}},
       2e-2,
       3e-3},
      {"Conv1D", {12, 6}, {{"class_name", "Conv1D"}, {"config", {{"filters", 5}, {"kernel_size", 3}}}}, 2e-2, 3e-3},
      {"LSTM", {7, 5}, {{"class_name", "LSTM"}, {"config", {{"units", 6}}}}, 3e-2, 4e-3},
  };
}

TEST(MixedPrecisionLayerTest, LowPrecisionLayersAgreeWithFloat32WithinStatedTolerances) {
  for (const MpLayerCase& c : MpCases()) {
    auto f32 = Model::Create(MpOneLayer(c.input, c.layer, "float32"), LossSpec{LossType::kMeanSquaredError});
    ASSERT_TRUE(f32.ok()) << c.name << ": " << f32.status();
    const std::vector<Tensor> values = (*f32)->InitialValues(11);
    Shape xs{4};
    xs.insert(xs.end(), c.input.begin(), c.input.end());
    const Tensor x = MpRandom(xs, 3);
    Shape ys{4};
    const Shape& out = (*f32)->output_shape();
    ys.insert(ys.end(), out.begin(), out.end());
    const Tensor dy = MpRandom(ys, 5);
    auto want = (*f32)->Differentiate(values, x, dy.Clone(), true);
    ASSERT_TRUE(want.ok()) << want.status();
    for (const auto& [policy, tolerance] : {std::pair<std::string, double>{"mixed_bfloat16", c.bf16_tolerance},
                                            std::pair<std::string, double>{"mixed_float16", c.f16_tolerance}}) {
      auto low = Model::Create(MpOneLayer(c.input, c.layer, policy), LossSpec{LossType::kMeanSquaredError});
      ASSERT_TRUE(low.ok()) << low.status();
      const Tensor x_before = x.Clone();
      auto got = (*low)->Differentiate(values, x, dy.Clone(), true);
      ASSERT_TRUE(got.ok()) << c.name << " " << policy << ": " << got.status();
      EXPECT_EQ(MpRelativeError(x_before, x), 0) << c.name << " " << policy << ": the caller's input was changed";
      const Precision p = policy == "mixed_bfloat16" ? Precision::kBfloat16 : Precision::kFloat16;
      const double out_err = MpRelativeError(want->output, got->output);
      EXPECT_LE(out_err, tolerance) << c.name << " " << policy << " output";
      EXPECT_GT(out_err, 0) << c.name << " " << policy << ": computed in float32";
      // The layer's output holds values of its compute dtype.
      for (int64_t i = 0; i < got->output.size(); ++i) {
        const float v = got->output.data<float>()[i];
        ASSERT_EQ(RoundTo(p, v), v) << c.name << " " << policy << " output " << i;
      }
      ASSERT_EQ(want->grads.size(), got->grads.size());
      for (size_t g = 0; g < want->grads.size(); ++g) {
        EXPECT_LE(MpRelativeError(want->grads[g].dense, got->grads[g].dense), tolerance)
            << c.name << " " << policy << " gradient of " << (*f32)->variables()[g].name;
      }
    }
  }
}

Model::Output MpGradients(Model& m, const std::vector<Tensor>& values, float scale) {
  m.set_loss_scale(scale);
  const Tensor x = MpRandom({8, 40}, 1);
  Tensor y = Tensor::Zeros(DType::kInt64, {8});
  for (int64_t i = 0; i < 8; ++i) y.data<int64_t>()[i] = i % 3;
  auto out = m.ComputeGradients(values, x, y);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? std::move(out).value() : Model::Output{};
}

json MpClassifier() { return {{"class_name", "Dense"}, {"config", {{"units", 3}, {"activation", "softmax"}}}}; }

// A power-of-two loss scale is exact in float32: the unscaled gradients are
// bit for bit the unscaled ones, and the loss is the loss.
TEST(LossScaleTest, APowerOfTwoScaleChangesNothingInFloat32) {
  auto m =
      Model::Create(MpOneLayer({40}, MpClassifier(), "float32"), LossSpec{LossType::kSparseCategoricalCrossentropy});
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<Tensor> values = (*m)->InitialValues(2);
  const Model::Output plain = MpGradients(**m, values, 1.f), scaled = MpGradients(**m, values, 32768.f);
  EXPECT_EQ(plain.loss, scaled.loss);
  for (size_t g = 0; g < plain.grads.size(); ++g)
    EXPECT_EQ(MpRelativeError(plain.grads[g].dense, scaled.grads[g].dense), 0);
}

// float16's range ends at 65504: a scale that pushes the gradients past it
// leaves them infinite, which AllFinite reports; a smaller one does not.
TEST(LossScaleTest, Float16GradientsOverflowUnderTooLargeAScale) {
  auto m = Model::Create(MpOneLayer({40}, MpClassifier(), "mixed_float16"),
                         LossSpec{LossType::kSparseCategoricalCrossentropy});
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<Tensor> values = (*m)->InitialValues(2);
  EXPECT_TRUE(AllFinite(MpGradients(**m, values, 1024.f).grads));
  EXPECT_FALSE(AllFinite(MpGradients(**m, values, std::ldexp(1.f, 40)).grads));
  // bfloat16 has float32's range: the same scale does not overflow.
  auto b = Model::Create(MpOneLayer({40}, MpClassifier(), "mixed_bfloat16"),
                         LossSpec{LossType::kSparseCategoricalCrossentropy});
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(AllFinite(MpGradients(**b, values, std::ldexp(1.f, 40)).grads));
}

}  // namespace
}  // namespace tfjob::model
