// conv_more.cc's convolutions (and conv.cc's Conv2D with dilation_rate or
// groups) against naive loops and finite differences; keras_layers.cc's
// configs of every layer it adds; and a model built from those layers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "services/model/keras_model.h"
#include "services/model/model.h"
#include "services/model/tests/layers_more_testing.h"

namespace tfjob::model {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using namespace more_testing;  // NOLINT(google-build-using-namespace): the test helpers

// Leading padding as TensorFlow computes it for "same" (the smaller half
// first), for a window dilated to (k - 1) * d + 1.
int64_t SamePadBefore(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d) {
  return std::max<int64_t>((out - 1) * s + (k - 1) * d + 1 - in, 0) / 2;
}

struct Conv2DCase {
  int64_t sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, oh = 0, ow = 0, groups = 1;
};

// y[b, oy, ox, f] = bias[f] + sum x[b, oy*s - pt + ky*d, ox*s - pl + kx*d, g*cpg + ci] * k[ky, kx, ci, f]
// over the group g of filter f.
Tensor NaiveConv(const Tensor& x, const Tensor& k, const Tensor& bias, const Conv2DCase& c) {
  const int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), ch = x.dim(3);
  const int64_t kh = k.dim(0), kw = k.dim(1), cpg = k.dim(2), f = k.dim(3), fpg = f / c.groups;
  Tensor y = Tensor::Zeros(DType::kFloat32, {n, c.oh, c.ow, f});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oy = 0; oy < c.oh; ++oy)
      for (int64_t ox = 0; ox < c.ow; ++ox)
        for (int64_t o = 0; o < f; ++o) {
          double acc = bias.size() ? bias.data<float>()[o] : 0;
          const int64_t g = o / fpg;
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t iy = oy * c.sh - c.pt + ky * c.dh, ix = ox * c.sw - c.pl + kx * c.dw;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              for (int64_t ci = 0; ci < cpg; ++ci) {
                acc += double(x.data<float>()[((b * h + iy) * w + ix) * ch + g * cpg + ci]) *
                       k.data<float>()[((ky * kw + kx) * cpg + ci) * f + o];
              }
            }
          y.data<float>()[((b * c.oh + oy) * c.ow + ox) * f + o] = static_cast<float>(acc);
        }
  return y;
}

void ExpectClose(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ExpectValues(got, {want.flat<float>().begin(), want.flat<float>().end()}, 1e-4f, what);
}

TEST(ConvMoreTest, Conv1DPaddingsDilationAndGroups) {
  // Hand-checkable: kernel [1, 1] over [1, 2, 3].
  LayerSpec s = Spec(LayerType::kConv1D, "c1");
  s.filters = 1;
  s.kernel_size = {2, 1};
  s.use_bias = false;
  Tensor x = F({1, 3, 1}, {1, 2, 3});
  Tensor k = F({2, 1, 1}, {1, 1});
  ExpectValues(CheckGradients(s, {3, 1}, x, {k}), {3, 5}, 1e-6f, "valid");
  s.causal = true;  // left padding only: [0, 1, 2, 3]
  ExpectValues(CheckGradients(s, {3, 1}, x, {k}), {1, 3, 5}, 1e-6f, "causal");
  s.causal = false;
  s.padding = Padding::kSame;  // one padding zero, after
  ExpectValues(CheckGradients(s, {3, 1}, x, {k}), {3, 5, 3}, 1e-6f, "same");

  Gen gen(21);
  struct Case {
    Padding padding;
    bool causal;
    int64_t stride, dilation, groups;
  };
  for (const Case& c : {Case{Padding::kValid, false, 2, 1, 1}, Case{Padding::kSame, false, 1, 2, 2},
                        Case{Padding::kValid, true, 1, 2, 1}, Case{Padding::kSame, false, 3, 1, 2}}) {
    LayerSpec t = Spec(LayerType::kConv1D, "c1d");
    t.filters = 4;
    t.kernel_size = {3, 1};
    t.strides = {c.stride, 1};
    t.dilation_rate = {c.dilation, 1};
    t.groups = c.groups;
    t.padding = c.padding;
    t.causal = c.causal;
    t.activation = Activation::kTanh;
    const int64_t steps = 7, cin = 4;
    auto layer = Built(t, {steps, cin});
    ASSERT_TRUE(layer);
    auto vars = layer->Variables();
    EXPECT_EQ(vars[0].name, "c1d/kernel");
    EXPECT_EQ(vars[0].shape, Shape({3, cin / c.groups, 4}));
    Tensor xi = RandomF({2, steps, cin}, gen), ki = RandomF({3, cin / c.groups, 4}, gen), bi = RandomF({4}, gen);
    Tensor y = CheckGradients(t, {steps, cin}, xi, {ki, bi});
    Conv2DCase r;
    r.sh = c.stride, r.dh = c.dilation, r.groups = c.groups, r.ow = 1;
    const int64_t window = 2 * c.dilation + 1;
    r.oh =
        c.causal || c.padding == Padding::kSame ? (steps + c.stride - 1) / c.stride : (steps - window) / c.stride + 1;
    r.pt = c.causal                      ? window - 1
           : c.padding == Padding::kSame ? SamePadBefore(steps, r.oh, 3, c.stride, c.dilation)
                                         : 0;
    Tensor want =
        NaiveConv(xi.Reshape({2, steps, 1, cin}).value(), ki.Reshape({3, 1, cin / c.groups, 4}).value(), bi, r);
    for (float& v : want.flat<float>()) v = std::tanh(v);
    ExpectClose(y.Reshape({2, r.oh, 1, 4}).value(), want, "Conv1D");
  }
}

