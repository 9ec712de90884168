// Chaos under `tfjob run`: real manifests, real processes, SIGKILLs aimed
// through the runner's <pod>.pid files by a seeded killer. What must hold:
// nothing is applied twice (the counter), and MNIST training survives the
// loss of workers, a PS, the chief and a task in the middle of a checkpoint
// write, losing at most one checkpoint interval of progress.
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

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
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr auto kPatience = std::chrono::seconds(120);

using t::LocalJob;

// The acceptance point: the counter under three worker SIGKILLs, run by
// `tfjob run` with OnFailure, ends with exactly 1+2+3+4+5.
TEST(ChaosTest, CounterIsExactUnderThreeWorkerKills) {
  const std::string dir = t::MakeTempDir("chaos-counter");
  const std::string summary = dir + "/summary.json";
  // Every closure is slow (2 s: 1 s before its push, 1 s after), so each kill
  // lands on closures in flight, before or after their updates were applied.
  std::ofstream(dir + "/counter.yaml") << R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: chaos-counter}
spec:
  runPolicy: {backoffLimit: 10}
  tfReplicaSpecs:
    Chief:
      replicas: 1
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: tensorflow, image: tfjob/runtime-cpu:0.1.0,
        command: [")" + t::RuntimeBinary() + R"(", counter, --increments, "1,2,3,4,5", --closure-seconds, "2",
                  --summary-json, ")" + summary +
                                              R"("]}]}}
    PS:
      replicas: 1
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: tensorflow, image: tfjob/runtime-cpu:0.1.0, command: [")" +
                                              t::RuntimeBinary() + R"(", counter]}]}}
    Worker:
      replicas: 3
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: tensorflow, image: tfjob/runtime-cpu:0.1.0, command: [")" +
                                              t::RuntimeBinary() + R"(", counter]}]}}
)";
  LocalJob job(dir + "/counter.yaml", dir);
  std::mt19937 rng(20261121);
  // Five closures fill five of the six slots (3 workers x 2 in flight), so
  // every worker is running one when the first kill lands, before its push.
  ASSERT_NE(job.WaitForOutput(std::regex(R"(\[chaos-counter-chief-0\] counter: scheduled 5 closures)"), 0),
            std::string::npos)
      << job.output();
  // The kill schedule is the thing under test, not a wait: the first kill
  // lands 0.4 s into the closures, before their pushes at 1 s; the others at
  // seeded random points, before or after a push.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  for (int kill = 0; kill < 3; ++kill) {
    const std::string pod = "chaos-counter-worker-" + std::to_string(rng() % 3);
    ASSERT_GT(job.KillAndAwaitRestart(pod), 0) << "kill " << kill << " of " << pod << "\n" << job.output();
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 700));
  }
  ASSERT_EQ(job.Wait(), 0) << job.output();
  const std::string out = job.output();
  EXPECT_THAT(out, HasSubstr("[chaos-counter-chief-0] counter: value 15 after 5 closures"));
  EXPECT_THAT(out, HasSubstr("restarting (restart 1)"));
  auto s = t::ReadJsonFile(summary);
  ASSERT_TRUE(s.is_object()) << out;
  EXPECT_EQ(s["value"], 15.0);
  // The kills really cost closures: some ran twice, yet counted once.
  EXPECT_GE(s["retried"].get<int>(), 1) << s.dump();
  EXPECT_GE(s["worker_failures"].get<int>(), 1) << s.dump();
}

