// The layers of layers_more.cc (but the convolutions: layers_more_conv_test.cc)
// and the activations beyond the original four: forward values on small
// inputs worked out by hand, every gradient against finite differences, and
// their Keras configs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <farmhash.h>

#include <cmath>

#include "services/model/activation.h"
#include "services/model/tests/layers_more_testing.h"

namespace tfjob::model {
namespace {

using ::testing::HasSubstr;
using namespace more_testing;  // NOLINT(google-build-using-namespace): the test helpers

// ------------------------------------------------------------ activations

TEST(ActivationTest, NewActivationsMatchTheirFormulas) {
  struct Case {
    const char* name;
    float x, want;
  };
  const double e = std::exp(1.0);
  const Case cases[] = {
      {"elu", -1, static_cast<float>(1 / e - 1)},
      {"elu", 2, 2},
      {"selu", 1, 1.0507009873554805f},
      {"selu", -1, static_cast<float>(1.0507009873554805 * 1.6732632423543772 * (1 / e - 1))},
      {"softplus", 0, static_cast<float>(std::log(2.0))},
      {"softsign", 1, 0.5f},
      {"softsign", -3, -0.75f},
      {"swish", 1, static_cast<float>(1 / (1 + 1 / e))},
      {"silu", -1, static_cast<float>(-1 / (1 + e))},
      {"gelu", 1, 0.8413447f},  // Phi(1)
      {"gelu_new", 1, 0.8411920f},
      {"hard_sigmoid", 1, 0.7f},  // tf.keras 2 / TF.js: 0.2 x + 0.5
      {"hard_sigmoid", -3, 0},
      {"exponential", 1, static_cast<float>(e)},
      {"relu6", 7, 6},
      {"relu6", 3, 3},
      {"leaky_relu", -1, -0.2f},
      {"mish", 1, static_cast<float>(std::tanh(std::log(1 + e)))},
  };
  for (const Case& c : cases) {
    auto a = ParseActivation(c.name);
    ASSERT_TRUE(a.ok()) << a.status();
    Tensor t = F({1}, {c.x});
    ApplyActivation(*a, t);
    EXPECT_NEAR(t.data<float>()[0], c.want, 2e-6) << c.name << "(" << c.x << ")";
    EXPECT_FALSE(ActivationOnDevice(*a)) << c.name;
  }
  EXPECT_TRUE(ActivationOnDevice(Activation::kSoftmax));
  EXPECT_EQ(*ParseActivation("silu"), Activation::kSwish);
  // log_softmax of [0, ln 3]: log([1/4, 3/4]).
  Tensor t = F({1, 2}, {0, static_cast<float>(std::log(3.0))});
  ApplyActivation(*ParseActivation("log_softmax"), t);
  ExpectValues(t, {static_cast<float>(std::log(0.25)), static_cast<float>(std::log(0.75))}, 1e-6f, "log_softmax");
  auto bad = ParseActivation("celu");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown activation \"celu\""));
}

// Every activation through the Activation layer (which keeps its input for
// gelu, swish and mish), Dense and Conv2D.
TEST(ActivationTest, GradientsThroughActivationDenseAndConv2D) {
  Gen gen(11);
  for (Activation a :
       {Activation::kElu, Activation::kSelu, Activation::kSoftplus, Activation::kSoftsign, Activation::kSwish,
        Activation::kGelu, Activation::kGeluTanh, Activation::kHardSigmoid, Activation::kExponential,
        Activation::kRelu6, Activation::kLeakyRelu, Activation::kMish, Activation::kLogSoftmax}) {
    const std::string name(ActivationName(a));
    SCOPED_TRACE(name);
    LayerSpec act = Spec(LayerType::kActivation, "act_" + name);
    act.activation = a;
    // Away from the kinks of relu6 (0, 6), hard_sigmoid (+-2.5), leaky_relu (0).
    Tensor x = F({2, 4}, {-2.1f, -0.7f, 0.4f, 1.3f, 2.2f, -1.4f, 0.9f, -0.3f});
    CheckGradients(act, {4}, x, {});
    LayerSpec dense = Spec(LayerType::kDense, "dense_" + name);
    dense.units = 3;
    dense.activation = a;
    auto built = Built(dense, {4});
    EXPECT_FALSE(built->device_kernels());
    CheckGradients(dense, {4}, RandomF({2, 4}, gen), {RandomF({4, 3}, gen), RandomF({3}, gen)});
  }
  LayerSpec conv = Spec(LayerType::kConv2D, "conv_gelu");
  conv.filters = 2;
  conv.kernel_size = {2, 2};
  conv.activation = Activation::kGelu;
  EXPECT_FALSE(Built(conv, {3, 3, 2})->device_kernels());
  CheckGradients(conv, {3, 3, 2}, RandomF({2, 3, 3, 2}, gen), {RandomF({2, 2, 2, 2}, gen), RandomF({2}, gen)});
  conv.activation = Activation::kRelu;
  EXPECT_TRUE(Built(conv, {3, 3, 2})->device_kernels());
}

