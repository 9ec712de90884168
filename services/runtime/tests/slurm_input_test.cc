// The binary's answer to bad Slurm input, and the local launcher's children
// under a shell set up for Slurm: no Slurm needed. The sbatch examples
// themselves run under a real Slurm in slurm_cluster_test.cc and
// slurm_two_nodes_test.cc.
#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace tfjob::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace t = ::tfjob::testing;

// Bad Slurm input from the binary: one line, exit 2, never a silent
// single-process run.
void ExpectOneLineExitTwo(const std::map<std::string, std::string>& env, const std::string& want) {
  auto r = t::Run({t::RuntimeBinary(), "counter"}, env);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, StartsWith("tfjob-runtime: error: " + want));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(SlurmRuntimeTest, BadSlurmInputIsOneLineAndExitTwo) {
  ExpectOneLineExitTwo({{"TFJOB_CLUSTER_RESOLVER", "slurm"}, {"TFJOB_SLURM_JOBS", "chief:1,ps:1,worker:1"}},
                       "Slurm: SLURM_PROCID is not set; not running inside a Slurm step?");
  ExpectOneLineExitTwo({{"TFJOB_CLUSTER_RESOLVER", "slurm"}, {"SLURM_PROCID", "0"}}, "TFJOB_SLURM_JOBS is not set");
  ExpectOneLineExitTwo({{"TFJOB_CLUSTER_RESOLVER", "slurm"},
                        {"TFJOB_SLURM_JOBS", "chief:1,ps:1,worker:1"},
                        {"TFJOB_SLURM_PORT_BASE", "http"}},
                       "TFJOB_SLURM_PORT_BASE: \"http\" is not a non-negative integer");
  ExpectOneLineExitTwo({{"TFJOB_CLUSTER_RESOLVER", "mpi"}},
                       "TFJOB_CLUSTER_RESOLVER: \"mpi\" is not tf_config, slurm or kubernetes");
}

// The local launcher gives its children TF_CONFIG; a resolver selected in the
// launcher's own environment must not make them look for a Slurm step.
TEST(SlurmRuntimeTest, LocalLauncherChildrenUseTheirTfConfig) {
  auto r = t::Run({t::RuntimeBinary(), "local", "--ps", "1", "--workers", "1", "--", "counter", "--increments", "1,2"},
                  {{"TFJOB_CLUSTER_RESOLVER", "slurm"}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("counter: value 3 after 2 closures"));
}

}  // namespace
}  // namespace tfjob::runtime
