// Lookup tables and the StringLookup / IntegerLookup layers.
//
// A StringLookup sits at the model's input: strings never enter the tensor
// graph (tensors are float32 or int64), so the model looks them up as the
// data is read (Model::LookupStrings) and the layer itself passes the int64
// ids on. An IntegerLookup maps int64 to int64 inside the model.
#include "services/model/preprocessing.h"

#include <farmhash.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>

#include "services/model/layer_factories.h"
#include "services/model/layer_shapes.h"

namespace tfjob::model {

StatusOr<Lookup> Lookup::Create(const LookupSpec& spec, bool strings) {
  Lookup l;
  l.spec_ = spec;
  l.strings_ = strings;
  if (spec.num_oov_indices < 0) {
    return InvalidArgument("num_oov_indices must be >= 0, got " + std::to_string(spec.num_oov_indices));
  }
  const size_t n = strings ? spec.tokens.size() : spec.int_tokens.size();
  if (n == 0) return InvalidArgument("the vocabulary is empty");
  // An inline vocabulary may repeat the special tokens at its start.
  size_t skip = 0;
  if (spec.vocabulary_file.empty()) {
    const size_t specials = static_cast<size_t>(l.token_start());
    if (n >= specials && specials > 0) {
      bool found = true;
      for (size_t i = 0; i < specials && found; ++i) {
        const bool mask_slot = spec.has_mask && i == 0;
        if (strings) {
          found = spec.tokens[i] == (mask_slot ? spec.mask_token : spec.oov_token);
        } else {
          found = spec.int_tokens[i] == (mask_slot ? spec.int_mask_token : spec.int_oov_token);
        }
      }
      if (found) skip = specials;
    }
  }
  l.spec_.tokens.clear();
  l.spec_.int_tokens.clear();
  for (size_t i = skip; i < n; ++i) {
    const int64_t index = l.token_start() + static_cast<int64_t>(i - skip);
    if (strings) {
      const std::string& t = spec.tokens[i];
      if (spec.has_mask && t == spec.mask_token) {
        return InvalidArgument("the mask token \"" + t + "\" is in the vocabulary (term " + std::to_string(i) +
                               "); leave it out, or put the special tokens first");
      }
      if (!l.by_string_.emplace(t, index).second) {
        return InvalidArgument("the vocabulary repeats the term \"" + t + "\"");
      }
      l.spec_.tokens.push_back(t);
    } else {
      const int64_t t = spec.int_tokens[i];
      if (spec.has_mask && t == spec.int_mask_token) {
        return InvalidArgument("the mask token " + std::to_string(t) + " is in the vocabulary (term " +
                               std::to_string(i) + "); leave it out, or put the special tokens first");
      }
      if (!l.by_int_.emplace(t, index).second) {
        return InvalidArgument("the vocabulary repeats the term " + std::to_string(t));
      }
      l.spec_.int_tokens.push_back(t);
    }
  }
  return l;
}

int64_t Lookup::vocabulary_size() const {
  return token_start() + static_cast<int64_t>(strings_ ? spec_.tokens.size() : spec_.int_tokens.size());
}

StatusOr<int64_t> Lookup::Oov(uint64_t bucket_hash, const std::string& shown) const {
  const int64_t n = spec_.num_oov_indices;
  if (n == 0) {
    return InvalidArgument(shown +
                           " is not in the vocabulary, and num_oov_indices is 0 (all inputs must be in "
                           "the vocabulary; set num_oov_indices to 1 to map unknown terms to an OOV index)");
  }
  if (n == 1) return oov_start();
  return oov_start() + static_cast<int64_t>(bucket_hash % static_cast<uint64_t>(n));
}

StatusOr<int64_t> Lookup::Index(std::string_view term) const {
  if (spec_.has_mask && term == spec_.mask_token) return 0;
  auto it = by_string_.find(std::string(term));
  if (it != by_string_.end()) return it->second;
  const uint64_t hash = spec_.num_oov_indices > 1 ? util::Fingerprint64(term.data(), term.size()) : 0;
  // Appended, not concatenated: GCC 12 warns (-Wrestrict) on "\"" + string.
  std::string shown(1, '"');
  shown.append(term).push_back('"');
  return Oov(hash, shown);
}

StatusOr<int64_t> Lookup::Index(int64_t term) const {
  if (spec_.has_mask && term == spec_.int_mask_token) return 0;
  auto it = by_int_.find(term);
  if (it != by_int_.end()) return it->second;
  const int64_t n = std::max<int64_t>(spec_.num_oov_indices, 1);
  const int64_t floormod = ((term % n) + n) % n;
  return Oov(static_cast<uint64_t>(floormod), std::to_string(term));
}

std::string Lookup::StringAt(int64_t index) const {
  if (spec_.has_mask && index == 0) return spec_.mask_token;
  const int64_t t = index - token_start();
  if (t < 0 || t >= static_cast<int64_t>(spec_.tokens.size())) return spec_.oov_token;
  return spec_.tokens[static_cast<size_t>(t)];
}

int64_t Lookup::IntAt(int64_t index) const {
  if (spec_.has_mask && index == 0) return spec_.int_mask_token;
  const int64_t t = index - token_start();
  if (t < 0 || t >= static_cast<int64_t>(spec_.int_tokens.size())) return spec_.int_oov_token;
  return spec_.int_tokens[static_cast<size_t>(t)];
}

StatusOr<Tensor> Lookup::LookupStrings(const std::vector<std::string>& terms, const Shape& shape) const {
  if (!strings_ || spec_.invert) return InvalidArgument("this lookup does not map strings to indices");
  if (NumElements(shape) != static_cast<int64_t>(terms.size())) {
    return InvalidArgument(std::to_string(terms.size()) + " strings do not fill shape " + ShapeString(shape));
  }
  ASSIGN_OR_RETURN(Tensor out, Tensor::Create(DType::kInt64, shape));
  int64_t* o = out.data<int64_t>();
  for (size_t i = 0; i < terms.size(); ++i) {
    ASSIGN_OR_RETURN(o[i], Index(terms[i]));
  }
  return out;
}

StatusOr<Tensor> Lookup::LookupInts(const Tensor& values) const {
  if (values.dtype() != DType::kInt64) return InvalidArgument("expects int64 values, got " + values.DebugString());
  if (strings_ && !spec_.invert) return InvalidArgument("a StringLookup maps strings, not integers");
  if (strings_) return InvalidArgument("an inverted StringLookup maps indices to strings, not integers");
  ASSIGN_OR_RETURN(Tensor out, Tensor::Create(DType::kInt64, values.shape()));
  const int64_t* v = values.data<int64_t>();
  int64_t* o = out.data<int64_t>();
  for (int64_t i = 0; i < values.size(); ++i) {
    if (spec_.invert) {
      o[i] = IntAt(v[i]);
    } else {
      ASSIGN_OR_RETURN(o[i], Index(v[i]));
    }
  }
  return out;
}

std::vector<std::string> Lookup::InvertToStrings(const Tensor& indices) const {
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(indices.size()));
  for (int64_t id : indices.flat<int64_t>()) out.push_back(StringAt(id));
  return out;
}

