// Keras' TextVectorization: raw text to token ids (output_mode "int") or to
// a bag of tokens ("multi_hot", "count"), as Keras computes them.
//
// A text is standardized (lower_and_strip_punctuation, the default: ASCII
// letters lowered and the ASCII punctuation Keras' regex names removed;
// lower; strip_punctuation; none), split (on runs of whitespace, into UTF-8
// characters, or not at all), and its tokens looked up. Indices as Keras
// lays them out: in "int" mode 0 is padding ("") and 1 the OOV token
// ("[UNK]"), then the vocabulary; in the bag modes 0 is OOV, then the
// vocabulary. Int output is cut or padded with 0 to output_sequence_length,
// or, when Keras' None, to the longest text of the training data; the
// model then cuts each batch to its own longest text, as Keras pads it
// (Model::UseTime). Bag output is float32 [vocabulary size], or
// [max_tokens] with pad_to_max_tokens.
//
// Tensors hold no strings, so the texts are vectorized as the data is read
// (services/strategy/input.h) and the layer passes the result on.
//
// Adapting (Keras' adapt()): the vocabulary is the training texts' tokens by
// count, most frequent first, ties broken by the token in descending byte
// order (the order Keras' reversed np.lexsort gives), up to max_tokens less
// the special tokens. The chief adapts before training; the parameter-server
// workers get the result from it (AdaptedTextJson); the synchronous workers
// and the evaluator compute the same result from the same whole training
// source, since adapting is deterministic.
//
// Ownership: a TextVectorizer owns its table. Thread-safety: immutable after
// Create; concurrent calls are safe. Failure: INVALID_ARGUMENT naming the
// argument or term (a repeated term, a vocabulary over max_tokens, a text
// count that does not match the examples).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/model/spec.h"
#include "services/tensor/tensor.h"

namespace tfjob::model {

// One text standardized and split: its tokens, in order.
std::vector<std::string> Tokenize(std::string_view text, const TextSpec& spec);

class TextVectorizer {
 public:
  // `spec` must hold a vocabulary (given or adapted) and, for int output
  // without output_sequence_length, its build_length.
  static StatusOr<TextVectorizer> Create(const TextSpec& spec);

  // The special tokens and the vocabulary.
  int64_t vocabulary_size() const { return specials() + static_cast<int64_t>(spec_.vocabulary.size()); }
  Shape output_shape() const;  // per example
  DType output_dtype() const { return spec_.output_mode == TextOutput::kInt ? DType::kInt64 : DType::kFloat32; }

  // The index of one token (the OOV index when unknown).
  int64_t Index(const std::string& token) const;
  // One text per example: [n, ...output_shape()].
  StatusOr<Tensor> Vectorize(const std::vector<std::string>& texts) const;

 private:
  int64_t specials() const { return spec_.output_mode == TextOutput::kInt ? 2 : 1; }
  TextSpec spec_;
  std::unordered_map<std::string, int64_t> ids_;
};

// What a TextVectorization of `spec` gives per example, without building
// its table (as TextVectorizer::output_shape, for a spec Create accepts).
Shape TextOutputShape(const TextSpec& spec);

// The model's TextVectorization layer (there may be one, the first layer
// the string input feeds), or null.
const LayerSpec* TextLayer(const ModelSpec& spec);
LayerSpec* TextLayer(ModelSpec& spec);

// Keras' adapt() over the training texts (one per example): learns the
// vocabulary when none was given and, for int output without
// output_sequence_length, the length to build for. A no-op for a model
// without TextVectorization. INVALID_ARGUMENT when no token is found.
Status AdaptText(ModelSpec& spec, const std::vector<std::string>& texts);

// What AdaptText set, as JSON for the tasks that do not read the whole
// training source (null for a model without TextVectorization), and back.
nlohmann::json AdaptedTextJson(const ModelSpec& spec);
Status ApplyAdaptedText(const nlohmann::json& j, ModelSpec& spec);
// One line on what adapting found ("fit: TextVectorization ..."), empty for
// a model without an adapted TextVectorization.
std::string AdaptedTextLine(const ModelSpec& spec);

}  // namespace tfjob::model
