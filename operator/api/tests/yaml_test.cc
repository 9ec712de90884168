#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "operator/api/codec.h"
#include "operator/api/tests/test_util.h"

namespace tfjob::op::api {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;

json One(const std::string& yaml) {
  auto docs = YamlDocumentsToJson(yaml, "t.yaml");
  EXPECT_TRUE(docs.ok()) << docs.status();
  if (!docs.ok() || docs->size() != 1) {
    ADD_FAILURE() << "expected one document";
    return json();
  }
  return (*docs)[0];
}

// The value of key "v" in a one-line mapping.
json Scalar(const std::string& text) { return One("v: " + text)["v"]; }

Status Error(const std::string& yaml) {
  auto docs = YamlDocumentsToJson(yaml, "m.yaml");
  EXPECT_FALSE(docs.ok()) << yaml;
  return docs.status();
}

TEST(YamlScalarTest, PlainScalarsAreTypedLikeKubectl) {
  EXPECT_EQ(Scalar("2"), json(2));
  EXPECT_TRUE(Scalar("2").is_number_integer());
  EXPECT_EQ(Scalar("-17"), json(-17));
  EXPECT_EQ(Scalar("+5"), json(5));
  EXPECT_EQ(Scalar("1_000"), json(1000));
  EXPECT_EQ(Scalar("0x1F"), json(31));
  EXPECT_EQ(Scalar("0o17"), json(15));
  EXPECT_EQ(Scalar("0755"), json(493));  // YAML 1.1 octal
  EXPECT_EQ(Scalar("0b101"), json(5));
  EXPECT_EQ(Scalar("9223372036854775807"), json(INT64_MAX));
  EXPECT_EQ(Scalar("18446744073709551615"), json(UINT64_MAX));
  EXPECT_TRUE(Scalar("18446744073709551616").is_number_float());
  EXPECT_TRUE(Scalar("08").is_number_float());  // not octal, so go-yaml reads a float
  EXPECT_EQ(Scalar("1.5"), json(1.5));
  EXPECT_TRUE(Scalar("1e3").is_number_float());
  EXPECT_EQ(Scalar("1e3"), json(1000.0));
  EXPECT_EQ(Scalar(".5"), json(0.5));
  EXPECT_EQ(Scalar("-2."), json(-2.0));
  for (const char* t : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y"}) {
    EXPECT_EQ(Scalar(t), json(true)) << t;
  }
  for (const char* f : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N"}) {
    EXPECT_EQ(Scalar(f), json(false)) << f;
  }
  for (const char* n : {"null", "Null", "NULL", "~", ""}) EXPECT_TRUE(Scalar(n).is_null()) << n;
  EXPECT_EQ(Scalar("2024-05-01T10:00:00Z"), json("2024-05-01T10:00:00Z"));
  EXPECT_EQ(Scalar("1.2.3"), json("1.2.3"));
  EXPECT_EQ(Scalar("-x"), json("-x"));
  EXPECT_EQ(Scalar("0x"), json("0x"));
  EXPECT_EQ(Scalar("tensorflow"), json("tensorflow"));
  EXPECT_EQ(Scalar("yes please"), json("yes please"));
}

TEST(YamlScalarTest, QuotedAndTaggedScalars) {
  EXPECT_EQ(Scalar("\"2\""), json("2"));
  EXPECT_EQ(Scalar("'2'"), json("2"));
  EXPECT_EQ(Scalar("\"true\""), json("true"));
  EXPECT_EQ(Scalar("'null'"), json("null"));
  EXPECT_EQ(Scalar("\"\""), json(""));
  EXPECT_EQ(Scalar("!!str 2"), json("2"));
  EXPECT_EQ(Scalar("!!int \"7\""), json(7));
  EXPECT_EQ(Scalar("!!float 1"), json(1.0));
  EXPECT_EQ(Scalar("!!bool yes"), json(true));
  EXPECT_EQ(One("v: |\n  line one\n  line two\n")["v"], json("line one\nline two\n"));
  EXPECT_EQ(One("v: >-\n  folded\n  text\n")["v"], json("folded text"));
  Status s = Error("v: !!int abc\n");
  EXPECT_EQ(s.message(), "m.yaml:1:4: \"abc\" is not a valid !!int");
}

TEST(YamlScalarTest, KeysBecomeStrings) {
  EXPECT_EQ(One("1: a\ntrue: b\n~: c\n1.5: d\n0x10: e\n"),
            json::parse(R"({"1":"a","true":"b","null":"c","1.5":"d","16":"e"})"));
  // YAML 1.1 as kubectl reads it: an unquoted y/n/on/off key is a boolean.
  EXPECT_EQ(One("on: 1\nn: 2\n\"y\": 3\n"), json::parse(R"({"true":1,"false":2,"y":3})"));
}

TEST(YamlTest, NonFiniteFloatsAreErrors) {
  for (const char* v : {".inf", "-.Inf", ".NaN"}) {
    Status s = Error(std::string("a: 1\nv: ") + v + "\n");
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_EQ(s.message(), "m.yaml:2:4: \"" + std::string(v) + "\" is not representable in JSON");
  }
}

TEST(YamlTest, AnchorsAliasesAndMergeKeys) {
  json doc = One(R"(
base: &container
  name: tensorflow
  image: img:1
  args: [a]
list:
  - *container
  - <<: *container
    image: img:2
  - <<: [{x: 1, image: ignored}, {x: 2, z: 3}]
    image: img:3
)");
  EXPECT_EQ(doc["list"][0], doc["base"]);
  EXPECT_EQ(doc["list"][1], json::parse(R"({"name":"tensorflow","image":"img:2","args":["a"]})"));
  EXPECT_EQ(doc["list"][2], json::parse(R"({"x":1,"z":3,"image":"img:3"})"));
  // A quoted "<<" is an ordinary key.
  EXPECT_EQ(One("\"<<\": 1\n"), json::parse(R"({"<<":1})"));
}

TEST(YamlTest, MultipleDocumentsSkipEmptyOnes) {
  auto docs = YamlDocumentsToJson("---\n---\na: 1\n---\n# only a comment\n---\n- x\n...\n", "d.yaml");
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0], json::parse(R"({"a":1})"));
  EXPECT_EQ((*docs)[1], json::parse(R"(["x"])"));
  auto none = YamlDocumentsToJson("", "e.yaml");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(YamlTest, YamlToJsonPicksTheFirstTfJob) {
  json doc = testing::LoadJson("multi_document.yaml");
  EXPECT_EQ(doc["metadata"]["name"], "bundled");
  EXPECT_EQ(doc["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 2);

  auto from_list = YamlToJson(R"(
apiVersion: v1
kind: List
items:
  - {apiVersion: v1, kind: Service, metadata: {name: s}}
  - {apiVersion: kubeflow.org/v1, kind: TFJob, metadata: {name: in-list}}
)",
                              "list.yaml");
  ASSERT_TRUE(from_list.ok()) << from_list.status();
  EXPECT_EQ((*from_list)["metadata"]["name"], "in-list");

  auto none = YamlToJson("apiVersion: v1\nkind: ConfigMap\n---\n- 1\n", "cm.yaml");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kNotFound);
  EXPECT_EQ(none.status().message(), "cm.yaml: no document of kind TFJob");
}

