// The informer and REST client against the real API server (envtest), the
// faults it cannot produce on cue from the FaultProxy in front of it:
// list+watch, a dropped watch, relist after 410 Gone on a watch and on a
// continue token, paging, and the client's rate limit.
#include "kube/informer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kube/rest_client.h"
#include "kube/tests/real_server.h"

namespace tfjob::kube {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

json Pod(const std::string& name, const std::string& job) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"labels", {{"training.kubeflow.org/job-name", job}}}}},
          {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "i"}}})}}}};
}

class InformerTest : public RealServerTest {
 protected:
  // The test's own writes, straight to the server (as the kubelet and other
  // clients would): faults and the proxy's request log are the informer's.
  void Create(const json& pod) {
    auto r = admin_->Create(kPods, ns_, pod);
    ASSERT_TRUE(r.ok()) << r.status().message();
  }
  void Delete(const std::string& name) {
    Status s = admin_->Delete(kPods, ns_, name, "Background");
    ASSERT_TRUE(s.ok()) << s.message();
  }
  // The next list of pods in the test's namespace gets 410 Expired, as a
  // continue token or watch version the server has compacted away does.
  // `method`: "WATCH" or "GET" (the next page of a list).
  void Expire(const std::string& method) {
    const std::string what = method == "WATCH" ? "resourceVersion for the provided watch" : "continue parameter";
    ASSERT_TRUE(proxy_
                    ->InjectFault({.method = method,
                                   .path_regex = "/api/v1/namespaces/" + ns_ + "/pods",
                                   .code = 410,
                                   .count = 1,
                                   .message = "The provided " + what + " is too old."})
                    .ok());
  }
};

TEST_F(InformerTest, ListsWatchesAndSurvivesDroppedWatchesAndCompaction) {
  Create(Pod("a", "j"));
  Informer inf(*client_, kPods, ns_, "training.kubeflow.org/job-name");
  std::atomic<int> events{0};
  inf.AddHandler([&](const std::string&, const json&) { ++events; });
  inf.Start();
  ASSERT_TRUE(WaitFor([&] { return inf.HasSynced() && inf.Get(ns_, "a").has_value(); }, 10s));
  Create(Pod("b", "j"));
  ASSERT_TRUE(WaitFor([&] { return inf.Get(ns_, "b").has_value(); }, 10s));
  // A pod without the selected label never enters the cache.
  json other = Pod("c", "j");
  other["metadata"]["labels"] = json::object();
  Create(other);

  // Watches dropped and, meanwhile, writes; the informer's version is gone
  // when it watches again (410, the proxy's: a real server compacts when it
  // will), so it relists and still ends up exact, deletions included.
  const int64_t relists = inf.relists();
  Expire("WATCH");
  proxy_->DropWatches();
  Delete("a");
  for (int i = 0; i < 10; ++i) Create(Pod(std::string("p").append(std::to_string(i)), "j"));
  ASSERT_TRUE(WaitFor([&] { return inf.List(ns_).size() == 11 && !inf.Get(ns_, "a"); }, 15s)) << inf.List(ns_).size();
  EXPECT_GT(inf.relists(), relists);
  EXPECT_FALSE(inf.Get(ns_, "c").has_value());
  EXPECT_EQ(inf.List(ns_, {{"training.kubeflow.org/job-name", "j"}}).size(), 11u);
  inf.Stop();
}