TEST(ConvMoreTest, Conv2DWithDilationAndGroups) {
  Gen gen(22);
  LayerSpec s = Spec(LayerType::kConv2D, "conv");
  s.filters = 4;
  s.kernel_size = {2, 3};
  s.dilation_rate = {2, 1};
  s.groups = 2;
  s.padding = Padding::kSame;
  auto layer = Built(s, {5, 4, 6});
  EXPECT_FALSE(layer->device_kernels());
  EXPECT_EQ(layer->Variables()[0].shape, Shape({2, 3, 3, 4}));
  Tensor x = RandomF({2, 5, 4, 6}, gen), k = RandomF({2, 3, 3, 4}, gen), b = RandomF({4}, gen);
  Tensor y = CheckGradients(s, {5, 4, 6}, x, {k, b});
  Conv2DCase r;
  r.dh = 2, r.groups = 2, r.oh = 5, r.ow = 4;
  r.pt = SamePadBefore(5, 5, 2, 1, 2), r.pl = SamePadBefore(4, 4, 3, 1, 1);
  ExpectClose(y, NaiveConv(x, k, b, r), "Conv2D dilated, grouped");
  s.groups = 4;  // does not divide 6 channels
  EXPECT_FALSE(MakeLayer(s).value()->Build({5, 4, 6}, DType::kFloat32).ok());
}

TEST(ConvMoreTest, DepthwiseAndSeparableConv2D) {
  Gen gen(23);
  LayerSpec s = Spec(LayerType::kDepthwiseConv2D, "dw");
  s.kernel_size = {2, 2};
  s.depth_multiplier = 2;
  s.strides = {2, 1};
  auto layer = Built(s, {5, 4, 3});
  auto vars = layer->Variables();
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_EQ(vars[0].name, "dw/depthwise_kernel");
  EXPECT_EQ(vars[0].shape, Shape({2, 2, 3, 2}));
  EXPECT_EQ(vars[1].shape, Shape({6}));
  Tensor x = RandomF({2, 5, 4, 3}, gen), k = RandomF({2, 2, 3, 2}, gen), b = RandomF({6}, gen);
  Tensor y = CheckGradients(s, {5, 4, 3}, x, {k, b});
  // y[.., c * 2 + m] = b + sum x[.., c] * k[ky, kx, c, m]
  Tensor want = Tensor::Zeros(DType::kFloat32, {2, 2, 3, 6});
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t oy = 0; oy < 2; ++oy)
      for (int64_t ox = 0; ox < 3; ++ox)
        for (int64_t c = 0; c < 3; ++c)
          for (int64_t m = 0; m < 2; ++m) {
            double acc = b.data<float>()[c * 2 + m];
            for (int64_t ky = 0; ky < 2; ++ky)
              for (int64_t kx = 0; kx < 2; ++kx)
                acc += double(x.data<float>()[((n * 5 + oy * 2 + ky) * 4 + ox + kx) * 3 + c]) *
                       k.data<float>()[((ky * 2 + kx) * 3 + c) * 2 + m];
            want.data<float>()[((n * 2 + oy) * 3 + ox) * 6 + c * 2 + m] = static_cast<float>(acc);
          }
  ExpectClose(y, want, "DepthwiseConv2D");

  LayerSpec sep = Spec(LayerType::kSeparableConv2D, "sep");
  sep.filters = 3;
  sep.kernel_size = {2, 2};
  sep.depth_multiplier = 2;
  sep.strides = {2, 1};
  sep.activation = Activation::kSigmoid;
  vars = Built(sep, {5, 4, 3})->Variables();
  ASSERT_EQ(vars.size(), 3u);
  EXPECT_EQ(vars[0].name, "sep/depthwise_kernel");
  EXPECT_EQ(vars[1].name, "sep/pointwise_kernel");
  EXPECT_EQ(vars[1].shape, Shape({1, 1, 6, 3}));
  EXPECT_EQ(vars[2].name, "sep/bias");
  Tensor pk = RandomF({1, 1, 6, 3}, gen), pb = RandomF({3}, gen);
  y = CheckGradients(sep, {5, 4, 3}, x, {k, pk, pb});
  // The depthwise step without its bias, then the pointwise product.
  Tensor mid = want.Clone();
  for (int64_t i = 0; i < mid.size(); ++i) mid.data<float>()[i] -= b.data<float>()[i % 6];
  Conv2DCase one;
  one.oh = 2, one.ow = 3;
  Tensor want2 = NaiveConv(mid, pk, pb, one);
  for (float& v : want2.flat<float>()) v = 1 / (1 + std::exp(-v));
  ExpectClose(y, want2, "SeparableConv2D");
}

