// TextVectorization: tokenizing, the vocabulary and its adaptation, and the
// layer, which passes on what the data reader vectorized (text.h).
#include "services/model/text.h"

#include <algorithm>
#include <map>

#include "services/model/layers_more.h"

namespace tfjob::model {
namespace {

// string.punctuation, the set Keras' DEFAULT_STRIP_REGEX removes.
bool IsKerasPunctuation(unsigned char c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}

bool IsSpace(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string Standardize(std::string_view text, TextStandardize how) {
  const bool lower = how == TextStandardize::kLowerAndStripPunctuation || how == TextStandardize::kLower;
  const bool strip = how == TextStandardize::kLowerAndStripPunctuation || how == TextStandardize::kStripPunctuation;
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (strip && IsKerasPunctuation(c)) continue;
    out.push_back(lower && c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : static_cast<char>(c));
  }
  return out;
}

// The length of the UTF-8 character starting with `lead` (1 for a byte that
// starts none, which is then a character of its own).
size_t Utf8Length(unsigned char lead) {
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  return 1;
}

// How many of Keras' special tokens a given vocabulary starts with (which
// Keras skips): all of them, or none.
size_t LeadingSpecials(const TextSpec& spec) {
  const std::vector<std::string> specials =
      spec.output_mode == TextOutput::kInt ? std::vector<std::string>{"", "[UNK]"} : std::vector<std::string>{"[UNK]"};
  const std::vector<std::string>& terms = spec.vocabulary;
  return terms.size() >= specials.size() && std::equal(specials.begin(), specials.end(), terms.begin())
             ? specials.size()
             : 0;
}

}  // namespace

Shape TextOutputShape(const TextSpec& spec) {
  if (spec.output_mode == TextOutput::kInt) {
    return {spec.output_sequence_length > 0 ? spec.output_sequence_length : spec.build_length};
  }
  if (spec.pad_to_max_tokens) return {spec.max_tokens};
  return {1 + static_cast<int64_t>(spec.vocabulary.size() - LeadingSpecials(spec))};
}

std::vector<std::string> Tokenize(std::string_view text, const TextSpec& spec) {
  const std::string s = Standardize(text, spec.standardize);
  std::vector<std::string> tokens;
  switch (spec.split) {
    case TextSplit::kNone: tokens.push_back(s); break;
    case TextSplit::kWhitespace:
      for (size_t i = 0; i < s.size();) {
        while (i < s.size() && IsSpace(static_cast<unsigned char>(s[i]))) ++i;
        const size_t start = i;
        while (i < s.size() && !IsSpace(static_cast<unsigned char>(s[i]))) ++i;
        if (i > start) tokens.emplace_back(s.substr(start, i - start));
      }
      break;
    case TextSplit::kCharacter:
      for (size_t i = 0; i < s.size();) {
        size_t n = std::min(Utf8Length(static_cast<unsigned char>(s[i])), s.size() - i);
        for (size_t k = 1; k < n; ++k) {
          if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) n = 1;  // not a continuation byte
        }
        tokens.emplace_back(s.substr(i, n));
        i += n;
      }
      break;
  }
  return tokens;
}

