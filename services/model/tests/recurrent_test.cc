// SimpleRNN, LSTM and GRU (recurrent.cc): every gradient against finite
// differences in each mode (sequences, backwards, no bias, dropout while
// training, both GRU forms), the GRU with reset_after (which TF.js cannot
// write, so the TF.js goldens do not cover it) against its formula worked
// by hand, and the Keras configs. The TF.js goldens (tfjs_golden_test)
// check the rest of the arithmetic against Keras itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "services/model/keras_model.h"
#include "services/model/model.h"
#include "services/model/tests/layers_more_testing.h"

namespace tfjob::model {
namespace {

using ::testing::HasSubstr;
using namespace more_testing;  // NOLINT(google-build-using-namespace): the test helpers

LayerSpec Rnn(LayerType type, int64_t units) {
  LayerSpec s = Spec(type, "rnn");
  s.units = units;
  s.activation = Activation::kTanh;
  return s;
}

// Small random parameters of the layer's variables.
std::vector<Tensor> Params(const LayerSpec& spec, const Shape& in, Gen& gen) {
  auto layer = Built(spec, in);
  std::vector<Tensor> p;
  if (!layer) return p;
  for (const VariableSpec& v : layer->Variables()) p.push_back(RandomF(v.shape, gen, -1.f, 1.f));
  return p;
}

void CheckMode(const LayerSpec& spec, bool training = false) {
  const Shape in{4, 3};
  Gen gen(11);
  const Tensor x = RandomF({2, 4, 3}, gen);
  more_testing::CheckGradients(spec, in, x, Params(spec, in, gen), training);
}

TEST(RecurrentTest, SimpleRnnGradients) {
  LayerSpec s = Rnn(LayerType::kSimpleRNN, 3);
  CheckMode(s);
  s.return_sequences = true;
  CheckMode(s);
  s.go_backwards = true;
  s.use_bias = false;
  s.activation = Activation::kSoftsign;
  CheckMode(s);
}

TEST(RecurrentTest, LstmGradients) {
  LayerSpec s = Rnn(LayerType::kLSTM, 3);
  CheckMode(s);
  s.return_sequences = true;
  CheckMode(s);
  s.go_backwards = true;
  s.recurrent_activation = Activation::kHardSigmoid;
  CheckMode(s);
  s.use_bias = false;
  s.activation = Activation::kSwish;  // a cell activation whose gradient needs its input
  CheckMode(s);
}

TEST(RecurrentTest, GruGradientsInBothForms) {
  for (bool reset_after : {true, false}) {
    SCOPED_TRACE(reset_after ? "reset_after" : "reset before");
    LayerSpec s = Rnn(LayerType::kGRU, 3);
    s.reset_after = reset_after;
    CheckMode(s);
    s.return_sequences = true;
    s.go_backwards = true;
    CheckMode(s);
    s.use_bias = false;
    CheckMode(s);
  }
}

// return_state: the packed [output | h (| c)] and its gradients, every
// part of it (the output part, the final state, an LSTM's final cell).
TEST(RecurrentTest, ReturnStateGradients) {
  for (LayerType t : {LayerType::kSimpleRNN, LayerType::kLSTM, LayerType::kGRU}) {
    LayerSpec s = Rnn(t, 3);
    s.return_state = true;
    CheckMode(s);
    s.return_sequences = true;
    s.go_backwards = true;
    CheckMode(s);
  }
}

// A Functional model takes the outputs apart by Keras' tensor index:
// [sequence, h, c] of an LSTM; the final state equals the sequence's last
// step; an index past the outputs is refused.
TEST(RecurrentTest, ReturnStateOutputsByTensorIndex) {
  using nlohmann::json;
  auto model = [](int64_t index) {
    const json lstm = {{"name", "lstm"},
                       {"class_name", "LSTM"},
                       {"config", {{"name", "lstm"}, {"units", 2}, {"return_sequences", true}, {"return_state", true}}},
                       {"inbound_nodes", {{{"in", 0, 0, json::object()}}}}};
    const json in = {{"name", "in"},
                     {"class_name", "InputLayer"},
                     {"config", {{"batch_input_shape", {nullptr, 3, 2}}, {"name", "in"}}},
                     {"inbound_nodes", json::array()}};
    return ParseKerasModel({{"class_name", "Model"},
                            {"config",
                             {{"name", "m"},
                              {"layers", {in, lstm}},
                              {"input_layers", {{"in", 0, 0}}},
                              {"output_layers", {{"lstm", 0, index}}}}}},
                           "m.json");
  };
  Gen gen(3);
  const Tensor x = RandomF({2, 3, 2}, gen);
  std::vector<Tensor> outs;
  for (int64_t k = 0; k < 3; ++k) {
    auto spec = model(k);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto m = Model::Create(*spec, LossSpec{});
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->output_shape(), k == 0 ? (Shape{3, 2}) : (Shape{2}));
    auto y = (*m)->Predict((*m)->InitialValues(1), x);
    ASSERT_TRUE(y.ok()) << y.status();
    outs.push_back(*y);
  }
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t u = 0; u < 2; ++u) {
      EXPECT_EQ(outs[1].data<float>()[b * 2 + u], outs[0].data<float>()[b * 6 + 2 * 2 + u]) << b << " " << u;
    }
  }
  EXPECT_NE(outs[1].data<float>()[0], outs[2].data<float>()[0]);  // h is not c
  EXPECT_THAT(model(3).status().message(), HasSubstr("names \"lstm\" call 0, which does not exist"));
}

