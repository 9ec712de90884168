// Leader election with client-go's semantics against the real API server
// (tests/support/envtest.h: one control plane per executable, a namespace
// per test, the Lease stored and versioned by kube-apiserver), in virtual
// time: candidates run their real loops on their own threads,
// but the clock only moves when every thread is asleep, so a 15 s lease
// costs no wall time and machine load cannot change the outcome.
// Candidates' wall clocks are skewed by more than a lease (both ways) and
// their monotonic clocks have unrelated origins: there is still one leader
// at a time, a partitioned leader steps down before anyone takes over, and
// a takeover comes a full lease after the last change the successor saw.
#include "operator/leader.h"

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kube/config.h"
#include "kube/rest_client.h"
#include "tests/support/envtest.h"

namespace tfjob::op {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;
namespace t = ::tfjob::testing;

// Time shared by `participants` threads: it moves only when every one of
// them sleeps, straight to the earliest wake-up.
class VirtualTime {
 public:
  explicit VirtualTime(int participants) : active_(participants) {}
  Steady::time_point Now() {
    std::lock_guard l(mu_);
    return now_;
  }
  double Seconds() { return std::chrono::duration<double>(Now() - kStart).count(); }
  void SleepFor(std::chrono::nanoseconds d, const std::atomic<bool>& stop) {
    std::unique_lock l(mu_);
    const Steady::time_point wake = now_ + std::chrono::duration_cast<Steady::duration>(d);
    auto it = wakes_.insert(wake);
    while (now_ < wake && !stop) {
      // Everyone asleep and nobody due: jump to the earliest wake-up. A
      // sleeper already due has not left yet; it must run first.
      if (static_cast<int>(wakes_.size()) == active_ && *wakes_.begin() > now_) {
        now_ = *wakes_.begin();
        cv_.notify_all();
        continue;
      }
      cv_.wait(l);
    }
    wakes_.erase(it);
  }
  // A participant is done for good.
  void Leave() {
    std::lock_guard l(mu_);
    --active_;
    cv_.notify_all();
  }
  // Wakes sleepers so they notice a stop flag.
  void Kick() {
    std::lock_guard l(mu_);
    cv_.notify_all();
  }

  static constexpr Steady::time_point kStart = Steady::time_point(std::chrono::hours(1));

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  Steady::time_point now_ = kStart;
  int active_;
  std::multiset<Steady::time_point> wakes_;
};

// One candidate's view of time: virtual time, with a wall clock skewed by
// `wall_skew` and a monotonic clock whose origin is `steady_offset` away.
class CandidateClock : public LeaderClock {
 public:
  CandidateClock(VirtualTime& vt, std::chrono::seconds wall_skew, std::chrono::hours steady_offset)
      : vt_(vt), wall_skew_(wall_skew), steady_offset_(steady_offset) {}
  std::chrono::system_clock::time_point Wall() override {
    return std::chrono::system_clock::from_time_t(1893456000) +  // 2030-01-01
           std::chrono::duration_cast<std::chrono::system_clock::duration>(vt_.Now() - VirtualTime::kStart) +
           wall_skew_;
  }
  Steady::time_point Now() override { return vt_.Now() + steady_offset_; }
  void SleepFor(std::chrono::nanoseconds d, const std::atomic<bool>& stop) override { vt_.SleepFor(d, stop); }

