// TextVectorization (text.h): tokenizing as Keras standardizes and splits,
// the vocabulary adapt() learns and its order, the three output modes, the
// Keras config's arguments and refusals, and a model fed by text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "services/model/keras_model.h"
#include "services/model/model.h"
#include "services/model/text.h"

namespace tfjob::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

std::vector<int64_t> Ints(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.size());
}
std::vector<float> Floats(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.size()); }

TEST(TextTest, StandardizeAndSplitAsKerasDoes) {
  TextSpec s;  // lower_and_strip_punctuation, whitespace
  EXPECT_THAT(Tokenize("  Hello,  World!\tIt's\n(fine) ", s), ElementsAre("hello", "world", "its", "fine"));
  s.standardize = TextStandardize::kLower;
  EXPECT_THAT(Tokenize("Hello, World!", s), ElementsAre("hello,", "world!"));
  s.standardize = TextStandardize::kStripPunctuation;
  EXPECT_THAT(Tokenize("Hello, World!", s), ElementsAre("Hello", "World"));
  s.standardize = TextStandardize::kNone;
  EXPECT_THAT(Tokenize("A-b c", s), ElementsAre("A-b", "c"));
  s.split = TextSplit::kCharacter;
  EXPECT_THAT(Tokenize("n\xC3\xA9 x", s), ElementsAre("n", "\xC3\xA9", " ", "x"));  // UTF-8 characters, spaces kept
  s.split = TextSplit::kNone;
  EXPECT_THAT(Tokenize("two words", s), ElementsAre("two words"));
  // Only ASCII is lowered; other bytes pass as they are.
  s = TextSpec();
  EXPECT_THAT(Tokenize("\xC3\x89T\xC3\x89", s), ElementsAre("\xC3\x89t\xC3\x89"));
}

TEST(TextTest, AdaptOrdersTermsByCountThenTokenDescending) {
  ModelSpec m;
  LayerSpec l;
  l.type = LayerType::kTextVectorization;
  l.name = "tv";
  m.layers.push_back(l);
  ASSERT_TRUE(AdaptText(m, {"b a c", "a b. D", "a"}).ok());
  const TextSpec& t = m.layers[0].text;
  // a: 3, b: 2, c and d: 1 each, the tie broken by the token, descending.
  EXPECT_THAT(t.vocabulary, ElementsAre("a", "b", "d", "c"));
  EXPECT_EQ(t.build_length, 3);
  EXPECT_TRUE(t.adapted);

  // max_tokens counts the padding and OOV tokens.
  m.layers[0].text = TextSpec();
  m.layers[0].text.max_tokens = 4;
  ASSERT_TRUE(AdaptText(m, {"b a c", "a b. D", "a"}).ok());
  EXPECT_THAT(m.layers[0].text.vocabulary, ElementsAre("a", "b"));
  // The bag modes have one special token (OOV).
  m.layers[0].text = TextSpec();
  m.layers[0].text.max_tokens = 4;
  m.layers[0].text.output_mode = TextOutput::kMultiHot;
  ASSERT_TRUE(AdaptText(m, {"b a c", "a b. D", "a"}).ok());
  EXPECT_THAT(m.layers[0].text.vocabulary, ElementsAre("a", "b", "d"));

  m.layers[0].text = TextSpec();
  Status st = AdaptText(m, {"...", ""});
  EXPECT_THAT(st.message(), HasSubstr("found no token in the 2 training texts"));
}

TEST(TextTest, IntOutputIsPaddedOrCutWithOovAtOne) {
  TextSpec t;
  t.has_vocabulary = true;
  t.vocabulary = {"", "[UNK]", "the", "cat"};  // Keras' special tokens first are skipped
  t.output_sequence_length = 4;
  auto v = TextVectorizer::Create(t);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->vocabulary_size(), 4);
  auto out = v->Vectorize({"The cat sat.", "cat the cat the cat", ""});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->shape(), (Shape{3, 4}));
  EXPECT_THAT(Ints(*out), ElementsAre(2, 3, 1, 0, 3, 2, 3, 2, 0, 0, 0, 0));
}

TEST(TextTest, BagModesCountTokensWithOovAtZero) {
  TextSpec t;
  t.has_vocabulary = true;
  t.vocabulary = {"the", "cat"};
  t.output_mode = TextOutput::kCount;
  auto v = TextVectorizer::Create(t);
  ASSERT_TRUE(v.ok());
  auto out = v->Vectorize({"the cat the dog"});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->shape(), (Shape{1, 3}));
  EXPECT_THAT(Floats(*out), ElementsAre(1, 2, 1));
  t.output_mode = TextOutput::kMultiHot;
  t.max_tokens = 5;
  t.pad_to_max_tokens = true;
  v = TextVectorizer::Create(t);
  ASSERT_TRUE(v.ok());
  out = v->Vectorize({"the cat the dog"});
  ASSERT_TRUE(out.ok());
  EXPECT_THAT(Floats(*out), ElementsAre(1, 1, 1, 0, 0));
}

