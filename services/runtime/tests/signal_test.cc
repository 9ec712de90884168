// SIGTERM, as Kubernetes sends it on every pod deletion, to each role of a
// parameter-server job run by `tfjob run`: the evaluator, a worker and the
// chief (by this test) and the PS and the last worker (by the finished job's
// clean-up) each exit 0, and the chief writes a checkpoint of where it
// stopped before it goes.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/process.h"
#include "tests/support/subprocess.h"

namespace tfjob {
namespace {

namespace t = ::tfjob::testing;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

class Job {
 public:
  explicit Job(const std::string& dir) : dir_(dir) {}

  pid_t Pid(const std::string& pod) const {
    std::ifstream in(dir_ + "/state/" + pod + ".pid");
    long p = 0;
    return (in >> p) ? static_cast<pid_t>(p) : 0;
  }

  bool WaitFor(t::Process& run, const std::regex& re, std::smatch* m = nullptr) {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (Clock::now() < deadline && run.running()) {
      const std::string out = run.output();
      std::smatch local;
      if (std::regex_search(out, m ? *m : local, re)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::string out = run.output();
    std::smatch local;
    return std::regex_search(out, m ? *m : local, re);
  }

 private:
  std::string dir_;
};

TEST(SignalTest, EveryRoleExitsZeroOnSigtermAndTheChiefCheckpointsFirst) {
  const std::string dir = t::MakeTempDir("sigterm");
  const std::string ckpt = dir + "/ckpt";
  // Trains until stopped: many epochs of a small job.
  std::ifstream in(t::SourceDir() + "/tests/support/data/synthetic-small.json");
  nlohmann::json job = nlohmann::json::parse(in);
  job["epochs"] = 100000;
  std::ofstream(dir + "/job.json") << job.dump();
  const std::string fit = "[\"" + t::BinDir() + "/tfjob-runtime\", fit, --config, \"" + dir + "/job.json\"," +
                          " --checkpoint-dir, \"" + ckpt + "\", --checkpoint-every-steps, \"200\"]";
  auto replica = [&](const std::string& type, int n) {
    return "    " + type + ":\n      replicas: " + std::to_string(n) +
           "\n      restartPolicy: Never\n      template: {spec: {containers: [{name: tensorflow, "
           "image: tfjob/runtime-cpu:0.1.0, command: " + fit + "}]}}\n";
  };
  std::ofstream(dir + "/job.yaml") << "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: sig}\nspec:\n"
                                   << "  runPolicy: {cleanPodPolicy: Running}\n  tfReplicaSpecs:\n"
                                   << replica("Chief", 1) << replica("PS", 1) << replica("Worker", 2)
                                   << replica("Evaluator", 1);
  t::Process run({t::BinDir() + "/tfjob", "run", dir + "/job.yaml", "--state-dir", dir + "/state"});
  Job j(dir);
  ASSERT_TRUE(j.WaitFor(run, std::regex(R"(\[sig-evaluator-0\] evaluator: checkpoint step [1-9])"))) << run.output();

  for (const std::string pod : {"sig-evaluator-0", "sig-worker-1", "sig-chief-0"}) {
    const pid_t p = j.Pid(pod);
    ASSERT_GT(p, 0) << pod << "\n" << run.output();
    kill(p, SIGTERM);
    ASSERT_TRUE(j.WaitFor(run, std::regex("\\[" + pod + "\\] exited with code ([0-9]+)"))) << pod << "\n" << run.output();
    EXPECT_THAT(run.output(), HasSubstr("[" + pod + "] exited with code 0")) << run.output();
  }
  // The chief wrote where it stopped, and a restarted chief would resume there.
  std::smatch m;
  ASSERT_TRUE(j.WaitFor(run, std::regex(R"(\[sig-chief-0\] fit: stopped by a signal at step ([0-9]+), checkpoint written)"), &m))
      << run.output();
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/ckpt-" + m[1].str() + "/meta.json")) << m[0];
  EXPECT_THAT(run.output(), HasSubstr("[sig-evaluator-0] evaluator: stopped by a signal"));

  // The PS and the other worker, last: the finished job's clean-up sends
  // them SIGTERM (cleanPodPolicy Running), as Kubernetes would, and each ends
  // cleanly.
  for (const std::string pod : {"sig-ps-0", "sig-worker-0"}) {
    ASSERT_TRUE(j.WaitFor(run, std::regex("\\[" + pod + "\\] stopped: "))) << run.output();
    EXPECT_THAT(run.output(), HasSubstr("[" + pod + "] stopped: exited with code 0")) << run.output();
  }
  EXPECT_THAT(run.output(), HasSubstr("[sig-ps-0] ps 0: shut down"));
  run.Stop(SIGTERM);
}

}  // namespace
}  // namespace tfjob