// Kills whichever task is writing a file of the next checkpoint, while it
// writes: files are written as NAME.tmp.<writer pid> and renamed when done,
// so inotify names the writer. Returns the pid killed (0: job ended first).
pid_t KillMidCheckpointWrite(const std::string& ckpt_dir, LocalJob& job) {
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return 0;
  inotify_add_watch(fd, ckpt_dir.c_str(), IN_CREATE | IN_ONLYDIR);
  pid_t killed = 0;
  const auto deadline = Clock::now() + kPatience;
  alignas(inotify_event) char buf[64 * 1024];
  std::map<int, std::string> dirs;
  while (!killed && Clock::now() < deadline && job.process().running()) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) {
      // Until the next event; the timeout only re-checks the job and deadline.
      pollfd p{fd, POLLIN, 0};
      (void)poll(&p, 1, 100);
      continue;
    }
    for (ssize_t off = 0; off < n && !killed;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      if (!ev->len) continue;
      const std::string name = ev->name;
      if (ev->mask & IN_ISDIR) {
        // A new ckpt-<step>: watch it for the files being written.
        const std::string d = ckpt_dir + "/" + name;
        dirs[inotify_add_watch(fd, d.c_str(), IN_CREATE)] = d;
        continue;
      }
      const size_t tmp = name.find(".tmp.");
      if (tmp == std::string::npos) continue;
      const pid_t writer = static_cast<pid_t>(std::stol(name.substr(tmp + 5)));
      if (kill(writer, SIGKILL) == 0) {
        killed = writer;
        std::cerr << "killed pid " << writer << " while it wrote " << dirs[ev->wd] << "/" << name << std::endl;
      }
    }
  }
  close(fd);
  return killed;
}

// One replica type of a TFJob manifest: `n` runtime containers running `command` (a YAML list).
std::string Replica(const std::string& type, int n, const std::string& command) {
  return "    " + type + ":\n      replicas: " + std::to_string(n) +
         "\n      restartPolicy: OnFailure\n      template: {spec: {containers: [{name: tensorflow, "
         "image: tfjob/runtime-cpu:0.1.0,\n        command: " +
         command + "}]}}\n";
}

