#include "services/collective/ring.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "common/time.h"
#include "proto/collective.pb.h"

namespace tfjob::collective {
namespace {

using net::Clock;

// How long an operation keeps polling without sleeping after its last
// progress (see RunPlan).
constexpr auto kSpin = std::chrono::microseconds(50);

std::string Describe(const proto::OpDescriptor& d) {
  // Broadcasts move bytes whatever the dtypes; the others count elements.
  const std::string unit = d.dtype() == 0 ? "bytes" : std::string(DTypeName(static_cast<DType>(d.dtype())));
  std::string s = d.op() + " of " + std::to_string(d.count()) + " " + unit + " (" + d.shapes() + ")";
  if (d.root() >= 0) s += " from rank " + std::to_string(d.root());
  return s;
}

bool SameOp(const proto::OpDescriptor& a, const proto::OpDescriptor& b) {
  return a.sequence() == b.sequence() && a.op() == b.op() && a.dtype() == b.dtype() && a.count() == b.count() &&
         a.root() == b.root() && a.shape_hash() == b.shape_hash();
}

// The send side of one operation: the OP frame (frame 0), then plan.sends
// in order (frame i+1 is sends[i]), each once the recv it waits for has
// arrived. The link writes them and says how far it got.
struct SendCursor final : FrameSource {
  SendCursor(const std::string& descriptor, const RingPlan& plan, Clock::time_point start)
      : descriptor(descriptor), plan(plan), last_sent(start) {}

  size_t frames() const { return plan.sends.size() + 1; }
  // Every frame written (TLS may still hold the last bytes: RingLink::Unsent).
  bool done() const { return sent == frames(); }
  // A frame is part way written or another may go.
  bool wants() const { return handed > sent || Ready(0).has_value(); }

  std::optional<OutFrame> Ready(size_t i) const override {
    const size_t f = handed + i;
    if (f == 0) return OutFrame{wire::kOp, reinterpret_cast<const std::byte*>(descriptor.data()), descriptor.size()};
    if (!plan.SendReady(f - 1, received)) return std::nullopt;
    return OutFrame{wire::kData, plan.sends[f - 1].data, plan.sends[f - 1].bytes};
  }

  // Sends what the socket takes now; `received_now` recvs have arrived.
  Status Advance(RingLink& link, size_t received_now) {
    received = received_now;
    ASSIGN_OR_RETURN(const SendProgress p, link.Send(*this));
    handed += p.opened;
    sent += p.completed;
    const auto now = Clock::now();
    if (p.moved) {
      blocked_since.reset();
      last_sent = now;
    }
    if (p.blocked && !blocked_since) blocked_since = now;
    return Status::Ok();
  }

  const std::string& descriptor;
  const RingPlan& plan;
  size_t handed = 0;    // frames given to the link
  size_t sent = 0;      // frames the link has written in full
  size_t received = 0;  // the receive side's progress, which releases sends
  Clock::time_point last_sent;
  std::optional<Clock::time_point> blocked_since;  // next has taken nothing since
};

// Who is who in one operation's error messages.
struct OpContext {
  const Peer& self;
  const Peer& prev;
  uint64_t sequence;
};

// The receive side of one operation: prev's OP frame, which must match
// ours, then plan.recvs in order; keepalives are skipped, and an ABORT ends
// the operation with the cause it carries.
struct RecvCursor {
  RecvCursor(const std::string& descriptor, const RingPlan& plan, std::vector<std::byte>& staging, OpContext context,
             Clock::time_point start)
      : descriptor(descriptor), plan(plan), staging(staging), context(context), last_received(start) {}

  bool done() const { return op_received && received == plan.recvs.size(); }

  // Reads what prev has sent without going past this operation's last frame
  // (the next operation's frames stay in the socket).
  Status Advance(RingLink& link) {
    while (!done()) {
      if (!in_payload) {
        ASSIGN_OR_RETURN(const size_t n, link.Receive(reinterpret_cast<char*>(&header) + header_got,
                                                      sizeof(wire::Header) - header_got));
        if (n == 0) return Status::Ok();
        last_received = Clock::now();
        header_got += n;
        if (header_got < sizeof(wire::Header)) continue;
        header_got = 0;
        ASSIGN_OR_RETURN(in_payload, StartFrame());
        if (!in_payload) continue;
      }
      if (left > 0) {
        ASSIGN_OR_RETURN(const size_t n, link.Receive(dest, left));
        if (n == 0) return Status::Ok();
        last_received = Clock::now();
        dest += n;
        left -= n;
        if (left > 0) continue;
      }
      in_payload = false;
      RETURN_IF_ERROR(FinishFrame());
    }
    return Status::Ok();
  }

