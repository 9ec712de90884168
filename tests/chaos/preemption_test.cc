// Preemption and chief loss under `tfjob run`, modelled on TensorFlow's own
// parameter-server fault-tolerance tests (fault_tolerance_test.py): a worker
// preempted between and during closures, two workers at once, a worker
// failing repeatedly, a PS failing while a worker recovers, the chief killed
// and restarted, SIGTERM to each role, and a user error in a closure. Each
// scenario states its outcome: the counter exact, the accuracy in range, the
// job's state and every exit code as the runtime's contract says (0 only
// when training is complete, 143 after SIGTERM, 1 for a runtime error).
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <regex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/local_job.h"
#include "tests/support/process.h"
#include "tests/support/subprocess.h"

namespace tfjob {
namespace {

namespace fs = std::filesystem;
namespace t = ::tfjob::testing;
using t::LocalJob;
using t::Replica;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

std::string Write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// 1,2,...,n
std::string Increments(int n) {
  std::string s;
  for (int i = 1; i <= n; ++i) s += (i > 1 ? "," : "") + std::to_string(i);
  return s;
}

// A counter job: chief, one PS, `workers` workers, all under `policy`.
std::string CounterJob(const std::string& dir, const std::string& name, int workers, const std::string& policy,
                       const std::vector<std::string>& chief_args) {
  std::vector<std::string> chief{t::RuntimeBinary(), "counter", "--summary-json", dir + "/summary.json"};
  chief.insert(chief.end(), chief_args.begin(), chief_args.end());
  const std::string serve = t::YamlList({t::RuntimeBinary(), "counter"});
  return Write(dir + "/" + name + ".yaml", t::TfJobYaml(name,
                                                        {{"Chief", 1, policy, t::YamlList(chief)},
                                                         {"PS", 1, policy, serve},
                                                         {"Worker", workers, policy, serve}},
                                                        "{backoffLimit: 20}"));
}

// TF: testWorkerPreemptionBetweenFunctions. A worker is preempted (SIGTERM)
// while it has no closure: it exits 143, not 0, so it is brought back, and
// the next round of closures runs on the whole cluster again.
TEST(PreemptionTest, AWorkerPreemptedBetweenClosuresComesBackAndTheCountIsExact) {
  const std::string dir = t::MakeTempDir("between");
  LocalJob job(
      CounterJob(dir, "between", 2, "ExitCode",
                 {"--increments", Increments(8), "--rounds", "2", "--pause-seconds", "4", "--closure-seconds", "0.2"}),
      dir + "/state");
  ASSERT_NE(job.WaitForOutput(std::regex(R"(\[between-chief-0\] counter: round 1/2 joined)"), 0), std::string::npos)
      << job.output();
  EXPECT_EQ(job.SignalAndAwaitExit("between-worker-1", SIGTERM), 143) << job.output();
  ASSERT_GT(job.WaitForPid("between-worker-1"), 0) << "the preempted worker was not brought back\n" << job.output();
  ASSERT_EQ(job.Wait(), 0) << job.output();
  const std::string out = job.output();
  EXPECT_THAT(out,
              HasSubstr("[between-worker-1] worker 1: stopped by a signal before training was complete; exiting 143"));
  EXPECT_THAT(out, HasSubstr("[between-chief-0] counter: value 72 after 16 closures"));
  EXPECT_THAT(out, HasSubstr("Succeeded=True"));
  EXPECT_EQ(t::ReadJsonFile(dir + "/summary.json")["value"], 72.0);
}

// TF: testWorkerPreemptionMidstFunction, testTwoWorkersPreempted,
// testWorkerContinuousFailure. SIGTERM to a worker mid-closure, then two
// workers SIGKILLed at once, then one worker killed twice more: every
// closure still counts exactly once.
TEST(PreemptionTest, WorkersLostMidClosureTwoAtOnceAndOneRepeatedlyCountExactlyOnce) {
  const std::string dir = t::MakeTempDir("during");
  LocalJob job(CounterJob(dir, "during", 3, "ExitCode", {"--increments", Increments(30), "--closure-seconds", "0.8"}),
               dir + "/state");
  ASSERT_NE(job.WaitForOutput(std::regex(R"(\[during-chief-0\] counter: scheduled 30 closures)"), 0), std::string::npos)
      << job.output();
  // Seeded points inside the closures (0.8 s each: the push is at 0.4 s).
  std::mt19937 rng(21);
  std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 300));
  EXPECT_EQ(job.SignalAndAwaitExit("during-worker-0", SIGTERM), 143) << job.output();
  ASSERT_GT(job.WaitForPid("during-worker-0"), 0) << job.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
  const pid_t w1 = job.WaitForPid("during-worker-1"), w2 = job.WaitForPid("during-worker-2");
  ASSERT_GT(w1, 0);
  ASSERT_GT(w2, 0);
  kill(w1, SIGKILL);
  kill(w2, SIGKILL);
  ASSERT_GT(job.WaitForPid("during-worker-1", w1), 0) << job.output();
  ASSERT_GT(job.WaitForPid("during-worker-2", w2), 0) << job.output();
  for (int k = 0; k < 2; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
    ASSERT_GT(job.KillAndAwaitRestart("during-worker-0"), 0) << "kill " << k << "\n" << job.output();
  }
  ASSERT_EQ(job.Wait(), 0) << job.output();
  auto s = t::ReadJsonFile(dir + "/summary.json");
  ASSERT_TRUE(s.is_object()) << job.output();
  EXPECT_EQ(s["value"], 465.0) << s.dump();
  EXPECT_EQ(s["closures"], 30);
  EXPECT_GE(s["retried"].get<int>(), 1) << s.dump();
  EXPECT_GE(s["worker_failures"].get<int>(), 3) << s.dump();
}