// The acceptance run: the MNIST MLP (2 PS, 2 workers, chief, evaluator)
// while a seeded killer SIGKILLs a worker three times, then a PS, then the
// chief, then a task in the middle of a checkpoint write.
TEST(ChaosTest, MnistMlpSurvivesWorkerPsChiefAndMidCheckpointKills) {
  const std::string dir = t::MakeTempDir("chaos-mnist");
  const std::string ckpt = dir + "/ckpt";
  fs::create_directories(ckpt);
  constexpr int kInterval = 25;  // steps between checkpoints
  auto fit = [&](const std::string& summary) {
    return "[\"" + t::RuntimeBinary() + "\", fit, --config, \"" + t::SourceDir() +
           "/examples/mnist/mlp.json\", --epochs, \"30\"," + " --data-dir, \"" + t::MnistDir() +
           "\", --checkpoint-dir, \"" + ckpt + "\", --checkpoint-every-steps, \"" + std::to_string(kInterval) +
           "\", --summary-json, \"" + summary + "\"]";
  };
  std::ofstream(dir + "/mnist.yaml") << "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: chaos}\nspec:\n"
                                     << "  runPolicy: {backoffLimit: 20, cleanPodPolicy: None}\n  tfReplicaSpecs:\n"
                                     << Replica("Chief", 1, fit(dir + "/chief.json"))
                                     << Replica("PS", 2, fit(dir + "/ps.json"))
                                     << Replica("Worker", 2, fit(dir + "/worker.json"))
                                     << Replica("Evaluator", 1, fit(dir + "/evaluator.json"));
  LocalJob job(dir + "/mnist.yaml", dir);
  std::mt19937 rng(5);
  const std::regex checkpoint(R"(\[chaos-chief-0\] fit: checkpoint \S+ \(step [1-9])");
  size_t at = job.WaitForOutput(checkpoint, 0);
  ASSERT_NE(at, std::string::npos) << job.output();

  // A worker, three times: its closures run elsewhere, training goes on.
  for (int k = 0; k < 3; ++k) {
    const std::string pod = "chaos-worker-" + std::to_string(rng() % 2);
    ASSERT_GT(job.KillAndAwaitRestart(pod), 0) << pod << "\n" << job.output();
    at = job.WaitForOutput(checkpoint, job.output().size());
    ASSERT_NE(at, std::string::npos) << "no progress after killing " << pod << "\n" << job.output();
  }

  // A PS: detected, every PS restored from the latest checkpoint.
  const std::string ps = "chaos-ps-" + std::to_string(rng() % 2);
  size_t before = job.output().size();
  ASSERT_GT(job.KillAndAwaitRestart(ps), 0) << job.output();
  std::smatch m;
  at = job.WaitForOutput(std::regex(R"(fit: resumed at step (\d+) \(lost (\d+) steps\))"), before, &m);
  ASSERT_NE(at, std::string::npos) << "no restore after killing " << ps << "\n" << job.output();
  EXPECT_EQ(std::stoi(m[1]) % kInterval, 0) << m[0];
  EXPECT_LE(std::stoi(m[2]), kInterval) << "lost more than one checkpoint interval: " << m[0];
  ASSERT_NE(job.WaitForOutput(checkpoint, at), std::string::npos) << job.output();

  // The chief: the new one fences the old one off and restores.
  before = job.output().size();
  ASSERT_GT(job.KillAndAwaitRestart("chaos-chief-0"), 0) << job.output();
  at = job.WaitForOutput(std::regex(R"(\[chaos-chief-0\] fit: restored checkpoint \S+ at step (\d+))"), before, &m);
  ASSERT_NE(at, std::string::npos) << job.output();
  EXPECT_GT(std::stoi(m[1]), 0);
  EXPECT_THAT(job.output().substr(before), HasSubstr("fit: fenced off the previous chief"));
  ASSERT_NE(job.WaitForOutput(checkpoint, at), std::string::npos) << job.output();

  // Whoever is writing the next checkpoint, mid-write.
  ASSERT_GT(KillMidCheckpointWrite(ckpt, job), 0) << job.output();

  ASSERT_EQ(job.Wait(), 0) << job.output();
  const std::string out = job.output();
  std::ofstream(dir + "/job.log") << out;
  auto chief = t::ReadJsonFile(dir + "/chief.json");
  ASSERT_TRUE(chief.is_object()) << out;
  EXPECT_GE(chief["eval_accuracy"].get<double>(), 0.92) << chief.dump();
  EXPECT_EQ(chief["steps"], 30 * 125);
  EXPECT_EQ(chief["epochs"], 30);
  // The side-car evaluator saw checkpoints as they came and ended on the
  // final one, with the chief's own result (same variables, same data).
  auto ev = t::ReadJsonFile(dir + "/evaluator.json");
  ASSERT_TRUE(ev.is_object() && ev["evaluations"].size() >= 2) << out;
  const auto& last = ev["evaluations"].back();
  EXPECT_TRUE(last["final"].get<bool>());
  EXPECT_EQ(last["step"], 30 * 125);
  EXPECT_NEAR(last["eval_accuracy"].get<double>(), chief["eval_accuracy"].get<double>(), 1e-9);
  EXPECT_THAT(out, HasSubstr("[chaos-evaluator-0] evaluator: checkpoint step 3750 (final)"));
  // No damaged checkpoint was ever restored: each restore names a committed one.
  EXPECT_THAT(out, ::testing::Not(HasSubstr("DATA_LOSS")));
}