// ------------------------------------------------------ activation layers

TEST(ActivationLayersTest, ReLULeakyReLUELUThresholdedReLURescaling) {
  LayerSpec relu = Spec(LayerType::kReLU, "relu");
  relu.has_max_value = true;
  relu.max_value = 6;
  relu.negative_slope = 0.1;
  relu.threshold = 0.5;
  // At or below the threshold: 0.1 * (x - 0.5); above: min(x, 6).
  Tensor y = CheckGradients(relu, {5}, F({1, 5}, {-1, 0.2f, 1, 3, 7}), {});
  ExpectValues(y, {-0.15f, -0.03f, 1, 3, 6}, 1e-6f, "ReLU");
  EXPECT_FALSE(Built(relu, {5})->device_kernels());

  LayerSpec leaky = Spec(LayerType::kLeakyReLU, "leaky");
  leaky.negative_slope = 0.3;
  ExpectValues(CheckGradients(leaky, {2}, F({1, 2}, {-2, 3}), {}), {-0.6f, 3}, 1e-6f, "LeakyReLU");

  LayerSpec elu = Spec(LayerType::kELU, "elu");
  elu.alpha = 0.5;
  ExpectValues(CheckGradients(elu, {2}, F({1, 2}, {-1, 2}), {}), {static_cast<float>(0.5 * (std::exp(-1.0) - 1)), 2},
               1e-6f, "ELU");

  LayerSpec thr = Spec(LayerType::kThresholdedReLU, "thr");
  thr.threshold = 1;
  ExpectValues(CheckGradients(thr, {3}, F({1, 3}, {0.5f, 1.5f, 2}), {}), {0, 1.5f, 2}, 1e-6f, "ThresholdedReLU");

  LayerSpec rescale = Spec(LayerType::kRescaling, "rescale");
  rescale.rescale = 2;
  rescale.offset = -1;
  ExpectValues(CheckGradients(rescale, {2}, F({1, 2}, {0, 0.75f}), {}), {-1, 0.5f}, 1e-6f, "Rescaling");
  // Integer pixels become floats.
  auto ints = Built(rescale, {2}, DType::kInt64);
  auto yi = ints->Forward({}, Tensor::FromVector({1, 2}, std::vector<int64_t>{3, 0}).value(), false);
  ASSERT_TRUE(yi.ok()) << yi.status();
  ExpectValues(*yi, {5, -1}, 0, "Rescaling int64");
}

TEST(ActivationLayersTest, SoftmaxAlongAnyAxis) {
  LayerSpec s = Spec(LayerType::kSoftmax, "softmax");
  s.axis = 1;  // the first axis after the batch: columns of a [2, 3] example
  Tensor x = F({1, 2, 3}, {0, 1, 2, 0, 1, static_cast<float>(1 + std::log(3.0))});
  Tensor y = CheckGradients(s, {2, 3}, x, {});
  // Column 0: [0, 0] -> [0.5, 0.5]; column 2: [2, 1 + ln 3] -> [e / (e + 3e^0), ...] = [e^2 / (e^2 + 3e)].
  const double e = std::exp(1.0), p = e * e / (e * e + 3 * e);
  ExpectValues(y, {0.5f, 0.5f, static_cast<float>(p), 0.5f, 0.5f, static_cast<float>(1 - p)}, 1e-6f, "Softmax");
  s.axis = -1;
  Gen gen(3);
  CheckGradients(s, {2, 3}, RandomF({2, 2, 3}, gen), {});
  s.axis = 3;
  auto bad = MakeLayer(s).value()->Build({2, 3}, DType::kFloat32);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("axis 3"));
}

