// The ring's plans without a socket: each test builds every member's plan
// over a buffer of its own and runs them against each other in memory
// (member r's sends arrive, in order, as member r+1's recvs; a send goes
// once the recv it waits for has been applied), then checks what every
// member ends up with and how the plans chunk and pipeline. Values are small
// integers, so float sums are exact in any order.
#include <algorithm>
#include <cstring>
#include <deque>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "services/collective/ring_plan.h"

namespace tfjob::collective {
namespace {

using Bytes = std::vector<std::byte>;

// Runs the members' plans to the end; fails the test when they stall or a
// chunk's size is not the one its receiver expects.
void RunRing(const std::vector<RingPlan>& plans) {
  const size_t n = plans.size();
  std::vector<std::deque<Bytes>> in_flight(n);  // [r]: from r to r+1
  std::vector<size_t> sent(n, 0), received(n, 0);
  bool moved = true;
  while (moved) {
    moved = false;
    for (size_t r = 0; r < n; ++r) {
      const RingPlan& p = plans[r];
      for (; p.SendReady(sent[r], received[r]); ++sent[r], moved = true) {
        const RingPiece& s = p.sends[sent[r]];
        in_flight[r].emplace_back(s.data, s.data + s.bytes);
      }
      std::deque<Bytes>& from_prev = in_flight[(r + n - 1) % n];
      for (; received[r] < p.recvs.size() && !from_prev.empty(); ++received[r], moved = true) {
        const RingPiece& piece = p.recvs[received[r]];
        const Bytes& chunk = from_prev.front();
        ASSERT_EQ(chunk.size(), piece.bytes) << "member " << r << " recv " << received[r];
        if (piece.reduce) {
          float* dst = reinterpret_cast<float*>(piece.data);
          const float* src = reinterpret_cast<const float*>(chunk.data());
          for (size_t k = 0; k < piece.bytes / sizeof(float); ++k) dst[k] += src[k];
        } else {
          std::memcpy(piece.data, chunk.data(), piece.bytes);
        }
        from_prev.pop_front();
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    EXPECT_EQ(sent[r], plans[r].sends.size()) << "member " << r << " never sent everything";
    EXPECT_EQ(received[r], plans[r].recvs.size()) << "member " << r << " never received everything";
    EXPECT_TRUE(in_flight[r].empty()) << "member " << r << " sent more than member " << (r + 1) % n << " expects";
  }
}

float Value(int rank, int64_t i) { return static_cast<float>(rank * 1000 + i % 997); }

// n members' float buffers, plans over them, and the plans run.
struct AllReduceRing {
  AllReduceRing(int n, int64_t count, size_t chunk_bytes) : data(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r) {
      auto& d = data[static_cast<size_t>(r)];
      for (int64_t i = 0; i < count; ++i) d.push_back(Value(r, i));
      plans.push_back(AllReducePlan({r, n, chunk_bytes}, d.data(), count));
    }
  }
  std::vector<std::vector<float>> data;
  std::vector<RingPlan> plans;
};

TEST(RingPlanTest, AllReduceLeavesTheSumWithEveryMember) {
  for (int n : {2, 3, 4, 7}) {
    for (int64_t count : {int64_t{1}, int64_t{n - 1}, int64_t{10}, int64_t{1003}}) {
      for (size_t chunk_bytes : {size_t{4}, size_t{64}, size_t{256} << 10}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(count) +
                     " chunk_bytes=" + std::to_string(chunk_bytes));
        AllReduceRing ring(n, count, chunk_bytes);
        RunRing(ring.plans);
        for (int64_t i = 0; i < count; ++i) {
          float sum = 0;
          for (int r = 0; r < n; ++r) sum += Value(r, i);
          for (int r = 0; r < n; ++r) ASSERT_EQ(ring.data[static_cast<size_t>(r)][static_cast<size_t>(i)], sum);
        }
      }
    }
  }
}

TEST(RingPlanTest, AllReduceSumsForNMinusOneStepsThenCopiesForNMinusOneMore) {
  const int n = 4;
  AllReduceRing ring(n, 4000, size_t{256} << 10);  // one chunk per segment
  for (const RingPlan& p : ring.plans) {
    ASSERT_EQ(p.sends.size(), size_t{2 * (n - 1)});
    ASSERT_EQ(p.recvs.size(), size_t{2 * (n - 1)});
    for (size_t k = 0; k < p.recvs.size(); ++k) {
      EXPECT_EQ(p.recvs[k].reduce, k < n - 1) << "recv " << k;
      EXPECT_EQ(p.recvs[k].bytes, 1000 * sizeof(float)) << "every step moves 1/n of the buffer";
    }
    for (const RingPiece& s : p.sends) EXPECT_FALSE(s.reduce);
  }
}

TEST(RingPlanTest, AllReduceSegmentsDifferByAtMostOneElement) {
  AllReduceRing ring(3, 11, size_t{256} << 10);  // segments of 4, 4 and 3
  std::vector<size_t> sizes;
  for (const RingPiece& p : ring.plans[0].recvs) sizes.push_back(p.bytes / sizeof(float));
  EXPECT_EQ(*std::max_element(sizes.begin(), sizes.end()), 4u);
  EXPECT_EQ(*std::min_element(sizes.begin(), sizes.end()), 3u);
}

// After the first step, each send forwards the chunk that the recv it waits
// for has just written: that is what pipelines the ring.
void ExpectEachLaterSendForwardsTheChunkItWaitsFor(const RingPlan& p) {
  ASSERT_EQ(p.send_after.size(), p.sends.size());
  for (size_t i = 0; i < p.sends.size(); ++i) {
    if (p.send_after[i] < 0) continue;
    const RingPiece& waited = p.recvs.at(static_cast<size_t>(p.send_after[i]));
    EXPECT_EQ(waited.data, p.sends[i].data) << "send " << i;
    EXPECT_EQ(waited.bytes, p.sends[i].bytes) << "send " << i;
  }
}

TEST(RingPlanTest, EachLaterSendForwardsTheChunkItWaitsFor) {
  std::vector<float> data(1000);
  std::vector<std::byte> blocks(5 * 300);
  for (int r = 0; r < 5; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const RingPlan reduce = AllReducePlan({r, 5, 64}, data.data(), 1000);
    ExpectEachLaterSendForwardsTheChunkItWaitsFor(reduce);
    const RingPlan gather = AllGatherPlan({r, 5, 64}, blocks.data(), 300);
    ExpectEachLaterSendForwardsTheChunkItWaitsFor(gather);
    // The first step's sends are this member's own data: they wait for nothing.
    const size_t first_step = 200 * sizeof(float) / 64 + 1;  // a segment of 200 floats in 64-byte chunks
    for (size_t i = 0; i < first_step; ++i) EXPECT_EQ(reduce.send_after[i], -1);
    EXPECT_EQ(reduce.send_after[first_step], 0);
  }
}

TEST(RingPlanTest, ChunksAreNoLargerThanChunkBytesAndTinyChunkBytesAreRaised) {
  std::vector<float> data(1000);
  std::vector<std::byte> bytes(3 * 100);
  for (const RingPiece& p : AllReducePlan({0, 3, 64}, data.data(), 1000).sends) EXPECT_LE(p.bytes, 64u);
  for (const RingPiece& p : AllReducePlan({0, 3, 1}, data.data(), 1000).sends) EXPECT_EQ(p.bytes, sizeof(float));
  for (const RingPiece& p : AllGatherPlan({0, 3, 1}, bytes.data(), 100).sends) EXPECT_LE(p.bytes, 8u);
  EXPECT_EQ(AllGatherPlan({0, 3, 1}, bytes.data(), 100).sends.front().bytes, 8u);
  EXPECT_EQ(BroadcastPlan({0, 3, 1}, bytes.data(), 100, 0).sends.front().bytes, 8u);
}

TEST(RingPlanTest, AllGatherGivesEveryMemberEveryBlock) {
  for (int n : {2, 3, 6}) {
    for (size_t block : {size_t{1}, size_t{24}, size_t{1000}}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " block=" + std::to_string(block));
      std::vector<Bytes> out(static_cast<size_t>(n), Bytes(block * static_cast<size_t>(n)));
      std::vector<RingPlan> plans;
      for (int r = 0; r < n; ++r) {
        Bytes& o = out[static_cast<size_t>(r)];
        std::fill_n(o.begin() + static_cast<ptrdiff_t>(block) * r, block, std::byte(r + 1));
        plans.push_back(AllGatherPlan({r, n, 64}, o.data(), block));
        EXPECT_EQ(plans.back().sends.size(), plans.back().recvs.size());
      }
      RunRing(plans);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < block * static_cast<size_t>(n); ++i) {
          ASSERT_EQ(out[static_cast<size_t>(r)][i], std::byte(i / block + 1)) << "member " << r << " byte " << i;
        }
      }
    }
  }
}

