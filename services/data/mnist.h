// Readers for the IDX format (the container of the MNIST files) and an MNIST
// loader producing tensors ready for Dataset::FromTensors.
//
// Ownership: results are returned by value and own their memory; nothing is
// cached between calls.
//
// Thread-safety: the functions are reentrant; concurrent calls (even on the
// same file) are safe.
//
// Failure behaviour: every problem with the files is a returned Status whose
// message starts with the offending path; offsets are positions in the
// uncompressed IDX stream. Missing file -> NOT_FOUND, unreadable ->
// PERMISSION_DENIED, wrong magic / shape / label -> INVALID_ARGUMENT,
// truncated or corrupt data -> DATA_LOSS, rows outside the file ->
// OUT_OF_RANGE.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob::data {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// Reads an IDX file of unsigned bytes (type code 0x08), gzip-compressed or
// plain. With expected_magic != 0 the whole 32-bit magic (type and rank) must
// match, e.g. 0x00000803 for a rank-3 array. Messages:
//   "PATH: cannot open file: <reason>"                          NOT_FOUND
//   "PATH: bad magic 0x00000801 at offset 0, expected 0x00000803" INVALID_ARGUMENT
//   "PATH: truncated at offset N: expected M bytes"             DATA_LOSS
//     (N = bytes read successfully, M = bytes the header promises so far)
//   "PATH: corrupt gzip stream at offset N: <zlib message>"     DATA_LOSS
// Rank must be 1..8 and the payload at most 4 GiB; bytes after the payload
// are rejected (INVALID_ARGUMENT), since they mean the header is wrong.
StatusOr<IdxArray> ReadIdx(const std::string& path, uint32_t expected_magic = 0);

struct MnistSplit {
  Tensor images;  // float32 [n, 28, 28], pixels scaled to [0, 1]
  Tensor labels;  // int64 [n], 0..9
};

inline constexpr uint32_t kMnistImagesMagic = 0x00000803;
inline constexpr uint32_t kMnistLabelsMagic = 0x00000801;

// Loads rows [begin, end) (end = -1 means to the end) of an images/labels
// pair. Checks the magics, 28x28 images, equal counts, and that every label in
// the file is 0..9 (the error names the label's byte offset); a range outside
// [0, n] is OUT_OF_RANGE.
StatusOr<MnistSplit> LoadMnist(const std::string& images_path, const std::string& labels_path, int64_t begin = 0,
                               int64_t end = -1);

}  // namespace tfjob::data
