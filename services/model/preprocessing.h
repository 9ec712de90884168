// Keras' lookup tables (StringLookup, IntegerLookup with output_mode "int"):
// vocabulary terms to indices, or back with `invert`.
//
// Indices, as Keras lays them out: 0 is the mask token when there is one;
// then num_oov_indices OOV indices; then the vocabulary in order. With one
// OOV index every unknown term gets it; with several, a string goes to the
// bucket FarmHash64 (Debian's libfarmhash, TensorFlow's to_hash_bucket_fast)
// picks and an integer to floormod(value, n); with none, an unknown term is
// an error naming it. A vocabulary given inline may start with the special
// tokens (mask, then the OOV tokens), which are then skipped, as in Keras.
//
// Ownership: a Lookup owns its tables. Thread-safety: immutable after
// Create; concurrent lookups are safe. Failure: INVALID_ARGUMENT naming the
// term (unknown with no OOV index, repeated, or the mask token in the
// vocabulary).
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

class Lookup {
 public:
  // `strings`: StringLookup (tokens) or IntegerLookup (int_tokens).
  static StatusOr<Lookup> Create(const LookupSpec& spec, bool strings);

  bool strings() const { return strings_; }
  bool invert() const { return spec_.invert; }
  // Mask, OOV indices and terms: the Embedding rows the ids need.
  int64_t vocabulary_size() const;

  StatusOr<int64_t> Index(std::string_view term) const;
  StatusOr<int64_t> Index(int64_t term) const;
  // Invert: the term at `index` (the OOV token outside the vocabulary).
  std::string StringAt(int64_t index) const;
  int64_t IntAt(int64_t index) const;

  // Terms (row-major, `shape` elements) to int64 indices of that shape.
  StatusOr<Tensor> LookupStrings(const std::vector<std::string>& terms, const Shape& shape) const;
  // int64 to int64: terms to indices, or indices to terms when inverted.
  StatusOr<Tensor> LookupInts(const Tensor& values) const;
  // Inverted StringLookup: indices to terms.
  std::vector<std::string> InvertToStrings(const Tensor& indices) const;

 private:
  int64_t oov_start() const { return spec_.has_mask ? 1 : 0; }
  int64_t token_start() const { return oov_start() + spec_.num_oov_indices; }
  StatusOr<int64_t> Oov(uint64_t bucket_hash, const std::string& shown) const;

  LookupSpec spec_;
  bool strings_ = true;
  std::unordered_map<std::string, int64_t> by_string_;
  std::unordered_map<int64_t, int64_t> by_int_;
};

// A vocabulary file: one term per line (a final newline ends the last one),
// as Keras' TextFileInitializer reads it; integers for IntegerLookup.
// NOT_FOUND when the file is missing; INVALID_ARGUMENT for a bad integer
// (naming the line), or a path that is no regular file or over 1 GiB.
Status ReadVocabularyFile(const std::string& path, bool strings, LookupSpec& spec);

// One term of an inline vocabulary (a Keras JSON "vocabulary" list) added to
// `spec`: a string for StringLookup, an integer for IntegerLookup. False,
// adding nothing, for a term of the other kind.
bool AddVocabularyTerm(const nlohmann::json& term, bool strings, LookupSpec& spec);

// The mask token (`mask`) or the OOV token of `spec` set from a Keras JSON
// value. False, changing nothing, for a value of the other kind.
bool SetSpecialToken(const nlohmann::json& value, bool strings, bool mask, LookupSpec& spec);

}  // namespace tfjob::model
