// The JSON job description, read exactly as `tfjob-runtime fit --config`
// reads it: text -> JSON -> JobConfig. Every failure is INVALID_ARGUMENT
// naming the file (but a missing vocabulary file, NOT_FOUND).
#include <cstddef>
#include <cstdint>

#include "common/json_reader.h"
#include "fuzz/fuzz_util.h"
#include "services/model/job_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kSource = "job.json";
  tfjob::StatusOr<nlohmann::json> doc = tfjob::ParseJson(tfjob::fuzz::AsString(data, size), kSource);
  if (!doc.ok()) {
    tfjob::fuzz::CheckInvalidArgument(doc.status(), kSource + ": ");
    return 0;
  }
  tfjob::StatusOr<tfjob::model::JobConfig> config = tfjob::model::ParseJobConfig(*doc, kSource);
  if (!config.ok()) {
    // A lookup's vocabulary file is the one thing a job makes the parser
    // read; a missing one is NOT_FOUND, as any missing input file is.
    if (config.status().code() == tfjob::Code::kNotFound &&
        config.status().message().find("vocabulary file") != std::string::npos) {
      return 0;
    }
    tfjob::fuzz::CheckInvalidArgument(config.status(), kSource + ": ");
    return 0;
  }
  tfjob::fuzz::Check(config->source == kSource, "JobConfig.source is not the file");
  return 0;
}
