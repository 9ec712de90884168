// The parameter server's data plane: how tensors travel between a PsClient
// and a PS without protobuf `bytes` fields, intermediate copies or gRPC's
// framing. The sender hands the kernel the tensor's own memory (one
// sendmsg over an iovec of header, meta and tensors); the receiver reads
// from the socket straight into the destination tensor. The control plane
// (Save, Restore, GetStatus, Fence, Shutdown) stays on gRPC.
//
// Both share the PS's one port, the address in TF_CONFIG: the PS looks at
// the first four bytes of every accepted connection and gives HTTP/2 (gRPC)
// connections to gRPC and data-plane connections (kHelloMagic) to its
// data-plane server (ps_service.h).
//
// Wire format, little-endian, every frame a 24-byte Frame then `meta_bytes`
// of meta then `payload_bytes` of payload:
//   hello     client -> PS: {kHelloMagic, kVersion, token length, 0}, the
//             token (rpc/auth.h; empty when the job has none) as meta.
//             PS -> client: a response frame: OK, or UNAUTHENTICATED (a
//             missing or wrong token) after which the PS closes.
//   request   {kRequestMagic, Op, meta, payload}: meta is the op's request
//             message from ps.proto whose Tensor fields carry dtype and shape
//             but no data; the payload is those tensors' raw bytes, back to
//             back, in the order the meta lists them.
//   response  {kResponseMagic, code, meta, payload}: OK with the op's
//             response message (again dtype and shape only) and the tensors'
//             bytes; or an error code with its one-line message as meta and
//             no payload.
// One request at a time per connection; a client keeps a pool of them.
//
// Same host (shm.h): a hello with kHelloAsksHostKey in `reserved` is
// answered with the PS's shm::HostKey() as meta (none over TLS). A client
// whose own key matches sends an AttachShm request naming a region it made;
// once the PS answers OK, either side may put a request's or response's
// payload in that region instead of after the meta, saying so with
// kPayloadInShm in the frame's `reserved` (payload_bytes still counts it).
//
// Thread-safety: free functions, reentrant. Failure: Status values naming
// the peer: UNAVAILABLE when the connection broke (retryable),
// DEADLINE_EXCEEDED when time ran out, INVALID_ARGUMENT for malformed
// frames. SIGPIPE is never raised (MSG_NOSIGNAL).
#pragma once

#include <sys/uio.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
#include "services/net/net.h"
#include "proto/tensor.pb.h"
#include "services/tensor/tensor.h"

namespace tfjob::ps::wire {

static_assert(std::endian::native == std::endian::little, "the data plane's frames are little-endian");

using Clock = std::chrono::steady_clock;
inline constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

inline constexpr uint32_t kHelloMagic = 0x444A4654;  // "TFJD"
// A job with TLS (tls/tls.h): the client sends these four bytes in clear,
// then the TLS handshake, then the hello inside TLS. The PS tells it from
// gRPC (whose TLS begins with a handshake record) by them.
inline constexpr uint32_t kTlsMagic = 0x544A4654;       // "TFJT"
inline constexpr uint32_t kRequestMagic = 0x514A4654;   // "TFJQ"
inline constexpr uint32_t kResponseMagic = 0x534A4654;  // "TFJS"
inline constexpr uint32_t kVersion = 1;
// Meta is names, shapes and row ids: 64 MiB is far beyond any real request.
inline constexpr uint32_t kMaxMetaBytes = 64u << 20;
inline constexpr uint32_t kMaxTokenBytes = 4096;

enum class Op : uint32_t {
  kCreateVariable = 1,  // proto::CreateVariableRequest / CreateVariableResponse
  kPull = 2,            // proto::PullRequest / PullResponse
  kPush = 3,            // proto::PushRequest / PushResponse
  kPushPull = 4,        // proto::PushPullRequest / PushPullResponse
  kAttachShm = 5,       // proto::AttachShmRequest / AttachShmResponse
};

// Frame.reserved bits.
inline constexpr uint32_t kHelloAsksHostKey = 1;  // in a hello
inline constexpr uint32_t kPayloadInShm = 1;      // in a request or response

struct Frame {
  uint32_t magic = 0;
  uint32_t kind = 0;  // hello: version; request: Op; response: Code
  uint32_t meta_bytes = 0;
  uint32_t reserved = 0;
  uint64_t payload_bytes = 0;
};
static_assert(sizeof(Frame) == 24);

// Blocking-socket I/O that gives up at `deadline` (kNoDeadline: never),
// through the connection's TLS session when it has one.
// SendAll consumes `iov` (its entries are advanced as bytes go out).
Status SendAll(const net::Fd& fd, std::span<iovec> iov, Clock::time_point deadline, const std::string& peer);
// Sends what the socket takes without waiting, consuming `iov` as SendAll
// does; on a TLS connection it sends nothing (the session would wait).
Status SendNow(const net::Fd& fd, std::span<iovec> iov, const std::string& peer);
// `*received` (when given) counts the bytes that did arrive, also on failure.
Status RecvAll(const net::Fd& fd, void* data, size_t n, Clock::time_point deadline, const std::string& peer,
               size_t* received = nullptr);
// Reads and drops `n` bytes through a small buffer (a refused request's
// payload, so the connection stays usable).
Status Discard(const net::Fd& fd, uint64_t n, Clock::time_point deadline, const std::string& peer);
// UNAVAILABLE with "<peer> closed the connection" on a clean end of stream
// before the first byte, so a server can tell an idle close from a failure.
Status RecvFrame(const net::Fd& fd, Frame* f, Clock::time_point deadline, const std::string& peer);

// An error response: its code and message, no payload.
Status SendError(const net::Fd& fd, const Status& s, Clock::time_point deadline, const std::string& peer);

// dtype and shape of `t`, no data.
void HeaderOf(const Tensor& t, proto::Tensor* out);
// The dtype, shape and byte count a header describes. INVALID_ARGUMENT for
// an unknown dtype, a negative or overflowing shape, a header that carries
// data (the data plane sends it in the payload), or more than `max_bytes`.
struct Described {
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t bytes = 0;
};
StatusOr<Described> Describe(const proto::Tensor& header, uint64_t max_bytes);

}  // namespace tfjob::ps::wire
