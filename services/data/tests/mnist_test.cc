#include "services/data/mnist.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>
#include <cstdlib>
#include <random>
#include <regex>

#include "services/data/dataset.h"
#include "tests/support/subprocess.h"

namespace tfjob::data {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string MnistDir() {
  const char* root = std::getenv("TFJOB_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/../shared/data/mnist/";
}
std::string TestImages() { return MnistDir() + "t10k-images-idx3-ubyte.gz"; }
std::string TestLabels() { return MnistDir() + "t10k-labels-idx1-ubyte.gz"; }

using ::tfjob::testing::RemoveAtExit;  // fixture files, removed when the test process exits

// A fixture path unique to the running test, so parallel ctest runs of
// different tests never share files; removed when the test process exits.
std::string TempPath(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string path = ::testing::TempDir() + "tfjob_data_" + info->test_suite_name() + "_" + info->name() + "_" + name;
  RemoveAtExit(path);
  return path;
}

std::vector<uint8_t> IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out;
  auto put32 = [&out](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
  };
  put32(magic);
  for (uint32_t d : dims) put32(d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void WritePlain(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  ASSERT_EQ(std::fclose(f), 0);
}

std::vector<uint8_t> Gzip(const std::vector<uint8_t>& bytes) {
  const std::string tmp = TempPath("gzip_scratch.gz");
  gzFile g = gzopen(tmp.c_str(), "wb");
  EXPECT_NE(g, nullptr);
  if (g == nullptr) return {};
  EXPECT_EQ(gzwrite(g, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  EXPECT_EQ(gzclose(g), Z_OK);
  std::vector<uint8_t> out;
  std::FILE* f = std::fopen(tmp.c_str(), "rb");
  EXPECT_NE(f, nullptr);
  if (f == nullptr) return {};
  int c;
  while ((c = std::fgetc(f)) != EOF) out.push_back(static_cast<uint8_t>(c));
  std::fclose(f);
  std::remove(tmp.c_str());
  return out;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed, int max_value = 255) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() % (max_value + 1));
  return v;
}

// Writes a small MNIST-shaped pair (n images, given labels) and returns paths.
std::pair<std::string, std::string> WriteMnistPair(const std::vector<uint8_t>& labels, uint32_t image_count) {
  std::string images_path = TempPath("images.idx"), labels_path = TempPath("labels.idx.gz");
  WritePlain(images_path, IdxBytes(0x803, {image_count, 28, 28}, RandomBytes(image_count * 784, 1)));
  WritePlain(labels_path, Gzip(IdxBytes(0x801, {static_cast<uint32_t>(labels.size())}, labels)));
  return {images_path, labels_path};
}

// ------------------------------------------------------------------ real data

TEST(ReadIdxTest, ReadsRealMnistFiles) {
  auto images = ReadIdx(TestImages(), kMnistImagesMagic);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->dims, (std::vector<int64_t>{10000, 28, 28}));
  EXPECT_EQ(images->data.size(), 7840000u);
  auto labels = ReadIdx(TestLabels());
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(labels->dims, (std::vector<int64_t>{10000}));
  EXPECT_EQ(labels->data[0], 7);
  EXPECT_EQ(labels->data[1], 2);
}

TEST(LoadMnistTest, LoadsTheTestSet) {
  auto split = LoadMnist(TestImages(), TestLabels());
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->images.dtype(), DType::kFloat32);
  EXPECT_EQ(split->images.shape(), Shape({10000, 28, 28}));
  EXPECT_EQ(split->labels.dtype(), DType::kInt64);
  EXPECT_EQ(split->labels.shape(), Shape({10000}));
  EXPECT_EQ(split->labels.data<int64_t>()[0], 7);
  EXPECT_EQ(split->labels.data<int64_t>()[1], 2);