TEST(ActivationLayersTest, PReLUSharedAxes) {
  LayerSpec s = Spec(LayerType::kPReLU, "prelu");
  s.shared_axes = {1};
  auto layer = Built(s, {2, 3});
  auto vars = layer->Variables();
  ASSERT_EQ(vars.size(), 1u);
  EXPECT_EQ(vars[0].name, "prelu/alpha");
  EXPECT_EQ(vars[0].shape, Shape({1, 3}));
  EXPECT_EQ(vars[0].init, Initializer::kZeros);
  Tensor alpha = F({1, 3}, {0.1f, 0.2f, 0.3f});
  Tensor x = F({1, 2, 3}, {-1, 2, -3, 4, -5, -6});
  Tensor y = CheckGradients(s, {2, 3}, x, {alpha});
  ExpectValues(y, {-0.1f, 2, -0.9f, 4, -1, -1.8f}, 1e-6f, "PReLU");
  s.shared_axes = {};
  Gen gen(4);
  CheckGradients(s, {2, 3}, RandomF({3, 2, 3}, gen), {RandomF({2, 3}, gen)});
}

// ------------------------------------------------- LayerNormalization

TEST(LayerNormalizationTest, NormalizesEachExampleAndHasKerasGradients) {
  LayerSpec s = Spec(LayerType::kLayerNormalization, "ln");
  auto layer = Built(s, {2, 4});
  auto vars = layer->Variables();
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_EQ(vars[0].name, "ln/gamma");
  EXPECT_EQ(vars[1].name, "ln/beta");
  EXPECT_EQ(vars[0].shape, Shape({4}));
  EXPECT_EQ(vars[0].init, Initializer::kOnes);
  // [1, 2, 3, 4]: mean 2.5, variance 1.25.
  Tensor x = F({1, 2, 4}, {1, 2, 3, 4, 5, 5, 5, 5});
  const std::vector<Tensor> unit{F({4}, {1, 1, 1, 1}), F({4}, {0, 0, 0, 0})};
  auto y = layer->Forward(unit, x, false);
  ASSERT_TRUE(y.ok()) << y.status();
  const float inv = static_cast<float>(1 / std::sqrt(1.25 + 1e-3));
  ExpectValues(*y, {-1.5f * inv, -0.5f * inv, 0.5f * inv, 1.5f * inv, 0, 0, 0, 0}, 1e-6f, "LayerNormalization");

  Gen gen(5);
  CheckGradients(s, {2, 4}, RandomF({3, 2, 4}, gen), {RandomF({4}, gen, 0.5f, 1.5f), RandomF({4}, gen)});
  s.norm_axes = {-2, -1};
  EXPECT_EQ(Built(s, {2, 4})->Variables()[0].shape, Shape({2, 4}));
  CheckGradients(s, {2, 4}, RandomF({3, 2, 4}, gen), {RandomF({2, 4}, gen, 0.5f, 1.5f), RandomF({2, 4}, gen)});
  s.norm_axes = {2};  // Keras counts the batch axis: the last of [b, 2, 4]
  s.center = false;
  EXPECT_EQ(Built(s, {2, 4})->Variables().size(), 1u);
  CheckGradients(s, {2, 4}, RandomF({3, 2, 4}, gen), {RandomF({4}, gen, 0.5f, 1.5f)});
  s.norm_axes = {1};
  auto bad = MakeLayer(s).value()->Build({2, 4}, DType::kFloat32);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("trailing axes"));
}

// ------------------------------------------------------- shape layers

