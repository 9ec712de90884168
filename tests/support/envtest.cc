#include "tests/support/envtest.h"

#include "common/child_process.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

namespace tfjob::testing {
namespace {

namespace fs = std::filesystem;

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool Executable(const std::string& path) { return !path.empty() && access(path.c_str(), X_OK) == 0; }

}  // namespace

std::string ToolPath(const std::string& name) {
  const std::string p = SourceDir() + "/.tools/bin/" + name;
  return Executable(p) ? p : "";
}

ControlPlane* ControlPlane::Shared(std::string* why) {
  static std::mutex mu;
  static std::unique_ptr<ControlPlane> shared;
  static std::string failed;
  std::lock_guard g(mu);
  if (shared) return shared.get();
  if (!failed.empty()) {
    *why = failed;
    return nullptr;
  }
  auto cp = std::unique_ptr<ControlPlane>(new ControlPlane());
  cp->kit_ = Getenv("TFJOB_ENVTEST");
  if (cp->kit_.empty()) cp->kit_ = SourceDir() + "/../shared/envtest";
  if (!fs::exists(cp->kit_ + "/start-control-plane.sh")) {
    failed = "no envtest kit at " + cp->kit_ +
             " (../shared/envtest beside the checkout, or set TFJOB_ENVTEST): the real-API-server tests need it";
    *why = failed;
    return nullptr;
  }
  // The binaries, decompressed once per build tree and shared by every test
  // executable (the kit's script writes them atomically).
  std::string bin = BinDir() + "/../envtest-bin";
  std::string etcd = "/usr/bin/etcd";
  if (const std::string assets = Getenv("KUBEBUILDER_ASSETS"); !assets.empty()) {
    bin = MakeTempDir("envtest-assets");
    for (const char* b : {"kube-apiserver", "kubectl", "kube-controller-manager"}) {
      if (Executable(assets + "/" + b)) fs::create_symlink(assets + "/" + b, bin + "/" + b);
    }
    etcd = assets + "/etcd";
  }
  if (!Executable(etcd)) {
    failed = etcd + " not found: install etcd with 'apt-get install etcd-server' (bash scripts/setup.sh does)";
    *why = failed;
    return nullptr;
  }
  fs::create_directories(bin);
  cp->env_ = {"ETCD=" + etcd, "ENVTEST_BIN_DIR=" + fs::weakly_canonical(bin).string()};
  // Not a MakeTempDir: that one may be removed at exit before this is stopped.
  cp->dir_ = (fs::path(::testing::TempDir()) / ("tfjob-envtest-" + std::to_string(getpid()))).string();
  // control-plane-up.sh takes ports below the ephemeral range and retries
  // a failed bind itself; a start that fails for another reason is tried
  // again here, from an empty folder, before calling it a failure.
  bool started = false;
  for (int attempt = 1; attempt <= 3 && !started; ++attempt) {
    fs::remove_all(cp->dir_);
    fs::create_directories(cp->dir_);
    std::string why_not;
    started = cp->Start(&why_not);
    if (!started) {
      Run({cp->kit_ + "/stop-control-plane.sh", cp->dir_});
      failed = why_not + " (" + std::to_string(attempt) + " attempts)";
      std::cout << "envtest: attempt " << attempt << " failed: " << why_not << std::endl;
    }
  }
  if (!started) {
    *why = failed;
    return nullptr;
  }
  failed.clear();
  // If this process dies without its destructors, a watchdog stops the
  // control plane once the process is gone (setsid: it outlives us).
  const std::string watchdog = "while kill -0 " + std::to_string(getpid()) + " 2>/dev/null; do sleep 1; done; \"" +
                               cp->kit_ + "/stop-control-plane.sh\" \"" + cp->dir_ + "\" >/dev/null 2>&1";
  ChildOptions w;
  w.argv = {"/bin/bash", "-c", watchdog};
  w.output = ChildOptions::Output::kInherit;
  w.new_session = true;
  if (auto started = SpawnChild(w); !started.ok()) {
    ADD_FAILURE() << "envtest: the control plane's watchdog: " << started.status();
  }
  shared = std::move(cp);
  return shared.get();
}

bool ControlPlane::Start(std::string* why) const {
  std::map<std::string, std::string> env;
  for (const std::string& kv : env_) env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  RunResult r = Run({"/bin/bash", SourceDir() + "/tests/support/control-plane-up.sh", kit_, dir_}, env);
  std::cout << r.out << std::flush;  // the log shows the control plane starting
  if (r.exit_code != 0) {
    // The kit's own error line (which process exited, with its log's last
    // lines after it) says more than the clean-up that follows it.
    const std::string all = r.err.empty() ? r.out : r.err;
    const size_t error = all.find("start-control-plane: error:");
    std::string said = error == std::string::npos ? all : all.substr(error);
    while (!said.empty() && said.back() == '\n') said.pop_back();
    if (error == std::string::npos) said = said.substr(said.rfind('\n') + 1);
    *why = "envtest control plane did not start: " + said;
    return false;
  }
  std::ifstream ports(dir_ + "/ports.env");
  std::string line;
  while (std::getline(ports, line)) {
    if (line.rfind("KAS_PORT=", 0) == 0) server_ = "https://127.0.0.1:" + line.substr(9);
  }
  return true;
}

bool ControlPlane::Restart(std::string* why) const {
  const std::string before = server_;
  const RunResult stop = Run({kit_ + "/stop-control-plane.sh", dir_});
  // The kit's script takes the same ports again only when nothing answers
  // on them: wait until the old API server's port refuses connections.
  const std::string port = before.substr(before.rfind(':') + 1);
  for (int i = 0; i < 200; ++i) {
    if (Run({"/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/" + port}).exit_code != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!Start(why)) return false;
  if (server_ != before) {
    // Clients configured before the restart could never reach it again.
    *why = "the API server came back on " + server_ + ", not " + before + "; stop said: " + stop.out + stop.err;
    return false;
  }
  return true;
}

ControlPlane::~ControlPlane() {
  if (dir_.empty()) return;
  Run({kit_ + "/stop-control-plane.sh", dir_});
  const char* keep = std::getenv("TFJOB_KEEP_TEST_TMP");
  if (!(keep && *keep && std::string(keep) != "0")) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

RunResult ControlPlane::Kubectl(const std::vector<std::string>& args) const {
  std::string kubectl = ToolPath("kubectl");
  if (kubectl.empty()) {
    for (const std::string& kv : env_) {
      if (kv.rfind("ENVTEST_BIN_DIR=", 0) == 0) kubectl = kv.substr(16) + "/kubectl";
    }
  }
  std::vector<std::string> argv{kubectl, "--kubeconfig", admin_kubeconfig(), "--cache-dir", dir_ + "/.kube-cache"};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv);
}

RunResult ControlPlane::Apply(const std::string& manifest, bool server_side) const {
  static std::atomic<int> n{0};
  const std::string path = dir_ + "/apply-" + std::to_string(n++) + ".yaml";
  std::ofstream(path) << manifest;
  std::vector<std::string> args{"apply", "-f", path};
  if (server_side) args.push_back("--server-side");
  return Kubectl(args);
}

}  // namespace tfjob::testing
