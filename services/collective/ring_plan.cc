#include "services/collective/ring_plan.h"

#include <algorithm>

namespace tfjob::collective {
namespace {

int Mod(int a, int n) { return ((a % n) + n) % n; }

// Appends one step: `sends` go out, each once the recv of the same index in
// the previous step (starting at `prev_recv_start`, -1 in the first step) has
// arrived, and `recvs` are expected. Returns where this step's recvs start.
int AppendStep(std::vector<RingPiece> sends, std::vector<RingPiece> recvs, int prev_recv_start, RingPlan& plan) {
  for (size_t c = 0; c < sends.size(); ++c) {
    plan.sends.push_back(sends[c]);
    plan.send_after.push_back(prev_recv_start < 0 ? -1 : prev_recv_start + static_cast<int>(c));
  }
  const int start = static_cast<int>(plan.recvs.size());
  plan.recvs.insert(plan.recvs.end(), recvs.begin(), recvs.end());
  return start;
}

}  // namespace

RingPlan AllReducePlan(const RingPosition& at, float* data, int64_t count) {
  const int n = at.size, r = at.rank;
  // Segment i of n: the first count % n segments hold one element more.
  std::vector<int64_t> off(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) {
    off[static_cast<size_t>(i) + 1] = off[static_cast<size_t>(i)] + count / n + (i < count % n ? 1 : 0);
  }
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(at.chunk_bytes / sizeof(float)));
  auto pieces = [&](int seg, bool reduce) {
    std::vector<RingPiece> out;
    const int64_t begin = off[static_cast<size_t>(seg)], end = off[static_cast<size_t>(seg) + 1];
    for (int64_t o = begin; o < end; o += chunk) {
      const size_t bytes = static_cast<size_t>(std::min(chunk, end - o)) * sizeof(float);
      out.push_back({reinterpret_cast<std::byte*>(data + o), bytes, reduce});
    }
    return out;
  };
  RingPlan plan;
  int prev_recv_start = -1;
  for (int k = 0; k < 2 * (n - 1); ++k) {
    const bool scatter = k < n - 1;
    const int j = k - (n - 1);
    const int send_seg = scatter ? Mod(r - k, n) : Mod(r + 1 - j, n);
    const int recv_seg = scatter ? Mod(r - k - 1, n) : Mod(r - j, n);
    prev_recv_start = AppendStep(pieces(send_seg, false), pieces(recv_seg, scatter), prev_recv_start, plan);
  }
  return plan;
}

RingPlan AllGatherPlan(const RingPosition& at, std::byte* out, size_t block_bytes) {
  const int n = at.size, r = at.rank;
  const size_t chunk = std::max<size_t>(8, at.chunk_bytes);
  auto pieces = [&](int block) {
    std::vector<RingPiece> v;
    std::byte* base = out + static_cast<size_t>(block) * block_bytes;
    for (size_t o = 0; o < block_bytes; o += chunk) v.push_back({base + o, std::min(chunk, block_bytes - o), false});
    return v;
  };
  RingPlan plan;
  int prev_recv_start = -1;
  for (int k = 0; k < n - 1; ++k) {
    prev_recv_start = AppendStep(pieces(Mod(r - k, n)), pieces(Mod(r - k - 1, n)), prev_recv_start, plan);
  }
  return plan;
}

RingPlan BroadcastPlan(const RingPosition& at, std::byte* data, size_t bytes, int root) {
  const int n = at.size;
  const int pos = Mod(at.rank - root, n);
  const size_t chunk = std::max<size_t>(8, at.chunk_bytes);
  std::vector<RingPiece> pieces;
  for (size_t o = 0; o < bytes; o += chunk) pieces.push_back({data + o, std::min(chunk, bytes - o), false});
  RingPlan plan;
  // Everyone but the root receives every chunk; everyone but the member
  // before the root forwards each chunk once it has it.
  if (pos != 0) plan.recvs = pieces;
  if (pos != n - 1) {
    for (size_t c = 0; c < pieces.size(); ++c) {
      plan.sends.push_back(pieces[c]);
      plan.send_after.push_back(pos == 0 ? -1 : static_cast<int>(c));
    }
  }
  return plan;
}

}  // namespace tfjob::collective