TEST(RecurrentTest, DropoutWhileTrainingHasItsGradients) {
  for (LayerType t : {LayerType::kSimpleRNN, LayerType::kLSTM, LayerType::kGRU}) {
    LayerSpec s = Rnn(t, 3);
    s.rate = 0.3;
    s.recurrent_dropout = 0.4;
    s.seed = 5;
    s.return_sequences = true;
    CheckMode(s, /*training=*/true);
  }
}

TEST(RecurrentTest, DropoutIsTheIdentityAtInference) {
  LayerSpec s = Rnn(LayerType::kLSTM, 2);
  const Shape in{3, 2};
  Gen gen(3);
  const Tensor x = RandomF({2, 3, 2}, gen);
  const auto p = Params(s, in, gen);
  auto plain = Built(s, in)->Forward(p, x, false);
  s.rate = 0.5;
  s.recurrent_dropout = 0.5;
  auto dropped = Built(s, in)->Forward(p, x, false);
  ASSERT_TRUE(plain.ok() && dropped.ok());
  for (int64_t i = 0; i < plain->size(); ++i) EXPECT_EQ(plain->data<float>()[i], dropped->data<float>()[i]);
  auto trained = Built(s, in)->Forward(p, x, true);
  ASSERT_TRUE(trained.ok());
  bool differs = false;
  for (int64_t i = 0; i < plain->size(); ++i) differs |= plain->data<float>()[i] != trained->data<float>()[i];
  EXPECT_TRUE(differs) << "dropout 0.5 while training changed nothing";
}