TEST(TextTest, BadVocabulariesAreRefusedByName) {
  TextSpec t;
  t.has_vocabulary = true;
  t.output_sequence_length = 2;
  t.vocabulary = {"a", "b", "a"};
  EXPECT_THAT(TextVectorizer::Create(t).status().message(), HasSubstr("holds \"a\" twice"));
  t.vocabulary = {"a", "", "b"};
  EXPECT_THAT(TextVectorizer::Create(t).status().message(), HasSubstr("vocabulary[1] is the empty string"));
  t.vocabulary = {"a", "b", "c"};
  t.max_tokens = 4;
  EXPECT_THAT(TextVectorizer::Create(t).status().message(), HasSubstr("5 entries with the special tokens"));
  TextSpec none;
  EXPECT_THAT(TextVectorizer::Create(none).status().message(), HasSubstr("has no vocabulary"));
}

json Layer(json config) {
  config["name"] = "tv";
  return json{{"class_name", "TextVectorization"}, {"config", config}};
}

// A Sequential model: string input [1], the TextVectorization, Embedding,
// GlobalAveragePooling1D, Dense.
json TextModel(json tv_config) {
  json layers = json::array();
  layers.push_back(json{{"class_name", "InputLayer"},
                        {"config", {{"batch_input_shape", {nullptr, 1}}, {"dtype", "string"}, {"name", "text"}}}});
  layers.push_back(Layer(std::move(tv_config)));
  layers.push_back(json{{"class_name", "Embedding"},
                        {"config", {{"name", "e"}, {"input_dim", 10}, {"output_dim", 3}, {"mask_zero", true}}}});
  layers.push_back(json{{"class_name", "GlobalAveragePooling1D"}, {"config", {{"name", "pool"}}}});
  layers.push_back(json{{"class_name", "Dense"}, {"config", {{"name", "d"}, {"units", 2}, {"activation", "softmax"}}}});
  return json{{"class_name", "Sequential"}, {"config", {{"name", "m"}, {"layers", layers}}}};
}

TEST(TextTest, KerasConfigArgumentsAndRefusals) {
  auto spec = ParseKerasModel(TextModel({{"max_tokens", 10},
                                         {"standardize", nullptr},
                                         {"split", "character"},
                                         {"output_mode", "int"},
                                         {"output_sequence_length", 5},
                                         {"vocabulary", {"a", "b"}},
                                         {"ngrams", nullptr},
                                         {"sparse", false},
                                         {"ragged", false},
                                         {"encoding", "utf-8"}}),
                              "m.json");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const TextSpec& t = TextLayer(*spec)->text;
  EXPECT_EQ(t.standardize, TextStandardize::kNone);
  EXPECT_EQ(t.split, TextSplit::kCharacter);
  EXPECT_EQ(t.output_sequence_length, 5);
  EXPECT_TRUE(spec->string_input);

  const std::pair<json, const char*> refused[] = {
      {{{"ngrams", 2}}, "argument ngrams=2 is not supported"},
      {{{"output_mode", "tf_idf"}}, "argument output_mode=\"tf_idf\" is not supported (int, multi_hot, count)"},
      {{{"output_mode", "multi_hot"}, {"output_sequence_length", 4}}, "output_sequence_length is for output_mode"},
      {{{"ragged", true}}, "argument ragged=true is not supported"},
      {{{"standardize", "lower_and_strip"}}, "argument standardize=\"lower_and_strip\" is not supported"},
      {{{"vocabulary", {"a", "a"}}, {"output_sequence_length", 3}}, "holds \"a\" twice"},
      {{{"max_tokens", 2}}, "leaves no room for a term"},
      {{{"idf_weights", {1.0}}}, "argument idf_weights"},
  };
  for (const auto& [config, message] : refused) {
    auto bad = ParseKerasModel(TextModel(config), "m.json");
    EXPECT_THAT(bad.status().message(), HasSubstr(message)) << config.dump();
    EXPECT_THAT(bad.status().message(), HasSubstr("(TextVectorization \"tv\")")) << config.dump();
  }
}