// The acceptance run: the chief SIGKILLed and restarted twice while its
// closures run. Each new chief fences off the one before (its closures still
// running on the workers can no longer push), re-issues the same closure
// ids, and what was already applied is not applied again: 78.
TEST(PreemptionTest, TheChiefKilledAndRestartedTwiceStillCounts78) {
  const std::string dir = t::MakeTempDir("chief-twice");
  LocalJob job(CounterJob(dir, "twice", 2, "OnFailure", {"--increments", Increments(12), "--closure-seconds", "1"}),
               dir + "/state");
  size_t at = 0;
  for (int kill = 0; kill < 2; ++kill) {
    at = job.WaitForOutput(std::regex(R"(\[twice-chief-0\] counter: scheduled 12 closures)"), at);
    ASSERT_NE(at, std::string::npos) << job.output();
    // Well inside the closures: some have pushed, some are in flight.
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
    ASSERT_GT(job.KillAndAwaitRestart("twice-chief-0"), 0) << "kill " << kill << "\n" << job.output();
  }
  ASSERT_EQ(job.Wait(), 0) << job.output();
  const std::string out = job.output();
  EXPECT_THAT(out, HasSubstr("[twice-chief-0] counter: value 78 after 12 closures"));
  const std::regex fence(R"(\[twice-chief-0\] counter: fenced off the previous chief)");
  const auto fenced = std::distance(std::sregex_iterator(out.begin(), out.end(), fence), std::sregex_iterator());
  EXPECT_EQ(fenced, 2) << out;
  auto s = t::ReadJsonFile(dir + "/summary.json");
  EXPECT_EQ(s["value"], 78.0) << s.dump();
  EXPECT_GE(s["already_applied"].get<int>(), 1) << "the restarted chief re-ran nothing its predecessors applied?\n"
                                                << s.dump();
  EXPECT_NE(s["previous_generation"], 0);
  // The cluster outlived both chiefs: no PS or worker exited before the end.
  EXPECT_THAT(out, Not(HasSubstr("[twice-ps-0] exited with code 1")));
  EXPECT_THAT(out, ::testing::ContainsRegex(R"(\[twice-ps-0\] ps 0: shut down, training is complete)"));
}

