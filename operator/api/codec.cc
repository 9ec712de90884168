// The public entry points of codec.h: Decode and Encode behind their
// exception guards, and ReadTfJobManifest. Decode's body is in
// codec_decode.cc, Encode's overlay in codec_encode.cc, the readers both share
// in codec_read.cc, YAML in codec_yaml.cc.
#include "operator/api/codec.h"

#include <cassert>
#include <exception>
#include <string>

#include "common/files.h"
#include "operator/api/codec_decode.h"
#include "operator/api/codec_encode.h"

namespace tfjob::op::api {

StatusOr<TFJob> Decode(const nlohmann::json& doc) {
  try {
    return codec_internal::DecodeImpl(doc);
  } catch (const std::exception& e) {
    // Every access above is type-checked first; reaching this is a bug, but
    // it must not take the operator down.
    return Internal(std::string("decoding TFJob: ") + e.what());
  }
}

nlohmann::json Encode(const TFJob& job) {
  try {
    return codec_internal::EncodeImpl(job);
  } catch (const std::exception& e) {
    // Only reachable through a bug (every write targets an object) or
    // allocation failure; there is no error channel, so hand back the
    // document unchanged rather than letting the exception escape.
    assert(false && "Encode threw");
    return job.raw;
  }
}

StatusOr<TFJob> ReadTfJobManifest(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(nlohmann::json doc, YamlToJson(text, path));
  auto job = Decode(doc);
  if (!job.ok()) return job.status().WithContext(path);
  return job;
}

}  // namespace tfjob::op::api
