// Which bytes a ring member sends to its next neighbour and receives from its
// previous one, and in which order, for each operation of RingCommunicator
// (ring.h). Pure arithmetic over the caller's buffer: nothing here touches a
// socket, a thread or a clock, so tests/ring_plan_test.cc checks the plans by
// running a ring of them in memory.
//
//   all-reduce  reduce-scatter (n-1 steps: receive segment r-k-1 and sum it)
//               then all-gather (n-1 steps: receive a summed segment and
//               copy it); member r sends in each step the segment it
//               received in the step before, chunk by chunk, so a chunk is
//               forwarded as soon as it has arrived.
//   all-gather  the all-gather half alone, over blocks of equal size.
//   broadcast   root sends every chunk; the others receive each chunk and,
//               except the last member before the root, forward it.
//
// Ownership: a plan borrows the buffer it was built over (every Piece points
// into it); the buffer must outlive the plan's use. Thread-safety: plain
// values and pure functions. Failure: none; the caller has checked the ranks
// and the root, and `count` / `bytes` describe its buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tfjob::collective {

// One frame's payload: `bytes` at `data` in the caller's buffer.
struct RingPiece {
  std::byte* data = nullptr;
  size_t bytes = 0;
  bool reduce = false;  // recv: sum float32 into data instead of copying
};

struct RingPlan {
  std::vector<RingPiece> sends;
  std::vector<int> send_after;  // index of the recv each send waits for, or -1
  std::vector<RingPiece> recvs;

  // Whether sends[i] may go once the first `received` recvs have arrived.
  // send_after never decreases, so the sends that may go are always a
  // prefix of those not yet sent.
  bool SendReady(size_t i, size_t received) const {
    return i < sends.size() && (send_after[i] < 0 || static_cast<size_t>(send_after[i]) < received);
  }
};

// Where a member sits in the ring and how finely it cuts the buffer.
struct RingPosition {
  int rank = 0;
  int size = 1;
  size_t chunk_bytes = 0;  // Options::chunk_bytes; small values are raised
};

// Sums `count` floats at `data` over the ring (2(n-1) steps).
RingPlan AllReducePlan(const RingPosition& at, float* data, int64_t count);
// Fills `out`, n blocks of `block_bytes`, of which block `rank` is already
// this member's own (n-1 steps).
RingPlan AllGatherPlan(const RingPosition& at, std::byte* out, size_t block_bytes);
// Copies `bytes` at `data` from member `root` to every other member.
RingPlan BroadcastPlan(const RingPosition& at, std::byte* data, size_t bytes, int root);

}  // namespace tfjob::collective
