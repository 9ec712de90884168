// Parameter-server training end to end: programs against an in-process
// cluster, and the real binary under `tfjob-runtime local` (one process per
// task) and under a hand-written TF_CONFIG.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/base/ports.h"
#include "services/programs/programs.h"
#include "services/runtime/in_process_cluster.h"
#include "services/runtime/runtime.h"
#include "tests/support/process.h"
#include "tests/support/subprocess.h"

namespace tfjob::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace t = ::tfjob::testing;

TEST(InProcessTest, CounterAddsEveryIncrementOnce) {
  auto programs = programs::BuiltinPrograms();
  auto cluster = InProcessCluster::Start(1, 3, programs);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::ostringstream out, err;
  const std::string summary = t::MakeTempDir("counter-inproc") + "/out.json";
  programs::ChiefContext ctx{(*cluster)->ps_addresses(), (*cluster)->worker_addresses(), {}, &out, &err};
  ASSERT_EQ(programs::MakeCounter()->RunChief({"--increments", "1,2,3,4,5", "--summary-json", summary}, ctx), 0)
      << err.str();
  EXPECT_EQ(t::ReadJsonFile(summary)["value"].get<double>(), 15.0);
  EXPECT_THAT(out.str(), HasSubstr("counter: value 15 after 5 closures"));
}

TEST(InProcessTest, ShardedFitWithStepsPerExecution) {
  auto programs = programs::BuiltinPrograms();
  auto cluster = InProcessCluster::Start(2, 2, programs);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string dir = t::MakeTempDir("fit-inproc");
  std::ostringstream out, err;
  programs::ChiefContext ctx{(*cluster)->ps_addresses(), (*cluster)->worker_addresses(), {}, &out, &err};
  ASSERT_EQ(programs::MakeFit()->RunChief(
                {"--config", t::SourceDir() + "/tests/support/data/synthetic-small.json", "--epochs", "3",
                 "--summary-json", dir + "/out.json", "--steps-per-execution", "3", "--partitioner", "fixed:2"},
                ctx),
            0)
      << err.str();
  auto s = t::ReadJsonFile(dir + "/out.json");
  EXPECT_EQ(s["strategy"], "parameter_server");
  EXPECT_EQ(s["steps"].get<int>(), 3 * 20);
  EXPECT_EQ(s["closures"]["completed"].get<int>(), 3 * 7);  // ceil(20 / 3) closures per epoch
  EXPECT_GT(s["eval_accuracy"].get<double>(), 0.9);
  EXPECT_THAT(out.str(), HasSubstr("Epoch 3/3\n20/20 - "));
  // The kernel [8, 16] was split into two shards, one on each PS.
  auto ps0 = (*cluster)->ps_addresses()[0];
  EXPECT_THAT(out.str(), HasSubstr("on 2 parameter servers, 2 workers, partitioner fixed:2"));
}

// The operator stamps each pod with its creation time (TFJOB_POD_CREATED_MS):
// a chief's generation lies in its pod's range, so the container of a pod
// that was replaced, started again by its kubelet, claims nothing, while a
// restart inside the current pod still outranks the process before it.
TEST(InProcessTest, AChiefOfAReplacedPodClaimsNothing) {
  auto programs = programs::BuiltinPrograms();
  auto cluster = InProcessCluster::Start(2, 1, programs);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::ostringstream out, err;
  auto chief = [&](uint64_t pod_ms) {
    programs::ChiefContext ctx{(*cluster)->ps_addresses(), (*cluster)->worker_addresses(), {}, &out, &err};
    ctx.pod_created_ms = pod_ms;
    return ctx.ClaimCluster();
  };
  constexpr uint64_t kOld = 1795262400000, kNew = kOld + 98000;
  auto first = chief(kOld);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->generation, kOld << programs::kPodGenerationBits);
  auto replacement = chief(kNew);
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->generation, kNew << programs::kPodGenerationBits);
  EXPECT_EQ(replacement->previous, first->generation);
  EXPECT_EQ(replacement->closure_namespace, first->closure_namespace);
  // The old pod's container, started again after the replacement claimed.
  auto zombie = chief(kOld);
  ASSERT_FALSE(zombie.ok());
  EXPECT_EQ(zombie.status().code(), Code::kFailedPrecondition);
  EXPECT_THAT(zombie.status().message(), HasSubstr("this pod was replaced"));
  // A restart inside the replacement pod counts up inside its range.
  auto restarted = chief(kNew);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(restarted->generation, replacement->generation + 1);
  EXPECT_EQ(restarted->previous, replacement->generation);
  // A chief without a stamp (an older operator's pod) takes the next one up.
  auto unstamped = chief(0);
  ASSERT_TRUE(unstamped.ok()) << unstamped.status();
  EXPECT_GT(unstamped->generation, restarted->generation);
}