TEST(ConvMoreTest, Conv2DTransposeIsTheConvolutionsInputGradient) {
  // One input pixel spreads the kernel, scaled, over the output.
  LayerSpec s = Spec(LayerType::kConv2DTranspose, "t");
  s.filters = 1;
  s.kernel_size = {2, 2};
  s.use_bias = false;
  Tensor y = CheckGradients(s, {1, 1, 1}, F({1, 1, 1, 1}, {2}), {F({2, 2, 1, 1}, {1, 2, 3, 4})});
  EXPECT_EQ(y.shape(), Shape({1, 2, 2, 1}));
  ExpectValues(y, {2, 4, 6, 8}, 1e-6f, "Conv2DTranspose");

  Gen gen(24);
  for (Padding padding : {Padding::kValid, Padding::kSame}) {
    LayerSpec t = Spec(LayerType::kConv2DTranspose, "tr");
    t.filters = 2;
    t.kernel_size = {3, 2};
    t.strides = {2, 2};
    t.padding = padding;
    const bool same = padding == Padding::kSame;
    auto layer = Built(t, {2, 3, 3});
    EXPECT_EQ(layer->Variables()[0].shape, Shape({3, 2, 2, 3}));  // [kh, kw, filters, in]
    // Keras' sizes: in * stride, plus max(kernel - stride, 0) when valid.
    const int64_t oh = same ? 4 : 5, ow = 6;
    Tensor x = RandomF({2, 2, 3, 3}, gen), k = RandomF({3, 2, 2, 3}, gen), b = RandomF({2}, gen);
    y = CheckGradients(t, {2, 3, 3}, x, {k, b});
    ASSERT_EQ(y.shape(), Shape({2, oh, ow, 2}));
    const int64_t pt = same ? SamePadBefore(oh, 2, 3, 2, 1) : 0, pl = same ? SamePadBefore(ow, 3, 2, 2, 1) : 0;
    Tensor want = Tensor::Zeros(DType::kFloat32, {2, oh, ow, 2});
    for (int64_t i = 0; i < want.size(); ++i) want.data<float>()[i] = b.data<float>()[i % 2];
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t iy = 0; iy < 2; ++iy)
        for (int64_t ix = 0; ix < 3; ++ix)
          for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 2; ++kx) {
              const int64_t oy = iy * 2 - pt + ky, ox = ix * 2 - pl + kx;
              if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
              for (int64_t f = 0; f < 2; ++f)
                for (int64_t c = 0; c < 3; ++c)
                  want.data<float>()[((n * oh + oy) * ow + ox) * 2 + f] +=
                      x.data<float>()[((n * 2 + iy) * 3 + ix) * 3 + c] *
                      k.data<float>()[((ky * 2 + kx) * 2 + f) * 3 + c];
            }
    ExpectClose(y, want, same ? "Conv2DTranspose same" : "Conv2DTranspose valid");
  }
}

