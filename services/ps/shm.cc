#include "services/ps/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

namespace tfjob::ps::shm {
namespace {

constexpr char kPrefix[] = "/tfjob-ps-";
constexpr size_t kNameHexChars = 32;

std::string RandomHex(size_t chars) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device rd;
  std::string out;
  while (out.size() < chars) {
    uint32_t r = rd();
    for (int i = 0; i < 8 && out.size() < chars; ++i, r >>= 4) out.push_back(kHex[r & 15]);
  }
  return out;
}

bool IsHex(const std::string& s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string Why(const std::string& what, int err) { return what + ": " + std::strerror(err); }

}  // namespace

StatusOr<std::unique_ptr<Region>> Region::Create(size_t bytes) {
  if (bytes <= kHeaderBytes || bytes > kMaxRegionBytes) {
    return InvalidArgument("shared-memory region of " + std::to_string(bytes) + " bytes");
  }
  const std::string name = kPrefix + RandomHex(kNameHexChars);
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return FailedPrecondition(Why("creating shared memory " + name, errno));
  // Pages reserved now: a full /dev/shm fails here, not as a SIGBUS on the
  // first write.
  const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* base = rc == 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int err = rc != 0 ? rc : errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return FailedPrecondition(Why("reserving " + std::to_string(bytes) + " bytes of shared memory", err));
  }
  std::string nonce = RandomHex(kNonceChars);
  std::memcpy(base, nonce.data(), nonce.size());
  return std::unique_ptr<Region>(new Region(name, std::move(nonce), static_cast<std::byte*>(base), bytes, true));
}

StatusOr<std::unique_ptr<Region>> Region::Open(const std::string& name, size_t bytes, const std::string& nonce) {
  const size_t prefix = sizeof kPrefix - 1;
  if (name.size() != prefix + kNameHexChars || name.compare(0, prefix, kPrefix) != 0 || !IsHex(name.substr(prefix))) {
    return InvalidArgument("\"" + name + "\" is not a data-plane shared-memory name");
  }
  if (bytes <= kHeaderBytes || bytes > kMaxRegionBytes) {
    return InvalidArgument("a shared-memory region of " + std::to_string(bytes) + " bytes (at most " +
                           std::to_string(kMaxRegionBytes) + ")");
  }
  if (nonce.size() != kNonceChars) return InvalidArgument("a shared-memory nonce of " + std::to_string(nonce.size()));
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return FailedPrecondition(Why("opening shared memory " + name, errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      static_cast<uint64_t>(st.st_size) != bytes) {
    close(fd);
    return FailedPrecondition("shared memory " + name + " is not a region of " + std::to_string(bytes) +
                              " bytes of this user");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) return FailedPrecondition(Why("mapping shared memory " + name, err));
  if (std::memcmp(base, nonce.data(), kNonceChars) != 0) {
    munmap(base, bytes);
    return FailedPrecondition("shared memory " + name + " does not hold the nonce it was offered with");
  }
  return std::unique_ptr<Region>(new Region(name, nonce, static_cast<std::byte*>(base), bytes, false));
}

Region::~Region() {
  Unlink();
  munmap(base_, bytes_);
}

void Region::Unlink() {
  if (!named_) return;
  shm_unlink(name_.c_str());
  named_ = false;
}

std::string HostKey() {
  struct stat st {};
  if (stat("/dev/shm", &st) != 0) return "";
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(in, boot);
  return boot + ":" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

}  // namespace tfjob::ps::shm
