#include "services/collective/ring.h"

#include <poll.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "proto/collective.pb.h"

namespace tfjob::collective {
namespace {

using net::Clock;

constexpr uint32_t kFrameMagic = 0x74460000;
constexpr uint32_t kData = kFrameMagic | 1;
constexpr uint32_t kKeepalive = kFrameMagic | 2;
constexpr uint32_t kAbort = kFrameMagic | 3;
constexpr uint32_t kOp = kFrameMagic | 4;
constexpr uint64_t kMaxControlPayload = 64 << 10;
// How long an operation keeps polling without sleeping after its last
// progress (see ExecuteLocked).
constexpr auto kSpin = std::chrono::microseconds(50);

struct Header {
  uint32_t type;
  uint32_t aux;
  uint64_t length;
};
static_assert(sizeof(Header) == 16, "frame header is 16 bytes on the wire");

Header MakeHeader(uint32_t type, uint32_t aux, uint64_t length) { return Header{type, aux, length}; }

std::string Seconds(std::chrono::milliseconds ms) {
  std::string s = std::to_string(static_cast<double>(ms.count()) / 1000.0);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

int Mod(int a, int n) { return ((a % n) + n) % n; }

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

Code CodeFromWire(uint32_t aux) {
  return aux >= 1 && aux <= 16 ? static_cast<Code>(aux) : Code::kUnknown;
}

}  // namespace

RingCommunicator::RingCommunicator(int rank, std::vector<Peer> members, int64_t generation, net::Fd to_next,
                                   net::Fd from_prev, Options options)
    : rank_(rank),
      members_(std::move(members)),
      generation_(generation),
      to_next_(std::move(to_next)),
      from_prev_(std::move(from_prev)),
      options_(options),
      last_send_(Clock::now()) {
  staging_.resize(std::max<size_t>(options_.chunk_bytes, 64));
  if (size() > 1) keepalive_ = std::thread([this] { KeepaliveLoop(); });
}

RingCommunicator::~RingCommunicator() {
  if (size() > 1) {
    (void)Fail(Aborted("collective: " + members_[static_cast<size_t>(rank_)].Describe() + " left generation " +
                       std::to_string(generation_) + " of the group"));
  }
  {
    std::lock_guard g(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
  // Closing a socket with unread data makes the kernel send a reset, and a
  // reset can discard what the neighbour has not read yet: the ABORT that
  // says why. So read (and drop) until the neighbours close their side too,
  // for a bounded time.
  const auto deadline = Clock::now() + std::min<std::chrono::milliseconds>(options_.timeout, std::chrono::milliseconds(1000));
  for (net::Fd* fd : {&to_next_, &from_prev_}) {
    if (!fd->valid()) continue;
    char scratch[4096];
    while (Clock::now() < deadline) {
      pollfd p{fd->get(), POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (!net::Buffered(*fd) && poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) <= 0) break;
      const ssize_t n = net::Recv(*fd, scratch, sizeof scratch, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
  }
}

Status RingCommunicator::error() const {
  std::lock_guard g(error_mu_);
  return error_;
}

void RingCommunicator::Abort(const Status& reason) { (void)Fail(reason); }

Status RingCommunicator::Fail(const Status& s) {
  {
    std::lock_guard g(error_mu_);
    if (failed_) return error_;
    error_ = s;
    failed_ = true;
  }
  if (size() > 1) {
    // Tell both neighbours, who pass it on: every member then fails with
    // this cause rather than with "connection closed" from its neighbour.
    std::string msg = s.message().substr(0, kMaxControlPayload);
    const Header h = MakeHeader(kAbort, static_cast<uint32_t>(s.code()), msg.size());
    const auto deadline = Clock::now() + std::chrono::milliseconds(1000);
    {
      std::lock_guard g(send_mu_);
      bool ok = true;
      if (frame_open_ && open_frame_left_ > 0) {
        // Finish the frame the receiver is in the middle of: it is thrown
        // away with the operation anyway.
        std::vector<char> zeros(std::min<size_t>(open_frame_left_, size_t{1} << 20));
        size_t left = open_frame_left_;
        while (ok && left > 0) {
          const size_t n = std::min(left, zeros.size());
          ok = net::SendAll(to_next_, zeros.data(), n, deadline, next().Describe()).ok();
          left -= n;
        }
      }
      if (ok && !pending_.empty()) ok = net::SendAll(to_next_, pending_.data(), pending_.size(), deadline, "").ok();
      frame_open_ = false;
      pending_.clear();
      if (ok) {
        ok = net::SendAll(to_next_, &h, sizeof h, deadline, "").ok() &&
             net::SendAll(to_next_, msg.data(), msg.size(), deadline, "").ok();
      }
      shutdown(to_next_.get(), SHUT_WR);
    }
    // Only ABORT ever travels backwards, so this is always a frame boundary.
    if (net::SendAll(from_prev_, &h, sizeof h, deadline, "").ok()) {
      (void)net::SendAll(from_prev_, msg.data(), msg.size(), deadline, "");
    }
    shutdown(from_prev_.get(), SHUT_WR);
  }
  {
    std::lock_guard g(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  return s;
}

void RingCommunicator::KeepaliveLoop() {
  const auto interval = std::max(options_.timeout / 4, std::chrono::milliseconds(10));
  while (true) {
    {
      std::unique_lock lk(stop_mu_);
      if (stop_cv_.wait_for(lk, interval, [this] { return stop_; })) return;
    }
    std::lock_guard g(send_mu_);
    if (failed_) return;
    const auto now = Clock::now();
    if (frame_open_) continue;
    // TLS: what the last keepalive left in the session goes first.
    if (net::Unsent(to_next_)) {
      (void)net::Flush(to_next_);
      continue;
    }
    if (!pending_.empty()) {
      const ssize_t n = net::Send(to_next_, pending_.data(), pending_.size(), MSG_DONTWAIT);
      if (n > 0) pending_.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (now - last_send_ < interval) continue;
    const Header h = MakeHeader(kKeepalive, 0, 0);
    const ssize_t n = net::Send(to_next_, &h, sizeof h, MSG_DONTWAIT);
    if (n > 0) {
      last_send_ = now;
      if (static_cast<size_t>(n) < sizeof h) {
        pending_.assign(reinterpret_cast<const char*>(&h) + n, sizeof h - static_cast<size_t>(n));
      }
    }
    // A failed send means the neighbour is gone; the next operation sees it.
  }
}

Status RingCommunicator::ReadReverse() {
  // Only ABORT frames (or the end of the connection) come back from next.
  Header h{};
  const auto deadline = Clock::now() + options_.timeout;
  Status s = net::RecvAll(to_next_, &h, sizeof h, deadline, next().Describe());
  if (!s.ok()) {
    return Unavailable("collective: " + next().Describe() + " closed the connection (its process exited or was killed)");
  }
  if (h.type != kAbort || h.length > kMaxControlPayload) {
    return DataLoss("collective: unexpected frame from " + next().Describe() + " on the backward link");
  }
  std::string msg(h.length, '\0');
  if (!net::RecvAll(to_next_, msg.data(), msg.size(), deadline, next().Describe()).ok()) {
    return Unavailable("collective: " + next().Describe() + " closed the connection (its process exited or was killed)");
  }
  return Status(CodeFromWire(h.aux), msg);
}

Status RingCommunicator::Execute(const std::string& op, uint32_t dtype, uint64_t count, int64_t root,
                                 std::span<Tensor* const> shapes, const Plan& plan) {
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
  Status s = ExecuteLocked(bytes, text, plan);
  if (!s.ok()) return Fail(s);
  return Status::Ok();
}

Status RingCommunicator::ExecuteLocked(const std::string& descriptor, const std::string&, const Plan& plan) {
  const int next_fd = to_next_.get(), prev_fd = from_prev_.get();
  const auto timeout = options_.timeout;

  // Send side: the OP frame, then plan.sends in order.
  bool op_sent = false;
  size_t si = 0;
  bool s_open = false;
  Header s_hdr{};
  const std::byte* s_payload = nullptr;
  size_t s_len = 0, s_off = 0;  // s_off counts header + payload bytes written

  // Receive side: prev's OP frame, then plan.recvs in order.
  bool op_received = false;
  size_t ri = 0;
  Header r_hdr{};
  size_t r_hdr_got = 0;
  bool r_in_payload = false;
  std::byte* r_dest = nullptr;
  size_t r_left = 0;
  std::string r_buf;  // OP or ABORT payload

  auto last_recv = Clock::now();
  auto last_progress = last_recv;  // the last byte sent or received
  std::optional<Clock::time_point> blocked_since;

  auto ready = [&](size_t i) {
    return i < plan.sends.size() && (plan.send_after[i] < 0 || static_cast<size_t>(plan.send_after[i]) < ri);
  };

  // Opens the next frame to send: the OP frame first, then plan.sends in
  // order, each once the recv it waits for has arrived. False when none is.
  auto open_next = [&]() -> bool {
    if (!op_sent) {
      s_hdr = MakeHeader(kOp, 0, descriptor.size());
      s_payload = reinterpret_cast<const std::byte*>(descriptor.data());
      s_len = descriptor.size();
    } else if (ready(si)) {
      s_hdr = MakeHeader(kData, 0, plan.sends[si].bytes);
      s_payload = plan.sends[si].data;
      s_len = plan.sends[si].bytes;
    } else {
      return false;
    }
    s_open = true;
    s_off = 0;
    frame_open_ = true;
    open_frame_left_ = sizeof(Header) + s_len;
    return true;
  };

  auto do_send = [&]() -> Status {
    std::lock_guard g(send_mu_);
    if (net::Unsent(to_next_) && net::Flush(to_next_) < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Unavailable("collective: connection to " + next().Describe() + " failed: " + std::strerror(errno));
    }
    if (!pending_.empty()) {
      const ssize_t n = net::Send(to_next_, pending_.data(), pending_.size(), MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return Unavailable("collective: connection to " + next().Describe() + " failed: " + std::strerror(errno));
      }
      if (n > 0) pending_.erase(0, static_cast<size_t>(n));
      if (!pending_.empty()) return Status::Ok();
    }
    while (true) {
      if (!s_open && !open_next()) return Status::Ok();
      // The open frame's rest and then every further frame already ready
      // (up to kBatch): one system call for several chunks.
      constexpr size_t kBatch = 16;
      iovec iov[2 * kBatch];
      Header more[kBatch];
      size_t iovcnt = 0;
      if (s_off < sizeof(Header)) {
        iov[iovcnt++] = {reinterpret_cast<char*>(&s_hdr) + s_off, sizeof(Header) - s_off};
        if (s_len > 0) iov[iovcnt++] = {const_cast<std::byte*>(s_payload), s_len};
      } else {
        iov[iovcnt++] = {const_cast<std::byte*>(s_payload) + (s_off - sizeof(Header)), s_len - (s_off - sizeof(Header))};
      }
      for (size_t b = 0, k = op_sent ? si + 1 : si; b + 1 < kBatch && ready(k); ++b, ++k) {
        more[b] = MakeHeader(kData, 0, plan.sends[k].bytes);
        iov[iovcnt++] = {&more[b], sizeof(Header)};
        if (plan.sends[k].bytes > 0) iov[iovcnt++] = {plan.sends[k].data, plan.sends[k].bytes};
      }
      const ssize_t n = net::Sendv(to_next_, iov, static_cast<int>(iovcnt), MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (!blocked_since) blocked_since = Clock::now();
          return Status::Ok();
        }
        return Unavailable("collective: connection to " + next().Describe() + " failed: " + std::strerror(errno) +
                           " (its process exited or was killed)");
      }
      blocked_since.reset();
      last_send_ = Clock::now();
      last_progress = last_send_;
      // Account the bytes frame by frame; the frames after the open one are
      // opened in the same order they were gathered.
      size_t left = static_cast<size_t>(n);
      while (left > 0) {
        // Every frame gathered above is ready, so this always opens one.
        if (!s_open && !open_next()) return Internal("collective: sent bytes beyond the frames that were ready");
        const size_t used = std::min(left, sizeof(Header) + s_len - s_off);
        s_off += used;
        left -= used;
        open_frame_left_ = sizeof(Header) + s_len - s_off;
        if (open_frame_left_ == 0) {
          s_open = false;
          frame_open_ = false;
          if (!op_sent) {
            op_sent = true;
          } else {
            ++si;
          }
        }
      }
    }
  };

  auto closed = [&] {
    return Unavailable("collective: " + prev().Describe() + " closed the connection (its process exited or was killed)");
  };

  // Reads what is available from prev without going past this operation's
  // last frame (the next operation's frames stay in the socket).
  auto do_recv = [&]() -> Status {
    while (!(op_received && ri == plan.recvs.size())) {
      if (!r_in_payload) {
        const ssize_t n = net::Recv(from_prev_, reinterpret_cast<char*>(&r_hdr) + r_hdr_got, sizeof(Header) - r_hdr_got, MSG_DONTWAIT);
        if (n == 0) return closed();
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
          return Unavailable("collective: connection to " + prev().Describe() + " failed: " + std::strerror(errno) +
                             " (its process exited or was killed)");
        }
        last_recv = Clock::now();
        last_progress = last_recv;
        r_hdr_got += static_cast<size_t>(n);
        if (r_hdr_got < sizeof(Header)) continue;
        r_hdr_got = 0;
        if ((r_hdr.type & 0xffff0000u) != kFrameMagic) {
          return DataLoss("collective: corrupt frame from " + prev().Describe());
        }
        if (r_hdr.type == kKeepalive) continue;
        if (r_hdr.type == kAbort || r_hdr.type == kOp) {
          if (r_hdr.length > kMaxControlPayload) return DataLoss("collective: oversized control frame from " + prev().Describe());
          if (r_hdr.type == kOp && op_received) {
            return InvalidArgument("collective: " + prev().Describe() + " started operation #" +
                                   std::to_string(sequence_ + 1) + " while " +
                                   members_[static_cast<size_t>(rank_)].Describe() +
                                   " was still receiving #" + std::to_string(sequence_) +
                                   ": the members disagree on the operation");
          }
          r_buf.assign(r_hdr.length, '\0');
          r_dest = reinterpret_cast<std::byte*>(r_buf.data());
          r_left = r_hdr.length;
        } else if (r_hdr.type == kData) {
          if (!op_received || ri >= plan.recvs.size()) {
            return DataLoss("collective: unexpected data frame from " + prev().Describe());
          }
          const Piece& p = plan.recvs[ri];
          if (r_hdr.length != p.bytes) {
            return InvalidArgument("collective: " + prev().Describe() + " sent a chunk of " + std::to_string(r_hdr.length) +
                                   " bytes where " + std::to_string(p.bytes) + " were expected");
          }
          if (p.reduce && staging_.size() < p.bytes) staging_.resize(p.bytes);
          r_dest = p.reduce ? staging_.data() : p.data;
          r_left = p.bytes;
        } else {
          return DataLoss("collective: unknown frame type from " + prev().Describe());
        }
        r_in_payload = true;
      }
      if (r_left > 0) {
        const ssize_t n = net::Recv(from_prev_, r_dest, r_left, MSG_DONTWAIT);
        if (n == 0) return closed();
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
          return Unavailable("collective: connection to " + prev().Describe() + " failed: " + std::strerror(errno) +
                             " (its process exited or was killed)");
        }
        last_recv = Clock::now();
        last_progress = last_recv;
        r_dest += n;
        r_left -= static_cast<size_t>(n);
        if (r_left > 0) continue;
      }
      r_in_payload = false;
      if (r_hdr.type == kAbort) return Status(CodeFromWire(r_hdr.aux), r_buf);
      if (r_hdr.type == kOp) {
        proto::OpDescriptor theirs, mine;
        if (!theirs.ParseFromString(r_buf) || !mine.ParseFromString(descriptor)) {
          return DataLoss("collective: malformed operation descriptor from " + prev().Describe());
        }
        if (!SameOp(theirs, mine)) {
          return InvalidArgument("collective: members disagree on operation #" + std::to_string(mine.sequence()) + ": " +
                                 prev().name + " called " + Describe(theirs) + " but " +
                                 members_[static_cast<size_t>(rank_)].name + " called " + Describe(mine));
        }
        op_received = true;
        continue;
      }
      const Piece& p = plan.recvs[ri];
      if (p.reduce) {
        float* dst = reinterpret_cast<float*>(p.data);
        const float* src = reinterpret_cast<const float*>(staging_.data());
        const size_t n = p.bytes / sizeof(float);
        for (size_t k = 0; k < n; ++k) dst[k] += src[k];
      }
      ++ri;
    }
    return Status::Ok();
  };

  while (true) {
    if (failed_) return error();
    const bool recv_done = op_received && ri == plan.recvs.size();
    // TLS: bytes a send accepted may still wait in the session; the
    // operation has not sent them until they are in the kernel.
    const bool unsent = net::Unsent(to_next_);
    const bool send_done = op_sent && si == plan.sends.size() && !s_open && !unsent;
    if (recv_done && send_done) return Status::Ok();
    const bool want_send = s_open || !op_sent || ready(si) || unsent;
    // TLS: decrypted bytes already read from the socket, which poll() cannot see.
    const bool buffered = !recv_done && net::Buffered(from_prev_);
    // Once everything is sent, next may finish the operation and leave: its
    // hang-up is no longer this member's business.
    pollfd fds[2] = {{prev_fd, static_cast<short>(recv_done ? 0 : POLLIN), 0},
                     {next_fd, static_cast<short>(send_done ? 0 : (POLLIN | (want_send ? POLLOUT : 0))), 0}};
    // Right after bytes moved, more usually follow within microseconds:
    // look again without sleeping (yielding the CPU to whoever else can
    // run) for kSpin, rather than pay a sleep and a wake-up each time.
    const bool spin = Clock::now() - last_progress < kSpin;
    const int n = poll(fds, 2, spin || buffered ? 0 : 100);
    if (n == 0 && spin) sched_yield();
    if (n < 0 && errno != EINTR) return Internal(std::string("collective: poll: ") + std::strerror(errno));
    if (n > 0) {
      if (fds[1].revents & (POLLIN | POLLERR | POLLHUP)) {
        // Only an ABORT or the end of the connection come back this way.
        if ((fds[1].revents & POLLIN) == 0) {
          return Unavailable("collective: " + next().Describe() + " closed the connection (its process exited or was killed)");
        }
        return ReadReverse();
      }
      if (fds[0].revents & (POLLIN | POLLERR | POLLHUP)) RETURN_IF_ERROR(do_recv());
      if (fds[1].revents & POLLOUT) RETURN_IF_ERROR(do_send());
    }
    if (buffered) RETURN_IF_ERROR(do_recv());
    // Sending may have become possible because a chunk arrived.
    if (!send_done) RETURN_IF_ERROR(do_send());
    const auto now = Clock::now();
    if (!(op_received && ri == plan.recvs.size()) && now - last_recv > timeout) {
      return DeadlineExceeded("collective: nothing from " + prev().Describe() + " for " + Seconds(timeout) +
                              " s, not even a keepalive: it is hung or unreachable");
    }
    if (blocked_since && now - *blocked_since > timeout) {
      return DeadlineExceeded("collective: " + next().Describe() + " stopped reading for " + Seconds(timeout) +
                              " s: it is hung or unreachable");
    }
  }
}

void RingCommunicator::AppendAllReducePlan(float* data, int64_t count, Plan& plan) const {
  const int n = size(), r = rank_;
  std::vector<int64_t> off(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) off[static_cast<size_t>(i) + 1] = off[static_cast<size_t>(i)] + count / n + (i < count % n ? 1 : 0);
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(options_.chunk_bytes / sizeof(float)));
  auto pieces = [&](int seg, bool reduce) {
    std::vector<Piece> out;
    const int64_t begin = off[static_cast<size_t>(seg)], end = off[static_cast<size_t>(seg) + 1];
    for (int64_t o = begin; o < end; o += chunk) {
      out.push_back({reinterpret_cast<std::byte*>(data + o), static_cast<size_t>(std::min(chunk, end - o)) * sizeof(float), reduce});
    }
    return out;
  };
  const size_t base_sends = plan.sends.size();
  (void)base_sends;
  int prev_recv_start = -1;
  for (int k = 0; k < 2 * (n - 1); ++k) {
    const bool scatter = k < n - 1;
    const int j = k - (n - 1);
    const int send_seg = scatter ? Mod(r - k, n) : Mod(r + 1 - j, n);
    const int recv_seg = scatter ? Mod(r - k - 1, n) : Mod(r - j, n);
    const std::vector<Piece> sp = pieces(send_seg, false);
    for (size_t c = 0; c < sp.size(); ++c) {
      plan.sends.push_back(sp[c]);
      plan.send_after.push_back(k == 0 ? -1 : prev_recv_start + static_cast<int>(c));
    }
    prev_recv_start = static_cast<int>(plan.recvs.size());
    for (const Piece& p : pieces(recv_seg, scatter)) plan.recvs.push_back(p);
  }
}

void RingCommunicator::AppendAllGatherPlan(std::byte* out, size_t block_bytes, Plan& plan) const {
  const int n = size(), r = rank_;
  const size_t chunk = std::max<size_t>(8, options_.chunk_bytes);
  auto pieces = [&](int block) {
    std::vector<Piece> v;
    std::byte* base = out + static_cast<size_t>(block) * block_bytes;
    for (size_t o = 0; o < block_bytes; o += chunk) v.push_back({base + o, std::min(chunk, block_bytes - o), false});
    return v;
  };
  int prev_recv_start = -1;
  for (int k = 0; k < n - 1; ++k) {
    const std::vector<Piece> sp = pieces(Mod(r - k, n));
    for (size_t c = 0; c < sp.size(); ++c) {
      plan.sends.push_back(sp[c]);
      plan.send_after.push_back(k == 0 ? -1 : prev_recv_start + static_cast<int>(c));
    }
    prev_recv_start = static_cast<int>(plan.recvs.size());
    for (const Piece& p : pieces(Mod(r - k - 1, n))) plan.recvs.push_back(p);
  }
}

void RingCommunicator::AppendBroadcastPlan(std::byte* data, size_t bytes, int root, Plan& plan) const {
  const int n = size();
  const int pos = Mod(rank_ - root, n);
  const size_t chunk = std::max<size_t>(8, options_.chunk_bytes);
  std::vector<Piece> pieces;
  for (size_t o = 0; o < bytes; o += chunk) pieces.push_back({data + o, std::min(chunk, bytes - o), false});
  if (pos != 0) {
    for (const Piece& p : pieces) plan.recvs.push_back(p);
  }
  if (pos != n - 1) {
    for (size_t c = 0; c < pieces.size(); ++c) {
      plan.sends.push_back(pieces[c]);
      plan.send_after.push_back(pos == 0 ? -1 : static_cast<int>(c));
    }
  }
}

Status RingCommunicator::ReduceBuffer(float* data, int64_t count, std::span<Tensor* const> shapes) {
  Plan plan;
  AppendAllReducePlan(data, count, plan);
  return Execute("all_reduce", static_cast<uint32_t>(DType::kFloat32), static_cast<uint64_t>(count), -1, shapes, plan);
}

Status RingCommunicator::BroadcastBuffer(std::byte* data, size_t bytes, int root, std::span<Tensor* const> shapes) {
  Plan plan;
  AppendBroadcastPlan(data, bytes, root, plan);
  return Execute("broadcast", 0, bytes, root, shapes, plan);
}

Status RingCommunicator::AllReduce(std::span<Tensor* const> tensors, ReduceOp op) {
  RETURN_IF_ERROR(error());
  for (Tensor* t : tensors) {
    if (t->dtype() != DType::kFloat32) {
      return Fail(InvalidArgument("collective: all_reduce takes float32 tensors, got " + t->DebugString()));
    }
  }
  if (size() > 1) {
    size_t i = 0;
    while (i < tensors.size()) {
      if (tensors[i]->bytes() >= options_.bucket_bytes) {
        RETURN_IF_ERROR(ReduceBuffer(tensors[i]->data<float>(), tensors[i]->size(), tensors.subspan(i, 1)));
        ++i;
        continue;
      }
      size_t j = i, bytes = 0;
      while (j < tensors.size() && tensors[j]->bytes() < options_.bucket_bytes &&
             bytes + tensors[j]->bytes() <= options_.bucket_bytes) {
        bytes += tensors[j++]->bytes();
      }
      if (j == i + 1) {
        RETURN_IF_ERROR(ReduceBuffer(tensors[i]->data<float>(), tensors[i]->size(), tensors.subspan(i, 1)));
      } else {
        if (bucket_.size() < bytes) bucket_.resize(bytes);
        size_t o = 0;
        for (size_t k = i; k < j; ++k) {
          std::memcpy(bucket_.data() + o, tensors[k]->raw(), tensors[k]->bytes());
          o += tensors[k]->bytes();
        }
        RETURN_IF_ERROR(ReduceBuffer(reinterpret_cast<float*>(bucket_.data()), static_cast<int64_t>(bytes / sizeof(float)),
                                     tensors.subspan(i, j - i)));
        o = 0;
        for (size_t k = i; k < j; ++k) {
          std::memcpy(tensors[k]->raw(), bucket_.data() + o, tensors[k]->bytes());
          o += tensors[k]->bytes();
        }
      }
      i = j;
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
  Plan plan;
  AppendAllGatherPlan(out.raw(), block, plan);
  Tensor copy = in;
  Tensor* shapes[] = {&copy};
  RETURN_IF_ERROR(Execute("all_gather", static_cast<uint32_t>(in.dtype()), static_cast<uint64_t>(in.size()), -1, shapes, plan));
  return out;
}

Status RingCommunicator::Broadcast(std::span<Tensor* const> tensors, int root) {
  RETURN_IF_ERROR(error());
  if (root < 0 || root >= size()) {
    return Fail(InvalidArgument("collective: broadcast from rank " + std::to_string(root) + " in a group of " +
                                std::to_string(size())));
  }
  if (size() == 1) return Status::Ok();
  size_t i = 0;
  while (i < tensors.size()) {
    if (tensors[i]->bytes() >= options_.bucket_bytes) {
      RETURN_IF_ERROR(BroadcastBuffer(tensors[i]->raw(), tensors[i]->bytes(), root, tensors.subspan(i, 1)));
      ++i;
      continue;
    }
    size_t j = i, bytes = 0;
    while (j < tensors.size() && tensors[j]->bytes() < options_.bucket_bytes &&
           bytes + tensors[j]->bytes() <= options_.bucket_bytes) {
      bytes += tensors[j++]->bytes();
    }
    if (bucket_.size() < bytes) bucket_.resize(bytes);
    size_t o = 0;
    if (rank_ == root) {
      for (size_t k = i; k < j; ++k) {
        std::memcpy(bucket_.data() + o, tensors[k]->raw(), tensors[k]->bytes());
        o += tensors[k]->bytes();
      }
    }
    RETURN_IF_ERROR(BroadcastBuffer(bucket_.data(), bytes, root, tensors.subspan(i, j - i)));
    if (rank_ != root) {
      o = 0;
      for (size_t k = i; k < j; ++k) {
        std::memcpy(tensors[k]->raw(), bucket_.data() + o, tensors[k]->bytes());
        o += tensors[k]->bytes();
      }
    }
    i = j;
  }
  return Status::Ok();
}

Status RingCommunicator::Barrier() {
  Tensor token = Tensor::Scalar(static_cast<float>(rank_));
  return AllGather(token).status();
}

}  // namespace tfjob::collective