// One unit, one feature, two steps: Keras 3's GRU (reset_after, sigmoid)
// worked by hand. Kernel [1, 3] = (z, r, h), bias [2, 3] = input row, then
// recurrent row.
TEST(RecurrentTest, GruResetAfterMatchesKerasFormula) {
  LayerSpec s = Rnn(LayerType::kGRU, 1);
  s.recurrent_activation = Activation::kSigmoid;
  s.reset_after = true;
  s.return_sequences = true;
  auto layer = Built(s, {2, 1});
  ASSERT_TRUE(layer);
  ASSERT_EQ(layer->Variables()[2].shape, (Shape{2, 3}));
  const float k[3] = {0.5f, -0.3f, 0.8f}, rk[3] = {0.2f, 0.7f, -0.4f};
  const float bi[3] = {0.1f, 0.05f, -0.2f}, br[3] = {-0.1f, 0.3f, 0.25f};
  const std::vector<Tensor> p = {F({1, 3}, {k[0], k[1], k[2]}), F({1, 3}, {rk[0], rk[1], rk[2]}),
                                 F({2, 3}, {bi[0], bi[1], bi[2], br[0], br[1], br[2]})};
  const float xs[2] = {0.9f, -0.6f};
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  double h = 0;
  std::vector<float> want;
  for (float x : xs) {
    const double z = sig(x * k[0] + bi[0] + h * rk[0] + br[0]);
    const double r = sig(x * k[1] + bi[1] + h * rk[1] + br[1]);
    const double hh = std::tanh(x * k[2] + bi[2] + r * (h * rk[2] + br[2]));
    h = z * h + (1 - z) * hh;
    want.push_back(static_cast<float>(h));
  }
  auto y = layer->Forward(p, F({1, 2, 1}, {xs[0], xs[1]}), false);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectValues(*y, want, 1e-6f, "GRU reset_after");
}

// An LSTM over a constant input with zero weights but the bias: the forget
// gate's bias of one (unit_forget_bias) is what Keras starts from.
TEST(RecurrentTest, UnitForgetBiasStartsTheForgetGateAtOne) {
  LayerSpec s = Rnn(LayerType::kLSTM, 2);
  auto layer = Built(s, {3, 4});
  ASSERT_TRUE(layer);
  const auto vars = layer->Variables();
  ASSERT_EQ(vars.size(), 3u);
  EXPECT_EQ(vars[0].shape, (Shape{4, 8}));
  EXPECT_EQ(vars[1].shape, (Shape{2, 8}));
  EXPECT_EQ(vars[1].init.kind, Initializer::Kind::kOrthogonal);
  ASSERT_EQ(vars[2].init.kind, Initializer::Kind::kValue);
  ExpectValues(vars[2].value, {0, 0, 1, 1, 0, 0, 0, 0}, 0, "bias");
  s.unit_forget_bias = false;
  EXPECT_EQ(Built(s, {3, 4})->Variables()[2].init.kind, Initializer::Kind::kZeros);
}

LayerSpec Bidi(LayerType inner, BidiMerge merge, bool sequences) {
  LayerSpec s = Spec(LayerType::kBidirectional, "bi");
  LayerSpec f = Rnn(inner, 2);
  f.name = "cell";
  f.return_sequences = sequences;
  LayerSpec b = f;
  b.go_backwards = true;
  s.wrapped = {f, b};
  s.bidi_merge = merge;
  return s;
}

TEST(RecurrentTest, BidirectionalGradientsInEveryMergeMode) {
  for (BidiMerge m : {BidiMerge::kConcat, BidiMerge::kSum, BidiMerge::kMul, BidiMerge::kAve}) {
    for (bool sequences : {false, true}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(m)) + (sequences ? " sequences" : " last"));
      CheckMode(Bidi(LayerType::kGRU, m, sequences));
    }
  }
  CheckMode(Bidi(LayerType::kLSTM, BidiMerge::kConcat, true));
}

TEST(RecurrentTest, BidirectionalIsBothDirectionsSideBySide) {
  const LayerSpec bi = Bidi(LayerType::kLSTM, BidiMerge::kConcat, true);
  auto layer = Built(bi, {4, 3});
  ASSERT_TRUE(layer);
  const auto vars = layer->Variables();
  ASSERT_EQ(vars.size(), 6u);
  EXPECT_EQ(vars[0].name, "bi/forward_cell/kernel");
  EXPECT_EQ(vars[5].name, "bi/backward_cell/bias");
  Gen gen(4);
  const Tensor x = RandomF({2, 4, 3}, gen);
  const auto p = Params(bi, {4, 3}, gen);
  auto y = layer->Forward(p, x, false);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), (Shape{2, 4, 4}));
  // The halves alone: the forward layer, and the backward one (whose
  // sequence runs last to first, so Bidirectional turns it around).
  LayerSpec f = bi.wrapped[0], b = bi.wrapped[1];
  auto yf = Built(f, {4, 3})->Forward(std::span(p).first(3), x, false);
  auto yb = Built(b, {4, 3})->Forward(std::span(p).subspan(3), x, false);
  ASSERT_TRUE(yf.ok() && yb.ok());
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t t = 0; t < 4; ++t) {
      for (int64_t u = 0; u < 2; ++u) {
        EXPECT_EQ(y->data<float>()[(n * 4 + t) * 4 + u], yf->data<float>()[(n * 4 + t) * 2 + u]);
        EXPECT_EQ(y->data<float>()[(n * 4 + t) * 4 + 2 + u], yb->data<float>()[(n * 4 + 3 - t) * 2 + u]);
      }
    }
  }
}