TEST(YamlTest, JsonIsYaml) {
  const json doc = testing::LoadJson("full_object.json");
  EXPECT_EQ(doc["metadata"]["name"], "mnist");
  EXPECT_TRUE(doc["spec"]["tfReplicaSpecs"]["Worker"]["replicas"].is_number_float());
  EXPECT_EQ(doc["spec"]["foo"], json::parse(R"({"bar":[1,2.5,"three",null,true]})"));
}

TEST(YamlTest, SyntaxErrorsAreLocated) {
  Status s = Error("a: 1\nb: [1, 2\nc: 3\n");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), StartsWith("m.yaml:3:"));
  EXPECT_THAT(s.message(), HasSubstr("end of sequence flow not found"));

  s = Error("spec:\n  a: 1\n   b: 2\n");
  EXPECT_THAT(s.message(), StartsWith("m.yaml:3:"));

  s = Error("a: 'x' y\n");
  EXPECT_THAT(s.message(), StartsWith("m.yaml:1:"));
}

TEST(YamlTest, DuplicateAndComplexKeysAreErrors) {
  Status s = Error("metadata:\n  name: a\n  name: b\n");
  EXPECT_EQ(s.message(), "m.yaml:3:3: duplicate key \"name\"");
  s = Error("? [a, b]\n: c\n");
  EXPECT_THAT(s.message(), HasSubstr("mapping keys must be scalars"));
  s = Error("a:\n  <<: 5\n");
  EXPECT_THAT(s.message(), HasSubstr("merge key"));
  s = Error("a: *nope\n");
  EXPECT_THAT(s.message(), StartsWith("m.yaml:"));
}

