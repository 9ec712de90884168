#include "services/data/tfrecord.h"

#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace tfjob::data {
namespace {

// Slicing-by-8 tables for the reflected Castagnoli polynomial.
struct Crc32cTables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Crc32cTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (c & 1 ? 0x82f63b78u : 0);
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
};
const Crc32cTables& Tables() {
  static const Crc32cTables tables;
  return tables;
}

constexpr uint32_t kMaskDelta = 0xa282ead8u;

uint64_t Le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint32_t Le32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

const char* Name(Compression c) { return c == Compression::kGzip ? "GZIP" : "ZLIB"; }

}  // namespace

StatusOr<Compression> ParseCompression(std::string_view name) {
  if (name.empty() || name == "NONE") return Compression::kNone;
  if (name == "GZIP") return Compression::kGzip;
  if (name == "ZLIB") return Compression::kZlib;
  return InvalidArgument("unknown compression \"" + std::string(name) + "\" (known: \"\", GZIP, ZLIB)");
}

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  const auto& t = Tables().t;
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  while (n >= 8) {
    const uint32_t lo = crc ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][p[4]] ^
          t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

uint32_t MaskedCrc32c(const void* data, size_t n) {
  const uint32_t crc = Crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

struct TfRecordReader::Inflater {
  z_stream z{};
  bool ended = false;  // the compressed stream is complete
  ~Inflater() { inflateEnd(&z); }
};

TfRecordReader::TfRecordReader(std::string path, Compression compression, std::FILE* f)
    : path_(std::move(path)), compression_(compression), f_(f) {}

TfRecordReader::~TfRecordReader() {
  if (f_) std::fclose(f_);
}

StatusOr<std::unique_ptr<TfRecordReader>> TfRecordReader::Open(const std::string& path, Compression compression) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    const int err = errno;
    const std::string why = path + ": cannot open file: " + std::strerror(err);
    return err == EACCES ? Status(Code::kPermissionDenied, why) : NotFound(why);
  }
  std::unique_ptr<TfRecordReader> r(new TfRecordReader(path, compression, f));
  if (compression != Compression::kNone) {
    r->z_ = std::make_unique<Inflater>();
    // 16 + MAX_WBITS: a gzip header and trailer; MAX_WBITS: a zlib one.
    const int bits = compression == Compression::kGzip ? 16 + MAX_WBITS : MAX_WBITS;
    if (inflateInit2(&r->z_->z, bits) != Z_OK) return Internal(path + ": cannot start zlib");
  }
  return r;
}

Status TfRecordReader::Fill() {
  in_.resize(1 << 16);
  const size_t got = std::fread(in_.data(), 1, in_.size(), f_);
  if (std::ferror(f_)) return DataLoss(path_ + ": read error at offset " + std::to_string(offset_));
  in_.resize(got);
  z_->z.next_in = reinterpret_cast<Bytef*>(in_.data());
  z_->z.avail_in = static_cast<uInt>(got);
  return Status::Ok();
}

StatusOr<size_t> TfRecordReader::Read(char* dst, size_t n) {
  if (!z_) {
    const size_t got = std::fread(dst, 1, n, f_);
    if (std::ferror(f_)) return DataLoss(path_ + ": read error at offset " + std::to_string(offset_));
    return got;
  }
  size_t done = 0;
  while (done < n && !z_->ended) {
    if (z_->z.avail_in == 0) {
      RETURN_IF_ERROR(Fill());
      if (z_->z.avail_in == 0) {
        return DataLoss(path_ + ": corrupt " + Name(compression_) + " stream at offset " + std::to_string(offset_) +
                        ": the compressed data ends early");
      }
    }
    z_->z.next_out = reinterpret_cast<Bytef*>(dst + done);
    z_->z.avail_out = static_cast<uInt>(std::min<size_t>(n - done, 1u << 30));
    const size_t before = z_->z.avail_out;
    const int rc = inflate(&z_->z, Z_NO_FLUSH);
    done += before - z_->z.avail_out;
    if (rc == Z_STREAM_END) {
      z_->ended = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return DataLoss(path_ + ": corrupt " + Name(compression_) + " stream at offset " + std::to_string(offset_) +
                      ": " + (z_->z.msg ? z_->z.msg : "inflate failed"));
    }
  }
  return done;
}

StatusOr<std::optional<std::string>> TfRecordReader::Next() {
  const std::string at = path_ + ": ";
  const std::string where = " at offset " + std::to_string(offset_);
  char header[12];
  ASSIGN_OR_RETURN(size_t got, Read(header, sizeof header));
  if (got == 0) return std::optional<std::string>();
  if (got < sizeof header) {
    return DataLoss(at + "truncated record" + where + ": " + std::to_string(got) + " of the 12 header bytes");
  }
  if (MaskedCrc32c(header, 8) != Le32(header + 8)) {
    return DataLoss(at + "corrupted record" + where + ": length CRC mismatch");
  }
  const uint64_t length = Le64(header);
  // Read in bounded pieces: a length the file cannot hold is found to be
  // truncated without first allocating it.
  std::string data;
  while (data.size() < length) {
    const size_t piece = static_cast<size_t>(std::min<uint64_t>(length - data.size(), 1 << 20));
    const size_t old = data.size();
    data.resize(old + piece);
    ASSIGN_OR_RETURN(size_t n, Read(data.data() + old, piece));
    if (n < piece) {
      return DataLoss(at + "truncated record" + where + ": " + std::to_string(old + n) + " of " +
                      std::to_string(length) + " data bytes");
    }
  }
  char footer[4];
  ASSIGN_OR_RETURN(got, Read(footer, sizeof footer));
  if (got < sizeof footer) return DataLoss(at + "truncated record" + where + ": the data CRC is missing");
  if (MaskedCrc32c(data.data(), data.size()) != Le32(footer)) {
    return DataLoss(at + "corrupted record" + where + ": data CRC mismatch");
  }
  offset_ += sizeof header + length + sizeof footer;
  return std::optional<std::string>(std::move(data));
}

std::string FrameRecord(std::string_view data) {
  std::string out;
  std::string len;
  PutLe(len, data.size(), 8);
  out += len;
  PutLe(out, MaskedCrc32c(len.data(), len.size()), 4);
  out.append(data);
  PutLe(out, MaskedCrc32c(data.data(), data.size()), 4);
  return out;
}

Status WriteTfRecords(const std::string& path, const std::vector<std::string>& records, Compression compression) {
  std::string raw;
  for (const auto& r : records) raw += FrameRecord(r);
  std::string bytes = raw;
  if (compression != Compression::kNone) {
    z_stream z{};
    const int bits = compression == Compression::kGzip ? 16 + MAX_WBITS : MAX_WBITS;
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      return Internal("cannot start zlib");
    }
    bytes.resize(deflateBound(&z, static_cast<uLong>(raw.size())) + 64);
    z.next_in = reinterpret_cast<Bytef*>(raw.data());
    z.avail_in = static_cast<uInt>(raw.size());
    z.next_out = reinterpret_cast<Bytef*>(bytes.data());
    z.avail_out = static_cast<uInt>(bytes.size());
    const int rc = deflate(&z, Z_FINISH);
    bytes.resize(z.total_out);
    deflateEnd(&z);
    if (rc != Z_STREAM_END) return Internal("zlib could not compress " + path);
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return NotFound(path + ": cannot create file: " + std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) return Internal(path + ": write failed");
  return Status::Ok();
}

}  // namespace tfjob::data