  // A whole header has arrived: checks it and says where its payload goes;
  // false for a keepalive, which has none.
  StatusOr<bool> StartFrame() {
    auto from = [&] { return context.prev.Describe(); };  // for errors only: frames are the hot path
    if ((header.type & 0xffff0000u) != wire::kFrameMagic) return DataLoss("collective: corrupt frame from " + from());
    if (header.type == wire::kKeepalive) return false;
    if (header.type == wire::kAbort || header.type == wire::kOp) {
      if (header.length > wire::kMaxControlPayload) {
        return DataLoss("collective: oversized control frame from " + from());
      }
      if (header.type == wire::kOp && op_received) {
        return InvalidArgument("collective: " + from() + " started operation #" + std::to_string(context.sequence + 1) +
                               " while " + context.self.Describe() + " was still receiving #" +
                               std::to_string(context.sequence) + ": the members disagree on the operation");
      }
      control.assign(header.length, '\0');
      dest = reinterpret_cast<std::byte*>(control.data());
      left = header.length;
      return true;
    }
    if (header.type != wire::kData) return DataLoss("collective: unknown frame type from " + from());
    if (!op_received || received >= plan.recvs.size()) {
      return DataLoss("collective: unexpected data frame from " + from());
    }
    const RingPiece& p = plan.recvs[received];
    if (header.length != p.bytes) {
      return InvalidArgument("collective: " + from() + " sent a chunk of " + std::to_string(header.length) +
                             " bytes where " + std::to_string(p.bytes) + " were expected");
    }
    if (p.reduce && staging.size() < p.bytes) staging.resize(p.bytes);
    dest = p.reduce ? staging.data() : p.data;
    left = p.bytes;
    return true;
  }

  // A frame's payload has arrived in full.
  Status FinishFrame() {
    if (header.type == wire::kAbort) return Status(wire::CodeFromWire(header.aux), control);
    if (header.type == wire::kOp) {
      proto::OpDescriptor theirs, mine;
      if (!theirs.ParseFromString(control) || !mine.ParseFromString(descriptor)) {
        return DataLoss("collective: malformed operation descriptor from " + context.prev.Describe());
      }
      if (!SameOp(theirs, mine)) {
        return InvalidArgument("collective: members disagree on operation #" + std::to_string(mine.sequence()) + ": " +
                               context.prev.name + " called " + Describe(theirs) + " but " + context.self.name +
                               " called " + Describe(mine));
      }
      op_received = true;
      return Status::Ok();
    }
    const RingPiece& p = plan.recvs[received];
    if (p.reduce) {
      float* dst = reinterpret_cast<float*>(p.data);
      const float* src = reinterpret_cast<const float*>(staging.data());
      const size_t n = p.bytes / sizeof(float);
      for (size_t k = 0; k < n; ++k) dst[k] += src[k];
    }
    ++received;
    return Status::Ok();
  }