TEST(ShapeLayersTest, PermuteAndRepeatVector) {
  LayerSpec p = Spec(LayerType::kPermute, "permute");
  p.permutation = {2, 1};
  Tensor y = CheckGradients(p, {2, 3}, F({1, 2, 3}, {1, 2, 3, 4, 5, 6}), {});
  EXPECT_EQ(y.shape(), Shape({1, 3, 2}));
  ExpectValues(y, {1, 4, 2, 5, 3, 6}, 0, "Permute");
  p.permutation = {3, 1, 2};
  Gen gen(6);
  EXPECT_EQ(CheckGradients(p, {2, 3, 4}, RandomF({2, 2, 3, 4}, gen), {}).shape(), Shape({2, 4, 2, 3}));
  p.permutation = {1, 1};
  EXPECT_FALSE(MakeLayer(p).value()->Build({2, 3}, DType::kFloat32).ok());

  LayerSpec r = Spec(LayerType::kRepeatVector, "repeat");
  r.repeats = 3;
  y = CheckGradients(r, {2}, F({1, 2}, {1, 2}), {});
  EXPECT_EQ(y.shape(), Shape({1, 3, 2}));
  ExpectValues(y, {1, 2, 1, 2, 1, 2}, 0, "RepeatVector");
}

TEST(ShapeLayersTest, ZeroPaddingCroppingUpSampling) {
  Tensor x = F({1, 2, 2, 1}, {1, 2, 3, 4});
  LayerSpec pad = Spec(LayerType::kZeroPadding2D, "pad");
  pad.margins = {1, 0, 0, 2};  // top, bottom, left, right
  Tensor y = CheckGradients(pad, {2, 2, 1}, x, {});
  EXPECT_EQ(y.shape(), Shape({1, 3, 4, 1}));
  ExpectValues(y, {0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0}, 0, "ZeroPadding2D");

  LayerSpec crop = Spec(LayerType::kCropping2D, "crop");
  crop.margins = {1, 0, 0, 1};
  y = CheckGradients(crop, {2, 2, 1}, x, {});
  EXPECT_EQ(y.shape(), Shape({1, 1, 1, 1}));
  ExpectValues(y, {3}, 0, "Cropping2D");
  crop.margins = {1, 1, 0, 0};
  EXPECT_FALSE(MakeLayer(crop).value()->Build({2, 2, 1}, DType::kFloat32).ok());

  LayerSpec up = Spec(LayerType::kUpSampling2D, "up");
  up.kernel_size = {1, 2};
  y = CheckGradients(up, {2, 2, 1}, x, {});
  EXPECT_EQ(y.shape(), Shape({1, 2, 4, 1}));
  ExpectValues(y, {1, 1, 2, 2, 3, 3, 4, 4}, 0, "UpSampling2D");

  Tensor x1 = F({1, 3, 2}, {1, 2, 3, 4, 5, 6});
  LayerSpec pad1 = Spec(LayerType::kZeroPadding1D, "pad1");
  pad1.margins = {1, 0, 0, 0};
  ExpectValues(CheckGradients(pad1, {3, 2}, x1, {}), {0, 0, 1, 2, 3, 4, 5, 6}, 0, "ZeroPadding1D");
  LayerSpec crop1 = Spec(LayerType::kCropping1D, "crop1");
  crop1.margins = {0, 2, 0, 0};
  ExpectValues(CheckGradients(crop1, {3, 2}, x1, {}), {1, 2}, 0, "Cropping1D");
  LayerSpec up1 = Spec(LayerType::kUpSampling1D, "up1");
  up1.kernel_size = {2, 1};
  ExpectValues(CheckGradients(up1, {3, 2}, x1, {}), {1, 2, 1, 2, 3, 4, 3, 4, 5, 6, 5, 6}, 0, "UpSampling1D");
}

// -------------------------------------------------------- noise layers