 private:
  VirtualTime& vt_;
  std::chrono::seconds wall_skew_;
  std::chrono::hours steady_offset_;
};

// A client that can be cut off from the API server (a network partition).
class PartitionableClient : public kube::Client {
 public:
  explicit PartitionableClient(kube::Client& c) : c_(c) {}
  std::atomic<bool> partitioned{false};
  StatusOr<json> Get(const kube::Resource& r, const std::string& ns, const std::string& n) override {
    if (partitioned) return Unavailable("partitioned");
    return c_.Get(r, ns, n);
  }
  StatusOr<json> List(const kube::Resource& r, const std::string& ns, const kube::ListOptions& o) override {
    if (partitioned) return Unavailable("partitioned");
    return c_.List(r, ns, o);
  }
  StatusOr<json> Create(const kube::Resource& r, const std::string& ns, const json& o) override {
    if (partitioned) return Unavailable("partitioned");
    return c_.Create(r, ns, o);
  }
  StatusOr<json> Update(const kube::Resource& r, const std::string& ns, const json& o) override {
    if (partitioned) return Unavailable("partitioned");
    return c_.Update(r, ns, o);
  }
  StatusOr<json> UpdateStatus(const kube::Resource& r, const std::string& ns, const json& o) override {
    if (partitioned) return Unavailable("partitioned");
    return c_.UpdateStatus(r, ns, o);
  }
  StatusOr<json> MergePatch(const kube::Resource& r, const std::string& ns, const std::string& n, const json& p,
                            bool status) override {
    if (partitioned) return Unavailable("partitioned");
    return c_.MergePatch(r, ns, n, p, status);
  }
  Status Delete(const kube::Resource& r, const std::string& ns, const std::string& n, const std::string& p,
                int64_t grace) override {
    if (partitioned) return Unavailable("partitioned");
    return c_.Delete(r, ns, n, p, grace);
  }
  Status Watch(const kube::Resource& r, const std::string& ns, const kube::WatchOptions& o,
               const std::function<bool(const kube::WatchEvent&)>& f, const std::atomic<bool>& stop) override {
    if (partitioned) return Unavailable("partitioned");
    return c_.Watch(r, ns, o, f, stop);
  }

 private:
  kube::Client& c_;
};

// Who leads, when (virtual seconds), and the most leaders at any moment.
class Ledger {
 public:
  explicit Ledger(VirtualTime& vt) : vt_(vt) {}
  void Started(const std::string& who) {
    std::lock_guard l(mu_);
    ++leaders_;
    max_leaders_ = std::max(max_leaders_, leaders_);
    events_.push_back({who, true, vt_.Seconds()});
  }
  void Stopped(const std::string& who) {
    std::lock_guard l(mu_);
    --leaders_;
    events_.push_back({who, false, vt_.Seconds()});
  }
  struct Event {
    std::string who;
    bool started;
    double at;
  };
  std::vector<Event> events() {
    std::lock_guard l(mu_);
    return events_;
  }
  int max_leaders() {
    std::lock_guard l(mu_);
    return max_leaders_;
  }
  std::string Dump() {
    std::string s;
    for (const auto& e : events())
      s += e.who + (e.started ? " started" : " stopped") + " at " + std::to_string(e.at) + "s\n";
    return s;
  }

