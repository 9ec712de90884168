#include "services/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tfjob::checkpoint {
namespace {

constexpr char kMagic[8] = {'T', 'F', 'J', 'C', 'K', 'P', 'T', '2'};
// A reader never buffers more than this, whatever a damaged length claims.
constexpr uint32_t kMaxChunk = 16u << 20;
constexpr uint32_t kMaxName = 64u << 10;
constexpr uint32_t kMaxTensorsPerEntry = 1024;
constexpr uint32_t kMaxRank = 16;

uint32_t Crc(const void* p, size_t n) {
  return static_cast<uint32_t>(crc32(0, static_cast<const Bytef*>(p), static_cast<uInt>(n)));
}

// ---- writing ----

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status Write(const void* p, size_t n) = 0;
};

class StringSink final : public ByteSink {
 public:
  explicit StringSink(std::string& out) : out_(out) {}
  Status Write(const void* p, size_t n) override {
    out_.append(static_cast<const char*>(p), n);
    return Status::Ok();
  }

 private:
  std::string& out_;
};

class FileSink final : public ByteSink {
 public:
  FileSink(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status Write(const void* p, size_t n) override {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd_, c, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Unavailable(path_ + ": write failed: " + std::strerror(errno));
      }
      c += w;
      n -= static_cast<size_t>(w);
      bytes_ += static_cast<uint64_t>(w);
    }
    return Status::Ok();
  }
  uint64_t bytes() const { return bytes_; }

 private:
  int fd_;
  std::string path_;
  uint64_t bytes_ = 0;
};

// Cuts the payload into CRC'd chunks of kChunkBytes.
class ChunkWriter {
 public:
  explicit ChunkWriter(ByteSink& sink) : sink_(sink) { buf_.reserve(kChunkBytes); }

  Status Start() { return sink_.Write(kMagic, sizeof kMagic); }

  Status Append(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const size_t take = std::min(n, kChunkBytes - buf_.size());
      buf_.insert(buf_.end(), c, c + take);
      c += take;
      n -= take;
      payload_ += take;
      if (buf_.size() == kChunkBytes) RETURN_IF_ERROR(Flush());
    }
    return Status::Ok();
  }
  template <typename T>
  Status Put(T v) {
    return Append(&v, sizeof v);
  }

  Status AddEntry(const Entry& e) {
    RETURN_IF_ERROR(Put<uint32_t>(static_cast<uint32_t>(e.name.size())));
    RETURN_IF_ERROR(Append(e.name.data(), e.name.size()));
    RETURN_IF_ERROR(Put<int64_t>(e.iterations));
    RETURN_IF_ERROR(Put<uint32_t>(static_cast<uint32_t>(e.tensors.size())));
    for (const Tensor& t : e.tensors) {
      RETURN_IF_ERROR(Put<uint8_t>(static_cast<uint8_t>(t.dtype())));
      RETURN_IF_ERROR(Put<uint32_t>(static_cast<uint32_t>(t.rank())));
      for (int64_t d : t.shape()) RETURN_IF_ERROR(Put<int64_t>(d));
      RETURN_IF_ERROR(Append(t.raw(), t.bytes()));
    }
    ++entries_;
    return Status::Ok();
  }

  Status Finish() {
    RETURN_IF_ERROR(Flush());
    char end[4 + 12 + 4];
    const uint32_t zero = 0, entries = entries_;
    std::memcpy(end, &zero, 4);
    std::memcpy(end + 4, &payload_, 8);
    std::memcpy(end + 12, &entries, 4);
    const uint32_t crc = Crc(end + 4, 12);
    std::memcpy(end + 16, &crc, 4);
    return sink_.Write(end, sizeof end);
  }

 private:
  Status Flush() {
    if (buf_.empty()) return Status::Ok();
    const uint32_t n = static_cast<uint32_t>(buf_.size());
    const uint32_t crc = Crc(buf_.data(), buf_.size());
    RETURN_IF_ERROR(sink_.Write(&n, 4));
    RETURN_IF_ERROR(sink_.Write(buf_.data(), buf_.size()));
    RETURN_IF_ERROR(sink_.Write(&crc, 4));
    buf_.clear();
    return Status::Ok();
  }

  ByteSink& sink_;
  std::vector<char> buf_;
  uint64_t payload_ = 0;
  uint32_t entries_ = 0;
};

// ---- reading ----

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to n bytes; 0 at the end.
  virtual StatusOr<size_t> Read(void* p, size_t n) = 0;
};

