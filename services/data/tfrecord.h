// TFRecord files, TensorFlow's record container: each record is
//
//   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
//
// (little-endian), where masked_crc32c(x) = rotr15(crc32c(x)) + 0xa282ead8.
// Files may be GZIP- or ZLIB-compressed as a whole, as TFRecordWriter's
// compression_type does. CRC32C is written here (Castagnoli, slicing by 8):
// Debian packages no C or C++ library for it.
//
// Ownership: a reader owns its file handle and inflate state. Thread-safety:
// a reader is used by one thread; the free functions are reentrant.
// Failure: every problem is a Status whose message starts with the path and
// gives the offset of the record at fault in the uncompressed stream:
//   "PATH: cannot open file: <reason>"                              NOT_FOUND
//   "PATH: truncated record at offset N: ..."                       DATA_LOSS
//   "PATH: corrupted record at offset N: length (or data) CRC ..."  DATA_LOSS
//   "PATH: corrupt GZIP (ZLIB) stream at offset N: <zlib message>"  DATA_LOSS
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tfjob::data {

enum class Compression { kNone, kGzip, kZlib };

// "" / "NONE", "GZIP", "ZLIB" (TensorFlow's compression_type names).
StatusOr<Compression> ParseCompression(std::string_view name);

uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t MaskedCrc32c(const void* data, size_t n);

class TfRecordReader {
 public:
  static StatusOr<std::unique_ptr<TfRecordReader>> Open(const std::string& path, Compression compression);
  ~TfRecordReader();
  TfRecordReader(const TfRecordReader&) = delete;
  TfRecordReader& operator=(const TfRecordReader&) = delete;

  // The next record's data; std::nullopt at a clean end of file.
  StatusOr<std::optional<std::string>> Next();
  // Where the next record starts, in the uncompressed stream.
  uint64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  TfRecordReader(std::string path, Compression compression, std::FILE* f);
  // Up to n bytes into dst; fewer only at the end of the stream.
  StatusOr<size_t> Read(char* dst, size_t n);
  Status Fill();

  std::string path_;
  Compression compression_;
  std::FILE* f_;
  struct Inflater;
  std::unique_ptr<Inflater> z_;
  std::vector<char> in_;  // compressed bytes read, not yet inflated
  uint64_t offset_ = 0;   // uncompressed bytes of whole records consumed
};

// Writes `records` as one TFRecord file (for tests and tools); the file is
// replaced. INTERNAL / NOT_FOUND on I/O errors.
Status WriteTfRecords(const std::string& path, const std::vector<std::string>& records,
                      Compression compression = Compression::kNone);

// The framing of one record, for writers that build files themselves.
std::string FrameRecord(std::string_view data);

}  // namespace tfjob::data