TEST(RingPlanTest, BroadcastFlowsFromTheRootAroundTheRingOnce) {
  const int n = 4;
  for (int root = 0; root < n; ++root) {
    SCOPED_TRACE("root " + std::to_string(root));
    std::vector<Bytes> data(n, Bytes(1000));
    std::iota(reinterpret_cast<unsigned char*>(data[static_cast<size_t>(root)].data()),
              reinterpret_cast<unsigned char*>(data[static_cast<size_t>(root)].data()) + 1000, 0);
    std::vector<RingPlan> plans;
    for (int r = 0; r < n; ++r) {
      plans.push_back(BroadcastPlan({r, n, 256}, data[static_cast<size_t>(r)].data(), 1000, root));
    }
    const RingPlan& first = plans[static_cast<size_t>(root)];
    const RingPlan& last = plans[static_cast<size_t>((root + n - 1) % n)];
    EXPECT_TRUE(first.recvs.empty()) << "the root receives nothing";
    EXPECT_EQ(first.sends.size(), 4u);
    for (int after : first.send_after) EXPECT_EQ(after, -1);
    EXPECT_TRUE(last.sends.empty()) << "the member before the root forwards nothing";
    const RingPlan& middle = plans[static_cast<size_t>((root + 1) % n)];
    for (size_t c = 0; c < middle.sends.size(); ++c) EXPECT_EQ(middle.send_after[c], static_cast<int>(c));
    RunRing(plans);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(data[static_cast<size_t>(r)], data[static_cast<size_t>(root)]) << "member " << r;
    }
  }
}

TEST(RingPlanTest, ASendIsReadyOnceTheRecvItWaitsForHasArrived) {
  RingPlan p;
  std::byte b[4];
  p.sends = {{b, 4, false}, {b, 4, false}};
  p.send_after = {-1, 2};
  EXPECT_TRUE(p.SendReady(0, 0));
  EXPECT_FALSE(p.SendReady(1, 2));
  EXPECT_TRUE(p.SendReady(1, 3));
  EXPECT_FALSE(p.SendReady(2, 100)) << "there is no third send";
}

TEST(RingPlanTest, ARingOfOneHasNothingToMove) {
  std::vector<float> data(10);
  const RingPlan reduce = AllReducePlan({0, 1, 64}, data.data(), 10);
  const RingPlan gather = AllGatherPlan({0, 1, 64}, reinterpret_cast<std::byte*>(data.data()), 40);
  EXPECT_TRUE(reduce.sends.empty() && reduce.recvs.empty());
  EXPECT_TRUE(gather.sends.empty() && gather.recvs.empty());
}

}  // namespace
}  // namespace tfjob::collective
