// NCCL behind the Communicator interface. Runs where NCCL is built in and a
// GPU is visible; elsewhere the GPU test says why it was skipped.
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/collective/group.h"
#include "services/collective/nccl.h"
#include "services/collective/tests/local_members.h"

namespace tfjob::collective {
namespace {

#ifdef TFJOB_HAVE_NCCL
// This executable carries NCCL (tfjob_collective_nccl): registered at
// start-up, as tfjob-runtime does through gpu::RegisterBackend.
[[maybe_unused]] const bool kNcclRegistered = (RegisterNccl(), true);
#endif

TEST(NcclTest, UnavailableSaysWhy) {
  Status s = NcclAvailable();
  if (s.ok()) GTEST_SKIP() << "NCCL and a GPU are available here";
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_FALSE(s.message().empty());
  Options o;
  auto g = Group::Create({{"worker:0", "127.0.0.1:1"}}, 0, o);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->Form(0).ok());
  auto c = MakeNcclCommunicator(*(*g)->comm(), 0, o);
  EXPECT_EQ(c.status().code(), Code::kFailedPrecondition);
}

TEST(NcclTest, AllReduceBroadcastGatherMatchTheRing) {
  if (Status s = NcclAvailable(); !s.ok()) GTEST_SKIP() << "skipped: " << s.message();
  // One member on GPU 0: NCCL allows one member per GPU, and one member
  // still exercises the id exchange over the ring, staging and every call.
  const int gpus = 1;
  Options o;
  auto local = testing::ListenLocally(gpus);
  ASSERT_TRUE(local.ok()) << local.status();
  std::vector<Peer>& members = local->members;
  std::vector<net::Listener>& listeners = local->listeners;
  std::vector<Status> st(static_cast<size_t>(gpus));
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r) {
    threads.emplace_back([&, r] {
      st[static_cast<size_t>(r)] = [&]() -> Status {
        ASSIGN_OR_RETURN(auto g, Group::Create(members, r, o, std::move(listeners[static_cast<size_t>(r)])));
        RETURN_IF_ERROR(g->Form(0).status());
        ASSIGN_OR_RETURN(auto nccl, MakeNcclCommunicator(*g->comm(), r, o));
        Tensor t = *Tensor::FromVector({5}, std::vector<float>{1, 2, 3, 4, 5});
        RETURN_IF_ERROR(nccl->AllReduce(t, ReduceOp::kSum));
        for (int i = 0; i < 5; ++i) {
          if (t.data<float>()[i] != static_cast<float>((i + 1) * gpus)) return Internal("wrong sum");
        }
        Tensor b = *Tensor::FromVector({2}, std::vector<int64_t>{r == 0 ? 7 : 0, r == 0 ? 9 : 0});
        Tensor* bp[] = {&b};
        RETURN_IF_ERROR(nccl->Broadcast(bp, 0));
        if (b.data<int64_t>()[1] != 9) return Internal("wrong broadcast");
        ASSIGN_OR_RETURN(Tensor all, nccl->AllGather(Tensor::Scalar(static_cast<float>(r))));
        if (all.size() != gpus) return Internal("wrong gather");
        return nccl->Barrier();
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace tfjob::collective
