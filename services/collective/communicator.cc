#include "services/collective/communicator.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace tfjob::collective {

StatusOr<Implementation> ParseImplementation(std::string_view s) {
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "auto") return Implementation::kAuto;
  if (lower == "ring") return Implementation::kRing;
  if (lower == "nccl") return Implementation::kNccl;
  return InvalidArgument("communication \"" + std::string(s) + "\": expected ring, nccl or auto");
}

std::string_view ImplementationName(Implementation i) {
  switch (i) {
    case Implementation::kAuto: return "auto";
    case Implementation::kRing: return "ring";
    case Implementation::kNccl: return "nccl";
  }
  return "?";
}

bool IsRecoverable(const Status& s) {
  return s.code() == Code::kUnavailable || s.code() == Code::kDeadlineExceeded || s.code() == Code::kAborted;
}

std::string ShapesString(std::span<Tensor* const> tensors) {
  std::string out;
  for (const Tensor* t : tensors) {
    if (!out.empty()) out += ' ';
    out += t->DebugString();
  }
  return out.empty() ? "(none)" : out;
}

uint64_t HashShapes(std::span<Tensor* const> tensors) {
  // FNV-1a over dtype and dims: cheap, and any difference in order, rank or
  // size changes it.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (const Tensor* t : tensors) {
    mix(static_cast<uint64_t>(t->dtype()));
    mix(static_cast<uint64_t>(t->rank()));
    for (int64_t d : t->shape()) mix(static_cast<uint64_t>(d));
  }
  return h;
}

Status Communicator::BroadcastBytes(std::string& bytes, int root) {
  ASSIGN_OR_RETURN(Tensor len, Tensor::FromVector({1}, std::vector<int64_t>{static_cast<int64_t>(bytes.size())}));
  Tensor* lp[] = {&len};
  RETURN_IF_ERROR(Broadcast(lp, root));
  const int64_t n = len.data<int64_t>()[0];
  if (n < 0 || n > (int64_t{1} << 32))
    return Internal("collective: broadcast length " + std::to_string(n) + " out of range");
  // Bytes travel as int64 words (the tensor dtypes the wire knows).
  const int64_t words = (n + 7) / 8;
  ASSIGN_OR_RETURN(Tensor buf, Tensor::Create(DType::kInt64, {words}));
  if (rank() == root && n > 0) std::memcpy(buf.raw(), bytes.data(), static_cast<size_t>(n));
  Tensor* bp[] = {&buf};
  RETURN_IF_ERROR(Broadcast(bp, root));
  if (rank() != root) bytes.assign(reinterpret_cast<const char*>(buf.raw()), static_cast<size_t>(n));
  return Status::Ok();
}

}  // namespace tfjob::collective
