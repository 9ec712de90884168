// TFRecord framing and CRC32C, compressed files, damaged files (truncated,
// bad CRCs: each named by file and offset), tf.Example decoding against a
// feature spec, AutoShardPolicy plans, and CSV tables with quoted cells.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "services/data/csv.h"
#include "services/data/example.h"
#include "services/data/tfrecord.h"
#include "tests/support/subprocess.h"

namespace tfjob::data {
namespace {

using ::testing::HasSubstr;

// Removed when the test process exits (tests/support).
std::string TempDir(const std::string& name) { return ::tfjob::testing::MakeTempDir("tfrecord-" + name); }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::vector<std::string> ReadRecords(const std::string& path, Compression c) {
  auto r = TfRecordReader::Open(path, c).value();
  std::vector<std::string> out;
  while (true) {
    auto next = r->Next();
    EXPECT_TRUE(next.ok()) << next.status();
    if (!next.ok() || !next->has_value()) break;
    out.push_back(**next);
  }
  return out;
}

TEST(Crc32cTest, KnownValues) {
  // The CRC-32C check value, and RFC 3720's test vectors.
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62a8ab43u);
  std::string inc;
  for (int i = 0; i < 32; ++i) inc.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(inc.data(), inc.size()), 0x46dd794eu);
  // Incremental equals one pass.
  EXPECT_EQ(Crc32c(inc.data() + 5, 27, Crc32c(inc.data(), 5)), Crc32c(inc.data(), inc.size()));
  // TensorFlow's mask: rotate right by 15, add 0xa282ead8.
  const uint32_t c = Crc32c("123456789", 9);
  EXPECT_EQ(MaskedCrc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TfRecordTest, RoundTripsEveryCompression) {
  const std::string dir = TempDir("roundtrip");
  const std::vector<std::string> records = {"", "a", std::string(100000, 'x'), "last"};
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    const std::string path = dir + "/f" + std::to_string(static_cast<int>(c));
    ASSERT_TRUE(WriteTfRecords(path, records, c).ok());
    EXPECT_EQ(ReadRecords(path, c), records);
  }
  // The uncompressed layout is exactly TensorFlow's framing.
  const std::string raw = ReadAll(dir + "/f0");
  EXPECT_EQ(raw.size(), 4 * 16 + 1 + 100000 + 4);
  EXPECT_EQ(raw.substr(0, 8), std::string("\0\0\0\0\0\0\0\0", 8));
  // Gzip files start with gzip's magic, zlib ones with a zlib header.
  EXPECT_EQ(ReadAll(dir + "/f1").substr(0, 2), "\x1f\x8b");
  EXPECT_EQ(static_cast<uint8_t>(ReadAll(dir + "/f2")[0]), 0x78);
}

TEST(TfRecordTest, DamagedFilesNameTheFileAndOffset) {
  const std::string dir = TempDir("damaged");
  const std::string path = dir + "/d.tfrecord";
  ASSERT_TRUE(WriteTfRecords(path, {"first", "second record"}).ok());
  const std::string good = ReadAll(path);
  const size_t second = 16 + 5;  // where record 1 starts
  auto error_of = [&](const std::string& bytes, Compression c = Compression::kNone) {
    WriteAll(path, bytes);
    auto r = TfRecordReader::Open(path, c).value();
    while (true) {
      auto n = r->Next();
      if (!n.ok()) return n.status();
      if (!n->has_value()) return Status::Ok();
    }
  };
  // Truncated in the header, the data and the data CRC.
  for (size_t cut : {second + 5, second + 20, good.size() - 2}) {
    Status s = error_of(good.substr(0, cut));
    EXPECT_EQ(s.code(), Code::kDataLoss) << cut;
    EXPECT_THAT(s.message(), HasSubstr(path + ": truncated record at offset " + std::to_string(second))) << cut;
  }
  // A flipped length byte fails the length CRC; a flipped data byte the data CRC.
  std::string bad = good;
  bad[second] ^= 1;
  Status s = error_of(bad);
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_EQ(s.message(), path + ": corrupted record at offset " + std::to_string(second) + ": length CRC mismatch");
  bad = good;
  bad[second + 12 + 3] ^= 0x40;
  s = error_of(bad);
  EXPECT_EQ(s.message(), path + ": corrupted record at offset " + std::to_string(second) + ": data CRC mismatch");
  // A huge length with a valid CRC is found truncated, not allocated.
  std::string huge = good.substr(0, second);
  std::string len(8, '\xff');
  len[7] = 0x0f;
  const uint32_t crc = MaskedCrc32c(len.data(), len.size());
  huge += len;
  for (int i = 0; i < 4; ++i) huge.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  huge += "abc";
  s = error_of(huge);
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("truncated record at offset " + std::to_string(second) + ": 3 of"));
  // A cut gzip stream.
  ASSERT_TRUE(WriteTfRecords(path, {"first", std::string(5000, 'y')}, Compression::kGzip).ok());
  const std::string gz = ReadAll(path);
  s = error_of(gz.substr(0, gz.size() / 2), Compression::kGzip);
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(path + ": corrupt GZIP stream at offset"));
  // Not gzip at all.
  s = error_of(good, Compression::kZlib);
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(path + ": corrupt ZLIB stream at offset 0"));
  EXPECT_EQ(TfRecordReader::Open(dir + "/missing", Compression::kNone).status().code(), Code::kNotFound);
}

