#include "services/data/mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tfjob::data {
namespace {

constexpr int kMaxRank = 8;
// Far above any real IDX payload (MNIST's training images are 47 MB); a
// larger header is corrupt, and trusting it would mean a huge allocation.
constexpr uint64_t kMaxPayloadBytes = uint64_t{4} << 30;
// The payload buffer grows by this much per read, so a lying header on a
// short file costs at most one step of memory before truncation is noticed.
constexpr size_t kReadStep = size_t{64} << 20;

std::string Hex(uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*X", digits, v);
  return buf;
}
std::string Hex32(uint32_t v) { return Hex(v, 8); }

class GzFile {
 public:
  explicit GzFile(gzFile f) : f_(f) {}
  ~GzFile() {
    if (f_ != nullptr) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  gzFile get() const { return f_; }

 private:
  gzFile f_;
};

Status OpenError(const std::string& path, int err) {
  std::string m = path + ": cannot open file";
  if (err != 0) m += std::string(": ") + std::strerror(err);
  if (err == EACCES || err == EPERM) return Status(Code::kPermissionDenied, m);
  // ENOENT, ENOTDIR, and zlib failing without errno (no memory) all leave
  // the caller without a readable file at that path.
  return NotFound(m);
}

// Reads up to `n` bytes at stream offset `*offset`, advancing it. Returns the
// number read; fewer than `n` means end of input (clean or truncated gzip).
StatusOr<size_t> ReadSome(gzFile f, const std::string& path, uint8_t* dst, size_t n, uint64_t* offset) {
  size_t done = 0;
  while (done < n) {
    // gzread takes an unsigned int count.
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, size_t{1} << 30));
    errno = 0;
    int r = gzread(f, dst + done, chunk);
    if (r < 0) {
      int zerr = Z_OK;
      const char* msg = gzerror(f, &zerr);
      if (zerr == Z_ERRNO) {
        return DataLoss(path + ": read error at offset " + std::to_string(*offset) + ": " + std::strerror(errno));
      }
      return DataLoss(path + ": corrupt gzip stream at offset " + std::to_string(*offset) + ": " + msg);
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
    *offset += static_cast<uint64_t>(r);
  }
  return done;
}

// Reads exactly `n` bytes; `expected_total` is the stream length the header
// implies so far, reported when the stream ends early.
Status ReadExact(gzFile f, const std::string& path, uint8_t* dst, size_t n, uint64_t* offset, uint64_t expected_total) {
  ASSIGN_OR_RETURN(size_t got, ReadSome(f, path, dst, n, offset));
  if (got < n) {
    int zerr = Z_OK;
    const char* msg = gzerror(f, &zerr);
    // Z_DATA_ERROR on a short read is damage inside the stream rather than a
    // missing tail; zlib reports a cut-off gzip stream as Z_BUF_ERROR.
    if (zerr == Z_DATA_ERROR) {
      return DataLoss(path + ": corrupt gzip stream at offset " + std::to_string(*offset) + ": " + msg);
    }
    return DataLoss(path + ": truncated at offset " + std::to_string(*offset) + ": expected " +
                    std::to_string(expected_total) + " bytes");
  }
  return Status::Ok();
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

StatusOr<IdxArray> ReadIdx(const std::string& path, uint32_t expected_magic) {
  errno = 0;
  GzFile file(gzopen(path.c_str(), "rb"));
  if (file.get() == nullptr) return OpenError(path, errno);
  gzFile f = file.get();
  gzbuffer(f, 1 << 17);

  uint64_t offset = 0;
  uint8_t head[4];
  RETURN_IF_ERROR(ReadExact(f, path, head, 4, &offset, 4));
  uint32_t magic = BigEndian32(head);
  if (expected_magic != 0 && magic != expected_magic) {
    return InvalidArgument(path + ": bad magic " + Hex32(magic) + " at offset 0, expected " + Hex32(expected_magic));
  }
  if (head[0] != 0 || head[1] != 0) {
    return InvalidArgument(path + ": bad magic " + Hex32(magic) + " at offset 0, expected 0x000008NN (IDX)");
  }
  if (head[2] != 0x08) {
    return InvalidArgument(path + ": IDX type code " + Hex(head[2], 2) +
                           " at offset 2 is not 0x08 (unsigned byte); only byte arrays are supported");
  }
  int rank = head[3];
  if (rank < 1 || rank > kMaxRank) {
    return InvalidArgument(path + ": IDX rank " + std::to_string(rank) + " at offset 3 is outside [1, " +
                           std::to_string(kMaxRank) + "]");
  }

  uint64_t header_bytes = 4 + 4 * static_cast<uint64_t>(rank);
  uint8_t dim_bytes[4 * kMaxRank];
  RETURN_IF_ERROR(ReadExact(f, path, dim_bytes, 4 * static_cast<size_t>(rank), &offset, header_bytes));
  IdxArray out;
  uint64_t payload = 1;
  for (int i = 0; i < rank; ++i) {
    uint32_t d = BigEndian32(dim_bytes + 4 * i);
    out.dims.push_back(d);
    // Checked per step: eight 32-bit dims can overflow 64 bits.
    if (d != 0 && payload > kMaxPayloadBytes / d)
      payload = kMaxPayloadBytes + 1;
    else
      payload *= d;
  }
  if (payload > kMaxPayloadBytes) {
    return InvalidArgument(path + ": dims " + ShapeString(out.dims) +
                           " at offset 4 describe more than the 4 GiB limit for an IDX payload");
  }

  uint64_t total = header_bytes + payload;
  while (out.data.size() < payload) {
    size_t have = out.data.size();
    size_t step = static_cast<size_t>(std::min<uint64_t>(payload - have, kReadStep));
    out.data.resize(have + step);
    RETURN_IF_ERROR(ReadExact(f, path, out.data.data() + have, step, &offset, total));
  }

  // Reading past the payload also makes zlib verify the gzip trailer (CRC and
  // length), so damage near the end of the stream is caught here.
  uint8_t extra;
  ASSIGN_OR_RETURN(size_t more, ReadSome(f, path, &extra, 1, &offset));
  if (more != 0) {
    return InvalidArgument(path + ": unexpected data after offset " + std::to_string(total) +
                           ", where the header says the array ends");
  }
  int zerr = Z_OK;
  const char* msg = gzerror(f, &zerr);
  if (zerr != Z_OK) {
    return DataLoss(path + ": corrupt gzip stream at offset " + std::to_string(offset) + ": " + msg);
  }
  return out;
}

StatusOr<MnistSplit> LoadMnist(const std::string& images_path, const std::string& labels_path, int64_t begin,
                               int64_t end) {
  ASSIGN_OR_RETURN(IdxArray images, ReadIdx(images_path, kMnistImagesMagic));
  if (images.dims[1] != 28 || images.dims[2] != 28) {
    return InvalidArgument(images_path + ": images are " + ShapeString(images.dims) + ", expected [n, 28, 28]");
  }
  ASSIGN_OR_RETURN(IdxArray labels, ReadIdx(labels_path, kMnistLabelsMagic));
  int64_t n = images.dims[0];
  if (labels.dims[0] != n) {
    return InvalidArgument(images_path + " has " + std::to_string(n) + " images but " + labels_path + " has " +
                           std::to_string(labels.dims[0]) + " labels");
  }
  // Checked over the whole file, not just the requested rows: a bad label
  // anywhere means the file is not the MNIST file it claims to be.
  constexpr int64_t kLabelsHeader = 8;
  for (int64_t i = 0; i < n; ++i) {
    if (labels.data[i] > 9) {
      return InvalidArgument(labels_path + ": label " + std::to_string(labels.data[i]) + " at offset " +
                             std::to_string(kLabelsHeader + i) + " is outside 0..9");
    }
  }
  if (end == -1) end = n;
  if (begin < 0 || end < begin || end > n) {
    return OutOfRange(images_path + ": rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                      ") are outside the file's " + std::to_string(n) + " rows");
  }

  int64_t rows = end - begin;
  constexpr int64_t kPixels = 28 * 28;
  ASSIGN_OR_RETURN(Tensor image_t, Tensor::Create(DType::kFloat32, {rows, 28, 28}));
  ASSIGN_OR_RETURN(Tensor label_t, Tensor::Create(DType::kInt64, {rows}));
  const uint8_t* px = images.data.data() + begin * kPixels;
  float* dst = image_t.data<float>();
  for (int64_t i = 0; i < rows * kPixels; ++i) dst[i] = static_cast<float>(px[i]) / 255.0f;
  int64_t* ldst = label_t.data<int64_t>();
  for (int64_t i = 0; i < rows; ++i) ldst[i] = labels.data[begin + i];
  return MnistSplit{std::move(image_t), std::move(label_t)};
}

}  // namespace tfjob::data
