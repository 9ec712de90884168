// A TFRecord file of tf.Example records as a `tfrecord` data source reads
// it: framing and CRCs (services/data/tfrecord.h), then each record decoded
// against a feature spec (services/data/example.h). Random bytes almost
// never carry valid CRCs, so each input is read twice: as it is (the
// checksum paths) and with every record's CRCs recomputed (the framing and
// the tf.Example decoder behind them). A damaged file must be DATA_LOSS and
// a bad record INVALID_ARGUMENT, both naming the file; decoded columns must
// have the spec's shapes.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fuzz/fuzz_util.h"
#include "services/data/example.h"
#include "services/data/tfrecord.h"

namespace {

using namespace tfjob;

const std::string& Path() {
  static const std::string path = "/tmp/tfrecord_fuzz-" + std::to_string(::getpid()) + ".tfrecord";
  return path;
}

uint64_t Le64(const std::string& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}

void PutLe32(std::string& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Rewrites the length and data CRCs of every whole record. Returns false
// when nothing changed.
bool RepairCrcs(std::string& b) {
  const std::string before = b;
  size_t at = 0;
  while (b.size() >= at + 12) {
    const uint64_t n = Le64(b, at);
    PutLe32(b, at + 8, data::MaskedCrc32c(b.data() + at, 8));
    if (n > b.size() - at - 12 || b.size() - at - 12 - n < 4) break;
    PutLe32(b, at + 12 + n, data::MaskedCrc32c(b.data() + at + 12, n));
    at += 16 + n;
  }
  return b != before;
}

void ReadOne(const std::string& bytes) {
  // The file lives only while its input is read, so a run leaves nothing in /tmp.
  struct Remove {
    ~Remove() { std::remove(Path().c_str()); }
  } remove;
  if (std::FILE* f = std::fopen(Path().c_str(), "wb")) {
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  } else {
    fuzz::Fail("cannot write " + Path());
  }
  const std::vector<data::FeatureSpec> specs = {
      data::FeatureSpec("image", data::FeatureType::kFloat32, false, {2, 2}),
      data::FeatureSpec("words", data::FeatureType::kString, true, {}, 3),
      data::FeatureSpec("label", data::FeatureType::kInt64, false, {}),
  };
  auto plan = data::PlanShard({Path()}, data::AutoShardPolicy::kOff, 1, 0);
  fuzz::Check(plan.ok(), "PlanShard: " + plan.status().ToString());
  auto cols = data::ReadExamples(*plan, data::Compression::kNone, specs);
  if (!cols.ok()) {
    const Code code = cols.status().code();
    fuzz::Check(code == Code::kDataLoss || code == Code::kInvalidArgument,
                "ReadExamples: unexpected " + cols.status().ToString());
    fuzz::Check(cols.status().message().rfind(Path(), 0) == 0,
                "error does not name the file: " + cols.status().message());
    return;
  }
  fuzz::Check(cols->size() == specs.size(), "wrong number of columns");
  const int64_t rows = (*cols)[0].rows;
  fuzz::Check(static_cast<int64_t>((*cols)[0].floats.size()) == rows * 4, "image column has the wrong size");
  fuzz::Check((*cols)[1].shape.size() == 1 && (*cols)[1].shape[0] <= 3, "words padded past max_length");
  fuzz::Check(static_cast<int64_t>((*cols)[1].strings.size()) == rows * (*cols)[1].shape[0],
              "words column has the wrong size");
  fuzz::Check(static_cast<int64_t>((*cols)[2].ints.size()) == rows, "label column has the wrong size");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes = tfjob::fuzz::AsString(data, size);
  ReadOne(bytes);
  if (RepairCrcs(bytes)) ReadOne(bytes);
  return 0;
}