// The same through the binary, as a pod gets it (TF_CONFIG and
// TFJOB_POD_CREATED_MS): a chief of an older pod exits 1 without touching
// the cluster; one of the pod holding it carries on and counts exactly.
TEST(InProcessTest, TheRuntimeReadsThePodStampAndAReplacedChiefExitsWithoutClaiming) {
  auto programs = programs::BuiltinPrograms();
  auto cluster = InProcessCluster::Start(1, 1, programs);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::ostringstream out, err;
  constexpr uint64_t kOld = 1795262400000, kNew = kOld + 98000;
  programs::ChiefContext replacement{(*cluster)->ps_addresses(), (*cluster)->worker_addresses(), {}, &out, &err};
  replacement.pod_created_ms = kNew;
  ASSERT_TRUE(replacement.ClaimCluster().ok());
  const std::string tf_config = R"({"cluster":{"chief":["127.0.0.1:5"],"ps":[")" + (*cluster)->ps_addresses()[0] +
                                R"("],"worker":[")" + (*cluster)->worker_addresses()[0] +
                                R"("]},"task":{"type":"chief","index":0}})";
  auto chief = [&](uint64_t pod_ms) {
    return t::Run({t::RuntimeBinary(), "counter", "--increments", "1,2,3"},
                  {{"TF_CONFIG", tf_config}, {"TFJOB_POD_CREATED_MS", std::to_string(pod_ms)}});
  };
  auto zombie = chief(kOld);
  EXPECT_EQ(zombie.exit_code, 1) << zombie.out << zombie.err;
  EXPECT_THAT(zombie.err, HasSubstr("this pod was replaced, so it claims nothing"));
  auto restarted = chief(kNew);
  ASSERT_EQ(restarted.exit_code, 0) << restarted.out << restarted.err;
  EXPECT_THAT(restarted.out, HasSubstr("counter: fenced off the previous chief (generation " +
                                       std::to_string(kNew << programs::kPodGenerationBits) + ")"));
  EXPECT_THAT(restarted.out, HasSubstr("counter: value 6 after 3 closures"));
}

TEST(LocalLauncherTest, CounterOverOnePsAndThreeWorkers) {
  const std::string summary = t::MakeTempDir("counter-local") + "/out.json";
  auto r = t::Run({t::RuntimeBinary(), "local", "--ps", "1", "--workers", "3", "--", "counter", "--increments",
                   "1,2,3,4,5", "--summary-json", summary});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(t::ReadJsonFile(summary)["value"].get<double>(), 15.0);
  // Every task ran as its own process and was shut down by the chief, not killed.
  EXPECT_THAT(r.out, HasSubstr("[ps:0] ps 0: serving on 127.0.0.1:"));
  EXPECT_THAT(r.out, HasSubstr("[worker:2] worker 2: shut down"));
  EXPECT_THAT(r.out, HasSubstr("[ps:0] ps 0: shut down"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("still running")));
}

