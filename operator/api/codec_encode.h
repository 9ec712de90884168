// Encode's body (codec_encode.cc): the typed TFJob overlaid on the document
// it was decoded from (TFJob::raw), writing a field only where it differs
// from what Decode reads there, so that Encode(Decode(x)) == x; not for use
// outside operator/api. codec.cc's Encode wraps EncodeImpl in its exception
// guard.
//
// Thread-safety: a pure function of its argument. Failure: there is no error
// channel; it throws only through a bug or allocation failure, which Encode
// catches.
#pragma once

#include <nlohmann/json.hpp>

#include "operator/api/types.h"

namespace tfjob::op::api::codec_internal {

// Encode without its exception guard.
nlohmann::json EncodeImpl(const TFJob& job);

}  // namespace tfjob::op::api::codec_internal
