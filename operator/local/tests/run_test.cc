// `tfjob run` end to end: real manifests, real child processes.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace tfjob {
namespace {

using ::testing::HasSubstr;
namespace t = ::tfjob::testing;

bool HasCondition(const nlohmann::json& status, const std::string& type) {
  for (const auto& c : status.value("conditions", nlohmann::json::array())) {
    if (c.value("type", "") == type && c.value("status", "") == "True") return true;
  }
  return false;
}

std::string Write(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

// Layering: `tfjob` and `tfjob-operator` share services/base with the
// runtime, not the runtime itself, so neither loads gRPC or protobuf.
TEST(TfjobRunTest, NeitherTfjobNorTheOperatorLinksTheTrainingRuntime) {
  for (const std::string binary : {"tfjob", "tfjob-operator"}) {
    auto r = t::Run({"ldd", t::BinDir() + "/" + binary});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("libc.so"));  // ldd did list it
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("libgrpc"))) << binary << "\n" << r.out;
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("libprotobuf"))) << binary << "\n" << r.out;
  }
}

// A newcomer's first two commands: usage on stdout and exit 0, the version.
TEST(TfjobRunTest, HelpAndVersion) {
  for (const std::vector<std::string>& help : {std::vector<std::string>{"--help"}, {"run", "--help"}}) {
    std::vector<std::string> argv{t::BinDir() + "/tfjob"};
    argv.insert(argv.end(), help.begin(), help.end());
    auto r = t::Run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, ::testing::StartsWith("usage: tfjob run MANIFEST.yaml [--state-dir DIR] [--task-tls]\n"));
    EXPECT_THAT(r.out, HasSubstr("--state-dir"));
    EXPECT_THAT(r.out, HasSubstr("--task-tls"));
    EXPECT_EQ(r.err, "");
  }
  auto v = t::Run({t::BinDir() + "/tfjob", "--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_THAT(v.out, ::testing::MatchesRegex("tfjob [0-9]+\\.[0-9]+\\.[0-9]+\n"));
  // Anything else is still an error with the usage.
  auto bad = t::Run({t::BinDir() + "/tfjob", "walk"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, ::testing::StartsWith("tfjob: error: unknown command \"walk\"\nusage: tfjob run"));
}

TEST(TfjobRunTest, CounterManifestRunsLocallyToSuccess) {
  const std::string dir = t::MakeTempDir("run-counter");
  auto r = t::Run({t::BinDir() + "/tfjob", "run", t::SourceDir() + "/examples/counter/tfjob.yaml", "--state-dir", dir});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Output is prefixed by replica; the chief's result is there.
  EXPECT_THAT(r.out, HasSubstr("[counter-chief-0] counter: value 15 after 5 closures"));
  EXPECT_THAT(r.out, HasSubstr("[counter-ps-0] ps 0: serving on"));
  EXPECT_THAT(r.out, HasSubstr("[tfjob] Succeeded=True (TFJobSucceeded)"));
  auto status = t::ReadJsonFile(dir + "/status.json");
  EXPECT_TRUE(HasCondition(status, "Succeeded")) << status.dump();
  EXPECT_EQ(status["replicaStatuses"]["Chief"]["succeeded"], 1);
  // Nothing left running, no pid files left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".pid") << e.path();
}

// --task-tls: the run's own CA and certificate in <state-dir>/tls, named
// by TFJOB_TLS_DIR in every replica (EveryReplicaGetsTheRunsTlsDirectory
// checks them while the run lasts) and removed when it ends. The example
// job runs to the same result as without it (the runtime then speaks
// mutual TLS between its tasks).
TEST(TfjobRunTest, CounterManifestRunsLocallyToSuccessWithTaskTls) {
  const std::string dir = t::MakeTempDir("run-counter-tls");
  auto r = t::Run({t::BinDir() + "/tfjob", "run", t::SourceDir() + "/examples/counter/tfjob.yaml", "--state-dir", dir,
                   "--task-tls"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("[counter-chief-0] counter: value 15 after 5 closures"));
  EXPECT_THAT(r.out, HasSubstr("[tfjob] Succeeded=True (TFJobSucceeded)"));
  EXPECT_TRUE(HasCondition(t::ReadJsonFile(dir + "/status.json"), "Succeeded"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/tls")) << "the run's key outlives it";
  EXPECT_TRUE(std::filesystem::exists(dir + "/status.json"));
}

// What each replica sees while it runs: TFJOB_TLS_DIR (the runner's, over
// the manifest's own) naming a directory with the three PEM files, the same
// for every replica, the directory 0700 and the key 0600. Without
// --task-tls nothing is made and the manifest's value is passed through, as
// the operator does.
TEST(TfjobRunTest, EveryReplicaGetsTheRunsTlsDirectory) {
  const std::string dir = t::MakeTempDir("run-tls-env");
  const std::string script = Write(dir, "replica.py", R"(import os
d = os.environ.get("TFJOB_TLS_DIR", "")
heads = []
for f in ("ca.crt", "tls.crt", "tls.key"):
    p = os.path.join(d, f)
    heads.append(open(p).readline().strip() if d and os.path.exists(p) else "missing")
modes = ["%o" % (os.stat(p).st_mode & 0o777) for p in (d, os.path.join(d, "tls.key")) if d and os.path.exists(p)]
print("tls dir %s: %s" % (d, " | ".join(heads)), flush=True)
print("tls modes %s" % " ".join(modes), flush=True)
)");
  const std::string m = Write(dir, "tls.yaml",
                              R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: tl}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: tensorflow
              image: x
              command: [/usr/bin/python3, )" +
                                  script + R"(]
              env: [{name: TFJOB_TLS_DIR, value: /from/the/manifest}]
)");
  auto r = t::Run({t::BinDir() + "/tfjob", "run", m, "--state-dir", dir + "/state", "--task-tls"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string tls_dir = std::filesystem::absolute(dir + "/state/tls").lexically_normal().string();
  for (const std::string pod : {"tl-worker-0", "tl-worker-1"}) {
    EXPECT_THAT(
        r.out, HasSubstr("[" + pod + "] tls dir " + tls_dir +
                         ": -----BEGIN CERTIFICATE----- | -----BEGIN CERTIFICATE----- | -----BEGIN PRIVATE KEY-----\n"))
        << r.out;
    EXPECT_THAT(r.out, HasSubstr("[" + pod + "] tls modes 700 600\n")) << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(tls_dir));
  auto plain = t::Run({t::BinDir() + "/tfjob", "run", m, "--state-dir", dir + "/plain"});
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  EXPECT_THAT(plain.out, HasSubstr("[tl-worker-0] tls dir /from/the/manifest: missing | missing | missing\n"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/plain/tls"));
}

// A shell set up for Slurm does not leak into the replicas' placement.
TEST(TfjobRunTest, ReplicasUseTheirTfConfigWhateverResolverTheShellSelects) {
  const std::string dir = t::MakeTempDir("run-resolver");
  auto r = t::Run({t::BinDir() + "/tfjob", "run", t::SourceDir() + "/examples/counter/tfjob.yaml", "--state-dir", dir},
                  {{"TFJOB_CLUSTER_RESOLVER", "slurm"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("[counter-chief-0] counter: value 15 after 5 closures"));
}

TEST(TfjobRunTest, InvalidManifestGetsTheOperatorsMessage) {
  const std::string dir = t::MakeTempDir("run-invalid");
  const std::string m = Write(dir, "bad.yaml", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: bad}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: -1
      template: {spec: {containers: [{name: main, image: x}]}}
)");
  auto r = t::Run({t::BinDir() + "/tfjob", "run", m, "--state-dir", dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("tfjob: error: TFJob default/bad is invalid: "));
  EXPECT_THAT(r.err, HasSubstr("spec.tfReplicaSpecs[Worker].replicas"));
  EXPECT_THAT(r.err, HasSubstr("tensorflow"));
}

TEST(TfjobRunTest, MissingCommandFailsItsReplicaWithAClearMessage) {
  const std::string dir = t::MakeTempDir("run-nocmd");
  const std::string m = Write(dir, "nocmd.yaml", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: nocmd}
spec:
  runPolicy: {backoffLimit: 2}
  tfReplicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: tensorflow, image: x, command: [no-such-binary-xyz]}]}}
)");
  auto r = t::Run({t::BinDir() + "/tfjob", "run", m, "--state-dir", dir});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(
      r.out, HasSubstr("[nocmd-worker-0] tfjob run: cannot execute \"no-such-binary-xyz\": No such file or directory"));
  // OnFailure restarts it in place until backoffLimit is reached.
  EXPECT_THAT(r.out, HasSubstr("[nocmd-worker-0] restarting (restart 2)"));
  auto status = t::ReadJsonFile(dir + "/status.json");
  EXPECT_TRUE(HasCondition(status, "Failed"));
  bool backoff = false;
  for (const auto& c : status["conditions"])
    backoff |= c.value("message", "").find("backoff limit") != std::string::npos;
  EXPECT_TRUE(backoff) << status.dump();
}

TEST(TfjobRunTest, ExitCodePolicyWithNeverFailingPermanently) {
  const std::string dir = t::MakeTempDir("run-exitcode");
  const std::string m = Write(dir, "ec.yaml", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: ec}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: ExitCode
      template: {spec: {containers: [{name: tensorflow, image: x, command: [sh, -c, "exit 3"]}]}}
)");
  auto r = t::Run({t::BinDir() + "/tfjob", "run", m, "--state-dir", dir});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  // Kubeflow's message for a permanent exit code under ExitCode.
  EXPECT_THAT(
      r.out,
      HasSubstr(R"([tfjob] Failed=True (TFJobFailed): job "ec" is failing because "Worker" replica(s) failed.)"));
}

// Every replica serves on a socket the runner bound at its TF_CONFIG port
// and keeps for the whole run: a restarted replica gets the same socket
// back, and no other process can take the port meanwhile. A replica's
// "metrics: serving on :P" line is echoed as its metrics target.
TEST(TfjobRunTest, ARestartedReplicaGetsTheSameListeningSocket) {
  const std::string dir = t::MakeTempDir("run-sockets");
  // Checks fd 3 (TFJOB_LISTEN_FD) listens at the port TF_CONFIG gives this
  // task, reports a metrics port it bound itself, and fails its first run.
  const std::string script = Write(dir, "replica.py", R"(import json, os, socket, sys
cfg = json.loads(os.environ["TF_CONFIG"])
task = cfg["task"]
want = int(cfg["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])
s = socket.socket(fileno=int(os.environ["TFJOB_LISTEN_FD"]))
listening = s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
print("tf_config port %d, inherited socket port %d, listening %d" % (want, s.getsockname()[1], listening), flush=True)
m = socket.socket()
m.bind(("127.0.0.1", 0))
m.listen()
print("metrics: serving on :%d" % m.getsockname()[1], flush=True)
marker = os.path.join(sys.argv[1], "ran-%d" % task["index"])
if not os.path.exists(marker):
    open(marker, "w").close()
    sys.exit(1)
)");
  const std::string m = Write(dir, "sockets.yaml",
                              R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: rs}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: tensorflow, image: x, command: [/usr/bin/python3, )" +
                                  script + ", " + dir + R"(]}]}}
)");
  auto r = t::Run({t::BinDir() + "/tfjob", "run", m, "--state-dir", dir + "/state"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const std::string pod : {"rs-worker-0", "rs-worker-1"}) {
    SCOPED_TRACE(pod);
    std::regex line("\\[" + pod + "\\] tf_config port (\\d+), inherited socket port (\\d+), listening 1\n");
    std::vector<std::string> ports;
    for (std::sregex_iterator it(r.out.begin(), r.out.end(), line), end; it != end; ++it) {
      EXPECT_EQ((*it)[1], (*it)[2]);
      ports.push_back((*it)[1]);
    }
    ASSERT_EQ(ports.size(), 2u) << r.out;  // the first run and the restart
    EXPECT_EQ(ports[0], ports[1]);
    EXPECT_THAT(r.out, HasSubstr("[" + pod + "] restarting (restart 1)"));
    EXPECT_THAT(r.out, ::testing::ContainsRegex("\\[tfjob\\] " + pod + ": metrics on 127\\.0\\.0\\.1:[1-9][0-9]*\n"));
  }
}

}  // namespace
}  // namespace tfjob

namespace tfjob {
namespace {

// The local MNIST example as the docs run it, from the repository root:
// parameter servers, workers, checkpoints and the side-car evaluator, which
// ends on the final checkpoint with the chief's own evaluation.
TEST(TfjobRunTest, MnistLocalExampleWithEvaluator) {
  const std::string dir = ::tfjob::testing::MakeTempDir("run-mnist");
  // The example's manifest, with its checkpoint directory (a fixed path under
  // /tmp) moved into this test's own directory: runs of this test from other
  // checkouts on the machine, or repeated runs, would otherwise share it,
  // delete it under each other and resume from each other's checkpoints.
  std::ifstream in(::tfjob::testing::SourceDir() + "/examples/mnist/tfjob-local.yaml");
  std::stringstream manifest;
  manifest << in.rdbuf();
  const std::string fixed = "/tmp/tfjob-mnist-local";
  std::string text = manifest.str();
  int moved = 0;
  for (size_t at; (at = text.find("\"" + fixed + "\"")) != std::string::npos; ++moved) {
    text.replace(at + 1, fixed.size(), dir + "/ckpt");
  }
  ASSERT_EQ(moved, 3) << "the chief, PS and evaluator checkpoint directories in the example changed";
  std::ofstream(dir + "/tfjob-local.yaml") << text;
  // `timeout` stops a hung run with SIGTERM, which `tfjob run` passes on to
  // every replica, so a hang fails with the job's output instead of at
  // ctest's limit with none.
  auto r = ::tfjob::testing::Run({"bash", "-c",
                                  "cd \"$0\" && exec timeout --kill-after=30 300 \"$1\" run \"$2/tfjob-local.yaml\" "
                                  "--state-dir \"$2/state\"",
                                  ::tfjob::testing::SourceDir(), ::tfjob::testing::BinDir() + "/tfjob", dir});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Each replica's own lines, in order (replicas' output interleaves).
  auto lines_of = [&](const std::string& pod) {
    std::string mine;
    std::istringstream in(r.out);
    const std::string prefix = "[" + pod + "] ";
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(prefix, 0) == 0) mine += line.substr(prefix.size()) + "\n";
    }
    return mine;
  };
  const std::string chief = lines_of("mnist-mlp-local-chief-0"), evaluator = lines_of("mnist-mlp-local-evaluator-0");
  std::smatch c, e;
  ASSERT_TRUE(std::regex_search(chief, c, std::regex(R"(Evaluation\n32/32 - \S+ - loss: (\S+) - accuracy: (\S+))")))
      << r.out;
  ASSERT_TRUE(std::regex_search(
      evaluator, e,
      std::regex(R"(evaluator: checkpoint step 625 \(final\)\n32/32 - \S+ - loss: (\S+) - accuracy: (\S+))")))
      << r.out;
  EXPECT_EQ(c[1], e[1]);
  EXPECT_EQ(c[2], e[2]);
  EXPECT_NE(chief.find("Epoch 5/5\n"), std::string::npos) << chief;
  // Asynchronous parameter-server training: how stale the workers' pulls
  // are depends on the machine's load, and the final accuracy with it
  // (0.918 to 0.951 seen). 0.90 is far above chance (0.10), below that spread.
  EXPECT_GE(std::stod(c[2]), 0.90);
}

}  // namespace
}  // namespace tfjob
