#include "tests/support/apiserver/selectors.h"

#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/apiserver/resources.h"

namespace tfjob::testing::apiserver {
namespace {

using nlohmann::json;

bool Match(const std::string& selector, const json& labels) {
  auto s = LabelSelector::Parse(selector);
  EXPECT_TRUE(s.ok()) << selector << ": " << s.status();
  return s.ok() && s->Matches(labels);
}

TEST(LabelSelectorTest, KubernetesSemantics) {
  const json labels = {{"app", "tf"}, {"role", "worker"}, {"index", "3"}, {"empty", ""}};
  EXPECT_TRUE(Match("", labels));
  EXPECT_TRUE(Match("", nullptr));
  EXPECT_TRUE(Match("app=tf", labels));
  EXPECT_TRUE(Match("app==tf", labels));
  EXPECT_TRUE(Match(" app = tf , role=worker ", labels));
  EXPECT_FALSE(Match("app=tf,role=ps", labels));
  EXPECT_TRUE(Match("app!=web", labels));
  EXPECT_TRUE(Match("missing!=x", labels)) << "!= matches an absent label";
  EXPECT_TRUE(Match("role in (ps,worker)", labels));
  EXPECT_FALSE(Match("role in (ps)", labels));
  EXPECT_TRUE(Match("role notin (ps)", labels));
  EXPECT_TRUE(Match("missing notin (ps)", labels));
  EXPECT_FALSE(Match("role notin (worker, ps)", labels));
  EXPECT_TRUE(Match("app", labels));
  EXPECT_FALSE(Match("missing", labels));
  EXPECT_TRUE(Match("!missing", labels));
  EXPECT_FALSE(Match("!app", labels));
  EXPECT_TRUE(Match("empty=", labels));
  EXPECT_TRUE(Match("index>2", labels));
  EXPECT_FALSE(Match("index<3", labels));
  EXPECT_FALSE(Match("app>1", labels)) << "non-integer values never compare";
  EXPECT_TRUE(Match("training.kubeflow.org/job-name=j,training.kubeflow.org/replica-type=worker",
                    {{"training.kubeflow.org/job-name", "j"}, {"training.kubeflow.org/replica-type", "worker"}}));
  EXPECT_FALSE(Match("app=tf", nullptr));
}

TEST(LabelSelectorTest, RejectsMalformed) {
  for (const char* bad :
       {"!", "=x", "a in ()", "a in (b", "a in b", "a=b=c", "a,", ",a", "a notin", "a>b", "a b", "Bad Key=x",
        "a="
        "x y",
        "a/b/c=d", "-a=b", "a=-b", "a=(b)"}) {
    EXPECT_FALSE(LabelSelector::Parse(bad).ok()) << bad;
  }
  auto s = LabelSelector::Parse("a in (b");
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
}

TEST(LabelSelectorTest, RandomInputNeverCrashes) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab=!,() <>inotx/.-_\\\"\x01\xff";
  for (int i = 0; i < 5000; ++i) {
    std::string s;
    for (size_t k = rng() % 24; k > 0; --k) s += alphabet[rng() % alphabet.size()];
    // Garbage is a clear INVALID_ARGUMENT (what the API server answers 400
    // with), never a crash or another code.
    auto sel = LabelSelector::Parse(s);
    if (sel.ok()) {
      (void)sel->Matches({{"a", "b"}});
    } else {
      EXPECT_EQ(sel.status().code(), Code::kInvalidArgument) << s;
      EXPECT_FALSE(sel.status().message().empty()) << s;
    }
    auto field = FieldSelector::Parse(s, {"metadata.name", "a"});
    if (!field.ok()) {
      EXPECT_EQ(field.status().code(), Code::kInvalidArgument) << s;
      EXPECT_FALSE(field.status().message().empty()) << s;
    }
  }
}

TEST(FieldSelectorTest, SupportedFieldsOnly) {
  std::set<std::string> fields = {"metadata.name", "metadata.namespace", "status.phase"};
  json pod = {{"metadata", {{"name", "p,1"}, {"namespace", "ns"}}}, {"status", {{"phase", "Running"}}}};
  auto s = FieldSelector::Parse("metadata.name=p\\,1,status.phase!=Failed", fields);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->Matches(pod));
  EXPECT_EQ(*s->Required("metadata.name"), "p,1");
  EXPECT_EQ(s->Required("status.phase"), nullptr);
  EXPECT_FALSE(FieldSelector::Parse("status.phase==Running", fields)->Matches({{"status", {{"phase", "Failed"}}}}));
  EXPECT_TRUE(FieldSelector::Parse("status.phase=", fields)->Matches(json::object())) << "absent is empty";
  EXPECT_EQ(FieldSelector::Parse("spec.nodeName=x", fields).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(FieldSelector::Parse("metadata.name", fields).ok());
  EXPECT_TRUE(FieldSelector::Parse("", fields)->empty());
}

TEST(ValidationTest, NamesAndLabels) {
  EXPECT_EQ(CheckDns1123Subdomain("mnist-worker-0.svc"), "");
  EXPECT_NE(CheckDns1123Subdomain("Mnist"), "");
  EXPECT_NE(CheckDns1123Subdomain(""), "");
  EXPECT_NE(CheckDns1123Subdomain(std::string(254, 'a')), "");
  EXPECT_EQ(CheckDns1123Label("default"), "");
  EXPECT_NE(CheckDns1123Label("a.b"), "");
  EXPECT_EQ(CheckDns1035Label("svc-1"), "");
  EXPECT_NE(CheckDns1035Label("1svc"), "");
  EXPECT_NE(CheckDns1035Label(std::string(64, 'a')), "");
  EXPECT_EQ(CheckQualifiedName("training.kubeflow.org/job-name"), "");
  EXPECT_EQ(CheckQualifiedName("App_Name.v1"), "");
  EXPECT_NE(CheckQualifiedName("a/b/c"), "");
  EXPECT_NE(CheckQualifiedName("/a"), "");
  EXPECT_NE(CheckQualifiedName("Bad.Prefix/a"), "");
  EXPECT_EQ(CheckLabelValue(""), "");
  EXPECT_EQ(CheckLabelValue("Worker_0.x-y"), "");
  EXPECT_NE(CheckLabelValue("-x"), "");
  EXPECT_NE(CheckLabelValue(std::string(64, 'v')), "");
}

TEST(JsonPathTest, PrinterColumnSubset) {
  json job = {{"status", {{"conditions", {{{"type", "Created"}}, {{"type", "Running"}}}}}},
              {"metadata", {{"name", "j"}}}};
  auto last = JsonPath(job, ".status.conditions[-1:].type");
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0], "Running");
  EXPECT_EQ(JsonPath(job, ".status.conditions[0].type")[0], "Created");
  EXPECT_EQ(JsonPath(job, "{.status.conditions[*].type}").size(), 2u);
  EXPECT_TRUE(JsonPath(job, ".status.missing[-1:].type").empty());
  EXPECT_TRUE(JsonPath(json::object(), ".status.conditions[-1:].type").empty());
  EXPECT_TRUE(JsonPath(job, ".status.conditions[x]").empty());
  EXPECT_TRUE(JsonPath(job, "status").empty());
}

TEST(HumanDurationTest, MatchesKubectlStyle) {
  using std::chrono::seconds;
  EXPECT_EQ(HumanDuration(seconds(-5)), "<invalid>");
  EXPECT_EQ(HumanDuration(seconds(0)), "0s");
  EXPECT_EQ(HumanDuration(seconds(119)), "119s");
  EXPECT_EQ(HumanDuration(seconds(5 * 60 + 3)), "5m3s");
  EXPECT_EQ(HumanDuration(seconds(6 * 60)), "6m");
  EXPECT_EQ(HumanDuration(seconds(45 * 60)), "45m");
  EXPECT_EQ(HumanDuration(seconds(3 * 3600 + 20 * 60)), "3h20m");
  EXPECT_EQ(HumanDuration(seconds(30 * 3600)), "30h");
  EXPECT_EQ(HumanDuration(seconds(3 * 86400 + 2 * 3600)), "3d2h");
  EXPECT_EQ(HumanDuration(seconds(40 * 86400)), "40d");
  EXPECT_EQ(HumanDuration(seconds(3 * 365 * 86400)), "3y");
}

}  // namespace
}  // namespace tfjob::testing::apiserver