  float lo = 1, hi = 0;
  double sum = 0;
  for (float p : split->images.flat<float>()) {
    lo = std::min(lo, p);
    hi = std::max(hi, p);
    sum += p;
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
  // MNIST's well-known mean intensity (0.1325 on the test set) checks scaling.
  EXPECT_NEAR(sum / static_cast<double>(split->images.size()), 0.1325, 0.001);

  std::vector<int> counts(10, 0);
  for (int64_t l : split->labels.flat<int64_t>()) counts[l]++;
  EXPECT_EQ(counts, (std::vector<int>{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}));
}

TEST(LoadMnistTest, LoadsARangeMatchingTheFullFile) {
  auto full = LoadMnist(TestImages(), TestLabels());
  auto tail = LoadMnist(TestImages(), TestLabels(), 8000, 10000);
  ASSERT_TRUE(full.ok() && tail.ok());
  EXPECT_EQ(tail->images.shape(), Shape({2000, 28, 28}));
  EXPECT_EQ(tail->labels.shape(), Shape({2000}));
  auto full_rows = full->images.Rows(8000, 10000);
  auto full_labels = full->labels.Rows(8000, 10000);
  ASSERT_TRUE(full_rows.ok() && full_labels.ok());
  EXPECT_TRUE(Equal(tail->images, *full_rows));
  EXPECT_TRUE(Equal(tail->labels, *full_labels));

  auto to_end = LoadMnist(TestImages(), TestLabels(), 9990);
  ASSERT_TRUE(to_end.ok());
  EXPECT_EQ(to_end->labels.shape(), Shape({10}));
  auto empty = LoadMnist(TestImages(), TestLabels(), 10000, 10000);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->images.shape(), Shape({0, 28, 28}));
}

TEST(LoadMnistTest, FeedsADatasetPipeline) {
  auto split = LoadMnist(TestImages(), TestLabels(), 0, 100);
  ASSERT_TRUE(split.ok());
  Dataset ds = Dataset::FromTensors({split->images, split->labels}).Batch(32);
  EXPECT_EQ(ds.Cardinality(), 4);
  auto it = ds.MakeIterator();
  ASSERT_TRUE(it.ok());
  auto first = (*it)->Next();
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((**first)[0].shape(), Shape({32, 28, 28}));
  EXPECT_EQ((**first)[1].data<int64_t>()[0], 7);
}

TEST(LoadMnistTest, RangeOutsideTheFileIsOutOfRange) {
  for (auto [b, e] : {std::pair<int64_t, int64_t>{9000, 10001}, {-1, 10}, {500, 400}, {0, -2}}) {
    auto r = LoadMnist(TestImages(), TestLabels(), b, e);
    ASSERT_FALSE(r.ok()) << b << ".." << e;
    EXPECT_EQ(r.status().code(), Code::kOutOfRange);
    EXPECT_THAT(r.status().message(), StartsWith(TestImages() + ": rows [" + std::to_string(b)));
  }
}

// ------------------------------------------------------------------ bad input

TEST(ReadIdxTest, MissingFileIsNotFound) {
  std::string path = TempPath("does_not_exist.gz");
  auto r = ReadIdx(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_THAT(r.status().message(), StartsWith(path + ": cannot open file"));
  auto m = LoadMnist(TestImages(), path);
  EXPECT_EQ(m.status().code(), Code::kNotFound);
  EXPECT_THAT(m.status().message(), StartsWith(path));
}

TEST(ReadIdxTest, WrongMagicNamesPathAndOffset) {
  auto r = ReadIdx(TestLabels(), kMnistImagesMagic);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), TestLabels() + ": bad magic 0x00000801 at offset 0, expected 0x00000803");
  // Swapped arguments to LoadMnist hit the same check.
  auto m = LoadMnist(TestLabels(), TestImages());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("bad magic 0x00000801 at offset 0"));

  std::string not_idx = TempPath("text.idx");
  WritePlain(not_idx, {'h', 'e', 'l', 'l', 'o', '\n'});
  auto t = ReadIdx(not_idx);
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(t.status().message(), StartsWith(not_idx + ": bad magic 0x68656C6C at offset 0"));
}

TEST(ReadIdxTest, RejectsNonByteTypesAndBadRanks) {
  std::string ints = TempPath("int.idx");
  WritePlain(ints, IdxBytes(0x00000C01, {2}, std::vector<uint8_t>(8, 0)));
  auto r = ReadIdx(ints);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), StartsWith(ints + ": IDX type code 0x0C at offset 2"));

  std::string rank0 = TempPath("rank0.idx");
  WritePlain(rank0, IdxBytes(0x00000800, {}, {1}));
  EXPECT_EQ(ReadIdx(rank0).status().code(), Code::kInvalidArgument);
  EXPECT_THAT(ReadIdx(rank0).status().message(), HasSubstr("rank 0 at offset 3"));
}

TEST(ReadIdxTest, RejectsAbsurdDims) {
  std::string path = TempPath("huge.idx");
  WritePlain(path, IdxBytes(0x00000803, {65535, 65535, 65535}, {1, 2, 3}));
  auto r = ReadIdx(path);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), StartsWith(path + ": dims [65535, 65535, 65535] at offset 4"));
}

TEST(ReadIdxTest, ReadsPlainFiles) {
  std::string path = TempPath("plain.idx");
  WritePlain(path, IdxBytes(0x00000802, {2, 3}, {1, 2, 3, 4, 5, 6}));
  auto r = ReadIdx(path, 0x00000802);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r->data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
}