class StringSource final : public ByteSource {
 public:
  explicit StringSource(const std::string& s) : s_(s) {}
  StatusOr<size_t> Read(void* p, size_t n) override {
    const size_t take = std::min(n, s_.size() - pos_);
    std::memcpy(p, s_.data() + pos_, take);
    pos_ += take;
    return take;
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

class FileSource final : public ByteSource {
 public:
  FileSource(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  StatusOr<size_t> Read(void* p, size_t n) override {
    while (true) {
      const ssize_t r = ::read(fd_, p, n);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno != EINTR) return DataLoss(path_ + ": read error: " + std::strerror(errno));
    }
  }

 private:
  int fd_;
  std::string path_;
};

// The payload of a file, chunk by chunk, each verified before it is used.
class ChunkReader {
 public:
  ChunkReader(ByteSource& src, std::string name, uint64_t size) : src_(src), name_(std::move(name)), size_(size) {}

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return size_ - std::min(size_, offset_); }
  // Payload bytes that can still come: what is buffered plus the rest of
  // the file (an upper bound, which is what size checks need).
  uint64_t available() const { return (buf_.size() - pos_) + remaining(); }
  uint32_t adler32() const { return adler_; }
  uint32_t end_entries() const { return end_entries_; }

  Status Start() {
    char magic[sizeof kMagic];
    Status s = Exact(magic, sizeof magic);
    if (!s.ok() || std::memcmp(magic, kMagic, sizeof magic) != 0) {
      return DataLoss(name_ + ": not a checkpoint (bad magic at offset 0)");
    }
    return Status::Ok();
  }

  // Payload bytes into `dst` (nullptr: skip them).
  Status Read(void* dst, size_t n) {
    char* d = static_cast<char*>(dst);
    while (n > 0) {
      if (pos_ == buf_.size()) {
        if (end_) return DataLoss(name_ + ": checkpoint truncated: the data ends at offset " + std::to_string(offset_));
        RETURN_IF_ERROR(Load());
        continue;
      }
      const size_t take = std::min(n, buf_.size() - pos_);
      if (d) {
        std::memcpy(d, buf_.data() + pos_, take);
        d += take;
      }
      pos_ += take;
      n -= take;
    }
    return Status::Ok();
  }
  template <typename T>
  Status Get(T& v) {
    return Read(&v, sizeof v);
  }

  // True once the payload is exhausted and the end record checked.
  StatusOr<bool> AtEnd() {
    while (pos_ == buf_.size() && !end_) RETURN_IF_ERROR(Load());
    return pos_ == buf_.size() && end_;
  }

 private:
  Status Truncated() const { return DataLoss(name_ + ": checkpoint truncated at offset " + std::to_string(offset_)); }

  // Exactly n file bytes, counted in the offset and the Adler-32.
  Status Exact(void* p, size_t n) {
    char* c = static_cast<char*>(p);
    size_t got = 0;
    while (got < n) {
      ASSIGN_OR_RETURN(size_t r, src_.Read(c + got, n - got));
      if (r == 0) return Truncated();
      got += r;
    }
    adler_ = static_cast<uint32_t>(::adler32(adler_, reinterpret_cast<const Bytef*>(c), static_cast<uInt>(n)));
    offset_ += n;
    return Status::Ok();
  }

  Status Load() {
    const uint64_t at = offset_;
    uint32_t n = 0;
    RETURN_IF_ERROR(Exact(&n, 4));
    if (n == 0) {
      char rec[16];
      RETURN_IF_ERROR(Exact(rec, sizeof rec));
      uint32_t crc = 0;
      std::memcpy(&crc, rec + 12, 4);
      uint64_t payload = 0;
      std::memcpy(&payload, rec, 8);
      std::memcpy(&end_entries_, rec + 8, 4);
      if (crc != Crc(rec, 12)) return DataLoss(name_ + ": damaged end record at offset " + std::to_string(at));
      if (payload != payload_) {
        return DataLoss(name_ + ": end record at offset " + std::to_string(at) + " says " + std::to_string(payload) +
                        " bytes of data, the file has " + std::to_string(payload_));
      }
      char extra;
      ASSIGN_OR_RETURN(size_t more, src_.Read(&extra, 1));
      if (more != 0)
        return DataLoss(name_ + ": unexpected bytes after the end record at offset " + std::to_string(offset_));
      buf_.clear();
      pos_ = 0;
      end_ = true;
      return Status::Ok();
    }
    // A damaged length must not make the reader allocate or wait for more
    // than the file holds.
    if (n > kMaxChunk || n > remaining()) {
      return DataLoss(name_ + ": bad chunk length " + std::to_string(n) + " at offset " + std::to_string(at));
    }
    buf_.resize(n);
    RETURN_IF_ERROR(Exact(buf_.data(), n));
    uint32_t crc = 0;
    RETURN_IF_ERROR(Exact(&crc, 4));
    if (crc != Crc(buf_.data(), n)) {
      return DataLoss(name_ + ": checksum mismatch in the chunk at offset " + std::to_string(at) + " (damaged file)");
    }
    payload_ += n;
    pos_ = 0;
    return Status::Ok();
  }

  ByteSource& src_;
  std::string name_;
  uint64_t size_;
  uint64_t offset_ = 0;
  uint32_t adler_ = 1;
  std::vector<char> buf_;
  size_t pos_ = 0;
  uint64_t payload_ = 0;
  bool end_ = false;
  uint32_t end_entries_ = 0;
};

enum class Mode { kLoad, kSkip, kInto };

// Decodes every entry. kLoad allocates each tensor (after checking the file
// can hold it) into `out`; kSkip only walks the structure into `check`;
// kInto reads into what `sink` gives.
Status DecodeAll(ChunkReader& r, const std::string& name, Mode mode, std::vector<Entry>* out, FileCheck* check,
                 const Sink* sink) {
  RETURN_IF_ERROR(r.Start());
  uint32_t entries = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool end, r.AtEnd());
    if (end) break;
    Entry e;
    uint32_t len = 0;
    RETURN_IF_ERROR(r.Get(len));
    if (len > kMaxName || len > r.available()) {
      return DataLoss(name + ": bad name length " + std::to_string(len) + " at offset " + std::to_string(r.offset()));
    }
    e.name.resize(len);
    RETURN_IF_ERROR(r.Read(e.name.data(), len));
    RETURN_IF_ERROR(r.Get(e.iterations));
    uint32_t count = 0;
    RETURN_IF_ERROR(r.Get(count));
    if (count > kMaxTensorsPerEntry) {
      return DataLoss(name + ": \"" + e.name + "\" claims " + std::to_string(count) + " tensors");
    }
    FileCheck::Item item{e.name, {}};
    for (uint32_t k = 0; k < count; ++k) {
      uint8_t dt = 0;
      uint32_t rank = 0;
      RETURN_IF_ERROR(r.Get(dt));
      RETURN_IF_ERROR(r.Get(rank));
      if (dt != static_cast<uint8_t>(DType::kFloat32) && dt != static_cast<uint8_t>(DType::kInt64)) {
        return DataLoss(name + ": bad dtype " + std::to_string(dt) + " in \"" + e.name + "\"");
      }
      if (rank > kMaxRank) return DataLoss(name + ": bad rank " + std::to_string(rank) + " in \"" + e.name + "\"");
      Shape shape(rank);
      for (auto& d : shape) RETURN_IF_ERROR(r.Get(d));
      const DType dtype = static_cast<DType>(dt);
      const int64_t elements = NumElements(shape);
      // Checked before anything is allocated: the file must hold the bytes.
      if (elements < 0 || static_cast<uint64_t>(elements) > r.available() / DTypeSize(dtype)) {
        return DataLoss(name + ": tensor " + ShapeString(shape) + " of \"" + e.name +
                        "\" is larger than the rest of the file");
      }
      const size_t bytes = static_cast<size_t>(elements) * DTypeSize(dtype);
      if (mode == Mode::kLoad) {
        auto t = Tensor::CreateUninitialized(dtype, shape);
        if (!t.ok()) return DataLoss(name + ": bad tensor shape " + ShapeString(shape) + " in \"" + e.name + "\"");
        RETURN_IF_ERROR(r.Read(t->raw(), bytes));
        e.tensors.push_back(std::move(t).value());
      } else if (mode == Mode::kInto) {
        ASSIGN_OR_RETURN(Tensor * dst, (*sink)(e.name, e.iterations, k, dtype, shape));
        if (!dst || dst->dtype() != dtype || dst->shape() != shape) {
          return Internal(name + ": destination of \"" + e.name + "\" does not match " + ShapeString(shape));
        }
        RETURN_IF_ERROR(r.Read(dst->raw(), bytes));
      } else {
        RETURN_IF_ERROR(r.Read(nullptr, bytes));
        item.tensors.emplace_back(dtype, shape);
      }
    }
    ++entries;
    if (out) out->push_back(std::move(e));
    if (check) check->entries.push_back(std::move(item));
  }
  if (r.end_entries() != entries) {
    return DataLoss(name + ": the end record counts " + std::to_string(r.end_entries()) + " entries, the file has " +
                    std::to_string(entries));
  }
  return Status::Ok();
}