// Issue 44: a recurrent text model (TextVectorization adapted on the chief,
// Embedding(mask_zero), Bidirectional GRU; examples/keras/text_order_*)
// with 2 PS, 2 workers, a chief and a side-car evaluator, a worker SIGKILLed
// twice mid-training. Training completes and reaches its bar, and the
// evaluator, which adapts the TextVectorization itself from the same
// training file, ends on the chief's own result: the same vocabulary.
TEST(ChaosTest, RecurrentTextModelSurvivesWorkerKills) {
  const std::string dir = t::MakeTempDir("chaos-text");
  const std::string ckpt = dir + "/ckpt";
  fs::create_directories(ckpt);
  auto data =
      t::Run({"/usr/bin/python3", t::SourceDir() + "/examples/text/make_order_data.py", "--out", dir + "/data"});
  ASSERT_EQ(data.exit_code, 0) << data.out << data.err;
  constexpr int kEpochs = 40;
  auto fit = [&](const std::string& summary) {
    return "[\"" + t::RuntimeBinary() + "\", fit, --config, \"" + t::SourceDir() +
           "/examples/keras/text_order_job.json\", --keras-model, \"" + t::SourceDir() +
           "/examples/keras/text_order_bigru.json\", --epochs, \"" + std::to_string(kEpochs) + "\", --data-dir, \"" +
           dir + "/data\", --checkpoint-dir, \"" + ckpt + "\", --checkpoint-every-steps, \"100\", --summary-json, \"" +
           summary + "\"]";
  };
  std::ofstream(dir + "/text.yaml") << "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: text}\nspec:\n"
                                    << "  runPolicy: {backoffLimit: 20, cleanPodPolicy: None}\n  tfReplicaSpecs:\n"
                                    << Replica("Chief", 1, fit(dir + "/chief.json"))
                                    << Replica("PS", 2, fit(dir + "/ps.json"))
                                    << Replica("Worker", 2, fit(dir + "/worker.json"))
                                    << Replica("Evaluator", 1, fit(dir + "/evaluator.json"));
  LocalJob job(dir + "/text.yaml", dir);
  std::mt19937 rng(44);
  const std::regex checkpoint(R"(\[text-chief-0\] fit: checkpoint \S+ \(step [1-9])");
  size_t at = job.WaitForOutput(checkpoint, 0);
  ASSERT_NE(at, std::string::npos) << job.output();
  for (int k = 0; k < 2; ++k) {
    const std::string pod = "text-worker-" + std::to_string(rng() % 2);
    ASSERT_GT(job.KillAndAwaitRestart(pod), 0) << pod << "\n" << job.output();
    at = job.WaitForOutput(checkpoint, job.output().size());
    ASSERT_NE(at, std::string::npos) << "no progress after killing " << pod << "\n" << job.output();
  }
  ASSERT_EQ(job.Wait(), 0) << job.output();
  const std::string out = job.output();
  std::ofstream(dir + "/job.log") << out;
  EXPECT_THAT(out, HasSubstr("[text-chief-0] fit: TextVectorization \"vectorize\": 2002 terms adapted"));
  auto chief = t::ReadJsonFile(dir + "/chief.json");
  ASSERT_TRUE(chief.is_object()) << out;
  EXPECT_GE(chief["eval_accuracy"].get<double>(), 0.95) << chief.dump();
  EXPECT_EQ(chief["steps"], kEpochs * 125);
  auto ev = t::ReadJsonFile(dir + "/evaluator.json");
  ASSERT_TRUE(ev.is_object() && !ev["evaluations"].empty()) << out;
  const auto& last = ev["evaluations"].back();
  EXPECT_TRUE(last["final"].get<bool>());
  EXPECT_NEAR(last["eval_accuracy"].get<double>(), chief["eval_accuracy"].get<double>(), 1e-9);
  std::cout << "text_order under 2 worker kills: chief eval accuracy " << chief["eval_accuracy"] << " after "
            << chief["steps"] << " steps; the evaluator's final evaluation " << last["eval_accuracy"] << " at step "
            << last["step"] << "\n";
}