TEST(ReadIdxTest, TruncatedPlainFileIsDataLoss) {
  std::string path = TempPath("short.idx");
  WritePlain(path, IdxBytes(0x00000801, {10}, {1, 2, 3, 4, 5, 6}));
  auto r = ReadIdx(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
  EXPECT_EQ(r.status().message(), path + ": truncated at offset 14: expected 18 bytes");

  std::string header = TempPath("header.idx");
  WritePlain(header, {0, 0});
  EXPECT_EQ(ReadIdx(header).status(), DataLoss(header + ": truncated at offset 2: expected 4 bytes"));
  std::string dims = TempPath("dims.idx");
  WritePlain(dims, {0, 0, 8, 3, 0, 0, 0, 1, 0});
  EXPECT_EQ(ReadIdx(dims).status(), DataLoss(dims + ": truncated at offset 9: expected 16 bytes"));
}

TEST(ReadIdxTest, TruncatedGzipIsDataLoss) {
  // Random pixels do not compress, so half the gzip file is about half the payload.
  std::vector<uint8_t> gz = Gzip(IdxBytes(0x803, {10, 28, 28}, RandomBytes(7840, 2)));
  ASSERT_GT(gz.size(), 7000u);
  gz.resize(gz.size() / 2);
  std::string path = TempPath("short.idx.gz");
  WritePlain(path, gz);
  auto r = ReadIdx(path, kMnistImagesMagic);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
  std::smatch m;
  const std::string msg = r.status().message();
  ASSERT_TRUE(std::regex_match(msg, m, std::regex("(.*): truncated at offset ([0-9]+): expected 7856 bytes"))) << msg;
  EXPECT_EQ(m[1].str(), path);
  int64_t offset = std::stoll(m[2].str());
  EXPECT_GT(offset, 16);
  EXPECT_LT(offset, 7856);
}

TEST(ReadIdxTest, CorruptGzipIsDataLoss) {
  std::vector<uint8_t> gz = Gzip(IdxBytes(0x803, {10, 28, 28}, RandomBytes(7840, 3)));
  ASSERT_GT(gz.size(), 7000u);
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 16; ++i) gz[i] ^= 0x5A;
  std::string path = TempPath("corrupt.idx.gz");
  WritePlain(path, gz);
  auto r = ReadIdx(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
  EXPECT_THAT(r.status().message(), StartsWith(path + ": corrupt gzip stream at offset "));

  // Compressible data: the damage hits Huffman codes instead of a stored block.
  std::vector<uint8_t> gz2 = Gzip(IdxBytes(0x803, {100, 28, 28}, RandomBytes(78400, 4, 3)));
  for (size_t i = gz2.size() / 3; i < gz2.size() / 3 + 16; ++i) gz2[i] ^= 0xFF;
  std::string path2 = TempPath("corrupt2.idx.gz");
  WritePlain(path2, gz2);
  auto r2 = ReadIdx(path2);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), Code::kDataLoss);
  EXPECT_THAT(r2.status().message(), StartsWith(path2 + ": corrupt gzip stream at offset "));
}

TEST(ReadIdxTest, TrailingBytesAreRejected) {
  std::string path = TempPath("long.idx");
  WritePlain(path, IdxBytes(0x801, {3}, {1, 2, 3, 4}));
  auto r = ReadIdx(path);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), StartsWith(path + ": unexpected data after offset 11"));
}

TEST(LoadMnistTest, LabelAboveNineNamesItsOffset) {
  auto [images, labels] = WriteMnistPair({1, 12, 3}, 3);
  auto r = LoadMnist(images, labels);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), labels + ": label 12 at offset 9 is outside 0..9");
  // The whole file is checked, not just the requested rows.
  EXPECT_EQ(LoadMnist(images, labels, 2, 3).status().code(), Code::kInvalidArgument);
}

TEST(LoadMnistTest, SmallFixtureRoundTrips) {
  auto [images, labels] = WriteMnistPair({4, 0, 9}, 3);
  auto r = LoadMnist(images, labels, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->labels.data<int64_t>()[0], 0);
  EXPECT_EQ(r->labels.data<int64_t>()[1], 9);
  std::vector<uint8_t> pixels = RandomBytes(3 * 784, 1);
  EXPECT_FLOAT_EQ(r->images.data<float>()[5], pixels[784 + 5] / 255.0f);
}

TEST(LoadMnistTest, CountMismatchAndWrongShape) {
  auto [images, labels] = WriteMnistPair({1, 2}, 3);
  auto r = LoadMnist(images, labels);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("has 3 images but " + labels + " has 2 labels"));

  std::string odd = TempPath("odd_images.idx");
  WritePlain(odd, IdxBytes(0x803, {2, 27, 28}, std::vector<uint8_t>(2 * 27 * 28, 0)));
  auto s = LoadMnist(odd, labels);
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(s.status().message(), odd + ": images are [2, 27, 28], expected [n, 28, 28]");
}

}  // namespace
}  // namespace tfjob::data