// Opens `path` for reading; NOT_FOUND when it is not there.
StatusOr<std::pair<int, uint64_t>> Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT ? NotFound(path + ": cannot open file")
                           : DataLoss(path + ": cannot open: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return DataLoss(path + ": cannot stat: " + std::strerror(errno));
  }
  return std::make_pair(fd, static_cast<uint64_t>(st.st_size));
}

template <typename Fn>
auto WithFile(const std::string& path, Fn fn) -> decltype(fn(std::declval<ChunkReader&>())) {
  ASSIGN_OR_RETURN(auto opened, Open(path));
  FileSource src(opened.first, path);
  ChunkReader r(src, path, opened.second);
  auto result = fn(r);
  ::close(opened.first);
  return result;
}

}  // namespace

// ---- Writer ----

struct Writer::Impl {
  std::string path, tmp;
  int fd = -1;
  std::unique_ptr<FileSink> sink;
  std::unique_ptr<ChunkWriter> chunks;
  bool committed = false;
};

Writer::Writer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Writer::~Writer() {
  if (impl_ && !impl_->committed && impl_->fd >= 0) {
    ::close(impl_->fd);
    ::unlink(impl_->tmp.c_str());
  }
}

StatusOr<std::unique_ptr<Writer>> Writer::Create(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  // The writer's pid in the name: a crashed attempt is recognisable, and
  // tests can tell which task was writing.
  impl->tmp = path + ".tmp." + std::to_string(::getpid());
  impl->fd = ::open(impl->tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (impl->fd < 0) return Unavailable(path + ": cannot create: " + std::strerror(errno));
  impl->sink = std::make_unique<FileSink>(impl->fd, path);
  impl->chunks = std::make_unique<ChunkWriter>(*impl->sink);
  std::unique_ptr<Writer> w(new Writer(std::move(impl)));
  RETURN_IF_ERROR(w->impl_->chunks->Start());
  return w;
}

Status Writer::Add(const Entry& e) { return impl_->chunks->AddEntry(e); }

StatusOr<uint64_t> Writer::Commit() {
  Impl& m = *impl_;
  RETURN_IF_ERROR(m.chunks->Finish());
  if (::fsync(m.fd) != 0) return Unavailable(m.path + ": fsync failed: " + std::strerror(errno));
  const int fd = m.fd;
  m.fd = -1;
  if (::close(fd) != 0) {
    ::unlink(m.tmp.c_str());
    return Unavailable(m.path + ": close failed: " + std::strerror(errno));
  }
  if (::rename(m.tmp.c_str(), m.path.c_str()) != 0) {
    Status s = Unavailable(m.path + ": rename failed: " + std::strerror(errno));
    ::unlink(m.tmp.c_str());
    return s;
  }
  m.committed = true;
  // Make the rename itself durable.
  const std::string dir = std::filesystem::path(m.path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return m.sink->bytes();
}

Status Write(const std::string& path, const std::vector<Entry>& entries) {
  ASSIGN_OR_RETURN(std::unique_ptr<Writer> w, Writer::Create(path));
  for (const Entry& e : entries) RETURN_IF_ERROR(w->Add(e));
  return w->Commit().status();
}

StatusOr<std::vector<Entry>> Read(const std::string& path) {
  return WithFile(path, [&](ChunkReader& r) -> StatusOr<std::vector<Entry>> {
    std::vector<Entry> out;
    RETURN_IF_ERROR(DecodeAll(r, path, Mode::kLoad, &out, nullptr, nullptr));
    return out;
  });
}

StatusOr<FileCheck> Check(const std::string& path) {
  return WithFile(path, [&](ChunkReader& r) -> StatusOr<FileCheck> {
    FileCheck c;
    RETURN_IF_ERROR(DecodeAll(r, path, Mode::kSkip, nullptr, &c, nullptr));
    c.bytes = r.offset();
    c.adler32 = r.adler32();
    return c;
  });
}

Status ReadInto(const std::string& path, const Sink& sink) {
  return WithFile(path, [&](ChunkReader& r) { return DecodeAll(r, path, Mode::kInto, nullptr, nullptr, &sink); });
}

std::string Encode(const std::vector<Entry>& entries) {
  std::string out;
  StringSink sink(out);
  ChunkWriter w(sink);
  (void)w.Start();
  for (const Entry& e : entries) (void)w.AddEntry(e);
  (void)w.Finish();
  return out;
}

StatusOr<std::vector<Entry>> Decode(const std::string& bytes, const std::string& source) {
  StringSource src(bytes);
  ChunkReader r(src, source, bytes.size());
  std::vector<Entry> out;
  RETURN_IF_ERROR(DecodeAll(r, source, Mode::kLoad, &out, nullptr, nullptr));
  return out;
}

}  // namespace tfjob::checkpoint
