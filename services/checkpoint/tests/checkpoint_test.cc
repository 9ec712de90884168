#include "services/checkpoint/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/files.h"

namespace tfjob::checkpoint {
namespace {

std::vector<Entry> Sample() {
  Entry a{"dense/kernel",
          7,
          {*Tensor::FromVector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}),
           *Tensor::FromVector({2, 3}, std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f})}};
  Entry b{"step", 0, {*Tensor::FromVector({}, std::vector<int64_t>{42})}};
  return {a, b};
}

std::string Path(const std::string& name) {
  // One directory per test process, removed when it exits.
  static const struct Dir {
    std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / ("ckpt-" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  return (dir.path / name).string();
}

TEST(CheckpointTest, RoundTrip) {
  const std::string p = Path("rt.ckpt");
  ASSERT_TRUE(Write(p, Sample()).ok());
  auto got = Read(p);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = Sample();
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*got)[i].name, want[i].name);
    EXPECT_EQ((*got)[i].iterations, want[i].iterations);
    ASSERT_EQ((*got)[i].tensors.size(), want[i].tensors.size());
    for (size_t k = 0; k < want[i].tensors.size(); ++k) EXPECT_TRUE(Equal((*got)[i].tensors[k], want[i].tensors[k]));
  }
}

TEST(CheckpointTest, EveryTruncationIsDetected) {
  const std::string bytes = Encode(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = Decode(bytes.substr(0, n), "x.ckpt");
    ASSERT_FALSE(r.ok()) << "length " << n;
    EXPECT_EQ(r.status().code(), Code::kDataLoss);
  }
}

TEST(CheckpointTest, EveryBitFlipIsDetected) {
  const std::string bytes = Encode(Sample());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string b = bytes;
      b[i] = static_cast<char>(b[i] ^ (1 << bit));
      auto r = Decode(b, "x.ckpt");
      ASSERT_FALSE(r.ok()) << "byte " << i << " bit " << bit;
      EXPECT_EQ(r.status().code(), Code::kDataLoss);
    }
  }
}

TEST(CheckpointTest, DamagedFileOnDiskIsNeverLoaded) {
  const std::string p = Path("damaged.ckpt");
  ASSERT_TRUE(Write(p, Sample()).ok());
  std::string bytes = *ReadFile(p);
  bytes[bytes.size() / 2] ^= 0x10;
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  auto r = Read(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
  EXPECT_NE(r.status().message().find(p), std::string::npos);
  EXPECT_EQ(Read(Path("missing.ckpt")).status().code(), Code::kNotFound);
}

// A variable larger than a chunk (5 MiB over 1 MiB chunks) streams through
// bounded chunks; a flipped byte in any chunk is found and named by offset,
// by the one-pass check and by every reader, and nothing is loaded.
TEST(CheckpointTest, LargeVariablesSpanChunksAndADamagedChunkIsFoundWhereverItIs) {
  const int64_t rows = 5 * 1024, cols = 256;  // 5 MiB of float32
  Tensor big = *Tensor::Create(DType::kFloat32, {rows, cols});
  for (int64_t i = 0; i < big.size(); ++i) big.data<float>()[i] = static_cast<float>(i % 9973) * 0.5f;
  const std::vector<Entry> entries{{"embedding", 3, {big, big}},
                                   {"bias", 1, {*Tensor::FromVector({2}, std::vector<float>{1, 2})}}};
  const std::string p = Path("big.ckpt");
  ASSERT_TRUE(Write(p, entries).ok());
  auto check = Check(p);
  ASSERT_TRUE(check.ok()) << check.status();
  ASSERT_EQ(check->entries.size(), 2u);
  EXPECT_EQ(check->entries[0].tensors[1].second, Shape({rows, cols}));
  EXPECT_EQ(check->bytes, std::filesystem::file_size(p));
  auto got = Read(p);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(Equal((*got)[0].tensors[1], big));

  // Read into tensors the caller holds (a PS restoring its shards in place).
  Tensor into = *Tensor::Create(DType::kFloat32, {rows, cols});
  Tensor scratch = *Tensor::Create(DType::kFloat32, {rows, cols}), small = *Tensor::Create(DType::kFloat32, {2});
  Status s = ReadInto(p, [&](const std::string& name, int64_t, size_t k, DType, const Shape&) -> StatusOr<Tensor*> {
    if (name == "bias") return &small;
    return k == 0 ? &into : &scratch;
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(Equal(into, big));

  const std::string good = *ReadFile(p);
  const size_t chunk_frame = 4 + kChunkBytes + 4;
  const size_t chunks = (good.size() - 8) / chunk_frame;
  ASSERT_GE(chunks, 10u);
  for (size_t c = 0; c <= chunks; ++c) {
    // A payload byte of chunk c (or of the short last one and the end record).
    const size_t at = std::min(good.size() - 3, 8 + c * chunk_frame + 4 + 12345 % (kChunkBytes - 8));
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    const std::string q = Path("big-damaged.ckpt");
    {
      std::ofstream out(q, std::ios::binary | std::ios::trunc);
      out << bad;
    }
    auto r = Check(q);
    ASSERT_FALSE(r.ok()) << "chunk " << c << " byte " << at;
    EXPECT_EQ(r.status().code(), Code::kDataLoss);
    EXPECT_EQ(Read(q).status().code(), Code::kDataLoss) << "chunk " << c;
  }
}

// A length field that claims more than the file holds is refused before
// anything that size is allocated or waited for.
TEST(CheckpointTest, ClaimedSizesBeyondTheFileAreRefused) {
  std::string bytes = Encode(Sample());
  const uint32_t huge = 0xfffffff0u;
  std::memcpy(bytes.data() + 8, &huge, 4);  // the first chunk's length
  auto r = Decode(bytes, "x.ckpt");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad chunk length"), std::string::npos) << r.status();
}

TEST(CheckpointTest, WriterTakesEntriesOneAtATimeAndLeavesNothingWithoutCommit) {
  const std::string p = Path("inc.ckpt");
  {
    auto w = Writer::Create(p);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Add(Sample()[0]).ok());
    // Destroyed without Commit: no file, no temporary left behind.
  }
  EXPECT_FALSE(std::filesystem::exists(p));
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp." + std::to_string(::getpid())));
  auto w = Writer::Create(p);
  ASSERT_TRUE(w.ok());
  for (const Entry& e : Sample()) ASSERT_TRUE((*w)->Add(e).ok());
  auto size = (*w)->Commit();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, std::filesystem::file_size(p));
  EXPECT_TRUE(Read(p).ok());
}

}  // namespace
}  // namespace tfjob::checkpoint
