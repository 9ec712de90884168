// tfjob-test-kueue: the test Kueue (tests/support/kueue_admitter.h) as a
// program, for scripts against a real cluster (tests/e2e/e2e.sh):
//
//   tfjob-test-kueue [--kubeconfig F] [--namespace NS] [--interval-ms N]
//       admits Workloads until SIGTERM or SIGINT (exit 0);
//   tfjob-test-kueue evict NS/NAME [--reason R] [--kubeconfig F]
//       evicts one admitted Workload as Kueue's preemption does, and exits.
//
// The kubeconfig defaults to $KUBECONFIG, else the pod's service account.
// Exit codes: 0 done, 1 an API error (evict), 2 bad usage or configuration.
// A test tool: never part of an image.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "common/flags.h"
#include "common/mutex.h"
#include "common/signals.h"
#include "kube/config.h"
#include "kube/rest_client.h"
#include "tests/support/kueue_admitter.h"

namespace {

using tfjob::Status;

std::optional<std::string> Getenv(const std::string& k) {
  const char* v = std::getenv(k.c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

int Fail(const Status& s, int code) {
  std::cerr << "tfjob-test-kueue: " << s.ToString() << std::endl;
  return code;
}

tfjob::Flags DeclareFlags() {
  tfjob::Flags flags;
  flags.Value("kubeconfig", "kubeconfig file (default $KUBECONFIG, else in-cluster)")
      .Value("namespace", "admit the Workloads of this namespace only (default: all)")
      .Value("interval-ms", "milliseconds between passes", "200")
      .Value("reason", "evict: the Evicted condition's reason", "Preempted");
  return flags;
}

// Runs passes until a signal; the pass in flight finishes first.
int Serve(tfjob::kube::Client& client, const tfjob::Flags& flags, tfjob::SignalWatcher& signals) {
  auto interval = flags.GetInt("interval-ms");
  if (!interval.ok() || *interval <= 0) {
    return Fail(tfjob::InvalidArgument("--interval-ms must be a positive integer"), 2);
  }
  tfjob::testing::TestKueue kueue(client, {flags.Get("namespace"), std::chrono::milliseconds(*interval), &std::cout});
  tfjob::Mutex mu;
  tfjob::CondVar stopped;
  bool stop = false;
  signals.OnStop([&] {
    tfjob::MutexLock l(mu);
    stop = true;
    stopped.NotifyAll();
  });
  std::cout << "tfjob-test-kueue: admitting Workloads"
            << (flags.Get("namespace").empty() ? "" : " in namespace " + flags.Get("namespace")) << std::endl;
  kueue.Start();
  {
    tfjob::MutexLock l(mu);
    stopped.Wait(l, [&] { return stop; });
  }
  kueue.Stop();
  std::cout << "tfjob-test-kueue: stopped after " << kueue.passes() << " passes" << std::endl;
  return 0;
}

int EvictOne(tfjob::kube::Client& client, const tfjob::Flags& flags) {
  const std::string target = flags.positional().size() == 2 ? flags.positional()[1] : "";
  const size_t slash = target.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == target.size()) {
    return Fail(tfjob::InvalidArgument("evict takes one NAMESPACE/NAME, got \"" + target + "\""), 2);
  }
  tfjob::testing::TestKueue kueue(client, {"", std::chrono::milliseconds(200), &std::cout});
  if (Status s = kueue.Evict(target.substr(0, slash), target.substr(slash + 1), flags.Get("reason")); !s.ok()) {
    return Fail(s, 1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread: SIGTERM and SIGINT become an orderly stop.
  tfjob::SignalWatcher signals;
  tfjob::Flags flags = DeclareFlags();
  const std::string usage =
      "usage: tfjob-test-kueue [flags]            admit Workloads until SIGTERM\n"
      "       tfjob-test-kueue evict NS/NAME [flags]  evict one admitted Workload\n" +
      flags.Usage();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << usage;
      return 0;
    }
  }
  if (Status s = flags.Parse({argv + 1, argv + argc}); !s.ok()) {
    std::cerr << usage;
    return Fail(s, 2);
  }
  const auto& positional = flags.positional();
  const bool evict = !positional.empty() && positional[0] == "evict";
  if (!positional.empty() && !evict) {
    std::cerr << usage;
    return Fail(tfjob::InvalidArgument("unknown command \"" + positional[0] + "\""), 2);
  }
  std::string kubeconfig = flags.Get("kubeconfig");
  if (kubeconfig.empty()) kubeconfig = Getenv("KUBECONFIG").value_or("");
  auto config = kubeconfig.empty() ? tfjob::kube::InClusterConfig(Getenv) : tfjob::kube::LoadKubeconfig(kubeconfig);
  if (!config.ok()) return Fail(config.status(), 2);
  auto client = tfjob::kube::RestClient::Create(*config);
  if (!client.ok()) return Fail(client.status(), 2);
  return evict ? EvictOne(**client, flags) : Serve(**client, flags, signals);
}
