#include "services/ps/wire.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace tfjob::ps::wire {
namespace {

// Sets the socket's timeout for blocking sends or receives to the time left
// before `deadline` (0: no timeout). False when the deadline has passed.
// A timeout already set that ends at most 1/64 after the deadline and not
// before half of the time left is kept: a blocking call that times out early
// comes back EAGAIN and is armed again, so only the overshoot matters, and
// one connection's requests (each with a fresh deadline) would otherwise set
// it twice per request.
bool ArmTimeout(const net::Fd& fd, int option, Clock::time_point deadline) {
  int64_t want = 0;
  if (deadline != kNoDeadline) {
    want = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
    if (want <= 0) return false;
  }
  int64_t& armed = fd.armed_timeout_us(option == SO_SNDTIMEO);
  if (armed == want || (want > 0 && armed > 0 && armed <= want + want / 64 && armed >= want / 2)) return true;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(want / 1000000);
  tv.tv_usec = static_cast<suseconds_t>(want % 1000000);
  armed = setsockopt(fd.get(), SOL_SOCKET, option, &tv, sizeof tv) == 0 ? want : -1;
  return true;
}

Status Broken(const net::Fd& fd, const std::string& peer, int err) { return net::IoError(fd, err, peer); }

// Advances `iov` past `done` bytes sent; returns the first entry left.
size_t Consume(std::span<iovec> iov, size_t first, size_t done) {
  while (first < iov.size() && done >= iov[first].iov_len) {
    done -= iov[first].iov_len;
    iov[first].iov_len = 0;
    ++first;
  }
  if (done > 0) {
    iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + done;
    iov[first].iov_len -= done;
  }
  while (first < iov.size() && iov[first].iov_len == 0) ++first;
  return first;
}

}  // namespace

Status SendNow(const net::Fd& fd, std::span<iovec> iov, const std::string& peer) {
  if (fd.tls()) return Status::Ok();
  size_t first = Consume(iov, 0, 0);
  while (first < iov.size()) {
    const ssize_t w = net::Sendv(fd, iov.data() + first,
                                 static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX)), MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
      return Broken(fd, peer, errno);
    }
    first = Consume(iov, first, static_cast<size_t>(w));
  }
  return Status::Ok();
}

Status SendAll(const net::Fd& fd, std::span<iovec> iov, Clock::time_point deadline, const std::string& peer) {
  size_t first = 0;
  while (first < iov.size() && iov[first].iov_len == 0) ++first;
  if (first == iov.size()) return Status::Ok();
  if (!ArmTimeout(fd, SO_SNDTIMEO, deadline)) return DeadlineExceeded(peer + " did not take the data in time");
  while (first < iov.size()) {
    const ssize_t w =
        net::Sendv(fd, iov.data() + first, static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX)), 0);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!ArmTimeout(fd, SO_SNDTIMEO, deadline)) return DeadlineExceeded(peer + " did not take the data in time");
        continue;
      }
      return Broken(fd, peer, errno);
    }
    first = Consume(iov, first, static_cast<size_t>(w));
  }
  // TLS: the session may hold the last bytes it accepted.
  while (net::Flush(fd) != 0) {
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Broken(fd, peer, errno);
    if (!ArmTimeout(fd, SO_SNDTIMEO, deadline)) return DeadlineExceeded(peer + " did not take the data in time");
  }
  return Status::Ok();
}

Status RecvAll(const net::Fd& fd, void* data, size_t n, Clock::time_point deadline, const std::string& peer,
               size_t* received) {
  size_t ignored = 0;
  size_t& count = received ? *received : ignored;
  count = 0;
  if (n == 0) return Status::Ok();
  if (!ArmTimeout(fd, SO_RCVTIMEO, deadline)) return DeadlineExceeded("nothing from " + peer + " in time");
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = net::Recv(fd, p, n, MSG_WAITALL);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      count += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return Unavailable(peer + " closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!ArmTimeout(fd, SO_RCVTIMEO, deadline)) return DeadlineExceeded("nothing from " + peer + " in time");
      continue;
    }
    return Broken(fd, peer, errno);
  }
  return Status::Ok();
}

Status Discard(const net::Fd& fd, uint64_t n, Clock::time_point deadline, const std::string& peer) {
  char buf[64 << 10];
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof buf));
    RETURN_IF_ERROR(wire::RecvAll(fd, buf, k, deadline, peer));
    n -= k;
  }
  return Status::Ok();
}

Status RecvFrame(const net::Fd& fd, Frame* f, Clock::time_point deadline, const std::string& peer) {
  return wire::RecvAll(fd, f, sizeof *f, deadline, peer);
}

Status SendError(const net::Fd& fd, const Status& s, Clock::time_point deadline, const std::string& peer) {
  std::string text = s.message();
  if (text.size() > kMaxMetaBytes) text.resize(kMaxMetaBytes);
  Frame f{kResponseMagic, static_cast<uint32_t>(s.code()), static_cast<uint32_t>(text.size()), 0, 0};
  iovec iov[2] = {{&f, sizeof f}, {text.data(), text.size()}};
  return wire::SendAll(fd, iov, deadline, peer);
}

void HeaderOf(const Tensor& t, proto::Tensor* out) {
  out->set_dtype(t.dtype() == DType::kInt64 ? proto::DTYPE_INT64 : proto::DTYPE_FLOAT32);
  out->clear_shape();
  for (int64_t d : t.shape()) out->add_shape(d);
  out->clear_data();
}

StatusOr<Described> Describe(const proto::Tensor& header, uint64_t max_bytes) {
  Described d;
  switch (header.dtype()) {
    case proto::DTYPE_FLOAT32: d.dtype = DType::kFloat32; break;
    case proto::DTYPE_INT64: d.dtype = DType::kInt64; break;
    default: return InvalidArgument("tensor has invalid dtype " + std::to_string(header.dtype()));
  }
  d.shape.assign(header.shape().begin(), header.shape().end());
  if (!header.data().empty()) {
    return InvalidArgument("tensor " + std::string(DTypeName(d.dtype)) + ShapeString(d.shape) +
                           " carries its data in the header; the data plane sends it after the meta");
  }
  const int64_t n = NumElements(d.shape);
  const uint64_t elem = DTypeSize(d.dtype);
  if (n < 0 || static_cast<uint64_t>(n) > UINT64_MAX / elem) {
    return InvalidArgument("tensor has invalid shape " + ShapeString(d.shape));
  }
  d.bytes = static_cast<uint64_t>(n) * elem;
  if (d.bytes > max_bytes) {
    return InvalidArgument("tensor " + std::string(DTypeName(d.dtype)) + ShapeString(d.shape) + " claims " +
                           std::to_string(d.bytes) + " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  return d;
}

}  // namespace tfjob::ps::wire
