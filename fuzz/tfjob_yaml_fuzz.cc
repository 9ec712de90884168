// A TFJob manifest as `tfjob run` reads it: YAML stream -> JSON documents
// (kubectl's typing) -> the first TFJob -> Decode -> Validate/SetDefaults ->
// Encode. Every document produced must be JSON that can be written out.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/tfjob_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kSource = "tfjob.yaml";
  const std::string text = tfjob::fuzz::AsString(data, size);
  tfjob::StatusOr<std::vector<nlohmann::json>> docs = tfjob::op::api::YamlDocumentsToJson(text, kSource);
  if (!docs.ok()) {
    tfjob::fuzz::CheckInvalidArgument(docs.status(), kSource + ":");
    return 0;
  }
  for (const nlohmann::json& d : *docs) {
    std::string strict;
    try {
      strict = d.dump();
    } catch (const nlohmann::json::exception& e) {
      tfjob::fuzz::Fail(std::string("YAML gave a document that is not JSON: ") + e.what());
    }
    tfjob::fuzz::Check(nlohmann::json::parse(strict) == d, "document does not survive dump/parse: " + strict);
  }
  tfjob::StatusOr<nlohmann::json> job = tfjob::op::api::YamlToJson(text, kSource);
  if (!job.ok()) {
    tfjob::fuzz::Check(job.status().code() == tfjob::Code::kNotFound,
                       "YamlToJson after YamlDocumentsToJson succeeded: " + job.status().ToString());
    return 0;
  }
  tfjob::fuzz::ExerciseTfJob(*job);
  return 0;
}
