// What the token tests (auth_test.cc) and the mutual-TLS tests
// (mtls_test.cc) share: the job's token, a worker closure that counts its
// runs, and the check that outsiders' calls left a parameter server as the
// job left it.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "services/ps/ps_client.h"
#include "services/worker/worker.h"

namespace tfjob::testing {

inline const std::string kJobToken = "0123456789abcdef0123456789abcdef";
inline constexpr uint64_t kJobFence = 0x1111111100000000ULL;

// A registry whose one closure, "count", adds one to `ran` each run.
inline worker::Registry CountingRegistry(std::atomic<int>& ran) {
  worker::Registry registry;
  EXPECT_TRUE(registry
                  .AddClosure("count",
                              [&ran](worker::ClosureContext&, const nlohmann::json&,
                                     const std::vector<Tensor>&) -> StatusOr<worker::ClosureResult> {
                                ++ran;
                                return worker::ClosureResult{};
                              })
                  .ok());
  return registry;
}

// The job made "w" = [1, 2] and fenced with kJobFence before `before` was
// taken: still so, nothing applied or created since, no checkpoint at step
// 1 under `dir`, and the server still answers the job.
inline void ExpectPsUnchanged(ps::PsClient& owner, const ps::PsStatus& before, const std::string& dir) {
  auto values = owner.Pull({"w"});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_TRUE(Equal((*values)[0], *Tensor::FromVector({2}, std::vector<float>{1, 2})));
  auto after = owner.GetStatus();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->variables, before.variables);
  EXPECT_EQ(after->applied_updates, before.applied_updates);
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt-1"));
  EXPECT_EQ(owner.Fence(kJobFence)->previous, kJobFence);
}

}  // namespace tfjob::testing
