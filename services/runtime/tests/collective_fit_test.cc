// Synchronous training with the real binary: multi-worker mirrored under
// `tfjob-runtime local` (one process per worker) and `tfjob run`, mirrored
// in one process; the same variables as one process (compared in the final
// checkpoints); and the bad inputs a user meets first.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/checkpoint/checkpoint.h"
#include "tests/support/subprocess.h"

namespace tfjob {
namespace {

namespace t = ::tfjob::testing;
using ::testing::HasSubstr;

std::string Tfjob() { return t::BinDir() + "/tfjob"; }

std::string SmallJob(const std::string& dir, const std::string& name, const std::string& optimizer, int units = 16) {
  std::ifstream in(t::SourceDir() + "/tests/support/data/synthetic-small.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["optimizer"] = nlohmann::json::parse(optimizer);
  j["model"]["layers"][0]["units"] = units;
  j["epochs"] = 2;
  const std::string path = dir + "/" + name + ".json";
  std::ofstream(path) << j.dump(2);
  return path;
}

// The variables of the final checkpoint in `ckpt` (a synchronous strategy's
// single file), by name.
std::map<std::string, Tensor> FinalVariables(const std::string& ckpt) {
  std::map<std::string, Tensor> out;
  std::string newest;
  int64_t step = -1;
  for (const auto& e : std::filesystem::directory_iterator(ckpt)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("ckpt-", 0) == 0 && std::stoll(n.substr(5)) > step) {
      step = std::stoll(n.substr(5));
      newest = e.path().string();
    }
  }
  auto entries = checkpoint::Read(newest + "/variables.ckpt");
  EXPECT_TRUE(entries.ok()) << entries.status();
  if (entries.ok()) {
    for (auto& e : *entries) out[e.name] = e.tensors[0];
  }
  return out;
}

TEST(MultiWorkerMirroredTest, MnistOverThreeWorkerProcesses) {
  const std::string summary = t::MakeTempDir("mwms-mnist") + "/out.json";
  auto r =
      t::Run({t::RuntimeBinary(), "local", "--workers", "3", "--", "fit", "--config",
              t::SourceDir() + "/examples/mnist/mlp.json", "--data-dir", t::MnistDir(), "--summary-json", summary});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json s = t::ReadJsonFile(summary);
  EXPECT_EQ(s["strategy"], "multi_worker_mirrored") << s.dump();
  EXPECT_EQ(s["num_replicas_in_sync"], 3);
  EXPECT_EQ(s["communication"], "ring");
  EXPECT_EQ(s["steps"], 5 * 125);
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.92) << s.dump();
  // Every worker trained and finished with the group; only worker 0 printed
  // progress and wrote the summary. The launcher prefixes the other workers'
  // lines, which interleave with worker 0's (unprefixed) ones.
  std::string worker0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("[worker:", 0) != 0) worker0 += line + "\n";
  }
  EXPECT_THAT(worker0, HasSubstr("Epoch 5/5\n125/125 - ")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("[worker:2] fit: worker:2 done at step 625"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("[worker:1] Epoch")));
}

TEST(MirroredTest, MnistOverTwoReplicasInOneProcess) {
  const std::string summary = t::MakeTempDir("mirrored-mnist") + "/out.json";
  auto r = t::Run({t::RuntimeBinary(), "fit", "--config", t::SourceDir() + "/examples/mnist/mlp.json", "--data-dir",
                   t::MnistDir(), "--strategy", "mirrored", "--replicas", "2", "--summary-json", summary});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json s = t::ReadJsonFile(summary);
  EXPECT_EQ(s["strategy"], "mirrored");
  EXPECT_EQ(s["num_replicas_in_sync"], 2);
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.92) << s.dump();
}

// N processes with global batch B train the same variables as one process
// with batch B (to 1e-5, relative), with SGD and with Adam.
TEST(MultiWorkerMirroredTest, SameVariablesAsOneProcess) {
  const std::string dir = t::MakeTempDir("mwms-equal");
  for (const auto& [name, opt] :
       {std::pair<std::string, std::string>{"sgd", R"({"type": "SGD", "learning_rate": 0.1, "momentum": 0.5})"},
        {"adam", R"({"type": "Adam", "learning_rate": 0.01})"}}) {
    const std::string job = SmallJob(dir, name, opt);
    auto one = t::Run({t::RuntimeBinary(), "fit", "--config", job, "--checkpoint-dir", dir + "/" + name + "-1"});
    ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
    const auto base = FinalVariables(dir + "/" + name + "-1");
    ASSERT_EQ(base.size(), 4u);
    for (int n : {2, 3}) {
      const std::string ckpt = dir + "/" + name + "-" + std::to_string(n);
      auto r = t::Run({t::RuntimeBinary(), "local", "--workers", std::to_string(n), "--", "fit", "--config", job,
                       "--checkpoint-dir", ckpt});
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
      const auto got = FinalVariables(ckpt);
      ASSERT_EQ(got.size(), base.size());
      double worst = 0;
      for (const auto& [var, b] : base) {
        const Tensor& g = got.at(var);
        ASSERT_EQ(g.shape(), b.shape()) << var;
        for (int64_t i = 0; i < b.size(); ++i) {
          const double x = g.data<float>()[i], y = b.data<float>()[i];
          worst = std::max(worst, std::abs(x - y) / (std::abs(y) + 1e-3));
        }
      }
      EXPECT_LE(worst, 1e-5) << name << " with " << n << " processes";
    }
  }
}