Column Floats(std::vector<float> v) {
  Column c;
  c.type = FeatureType::kFloat32;
  c.floats = std::move(v);
  return c;
}
Column Ints(std::vector<int64_t> v) {
  Column c;
  c.type = FeatureType::kInt64;
  c.ints = std::move(v);
  return c;
}
Column Strings(std::vector<std::string> v) {
  Column c;
  c.type = FeatureType::kString;
  c.strings = std::move(v);
  return c;
}

TEST(ExampleTest, FixedAndVarLenFeatures) {
  FeatureSpec image{"image", FeatureType::kFloat32, false, {2, 2}};
  FeatureSpec words{"words", FeatureType::kString, true, {}};
  FeatureSpec label{"label", FeatureType::kInt64, false, {}};
  FeatureSpec weight{"weight", FeatureType::kFloat32, false, {}};
  weight.has_default = true;
  weight.default_number = 0.5;
  ExampleDecoder d({image, words, label, weight});
  ASSERT_TRUE(d.Add(EncodeExample({{"image", Floats({1, 2, 3, 4})},
                                   {"words", Strings({"a", "b", "c"})},
                                   {"label", Ints({7})},
                                   {"weight", Floats({2})}}),
                    "r0")
                  .ok());
  ASSERT_TRUE(
      d.Add(EncodeExample({{"image", Floats({5, 6, 7, 8})}, {"words", Strings({"d"})}, {"label", Ints({9})}}), "r1")
          .ok());
  auto cols = std::move(d).Finish();
  ASSERT_EQ(cols.size(), 4u);
  EXPECT_EQ(cols[0].floats, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(cols[0].shape, Shape({2, 2}));
  // Padded to the longest record with "".
  EXPECT_EQ(cols[1].shape, Shape({3}));
  EXPECT_EQ(cols[1].strings, (std::vector<std::string>{"a", "b", "c", "d", "", ""}));
  EXPECT_EQ(cols[2].ints, (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(cols[3].floats, (std::vector<float>{2, 0.5}));  // the default for a missing feature
  EXPECT_EQ(cols[3].rows, 2);
}

TEST(ExampleTest, BadRecordsAreNamed) {
  FeatureSpec image{"image", FeatureType::kFloat32, false, {3}};
  FeatureSpec words{"words", FeatureType::kString, true, {}, /*max_length=*/2};
  ExampleDecoder d({image, words});
  auto err = [&](const std::string& record) { return d.Add(record, "f.tfrecord: record 4 at offset 99"); };
  Status s = err(EncodeExample({{"image", Ints({1, 2, 3})}}));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "f.tfrecord: record 4 at offset 99: feature \"image\" is a int64_list, the spec says "
            "float32 (float_list)");
  s = err(EncodeExample({{"image", Floats({1, 2})}}));
  EXPECT_THAT(s.message(), HasSubstr("feature \"image\" has 2 values, its shape [3] needs 3"));
  s = err(EncodeExample({{"words", Strings({"a"})}}));
  EXPECT_THAT(s.message(), HasSubstr("feature \"image\" is missing"));
  s = err(EncodeExample({{"image", Floats({1, 2, 3})}, {"words", Strings({"a", "b", "c"})}}));
  EXPECT_THAT(s.message(), HasSubstr("feature \"words\" has 3 values, more than its max_length 2"));
  s = err("\xff\xff\xff");
  EXPECT_THAT(s.message(), HasSubstr("record 4 at offset 99: not a tf.Example"));
  EXPECT_EQ(d.rows(), 0);  // nothing half-added
  ASSERT_TRUE(err(EncodeExample({{"image", Floats({1, 2, 3})}})).ok());
  auto cols = std::move(d).Finish();
  EXPECT_EQ(cols[1].strings, (std::vector<std::string>{"", ""}));  // padded to max_length
}

TEST(ExampleTest, ReadsShardsOfFiles) {
  const std::string dir = TempDir("shards");
  std::vector<std::string> files;
  int64_t id = 0;
  for (int f = 0; f < 3; ++f) {
    std::vector<std::string> records;
    for (int r = 0; r < 4; ++r) records.push_back(EncodeExample({{"id", Ints({id++})}}));
    files.push_back(dir + "/part-" + std::to_string(f));
    ASSERT_TRUE(WriteTfRecords(files.back(), records).ok());
  }
  auto ids = [&](const ShardPlan& plan) {
    auto cols = ReadExamples(plan, Compression::kNone, {{"id", FeatureType::kInt64, false, {}}});
    EXPECT_TRUE(cols.ok()) << cols.status();
    return cols.ok() ? (*cols)[0].ints : std::vector<int64_t>{};
  };
  // FILE: files index, index + n, ...
  auto p = PlanShard(files, AutoShardPolicy::kFile, 2, 1).value();
  EXPECT_EQ(p.applied, AutoShardPolicy::kFile);
  EXPECT_EQ(ids(p), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(ids(PlanShard(files, AutoShardPolicy::kFile, 2, 0).value()),
            (std::vector<int64_t>{0, 1, 2, 3, 8, 9, 10, 11}));
  // DATA: every record index, index + n, ... of all files.
  p = PlanShard(files, AutoShardPolicy::kData, 5, 2).value();
  EXPECT_EQ(p.applied, AutoShardPolicy::kData);
  EXPECT_EQ(ids(p), (std::vector<int64_t>{2, 7}));
  // AUTO: by file while there are enough files, else by record.
  EXPECT_EQ(PlanShard(files, AutoShardPolicy::kAuto, 3, 0).value().applied, AutoShardPolicy::kFile);
  p = PlanShard(files, AutoShardPolicy::kAuto, 4, 3).value();
  EXPECT_EQ(p.applied, AutoShardPolicy::kData);
  EXPECT_EQ(ids(p), (std::vector<int64_t>{3, 7, 11}));
  // OFF: everything, for every worker.
  EXPECT_EQ(ids(PlanShard(files, AutoShardPolicy::kOff, 4, 3).value()).size(), 12u);
  // FILE with fewer files than workers is an error, as in TensorFlow.
  auto bad = PlanShard(files, AutoShardPolicy::kFile, 4, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("3 files cannot be split among 4 workers"));
  EXPECT_EQ(ParseAutoShardPolicy("HINT").status().code(), Code::kInvalidArgument);
}

TEST(CsvTableTest, QuotedCellsColumnsByNameAndErrors) {
  const std::string dir = TempDir("csv");
  const std::string path = dir + "/words.csv";
  WriteAll(path, "w1,w2,\"label\"\n\"iron, man\",hulk,yes\r\n thor , \"say \"\"hi\"\"\" ,no\n");
  auto t = ReadCsvTable(path, ',', true).value();
  EXPECT_EQ(t.column_names, (std::vector<std::string>{"w1", "w2", "label"}));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0], (std::vector<std::string>{"iron, man", "hulk", "yes"}));
  EXPECT_EQ(t.rows[1], (std::vector<std::string>{"thor", "say \"hi\"", "no"}));
  EXPECT_EQ(*CsvColumn(t, "label"), 2);
  EXPECT_EQ(*CsvColumn(t, "1"), 1);
  EXPECT_THAT(CsvColumn(t, "w9").status().message(), HasSubstr("no column 'w9' (columns: w1, w2, label)"));
  EXPECT_EQ(CsvStrings(t, {1, 0}), (std::vector<std::string>{"hulk", "iron, man", "say \"hi\"", "thor"}));
  auto n = CsvNumbers(t, {0}, DType::kFloat32);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), path + ":2:1: 'iron, man' is not a finite number");
  WriteAll(path, "a,b\n\"open,1\n");
  EXPECT_THAT(ReadCsvTable(path, ',', true).status().message(), HasSubstr(":2:1: the quote opened at character 1"));
}

}  // namespace
}  // namespace tfjob::data
