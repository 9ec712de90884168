#include "services/runtime/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>

#include "common/child_process.h"
#include "common/flags.h"
#include "common/mutex.h"
#include "common/signals.h"
#include "common/pki.h"
#include "services/base/ports.h"
#include "services/cluster/cluster.h"
#include "services/rpc/auth.h"

namespace tfjob::runtime {
namespace {

using programs::ReportError;

struct Child {
  std::string name;
  pid_t pid = -1;
  int out_fd = -1;
  std::thread pump;
  int status = 0;
  bool exited = false;
};

// What `local` runs for each task: this executable, as /proc/self/exe names
// it. $TFJOB_RUNTIME_SELF, when set and not empty, is run instead: where the
// binary was started through an explicitly invoked dynamic loader
// (`ld-linux-x86-64.so.2 --library-path ... tfjob-runtime`, as the GPU
// bundle's wrappers do, scripts/gpu-bundle.sh), /proc/self/exe is the
// loader, and the variable names the wrapper that starts the runtime again.
std::string SelfExe() {
  if (const char* self = std::getenv("TFJOB_RUNTIME_SELF"); self != nullptr && *self != '\0') return self;
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "tfjob-runtime";
  buf[n] = '\0';
  return buf;
}

// Starts argv with TF_CONFIG and, when `listen_fd` >= 0, that listening
// socket as its own (services/base/ports.h); its stdout+stderr go through a
// pipe. The task dies with the launcher, even a SIGKILLed one.
StatusOr<std::pair<pid_t, int>> Spawn(const std::vector<std::string>& argv, const std::string& tf_config,
                                      const std::string& token, const std::string& tls_dir, int listen_fd) {
  ChildOptions c;
  c.argv = argv;
  c.env["TF_CONFIG"] = tf_config;
  // The run's task token (services/rpc/auth.h), whatever the shell had.
  c.env[rpc::kTokenEnv] = token;
  // The children's roles come from this TF_CONFIG even when the launcher
  // itself was started with another resolver selected.
  c.unset_env = {rpc::kTokenFileEnv, "TFJOB_CLUSTER_RESOLVER", base::kListenFdEnv};
  // The run's TLS material with --tls, else none (whatever the shell had).
  if (tls_dir.empty()) {
    c.unset_env.push_back(pki::kTlsDirEnv);
  } else {
    c.env[pki::kTlsDirEnv] = tls_dir;
  }
  if (listen_fd >= 0) base::PassListenerToChild(listen_fd, c);
  ASSIGN_OR_RETURN(SpawnedChild child, SpawnChild(c));
  return std::make_pair(child.pid, child.out_fd);
}

}  // namespace

int RunLocal(const std::vector<std::string>& args, const programs::ProgramList& programs, std::ostream& out,
             std::ostream& err) {
  // Before any thread: a signal to the launcher becomes SIGTERM to every
  // task started so far (and to any started after it came).
  SignalWatcher signals;
  Mutex pids_mu;
  std::vector<pid_t> pids;
  signals.OnStop([&] {
    MutexLock g(pids_mu);
    for (pid_t p : pids) kill(p, SIGTERM);
  });
  Flags flags;
  flags.Value("ps", "parameter servers (0: the workers train together, multi-worker mirrored)", "0")
      .Value("workers", "workers", "2")
      .Value("host", "the address every task listens on and TF_CONFIG names (IPv4 or IPv6)", "127.0.0.1")
      .Bool("tls", "mutual TLS between the tasks, with a CA and certificate made for this run");
  // Flags before the program name belong to the launcher.
  std::vector<std::string> mine, rest;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    if (args[i] == "--") {
      ++i;
      break;
    }
    if (args[i].rfind("--", 0) != 0) break;
    mine.push_back(args[i]);
    // A flag without "=" takes the next argument as its value, unless it is boolean.
    const bool takes_value = !flags.IsBool(args[i].substr(2));
    if (takes_value && args[i].find('=') == std::string::npos && i + 1 < args.size()) mine.push_back(args[++i]);
  }
  rest.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (Status s = flags.Parse(mine); !s.ok()) return ReportError(s, err);
  auto nps = flags.GetInt("ps");
  auto nworkers = flags.GetInt("workers");
  if (!nps.ok()) return ReportError(nps.status(), err);
  if (!nworkers.ok()) return ReportError(nworkers.status(), err);
  if (*nps < 0 || *nps > 64) return ReportError(InvalidArgument("local: --ps must be in 0..64"), err);
  if (*nworkers < 1 || *nworkers > 64) return ReportError(InvalidArgument("local: --workers must be in 1..64"), err);
  if (rest.empty()) return ReportError(InvalidArgument("local: no program given (e.g. -- counter --increments 1,2,3)"), err);
  bool known = false;
  for (const auto& p : programs) known |= p->name() == rest[0];
  if (!known) return ReportError(InvalidArgument("local: unknown program \"" + rest[0] + "\""), err);