 private:
  VirtualTime& vt_;
  std::mutex mu_;
  int leaders_ = 0, max_leaders_ = 0;
  std::vector<Event> events_;
};

// The control plane, a cluster-admin client of it and a namespace of this
// test's own for the Lease. Failure: set-up errors fail the test.
class RealServer {
 public:
  RealServer() {
    std::string why;
    t::ControlPlane* cp = t::ControlPlane::Shared(&why);
    if (cp == nullptr) {
      ADD_FAILURE() << why;
      return;
    }
    auto config = kube::LoadKubeconfig(cp->admin_kubeconfig());
    if (!config.ok()) {
      ADD_FAILURE() << config.status();
      return;
    }
    config_ = *config;
    admin_ = Connect();
    // A namespace per test: names are a DNS label (the name's end tells
    // the parameterised cases apart).
    std::string label;
    for (char ch : std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())) {
      if (std::isalnum(static_cast<unsigned char>(ch))) label += static_cast<char>(std::tolower(ch));
    }
    ns_ = "l-" + label.substr(label.size() > 60 ? label.size() - 60 : 0);
    auto created = admin_->Create(kNamespaces, "", json{{"metadata", {{"name", ns_}}}});
    EXPECT_TRUE(created.ok()) << created.status();
  }
  ~RealServer() {
    if (admin_ && !ns_.empty()) (void)admin_->Delete(kNamespaces, "", ns_, "");
  }
  bool ok() const { return admin_ != nullptr; }
  // A client of its own, as cluster-admin.
  std::unique_ptr<kube::RestClient> Connect(kube::RestOptions ro = {}) const {
    auto c = kube::RestClient::Create(config_, ro);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  const std::string& ns() const { return ns_; }
  json LeaseSpec() const {
    auto l = admin_->Get(kLeases, ns_, "tfjob-operator-leader");
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? (*l)["spec"] : json();
  }

 private:
  static inline const kube::Resource kNamespaces{"", "v1", "namespaces"};
  static inline const kube::Resource kLeases{"coordination.k8s.io", "v1", "leases"};
  kube::ClusterConfig config_;
  std::unique_ptr<kube::RestClient> admin_;
  std::string ns_;
};

struct Candidate {
  std::string name;
  std::unique_ptr<kube::RestClient> rest;
  std::unique_ptr<PartitionableClient> client;
  std::shared_ptr<CandidateClock> clock;
  std::unique_ptr<LeaderElector> elector;
  std::thread thread;
  std::atomic<bool> lost{false};
};

class LeaderElectionTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<RealServer>();
    ASSERT_TRUE(server_->ok());
  }
  void TearDown() override {
    stop_ = true;
    if (vt_) vt_->Kick();
    for (auto& c : candidates_) {
      if (c->thread.joinable()) c->thread.join();
    }
  }

  // Candidates start at once, each on its thread: acquire, hold, and (when
  // stopped while leading) release.
  void Start(const std::vector<std::pair<std::string, std::chrono::seconds>>& skews) {
    vt_ = std::make_unique<VirtualTime>(static_cast<int>(skews.size()) + 1);  // + the test thread
    ledger_ = std::make_unique<Ledger>(*vt_);
    int i = 0;
    for (const auto& entry : skews) {
      // Not a structured binding: clang 14 cannot capture those in lambdas.
      const std::string name = entry.first;
      const std::chrono::seconds skew = entry.second;
      auto c = std::make_unique<Candidate>();
      c->name = name;
      kube::RestOptions ro;
      ro.qps = 10000;
      ro.burst = 10000;
      c->rest = server_->Connect(ro);
      ASSERT_NE(c->rest, nullptr);
      c->client = std::make_unique<PartitionableClient>(*c->rest);
      c->clock = std::make_shared<CandidateClock>(*vt_, skew, std::chrono::hours(1000 * i++));
      LeaderOptions o;
      o.ns = server_->ns();
      o.identity = name;
      o.clock = c->clock;  // client-go's defaults: 15 s, 10 s, 2 s
      o.on_started_leading = [this, name] { ledger_->Started(name); };
      o.on_stopped_leading = [this, name] { ledger_->Stopped(name); };
      c->elector = std::make_unique<LeaderElector>(*c->client, o);
      candidates_.push_back(std::move(c));
    }
    for (auto& c : candidates_) {
      Candidate* p = c.get();
      p->thread = std::thread([this, p] {
        if (p->elector->Acquire(stop_)) {
          if (!p->elector->Hold(stop_)) p->lost = true;
          if (stop_) p->elector->Release();
        }
        vt_->Leave();
      });
    }
  }
  // Lets `d` of virtual time pass.
  void Run(std::chrono::seconds d) { vt_->SleepFor(d, never_); }
  Candidate* Leader() {
    for (auto& c : candidates_) {
      if (c->elector->IsLeader()) return c.get();
    }
    return nullptr;
  }
  json LeaseSpec() { return server_->LeaseSpec(); }

  std::unique_ptr<RealServer> server_;
  std::unique_ptr<VirtualTime> vt_;
  std::unique_ptr<Ledger> ledger_;
  std::vector<std::unique_ptr<Candidate>> candidates_;
  std::atomic<bool> stop_{false}, never_{false};
};