// ------------------------------------------------------------ Keras JSON

StatusOr<ModelSpec> ParseOne(const json& layer, const json& input_shape = json::array({nullptr, 6, 6, 4})) {
  json doc = {
      {"class_name", "Sequential"},
      {"config",
       {{"name", "m"},
        {"layers",
         json::array({{{"class_name", "InputLayer"}, {"config", {{"batch_shape", input_shape}, {"dtype", "float32"}}}},
                      layer})}}}};
  return ParseKerasModel(doc, "model.json");
}

TEST(KerasLayersTest, EveryLayerParsesItsMinimalConfig) {
  const std::pair<const char*, json> cases[] = {
      {"ReLU", json::object()},
      {"LeakyReLU", json::object()},
      {"PReLU", json::object()},
      {"ELU", json::object()},
      {"Softmax", json::object()},
      {"ThresholdedReLU", json::object()},
      {"Rescaling", {{"scale", 0.5}}},
      {"LayerNormalization", json::object()},
      {"Permute", {{"dims", {2, 1, 3}}}},
      {"RepeatVector", {{"n", 2}}},
      {"SpatialDropout1D", {{"rate", 0.1}}},
      {"SpatialDropout2D", {{"rate", 0.1}}},
      {"GaussianNoise", {{"stddev", 0.1}}},
      {"GaussianDropout", {{"rate", 0.1}}},
      {"GlobalMaxPooling1D", json::object()},
      {"GlobalMaxPooling2D", json::object()},
      {"GlobalAveragePooling1D", json::object()},
      {"MaxPooling1D", json::object()},
      {"AveragePooling1D", json::object()},
      {"Conv1D", {{"filters", 2}, {"kernel_size", 3}}},
      {"ZeroPadding1D", json::object()},
      {"ZeroPadding2D", json::object()},
      {"Cropping1D", json::object()},
      {"Cropping2D", json::object()},
      {"UpSampling1D", json::object()},
      {"UpSampling2D", json::object()},
      {"DepthwiseConv2D", {{"kernel_size", 3}}},
      {"SeparableConv2D", {{"filters", 2}, {"kernel_size", 3}}},
      {"Conv2DTranspose", {{"filters", 2}, {"kernel_size", 3}}},
      {"CategoryEncoding", {{"num_tokens", 3}}},
      {"Hashing", {{"num_bins", 3}}},
  };
  for (const auto& [cls, config] : cases) {
    json c = config;
    c["name"] = "x";
    auto m = ParseOne({{"class_name", cls}, {"config", c}});
    ASSERT_TRUE(m.ok()) << cls << ": " << m.status();
    EXPECT_EQ(LayerTypeName(m->layers.back().type), cls);
  }
  // Defaults that differ between layers sharing a field.
  EXPECT_EQ(ParseOne({{"class_name", "LeakyReLU"}, {"config", json::object()}})->layers.back().negative_slope, 0.3);
  EXPECT_EQ(ParseOne({{"class_name", "ThresholdedReLU"}, {"config", json::object()}})->layers.back().threshold, 1.0);
  const LayerSpec mp = ParseOne({{"class_name", "MaxPooling1D"}, {"config", {{"pool_size", {3}}}}})->layers.back();
  EXPECT_EQ(mp.kernel_size[0], 3);
  EXPECT_EQ(mp.strides[0], 3);  // strides default to the pool size
}