TEST(LocalLauncherTest, MnistMlpWithTwoPsAndTwoWorkers) {
  const std::string summary = t::MakeTempDir("mlp-local") + "/out.json";
  auto r =
      t::Run({t::RuntimeBinary(), "local", "--ps", "2", "--workers", "2", "--", "fit", "--config",
              t::SourceDir() + "/examples/mnist/mlp.json", "--data-dir", t::MnistDir(), "--summary-json", summary});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto s = t::ReadJsonFile(summary);
  // Asynchronous: the final model's accuracy spreads with how many updates
  // a step's pulled values miss. With one closure running per worker (auto,
  // from two workers on), 1 PS: 0.941 to 0.9505 over 50 runs, against
  // 0.946 for one process; three on each: 0.919 to 0.954 over 100, and
  // once 0.8815 in CI (docs/parameter-server.md).
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.90) << s.dump();
  EXPECT_EQ(s["ps_closures_per_worker"], 1) << s.dump();
  EXPECT_EQ(s["num_ps"].get<int>(), 2);
  EXPECT_EQ(s["steps"].get<int>(), 5 * 125);
  // The chief's own lines: the launcher prefixes the other tasks' lines
  // ("[ps:0] ..."), which may interleave with them.
  std::string chief;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("[ps:", 0) != 0 && line.rfind("[worker:", 0) != 0) chief += line + "\n";
  }
  EXPECT_THAT(chief, HasSubstr("Epoch 5/5\n125/125 - ")) << r.out;
}