TEST(TextTest, AModelReadsTextThroughTheLayer) {
  auto spec = ParseKerasModel(TextModel(json::object()), "m.json");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  // Not adapted yet: nothing to build.
  auto unadapted = Model::Create(*spec, LossSpec{});
  EXPECT_THAT(unadapted.status().message(), HasSubstr("has no vocabulary"));

  ASSERT_TRUE(AdaptText(*spec, {"the cat", "the dog ran", "a cat"}).ok());
  // The chief's result, as the parameter-server workers get it.
  auto shipped = ParseKerasModel(TextModel(json::object()), "m.json");
  ASSERT_TRUE(shipped.ok());
  ASSERT_TRUE(ApplyAdaptedText(json::parse(AdaptedTextJson(*spec).dump()), *shipped).ok());
  EXPECT_EQ(TextLayer(*shipped)->text.vocabulary, TextLayer(*spec)->text.vocabulary);
  EXPECT_THAT(ApplyAdaptedText(json{{"layer", "other"}}, *shipped).message(), HasSubstr("does not match"));

  auto m = Model::Create(*shipped, LossSpec{});
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)->input_shape(), (Shape{3}));  // the longest training text
  auto ids = (*m)->LookupStrings({"The cat!", "zebra the cat ran away"}, {2, 1});
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  // the: 2, cat: 2 (tie: "the" first, descending), then ran, dog, a.
  EXPECT_THAT(TextLayer(*spec)->text.vocabulary, ElementsAre("the", "cat", "ran", "dog", "a"));
  EXPECT_THAT(Ints(*ids), ElementsAre(2, 3, 0, 1, 2, 3));
  auto wrong = (*m)->LookupStrings({"a", "b"}, {1, 2});
  EXPECT_THAT(wrong.status().message(), HasSubstr("takes one text per example, got 2 strings for 1 examples"));

  json wide = TextModel(json::object());
  wide["config"]["layers"][0]["config"]["batch_input_shape"] = {nullptr, 2};
  auto two = ParseKerasModel(wide, "m.json");
  ASSERT_TRUE(two.ok());
  ASSERT_TRUE(AdaptText(*two, {"a b"}).ok());
  EXPECT_THAT(Model::Create(*two, LossSpec{}).status().message(), HasSubstr("one string per example"));
}

// Keras pads each batch to its longest text when output_sequence_length is
// null: a model without a mask (the SimpleRNN runs over every step it is
// given) computes on a batch of short texts exactly what the same model
// built for that length computes, and on long texts what the full length
// gives.
TEST(TextTest, EachBatchIsPaddedToItsLongestText) {
  auto rnn_model = [](json tv_config) {
    json m = TextModel(std::move(tv_config));
    json& layers = m["config"]["layers"];
    layers[2]["config"]["mask_zero"] = false;
    layers[3] = json{{"class_name", "SimpleRNN"}, {"config", {{"name", "rnn"}, {"units", 3}}}};
    return ParseKerasModel(m, "m.json");
  };
  const std::vector<std::string> training = {"a b c d e f", "a b", "c d e"};
  auto per_batch = rnn_model(json::object());
  ASSERT_TRUE(per_batch.ok()) << per_batch.status();
  ASSERT_TRUE(AdaptText(*per_batch, training).ok());
  auto m = Model::Create(*per_batch, LossSpec{});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->input_shape(), (Shape{6}));
  const std::vector<Tensor> values = (*m)->InitialValues(7);
  auto predict = [&](Model& model, const std::vector<std::string>& texts) {
    auto ids = model.LookupStrings(texts, {static_cast<int64_t>(texts.size()), 1});
    EXPECT_TRUE(ids.ok()) << ids.status();
    auto y = model.Predict(values, *ids);
    EXPECT_TRUE(y.ok()) << y.status();
    return Floats(*y);
  };
  for (const auto& [texts, length] : std::vector<std::pair<std::vector<std::string>, int64_t>>{
           {{"b a", "c"}, 2}, {{"a b c d e f g h"}, 6}, {{"a", "b"}, 1}}) {
    json fixed_config = {{"output_sequence_length", length}};
    auto fixed = rnn_model(fixed_config);
    ASSERT_TRUE(fixed.ok());
    ASSERT_TRUE(AdaptText(*fixed, training).ok());
    auto f = Model::Create(*fixed, LossSpec{});
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(predict(**m, texts), predict(**f, texts)) << texts[0] << ": padded to " << length;
  }
  // Training on a short batch, then the full length again.
  auto ids = (*m)->LookupStrings({"a b"}, {1, 1});
  ASSERT_TRUE(ids.ok());
  auto g = (*m)->ComputeGradients(values, *ids, Tensor::Zeros(DType::kInt64, {1}));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->grads.size(), values.size());

  // A model whose output shape depends on the length cannot have it.
  json flat = TextModel(json::object());
  flat["config"]["layers"][2]["config"]["mask_zero"] = false;
  flat["config"]["layers"][3] = json{{"class_name", "Flatten"}, {"config", {{"name", "flat"}}}};
  auto flat_spec = ParseKerasModel(flat, "m.json");
  ASSERT_TRUE(flat_spec.ok());
  ASSERT_TRUE(AdaptText(*flat_spec, training).ok());
  EXPECT_THAT(Model::Create(*flat_spec, LossSpec{}).status().message(),
              HasSubstr("output_sequence_length is null, so each batch is padded to its own longest text"));
}

}  // namespace
}  // namespace tfjob::model
