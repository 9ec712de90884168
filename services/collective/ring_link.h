// One ring member's link to its neighbours: the connection to the next
// member (operations' data goes out on it) and the one from the previous
// member (data comes in), with what travels on them besides that data: the
// frame format, keepalives while the link is idle, and ABORT both ways when
// the member fails. RingCommunicator (ring.h) decides what to send and what
// to expect; the link only moves frames.
//
// Wire format: every frame is a 16-byte wire::Header {type, aux, length}
// followed by `length` payload bytes. OP (the operation's descriptor), DATA
// and KEEPALIVE go forwards only; ABORT (aux = status code, payload = the
// message) goes both ways, and is the only frame that ever comes back from
// the next member.
//
// Frame boundaries: the operation's thread hands frames to Send in order and
// the link remembers the one part way written, because the keepalive thread
// and Fail may only put their frames between two frames: a keepalive waits,
// and Fail first completes the open frame with zeros (the receiver throws
// the operation away anyway).
//
// Liveness: while the operation's thread sends nothing, a keepalive goes out
// every timeout/4, so that next still hears from this member while it
// computes or writes a checkpoint between operations.
//
// Ownership: owns both connections and the keepalive thread; the destructor
// stops and joins the thread, then reads (and drops) what the neighbours
// still send, for at most min(timeout, 1 s), so that closing does not reset
// the connection under an ABORT they have not read yet.
// Thread-safety: Send, Receive, ReadReverse, NextClosed and the descriptor
// accessors are for one operation thread at a time; Fail, error and failed
// from any thread. Failure: Send and Receive return UNAVAILABLE naming the
// neighbour whose connection failed or closed; ReadReverse returns next's
// ABORT as a Status (UNAVAILABLE if next closed instead, DATA_LOSS for any
// other frame); the first Status given to Fail is error() from then on.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "services/net/net.h"

namespace tfjob::collective {

namespace wire {

constexpr uint32_t kFrameMagic = 0x74460000;
constexpr uint32_t kData = kFrameMagic | 1;
constexpr uint32_t kKeepalive = kFrameMagic | 2;
constexpr uint32_t kAbort = kFrameMagic | 3;
constexpr uint32_t kOp = kFrameMagic | 4;
constexpr uint64_t kMaxControlPayload = 64 << 10;

struct Header {
  uint32_t type;
  uint32_t aux;
  uint64_t length;
};
static_assert(sizeof(Header) == 16, "frame header is 16 bytes on the wire");

// An ABORT's aux back to a Code; UNKNOWN for what no Code is.
Code CodeFromWire(uint32_t aux);

}  // namespace wire

// A frame for Send: its type and its payload, borrowed until written.
struct OutFrame {
  uint32_t type = 0;
  const std::byte* payload = nullptr;
  size_t bytes = 0;
};

// The frames an operation sends, in order, as they become ready.
class FrameSource {
 public:
  // The i-th frame after those already handed to the link (by earlier Send
  // calls), or nullopt when it may not go yet. Frames go in order: nullopt
  // for i means the link asks for no later one in this call.
  virtual std::optional<OutFrame> Ready(size_t i) const = 0;

 protected:
  ~FrameSource() = default;
};

// What one Send call did.
struct SendProgress {
  size_t opened = 0;     // frames taken from the source
  size_t completed = 0;  // frames now written in full, the one open before the call first
  bool moved = false;    // bytes went into the socket
  bool blocked = false;  // the socket took no more (EAGAIN)
};

class RingLink {
 public:
  // `to_next` and `from_prev` are connected to the neighbours described by
  // `next_name` and `prev_name` ("worker:1 (10.0.0.7:2222)"); both invalid
  // for a ring of one, which has no link to keep alive.
  RingLink(net::Fd to_next, net::Fd from_prev, std::string next_name, std::string prev_name,
           std::chrono::milliseconds timeout);
  ~RingLink();
  RingLink(const RingLink&) = delete;
  RingLink& operator=(const RingLink&) = delete;