// Prefetching workers (fit's default: the next step's variables are pulled
// while a step computes, pushes do not block the next step) SIGKILLed three
// times while their closures run, four steps each: every step's update still
// lands exactly once on every shard. No PS or chief is killed, so the PS's
// count of applied updates must be steps x variables exactly: a push lost by
// a worker that returned before it landed, or applied twice by a re-run,
// would change it.
TEST(ChaosTest, PrefetchingWorkersKilledMidStepLoseNoUpdate) {
  const std::string dir = t::MakeTempDir("chaos-prefetch");
  const std::string summary = dir + "/chief.json";
  const std::string fit = "[\"" + t::RuntimeBinary() + "\", fit, --config, \"" + t::SourceDir() +
                          "/examples/mnist/mlp.json\", --epochs, \"20\", --data-dir, \"" + t::MnistDir() +
                          "\", --steps-per-execution, \"4\", --summary-json, \"" + summary + "\"]";
  std::ofstream(dir + "/prefetch.yaml")
      << "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: prefetch}\nspec:\n"
      << "  runPolicy: {backoffLimit: 10}\n  tfReplicaSpecs:\n"
      << Replica("Chief", 1, fit) << Replica("PS", 1, fit) << Replica("Worker", 2, fit);
  LocalJob job(dir + "/prefetch.yaml", dir);
  std::mt19937 rng(14);
  size_t at = 0;
  for (int epoch : {3, 8, 13}) {
    at = job.WaitForOutput(std::regex(R"(\[prefetch-chief-0\] Epoch )" + std::to_string(epoch) + "/20"), at);
    ASSERT_NE(at, std::string::npos) << job.output();
    const std::string pod = "prefetch-worker-" + std::to_string(rng() % 2);
    ASSERT_GT(job.KillAndAwaitRestart(pod), 0) << pod << "\n" << job.output();
  }
  ASSERT_EQ(job.Wait(), 0) << job.output();
  auto s = t::ReadJsonFile(summary);
  ASSERT_TRUE(s.is_object()) << job.output();
  EXPECT_EQ(s["ps_prefetch"], true);
  EXPECT_EQ(s["steps"], 20 * 125);
  // 4 variables (two kernels, two biases) on the one PS.
  EXPECT_EQ(s["ps_applied_updates"], 20 * 125 * 4) << s.dump();
  EXPECT_GE(s["closures"]["worker_failures"].get<int>(), 1) << s.dump();
  // A sanity bar, not the point: training kept training after the kills.
  // Judged on the last five epochs, not on the final variables alone:
  // asynchronous Adam with two closures in flight on each of two workers
  // (four step loops on this machine's two cores) has spikes, and one in
  // the final epoch decides the final evaluation. CI saw the last epoch's
  // training accuracy fall from 0.997 to 0.877 and the evaluation end at
  // 0.8255 (0.96 usual); 0.894 and 0.913 were the lowest of 30 runs without
  // kills here, and the build before the push+pull exchange shows the same
  // spikes. A restart that broke the variables fails the median; an
  // evaluation of garbage fails the floor.
  std::vector<double> last;
  for (const auto& h : s["history"]) last.push_back(h["accuracy"].get<double>());
  ASSERT_EQ(last.size(), 20u) << s.dump();
  last.erase(last.begin(), last.end() - 5);
  std::nth_element(last.begin(), last.begin() + 2, last.end());
  EXPECT_GE(last[2], 0.95) << s.dump();
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.75) << s.dump();
}

// examples/mnist/tfjob-mwms.yaml (three workers, multi-worker mirrored, no
// PS) made longer, run as shipped and then again while a worker is SIGKILLed
// twice. The survivors keep their state, the restarted worker rejoins and
// takes it, and no completed step is lost: the run ends with the same
// accuracy as the run without kills (within 0.5 points; the computation is in
// fact the same), and worker 0 computed every step exactly once.
std::string MwmsManifest(const std::string& dir, const std::string& name) {
  std::ifstream in(t::SourceDir() + "/examples/mnist/tfjob-mwms.yaml");
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = yaml.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) yaml.replace(at, from.size(), to);
  };
  // Long enough to aim two kills; paths absolute, since the test does not run
  // from the repository root.
  // Appended, not "lit" + std::string: GCC 12 warns falsely (-Wrestrict) on that.
  auto quoted = [](const std::string& v) {
    std::string q("\"");
    q.append(v);
    q.push_back('"');
    return q;
  };
  replace("\"examples/mnist/mlp.json\"",
          quoted(t::SourceDir() + "/examples/mnist/mlp.json") + ", \"--epochs\", \"16\"");
  replace("\"../shared/data/mnist\"", quoted(t::MnistDir()));
  replace("name: mnist-mlp-mwms", "name: " + name);
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << yaml;
  return path;
}

