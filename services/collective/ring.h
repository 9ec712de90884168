// The RING implementation of Communicator: member r sends to r+1 and
// receives from r-1 over two TCP connections of one generation of a group
// (group.h makes them). Tensor bytes go from the caller's memory to the
// socket and, except for the chunk being summed, from the socket straight
// into the caller's memory.
//
//   all-reduce  reduce-scatter then all-gather (2(n-1) steps, each moving
//               1/n of the buffer), chunked: a chunk is forwarded as soon as
//               it has been received and summed, so sending, receiving and
//               reducing overlap. Tensors under Options::bucket_bytes are
//               packed into one buffer first.
//   all-gather  n-1 steps of the same pipeline, copying.
//   broadcast   chunks flow root -> root+1 -> ... around the ring.
//   barrier     an all-gather of one float.
//
// Liveness: while a link is idle a background thread sends a keepalive
// frame every timeout/4, so a member that computes or writes a checkpoint
// between operations still counts as alive; a neighbour that sends nothing
// for Options::timeout, or stops reading, is named in a DEADLINE_EXCEEDED
// error. A neighbour whose process died is seen at once (the connection
// closes): UNAVAILABLE naming it. Whoever fails first sends ABORT both ways
// round the ring with the cause, so every member reports the same one.
//
// The pieces: ring_plan.h says which chunk goes where in which step (pure);
// ring_link.h moves frames, keeps the link alive and aborts; ring.cc runs one
// operation's plan over the link, a send cursor and a receive cursor
// advanced from one poll loop.
//
// Ownership: owns its RingLink (both connections and the keepalive thread).
// Thread-safety: one operation at a time; Abort and error may be called from
// any thread. Failure: see communicator.h; after a failed operation the
// caller's tensors hold unspecified values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "services/collective/communicator.h"
#include "services/collective/ring_link.h"
#include "services/collective/ring_plan.h"
#include "services/net/net.h"

namespace tfjob::collective {

struct Peer {
  std::string name;     // "worker:1"
  std::string address;  // "10.0.0.7:2222"
  std::string Describe() const { return name + " (" + address + ")"; }
};

class RingCommunicator final : public Communicator {
 public:
  // `to_next` is connected to member (rank+1) % n and `from_prev` was
  // accepted from member (rank-1+n) % n; both invalid when n == 1.
  RingCommunicator(int rank, std::vector<Peer> members, int64_t generation, net::Fd to_next, net::Fd from_prev,
                   Options options);
  // Tells the neighbours (ABORT) unless already failed, then closes.
  ~RingCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int64_t generation() const override { return generation_; }
  std::string_view implementation() const override { return "ring"; }

  Status AllReduce(std::span<Tensor* const> tensors, ReduceOp op) override;
  StatusOr<Tensor> AllGather(const Tensor& in) override;
  Status Broadcast(std::span<Tensor* const> tensors, int root) override;
  Status Barrier() override;
  using Communicator::AllReduce;

  // Fails the communicator with `reason` (first call wins) and passes it to
  // both neighbours.
  void Abort(const Status& reason) override;
  // OK until the first failure.
  Status error() const;

 private:
  const Peer& self() const { return members_[static_cast<size_t>(rank_)]; }
  const Peer& next() const { return members_[static_cast<size_t>((rank_ + 1) % size())]; }
  const Peer& prev() const { return members_[static_cast<size_t>((rank_ + size() - 1) % size())]; }
  RingPosition position() const { return {rank_, size(), options_.chunk_bytes}; }

  // Runs one operation: exchanges descriptors with the neighbours, then the
  // plan's pieces. Fails (and aborts the ring) on any error.
  Status Execute(const std::string& op, uint32_t dtype, uint64_t count, int64_t root, std::span<Tensor* const> shapes,
                 const RingPlan& plan);
  // The poll loop of one operation: `descriptor` (a serialized
  // proto::OpDescriptor) goes first and must match prev's, then the plan.
  Status RunPlan(const std::string& descriptor, const RingPlan& plan);
  Status Fail(const Status& s);

  Status ReduceBuffer(float* data, int64_t count, std::span<Tensor* const> shapes);
  Status BroadcastBuffer(std::byte* data, size_t bytes, int root, std::span<Tensor* const> shapes);

  const int rank_;
  const std::vector<Peer> members_;
  const int64_t generation_;
  const Options options_;
  uint64_t sequence_ = 0;
  std::vector<std::byte> staging_;  // one received chunk being summed
  std::vector<std::byte> bucket_;   // small tensors packed together
  RingLink link_;
};

}  // namespace tfjob::collective