// TF: a closure that raises. A label out of range in the middle of the
// data is found by a worker's closure: the first error is raised once by
// the chief, which exits 2 (bad input: the data), and the job fails
// instead of retrying.
TEST(PreemptionTest, AUserErrorInAClosureFailsTheJobOnce) {
  const std::string dir = t::MakeTempDir("user-error");
  {
    std::ofstream csv(dir + "/train.csv");
    csv << "a,b,c,d,label\n";
    std::mt19937 rng(4);
    for (int i = 0; i < 2000; ++i)
      csv << rng() % 9 << "," << rng() % 9 << "," << rng() % 9 << "," << rng() % 9 << ","
          << (i == 1300 ? 9 : static_cast<int>(rng() % 3)) << "\n";
  }
  Write(dir + "/job.json", R"({"name": "bad-label", "seed": 1,
    "model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 3, "activation": "softmax"}]},
    "loss": "sparse_categorical_crossentropy", "optimizer": {"type": "SGD", "learning_rate": 0.01},
    "metrics": ["accuracy"], "data": {"train": {"source": "csv", "path": "train.csv"}},
    "batch_size": 20, "epochs": 3})");
  const std::string fit = t::YamlList({t::RuntimeBinary(), "fit", "--config", dir + "/job.json", "--data-dir", dir});
  LocalJob job(Write(dir + "/bad.yaml", t::TfJobYaml("bad", {{"Chief", 1, "ExitCode", fit},
                                                             {"PS", 1, "ExitCode", fit},
                                                             {"Worker", 2, "ExitCode", fit}})),
               dir + "/state");
  EXPECT_EQ(job.Wait(), 1) << job.output();
  const std::string out = job.output();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m,
      std::regex(
          R"(\[bad-chief-0\] tfjob-runtime: error: closure fit/train_steps on worker \S+: .*label 9.*outside \[0, 3\))")))
      << out;
  EXPECT_EQ(out.find("[bad-chief-0] tfjob-runtime: error:", static_cast<size_t>(m.position(0)) + 1), std::string::npos)
      << "raised more than once:\n"
      << out;
  EXPECT_THAT(out, HasSubstr("[bad-chief-0] exited with code 2"));
  EXPECT_THAT(out, HasSubstr("Failed=True"));
  EXPECT_THAT(out, Not(HasSubstr("Succeeded=True")));
}

// `tfjob run` SIGKILLed: its replicas die with it (none is left for
// nobody to stop), and so do `tfjob-runtime local`'s tasks.
TEST(PreemptionTest, ARunnerKilledLeavesNoReplicaRunning) {
  const std::string dir = t::MakeTempDir("orphans");
  std::vector<pid_t> replicas;
  {
    LocalJob job(CounterJob(dir, "orphans", 2, "OnFailure", {"--increments", Increments(6), "--closure-seconds", "30"}),
                 dir + "/state");
    ASSERT_NE(job.WaitForOutput(std::regex(R"(counter: scheduled 6 closures)"), 0), std::string::npos) << job.output();
    for (const char* pod : {"orphans-chief-0", "orphans-ps-0", "orphans-worker-0", "orphans-worker-1"}) {
      replicas.push_back(job.WaitForPid(pod));
      ASSERT_GT(replicas.back(), 0) << pod;
    }
    job.process().Stop(SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    for (pid_t p : replicas) EXPECT_FALSE(t::Alive(p)) << "replica " << p << " outlived the runner";
  }
  t::Process local(
      {t::RuntimeBinary(), "local", "--ps", "1", "--workers", "2", "--", "counter", "--closure-seconds", "30"});
  ASSERT_TRUE(local.WaitForLine("counter: scheduled", std::chrono::seconds(60))) << local.output();
  std::vector<pid_t> tasks;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    int ppid = 0;
    char state = 0;
    if (close != std::string::npos && std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 &&
        ppid == local.pid()) {
      tasks.push_back(static_cast<pid_t>(std::stol(name)));
    }
  }
  EXPECT_EQ(tasks.size(), 4u) << local.output();
  local.Stop(SIGKILL);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (pid_t p : tasks) EXPECT_FALSE(t::Alive(p)) << "task " << p << " outlived tfjob-runtime local";
}

// MNIST under parameter servers, every task under restartPolicy ExitCode,
// and SIGTERM (a drain, a preemption) sent to each role in turn, then a PS
// lost while a worker is coming back. Every stopped task exits 143 and is
// brought back; the chief checkpoints where it stopped and its successor
// resumes exactly there; the PS's loss is detected, said, and recovered in
// bounded time; the job Succeeds with every step done once.
std::string MnistFit(const std::string& dir, const std::string& role) {
  return t::YamlList({t::RuntimeBinary(), "fit", "--config", t::SourceDir() + "/examples/mnist/mlp.json", "--epochs",
                      "60", "--data-dir", t::MnistDir(), "--checkpoint-dir", dir + "/ckpt", "--checkpoint-every-steps",
                      "100", "--summary-json", dir + "/" + role + ".json"});
}