TEST(NoiseLayersTest, IdentityAtInferenceSeededNoiseWhileTraining) {
  Gen gen(8);
  Tensor x = RandomF({4, 5, 6}, gen, 0.5f, 1.5f);
  for (LayerType t : {LayerType::kSpatialDropout1D, LayerType::kGaussianNoise, LayerType::kGaussianDropout}) {
    LayerSpec s = Spec(t, "noise");
    s.rate = 0.5;
    s.stddev = 0.3;
    s.seed = 42;
    SCOPED_TRACE(LayerTypeName(t));
    auto y = Built(s, {5, 6})->Forward({}, x, false);
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectValues(*y, {x.flat<float>().begin(), x.flat<float>().end()}, 0, "inference");
    CheckGradients(s, {5, 6}, x, {}, /*training=*/true);
  }
  // SpatialDropout: one decision per example and channel, kept values scaled by 2.
  LayerSpec s = Spec(LayerType::kSpatialDropout2D, "sd");
  s.rate = 0.5;
  s.seed = 1;
  Tensor ones = Tensor::Zeros(DType::kFloat32, {8, 2, 3, 5});
  for (float& v : ones.flat<float>()) v = 1;
  Tensor y = Built(s, {2, 3, 5})->Forward({}, ones, true).value();
  int kept = 0;
  for (int64_t b = 0; b < 8; ++b) {
    for (int64_t c = 0; c < 5; ++c) {
      const float first = y.data<float>()[b * 30 + c];
      EXPECT_TRUE(first == 0 || first == 2) << first;
      kept += first == 2;
      for (int64_t p = 1; p < 6; ++p) EXPECT_EQ(y.data<float>()[(b * 6 + p) * 5 + c], first);
    }
  }
  EXPECT_GT(kept, 5);
  EXPECT_LT(kept, 35);
  // GaussianNoise: N(0, stddev) added.
  LayerSpec g = Spec(LayerType::kGaussianNoise, "gn");
  g.stddev = 0.5;
  Tensor zeros = Tensor::Zeros(DType::kFloat32, {1000, 10});
  Tensor n = Built(g, {10})->Forward({}, zeros, true).value();
  double sum = 0, sq = 0;
  for (float v : n.flat<float>()) sum += v, sq += v * v;
  EXPECT_NEAR(sum / 10000, 0, 0.03);
  EXPECT_NEAR(std::sqrt(sq / 10000), 0.5, 0.03);
}

// ---------------------------------------------------------------- pooling

TEST(PoolingMoreTest, GlobalPoolings) {
  Tensor x = F({1, 3, 2}, {1, 6, 5, 2, 3, 4});
  LayerSpec gmax = Spec(LayerType::kGlobalMaxPooling1D, "gmax");
  ExpectValues(CheckGradients(gmax, {3, 2}, x, {}), {5, 6}, 0, "GlobalMaxPooling1D");
  LayerSpec gavg = Spec(LayerType::kGlobalAveragePooling1D, "gavg");
  gavg.keepdims = true;
  Tensor y = CheckGradients(gavg, {3, 2}, x, {});
  EXPECT_EQ(y.shape(), Shape({1, 1, 2}));
  ExpectValues(y, {3, 4}, 1e-6f, "GlobalAveragePooling1D");
  LayerSpec gmax2 = Spec(LayerType::kGlobalMaxPooling2D, "gmax2");
  y = CheckGradients(gmax2, {1, 3, 2}, F({1, 1, 3, 2}, {1, 6, 5, 2, 3, 4}), {});
  EXPECT_EQ(y.shape(), Shape({1, 2}));
  ExpectValues(y, {5, 6}, 0, "GlobalMaxPooling2D");
}

TEST(PoolingMoreTest, OneDimensionalPoolings) {
  Tensor x = F({1, 5, 1}, {1, 5, 2, 4, 3});
  LayerSpec mp = Spec(LayerType::kMaxPooling1D, "mp");
  mp.kernel_size = {2, 1};
  mp.strides = {2, 1};
  ExpectValues(CheckGradients(mp, {5, 1}, x, {}), {5, 4}, 0, "MaxPooling1D valid");
  mp.padding = Padding::kSame;  // 3 outputs; the last window holds 3 alone
  ExpectValues(CheckGradients(mp, {5, 1}, x, {}), {5, 4, 3}, 0, "MaxPooling1D same");
  LayerSpec ap = Spec(LayerType::kAveragePooling1D, "ap");
  ap.kernel_size = {3, 1};
  ap.strides = {1, 1};
  ExpectValues(CheckGradients(ap, {5, 1}, x, {}), {8.f / 3, 11.f / 3, 3}, 1e-6f, "AveragePooling1D");
  ap.padding = Padding::kSame;  // padding left out of the average
  ExpectValues(CheckGradients(ap, {5, 1}, x, {}), {3, 8.f / 3, 11.f / 3, 3, 3.5f}, 1e-6f, "AveragePooling1D same");
}

// ------------------------------------------------------- encoding layers