TEST_F(InformerTest, ClientMapsConflictsAndNotFound) {
  Client& c = *client_;  // the interface carries the default arguments
  auto created = c.Create(kPods, ns_, Pod("x", "j"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(c.Create(kPods, ns_, Pod("x", "j")).status().code(), Code::kAlreadyExists);
  json stale = *created;
  ASSERT_TRUE(c.MergePatch(kPods, ns_, "x", json{{"metadata", {{"labels", {{"k", "v"}}}}}}).ok());
  EXPECT_EQ(c.Update(kPods, ns_, stale).status().code(), Code::kAborted);  // 409 Conflict
  EXPECT_EQ(c.Get(kPods, ns_, "nope").status().code(), Code::kNotFound);
  EXPECT_EQ(c.Delete(kPods, ns_, "nope").code(), Code::kNotFound);
  EXPECT_TRUE(c.Delete(kPods, ns_, "x").ok());
}

// Request bodies and watch lines go through cpprest as byte vectors (its
// std::string overloads are undefined behaviour, which the ASan + UBSan build
// reports); multi-byte UTF-8 must still arrive byte for byte both ways.
TEST_F(InformerTest, NonAsciiTextSurvivesRequestBodiesAndWatchLines) {
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  Informer inf(*client_, kPods, ns_, "training.kubeflow.org/job-name");
  inf.Start();
  ASSERT_TRUE(WaitFor([&] { return inf.HasSynced(); }, 10s));
  json pod = Pod("u", "j");
  pod["metadata"]["annotations"] = {{"note", text}};
  Client& c = *client_;
  auto created = c.Create(kPods, ns_, pod);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["metadata"]["annotations"]["note"], text);
  auto patched = c.MergePatch(kPods, ns_, "u", json{{"metadata", {{"annotations", {{"more", "v\xc3\xa9"}}}}}});
  ASSERT_TRUE(patched.ok()) << patched.status();
  ASSERT_TRUE(WaitFor(
      [&] {
        auto seen = inf.Get(ns_, "u");
        return seen && (*seen)["metadata"]["annotations"].value("more", "") == "v\xc3\xa9";
      },
      10s));
  EXPECT_EQ((*inf.Get(ns_, "u"))["metadata"]["annotations"]["note"], text);
  inf.Stop();
}

// Paginated lists: the informer reads in pages of limit/continue and ends up
// with every object.
TEST_F(InformerTest, ListsInPages) {
  for (int i = 0; i < 7; ++i) Create(Pod(std::string("p").append(std::to_string(i)), "j"));
  proxy_->ClearRequests();
  Informer inf(*client_, kPods, ns_, "training.kubeflow.org/job-name");
  inf.SetPageSize(3);
  inf.Start();
  ASSERT_TRUE(WaitFor([&] { return inf.HasSynced(); }, 10s));
  EXPECT_EQ(inf.List(ns_).size(), 7u);
  std::vector<std::string> lists;
  for (const auto& r : proxy_->Requests()) {
    if (r.method == "GET" && !r.watch && r.path == "/api/v1/namespaces/" + ns_ + "/pods") lists.push_back(r.query);
  }
  ASSERT_EQ(lists.size(), 3u) << ::testing::PrintToString(lists);  // 3 + 3 + 1
  EXPECT_THAT(lists[0], HasSubstr("limit=3"));
  EXPECT_THAT(lists[0], ::testing::Not(HasSubstr("continue=")));
  EXPECT_THAT(lists[1], HasSubstr("continue="));
  EXPECT_THAT(lists[2], HasSubstr("continue="));
  // The watch starts from the list's version: a pod created now arrives.
  Create(Pod("late", "j"));
  ASSERT_TRUE(WaitFor([&] { return inf.Get(ns_, "late").has_value(); }, 10s));
  inf.Stop();
}

// Wraps a client so a test can act between the pages of a list.
class BetweenPages : public Client {
 public:
  BetweenPages(Client& c, std::function<void()> after_first_page) : c_(c), after_(std::move(after_first_page)) {}
  StatusOr<json> Get(const Resource& r, const std::string& ns, const std::string& n) override {
    return c_.Get(r, ns, n);
  }
  StatusOr<json> List(const Resource& r, const std::string& ns, const ListOptions& o) override {
    lists.push_back(o);
    auto out = c_.List(r, ns, o);
    if (lists.size() == 1 && after_) after_();
    return out;
  }
  StatusOr<json> Create(const Resource& r, const std::string& ns, const json& o) override {
    return c_.Create(r, ns, o);
  }
  StatusOr<json> Update(const Resource& r, const std::string& ns, const json& o) override {
    return c_.Update(r, ns, o);
  }
  StatusOr<json> UpdateStatus(const Resource& r, const std::string& ns, const json& o) override {
    return c_.UpdateStatus(r, ns, o);
  }
  StatusOr<json> MergePatch(const Resource& r, const std::string& ns, const std::string& n, const json& p,
                            bool status) override {
    return c_.MergePatch(r, ns, n, p, status);
  }
  Status Delete(const Resource& r, const std::string& ns, const std::string& n, const std::string& p,
                int64_t grace) override {
    return c_.Delete(r, ns, n, p, grace);
  }
  Status Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
               const std::function<bool(const WatchEvent&)>& f, const std::atomic<bool>& stop) override {
    return c_.Watch(r, ns, o, f, stop);
  }
  std::vector<ListOptions> lists;

 private:
  Client& c_;
  std::function<void()> after_;
};

