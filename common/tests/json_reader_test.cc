#include "common/json_reader.h"

#include <gtest/gtest.h>

namespace tfjob {
namespace {

using nlohmann::json;

TEST(JsonReaderTest, ReadsTypedFields) {
  json j = json::parse(R"({"name":"x","units":10,"lr":0.5,"flag":true,"shape":[28,28],"tags":["a"]})");
  JsonReader r(j, "layer");
  std::string name;
  int64_t units = 0;
  double lr = 0;
  bool flag = false;
  std::vector<int64_t> shape;
  std::vector<std::string> tags;
  ASSERT_TRUE(r.Required("name", name).ok());
  ASSERT_TRUE(r.Required("units", units).ok());
  ASSERT_TRUE(r.Optional("lr", lr).ok());
  ASSERT_TRUE(r.Optional("flag", flag).ok());
  ASSERT_TRUE(r.Optional("shape", shape).ok());
  ASSERT_TRUE(r.Optional("tags", tags).ok());
  EXPECT_TRUE(r.Finish().ok());
  EXPECT_EQ(name, "x");
  EXPECT_EQ(units, 10);
  EXPECT_EQ(lr, 0.5);
  EXPECT_TRUE(flag);
  EXPECT_EQ(shape, (std::vector<int64_t>{28, 28}));
  EXPECT_EQ(tags, std::vector<std::string>{"a"});
}

TEST(JsonReaderTest, IntegerValuedFloatIsAnInteger) {
  json j = json::parse(R"({"units":10.0,"bad":10.5})");
  JsonReader r(j, "");
  int64_t units = 0, bad = 0;
  EXPECT_TRUE(r.Required("units", units).ok());
  EXPECT_EQ(units, 10);
  Status s = r.Required("bad", bad);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "bad: expected an integer, got 10.5");
}

TEST(JsonReaderTest, NamesMissingWrongAndUnknownFields) {
  json j = json::parse(R"({"learning_rat":0.1,"momentum":"high"})");
  JsonReader r(j, "optimizer");
  double lr = 0.01, momentum = 0;
  EXPECT_TRUE(r.Optional("learning_rate", lr).ok());
  EXPECT_EQ(lr, 0.01);
  EXPECT_EQ(r.Optional("momentum", momentum).message(), "optimizer.momentum: expected a number, got \"high\"");
  std::string type;
  EXPECT_EQ(r.Required("type", type).message(), "optimizer.type: required field is missing");
  EXPECT_EQ(r.Finish().message(), "optimizer.learning_rat: unknown field");
}

TEST(JsonReaderTest, NonObjectIsAnError) {
  json j = json::parse("[1,2]");
  JsonReader r(j, "model");
  std::string s;
  EXPECT_EQ(r.Required("x", s).message(), "model: expected an object, got array");
  EXPECT_FALSE(r.Finish().ok());
}

TEST(JsonReaderTest, ParseErrorsNameSourceAndOffset) {
  auto r = ParseJson("{\"a\": 1,,}", "job.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("job.json: malformed JSON at byte 9"), std::string::npos) << r.status().message();
  auto missing = ReadJsonFile("/nonexistent/job.json");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_EQ(missing.status().message(), "/nonexistent/job.json: cannot open file");
}

}  // namespace
}  // namespace tfjob