TEST(EncodingLayersTest, CategoryEncodingModes) {
  auto ids = [](Shape s, std::vector<int64_t> v) { return Tensor::FromVector(std::move(s), std::move(v)).value(); };
  LayerSpec s = Spec(LayerType::kCategoryEncoding, "enc");
  s.num_tokens = 4;
  s.encoding = EncodingMode::kOneHot;
  auto layer = Built(s, {}, DType::kInt64);
  ExpectValues(layer->Forward({}, ids({2}, {3, 1}), false).value(), {0, 0, 0, 1, 0, 1, 0, 0}, 0, "one_hot");
  layer = Built(s, {2}, DType::kInt64);
  Tensor y = layer->Forward({}, ids({1, 2}, {0, 2}), false).value();
  EXPECT_EQ(y.shape(), Shape({1, 2, 4}));
  ExpectValues(y, {1, 0, 0, 0, 0, 0, 1, 0}, 0, "one_hot [2]");
  s.encoding = EncodingMode::kMultiHot;
  layer = Built(s, {3}, DType::kInt64);
  ExpectValues(layer->Forward({}, ids({2, 3}, {1, 1, 3, 0, 2, 2}), false).value(), {0, 1, 0, 1, 1, 0, 1, 0}, 0,
               "multi_hot");
  s.encoding = EncodingMode::kCount;
  layer = Built(s, {3}, DType::kInt64);
  ExpectValues(layer->Forward({}, ids({2, 3}, {1, 1, 3, 0, 2, 2}), false).value(), {0, 2, 0, 1, 1, 0, 2, 0}, 0,
               "count");
  std::vector<Gradient> none;
  EXPECT_EQ(layer->Backward({}, Tensor::Zeros(DType::kFloat32, {2, 4}), false, none).value().size(), 0);
  auto bad = layer->Forward({}, ids({1, 3}, {0, 4, 1}), false);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("id 4 is outside [0, 4)"));
  EXPECT_FALSE(MakeLayer(s).value()->Build({}, DType::kInt64).ok());  // multi_hot/count of a scalar
}

TEST(EncodingLayersTest, HashingBucketsTheDecimalStringWithFarmHash) {
  LayerSpec s = Spec(LayerType::kHashing, "hash");
  s.num_bins = 3;
  auto layer = Built(s, {2}, DType::kInt64);
  EXPECT_EQ(layer->output_dtype(), DType::kInt64);
  Tensor x = Tensor::FromVector({2, 2}, std::vector<int64_t>{0, 1, -7, 123456789}).value();
  Tensor y = layer->Forward({}, x, false).value();
  s.has_mask_value = true;
  s.mask_value = 0;
  Tensor masked = Built(s, {2}, DType::kInt64)->Forward({}, x, false).value();
  EXPECT_EQ(masked.data<int64_t>()[0], 0);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_GE(y.data<int64_t>()[i], 0);
    EXPECT_LT(y.data<int64_t>()[i], 3);
    if (i > 0) {
      EXPECT_GE(masked.data<int64_t>()[i], 1);
    }
  }
  // Keras' definition: the decimal string through to_hash_bucket_fast.
  const std::vector<int64_t> id{0, 1, -7, 123456789};
  for (size_t i = 0; i < id.size(); ++i) {
    const std::string str = std::to_string(id[i]);
    EXPECT_EQ(y.data<int64_t>()[i], static_cast<int64_t>(util::Fingerprint64(str.data(), str.size()) % 3)) << str;
  }
}

// FarmHash's Fingerprint64 modulo the bins is TensorFlow's
// to_hash_bucket_fast: the examples of its documentation and of Keras'
// Hashing layer.
TEST(EncodingLayersTest, FingerprintMatchesTensorFlowsDocumentedBuckets) {
  auto bucket = [](const std::string& s, uint64_t n) { return util::Fingerprint64(s.data(), s.size()) % n; };
  EXPECT_EQ(bucket("Hello", 3), 0u);
  EXPECT_EQ(bucket("TensorFlow", 3), 2u);
  EXPECT_EQ(bucket("2.x", 3), 2u);
  const std::vector<uint64_t> keras{1, 0, 1, 1, 2};  // Hashing(num_bins=3) of A..E
  for (size_t i = 0; i < keras.size(); ++i) EXPECT_EQ(bucket(std::string(1, static_cast<char>('A' + i)), 3), keras[i]);
}

}  // namespace
}  // namespace tfjob::model