// IPv6 addresses in TF_CONFIG, TensorFlow's bracketed form: the launcher
// listens on [::1] for every task and names them "[::1]:PORT"; the chief
// reaches its PS and worker over [::1], and the group of a synchronous job
// forms over [::1] too.
TEST(Ipv6Test, TasksAtBracketedIpv6AddressesTrain) {
  auto r = t::Run({t::RuntimeBinary(), "local", "--host", "::1", "--ps", "1", "--workers", "1", "--", "counter",
                   "--increments", "1,2,3"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("counter: value 6 after 3 closures"));
  EXPECT_THAT(r.out, HasSubstr("[ps:0] ps 0: serving on [::1]:"));

  // Two workers training together over [::1].
  const std::string job = t::SourceDir() + "/tests/support/data/synthetic-small.json";
  auto w = t::Run(
      {t::RuntimeBinary(), "local", "--host", "::1", "--workers", "2", "--", "fit", "--config", job, "--epochs", "1"});
  EXPECT_EQ(w.exit_code, 0) << w.out << w.err;
  EXPECT_THAT(w.out, HasSubstr("fit: group generation 1 of 2 members formed"));
  EXPECT_THAT(w.out, ::testing::ContainsRegex("\\[worker:1\\] fit: multi_worker_mirrored, worker:1 is rank 1 of 2"));
}

// Each task serves on the socket the launcher bound for it: the port in its
// TF_CONFIG, which no other process could have taken in between.
TEST(LocalLauncherTest, TasksServeOnTheSocketsTheLauncherBound) {
  auto r = t::Run({t::RuntimeBinary(), "local", "--ps", "1", "--workers", "1", "--", "counter", "--increments", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("\\[ps:0\\] ps 0: serving on 127\\.0\\.0\\.1:[1-9][0-9]*\n"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("\\[worker:0\\] worker 0: serving on 127\\.0\\.0\\.1:[1-9][0-9]*\n"));
  // A bad --host is one line and exit 2, before anything starts.
  auto bad = t::Run({t::RuntimeBinary(), "local", "--host", "localhost", "--workers", "1", "--", "counter"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("local: flag --host: listen on localhost:0: \"localhost\" is not an IP address"));
}

// A task handed a socket that is not at its TF_CONFIG port refuses to
// start (the others would look for it elsewhere), and so does one whose
// TFJOB_LISTEN_FD is not a listening socket at all.
TEST(TfConfigTest, AnInheritedSocketMustBeAListeningSocketAtTheTasksPort) {
  const std::map<std::string, std::string> env{
      {"TF_CONFIG", R"({"cluster":{"ps":["127.0.0.1:6"],"worker":["127.0.0.1:7"]},"task":{"type":"ps","index":0}})"}};
  // Python binds a listening socket on some other port and execs the task with it as fd 3.
  auto r = t::Run({"/usr/bin/python3", "-c",
                   "import os, socket, sys\n"
                   "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
                   "os.dup2(s.fileno(), 3); os.set_inheritable(3, True); os.environ['TFJOB_LISTEN_FD'] = '3'\n"
                   "os.execv(sys.argv[1], [sys.argv[1], 'counter'])\n",
                   t::RuntimeBinary()},
                  env);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err,
              ::testing::ContainsRegex(
                  "TFJOB_LISTEN_FD: the socket listens on port [0-9]+, but TF_CONFIG puts ps:0 at 127.0.0.1:6\n"));
  auto not_socket =
      t::Run({"/bin/sh", "-c", "exec 3</dev/null; TFJOB_LISTEN_FD=3 exec \"$0\" counter", t::RuntimeBinary()}, env);
  EXPECT_EQ(not_socket.exit_code, 2) << not_socket.out << not_socket.err;
  EXPECT_THAT(not_socket.err, HasSubstr("TFJOB_LISTEN_FD: descriptor 3 is not an open socket"));
}

TEST(LocalLauncherTest, BadLauncherInput) {
  auto r = t::Run({t::RuntimeBinary(), "local", "--ps", "-1", "--", "counter"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--ps must be in 0..64"));
  r = t::Run({t::RuntimeBinary(), "local", "--workers", "0", "--", "counter"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--workers must be in 1..64"));
  // Counting needs a parameter server: without one the workers say so.
  r = t::Run({t::RuntimeBinary(), "local", "--workers", "2", "--", "counter"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.out + r.err,
              HasSubstr("program \"counter\" needs parameter servers, but the cluster has no \"ps\" tasks"));
  r = t::Run({t::RuntimeBinary(), "local", "--", "nosuch"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown program \"nosuch\""));
}

// Bad TF_CONFIG: one clear line, exit 2.
void ExpectBadTfConfig(const std::string& tf_config, const std::string& want) {
  auto r = t::Run({t::RuntimeBinary(), "counter"}, {{"TF_CONFIG", tf_config}});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, StartsWith("tfjob-runtime: error: TF_CONFIG"));
  EXPECT_THAT(r.err, HasSubstr(want));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(TfConfigTest, MalformedTfConfigIsOneClearLine) {
  const std::string cluster = R"("cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]})";
  ExpectBadTfConfig("{not json", "");
  ExpectBadTfConfig("{" + cluster + "}", "task");
  ExpectBadTfConfig("{" + cluster + R"(, "task": {"type": "worker", "index": 2}})", "out of range");
  ExpectBadTfConfig("{" + cluster + R"(, "task": {"type": "janitor", "index": 0}})", "janitor");
  // A number JSON can write but a double cannot hold.
  ExpectBadTfConfig(R"({"cluster":{"worker":[1e400]}})", "number overflow parsing '1e400'");
}

TEST(TfConfigTest, ChiefWithoutWorkersIsAnError) {
  auto r = t::Run({t::RuntimeBinary(), "counter"},
                  {{"TF_CONFIG", R"({"cluster": {"chief": ["127.0.0.1:5"], "ps": ["127.0.0.1:6"]},
                                    "task": {"type": "chief", "index": 0}})"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("TF_CONFIG: the cluster has no \"worker\" tasks"));
}

TEST(TfConfigTest, UnreachablePeersFailWithTheirAddress) {
  // Nothing listens on these ports: the chief retries with backoff for the
  // connect timeout, then names the peer.
  const std::string cluster =
      R"("cluster": {"chief": ["127.0.0.1:5"], "ps": ["127.0.0.1:6"], "worker": ["127.0.0.1:7"]})";
  auto r = t::Run({t::RuntimeBinary(), "counter"},
                  {{"TF_CONFIG", "{" + cluster + R"(, "task": {"type": "chief", "index": 0}})"},
                   {"TFJOB_CONNECT_TIMEOUT_SECONDS", "1"}});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("127.0.0.1:6 unreachable after"));
  auto bad = t::Run({t::RuntimeBinary(), "counter"},
                    {{"TF_CONFIG", "{" + cluster + R"(, "task": {"type": "chief", "index": 0}})"},
                     {"TFJOB_CONNECT_TIMEOUT_SECONDS", "soon"}});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("TFJOB_CONNECT_TIMEOUT_SECONDS: \"soon\" is not a positive number"));
}

// A PS lost for good while training runs: the chief says which, waits no
// longer than TFJOB_PS_TIMEOUT_SECONDS for it, then fails with exit 1
// naming it (a runtime error, not bad input). The worker does not exit:
// only a chief saying training is complete ends it.
TEST(PsLossTest, APsThatNeverComesBackFailsTheChiefInBoundedTime) {
  const std::string dir = t::MakeTempDir("ps-lost");
  std::ifstream in(t::SourceDir() + "/tests/support/data/synthetic-small.json");
  nlohmann::json job = nlohmann::json::parse(in);
  job["epochs"] = 100000;  // until the PS is lost
  std::ofstream(dir + "/job.json") << job.dump();
  auto ps_socket = base::ListeningSocket::Listen("127.0.0.1", 0);
  auto worker_socket = base::ListeningSocket::Listen("127.0.0.1", 0);
  ASSERT_TRUE(ps_socket.ok() && worker_socket.ok());
  const std::string ps = ps_socket->address(), worker = worker_socket->address();
  auto tf_config = [&](const std::string& type) {
    return R"({"cluster": {"chief": ["127.0.0.1:1"], "ps": [")" + ps + R"("], "worker": [")" + worker +
           R"("]}, "task": {"type": ")" + type + R"(", "index": 0}})";
  };
  const std::vector<std::string> fit{
      t::RuntimeBinary(),         "fit", "--config", dir + "/job.json", "--checkpoint-dir", dir + "/ckpt",
      "--checkpoint-every-steps", "20"};
  auto serve = [&](const std::string& type, base::ListeningSocket& s) {
    auto p = std::make_unique<t::Process>(
        fit, std::map<std::string, std::string>{{"TF_CONFIG", tf_config(type)}, {"TFJOB_LISTEN_FD", "3"}}, s.fd());
    s = base::ListeningSocket();  // only the task holds its port now: once it is gone, it is refused
    return p;
  };
  auto ps_task = serve("ps", *ps_socket);
  auto worker_task = serve("worker", *worker_socket);
  t::Process chief(fit, {{"TF_CONFIG", tf_config("chief")}, {"TFJOB_PS_TIMEOUT_SECONDS", "2"}});
  ASSERT_TRUE(chief.WaitForLine("fit: checkpoint " + dir + "/ckpt/ckpt-20 ")) << chief.output();
  ps_task->Stop(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  chief.WaitForLine("is not answering");
  std::cout << "the chief noticed the lost PS after "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count() << " s" << std::endl;
  for (int i = 0; i < 600 && chief.running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int rc = chief.Stop(SIGKILL);  // long gone, unless it hung
  EXPECT_EQ(rc, 1) << chief.output();
  const std::string out = chief.output();
  EXPECT_THAT(
      out, HasSubstr("fit: parameter server 0 (" + ps + ") is not answering; waiting up to 2 s for it to come back"));
  EXPECT_THAT(out, HasSubstr("tfjob-runtime: error: parameter server 0 (" + ps +
                             ") lost: no answer for 2 s (TFJOB_PS_TIMEOUT_SECONDS)"));
  EXPECT_TRUE(worker_task->running()) << "the worker exited because the chief went away\n" << worker_task->output();
  auto bad =
      t::Run({t::RuntimeBinary(), "counter"}, {{"TF_CONFIG", tf_config("chief")}, {"TFJOB_PS_TIMEOUT_SECONDS", "0"}});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("TFJOB_PS_TIMEOUT_SECONDS: \"0\" is not a number of seconds"));
}

TEST(CoordinatorConnectTest, WorkerThatNeverAnswersIsNamed) {
  coordinator::Options o;
  o.connect_timeout = std::chrono::milliseconds(500);
  coordinator::ClusterCoordinator c({"127.0.0.1:7"}, o);
  Status s = c.CreatePerWorkerDataset("fit/train", {}, "x");
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("worker 127.0.0.1:7 unreachable"));
}

}  // namespace
}  // namespace tfjob::runtime