TEST(KerasLayersTest, Keras3AndKeras2Configs) {
  // Keras 3's SeparableConv2D.
  const json glorot = {{"module", "keras.initializers"},
                       {"class_name", "GlorotUniform"},
                       {"config", {{"seed", nullptr}}},
                       {"registered_name", nullptr}};
  json sep = {{"name", "sep"},
              {"trainable", true},
              {"dtype", "float32"},
              {"filters", 4},
              {"kernel_size", {3, 3}},
              {"strides", {1, 1}},
              {"padding", "same"},
              {"data_format", "channels_last"},
              {"dilation_rate", {1, 1}},
              {"depth_multiplier", 2},
              {"activation", "gelu"},
              {"use_bias", true},
              {"depthwise_initializer", glorot},
              {"pointwise_initializer", glorot},
              {"bias_initializer", "zeros"},
              {"depthwise_regularizer", nullptr},
              {"pointwise_regularizer", nullptr},
              {"bias_regularizer", nullptr},
              {"activity_regularizer", nullptr},
              {"depthwise_constraint", nullptr},
              {"pointwise_constraint", nullptr},
              {"bias_constraint", nullptr}};
  auto m = ParseOne({{"class_name", "SeparableConv2D"}, {"config", sep}});
  ASSERT_TRUE(m.ok()) << m.status();
  const LayerSpec& s = m->layers.back();
  EXPECT_EQ(s.filters, 4);
  EXPECT_EQ(s.depth_multiplier, 2);
  EXPECT_EQ(s.padding, Padding::kSame);
  EXPECT_EQ(s.activation, Activation::kGelu);
  // Keras 2's / TF.js' LeakyReLU alpha, Keras 3's negative_slope.
  EXPECT_EQ(ParseOne({{"class_name", "LeakyReLU"}, {"config", {{"alpha", 0.1}}}})->layers.back().negative_slope, 0.1);
  EXPECT_EQ(
      ParseOne({{"class_name", "LeakyReLU"}, {"config", {{"negative_slope", 0.2}}}})->layers.back().negative_slope,
      0.2);
  // Conv1D causal and dilated, Conv2D dilated and grouped.
  m = ParseOne({{"class_name", "Conv1D"},
                {"config", {{"filters", 2}, {"kernel_size", {3}}, {"padding", "causal"}, {"dilation_rate", {2}}}}},
               json::array({nullptr, 8, 3}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->layers.back().causal);
  EXPECT_EQ(m->layers.back().dilation_rate[0], 2);
  m = ParseOne({{"class_name", "Conv2D"},
                {"config", {{"filters", 4}, {"kernel_size", 3}, {"dilation_rate", {2, 2}}, {"groups", 2}}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->layers.back().groups, 2);
  // LayerNormalization and ZeroPadding2D's pair of pairs.
  m = ParseOne({{"class_name", "LayerNormalization"},
                {"config", {{"axis", {-2, -1}}, {"epsilon", 1e-5}, {"center", false}, {"rms_scaling", false}}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->layers.back().norm_axes, std::vector<int64_t>({-2, -1}));
  EXPECT_FALSE(m->layers.back().center);
  m = ParseOne({{"class_name", "ZeroPadding2D"}, {"config", {{"padding", {{1, 2}, {3, 4}}}}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->layers.back().margins, (std::array<int64_t, 4>{1, 2, 3, 4}));
  m = ParseOne({{"class_name", "CategoryEncoding"}, {"config", {{"num_tokens", 5}, {"output_mode", "one_hot"}}}});
  EXPECT_EQ(m->layers.back().encoding, EncodingMode::kOneHot);
}

TEST(KerasLayersTest, UnsupportedArgumentsNameLayerAndArgument) {
  struct Case {
    const char* cls;
    json config;
    const char* want;
  };
  const Case cases[] = {
      {"UpSampling2D", {{"interpolation", "bilinear"}}, "argument interpolation=\"bilinear\" is not supported"},
      {"Conv2DTranspose", {{"filters", 2}, {"kernel_size", 3}, {"output_padding", {1, 1}}}, "argument output_padding"},
      {"Conv1D", {{"filters", 2}, {"kernel_size", 3}, {"padding", "full"}}, "padding=\"full\""},
      {"ReLU", {{"negative_slope", -1}}, "argument negative_slope"},
      {"LayerNormalization", {{"rms_scaling", true}}, "argument rms_scaling=true is not supported"},
      {"Hashing", {{"num_bins", 3}, {"salt", 7}}, "argument salt=7 is not supported"},
      {"CategoryEncoding", {{"num_tokens", 3}, {"output_mode", "tf_idf"}}, "output_mode=\"tf_idf\""},
      {"ELU", {{"beta", 1}}, "argument beta is not supported"},
  };
  for (const Case& c : cases) {
    json config = c.config;
    config["name"] = "bad";
    auto m = ParseOne({{"class_name", c.cls}, {"config", config}});
    ASSERT_FALSE(m.ok()) << c.cls;
    EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
    EXPECT_THAT(m.status().message(), HasSubstr(std::string(c.cls) + " \"bad\"")) << c.cls;
    EXPECT_THAT(m.status().message(), HasSubstr(c.want)) << c.cls;
  }
  auto m = ParseOne({{"class_name", "Lambda"}, {"config", json::object()}});
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("SeparableConv2D"));  // in the list of supported layers
}

// ------------------------------------------------------------------ model

TEST(LayersMoreModelTest, GradientsThroughAModelOfNewLayers) {
  ModelSpec spec;
  spec.input_shape = {6, 2};
  auto layer = [&](LayerType t, const std::string& name) {
    LayerSpec s = Spec(t, name);
    s.path = "model.layers[" + std::to_string(spec.layers.size()) + "]";
    return s;
  };
  LayerSpec conv = layer(LayerType::kConv1D, "conv");
  conv.filters = 3;
  conv.kernel_size = {2, 1};
  conv.causal = true;
  conv.activation = Activation::kSwish;
  spec.layers.push_back(conv);
  spec.layers.push_back(layer(LayerType::kLayerNormalization, "ln"));
  spec.layers.push_back(layer(LayerType::kGlobalAveragePooling1D, "pool"));
  LayerSpec dense = layer(LayerType::kDense, "out");
  dense.units = 2;
  dense.activation = Activation::kSoftmax;
  spec.layers.push_back(dense);
  auto model = Model::Create(spec, {LossType::kSparseCategoricalCrossentropy, false});
  ASSERT_TRUE(model.ok()) << model.status();
  Gen gen(30);
  std::vector<Tensor> values;
  for (const VariableSpec& v : (*model)->variables()) values.push_back(RandomF(v.shape, gen, 0.5f, 1.5f));
  Tensor x = RandomF({4, 6, 2}, gen);
  Tensor y = Tensor::FromVector({4}, std::vector<int64_t>{0, 1, 1, 0}).value();
  auto out = (*model)->ComputeGradients(values, x, y);
  ASSERT_TRUE(out.ok()) << out.status();
  for (size_t v = 0; v < values.size(); ++v) {
    SCOPED_TRACE((*model)->variables()[v].name);
    const float eps = 1e-2f;
    auto loss = [&](float delta) {
      std::vector<Tensor> p = values;
      p[v] = values[v].Clone();
      p[v].data<float>()[0] += delta;
      return static_cast<double>((*model)->ComputeGradients(p, x, y).value().loss);
    };
    const double num = (loss(eps) - loss(-eps)) / (2 * eps);
    const double a = out->grads[v].dense.data<float>()[0];
    EXPECT_NEAR(a, num, 2e-3 + 2e-2 * std::fabs(num));
  }
}

TEST(LayersMoreModelTest, HashedIdsEncodedForADense) {
  ModelSpec spec;
  spec.input_shape = {3};
  spec.input_dtype = DType::kInt64;
  LayerSpec hash = Spec(LayerType::kHashing, "hash");
  hash.num_bins = 5;
  hash.path = "model.layers[0]";
  LayerSpec enc = Spec(LayerType::kCategoryEncoding, "enc");
  enc.num_tokens = 5;
  enc.encoding = EncodingMode::kCount;
  enc.path = "model.layers[1]";
  LayerSpec dense = Spec(LayerType::kDense, "out");
  dense.units = 1;
  dense.path = "model.layers[2]";
  spec.layers = {hash, enc, dense};
  auto model = Model::Create(spec, {LossType::kMeanSquaredError, false});
  ASSERT_TRUE(model.ok()) << model.status();
  Gen gen(31);
  std::vector<Tensor> values;
  for (const VariableSpec& v : (*model)->variables()) values.push_back(RandomF(v.shape, gen));
  Tensor x = Tensor::FromVector({2, 3}, std::vector<int64_t>{7, 7, 123, -4, 0, 99}).value();
  Tensor y = F({2, 1}, {1, -1});
  auto out = (*model)->ComputeGradients(values, x, y);
  ASSERT_TRUE(out.ok()) << out.status();
  // Each example's counts sum to its three ids: the kernel's gradient sums to 3 * sum(dL/dy).
  auto pred = (*model)->Predict(values, x).value();
  double want = 0;
  for (int64_t b = 0; b < 2; ++b) want += 3 * 2 * (pred.data<float>()[b] - y.data<float>()[b]) / 2;
  double got = 0;
  for (float g : out->grads[0].dense.flat<float>()) got += g;
  EXPECT_NEAR(got, want, 1e-4);
}

}  // namespace
}  // namespace tfjob::model
