// tfjob-apiserver-double: the in-memory kube-apiserver double as a process,
// for humans and for tests that want it out of process.
//
//   tfjob-apiserver-double --port 8001 --print-port
//   kubectl --server http://127.0.0.1:8001 get tfjobs
//
// Runs until SIGINT or SIGTERM.
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "common/flags.h"
#include "tests/support/apiserver/apiserver_double.h"

int main(int argc, char** argv) {
  tfjob::Flags flags;
  flags.Value("port", "TCP port on the bind address; 0 picks a free one", "0")
      .Value("bind", "IPv4 address to listen on", "127.0.0.1")
      .Value("compaction-window", "watch events kept for replay; older resourceVersions get 410 Gone", "10000")
      .Value("bookmark-interval-ms", "period of BOOKMARK events on watches that allow them", "1000")
      .Value("token", "require this bearer token on every request", "")
      .Value("kubeconfig", "write a kubeconfig pointing at the server to this path", "")
      .Bool("print-port", "print the port number alone on stdout once listening")
      .Bool("no-tfjob-crd", "do not pre-register the kubeflow.org/v1 TFJob CRD")
      .Bool("podgroup-crds", "pre-register Volcano's and scheduler-plugins' PodGroup CRDs")
      .Bool("help", "show this help")
      .Bool("version", "print the version");
  tfjob::Status st = flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (!st.ok() || flags.GetBool("help")) {
    if (!st.ok()) std::cerr << "tfjob-apiserver-double: error: " << st.message() << "\n";
    (st.ok() ? std::cout : std::cerr) << "usage: tfjob-apiserver-double [flags]\n" << flags.Usage();
    return st.ok() ? 0 : 2;
  }
  if (flags.GetBool("version")) {
    std::cout << "tfjob-apiserver-double " << TFJOB_VERSION << std::endl;
    return 0;
  }
  tfjob::testing::ApiServerDouble::Options options;
  auto port = flags.GetInt("port");
  auto window = flags.GetInt("compaction-window");
  auto bookmark = flags.GetInt("bookmark-interval-ms");
  for (const auto* v : {&port, &window, &bookmark}) {
    if (!v->ok()) {
      std::cerr << v->status() << "\n";
      return 2;
    }
  }
  if (*port < 0 || *port > 65535 || *window < 1 || *bookmark < 1) {
    std::cerr << "--port must be 0..65535, --compaction-window and --bookmark-interval-ms positive\n";
    return 2;
  }
  options.port = static_cast<int>(*port);
  options.bind_address = flags.Get("bind");
  options.compaction_window = static_cast<size_t>(*window);
  options.bookmark_interval = std::chrono::milliseconds(*bookmark);
  options.bearer_token = flags.Get("token");
  options.register_tfjob_crd = !flags.GetBool("no-tfjob-crd");
  options.register_podgroup_crds = flags.GetBool("podgroup-crds");

  // Block the signals before any thread starts so only sigwait sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = tfjob::testing::ApiServerDouble::Start(options);
  if (!server.ok()) {
    std::cerr << "tfjob-apiserver-double: " << server.status() << "\n";
    return 1;
  }
  if (!flags.Get("kubeconfig").empty()) {
    tfjob::Status w = (*server)->WriteKubeconfig(flags.Get("kubeconfig"));
    if (!w.ok()) {
      std::cerr << "tfjob-apiserver-double: " << w << "\n";
      return 1;
    }
  }
  if (flags.GetBool("print-port")) {
    std::printf("%d\n", (*server)->port());
    std::fflush(stdout);
  }
  std::cerr << "tfjob-apiserver-double listening on " << (*server)->url() << "\n";
  int sig = 0;
  sigwait(&set, &sig);
  std::cerr << "tfjob-apiserver-double: signal " << sig << ", stopping\n";
  return 0;
}