// A continue token compacted away between pages (410, the proxy's: a real
// server compacts when it will) restarts the list without pages, as
// client-go's pager does; nothing is lost or duplicated.
TEST_F(InformerTest, ExpiredContinueTokenFallsBackToAFullList) {
  for (int i = 0; i < 5; ++i) Create(Pod(std::string("p").append(std::to_string(i)), "j"));
  BetweenPages client(*client_, [&] {
    Delete("p4");
    for (int i = 0; i < 6; ++i) Create(Pod(std::string("q").append(std::to_string(i)), "j"));
    Expire("GET");
  });
  Informer inf(client, kPods, ns_, "training.kubeflow.org/job-name");
  inf.SetPageSize(2);
  inf.Start();
  ASSERT_TRUE(WaitFor([&] { return inf.HasSynced(); }, 10s));
  inf.Stop();
  ASSERT_GE(client.lists.size(), 3u);
  EXPECT_EQ(client.lists[0].limit, 2);
  EXPECT_FALSE(client.lists[1].continue_token.empty());
  EXPECT_EQ(client.lists[2].limit, 0);  // the fallback: one full list
  EXPECT_TRUE(client.lists[2].continue_token.empty());
  EXPECT_EQ(inf.List(ns_).size(), 10u);  // p0..p3 and q0..q5
  EXPECT_FALSE(inf.Get(ns_, "p4").has_value());
}

// A clock that only moves when the limiter sleeps (or the test says so), so
// the limiter's waits are exact.
class FakeRateClock : public RateClock {
 public:
  std::chrono::steady_clock::time_point Now() override { return now_; }
  void SleepFor(std::chrono::nanoseconds d) override {
    slept_ += d;
    now_ += d;
  }
  void Advance(std::chrono::nanoseconds d) { now_ += d; }
  std::chrono::nanoseconds slept() const { return slept_; }

 private:
  std::chrono::steady_clock::time_point now_{};
  std::chrono::nanoseconds slept_{0};
};

// Nanoseconds a call to Take() waited.
int64_t WaitOf(TokenBucket& b, FakeRateClock& clock) {
  const auto before = clock.slept();
  b.Take();
  return (clock.slept() - before).count();
}