TEST(RecurrentTest, TimeDistributedAppliesOneLayerToEveryStep) {
  LayerSpec td = Spec(LayerType::kTimeDistributed, "td");
  LayerSpec dense = Spec(LayerType::kDense, "d");
  dense.units = 2;
  dense.activation = Activation::kTanh;
  td.wrapped = {dense};
  auto layer = Built(td, {4, 3});
  ASSERT_TRUE(layer);
  ASSERT_EQ(layer->Variables()[0].name, "td/kernel");
  CheckMode(td);
  // A GRU over each of two sequences of an example.
  td.wrapped = {Rnn(LayerType::kGRU, 2)};
  Gen gen(9);
  const Tensor x = RandomF({2, 2, 4, 3}, gen);
  more_testing::CheckGradients(td, {2, 4, 3}, x, Params(td, {2, 4, 3}, gen));
}

nlohmann::json Sequential(const nlohmann::json& layer) {
  nlohmann::json l = layer;
  l["config"]["batch_input_shape"] = {nullptr, 5, 3};
  return {{"class_name", "Sequential"}, {"config", {{"name", "s"}, {"layers", {l}}}}};
}

TEST(RecurrentTest, KerasConfigs) {
  // Keras 3's GRU: reset_after defaults to true, so the bias has two rows.
  auto gru = ParseKerasModel(Sequential({{"class_name", "GRU"}, {"config", {{"units", 4}}}}), "m.json");
  ASSERT_TRUE(gru.ok()) << gru.status();
  const LayerSpec& g = gru->layers[0];
  EXPECT_TRUE(g.reset_after);
  EXPECT_EQ(g.recurrent_activation, Activation::kSigmoid);
  EXPECT_EQ(g.activation, Activation::kTanh);
  auto model = Model::Create(*gru, LossSpec{});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->variables()[2].shape, (Shape{2, 12}));

  // TF.js' LSTM writes unit_forget_bias null (its default, false).
  auto lstm = ParseKerasModel(Sequential({{"class_name", "LSTM"},
                                          {"config",
                                           {{"units", 2},
                                            {"unit_forget_bias", nullptr},
                                            {"recurrent_activation", "hard_sigmoid"},
                                            {"return_sequences", true},
                                            {"go_backwards", true},
                                            {"implementation", nullptr},
                                            {"unroll", false}}}}),
                              "m.json");
  ASSERT_TRUE(lstm.ok()) << lstm.status();
  EXPECT_FALSE(lstm->layers[0].unit_forget_bias);
  EXPECT_TRUE(lstm->layers[0].return_sequences);
  EXPECT_TRUE(lstm->layers[0].go_backwards);
  EXPECT_EQ(lstm->layers[0].recurrent_activation, Activation::kHardSigmoid);

  auto err = [](const nlohmann::json& config) {
    auto m = ParseKerasModel(Sequential({{"class_name", "LSTM"}, {"config", config}}), "m.json");
    return m.ok() ? std::string("accepted") : m.status().message();
  };
  EXPECT_THAT(err({{"units", 2}, {"return_state", true}}),
              HasSubstr("a layer of several outputs (return_state) in a Sequential model, which Keras refuses too"));
  EXPECT_THAT(err({{"units", 2}, {"stateful", true}}), HasSubstr("argument stateful=true is not supported"));
  EXPECT_THAT(err({{"units", 2}, {"dropout", 1.5}}), HasSubstr("argument dropout=1.5"));
  EXPECT_THAT(err({{"units", 0}}), HasSubstr("units=0 must be positive"));
  EXPECT_THAT(err({{"units", 2}, {"bias_initializer", "random_normal"}}),
              HasSubstr("unit_forget_bias=true with bias_initializer"));
  EXPECT_THAT(err({{"units", 2}, {"cell_clip", 1}}), HasSubstr("argument cell_clip is not supported"));
}