TEST(YamlTest, AliasBombsAreRefused) {
  // Ten levels of ten aliases each: 10^10 values once expanded.
  std::string yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    std::string prev = "*a";
    prev += std::to_string(i - 1);
    std::string line = "a";
    line += std::to_string(i);
    line += ": &a";
    line += std::to_string(i);
    line += " [";
    for (int k = 0; k < 10; ++k) {
      if (k) line += ", ";
      line += prev;
    }
    line += "]\n";
    yaml += line;
  }
  Status s = Error(yaml);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("document too large after alias expansion"));
}

TEST(YamlTest, DeepNestingIsAnErrorNotACrash) {
  std::string flow(100000, '[');
  Status s = Error(flow);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  std::string block;
  for (int i = 0; i < 3000; ++i) block += std::string(static_cast<size_t>(i), ' ') + "- \n";
  auto r = YamlDocumentsToJson(block, "deep.yaml");  // either parses or fails cleanly
  if (!r.ok()) {
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
}

// Found by fuzz/tfjob_yaml_fuzz: yaml-cpp passed invalid UTF-8 through, and
// the JSON it became threw (type_error 316) when written out.
TEST(YamlTest, InvalidUtf8IsAnErrorNotJsonThatCannotBeWritten) {
  for (const std::string& yaml : {std::string("a: \xff\n"), std::string("name: ab\xc3(\n"),
                                  std::string("\xe9t\xe9: 1\n"), std::string("a: \"x\xed\xa0\x80\"\n"),
                                  std::string("a: \xc0\xaf\n"), std::string("a: [x, 'y\xf5\x80\x80\x80']\n")}) {
    Status s = Error(yaml);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << yaml;
    EXPECT_THAT(s.message(), StartsWith("m.yaml:1:")) << yaml;
    EXPECT_THAT(s.message(), HasSubstr("invalid UTF-8")) << yaml;
  }
  // yaml-cpp refuses an escaped surrogate itself.
  EXPECT_EQ(Error("a: \"\\ud800\"\n").code(), Code::kInvalidArgument);
  // Every well-formed sequence length still reads, and dumps.
  json doc = One("k\xc3\xa9: \"\xe2\x82\xac \xf0\x9f\x98\x80\"\nv: \"\\u00e9\"\n");
  EXPECT_EQ(doc["k\xc3\xa9"], "\xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(doc["v"], "\xc3\xa9");
  EXPECT_NO_THROW((void)doc.dump());
}

TEST(ReadTfJobManifestTest, ReadsAndDecodes) {
  auto job = ReadTfJobManifest(testing::TestDataPath("chief_ps_worker_evaluator.yaml"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->metadata.name, "ctr-model");

  auto missing = ReadTfJobManifest(testing::TestDataPath("does_not_exist.yaml"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("does_not_exist.yaml"));
}

TEST(ReadTfJobManifestTest, DecodeErrorsNameTheFile) {
  const std::string path = ::testing::TempDir() + "tfjob_api_bad_manifest.yaml";
  ASSERT_TRUE(WriteFileAtomic(path,
                              "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x}\n"
                              "spec:\n  tfReplicaSpecs:\n    Worker:\n      replicas: \"2\"\n")
                  .ok());
  auto job = ReadTfJobManifest(path);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(job.status().message(), path + ": spec.tfReplicaSpecs.Worker.replicas: expected an integer");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tfjob::op::api
