#include "kube/workqueue.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/wait.h"

namespace tfjob::kube {
namespace {

namespace t = ::tfjob::testing;

TEST(WorkQueueTest, AKeyIsQueuedOnce) {
  WorkQueue q;
  q.Add("ns/a");
  q.Add("ns/a");
  q.Add("ns/b");
  EXPECT_EQ(q.Depth(), 2u);
  EXPECT_EQ(*q.Get(), "ns/a");
  EXPECT_EQ(*q.Get(), "ns/b");
}

TEST(WorkQueueTest, AKeyAddedWhileProcessingComesBackAfterDone) {
  WorkQueue q;
  q.Add("k");
  auto k = q.Get();
  q.Add("k");  // changed while a worker has it: must not be handed to a second worker
  EXPECT_EQ(q.Depth(), 0u);
  q.Done(*k);
  ASSERT_EQ(q.Depth(), 1u);  // else Get would block
  k = q.Get();
  EXPECT_EQ(*k, "k");
  // Done without a new Add: nothing comes back.
  q.Done(*k);
  EXPECT_EQ(q.Depth(), 0u);
}

// Four workers and many Adds of one key while it is being processed. No two
// workers ever hold the key at once, and no Add is lost: some processing of
// the key starts after the last Add, so the last change is always reconciled.
TEST(WorkQueueTest, NoKeyIsProcessedByTwoWorkersAtOnce) {
  constexpr int kAdds = 300;
  WorkQueue q;
  std::atomic<int> version{0}, in_flight{0}, overlap{0}, processed{0};
  std::mutex mu;
  std::condition_variable cv;
  int latest_seen = 0;  // the newest version a processing started from
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (auto key = q.Get()) {
        const int seen = version.load();
        if (++in_flight > 1) ++overlap;
        // Holds the key for a while, as a reconcile does, so that Adds land
        // while it is held: the situation under test, not a wait.
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        --in_flight;
        ++processed;
        q.Done(*key);
        {
          std::lock_guard g(mu);
          latest_seen = std::max(latest_seen, seen);
        }
        cv.notify_all();
      }
    });
  }
  for (int i = 1; i <= kAdds; ++i) {
    version.store(i);
    q.Add("same");
  }
  {
    std::unique_lock lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, t::kWaitPatience, [&] { return latest_seen == kAdds; }))
        << "no processing started after the last Add (newest seen: " << latest_seen << ")";
  }
  q.ShutDown();
  for (auto& w : workers) w.join();
  EXPECT_EQ(overlap.load(), 0);
  // Every processing consumed at least one Add.
  EXPECT_LE(processed.load(), kAdds);
}

// Lower bounds on time only: the timer never fires early, however loaded the
// machine, so these cannot flake.
TEST(WorkQueueTest, AddAfterDeliversLater) {
  WorkQueue q;
  const auto start = std::chrono::steady_clock::now();
  q.AddAfter("later", std::chrono::milliseconds(30));
  EXPECT_EQ(q.Depth(), 0u);
  auto k = q.Get();  // blocks until the timer fires
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(*k, "later");
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));
}

TEST(WorkQueueTest, RateLimitedBacksOffPerKeyUntilForget) {
  WorkQueue q(std::chrono::milliseconds(1), std::chrono::milliseconds(8));
  for (int i = 0; i < 5; ++i) q.AddRateLimited("k");
  EXPECT_EQ(q.Retries("k"), 5);
  q.Forget("k");
  EXPECT_EQ(q.Retries("k"), 0);
  EXPECT_EQ(*q.Get(), "k");
}

// The n-th failure in a row waits base * 2^(n-1), capped, per key, until
// Forget: checked on the delays the queue chose, not on a clock.
TEST(WorkQueueTest, RateLimitedDelayDoublesPerFailureUpToTheCap) {
  using std::chrono::milliseconds;
  WorkQueue q(milliseconds(20), milliseconds(100));
  EXPECT_EQ(q.AddRateLimited("k"), milliseconds(20));
  EXPECT_EQ(q.AddRateLimited("k"), milliseconds(40));
  EXPECT_EQ(q.AddRateLimited("k"), milliseconds(80));
  EXPECT_EQ(q.AddRateLimited("k"), milliseconds(100));
  EXPECT_EQ(q.AddRateLimited("k"), milliseconds(100));
  EXPECT_EQ(q.AddRateLimited("other"), milliseconds(20)) << "failures are counted per key";
  q.Forget("k");
  EXPECT_EQ(q.AddRateLimited("k"), milliseconds(20));
}

// The chosen delay is really waited (a lower bound, as for AddAfter).
TEST(WorkQueueTest, RateLimitedKeyIsDeliveredAfterItsDelay) {
  WorkQueue q(std::chrono::milliseconds(20), std::chrono::seconds(10));
  q.AddRateLimited("k");
  auto k = q.Get();
  ASSERT_EQ(k, "k");
  q.Done(*k);
  const auto start = std::chrono::steady_clock::now();
  const auto delay = q.AddRateLimited("k");  // the second failure: 40 ms
  EXPECT_EQ(q.Get(), "k");
  EXPECT_GE(std::chrono::steady_clock::now() - start, delay);
}

TEST(WorkQueueTest, ShutDownReleasesWaiters) {
  // On the heap: if ShutDown failed to wake the waiter, the test fails
  // instead of hanging, and the queue outlives the stuck thread.
  auto* q = new WorkQueue;
  std::atomic<pid_t> tid{0};
  std::promise<bool> got;
  auto result = got.get_future();
  std::thread waiter([&] {
    tid = gettid();
    got.set_value(q->Get().has_value());
  });
  ASSERT_TRUE(t::WaitUntil([&] { return tid.load() != 0; }));
  // The waiter is asleep inside Get before the queue shuts down.
  ASSERT_TRUE(t::WaitUntilBlocked(tid.load()));
  q->ShutDown();
  if (result.wait_for(t::kWaitPatience) != std::future_status::ready) {
    waiter.detach();
    FAIL() << "Get still blocked after ShutDown";
  }
  EXPECT_FALSE(result.get());
  waiter.join();
  delete q;
}

}  // namespace
}  // namespace tfjob::kube