// The accuracy `pod` printed after its "Evaluation" line, read from its own
// lines only: the other pods' lines may come between the two.
double EvalAccuracy(const std::string& out, const std::string& pod) {
  const std::string prefix = "[" + pod + "] ";
  std::string own;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) own += line.substr(prefix.size()) + "\n";
  }
  std::smatch m;
  const std::regex re(R"(Evaluation\n\d+/\d+ - \S+ - loss: \S+ - accuracy: (\S+))");
  return std::regex_search(own, m, re) ? std::stod(m[1]) : -1;
}

TEST(ChaosTest, MultiWorkerMirroredMnistLosesNoStepWhenAWorkerIsKilledTwice) {
  const std::string dir = t::MakeTempDir("chaos-mwms");
  double calm = -1;
  {
    LocalJob job(MwmsManifest(dir, "calm"), dir + "/calm");
    ASSERT_EQ(job.Wait(), 0) << job.output();
    calm = EvalAccuracy(job.output(), "calm-worker-0");
    ASSERT_GE(calm, 0.92) << job.output();
  }
  LocalJob job(MwmsManifest(dir, "mwms"), dir + "/mwms");
  std::mt19937 rng(10);
  size_t at = job.WaitForOutput(std::regex(R"(\[mwms-worker-0\] Epoch 3/16)"), 0);
  ASSERT_NE(at, std::string::npos) << job.output();
  for (int kill = 0; kill < 2; ++kill) {
    const std::string victim = "mwms-worker-" + std::to_string(1 + rng() % 2);
    // Somewhere inside an epoch, not on its first step: a seeded random kill
    // time is the thing under test, not a wait.
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 250));
    const size_t before = job.output().size();
    ASSERT_GT(job.KillAndAwaitRestart(victim), 0) << victim << "\n" << job.output();
    // The group re-forms with the restarted worker, which takes the state.
    std::smatch m;
    at = job.WaitForOutput(
        std::regex("\\[" + victim +
                   "\\] fit: group generation ([0-9]+) of 3 members formed at step ([0-9]+) \\(state from "),
        before, &m);
    ASSERT_NE(at, std::string::npos) << "no regroup after killing " << victim << "\n" << job.output();
    EXPECT_GT(std::stoi(m[2]), 0) << "the restarted worker started over instead of taking the state: " << m[0];
    ASSERT_NE(job.WaitForOutput(std::regex(R"(\[mwms-worker-0\] Epoch [0-9]+/16)"), at), std::string::npos)
        << job.output();
  }
  ASSERT_EQ(job.Wait(), 0) << job.output();
  const std::string out = job.output();
  std::ofstream(dir + "/job.log") << out;
  const double killed = EvalAccuracy(out, "mwms-worker-0");
  EXPECT_NEAR(killed, calm, 0.005) << out;
  // Worker 0 was never killed: each of the 2000 steps it either computed
  // once or, when its last all-reduce failed after another member's had
  // completed, took from that member; none was thrown away and redone.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m,
      std::regex(
          R"(\[mwms-worker-0\] fit: worker:0 done at step ([0-9]+) \(generation ([0-9]+), ([0-9]+) regroups, computed ([0-9]+) and took ([0-9]+) steps from the group since joining at step 0, lost ([0-9]+)\))")))
      << out;
  EXPECT_EQ(m[1], "2000");
  EXPECT_GE(std::stoi(m[3]), 2) << m[0];
  EXPECT_EQ(std::stoi(m[4]) + std::stoi(m[5]), 2000) << "steps were lost and computed again: " << m[0];
  EXPECT_LE(std::stoi(m[5]), std::stoi(m[3])) << "at most one step per regroup comes from another member: " << m[0];
  EXPECT_EQ(m[6], "0");
  std::cout << "lost steps: " << m[5] << " (" << m[0] << "); accuracy " << killed << " with kills, " << calm
            << " without" << std::endl;
}

}  // namespace
}  // namespace tfjob