  // Every task's listening socket, bound here so TF_CONFIG can name its
  // port before the task starts; the task inherits it and serves on it.
  std::map<std::string, std::vector<std::string>> jobs;
  std::map<std::string, base::ListeningSocket> sockets;  // "job:index" -> socket, until handed over
  auto add = [&](const std::string& job, int64_t n) -> Status {
    for (int64_t k = 0; k < n; ++k) {
      ASSIGN_OR_RETURN(base::ListeningSocket s, base::ListeningSocket::Listen(flags.Get("host"), 0));
      jobs[job].push_back(s.address());
      sockets[job + ":" + std::to_string(k)] = std::move(s);
    }
    return Status::Ok();
  };
  // With parameter servers the chief coordinates; without, the workers
  // form the whole cluster and worker 0 leads it (as in a Kubeflow TFJob of
  // workers only).
  const bool with_chief = *nps > 0;
  for (auto [job, n] : {std::pair<std::string, int64_t>{"chief", with_chief ? 1 : 0}, {"ps", *nps}, {"worker", *nworkers}}) {
    if (n == 0) continue;
    if (Status s = add(job, n); !s.ok()) return ReportError(s.WithContext("local: flag --host"), err);
  }
  auto spec = cluster::ClusterSpec::FromLists(jobs);
  if (!spec.ok()) return ReportError(spec.status(), err);

  // One task token per run: the tasks accept only each other.
  const std::string token = rpc::NewToken();
  // With --tls, a CA and certificate for this run only, in a private
  // directory removed when the run ends.
  std::unique_ptr<pki::TempTlsDir> tls;
  if (flags.GetBool("tls")) {
    auto made = pki::TempTlsDir::Make("tfjob-runtime-local");
    if (!made.ok()) return ReportError(made.status().WithContext("local --tls"), err);
    tls = std::move(made).value();
  }
  const std::string tls_dir = tls ? tls->path() : "";
  std::vector<std::string> argv{SelfExe()};
  argv.insert(argv.end(), rest.begin(), rest.end());
  Mutex out_mu;
  std::vector<std::unique_ptr<Child>> children;
  auto start = [&](const std::string& job, int64_t index) -> Status {
    cluster::ClusterConfig cfg{*spec, cluster::TaskId{job, index}, "cloud", ""};
    // The child has its own copy from here on; the launcher's goes.
    base::ListeningSocket socket = std::move(sockets[job + ":" + std::to_string(index)]);
    ASSIGN_OR_RETURN(auto spawned, Spawn(argv, cluster::ToTfConfigJson(cfg), token, tls_dir, socket.fd()));
    auto c = std::make_unique<Child>();
    c->name = job + ":" + std::to_string(index);
    c->pid = spawned.first;
    {
      MutexLock g(pids_mu);
      pids.push_back(c->pid);
      if (signals.stop()) kill(c->pid, SIGTERM);
    }
    c->out_fd = spawned.second;
    const bool chief = job == (with_chief ? "chief" : "worker") && index == 0;
    c->pump = std::thread([fd = c->out_fd, prefix = chief ? std::string() : "[" + c->name + "] ", &out, &out_mu] {
      std::string pending;
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
        if (n < 0) continue;
        pending.append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = pending.find('\n')) != std::string::npos) {
          MutexLock g(out_mu);
          out << prefix << pending.substr(0, nl + 1) << std::flush;
          pending.erase(0, nl + 1);
        }
      }
      if (!pending.empty()) {
        MutexLock g(out_mu);
        out << prefix << pending << "\n" << std::flush;
      }
      close(fd);
    });
    children.push_back(std::move(c));
    return Status::Ok();
  };
  Status started;
  for (int64_t k = 0; k < *nps && started.ok(); ++k) started = start("ps", k);
  for (int64_t k = 0; k < *nworkers && started.ok(); ++k) started = start("worker", k);
  if (started.ok() && with_chief) started = start("chief", 0);
  const std::string lead = with_chief ? "chief:0" : "worker:0";

  auto reap = [&](Child& c, int options) {
    if (c.exited) return true;
    // Under pids_mu: a reaped pid may be reused, and must no longer be signalled.
    MutexLock g(pids_mu);
    pid_t r = waitpid(c.pid, &c.status, options);
    if (r == c.pid) {
      c.exited = true;
      std::erase(pids, c.pid);
    }
    return c.exited;
  };
  int rc = 1;
  if (started.ok()) {
    Child& chief = **std::find_if(children.begin(), children.end(), [&](const auto& c) { return c->name == lead; });
    // Polled, not a blocking wait: the signal forwarder takes pids_mu too.
    while (!reap(chief, WNOHANG)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    rc = ExitCodeOf(chief.status);
  } else {
    ReportError(started, err);
  }
  // The chief shuts the cluster down when training is complete (workers
  // that train together finish with worker 0): give the tasks a grace
  // period, then make sure nothing is left running. A lead that failed
  // shuts nothing down (a restarted chief would need the cluster), and this
  // launcher restarts nobody: stop the rest at once.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(rc == 0 ? 10 : 0);
  for (auto& c : children) {
    while (!reap(*c, WNOHANG) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!c->exited) {
      {
        MutexLock g(out_mu);
        err << "tfjob-runtime: " << c->name << " still running after " << lead << " finished; terminating it" << std::endl;
      }
      kill(c->pid, SIGTERM);
      const auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (!reap(*c, WNOHANG) && std::chrono::steady_clock::now() < hard) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!c->exited) {
        kill(c->pid, SIGKILL);
        reap(*c, 0);
      }
    } else if (c->name != lead && !(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0)) {
      MutexLock g(out_mu);
      err << "tfjob-runtime: " << c->name << " exited with "
          << (WIFEXITED(c->status) ? "code " + std::to_string(WEXITSTATUS(c->status))
                                   : "signal " + std::to_string(WTERMSIG(c->status)))
          << std::endl;
    }
  }
  for (auto& c : children) c->pump.join();
  return rc;
}

}  // namespace tfjob::runtime