// client-go's token bucket: `burst` requests at once, then one every 1/qps s;
// an idle bucket refills to `burst`, never more. Ignoring either number (a
// bucket of another size, or another rate) fails these counts and waits.
TEST(TokenBucketTest, BurstThenRate) {
  auto clock = std::make_shared<FakeRateClock>();
  TokenBucket b(10, 5, clock);  // 10 qps: a token every 100 ms
  for (int i = 0; i < 5; ++i) EXPECT_EQ(WaitOf(b, *clock), 0) << "request " << i << " is within the burst";
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(WaitOf(b, *clock), 100'000'000, 1'000) << "request " << 5 + i;
  // Idle for 10 s: the bucket is full again, at 5 tokens, not 100.
  clock->Advance(std::chrono::seconds(10));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(WaitOf(b, *clock), 0);
  EXPECT_NEAR(WaitOf(b, *clock), 100'000'000, 1'000);
  // Half a period idle: the next token is half a period away.
  clock->Advance(std::chrono::milliseconds(50));
  EXPECT_NEAR(WaitOf(b, *clock), 50'000'000, 1'000);
}

// The client's requests go through the bucket with the options' qps and burst.
TEST_F(InformerTest, RestClientAppliesQpsAndBurst) {
  auto clock = std::make_shared<FakeRateClock>();
  RestOptions o;
  o.qps = 4;  // a token every 250 ms
  o.burst = 3;
  o.rate_clock = clock;
  ClusterConfig c;
  c.server = proxy_->url();
  auto limited = RestClient::Create(c, o);
  ASSERT_TRUE(limited.ok()) << limited.status();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*limited)->Get(kPods, ns_, "none").status().code() == Code::kNotFound);
  EXPECT_EQ(clock->slept().count(), 0);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE((*limited)->Get(kPods, ns_, "none").status().code() == Code::kNotFound);
  EXPECT_NEAR(static_cast<double>(clock->slept().count()), 500e6, 1e4);
  EXPECT_EQ((*limited)->requests(), 5);
}

// The cache at scale: objects kept encoded after the transform, a label
// index that List by that label reads instead of scanning, and a relist
// that finds nothing changed delivers nothing (so a resync makes the
// controller do, and write, nothing).
TEST_F(InformerTest, IndexedEncodedCacheAndAQuietRelist) {
  for (int j = 0; j < 3; ++j) {
    for (int i = 0; i < 4; ++i) {
      Create(Pod("j" + std::to_string(j) + "-" + std::to_string(i), "j" + std::to_string(j)));
    }
  }
  // The transform keeps the metadata only.
  Informer inf(*client_, kPods, ns_, "training.kubeflow.org/job-name", [](json o) {
    return json{{"metadata", o["metadata"]}};
  });
  inf.SetIndexLabel("training.kubeflow.org/job-name");
  std::atomic<int> events{0};
  std::atomic<bool> relabelled{false};
  inf.AddHandler([&](const std::string& type, const json& o) {
    ++events;
    if (type == "MODIFIED" && o["metadata"]["name"] == "j1-1") relabelled = true;
  });
  inf.Start();
  ASSERT_TRUE(WaitFor([&] { return inf.HasSynced() && inf.size() == 12; }, 10s));
  EXPECT_EQ(events.load(), 12);

  const auto j1 = inf.List(ns_, {{"training.kubeflow.org/job-name", "j1"}});
  ASSERT_EQ(j1.size(), 4u);
  for (const auto& p : j1) {
    EXPECT_EQ(p["metadata"]["labels"]["training.kubeflow.org/job-name"], "j1");
    EXPECT_FALSE(p.contains("spec")) << "the cache keeps what the transform returned";
  }
  EXPECT_TRUE(inf.List(ns_, {{"training.kubeflow.org/job-name", "none"}}).empty());
  EXPECT_TRUE(inf.List("other", {{"training.kubeflow.org/job-name", "j1"}}).empty());
  EXPECT_EQ(inf.List(ns_).size(), 12u);
  // Encoded: well under the objects' JSON text.
  size_t text = 0;
  for (const auto& p : inf.List(ns_)) text += p.dump().size();
  EXPECT_LT(inf.encoded_bytes(), text);

  // A pod deleted and one relabelled move in the index.
  Delete("j1-0");
  Client& admin = *admin_;
  ASSERT_TRUE(
      admin.MergePatch(kPods, ns_, "j1-1", {{"metadata", {{"labels", {{"training.kubeflow.org/job-name", "j2"}}}}}})
          .ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return inf.List(ns_, {{"training.kubeflow.org/job-name", "j1"}}).size() == 2 &&
               inf.List(ns_, {{"training.kubeflow.org/job-name", "j2"}}).size() == 5;
      },
      10s));

  // Every event delivered: the relabel is the last write. A real server
  // writes a pod's deletion as two events (MODIFIED with its
  // deletionTimestamp, then DELETED): 12 + 2 + 1.
  ASSERT_TRUE(WaitFor([&] { return relabelled.load(); }, 10s));
  const int settled = events.load();
  EXPECT_EQ(settled, 15);

  // Nothing changes, the watch drops, the informer lists again: no event.
  const int64_t relists = inf.relists();
  proxy_->DropWatches();
  ASSERT_TRUE(WaitFor([&] { return inf.relists() > relists; }, 10s));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(events.load(), settled) << "a relist with nothing changed delivered events";
  inf.Stop();
}

}  // namespace
}  // namespace tfjob::kube
