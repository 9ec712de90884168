// Collective operations between the replicas of a synchronous strategy, as
// TensorFlow's CollectiveOps offer them: all-reduce (sum, mean), all-gather,
// broadcast from a rank and barrier, over float32 tensors (broadcast also
// moves int64). One interface, several implementations:
//
//   ring   RingCommunicator (ring.h): members in separate processes, bulk
//          data over plain TCP between ring neighbours; reduce-scatter then
//          all-gather, chunked and pipelined, small tensors fused into
//          buckets. Formed by a Group (group.h).
//   local  LocalCommunicator (local.h): replicas that are threads of one
//          process (MirroredStrategy on CPU thread groups).
//   nccl   NcclCommunicator (nccl/), built when CUDA and NCCL are found.
//
// Every member of a group gets bit-identical results: each element of a sum
// is added up once, in one order, and then copied to everyone.
//
// Ownership: a Communicator is one member's handle; the tensors passed in
// are borrowed for the call and written in place. Thread-safety: one
// operation at a time per Communicator (each member calls from its own
// thread). Failure: every operation has a deadline. A dead or hung member
// makes every other member's operation fail within Options::timeout with an
// error naming it (UNAVAILABLE or DEADLINE_EXCEEDED); members that disagree
// on an operation (shapes, order) all get INVALID_ARGUMENT. After a failure
// the communicator stays failed (every call returns the first error) until
// its group is formed again; IsRecoverable tells which failures re-forming
// can cure.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "services/tensor/tensor.h"
#include "services/tls/tls.h"

namespace tfjob::collective {

enum class ReduceOp { kSum, kMean };

// TensorFlow's CommunicationImplementation.
enum class Implementation { kAuto, kRing, kNccl };
// "auto", "ring" or "nccl" (case-insensitive); INVALID_ARGUMENT otherwise.
StatusOr<Implementation> ParseImplementation(std::string_view s);
std::string_view ImplementationName(Implementation i);

struct Options {
  // A member that sends nothing (not even a keepalive) for this long, or
  // stops reading, is declared hung and named in the error.
  std::chrono::milliseconds timeout{30000};
  // Forming (or re-forming) a group waits this long for every member.
  std::chrono::milliseconds rendezvous_timeout{300000};
  // Tensors smaller than this are packed together and reduced as one
  // buffer; larger ones are reduced in place.
  size_t bucket_bytes = size_t{4} << 20;
  // Unit of pipelining on the ring: sending, receiving and reducing overlap
  // chunk by chunk.
  size_t chunk_bytes = size_t{256} << 10;
  // The job's task token: every connection to a member must carry it
  // (UNAUTHENTICATED otherwise). Empty: no check.
  std::string token;
  // The job's TLS (tls/tls.h): every link and join is then mutual TLS with
  // the job's certificate. Null: plain TCP.
  std::shared_ptr<const tls::Config> tls;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Grows each time the group is formed again; 0 for groups that never re-form.
  virtual int64_t generation() const = 0;
  virtual std::string_view implementation() const = 0;

  // Sums (or averages) float32 tensors element-wise across members, in
  // place. Every member passes tensors of the same shapes in the same order.
  virtual Status AllReduce(std::span<Tensor* const> tensors, ReduceOp op) = 0;
  // Every member's `in` (same shape everywhere) concatenated along axis 0 in
  // rank order.
  virtual StatusOr<Tensor> AllGather(const Tensor& in) = 0;
  // Copies `root`'s tensors into everyone's (same shapes and dtypes).
  virtual Status Broadcast(std::span<Tensor* const> tensors, int root) = 0;
  // Returns once every member has called it.
  virtual Status Barrier() = 0;
  // Fails this member's current and later operations with `reason` and
  // makes the other members' fail with it too (a member that cannot go on
  // calls this so nobody waits for it).
  virtual void Abort(const Status& reason) = 0;

  // Copies `root`'s bytes into everyone's `bytes` (any length): two
  // Broadcasts, the length first.
  Status BroadcastBytes(std::string& bytes, int root);
  // Convenience for one tensor.
  Status AllReduce(Tensor& t, ReduceOp op) {
    Tensor* p[] = {&t};
    return AllReduce(p, op);
  }
};

// True for failures of the group rather than of the caller's input: a member
// died, hung or gave up (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED). Forming
// the group again, with the member restarted, lets training go on.
bool IsRecoverable(const Status& s);

// "float32[2, 3] float32[3]": the shapes of an operation's tensors, for
// mismatch messages, and a hash of them.
std::string ShapesString(std::span<Tensor* const> tensors);
uint64_t HashShapes(std::span<Tensor* const> tensors);

}  // namespace tfjob::collective