StatusOr<TextVectorizer> TextVectorizer::Create(const TextSpec& spec) {
  TextVectorizer v;
  v.spec_ = spec;
  if (!spec.has_vocabulary && !spec.adapted) {
    return InvalidArgument(
        "has no vocabulary: give one, or let fit adapt the layer to the training data (Keras' adapt())");
  }
  // A given vocabulary may start with the special tokens, which Keras skips.
  std::vector<std::string>& terms = v.spec_.vocabulary;
  terms.erase(terms.begin(), terms.begin() + static_cast<std::ptrdiff_t>(LeadingSpecials(spec)));
  for (size_t i = 0; i < terms.size(); ++i) {
    if (terms[i].empty()) return InvalidArgument("vocabulary[" + std::to_string(i) + "] is the empty string (padding)");
    if (terms[i] == "[UNK]") return InvalidArgument("vocabulary[" + std::to_string(i) + "] is the OOV token \"[UNK]\"");
    if (!v.ids_.emplace(terms[i], v.specials() + static_cast<int64_t>(i)).second) {
      return InvalidArgument("vocabulary holds \"" + terms[i] + "\" twice");
    }
  }
  if (spec.max_tokens > 0 && v.vocabulary_size() > spec.max_tokens) {
    return InvalidArgument("the vocabulary has " + std::to_string(v.vocabulary_size()) +
                           " entries with the special tokens, more than max_tokens " + std::to_string(spec.max_tokens));
  }
  if (spec.output_mode == TextOutput::kInt && spec.output_sequence_length <= 0 && spec.build_length <= 0) {
    return InvalidArgument(
        "output_sequence_length is null and the layer was not adapted to the training data, which gives the "
        "length to pad to");
  }
  if (spec.pad_to_max_tokens && spec.output_mode != TextOutput::kInt && spec.max_tokens <= 0) {
    return InvalidArgument("pad_to_max_tokens needs max_tokens");
  }
  return v;
}

Shape TextVectorizer::output_shape() const { return TextOutputShape(spec_); }

int64_t TextVectorizer::Index(const std::string& token) const {
  auto it = ids_.find(token);
  if (it != ids_.end()) return it->second;
  return spec_.output_mode == TextOutput::kInt ? 1 : 0;
}

StatusOr<Tensor> TextVectorizer::Vectorize(const std::vector<std::string>& texts) const {
  const int64_t n = static_cast<int64_t>(texts.size());
  const Shape per = output_shape();
  Shape shape{n};
  shape.insert(shape.end(), per.begin(), per.end());
  Tensor out = Tensor::Zeros(output_dtype(), shape);
  const int64_t width = per[0];
  for (int64_t r = 0; r < n; ++r) {
    const std::vector<std::string> tokens = Tokenize(texts[static_cast<size_t>(r)], spec_);
    if (spec_.output_mode == TextOutput::kInt) {
      int64_t* row = out.data<int64_t>() + r * width;
      for (size_t t = 0; t < tokens.size() && static_cast<int64_t>(t) < width; ++t) row[t] = Index(tokens[t]);
    } else {
      float* row = out.data<float>() + r * width;
      for (const std::string& t : tokens) {
        const int64_t id = Index(t);
        row[id] = spec_.output_mode == TextOutput::kCount ? row[id] + 1 : 1.f;
      }
    }
  }
  return out;
}

const LayerSpec* TextLayer(const ModelSpec& spec) {
  for (const LayerSpec& l : spec.layers) {
    if (l.type == LayerType::kTextVectorization) return &l;
  }
  return nullptr;
}

LayerSpec* TextLayer(ModelSpec& spec) { return const_cast<LayerSpec*>(TextLayer(std::as_const(spec))); }

Status AdaptText(ModelSpec& spec, const std::vector<std::string>& texts) {
  LayerSpec* layer = TextLayer(spec);
  if (!layer) return Status::Ok();
  TextSpec& t = layer->text;
  const int64_t specials = t.output_mode == TextOutput::kInt ? 2 : 1;
  std::map<std::string, int64_t> counts;
  int64_t longest = 0;
  for (const std::string& text : texts) {
    std::vector<std::string> tokens = Tokenize(text, t);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(tokens.size()));
    if (!t.has_vocabulary) {
      for (std::string& tok : tokens) ++counts[std::move(tok)];
    }
  }
  if (!t.has_vocabulary) {
    counts.erase("");  // the padding token
    std::vector<std::pair<std::string, int64_t>> order(counts.begin(), counts.end());
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first > b.first;
    });
    if (order.empty()) {
      return InvalidArgument(layer->path + ": layer \"" + layer->name + "\" found no token in the " +
                             std::to_string(texts.size()) + " training texts to build its vocabulary from");
    }
    if (t.max_tokens > 0 && static_cast<int64_t>(order.size()) > t.max_tokens - specials) {
      order.resize(static_cast<size_t>(std::max<int64_t>(t.max_tokens - specials, 0)));
    }
    t.vocabulary.clear();
    for (auto& [tok, count] : order) t.vocabulary.push_back(tok);
  }
  t.build_length = std::max<int64_t>(longest, 1);
  t.adapted = true;
  return Status::Ok();
}

