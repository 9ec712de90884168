// A TFJob as the operator receives it from the API server (JSON): text ->
// JSON -> Decode -> Validate/SetDefaults -> Encode.
#include <cstddef>
#include <cstdint>

#include "common/json_reader.h"
#include "fuzz/tfjob_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kSource = "tfjob.json";
  tfjob::StatusOr<nlohmann::json> doc = tfjob::ParseJson(tfjob::fuzz::AsString(data, size), kSource);
  if (!doc.ok()) {
    tfjob::fuzz::CheckInvalidArgument(doc.status(), kSource + ": ");
    return 0;
  }
  tfjob::fuzz::ExerciseTfJob(*doc);
  return 0;
}
