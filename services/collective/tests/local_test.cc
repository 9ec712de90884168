// The in-process communicator that mirrored replicas share.
#include <random>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/collective/local.h"

namespace tfjob::collective {
namespace {

using ::testing::HasSubstr;

Tensor LocalInput(int r, int64_t count) {
  std::mt19937 rng(31 + static_cast<uint32_t>(r));
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = u(rng);
  return *Tensor::FromVector({count}, v);
}

std::vector<Status> OnEveryReplica(int n, const std::function<Status(int)>& fn) {
  std::vector<Status> out(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { out[static_cast<size_t>(r)] = fn(r); });
  for (auto& t : threads) t.join();
  return out;
}

TEST(LocalGroupTest, AllReduceGatherBroadcastBarrier) {
  const int n = 3;
  LocalGroup g(n);
  std::vector<Tensor> sums(n), means(n), gathered(n), bcast(n);
  auto st = OnEveryReplica(n, [&](int r) -> Status {
    Communicator& c = *g.member(r);
    Tensor s = LocalInput(r, 101), m = LocalInput(r, 7);
    RETURN_IF_ERROR(c.AllReduce(s, ReduceOp::kSum));
    RETURN_IF_ERROR(c.AllReduce(m, ReduceOp::kMean));
    sums[static_cast<size_t>(r)] = s;
    means[static_cast<size_t>(r)] = m;
    ASSIGN_OR_RETURN(gathered[static_cast<size_t>(r)], c.AllGather(Tensor::Scalar(static_cast<float>(r))));
    Tensor b = r == 1 ? LocalInput(9, 50) : *Tensor::Create(DType::kFloat32, {50});
    Tensor* bp[] = {&b};
    RETURN_IF_ERROR(c.Broadcast(bp, 1));
    bcast[static_cast<size_t>(r)] = b;
    return c.Barrier();
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s;
  for (int64_t i = 0; i < 101; ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += LocalInput(r, 101).data<float>()[i];
    EXPECT_NEAR(sums[0].data<float>()[i], want, 1e-6);
  }
  for (int64_t i = 0; i < 7; ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += LocalInput(r, 7).data<float>()[i];
    EXPECT_NEAR(means[0].data<float>()[i], want / n, 1e-6);
  }
  for (int r = 1; r < n; ++r) {
    EXPECT_TRUE(Equal(sums[static_cast<size_t>(r)], sums[0]));
    EXPECT_TRUE(Equal(means[static_cast<size_t>(r)], means[0]));
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(Equal(gathered[static_cast<size_t>(r)], *Tensor::FromVector({3}, std::vector<float>{0, 1, 2})));
    EXPECT_TRUE(Equal(bcast[static_cast<size_t>(r)], LocalInput(9, 50)));
  }
}

TEST(LocalGroupTest, DisagreementFailsEveryReplica) {
  LocalGroup g(2);
  auto st = OnEveryReplica(2, [&](int r) {
    Tensor t = LocalInput(r, r == 0 ? 4 : 5);
    return g.member(r)->AllReduce(t, ReduceOp::kSum);
  });
  for (const Status& s : st) {
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("replicas disagree"));
  }
}

TEST(LocalGroupTest, AReplicaThatNeverArrivesIsNamed) {
  Options o;
  o.timeout = std::chrono::milliseconds(200);
  LocalGroup g(3, o);
  auto st = OnEveryReplica(3, [&](int r) -> Status {
    if (r == 2) return Status::Ok();  // never calls
    return g.member(r)->Barrier();
  });
  EXPECT_EQ(st[0].code(), Code::kDeadlineExceeded);
  EXPECT_THAT(st[0].message(), HasSubstr("replica 2 did not reach"));
  EXPECT_EQ(st[1].code(), Code::kDeadlineExceeded);
}

TEST(LocalGroupTest, AbortReleasesTheOthers) {
  LocalGroup g(2);
  auto st = OnEveryReplica(2, [&](int r) -> Status {
    if (r == 1) {
      g.Abort(InvalidArgument("replica 1: bad batch"));
      return Status::Ok();
    }
    return g.member(0)->Barrier();
  });
  EXPECT_EQ(st[0].code(), Code::kInvalidArgument);
  EXPECT_THAT(st[0].message(), HasSubstr("bad batch"));
}

}  // namespace
}  // namespace tfjob::collective