  const std::string& descriptor;
  const RingPlan& plan;
  std::vector<std::byte>& staging;  // where a chunk to be summed lands first
  const OpContext context;
  bool op_received = false;
  size_t received = 0;  // plan.recvs complete
  wire::Header header{};
  size_t header_got = 0;
  bool in_payload = false;
  std::byte* dest = nullptr;  // where the rest of the payload goes
  size_t left = 0;
  std::string control;  // an OP or ABORT payload
  Clock::time_point last_received;
};

// The end of the bucket that starts at tensors[i]: a tensor of `limit` bytes
// or more goes alone, smaller ones together while they fit. `bytes`: the
// bucket's size.
size_t BucketEnd(std::span<Tensor* const> tensors, size_t i, size_t limit, size_t* bytes) {
  *bytes = tensors[i]->bytes();
  size_t j = i + 1;
  if (*bytes >= limit) return j;
  while (j < tensors.size() && tensors[j]->bytes() < limit && *bytes + tensors[j]->bytes() <= limit) {
    *bytes += tensors[j++]->bytes();
  }
  return j;
}

void PackBucket(std::span<Tensor* const> tensors, std::byte* to) {
  for (const Tensor* t : tensors) {
    std::memcpy(to, t->raw(), t->bytes());
    to += t->bytes();
  }
}

void UnpackBucket(std::span<Tensor* const> tensors, const std::byte* from) {
  for (Tensor* t : tensors) {
    std::memcpy(t->raw(), from, t->bytes());
    from += t->bytes();
  }
}

}  // namespace

RingCommunicator::RingCommunicator(int rank, std::vector<Peer> members, int64_t generation, net::Fd to_next,
                                   net::Fd from_prev, Options options)
    : rank_(rank),
      members_(std::move(members)),
      generation_(generation),
      options_(options),
      link_(std::move(to_next), std::move(from_prev), next().Describe(), prev().Describe(), options_.timeout) {
  staging_.resize(std::max<size_t>(options_.chunk_bytes, 64));
}

RingCommunicator::~RingCommunicator() {
  if (size() > 1) {
    (void)Fail(Aborted("collective: " + self().Describe() + " left generation " + std::to_string(generation_) +
                       " of the group"));
  }
  // link_'s destructor stops the keepalives and drains both connections.
}

Status RingCommunicator::error() const { return link_.error(); }

void RingCommunicator::Abort(const Status& reason) { (void)Fail(reason); }

Status RingCommunicator::Fail(const Status& s) { return link_.Fail(s); }

Status RingCommunicator::Execute(const std::string& op, uint32_t dtype, uint64_t count, int64_t root,
                                 std::span<Tensor* const> shapes, const RingPlan& plan) {
  RETURN_IF_ERROR(error());
  proto::OpDescriptor d;
  d.set_sequence(++sequence_);
  d.set_op(op);
  d.set_dtype(dtype);
  d.set_count(count);
  d.set_root(root);
  d.set_shape_hash(HashShapes(shapes));
  std::string text = ShapesString(shapes);
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  d.set_shapes(text);
  std::string bytes;
  d.SerializeToString(&bytes);
  Status s = RunPlan(bytes, plan);
  if (!s.ok()) return Fail(s);
  return Status::Ok();
}

Status RingCommunicator::RunPlan(const std::string& descriptor, const RingPlan& plan) {
  const auto timeout = options_.timeout;
  const auto start = Clock::now();
  SendCursor send(descriptor, plan, start);
  RecvCursor recv(descriptor, plan, staging_, OpContext{self(), prev(), sequence_}, start);
  while (true) {
    if (link_.failed()) return error();
    // TLS: bytes a send accepted may still wait in the session; the
    // operation has not sent them until they are in the kernel.
    const bool unsent = link_.Unsent();
    const bool send_done = send.done() && !unsent;
    if (recv.done() && send_done) return Status::Ok();
    // TLS: decrypted bytes already read from the socket, which poll() cannot see.
    const bool buffered = !recv.done() && link_.Buffered();
    // Once everything is sent, next may finish the operation and leave: its
    // hang-up is no longer this member's business.
    const short want_next = send_done ? 0 : (POLLIN | (send.wants() || unsent ? POLLOUT : 0));
    pollfd fds[2] = {{link_.prev_fd(), static_cast<short>(recv.done() ? 0 : POLLIN), 0},
                     {link_.next_fd(), want_next, 0}};
    // Right after bytes moved, more usually follow within microseconds:
    // look again without sleeping (yielding the CPU to whoever else can
    // run) for kSpin, rather than pay a sleep and a wake-up each time.
    const bool spin = Clock::now() - std::max(send.last_sent, recv.last_received) < kSpin;
    const int n = poll(fds, 2, spin || buffered ? 0 : 100);
    if (n == 0 && spin) sched_yield();
    if (n < 0 && errno != EINTR) return Internal(std::string("collective: poll: ") + std::strerror(errno));
    const short from_prev = n > 0 ? fds[0].revents : 0, from_next = n > 0 ? fds[1].revents : 0;
    // Only an ABORT or the end of the connection come back from next.
    if (from_next & (POLLIN | POLLERR | POLLHUP)) return from_next & POLLIN ? link_.ReadReverse() : link_.NextClosed();
    if ((from_prev & (POLLIN | POLLERR | POLLHUP)) || buffered) RETURN_IF_ERROR(recv.Advance(link_));
    // After the receive side: sending may have become possible because a
    // chunk arrived.
    if (!send_done) RETURN_IF_ERROR(send.Advance(link_, recv.received));
    const auto now = Clock::now();
    if (!recv.done() && now - recv.last_received > timeout) {
      return DeadlineExceeded("collective: nothing from " + prev().Describe() + " for " + FormatSeconds(timeout) +
                              " s, not even a keepalive: it is hung or unreachable");
    }
    if (send.blocked_since && now - *send.blocked_since > timeout) {
      return DeadlineExceeded("collective: " + next().Describe() + " stopped reading for " + FormatSeconds(timeout) +
                              " s: it is hung or unreachable");
    }
  }
}

Status RingCommunicator::ReduceBuffer(float* data, int64_t count, std::span<Tensor* const> shapes) {
  return Execute("all_reduce", static_cast<uint32_t>(DType::kFloat32), static_cast<uint64_t>(count), -1, shapes,
                 AllReducePlan(position(), data, count));
}

Status RingCommunicator::BroadcastBuffer(std::byte* data, size_t bytes, int root, std::span<Tensor* const> shapes) {
  return Execute("broadcast", 0, bytes, root, shapes, BroadcastPlan(position(), data, bytes, root));
}

Status RingCommunicator::AllReduce(std::span<Tensor* const> tensors, ReduceOp op) {
  RETURN_IF_ERROR(error());
  for (Tensor* t : tensors) {
    if (t->dtype() != DType::kFloat32) {
      return Fail(InvalidArgument("collective: all_reduce takes float32 tensors, got " + t->DebugString()));
    }
  }
  if (size() > 1) {
    for (size_t i = 0, j; i < tensors.size(); i = j) {
      size_t bytes = 0;
      j = BucketEnd(tensors, i, options_.bucket_bytes, &bytes);
      const std::span<Tensor* const> group = tensors.subspan(i, j - i);
      if (j == i + 1) {  // alone: reduced where it is
        RETURN_IF_ERROR(ReduceBuffer(tensors[i]->data<float>(), tensors[i]->size(), group));
        continue;
      }
      if (bucket_.size() < bytes) bucket_.resize(bytes);
      PackBucket(group, bucket_.data());
      RETURN_IF_ERROR(
          ReduceBuffer(reinterpret_cast<float*>(bucket_.data()), static_cast<int64_t>(bytes / sizeof(float)), group));
      UnpackBucket(group, bucket_.data());
    }
  }
  if (op == ReduceOp::kMean && size() > 1) {
    const float n = static_cast<float>(size());
    for (Tensor* t : tensors) {
      for (float& v : t->flat<float>()) v /= n;
    }
  }
  return Status::Ok();
}

StatusOr<Tensor> RingCommunicator::AllGather(const Tensor& in) {
  RETURN_IF_ERROR(error());
  Shape shape = in.shape();
  if (shape.empty()) shape = {1};
  shape[0] *= size();
  ASSIGN_OR_RETURN(Tensor out, Tensor::CreateUninitialized(in.dtype(), shape));
  const size_t block = in.bytes();
  if (block > 0) std::memcpy(out.raw() + static_cast<size_t>(rank_) * block, in.raw(), block);
  if (size() == 1) return out;
  const RingPlan plan = AllGatherPlan(position(), out.raw(), block);
  Tensor copy = in;
  Tensor* shapes[] = {&copy};
  RETURN_IF_ERROR(
      Execute("all_gather", static_cast<uint32_t>(in.dtype()), static_cast<uint64_t>(in.size()), -1, shapes, plan));
  return out;
}

Status RingCommunicator::Broadcast(std::span<Tensor* const> tensors, int root) {
  RETURN_IF_ERROR(error());
  if (root < 0 || root >= size()) {
    return Fail(InvalidArgument("collective: broadcast from rank " + std::to_string(root) + " in a group of " +
                                std::to_string(size())));
  }
  if (size() == 1) return Status::Ok();
  for (size_t i = 0, j; i < tensors.size(); i = j) {
    size_t bytes = 0;
    j = BucketEnd(tensors, i, options_.bucket_bytes, &bytes);
    const std::span<Tensor* const> group = tensors.subspan(i, j - i);
    if (tensors[i]->bytes() >= options_.bucket_bytes) {  // a big one: sent from where it is
      RETURN_IF_ERROR(BroadcastBuffer(tensors[i]->raw(), tensors[i]->bytes(), root, group));
      continue;
    }
    if (bucket_.size() < bytes) bucket_.resize(bytes);
    if (rank_ == root) PackBucket(group, bucket_.data());
    RETURN_IF_ERROR(BroadcastBuffer(bucket_.data(), bytes, root, group));
    if (rank_ != root) UnpackBucket(group, bucket_.data());
  }
  return Status::Ok();
}

Status RingCommunicator::Barrier() {
  Tensor token = Tensor::Scalar(static_cast<float>(rank_));
  return AllGather(token).status();
}

}  // namespace tfjob::collective