  bool connected() const { return to_next_.valid(); }
  const std::string& next_name() const { return next_name_; }
  const std::string& prev_name() const { return prev_name_; }

  // The operation's thread.
  int next_fd() const { return to_next_.get(); }
  int prev_fd() const { return from_prev_.get(); }
  // TLS: bytes a send accepted that are still in the session, not yet in
  // the kernel, and decrypted bytes from prev that poll() cannot see.
  bool Unsent() const { return net::Unsent(to_next_); }
  bool Buffered() const { return net::Buffered(from_prev_); }
  // Writes, without blocking, the rest of the open frame and then the
  // source's ready frames, as far as the socket takes them.
  StatusOr<SendProgress> Send(const FrameSource& frames) TFJOB_EXCLUDES(send_mu_);
  // Reads up to `n` bytes from prev without blocking; 0 when none are there.
  StatusOr<size_t> Receive(void* dest, size_t n);
  // Reads the ABORT that next sent back (the caller saw it readable).
  Status ReadReverse();
  // The error for next hanging up.
  Status NextClosed() const;

  // Any thread. Fails the link with `s` unless it already failed (the first
  // cause wins, and is returned), tells both neighbours (ABORT), who pass
  // it on, and stops the keepalives.
  Status Fail(const Status& s) TFJOB_EXCLUDES(error_mu_, send_mu_, stop_mu_);
  Status error() const TFJOB_EXCLUDES(error_mu_);
  bool failed() const { return failed_; }

 private:
  // The frame being written to next.
  struct OpenFrame {
    bool open = false;
    wire::Header header{};
    const std::byte* payload = nullptr;
    size_t bytes = 0;
    size_t written = 0;  // header and payload bytes in the socket
    size_t left() const { return sizeof(wire::Header) + bytes - written; }
  };

  void Open(const OutFrame& f) TFJOB_REQUIRES(send_mu_);
  // Writes what TLS and the last keepalive left unsent; false while part of
  // that keepalive is still unsent, when no frame may follow it yet.
  StatusOr<bool> WriteLeftovers() TFJOB_REQUIRES(send_mu_);
  // Counts `n` bytes just written against the open frame and those after it.
  Status Account(size_t n, const FrameSource& frames, SendProgress& p) TFJOB_REQUIRES(send_mu_);
  // Completes the open frame with zeros, then sends ABORT to next and shuts
  // down the writing side; a next that is gone is no longer told.
  void SendAbortForwards(const wire::Header& h, const std::string& msg, net::Clock::time_point deadline)
      TFJOB_REQUIRES(send_mu_);
  void KeepaliveLoop() TFJOB_EXCLUDES(send_mu_, stop_mu_);
  void Stop() TFJOB_EXCLUDES(stop_mu_);
  void Drain();

  // Writes to next are serialized by send_mu_ (the operation's thread, the
  // keepalive thread and Fail share them); reads from next (only ABORT
  // comes back) and everything on from_prev_ are the operation thread's, so
  // the descriptors themselves are not guarded.
  net::Fd to_next_, from_prev_;
  const std::string next_name_, prev_name_;
  const std::chrono::milliseconds timeout_;

  Mutex send_mu_;
  OpenFrame open_ TFJOB_GUARDED_BY(send_mu_);
  std::string pending_ TFJOB_GUARDED_BY(send_mu_);  // the tail of a keepalive that did not fit
  net::Clock::time_point last_send_ TFJOB_GUARDED_BY(send_mu_);

  mutable Mutex error_mu_;
  Status error_ TFJOB_GUARDED_BY(error_mu_);
  // Set with error_, read without the lock by the loops that must stop.
  std::atomic<bool> failed_{false};

  Mutex stop_mu_;
  CondVar stop_cv_;
  bool stop_ TFJOB_GUARDED_BY(stop_mu_) = false;
  std::thread keepalive_;
};

}  // namespace tfjob::collective
