// A tensor as a PS or worker receives it over gRPC: bytes -> proto::Tensor ->
// TensorFromProto. A tensor that decodes must encode back to the same dtype,
// shape and bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "proto/tensor.pb.h"
#include "services/rpc/rpc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tfjob::proto::Tensor p;
  if (!p.ParseFromArray(data, static_cast<int>(size))) return 0;
  tfjob::StatusOr<tfjob::Tensor> t = tfjob::rpc::TensorFromProto(p);
  if (!t.ok()) {
    tfjob::fuzz::Check(
        t.status().code() == tfjob::Code::kInvalidArgument || t.status().code() == tfjob::Code::kResourceExhausted,
        "TensorFromProto: unexpected " + t.status().ToString());
    return 0;
  }
  tfjob::proto::Tensor back;
  tfjob::rpc::TensorToProto(*t, &back);
  tfjob::fuzz::Check(back.dtype() == p.dtype(), "dtype changed in a round trip");
  tfjob::fuzz::Check(
      back.shape_size() == p.shape_size() && std::equal(back.shape().begin(), back.shape().end(), p.shape().begin()),
      "shape changed in a round trip");
  tfjob::fuzz::Check(back.data() == p.data(), "bytes changed in a round trip");
  return 0;
}
