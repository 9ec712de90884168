// The on-disk format of a parameter server's shards and of a synchronous
// strategy's variables: named tensors in a self-checking file, streamed to
// and from disk in bounded chunks, so a file of any size (an embedding table
// of many GiB) needs no second copy of it in memory.
//
//   file    := "TFJCKPT2" chunk* end
//   chunk   := u32 n (1..16 MiB) | n payload bytes | u32 crc32 of those bytes
//   end     := u32 0 | u64 payload bytes | u32 entries | u32 crc32 of the 12 bytes before
//   payload := entry*
//   entry   := u32 name_len | name | i64 iterations | u32 tensors | tensor*
//   tensor  := u8 dtype | u32 rank | i64 dims[rank] | raw little-endian bytes
//
// Every chunk carries its own CRC, checked before any of its bytes are used,
// so a flipped byte anywhere is found and named by offset; sizes are 64-bit
// throughout. A tensor's size is checked against what is left of the file
// before it is allocated. Files are written through a temporary name
// (NAME.tmp.<pid>), fsynced and renamed, so a crash mid-write leaves the
// previous file untouched.
//
// Thread-safety: reentrant. Failure: errors name the path (or the source
// given) and the offset; a damaged or truncated file is DATA_LOSS, never a
// wrong load.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob::checkpoint {

// Payload bytes per chunk when writing.
inline constexpr size_t kChunkBytes = size_t{1} << 20;

struct Entry {
  std::string name;
  int64_t iterations = 0;       // optimizer step count for the value
  std::vector<Tensor> tensors;  // value first, then optimizer slots
};

// Writes entries one at a time, so a caller can produce each (say, a copy
// of one shard) just before it is written and drop it after.
class Writer {
 public:
  static StatusOr<std::unique_ptr<Writer>> Create(const std::string& path);
  ~Writer();  // without Commit: the temporary file is removed
  Status Add(const Entry& e);
  // Ends the file, fsyncs and renames it into place. Returns its size.
  StatusOr<uint64_t> Commit();

 private:
  struct Impl;
  explicit Writer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

Status Write(const std::string& path, const std::vector<Entry>& entries);
StatusOr<std::vector<Entry>> Read(const std::string& path);

// One pass over a file: every chunk's CRC, the structure and the end record,
// keeping no tensor; also the file's size and Adler-32 (what a checkpoint's
// meta.json records). The tensors' names and shapes come back in `shapes`.
struct FileCheck {
  uint64_t bytes = 0;
  uint32_t adler32 = 0;
  struct Item {
    std::string name;
    std::vector<std::pair<DType, Shape>> tensors;
  };
  std::vector<Item> entries;
};
StatusOr<FileCheck> Check(const std::string& path);

// Reads into tensors the caller already holds: for tensor k of entry `name`,
// `sink(name, iterations, k, dtype, shape)` returns where its bytes go (a
// tensor of that dtype and shape) or an error. Run Check first: a damaged
// file found half-way leaves the earlier tensors overwritten.
using Sink = std::function<StatusOr<Tensor*>(const std::string& name, int64_t iterations, size_t k, DType dtype,
                                             const Shape& shape)>;
Status ReadInto(const std::string& path, const Sink& sink);

// In-memory forms of the same format, for tests and fuzzing.
std::string Encode(const std::vector<Entry>& entries);
StatusOr<std::vector<Entry>> Decode(const std::string& bytes, const std::string& source);

}  // namespace tfjob::checkpoint
