// A checkpoint file as a parameter server or evaluator reads it:
// checkpoint::Decode(bytes, source), which streams the file in chunks like
// Read does. Random bytes almost never carry valid CRCs, so each input is
// decoded twice: as it is (the checksum paths) and with every chunk's and the
// end record's CRC recomputed (the structure parser behind them). Entries
// that decode must survive Encode and Decode unchanged.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "services/checkpoint/checkpoint.h"

namespace {

const std::string kSource = "model.ckpt";

uint32_t Crc(const std::string& b, size_t pos, size_t n) {
  return static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(b.data() + pos), static_cast<uInt>(n)));
}

// Rewrites the CRCs along the layout in checkpoint.h (chunk := u32 n |
// payload | crc; end := u32 0 | u64 | u32 | crc of those 12 bytes) as far as
// the lengths in the input allow. Returns false when nothing changed.
bool RepairCrcs(std::string& b) {
  const std::string before = b;
  size_t pos = 8;  // "TFJCKPT2"
  while (b.size() >= pos + 4) {
    uint32_t n = 0;
    std::memcpy(&n, b.data() + pos, 4);
    pos += 4;
    const size_t covered = n == 0 ? 12 : n;
    const size_t start = n == 0 ? pos - 4 : pos;
    if (b.size() - pos < (n == 0 ? 8 : covered) + 4) break;
    const size_t crc_at = start + covered;
    const uint32_t crc = Crc(b, start, covered);
    std::memcpy(b.data() + crc_at, &crc, 4);
    if (n == 0) break;
    pos = crc_at + 4;
  }
  return b != before;
}

bool SameEntries(const std::vector<tfjob::checkpoint::Entry>& a, const std::vector<tfjob::checkpoint::Entry>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].iterations != b[i].iterations || a[i].tensors.size() != b[i].tensors.size()) {
      return false;
    }
    for (size_t k = 0; k < a[i].tensors.size(); ++k) {
      if (!tfjob::Equal(a[i].tensors[k], b[i].tensors[k])) return false;
    }
  }
  return true;
}

void DecodeOne(const std::string& bytes) {
  tfjob::StatusOr<std::vector<tfjob::checkpoint::Entry>> entries = tfjob::checkpoint::Decode(bytes, kSource);
  if (!entries.ok()) {
    // A damaged file is DATA_LOSS; a well-formed one declaring a tensor over
    // the tensor library's size cap may be refused as such.
    const tfjob::Code code = entries.status().code();
    tfjob::fuzz::Check(code == tfjob::Code::kDataLoss || code == tfjob::Code::kResourceExhausted,
                       "Decode: unexpected " + entries.status().ToString());
    tfjob::fuzz::Check(entries.status().message().rfind(kSource, 0) == 0,
                       "error does not name the file: " + entries.status().message());
    return;
  }
  const std::string encoded = tfjob::checkpoint::Encode(*entries);
  tfjob::StatusOr<std::vector<tfjob::checkpoint::Entry>> again = tfjob::checkpoint::Decode(encoded, kSource);
  tfjob::fuzz::Check(again.ok(), "Encode(Decode(x)) does not decode: " + again.status().ToString());
  tfjob::fuzz::Check(SameEntries(*entries, *again), "entries changed through Encode and Decode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes = tfjob::fuzz::AsString(data, size);
  DecodeOne(bytes);
  if (RepairCrcs(bytes)) DecodeOne(bytes);
  return 0;
}
