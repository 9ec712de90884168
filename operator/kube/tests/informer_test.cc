// The informer and REST client against the API-server double: list+watch,
// bookmarks, a dropped watch, and relist after 410 Gone.
#include "operator/kube/informer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/kube/rest_client.h"
#include "tests/support/apiserver/apiserver_double.h"

namespace tfjob::op::kube {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

json Pod(const std::string& name, const std::string& job) {
  return {{"apiVersion", "v1"}, {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"labels", {{"training.kubeflow.org/job-name", job}}}}},
          {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "i"}}})}}}};
}

class InformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ApiServerDouble::Options o;
    o.compaction_window = 5;
    o.bookmark_interval = 50ms;
    server_ = *testing::ApiServerDouble::Start(o);
    ClusterConfig c;
    c.server = server_->url();
    client_ = *RestClient::Create(c);
  }
  std::unique_ptr<testing::ApiServerDouble> server_;
  std::unique_ptr<RestClient> client_;
};

TEST_F(InformerTest, ListsWatchesAndSurvivesDroppedWatchesAndCompaction) {
  ASSERT_TRUE(server_->Create("pods", "default", Pod("a", "j")).ok());
  Informer inf(*client_, kPods, "default", "training.kubeflow.org/job-name");
  std::atomic<int> events{0};
  inf.AddHandler([&](const std::string&, const json&) { ++events; });
  inf.Start();
  ASSERT_TRUE(server_->WaitFor([&] { return inf.HasSynced() && inf.Get("default", "a").has_value(); }, 10s));
  ASSERT_TRUE(server_->Create("pods", "default", Pod("b", "j")).ok());
  ASSERT_TRUE(server_->WaitFor([&] { return inf.Get("default", "b").has_value(); }, 10s));
  // A pod without the selected label never enters the cache.
  json other = Pod("c", "j");
  other["metadata"]["labels"] = json::object();
  ASSERT_TRUE(server_->Create("pods", "default", other).ok());

  // Watches dropped and, meanwhile, more writes than the compaction window
  // keeps: the informer's version is gone (410), so it relists and still
  // ends up exact, deletions included.
  const int64_t relists = inf.relists();
  server_->DropWatches();
  ASSERT_TRUE(server_->Delete("pods", "default", "a").ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(server_->Create("pods", "default", Pod(std::string("p").append(std::to_string(i)), "j")).ok());
  server_->CompactNow();
  ASSERT_TRUE(server_->WaitFor([&] { return inf.List("default").size() == 11 && !inf.Get("default", "a"); }, 15s))
      << inf.List("default").size();
  EXPECT_GT(inf.relists(), relists);
  EXPECT_FALSE(inf.Get("default", "c").has_value());
  EXPECT_EQ(inf.List("default", {{"training.kubeflow.org/job-name", "j"}}).size(), 11u);
  inf.Stop();
}

TEST_F(InformerTest, ClientMapsConflictsAndNotFound) {
  Client& c = *client_;  // the interface carries the default arguments
  auto created = c.Create(kPods, "default", Pod("x", "j"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(c.Create(kPods, "default", Pod("x", "j")).status().code(), Code::kAlreadyExists);
  json stale = *created;
  ASSERT_TRUE(c.MergePatch(kPods, "default", "x", json{{"metadata", {{"labels", {{"k", "v"}}}}}}).ok());
  EXPECT_EQ(c.Update(kPods, "default", stale).status().code(), Code::kAborted);  // 409 Conflict
  EXPECT_EQ(c.Get(kPods, "default", "nope").status().code(), Code::kNotFound);
  EXPECT_EQ(c.Delete(kPods, "default", "nope").code(), Code::kNotFound);
  EXPECT_TRUE(c.Delete(kPods, "default", "x").ok());
}

// Request bodies and watch lines go through cpprest as byte vectors (its
// std::string overloads are undefined behaviour, which the ASan + UBSan build
// reports); multi-byte UTF-8 must still arrive byte for byte both ways.
TEST_F(InformerTest, NonAsciiTextSurvivesRequestBodiesAndWatchLines) {
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  Informer inf(*client_, kPods, "default", "training.kubeflow.org/job-name");
  inf.Start();
  ASSERT_TRUE(server_->WaitFor([&] { return inf.HasSynced(); }, 10s));
  json pod = Pod("u", "j");
  pod["metadata"]["annotations"] = {{"note", text}};
  Client& c = *client_;
  auto created = c.Create(kPods, "default", pod);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["metadata"]["annotations"]["note"], text);
  auto patched = c.MergePatch(kPods, "default", "u", json{{"metadata", {{"annotations", {{"more", "v\xc3\xa9"}}}}}});
  ASSERT_TRUE(patched.ok()) << patched.status();
  ASSERT_TRUE(server_->WaitFor(
      [&] {
        auto seen = inf.Get("default", "u");
        return seen && (*seen)["metadata"]["annotations"].value("more", "") == "v\xc3\xa9";
      },
      10s));
  EXPECT_EQ((*inf.Get("default", "u"))["metadata"]["annotations"]["note"], text);
  inf.Stop();
}

TEST(TokenBucketTest, BurstThenRate) {
  TokenBucket b(1000, 5);
  for (int i = 0; i < 5; ++i) b.Take();  // the burst is available at once
  b.Take();                              // then tokens refill at the rate (no deadlock)
  SUCCEED();
}

}  // namespace
}  // namespace tfjob::op::kube
