// A Keras model JSON as `fit --keras-model` reads it: text -> JSON ->
// ModelSpec -> Model. Every failure is INVALID_ARGUMENT, and the reader's
// name the file.
#include <cstddef>
#include <cstdint>

#include "common/json_reader.h"
#include "fuzz/fuzz_util.h"
#include "services/model/keras_model.h"
#include "services/model/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kSource = "model.json";
  tfjob::StatusOr<nlohmann::json> doc = tfjob::ParseJson(tfjob::fuzz::AsString(data, size), kSource);
  if (!doc.ok()) {
    tfjob::fuzz::CheckInvalidArgument(doc.status(), kSource + ": ");
    return 0;
  }
  tfjob::StatusOr<tfjob::model::ModelSpec> spec = tfjob::model::ParseKerasModel(*doc, kSource);
  if (!spec.ok()) {
    tfjob::fuzz::CheckInvalidArgument(spec.status(), kSource + ": ");
    return 0;
  }
  auto m = tfjob::model::Model::Create(*spec, {tfjob::model::LossType::kSparseCategoricalCrossentropy, true});
  tfjob::fuzz::Check(m.ok() || m.status().code() == tfjob::Code::kInvalidArgument,
                     "Model::Create: unexpected " + m.status().ToString());
  return 0;
}