TEST(RecurrentTest, WrapperConfigs) {
  using nlohmann::json;
  // Keras 3 writes both copies, named forward_<name> and backward_<name>.
  const json lstm = {{"module", "keras.layers"},
                     {"class_name", "LSTM"},
                     {"config", {{"name", "forward_lstm"}, {"units", 3}, {"return_sequences", true}}},
                     {"registered_name", nullptr}};
  json back = lstm;
  back["config"]["name"] = "backward_lstm";
  back["config"]["go_backwards"] = true;
  auto m = ParseKerasModel(
      Sequential({{"class_name", "Bidirectional"},
                  {"config", {{"name", "bi"}, {"layer", lstm}, {"backward_layer", back}, {"merge_mode", "sum"}}}}),
      "m.json");
  ASSERT_TRUE(m.ok()) << m.status();
  const LayerSpec& bi = m->layers[0];
  ASSERT_EQ(bi.wrapped.size(), 2u);
  EXPECT_EQ(bi.bidi_merge, BidiMerge::kSum);
  EXPECT_EQ(bi.wrapped[0].name, "lstm");
  EXPECT_FALSE(bi.wrapped[0].go_backwards);
  EXPECT_TRUE(bi.wrapped[1].go_backwards);
  auto model = Model::Create(*m, LossSpec{});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->variables()[0].name, "bi/forward_lstm/kernel");
  EXPECT_EQ((*model)->variables()[3].name, "bi/backward_lstm/kernel");

  auto err = [](const json& config, const char* cls = "Bidirectional") {
    auto r = ParseKerasModel(Sequential({{"class_name", cls}, {"config", config}}), "m.json");
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_THAT(err({{"layer", lstm}, {"merge_mode", nullptr}}),
              HasSubstr("a layer of several outputs (merge_mode null) in a Sequential model"));
  json with_states = lstm;
  with_states["config"]["return_state"] = true;
  EXPECT_THAT(err({{"layer", with_states}}), HasSubstr("return_state=true in a Bidirectional is not supported"));
  EXPECT_THAT(err({{"layer", with_states}}, "TimeDistributed"),
              HasSubstr("argument layer: a layer of several outputs"));
  EXPECT_THAT(err({{"layer", lstm}, {"merge_mode", "max"}}), HasSubstr("merge_mode=\"max\" is not supported"));
  EXPECT_THAT(err({{"layer", {{"class_name", "Dense"}, {"config", {{"units", 2}}}}}}),
              HasSubstr("Bidirectional wraps SimpleRNN, LSTM or GRU, got Dense"));
  EXPECT_THAT(err({{"layer", {{"class_name", "LSTM"}, {"config", {{"units", 2}, {"stateful", true}}}}}}),
              HasSubstr("layer (LSTM): argument stateful=true is not supported"));
  EXPECT_THAT(err(json::object()), HasSubstr("argument layer is missing"));
  EXPECT_THAT(err({{"layer", 3}}, "TimeDistributed"), HasSubstr("argument layer=3 is not a layer"));
}

nlohmann::json Layer(const char* cls, nlohmann::json config) { return {{"class_name", cls}, {"config", config}}; }