// The second candidate's wall clock is off by the parameter (seconds): more
// than a lease, ahead or behind.
TEST_P(LeaderElectionTest, SkewedClocksStillSeeOneLeaderAtATime) {
  const std::chrono::seconds skew(GetParam());
  Start({{"a", 0s}, {"b", skew}, {"c", -skew / 2}});
  Run(121s);  // an odd second: no candidate wakes with the test thread
  // One leader from the start, never challenged while it renews, although
  // the skewed candidates read its renewTime as long past or far ahead.
  ASSERT_EQ(ledger_->events().size(), 1u) << ledger_->Dump();
  Candidate* first = Leader();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(LeaseSpec()["holderIdentity"], first->name);
  EXPECT_EQ(LeaseSpec()["leaseTransitions"], 0);

  // The leader is cut off. It gives up within retry period + renew deadline
  // of its last renewal; a successor takes over only a full lease after the
  // last change it saw, so never while the old leader still believes.
  first->client->partitioned = true;
  const double cut = vt_->Seconds();
  Run(60s);  // to 181 s, again odd
  const auto events = ledger_->events();
  ASSERT_EQ(events.size(), 3u) << ledger_->Dump();
  EXPECT_EQ(events[1].who, first->name);
  EXPECT_FALSE(events[1].started);
  EXPECT_LE(events[1].at, cut + 2 + 10) << ledger_->Dump();  // its last renewal was 1 s before the cut
  EXPECT_TRUE(events[2].started);
  EXPECT_NE(events[2].who, first->name);
  EXPECT_GE(events[2].at, cut - 2 + 15) << ledger_->Dump();  // a full lease after the last renewal it could see
  // And no later than a lease after its first attempt that could see the
  // last renewal, plus one more attempt: attempts are at most a retry period
  // x 2.2 apart (the jitter).
  EXPECT_LE(events[2].at, cut + 2 * 2.2 + 15 + 2 * 2.2) << ledger_->Dump();
  EXPECT_EQ(ledger_->max_leaders(), 1) << ledger_->Dump();
  EXPECT_TRUE(first->lost);
  Candidate* second = Leader();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(LeaseSpec()["holderIdentity"], second->name);
  EXPECT_EQ(LeaseSpec()["leaseTransitions"], 1);

  // A clean stop hands the lease back at once.
  stop_ = true;
  vt_->Kick();
  for (auto& c : candidates_) c->thread.join();
  EXPECT_EQ(LeaseSpec()["holderIdentity"], "");
  EXPECT_EQ(LeaseSpec()["leaseDurationSeconds"], 1);
  EXPECT_EQ(ledger_->max_leaders(), 1) << ledger_->Dump();
}

INSTANTIATE_TEST_SUITE_P(Skew, LeaderElectionTest, ::testing::Values(90, -90, 3600), [](const auto& info) {
  return (info.param < 0 ? "Behind" : "Ahead") + std::to_string(std::abs(info.param)) + "s";
});

// The real API server, a client of it, and virtual time that moves only
// when the test thread sleeps: for driving electors step by step.
struct OneThreadOnTheServer {
  std::unique_ptr<RealServer> server = std::make_unique<RealServer>();
  std::unique_ptr<kube::RestClient> rest = server->ok() ? server->Connect() : nullptr;
  VirtualTime vt{1};
  std::atomic<bool> never{false};
  // A candidate's options: `identity`, in this test's namespace, on the
  // virtual time unskewed.
  LeaderOptions Candidate(const std::string& identity) {
    LeaderOptions o;
    o.ns = server->ns();
    o.identity = identity;
    o.clock = std::make_shared<CandidateClock>(vt, 0s, std::chrono::hours(0));
    return o;
  }
};

// One attempt at a time, by hand: a candidate whose wall clock is an hour
// ahead may take over exactly when a full lease has passed, by its own
// clock, since it saw the record change; the holder's renewTime plays no part.
TEST(LeaderStepTest, TakeoverComesAFullLeaseAfterTheLastObservedChange) {
  OneThreadOnTheServer d;
  ASSERT_NE(d.rest, nullptr);
  auto& [server, rest, vt, never] = d;
  LeaderOptions o = d.Candidate("a");
  LeaderElector a(*rest, o);
  o.identity = "b";
  o.clock = std::make_shared<CandidateClock>(vt, 3600s, std::chrono::hours(7));
  LeaderElector b(*rest, o);

  ASSERT_TRUE(a.TryAcquireOrRenew().ok());
  EXPECT_EQ(b.TryAcquireOrRenew().code(), Code::kFailedPrecondition);  // first sight: valid for 15 s from now
  vt.SleepFor(10s, never);
  ASSERT_TRUE(a.TryAcquireOrRenew().ok());  // a renews at 10 s
  vt.SleepFor(14s, never);
  EXPECT_EQ(b.TryAcquireOrRenew().code(), Code::kFailedPrecondition);  // b sees the change now, at 24 s
  vt.SleepFor(14s, never);
  EXPECT_EQ(b.TryAcquireOrRenew().code(), Code::kFailedPrecondition);  // 38 s: 14 s since it saw a change
  vt.SleepFor(1s, never);
  EXPECT_TRUE(b.TryAcquireOrRenew().ok());  // 39 s: a full lease since 24 s
  const json spec = server->LeaseSpec();
  EXPECT_EQ(spec["holderIdentity"], "b");
  EXPECT_EQ(spec["leaseTransitions"], 1);
  // b's clock wrote the times: an hour ahead of a's.
  EXPECT_EQ(spec["renewTime"], "2030-01-01T01:00:39.000000Z");
  // a, still renewing by its own view, is refused: the record changed.
  EXPECT_EQ(a.TryAcquireOrRenew().code(), Code::kFailedPrecondition);
}