nlohmann::json AdaptedTextJson(const ModelSpec& spec) {
  const LayerSpec* layer = TextLayer(spec);
  if (!layer || !layer->text.adapted) return nullptr;
  return nlohmann::json{
      {"layer", layer->name}, {"vocabulary", layer->text.vocabulary}, {"build_length", layer->text.build_length}};
}

std::string AdaptedTextLine(const ModelSpec& spec) {
  const LayerSpec* layer = TextLayer(spec);
  if (!layer || !layer->text.adapted) return "";
  const TextSpec& t = layer->text;
  std::string line = "fit: TextVectorization \"" + layer->name + "\": " + std::to_string(t.vocabulary.size()) +
                     " terms " + (t.has_vocabulary ? std::string("given") : "adapted from the training texts");
  if (t.max_tokens > 0) line += " (max_tokens " + std::to_string(t.max_tokens) + ")";
  if (t.output_mode == TextOutput::kInt) {
    line += t.output_sequence_length > 0 ? ", sequences of " + std::to_string(t.output_sequence_length)
                                         : ", each batch padded to its longest text (at most " +
                                               std::to_string(t.build_length) + ", the longest training text)";
  }
  return line;
}

Status ApplyAdaptedText(const nlohmann::json& j, ModelSpec& spec) {
  LayerSpec* layer = TextLayer(spec);
  if (j.is_null()) return Status::Ok();
  if (!layer || !j.is_object() || j.value("layer", std::string()) != layer->name || !j.contains("vocabulary") ||
      !j["vocabulary"].is_array() || !j.contains("build_length") || !j["build_length"].is_number_integer()) {
    return InvalidArgument("the chief's adapted TextVectorization does not match this job's model");
  }
  std::vector<std::string> vocabulary;
  for (const auto& v : j["vocabulary"]) {
    if (!v.is_string()) return InvalidArgument("the chief's adapted vocabulary holds a non-string");
    vocabulary.push_back(v.get<std::string>());
  }
  layer->text.vocabulary = std::move(vocabulary);
  layer->text.build_length = j["build_length"].get<int64_t>();
  layer->text.adapted = true;
  return Status::Ok();
}

namespace internal {
namespace {

// What reaches the layer is the vectorized text (the data reader did the
// work, with the model's TextVectorizer); it checks it and passes it on.
class TextVectorizationLayer final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    const Shape full = TextOutputShape(spec_.text);
    // Padded per batch (Model::UseTime): any length up to the longest.
    const bool per_batch = spec_.text.output_mode == TextOutput::kInt && spec_.text.output_sequence_length == 0 &&
                           in.size() == 1 && in[0] >= 1 && in[0] <= full[0];
    if ((in != full && !per_batch) || dtype != output_dtype()) {
      return Error(
          "takes strings, which only the model's input holds: make it the first layer, fed by an input "
          "of dtype string and shape [1]");
    }
    in_shape_ = in;
    return in;
  }
  DType output_dtype() const override {
    return spec_.text.output_mode == TextOutput::kInt ? DType::kInt64 : DType::kFloat32;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x, output_dtype()));
    return x;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor, bool need_input_grad, std::span<Gradient>) override {
    if (need_input_grad) return Error("text has no gradient");
    return Tensor();
  }
};

}  // namespace

std::unique_ptr<Layer> MakeTextVectorization(const LayerSpec& spec) {
  return std::make_unique<TextVectorizationLayer>(spec);
}

}  // namespace internal

}  // namespace tfjob::model