std::string MnistJob(const std::string& dir, const std::string& name, const std::string& policy) {
  return Write(dir + "/" + name + ".yaml", t::TfJobYaml(name,
                                                        {{"Chief", 1, policy, MnistFit(dir, "chief")},
                                                         {"PS", 2, policy, MnistFit(dir, "ps")},
                                                         {"Worker", 2, policy, MnistFit(dir, "worker")},
                                                         {"Evaluator", 1, policy, MnistFit(dir, "evaluator")}},
                                                        "{backoffLimit: 20, cleanPodPolicy: None}"));
}

TEST(PreemptionTest, MnistSurvivesSigtermToEveryRoleUnderExitCode) {
  const std::string dir = t::MakeTempDir("sigterm-every-role");
  LocalJob job(MnistJob(dir, "term", "ExitCode"), dir + "/state", {{"TFJOB_PS_TIMEOUT_SECONDS", "20"}});
  const std::regex checkpoint(R"(\[term-chief-0\] fit: checkpoint \S+ \(step [1-9])");
  size_t at = job.WaitForOutput(checkpoint, 0);
  ASSERT_NE(at, std::string::npos) << job.output();

  // The evaluator and a worker: 143, back, training goes on.
  for (const std::string pod : {"term-evaluator-0", "term-worker-0"}) {
    EXPECT_EQ(job.SignalAndAwaitExit(pod, SIGTERM), 143) << pod << "\n" << job.output();
    ASSERT_GT(job.WaitForPid(pod), 0) << pod << " was not brought back\n" << job.output();
    at = job.WaitForOutput(checkpoint, job.output().size());
    ASSERT_NE(at, std::string::npos) << "no progress after " << pod << "\n" << job.output();
  }

  // The chief: checkpoints where it stopped, exits 143; its successor
  // resumes at exactly that step.
  size_t before = job.output().size();
  EXPECT_EQ(job.SignalAndAwaitExit("term-chief-0", SIGTERM), 143) << job.output();
  std::smatch m;
  ASSERT_NE(
      job.WaitForOutput(std::regex(R"(\[term-chief-0\] fit: stopped by a signal at step (\d+), checkpoint written)"),
                        before, &m),
      std::string::npos)
      << job.output();
  const std::string stopped_at = m[1];
  at = job.WaitForOutput(std::regex(R"(\[term-chief-0\] fit: restored checkpoint \S+ at step (\d+))"), before, &m);
  ASSERT_NE(at, std::string::npos) << job.output();
  EXPECT_EQ(m[1], stopped_at);
  EXPECT_THAT(job.output().substr(before), HasSubstr("[term-chief-0] fit: fenced off the previous chief"));
  ASSERT_NE(job.WaitForOutput(checkpoint, at), std::string::npos) << job.output();

  // A PS: 143, back, every PS restored, training resumes; how long it
  // stood still is printed (and bounded: past TFJOB_PS_TIMEOUT_SECONDS the
  // chief would have failed the job).
  before = job.output().size();
  const auto sent = Clock::now();
  EXPECT_EQ(job.SignalAndAwaitExit("term-ps-1", SIGTERM), 143) << job.output();
  const auto exited = Clock::now();
  at = job.WaitForOutput(
      std::regex(
          R"(fit: resumed at step \d+ \(lost (\d+) steps\); parameter server 1 stopped training for ([0-9.]+) s)"),
      before, &m);
  ASSERT_NE(at, std::string::npos) << "no restore after SIGTERM to ps 1\n" << job.output();
  EXPECT_LE(std::stoi(m[1]), 100) << "lost more than one checkpoint interval: " << m[0];
  std::cout << "ps 1: SIGTERM to its exit " << std::chrono::duration<double>(exited - sent).count()
            << " s; its exit to training resumed about " << std::chrono::duration<double>(Clock::now() - exited).count()
            << " s (chief: training stood still " << m[2] << " s)" << std::endl;

  // A PS lost while a worker is coming back (TF: testPSFailureWhileRecoveryFromWokerFailure).
  before = job.output().size();
  const pid_t w1 = job.WaitForPid("term-worker-1"), ps0 = job.WaitForPid("term-ps-0");
  ASSERT_GT(w1, 0);
  ASSERT_GT(ps0, 0);
  kill(w1, SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(ps0, SIGKILL);
  ASSERT_NE(job.WaitForOutput(std::regex(R"(fit: resumed at step \d+ \(lost \d+ steps\); parameter server 0)"), before),
            std::string::npos)
      << job.output();

  ASSERT_EQ(job.Wait(), 0) << job.output();
  const std::string out = job.output();
  std::ofstream(dir + "/job.log") << out;
  EXPECT_THAT(out, HasSubstr("Succeeded=True"));
  auto chief = t::ReadJsonFile(dir + "/chief.json");
  ASSERT_TRUE(chief.is_object()) << out;
  EXPECT_EQ(chief["steps"], 60 * 125);
  EXPECT_GE(chief["eval_accuracy"].get<double>(), 0.92) << chief.dump();
  // Every update since the last restore landed exactly once: 4 variables.
  const auto& restored = chief["recovery"]["restored_steps"];
  ASSERT_GE(restored.size(), 1u) << chief.dump();
  EXPECT_EQ(chief["ps_applied_updates"].get<int64_t>(), (60 * 125 - restored.back().get<int64_t>()) * 4)
      << chief.dump();
  // The evaluator, restarted once, still ended on the final checkpoint.
  auto ev = t::ReadJsonFile(dir + "/evaluator.json");
  ASSERT_TRUE(ev.is_object() && !ev["evaluations"].empty()) << out;
  EXPECT_TRUE(ev["evaluations"].back()["final"].get<bool>());
  EXPECT_NEAR(ev["evaluations"].back()["eval_accuracy"].get<double>(), chief["eval_accuracy"].get<double>(), 1e-9);
}

// The fit job with the chief SIGKILLed once: the new chief restores the
// newest checkpoint and names it, and the PS tasks applied exactly the
// steps trained since (the old chief's closures, still running on the
// workers when it died, were fenced off).
TEST(PreemptionTest, MnistChiefKilledOnceAppliesEachStepAfterTheRestoreOnce) {
  const std::string dir = t::MakeTempDir("chief-once");
  LocalJob job(MnistJob(dir, "once", "OnFailure"), dir + "/state");
  ASSERT_NE(job.WaitForOutput(std::regex(R"(\[once-chief-0\] fit: checkpoint \S+ \(step [1-9]\d{2,})"), 0),
            std::string::npos)
      << job.output();
  const size_t before = job.output().size();
  ASSERT_GT(job.KillAndAwaitRestart("once-chief-0"), 0) << job.output();
  std::smatch m;
  ASSERT_NE(
      job.WaitForOutput(std::regex(R"(\[once-chief-0\] fit: restored checkpoint (\S+) at step (\d+))"), before, &m),
      std::string::npos)
      << job.output();
  const int64_t restored = std::stoll(m[2]);
  ASSERT_EQ(job.Wait(), 0) << job.output();
  auto chief = t::ReadJsonFile(dir + "/chief.json");
  ASSERT_TRUE(chief.is_object()) << job.output();
  EXPECT_EQ(chief["steps"], 60 * 125);
  EXPECT_EQ(chief["recovery"]["restored_steps"], nlohmann::json::array({restored})) << chief.dump();
  EXPECT_EQ(chief["ps_applied_updates"].get<int64_t>(), (60 * 125 - restored) * 4) << chief.dump();
  EXPECT_GE(chief["eval_accuracy"].get<double>(), 0.92) << chief.dump();
}

// Under restartPolicy Never a SIGTERMed chief is a failed pod: the job
// Fails. It never reports Succeeded with training unfinished.
TEST(PreemptionTest, MnistChiefSigtermedUnderNeverFailsTheJob) {
  const std::string dir = t::MakeTempDir("never");
  LocalJob job(MnistJob(dir, "never", "Never"), dir + "/state");
  ASSERT_NE(job.WaitForOutput(std::regex(R"(\[never-chief-0\] fit: checkpoint \S+ \(step [1-9])"), 0),
            std::string::npos)
      << job.output();
  EXPECT_EQ(job.SignalAndAwaitExit("never-chief-0", SIGTERM), 143) << job.output();
  EXPECT_EQ(job.Wait(), 1) << job.output();
  const std::string out = job.output();
  EXPECT_THAT(out, HasSubstr("[never-chief-0] fit: stopped by a signal at step"));
  EXPECT_THAT(out, HasSubstr("Failed=True"));
  EXPECT_THAT(out, Not(HasSubstr("Succeeded=True")));
  EXPECT_FALSE(fs::exists(dir + "/chief.json")) << "a stopped chief wrote a summary as if it had finished";
}

}  // namespace
}  // namespace tfjob