bool AddVocabularyTerm(const nlohmann::json& term, bool strings, LookupSpec& spec) {
  if (strings && term.is_string()) {
    spec.tokens.push_back(term.get<std::string>());
  } else if (!strings && term.is_number_integer()) {
    spec.int_tokens.push_back(term.get<int64_t>());
  } else {
    return false;
  }
  return true;
}

bool SetSpecialToken(const nlohmann::json& value, bool strings, bool mask, LookupSpec& spec) {
  if (strings && value.is_string()) {
    (mask ? spec.mask_token : spec.oov_token) = value.get<std::string>();
  } else if (!strings && value.is_number_integer()) {
    (mask ? spec.int_mask_token : spec.int_oov_token) = value.get<int64_t>();
  } else {
    return false;
  }
  return true;
}

Status ReadVocabularyFile(const std::string& path, bool strings, LookupSpec& spec) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return NotFound("vocabulary file " + path + " does not exist or cannot be read");
  }
  // Not a device or a directory, and not more than a vocabulary can be.
  constexpr uintmax_t kMaxBytes = uintmax_t{1} << 30;
  if (!std::filesystem::is_regular_file(status)) {
    return InvalidArgument("vocabulary file " + path + " is not a regular file");
  }
  if (std::filesystem::file_size(path, ec) > kMaxBytes || ec) {
    return InvalidArgument("vocabulary file " + path + " is larger than 1 GiB");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("vocabulary file " + path + " does not exist or cannot be read");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return DataLoss("vocabulary file " + path + ": read error");
  spec.tokens.clear();
  spec.int_tokens.clear();
  spec.vocabulary_file = path;
  size_t start = 0;
  int64_t line = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string term = text.substr(start, end - start);
    ++line;
    start = end + 1;
    if (strings) {
      spec.tokens.push_back(std::move(term));
      continue;
    }
    int64_t v = 0;
    auto [p, ec] = std::from_chars(term.data(), term.data() + term.size(), v);
    if (ec != std::errc() || p != term.data() + term.size()) {
      return InvalidArgument("vocabulary file " + path + ":" + std::to_string(line) + ": \"" + term +
                             "\" is not an integer");
    }
    spec.int_tokens.push_back(v);
  }
  if (line == 0) return InvalidArgument("vocabulary file " + path + " is empty");
  return Status::Ok();
}

namespace internal {
namespace {

class LookupLayer final : public Layer {
 public:
  bool device_kernels() const override { return false; }
  LookupLayer(const LayerSpec& spec, Lookup table) : Layer(spec), table_(std::move(table)) {}

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    // A StringLookup's strings were looked up as the data was read; what
    // reaches it are their ids.
    if (dtype != DType::kInt64) {
      return Error(spec_.type == LayerType::kStringLookup
                       ? std::string("takes strings, which only the model's input holds: make it the first layer "
                                     "and set model.input_dtype to \"string\"")
                       : "expects int64 input, got " + std::string(DTypeName(dtype)));
    }
    in_shape_ = in;
    return in;
  }
  DType output_dtype() const override { return DType::kInt64; }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    if (!Matches(x, DType::kInt64, in_shape_)) return Error(Expected(DType::kInt64, in_shape_, x));
    if (spec_.type == LayerType::kStringLookup) return x;
    auto y = table_.LookupInts(x);
    if (!y.ok()) return Error(y.status().message());
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor, bool need_input_grad, std::span<Gradient>) override {
    if (need_input_grad) return Error("indices have no gradient");
    return Tensor();
  }

  const Lookup& table() const { return table_; }

 private:
  Lookup table_;
  Shape in_shape_;
};

}  // namespace

StatusOr<std::unique_ptr<Layer>> MakeLookupLayer(const LayerSpec& spec) {
  auto table = Lookup::Create(spec.lookup, spec.type == LayerType::kStringLookup);
  if (!table.ok()) return InvalidArgument("layer \"" + spec.name + "\": " + table.status().message());
  return std::unique_ptr<Layer>(std::make_unique<LookupLayer>(spec, std::move(table).value()));
}

const Lookup* LookupTable(const Layer& layer) {
  const auto* l = dynamic_cast<const LookupLayer*>(&layer);
  return l ? &l->table() : nullptr;
}

}  // namespace internal
}  // namespace tfjob::model