StatusOr<std::unique_ptr<Model>> MaskedModel(const std::vector<nlohmann::json>& after) {
  nlohmann::json layers = {Layer("InputLayer", {{"batch_input_shape", {nullptr, 4}}, {"dtype", "int32"}}),
                           Layer("Embedding", {{"input_dim", 5}, {"output_dim", 2}, {"mask_zero", true}})};
  for (const auto& l : after) layers.push_back(l);
  auto spec = ParseKerasModel({{"class_name", "Sequential"}, {"config", {{"layers", layers}}}}, "m.json");
  if (!spec.ok()) return spec.status();
  return Model::Create(*spec, LossSpec{});
}

TEST(MaskTest, ALayerThatCannotTakeAMaskRefusesIt) {
  auto m = MaskedModel({Layer("Flatten", nlohmann::json::object())});
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(),
              HasSubstr("(Flatten) does not support masking, but its input carries a mask (from a Masking layer or an "
                        "Embedding with mask_zero)"));
  // A consumer ends the mask: a Flatten after a last-state LSTM is fine.
  EXPECT_TRUE(MaskedModel({Layer("LSTM", {{"units", 2}}), Layer("Flatten", nlohmann::json::object())}).ok());
  EXPECT_TRUE(
      MaskedModel({Layer("Dense", {{"units", 3}}), Layer("GlobalAveragePooling1D", nlohmann::json::object())}).ok());
  EXPECT_FALSE(MaskedModel({Layer("GlobalMaxPooling1D", nlohmann::json::object())}).ok());
  // Keras takes BatchNormalization's statistics over the real steps only.
  EXPECT_FALSE(MaskedModel({Layer("BatchNormalization", nlohmann::json::object())}).ok());
  EXPECT_TRUE(MaskedModel({Layer("LayerNormalization", nlohmann::json::object()), Layer("LSTM", {{"units", 2}})}).ok());
  // An output still masked would need Keras' masked loss: its loss is
  // refused (its forward and gradients, as the TF.js goldens take them,
  // are not).
  auto masked_out = MaskedModel({Layer("Dense", {{"units", 3}})});
  ASSERT_TRUE(masked_out.ok()) << masked_out.status();
  auto values = (*masked_out)->InitialValues(1);
  const Tensor ids = Tensor::FromVector({1, 4}, std::vector<int64_t>{1, 2, 0, 0}).value();
  auto loss = (*masked_out)->Evaluate(values, ids, Tensor::Zeros(DType::kFloat32, {1, 4, 3}));
  ASSERT_FALSE(loss.ok());
  EXPECT_THAT(loss.status().message(), HasSubstr("the model's output carries a mask (layer \"dense_2\""));
}

// GlobalAveragePooling1D over the real steps only; padded steps change
// nothing, whatever their embedding.
TEST(MaskTest, MaskedAverageAndRecurrentStateIgnorePaddedSteps) {
  for (const char* consumer : {"GlobalAveragePooling1D", "GRU"}) {
    SCOPED_TRACE(consumer);
    auto m = MaskedModel(
        {Layer(consumer, std::string(consumer) == "GRU" ? nlohmann::json{{"units", 2}} : nlohmann::json::object())});
    ASSERT_TRUE(m.ok()) << m.status();
    auto values = (*m)->InitialValues(3);
    // Ids 3, 0, 4, 0 and 3, 4: the same real steps in the same order.
    auto a = (*m)->Predict(values, Tensor::FromVector({1, 4}, std::vector<int64_t>{3, 0, 4, 0}).value());
    auto b = (*m)->Predict(values, Tensor::FromVector({1, 4}, std::vector<int64_t>{3, 4, 0, 0}).value());
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    ExpectValues(*a, {b->data<float>()[0], b->data<float>()[1]}, 1e-6f, "padded anywhere");
    if (std::string(consumer) == "GlobalAveragePooling1D") {
      const Tensor& emb = values[0];
      ExpectValues(
          *a, {(emb.data<float>()[6] + emb.data<float>()[8]) / 2, (emb.data<float>()[7] + emb.data<float>()[9]) / 2},
          1e-6f, "mean of rows 3 and 4");
    }
  }
}

}  // namespace
}  // namespace tfjob::model
