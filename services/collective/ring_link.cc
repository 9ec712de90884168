#include "services/collective/ring_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace tfjob::collective {

namespace wire {

Code CodeFromWire(uint32_t aux) { return aux >= 1 && aux <= 16 ? static_cast<Code>(aux) : Code::kUnknown; }

}  // namespace wire

namespace {

using net::Clock;

bool WouldBlock() { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

}  // namespace

RingLink::RingLink(net::Fd to_next, net::Fd from_prev, std::string next_name, std::string prev_name,
                   std::chrono::milliseconds timeout)
    : to_next_(std::move(to_next)),
      from_prev_(std::move(from_prev)),
      next_name_(std::move(next_name)),
      prev_name_(std::move(prev_name)),
      timeout_(timeout),
      last_send_(Clock::now()) {
  if (connected()) keepalive_ = std::thread([this] { KeepaliveLoop(); });
}

RingLink::~RingLink() {
  Stop();
  if (keepalive_.joinable()) keepalive_.join();
  Drain();
}

void RingLink::Drain() {
  // Closing a socket with unread data makes the kernel send a reset, and a
  // reset can discard what the neighbour has not read yet: the ABORT that
  // says why. So read (and drop) until the neighbours close their side too,
  // for a bounded time.
  const auto deadline = Clock::now() + std::min<std::chrono::milliseconds>(timeout_, std::chrono::milliseconds(1000));
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

void RingLink::Stop() {
  {
    MutexLock l(stop_mu_);
    stop_ = true;
  }
  stop_cv_.NotifyAll();
}

Status RingLink::error() const {
  MutexLock l(error_mu_);
  return error_;
}

Status RingLink::Fail(const Status& s) {
  {
    MutexLock l(error_mu_);
    if (failed_) return error_;
    error_ = s;
    failed_ = true;
  }
  if (connected()) {
    // Tell both neighbours, who pass it on: every member then fails with
    // this cause rather than with "connection closed" from its neighbour.
    std::string msg = s.message().substr(0, wire::kMaxControlPayload);
    const wire::Header h{wire::kAbort, static_cast<uint32_t>(s.code()), msg.size()};
    const auto deadline = Clock::now() + std::chrono::milliseconds(1000);
    {
      MutexLock l(send_mu_);
      SendAbortForwards(h, msg, deadline);
    }
    // Only ABORT ever travels backwards, so this is always a frame boundary.
    if (net::SendAll(from_prev_, &h, sizeof h, deadline, "").ok()) {
      (void)net::SendAll(from_prev_, msg.data(), msg.size(), deadline, "");
    }
    shutdown(from_prev_.get(), SHUT_WR);
  }
  Stop();
  return s;
}

void RingLink::SendAbortForwards(const wire::Header& h, const std::string& msg, Clock::time_point deadline) {
  bool ok = true;
  if (open_.open && open_.left() > 0) {
    // Finish the frame the receiver is in the middle of: it is thrown away
    // with the operation anyway.
    std::vector<char> zeros(std::min<size_t>(open_.left(), size_t{1} << 20));
    size_t left = open_.left();
    while (ok && left > 0) {
      const size_t n = std::min(left, zeros.size());
      ok = net::SendAll(to_next_, zeros.data(), n, deadline, next_name_).ok();
      left -= n;
    }
  }
  if (ok && !pending_.empty()) ok = net::SendAll(to_next_, pending_.data(), pending_.size(), deadline, "").ok();
  open_ = OpenFrame{};
  pending_.clear();
  if (ok) {
    ok = net::SendAll(to_next_, &h, sizeof h, deadline, "").ok() &&
         net::SendAll(to_next_, msg.data(), msg.size(), deadline, "").ok();
  }
  shutdown(to_next_.get(), SHUT_WR);
}

void RingLink::KeepaliveLoop() {
  const auto interval = std::max(timeout_ / 4, std::chrono::milliseconds(10));
  while (true) {
    {
      MutexLock l(stop_mu_);
      if (stop_cv_.WaitFor(l, interval, [&]() TFJOB_REQUIRES(stop_mu_) { return stop_; })) return;
    }
    MutexLock l(send_mu_);
    if (failed_) return;
    const auto now = Clock::now();
    if (open_.open) continue;
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
    const wire::Header h{wire::kKeepalive, 0, 0};
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

void RingLink::Open(const OutFrame& f) {
  open_ = OpenFrame{true, wire::Header{f.type, 0, f.bytes}, f.payload, f.bytes, 0};
}

StatusOr<bool> RingLink::WriteLeftovers() {
  if (net::Unsent(to_next_) && net::Flush(to_next_) < 0 && !WouldBlock()) {
    return Unavailable("collective: connection to " + next_name_ + " failed: " + std::strerror(errno));
  }
  if (!pending_.empty()) {
    const ssize_t n = net::Send(to_next_, pending_.data(), pending_.size(), MSG_DONTWAIT);
    if (n < 0 && !WouldBlock()) {
      return Unavailable("collective: connection to " + next_name_ + " failed: " + std::strerror(errno));
    }
    if (n > 0) pending_.erase(0, static_cast<size_t>(n));
  }
  return pending_.empty();
}

StatusOr<SendProgress> RingLink::Send(const FrameSource& frames) {
  MutexLock l(send_mu_);
  SendProgress p;
  ASSIGN_OR_RETURN(const bool clear, WriteLeftovers());
  if (!clear) return p;
  while (true) {
    if (!open_.open) {
      const std::optional<OutFrame> f = frames.Ready(p.opened);
      if (!f) return p;
      Open(*f);
      ++p.opened;
    }
    // The open frame's rest and then every further frame already ready (up
    // to kBatch): one system call for several chunks.
    constexpr size_t kBatch = 16;
    iovec iov[2 * kBatch];
    wire::Header more[kBatch];
    size_t iovcnt = 0;
    if (open_.written < sizeof(wire::Header)) {
      iov[iovcnt++] = {reinterpret_cast<char*>(&open_.header) + open_.written, sizeof(wire::Header) - open_.written};
      if (open_.bytes > 0) iov[iovcnt++] = {const_cast<std::byte*>(open_.payload), open_.bytes};
    } else {
      const size_t off = open_.written - sizeof(wire::Header);
      iov[iovcnt++] = {const_cast<std::byte*>(open_.payload) + off, open_.bytes - off};
    }
    for (size_t b = 0; b + 1 < kBatch; ++b) {
      const std::optional<OutFrame> f = frames.Ready(p.opened + b);
      if (!f) break;
      more[b] = wire::Header{f->type, 0, f->bytes};
      iov[iovcnt++] = {&more[b], sizeof(wire::Header)};
      if (f->bytes > 0) iov[iovcnt++] = {const_cast<std::byte*>(f->payload), f->bytes};
    }
    const ssize_t n = net::Sendv(to_next_, iov, static_cast<int>(iovcnt), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        p.blocked = true;
        return p;
      }
      return Unavailable("collective: connection to " + next_name_ + " failed: " + std::strerror(errno) +
                         " (its process exited or was killed)");
    }
    p.moved = true;
    last_send_ = Clock::now();
    RETURN_IF_ERROR(Account(static_cast<size_t>(n), frames, p));
  }
}

Status RingLink::Account(size_t n, const FrameSource& frames, SendProgress& p) {
  // Frame by frame; the frames after the open one are opened in the order
  // they were gathered.
  while (n > 0) {
    if (!open_.open) {
      // Every frame gathered for the write was ready, so this always opens one.
      const std::optional<OutFrame> f = frames.Ready(p.opened);
      if (!f) return Internal("collective: sent bytes beyond the frames that were ready");
      Open(*f);
      ++p.opened;
    }
    const size_t used = std::min(n, open_.left());
    open_.written += used;
    n -= used;
    if (open_.left() == 0) {
      open_.open = false;
      ++p.completed;
    }
  }
  return Status::Ok();
}

StatusOr<size_t> RingLink::Receive(void* dest, size_t n) {
  while (true) {
    const ssize_t got = net::Recv(from_prev_, dest, n, MSG_DONTWAIT);
    if (got > 0) return static_cast<size_t>(got);
    if (got == 0) {
      return Unavailable("collective: " + prev_name_ + " closed the connection (its process exited or was killed)");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return Unavailable("collective: connection to " + prev_name_ + " failed: " + std::strerror(errno) +
                       " (its process exited or was killed)");
  }
}

Status RingLink::NextClosed() const {
  return Unavailable("collective: " + next_name_ + " closed the connection (its process exited or was killed)");
}

Status RingLink::ReadReverse() {
  // Only ABORT frames (or the end of the connection) come back from next.
  wire::Header h{};
  const auto deadline = Clock::now() + timeout_;
  if (!net::RecvAll(to_next_, &h, sizeof h, deadline, next_name_).ok()) return NextClosed();
  if (h.type != wire::kAbort || h.length > wire::kMaxControlPayload) {
    return DataLoss("collective: unexpected frame from " + next_name_ + " on the backward link");
  }
  std::string msg(h.length, '\0');
  if (!net::RecvAll(to_next_, msg.data(), msg.size(), deadline, next_name_).ok()) return NextClosed();
  return Status(wire::CodeFromWire(h.aux), msg);
}

}  // namespace tfjob::collective