// A clock that records how long its owner asks to sleep.
class RecordingClock : public CandidateClock {
 public:
  using CandidateClock::CandidateClock;
  void SleepFor(std::chrono::nanoseconds d, const std::atomic<bool>& stop) override {
    sleeps.push_back(d);
    CandidateClock::SleepFor(d, stop);
  }
  std::vector<std::chrono::nanoseconds> sleeps;
};

// While another holds the lease, a candidate retries after retry_period x
// (1 + 1.2 x U[0,1)), as client-go's JitterUntil, and takes over a full
// lease after it last saw the record change.
TEST(LeaderStepTest, AcquireRetriesAreJitteredAsClientGos) {
  OneThreadOnTheServer d;
  ASSERT_NE(d.rest, nullptr);
  auto& [server, rest, vt, never] = d;
  LeaderOptions o = d.Candidate("a");
  LeaderElector a(*rest, o);
  ASSERT_TRUE(a.TryAcquireOrRenew().ok());  // and never renews

  auto clock = std::make_shared<RecordingClock>(vt, 0s, std::chrono::hours(0));
  o.identity = "b";
  o.clock = clock;
  o.lease_duration = 60s;
  o.renew_deadline = 40s;
  LeaderElector b(*rest, o);
  const double start = vt.Seconds();
  ASSERT_TRUE(b.Acquire(never));
  EXPECT_GE(vt.Seconds() - start, 15.0);  // a's lease, from b's first sight of it
  ASSERT_GE(clock->sleeps.size(), 4u);    // waits under 4.4 s that add up to 15 s
  std::set<int64_t> distinct;
  for (auto d : clock->sleeps) {
    EXPECT_GE(d, 2s);
    EXPECT_LT(d, 4400ms);
    distinct.insert(d.count());
  }
  EXPECT_GT(distinct.size(), 1u) << "every retry waited the same time: no jitter";

  // With a fixed draw the wait is exact: 2 s x (1 + 1.2 x 0.5) = 3.2 s.
  auto fixed = std::make_shared<RecordingClock>(vt, 0s, std::chrono::hours(0));
  o.identity = "c";
  o.clock = fixed;
  o.uniform = [] { return 0.5; };
  LeaderElector c(*rest, o);
  ASSERT_TRUE(c.Acquire(never));  // b never renews either
  ASSERT_FALSE(fixed->sleeps.empty());
  for (auto d : fixed->sleeps) EXPECT_EQ(d, 3200ms);
}

TEST(LeaderStepTest, OptionsFollowClientGosRules) {
  LeaderOptions o;
  o.identity = "x";
  EXPECT_TRUE(ValidateLeaderOptions(o).ok());
  o.renew_deadline = 15s;
  EXPECT_THAT(ValidateLeaderOptions(o).message(), ::testing::HasSubstr("must be greater than the renew deadline"));
  o.renew_deadline = 2400ms;
  EXPECT_THAT(ValidateLeaderOptions(o).message(), ::testing::HasSubstr("greater than 1.2 x the retry period"));
  o.renew_deadline = 2401ms;
  EXPECT_TRUE(ValidateLeaderOptions(o).ok());
  o.identity = "";
  EXPECT_FALSE(ValidateLeaderOptions(o).ok());
}

}  // namespace
}  // namespace tfjob::op
