#include "services/data/csv.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace tfjob::data {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::StartsWith;

using ::tfjob::testing::RemoveAtExit;  // fixture files, removed when the test process exits

// Writes `text` to a file unique to the running test and returns its path.
std::string WriteCsv(const std::string& text, const std::string& name = "data.csv") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string path = ::testing::TempDir() + "tfjob_csv_" + info->test_suite_name() + "_" + info->name() + "_" + name;
  RemoveAtExit(path);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (f != nullptr) {
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  return path;
}

std::vector<float> Floats(const Tensor& t) { return {t.flat<float>().begin(), t.flat<float>().end()}; }
std::vector<int64_t> Ints(const Tensor& t) { return {t.flat<int64_t>().begin(), t.flat<int64_t>().end()}; }

TEST(CsvTest, LoadsFileWithHeader) {
  std::string path = WriteCsv("a, b ,label\n1,2,0\n3.5, -4 ,1\n+1e2,0.25,2\n");
  auto r = LoadCsv(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->column_names, ElementsAre("a", "b", "label"));
  EXPECT_EQ(r->features.dtype(), DType::kFloat32);
  EXPECT_EQ(r->features.shape(), Shape({3, 2}));
  EXPECT_THAT(Floats(r->features), ElementsAre(1, 2, 3.5f, -4, 100, 0.25f));
  EXPECT_EQ(r->labels.dtype(), DType::kInt64);
  EXPECT_THAT(Ints(r->labels), ElementsAre(0, 1, 2));
}

TEST(CsvTest, LoadsFileWithoutHeader) {
  CsvOptions opts;
  opts.header = false;
  auto r = LoadCsv(WriteCsv("1,2,0\n3,4,1"), opts);  // no final newline
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->column_names, IsEmpty());
  EXPECT_EQ(r->features.shape(), Shape({2, 2}));
  EXPECT_THAT(Ints(r->labels), ElementsAre(0, 1));
  // The same file read with a header loses its first row to the names.
  auto h = LoadCsv(WriteCsv("1,2,0\n3,4,1", "h.csv"));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->features.shape(), Shape({1, 2}));
  EXPECT_THAT(h->column_names, ElementsAre("1", "2", "0"));
}

TEST(CsvTest, HandlesCrlfBomBlankLinesAndQuotedNames) {
  auto r = LoadCsv(WriteCsv("\xEF\xBB\xBF\"x\",\"y\"\r\n1.5,0\r\n\r\n  \r\n-2,1\r\n"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->column_names, ElementsAre("x", "y"));
  EXPECT_THAT(Floats(r->features), ElementsAre(1.5f, -2));
  EXPECT_THAT(Ints(r->labels), ElementsAre(0, 1));
}

TEST(CsvTest, LabelColumnDelimiterAndFloatLabels) {
  CsvOptions opts;
  opts.delimiter = ';';
  opts.label_column = 0;
  opts.label_is_int = false;
  auto r = LoadCsv(WriteCsv("y;a;b\n0.5;1;2\n-1.25;3;4\n"), opts);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->labels.dtype(), DType::kFloat32);
  EXPECT_THAT(Floats(r->labels), ElementsAre(0.5f, -1.25f));
  EXPECT_THAT(Floats(r->features), ElementsAre(1, 2, 3, 4));
}

TEST(CsvTest, BadCellNamesLineColumnAndText) {
  std::string path = WriteCsv("a,b,c\n1,2,0\n1,x1,1\n");
  auto r = LoadCsv(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), path + ":3:2: 'x1' is not a finite number");

  std::string label = WriteCsv("a,b\n1,1.5\n", "label.csv");
  EXPECT_EQ(LoadCsv(label).status().message(), label + ":2:2: label '1.5' is not an integer");

  std::string empty_cell = WriteCsv("a,b,c\n1,,0\n", "empty_cell.csv");
  EXPECT_THAT(LoadCsv(empty_cell).status().message(), StartsWith(empty_cell + ":2:2: empty cell"));

  std::string nan = WriteCsv("a,b\nnan,1\n", "nan.csv");
  EXPECT_EQ(LoadCsv(nan).status().message(), nan + ":2:1: 'nan' is not a finite number");
}

TEST(CsvTest, RaggedRowNamesLineAndColumn) {
  std::string path = WriteCsv("a,b,c\n1,2,0\n\n3,4\n");
  auto r = LoadCsv(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), path + ":4:3: expected 3 columns, found 2 in '3,4'");

  std::string wide = WriteCsv("a,b\n1,2,3\n", "wide.csv");
  EXPECT_EQ(LoadCsv(wide).status().message(), wide + ":2:3: expected 2 columns, found 3 in '1,2,3'");
}

TEST(CsvTest, EmptyOrHeaderOnlyFiles) {
  std::string empty = WriteCsv("");
  auto r = LoadCsv(empty);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), empty + ":1:1: empty file");
  std::string blank = WriteCsv("\n \r\n", "blank.csv");
  EXPECT_EQ(LoadCsv(blank).status().message(), blank + ":1:1: empty file");
  std::string header_only = WriteCsv("a,b\n", "header.csv");
  EXPECT_EQ(LoadCsv(header_only).status().message(), header_only + ":2:1: no data rows after the header");
}

TEST(CsvTest, MissingFileIsNotFound) {
  std::string path = ::testing::TempDir() + "tfjob_csv_no_such_file.csv";
  auto r = LoadCsv(path);
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_THAT(r.status().message(), StartsWith(path + ": cannot open file"));
}

TEST(CsvTest, BadLabelColumnAndSingleColumn) {
  CsvOptions opts;
  opts.label_column = 3;
  std::string path = WriteCsv("a,b,c\n1,2,3\n");
  auto r = LoadCsv(path, opts);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), StartsWith(path + ":1:1: label_column 3 is outside [0, 3)"));

  std::string one = WriteCsv("a\n1\n", "one.csv");
  EXPECT_THAT(LoadCsv(one).status().message(), StartsWith(one + ":1:1: need at least 2 columns"));
}

}  // namespace
}  // namespace tfjob::data
