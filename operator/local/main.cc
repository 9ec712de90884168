// tfjob: run a TFJob manifest on this machine (`tfjob run MANIFEST.yaml`).
#include <algorithm>
#include <atomic>
#include <climits>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <unistd.h>

#include "common/flags.h"
#include "operator/local/runner.h"

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  tfjob::Flags flags;
  flags.Value("state-dir", "where status.json and <pod>.pid files go (default: a new /tmp directory)")
      .Bool("task-tls",
            "mutual TLS between the replicas: a CA and certificate for this run in <state-dir>/tls, "
            "named by TFJOB_TLS_DIR in every replica's environment");
  const std::string usage =
      "usage: tfjob run MANIFEST.yaml [--state-dir DIR] [--task-tls]\n"
      "       tfjob --help | --version\n"
      "Runs a TFJob manifest on this machine under the operator's rules: one process per\n"
      "replica, TF_CONFIG on 127.0.0.1. Exits 0 when the job Succeeded, 1 when it Failed,\n"
      "2 for an invalid manifest.\n"
      "flags of run:\n" +
      flags.Usage();
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    std::cout << usage;
    return 0;
  }
  if (!args.empty() && args[0] == "--version") {
    std::cout << "tfjob " << TFJOB_VERSION << std::endl;
    return 0;
  }
  if (args.empty() || args[0] != "run") {
    std::cerr << (args.empty() ? "tfjob: error: no command\n" : "tfjob: error: unknown command \"" + args[0] + "\"\n")
              << usage;
    return 2;
  }
  if (std::find(args.begin() + 1, args.end(), "--help") != args.end()) {
    std::cout << usage;
    return 0;
  }
  if (auto s = flags.Parse({args.begin() + 1, args.end()}); !s.ok() || flags.positional().size() != 1) {
    std::cerr << "tfjob: error: " << (s.ok() ? "give exactly one manifest" : s.message()) << "\n" << usage;
    return 2;
  }
  // Sibling binaries (tfjob-runtime) are found next to this one first.
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  tfjob::op::local::RunOptions o;
  if (n > 0) o.bin_dir = std::filesystem::path(std::string(self, static_cast<size_t>(n))).parent_path().string();
  o.state_dir = flags.Get("state-dir");
  o.task_tls = flags.GetBool("task-tls");
  o.out = &std::cout;
  o.err = &std::cerr;
  // SIGTERM / SIGINT stop the replicas (their own process groups would
  // outlive us) before exiting. A handler, not a blocked mask: children
  // inherit masks across exec, but not handlers.
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  o.stop = &g_stop;
  return tfjob::op::local::RunJob(flags.positional()[0], o);
}
