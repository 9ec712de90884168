// The ring between members that are threads of this test, each with its own
// Group and listening socket (bound to port 0 here and kept, so no port is
// ever handed on): results against sums computed here in double, bit-for-bit
// agreement between members, bucketing, and the ways a group refuses to hang.
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/collective/group.h"
#include "services/collective/tests/local_members.h"

namespace tfjob::collective {
namespace {

using ::testing::HasSubstr;

struct Cluster {
  std::vector<Peer> members;
  std::vector<std::unique_ptr<Group>> groups;
};

// n members on 127.0.0.1, each listening on a port of its own.
Cluster MakeCluster(int n, Options options, int start = -1) {
  Cluster c;
  auto local = testing::ListenLocally(n);
  EXPECT_TRUE(local.ok()) << local.status();
  if (!local.ok()) return c;
  c.members = local->members;
  std::vector<net::Listener>& listeners = local->listeners;
  for (int r = 0; r < n; ++r) {
    if (start >= 0 && r >= start) {
      c.groups.emplace_back();  // never starts: nothing answers on its port
      continue;
    }
    auto g = Group::Create(c.members, r, options, std::move(listeners[static_cast<size_t>(r)]));
    EXPECT_TRUE(g.ok()) << g.status();
    c.groups.push_back(std::move(g).value());
  }
  return c;
}

// Runs fn(rank) on one thread per started member and collects the statuses.
std::vector<Status> OnEveryMember(Cluster& c, const std::function<Status(int)>& fn) {
  std::vector<Status> out(c.groups.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < c.groups.size(); ++r) {
    if (!c.groups[r]) continue;
    threads.emplace_back([&, r] { out[r] = fn(static_cast<int>(r)); });
  }
  for (auto& t : threads) t.join();
  return out;
}

Options Fast() {
  Options o;
  o.timeout = std::chrono::milliseconds(3000);
  o.rendezvous_timeout = std::chrono::milliseconds(10000);
  return o;
}

// Member r's input: values that differ per member and per element, so a
// wrong segment, a missed chunk or a double-add shows.
Tensor Input(int r, int64_t count, uint32_t seed = 1) {
  std::mt19937 rng(seed * 7919 + static_cast<uint32_t>(r));
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = u(rng);
  return *Tensor::FromVector({count}, v);
}

// A job's TLS material (common/pki.h), made once: key generation is the slow part.
std::shared_ptr<const tls::Config> JobTls() {
  static const std::shared_ptr<const tls::Config> config = [] {
    auto pem = pki::NewJobPki("ring-test");
    EXPECT_TRUE(pem.ok()) << pem.status();
    auto c = tls::Config::FromPem(*pem);
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }();
  return config;
}

// (members, elements, mutual TLS on every link)
class RingAllReduceTest : public ::testing::TestWithParam<std::tuple<int, int64_t, bool>> {};

TEST_P(RingAllReduceTest, SumsMatchAndEveryMemberHasTheSameBits) {
  // Plain variables: clang 14 cannot capture structured bindings in lambdas.
  const int n = std::get<0>(GetParam());
  const int64_t count = std::get<1>(GetParam());
  Options o = Fast();
  if (std::get<2>(GetParam())) o.tls = JobTls();
  o.chunk_bytes = 4096;  // many chunks per segment, so the pipeline is exercised
  Cluster c = MakeCluster(n, o);
  std::vector<Tensor> results(static_cast<size_t>(n));
  auto st = OnEveryMember(c, [&](int r) -> Status {
    RETURN_IF_ERROR(c.groups[static_cast<size_t>(r)]->Form(0).status());
    Tensor t = Input(r, count);
    RETURN_IF_ERROR(c.groups[static_cast<size_t>(r)]->comm()->AllReduce(t, ReduceOp::kSum));
    results[static_cast<size_t>(r)] = t;
    return Status::Ok();
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s;
  std::vector<double> want(static_cast<size_t>(count), 0.0);
  for (int r = 0; r < n; ++r) {
    const Tensor in = Input(r, count);
    for (int64_t i = 0; i < count; ++i) want[static_cast<size_t>(i)] += in.data<float>()[i];
  }
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_NEAR(results[0].data<float>()[i], want[static_cast<size_t>(i)], 1e-5) << "element " << i;
  }
  for (int r = 1; r < n; ++r) EXPECT_TRUE(Equal(results[static_cast<size_t>(r)], results[0])) << "member " << r;
}

// Sizes below the member count (empty segments), odd sizes, and one that
// spans many chunks.
INSTANTIATE_TEST_SUITE_P(Sizes, RingAllReduceTest,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(int64_t{1}, int64_t{3}, int64_t{1001}, int64_t{70001}),
                                            ::testing::Values(false)));
INSTANTIATE_TEST_SUITE_P(Tls, RingAllReduceTest,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values(int64_t{3}, int64_t{70001}),
                                            ::testing::Values(true)));

// Large enough that sends outrun the socket buffers and TLS has to hold
// back ciphertext, with a keepalive interval short enough to interleave.
TEST(RingTest, OverMutualTlsLargeTensorsAndEveryOperationAgree) {
  const int n = 3;
  Options o = Fast();
  o.tls = JobTls();
  o.timeout = std::chrono::milliseconds(400);
  Cluster c = MakeCluster(n, o);
  std::vector<Tensor> reduced(n), broadcast(n);
  auto st = OnEveryMember(c, [&](int r) -> Status {
    Group& g = *c.groups[static_cast<size_t>(r)];
    RETURN_IF_ERROR(g.Form(0).status());
    Tensor t = Input(r, 3'000'001);
    RETURN_IF_ERROR(g.comm()->AllReduce(t, ReduceOp::kSum));
    reduced[static_cast<size_t>(r)] = t;
    // Idle for longer than the keepalive interval: links stay up.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Tensor b = r == 1 ? Input(1, 500'000, 3) : *Tensor::Create(DType::kFloat32, {500'000});
    Tensor* bp[] = {&b};
    RETURN_IF_ERROR(g.comm()->Broadcast(bp, 1));
    broadcast[static_cast<size_t>(r)] = b;
    return g.comm()->Barrier();
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s;
  std::vector<Tensor> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(Input(r, 3'000'001));
  for (int64_t i = 0; i < 3'000'001; i += 997) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += inputs[static_cast<size_t>(r)].data<float>()[i];
    ASSERT_NEAR(reduced[0].data<float>()[i], want, 1e-5) << "element " << i;
  }
  for (int r = 1; r < n; ++r) EXPECT_TRUE(Equal(reduced[static_cast<size_t>(r)], reduced[0]));
  for (int r = 0; r < n; ++r) EXPECT_TRUE(Equal(broadcast[static_cast<size_t>(r)], Input(1, 500'000, 3)));
}

TEST(RingTest, AMemberWithAnotherJobsCertificateNeverJoins) {
  Options o = Fast();
  o.tls = JobTls();
  o.rendezvous_timeout = std::chrono::milliseconds(2000);
  Options other = o;
  auto pem = pki::NewJobPki("ring-test");  // same name, another CA
  ASSERT_TRUE(pem.ok());
  other.tls = *tls::Config::FromPem(*pem);
  auto local = testing::ListenLocally(2);
  ASSERT_TRUE(local.ok()) << local.status();
  std::vector<Peer>& members = local->members;
  std::vector<net::Listener>& listeners = local->listeners;
  auto leader = Group::Create(members, 0, o, std::move(listeners[0]));
  auto intruder = Group::Create(members, 1, other, std::move(listeners[1]));
  ASSERT_TRUE(leader.ok() && intruder.ok());
  Status s1;
  std::thread t([&] { s1 = (*intruder)->Form(0).status(); });
  Status s0 = (*leader)->Form(0).status();
  t.join();
  EXPECT_FALSE(s1.ok());
  EXPECT_THAT(s1.message(), HasSubstr("worker:0")) << s1;
  EXPECT_EQ(s0.code(), Code::kDeadlineExceeded) << s0;  // the leader never saw a member join
}

TEST(RingTest, MeanBucketsGatherBroadcastAndBarrier) {
  const int n = 3;
  Options o = Fast();
  o.bucket_bytes = 1024;  // the small tensors share a bucket, the big one goes alone
  o.chunk_bytes = 512;
  Cluster c = MakeCluster(n, o);
  std::vector<std::vector<Tensor>> reduced(n);
  std::vector<Tensor> gathered(n), broadcast(n);
  std::vector<std::string> bytes(n);
  auto st = OnEveryMember(c, [&](int r) -> Status {
    Group& g = *c.groups[static_cast<size_t>(r)];
    ASSIGN_OR_RETURN(Group::Formation f, g.Form(r == 1 ? 7 : 0));
    if (f.source_rank != 1 || f.steps != std::vector<int64_t>{0, 7, 0}) return Internal("wrong formation");
    Communicator& comm = *g.comm();
    std::vector<Tensor> ts = {Input(r, 10, 2), Input(r, 5, 3), Input(r, 1000, 4), Input(r, 7, 5)};
    std::vector<Tensor*> ptrs;
    for (auto& t : ts) ptrs.push_back(&t);
    RETURN_IF_ERROR(comm.AllReduce(ptrs, ReduceOp::kMean));
    reduced[static_cast<size_t>(r)] = ts;
    ASSIGN_OR_RETURN(gathered[static_cast<size_t>(r)],
                     comm.AllGather(*Tensor::FromVector({2}, std::vector<int64_t>{r, r * 10})));
    Tensor b = r == 2 ? Input(2, 3000, 9) : *Tensor::Create(DType::kFloat32, {3000});
    Tensor* bp[] = {&b};
    RETURN_IF_ERROR(comm.Broadcast(bp, 2));
    broadcast[static_cast<size_t>(r)] = b;
    bytes[static_cast<size_t>(r)] = r == 0 ? std::string(100001, 'x') + "end" : "";
    RETURN_IF_ERROR(comm.BroadcastBytes(bytes[static_cast<size_t>(r)], 0));
    return comm.Barrier();
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s;
  const std::vector<int64_t> sizes = {10, 5, 1000, 7};
  for (size_t k = 0; k < sizes.size(); ++k) {
    for (int64_t i = 0; i < sizes[k]; ++i) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += Input(r, sizes[k], static_cast<uint32_t>(k + 2)).data<float>()[i];
      ASSERT_NEAR(reduced[0][k].data<float>()[i], want / n, 1e-6);
    }
    for (int r = 1; r < n; ++r) EXPECT_TRUE(Equal(reduced[static_cast<size_t>(r)][k], reduced[0][k]));
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(gathered[static_cast<size_t>(r)].shape(), Shape({6}));
    EXPECT_THAT(std::vector<int64_t>(gathered[static_cast<size_t>(r)].flat<int64_t>().begin(),
                                     gathered[static_cast<size_t>(r)].flat<int64_t>().end()),
                ::testing::ElementsAre(0, 0, 1, 10, 2, 20));
    EXPECT_TRUE(Equal(broadcast[static_cast<size_t>(r)], Input(2, 3000, 9)));
    EXPECT_EQ(bytes[static_cast<size_t>(r)], std::string(100001, 'x') + "end");
  }
}

TEST(RingTest, MismatchedShapesFailEveryMemberWithInvalidArgument) {
  const int n = 3;
  Cluster c = MakeCluster(n, Fast());
  auto st = OnEveryMember(c, [&](int r) -> Status {
    Group& g = *c.groups[static_cast<size_t>(r)];
    RETURN_IF_ERROR(g.Form(0).status());
    Tensor t = r == 1 ? Input(r, 999) : Input(r, 1000);
    return g.comm()->AllReduce(t, ReduceOp::kSum);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(st[static_cast<size_t>(r)].code(), Code::kInvalidArgument)
        << "member " << r << ": " << st[static_cast<size_t>(r)];
    EXPECT_THAT(st[static_cast<size_t>(r)].message(), HasSubstr("disagree"));
    EXPECT_THAT(st[static_cast<size_t>(r)].message(), HasSubstr("999"));
  }
}

TEST(RingTest, SameSizeDifferentShapesIsAMismatchToo) {
  Cluster c = MakeCluster(2, Fast());
  auto st = OnEveryMember(c, [&](int r) -> Status {
    Group& g = *c.groups[static_cast<size_t>(r)];
    RETURN_IF_ERROR(g.Form(0).status());
    Tensor t = *Tensor::Create(DType::kFloat32, r == 0 ? Shape{2, 3} : Shape{3, 2});
    return g.comm()->AllReduce(t, ReduceOp::kSum);
  });
  for (const Status& s : st) EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
}

TEST(RingTest, AMemberThatNeverComesUpIsNamedAfterTheTimeout) {
  Options o = Fast();
  o.rendezvous_timeout = std::chrono::milliseconds(1000);
  Cluster c = MakeCluster(3, o, /*start=*/2);
  const std::string missing = c.members[2].Describe();
  auto st = OnEveryMember(c, [&](int r) { return c.groups[static_cast<size_t>(r)]->Form(0).status(); });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[static_cast<size_t>(r)].code(), Code::kDeadlineExceeded) << st[static_cast<size_t>(r)];
    EXPECT_THAT(st[static_cast<size_t>(r)].message(), HasSubstr(missing));
  }
}

TEST(RingTest, MembersWithDifferentClusterSpecsAreRefused) {
  Options o = Fast();
  o.rendezvous_timeout = std::chrono::milliseconds(2000);
  Cluster c = MakeCluster(2, o, /*start=*/1);
  // Member 1 believes in a third member the leader has never heard of.
  std::vector<Peer> other = c.members;
  other.push_back({"worker:2", "127.0.0.1:9"});
  auto l = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  auto g1 = Group::Create(other, 1, o, std::move(l).value());
  ASSERT_TRUE(g1.ok());
  Status s1;
  std::thread t([&] { s1 = (*g1)->Form(0).status(); });
  Status s0 = c.groups[0]->Form(0).status();
  t.join();
  EXPECT_EQ(s1.code(), Code::kInvalidArgument) << s1;
  EXPECT_THAT(s1.message(), HasSubstr("same TF_CONFIG cluster"));
  EXPECT_FALSE(s0.ok());
}

TEST(RingTest, ReformingBumpsTheGenerationAndKeepsWorking) {
  Cluster c = MakeCluster(2, Fast());
  std::vector<int64_t> gens(2);
  auto st = OnEveryMember(c, [&](int r) -> Status {
    Group& g = *c.groups[static_cast<size_t>(r)];
    RETURN_IF_ERROR(g.Form(0).status());
    Tensor t = Input(r, 100);
    RETURN_IF_ERROR(g.comm()->AllReduce(t, ReduceOp::kSum));
    ASSIGN_OR_RETURN(Group::Formation f, g.Form(1));
    gens[static_cast<size_t>(r)] = f.generation;
    return g.comm()->AllReduce(t, ReduceOp::kSum);
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(gens, (std::vector<int64_t>{2, 2}));
}

TEST(RingTest, OneMemberNeedsNoNetwork) {
  auto g = Group::Create({{"worker:0", "127.0.0.1:1"}}, 0, Fast());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE((*g)->Form(0).ok());
  Tensor t = Input(0, 10);
  const Tensor before = t.Clone();
  ASSERT_TRUE((*g)->comm()->AllReduce(t, ReduceOp::kMean).ok());
  EXPECT_TRUE(Equal(t, before));
  EXPECT_TRUE((*g)->comm()->Barrier().ok());
}

TEST(MembersTest, ChiefFirstThenWorkersByIndexWithoutPsOrEvaluator) {
  auto spec = cluster::ClusterSpec::FromLists(
      {{"chief", {"c:1"}}, {"ps", {"p:1"}}, {"worker", {"w0:1", "w1:1"}}, {"evaluator", {"e:1"}}});
  ASSERT_TRUE(spec.ok());
  auto m = MembersFromCluster(*spec);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[0].name, "chief:0");
  EXPECT_EQ((*m)[2].address, "w1:1");
  EXPECT_EQ(*RankOf(*m, "worker", 1), 2);
  EXPECT_EQ(RankOf(*m, "ps", 0).status().code(), Code::kNotFound);
  EXPECT_FALSE(MembersFromCluster(*cluster::ClusterSpec::FromLists({{"ps", {"p:1"}}})).ok());
}

TEST(ImplementationTest, Parses) {
  EXPECT_EQ(*ParseImplementation("RING"), Implementation::kRing);
  EXPECT_EQ(*ParseImplementation("nccl"), Implementation::kNccl);
  EXPECT_EQ(*ParseImplementation("auto"), Implementation::kAuto);
  EXPECT_EQ(ParseImplementation("mpi").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace tfjob::collective
