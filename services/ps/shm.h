// A shared-memory region for one data-plane connection between a PsClient
// and a PS on the same host, so a request's and a response's tensors are
// copied into and out of memory both processes map instead of through the
// kernel's loopback TCP (wire.h: kPayloadInShm). The frames and meta still
// go over the connection, which orders every use of the region: the client
// writes a request's payload before sending its frame, the PS reads it
// before answering, then writes the response's payload before sending that
// frame, and the client reads it before its next request.
//
// The client creates the region: a POSIX shared-memory object with a random
// name, mode 0600, its pages reserved up front (posix_fallocate, so running
// out of /dev/shm is an error now rather than a SIGBUS later), and a random
// nonce in its first bytes. It sends the name, size and nonce in an
// AttachShmRequest; the PS maps the object only when it is a regular file
// of that size owned by its own user and holds that nonce, and the client
// then unlinks the name, so nothing is left in /dev/shm once both have it
// mapped. Tasks in different pods (each has its own /dev/shm) or on other
// hosts never get this far: their host keys differ (HostKey).
//
// Thread-safety: a Region is used by one connection at a time. Ownership:
// owns its mapping (and, on the creating side, the name until Unlink).
// Failure: Status values; nothing is left mapped or named on an error.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace tfjob::ps::shm {

// Bytes before the payload area: the nonce, padded to a cache line.
inline constexpr size_t kHeaderBytes = 64;
inline constexpr size_t kNonceChars = 32;
// The most a PS maps for one connection.
inline constexpr size_t kMaxRegionBytes = size_t{256} << 20;

class Region {
 public:
  // Client side: a new region of `bytes` (header included).
  static StatusOr<std::unique_ptr<Region>> Create(size_t bytes);
  // PS side: the region `name` of `bytes`, when it is one Create made (see
  // above) with `nonce`. FAILED_PRECONDITION when it cannot be mapped (not
  // on this host, another user's, the wrong size or nonce), INVALID_ARGUMENT
  // for a name or size Create never makes.
  static StatusOr<std::unique_ptr<Region>> Open(const std::string& name, size_t bytes, const std::string& nonce);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  // Removes the name (the mapping stays); the destructor does it otherwise.
  void Unlink();

  const std::string& name() const { return name_; }
  const std::string& nonce() const { return nonce_; }
  size_t bytes() const { return bytes_; }
  // The payload area and its size.
  std::byte* payload() const { return base_ + kHeaderBytes; }
  size_t capacity() const { return bytes_ - kHeaderBytes; }

 private:
  Region(std::string name, std::string nonce, std::byte* base, size_t bytes, bool named)
      : name_(std::move(name)), nonce_(std::move(nonce)), base_(base), bytes_(bytes), named_(named) {}
  std::string name_;
  std::string nonce_;
  std::byte* base_;
  size_t bytes_;
  bool named_;  // this side still owns the name
};

// This host's /dev/shm as the data plane sees it: the kernel's boot id and
// /dev/shm's device and inode. Two processes with the same key can share a
// Region; empty when there is no /dev/shm.
std::string HostKey();

}  // namespace tfjob::ps::shm