void ExpectOneLineExit2(const t::RunResult& r, const std::string& want) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.out + r.err, HasSubstr(want));
}

TEST(MultiWorkerMirroredTest, StrategyThatDoesNotFitTheClusterIsOneLine) {
  const std::string job = t::SourceDir() + "/tests/support/data/synthetic-small.json";
  // A cluster with parameter servers cannot train multi-worker mirrored.
  auto r = t::Run({t::RuntimeBinary(), "local", "--ps", "1", "--workers", "1", "--", "fit", "--config", job,
                   "--strategy", "multi_worker_mirrored"});
  ExpectOneLineExit2(r, "tfjob-runtime: error: flag --strategy multi_worker_mirrored: the cluster has \"ps\" tasks");
  // Nor can workers without one train with parameter servers.
  r = t::Run(
      {t::RuntimeBinary(), "local", "--workers", "2", "--", "fit", "--config", job, "--strategy", "parameter_server"});
  ExpectOneLineExit2(r, "flag --strategy parameter_server: the cluster has no \"ps\" tasks");
  r = t::Run({t::RuntimeBinary(), "local", "--workers", "2", "--", "fit", "--config", job, "--strategy", "mirrored"});
  ExpectOneLineExit2(r, "flag --strategy mirrored: this task is one of 2 chief/worker tasks");
}

// A TFJob run by `tfjob run` from `dir`; returns the run.
t::RunResult RunJob(const std::string& dir, const std::string& yaml) {
  std::ofstream(dir + "/job.yaml") << yaml;
  return t::Run({Tfjob(), "run", dir + "/job.yaml", "--state-dir", dir + "/state"});
}

std::string Replica(const std::string& type, const std::string& command) {
  return "    " + type +
         ":\n      replicas: 1\n      restartPolicy: Never\n"
         "      template: {spec: {containers: [{name: tensorflow, image: tfjob/runtime-cpu:0.1.0, command: " +
         command + "}]}}\n";
}

std::string Manifest(const std::string& name, const std::string& replicas) {
  return "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: " + name +
         "}\nspec:\n  runPolicy: {cleanPodPolicy: Running}\n  tfReplicaSpecs:\n" + replicas;
}

TEST(MultiWorkerMirroredTest, APeerThatNeverComesUpIsNamedAfterTheTimeout) {
  const std::string dir = t::MakeTempDir("mwms-absent");
  const std::string job = t::SourceDir() + "/tests/support/data/synthetic-small.json";
  // The worker is alive but never joins: it is not the runtime at all.
  auto r = RunJob(dir, Manifest("absent", Replica("Chief", "[\"" + t::RuntimeBinary() + "\", fit, --config, \"" + job +
                                                               "\", --rejoin-timeout-seconds, \"2\"]") +
                                              Replica("Worker", "[sleep, \"60\"]")));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(
      r.out,
      ::testing::ContainsRegex(
          R"(\[absent-chief-0\] tfjob-runtime: error: collective: worker:0 \(127\.0\.0\.1:[0-9]+\) has not joined the group within 2 s)"));
  EXPECT_THAT(r.out, HasSubstr("Failed=True"));
}

TEST(MultiWorkerMirroredTest, MembersWithDifferentShapesAllFailWithInvalidArgument) {
  const std::string dir = t::MakeTempDir("mwms-shapes");
  const std::string a = SmallJob(dir, "a", R"({"type": "SGD", "learning_rate": 0.1})", 16);
  const std::string b = SmallJob(dir, "b", R"({"type": "SGD", "learning_rate": 0.1})", 12);
  auto fit = [&](const std::string& job) { return "[\"" + t::RuntimeBinary() + "\", fit, --config, \"" + job + "\"]"; };
  auto r = RunJob(dir, Manifest("shapes", Replica("Chief", fit(a)) + Replica("Worker", fit(b))));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  // Both members stop with the disagreement (exit 2, bad input); nobody hangs.
  // The runner reaps the member that exits second either on its own
  // ("exited") or while stopping the failed job ("stopped: exited"); either
  // way that member exited 2 by itself (SIGTERM would make it exit 0).
  for (const std::string pod : {"shapes-chief-0", "shapes-worker-0"}) {
    EXPECT_THAT(r.out, ::testing::ContainsRegex("\\[" + pod + "\\] tfjob-runtime: error: collective: members disagree"))
        << r.out;
    // The second to fail may be reaped by tfjob run's stop of a failed job
    // ("stopped: exited with code 2") rather than seen exiting on its own.
    EXPECT_THAT(r.out, ::testing::ContainsRegex("\\[" + pod + "\\] (stopped: )?exited with code 2\n")) << r.out;
  }
}

}  // namespace
}  // namespace tfjob
