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

#include "contract/env.h"
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
// it, unless `override` (TFJOB_RUNTIME_SELF) names another: where the binary
// was started through an explicitly invoked dynamic loader
// (`ld-linux-x86-64.so.2 --library-path ... tfjob-runtime`, as the GPU
// bundle's wrappers do, scripts/gpu-bundle.sh), /proc/self/exe is the
// loader, and the variable names the wrapper that starts the runtime again.
std::string SelfExe(const std::string& override) {
  if (!override.empty()) return override;
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
  c.env[contract::kTfConfigEnv] = tf_config;
  // The run's task token (services/rpc/auth.h), whatever the shell had.
  c.env[rpc::kTokenEnv] = token;
  // The children's roles come from this TF_CONFIG even when the launcher
  // itself was started with another resolver selected.
  c.unset_env = {rpc::kTokenFileEnv, contract::kClusterResolverEnv, base::kListenFdEnv};
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

// What `local` was asked for: the launcher's own flags, then the program
// and its arguments.
struct LocalOptions {
  int64_t ps = 0, workers = 2;
  std::string host;
  bool tls = false;
  std::vector<std::string> program;  // program name, then its arguments
};

StatusOr<LocalOptions> ParseLocalFlags(const std::vector<std::string>& args, const programs::ProgramList& programs) {
  Flags flags;
  flags.Value("ps", "parameter servers (0: the workers train together, multi-worker mirrored)", "0")
      .Value("workers", "workers", "2")
      .Value("host", "the address every task listens on and TF_CONFIG names (IPv4 or IPv6)", "127.0.0.1")
      .Bool("tls", "mutual TLS between the tasks, with a CA and certificate made for this run");
  // Flags before the program name belong to the launcher.
  std::vector<std::string> mine;
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
  LocalOptions o;
  o.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  RETURN_IF_ERROR(flags.Parse(mine));
  ASSIGN_OR_RETURN(o.ps, flags.GetInt("ps"));
  ASSIGN_OR_RETURN(o.workers, flags.GetInt("workers"));
  o.host = flags.Get("host");
  o.tls = flags.GetBool("tls");
  if (o.ps < 0 || o.ps > 64) return InvalidArgument("local: --ps must be in 0..64");
  if (o.workers < 1 || o.workers > 64) return InvalidArgument("local: --workers must be in 1..64");
  if (o.program.empty()) return InvalidArgument("local: no program given (e.g. -- counter --increments 1,2,3)");
  bool known = false;
  for (const auto& p : programs) known |= p->name() == o.program[0];
  if (!known) return InvalidArgument("local: unknown program \"" + o.program[0] + "\"");
  return o;
}

// Every task's listening socket, bound here so TF_CONFIG can name its port
// before the task starts; the task inherits it and serves on it. With
// parameter servers the chief coordinates; without, the workers form the
// whole cluster and worker 0 leads it (as in a Kubeflow TFJob of workers
// only).
struct BoundCluster {
  cluster::ClusterSpec spec;
  std::map<std::string, base::ListeningSocket> sockets;  // "job:index" -> socket, until handed over
};

StatusOr<BoundCluster> BindCluster(const LocalOptions& o) {
  std::map<std::string, std::vector<std::string>> jobs;
  BoundCluster b;
  const std::pair<std::string, int64_t> counts[] = {{"chief", o.ps > 0 ? 1 : 0}, {"ps", o.ps}, {"worker", o.workers}};
  for (const auto& [job, n] : counts) {
    for (int64_t k = 0; k < n; ++k) {
      auto s = base::ListeningSocket::Listen(o.host, 0);
      if (!s.ok()) return s.status().WithContext("local: flag --host");
      jobs[job].push_back(s->address());
      b.sockets[job + ":" + std::to_string(k)] = std::move(s).value();
    }
  }
  ASSIGN_OR_RETURN(b.spec, cluster::ClusterSpec::FromLists(jobs));
  return b;
}

// The running tasks: started, their output copied to `out` line by line,
// reaped, and stopped when the lead is done.
class TaskSet {
 public:
  TaskSet(std::ostream& out, std::ostream& err, SignalWatcher& signals) : out_(out), err_(err), signals_(signals) {
    // A signal to the launcher becomes SIGTERM to every task started so
    // far (and to any started after it came: Start checks).
    signals_.OnStop([this] {
      MutexLock g(pids_mu_);
      for (pid_t p : pids_) kill(p, SIGTERM);
    });
  }
  ~TaskSet() {
    for (auto& c : children_) {
      if (c->pump.joinable()) c->pump.join();
    }
  }

  // The `lead`'s lines go out as they are, the others' as "[job:index] line".
  Status Start(const std::vector<std::string>& argv, const std::string& name, const std::string& tf_config,
               const std::string& token, const std::string& tls_dir, base::ListeningSocket socket, bool lead) {
    ASSIGN_OR_RETURN(auto spawned, Spawn(argv, tf_config, token, tls_dir, socket.fd()));
    auto c = std::make_unique<Child>();
    c->name = name;
    c->pid = spawned.first;
    {
      MutexLock g(pids_mu_);
      pids_.push_back(c->pid);
      if (signals_.stop()) kill(c->pid, SIGTERM);
    }
    c->out_fd = spawned.second;
    c->pump =
        std::thread([this, fd = c->out_fd, prefix = lead ? std::string() : "[" + name + "] "] { Pump(fd, prefix); });
    children_.push_back(std::move(c));
    return Status::Ok();
  }

  // The lead's exit code, once it exits.
  int WaitFor(const std::string& lead) {
    Child& c = Find(lead);
    // Polled, not a blocking wait: the signal forwarder takes pids_mu_ too.
    while (!Reap(c, WNOHANG)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return ExitCodeOf(c.status);
  }

  // The chief shuts the cluster down when training is complete (workers
  // that train together finish with worker 0): the tasks get `grace`, then
  // nothing is left running. Says which task was still running or failed.
  void StopAll(const std::string& lead, std::chrono::seconds grace) {
    const auto deadline = std::chrono::steady_clock::now() + grace;
    for (auto& c : children_) {
      while (!Reap(*c, WNOHANG) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!c->exited) {
        Say("tfjob-runtime: " + c->name + " still running after " + lead + " finished; terminating it");
        Terminate(*c);
      } else if (c->name != lead && !(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0)) {
        Say("tfjob-runtime: " + c->name + " exited with " +
            (WIFEXITED(c->status) ? "code " + std::to_string(WEXITSTATUS(c->status))
                                  : "signal " + std::to_string(WTERMSIG(c->status))));
      }
    }
  }

 private:
  Child& Find(const std::string& name) {
    return **std::find_if(children_.begin(), children_.end(), [&](const auto& c) { return c->name == name; });
  }

  bool Reap(Child& c, int options) {
    if (c.exited) return true;
    // Under pids_mu_: a reaped pid may be reused, and must no longer be signalled.
    MutexLock g(pids_mu_);
    if (waitpid(c.pid, &c.status, options) == c.pid) {
      c.exited = true;
      std::erase(pids_, c.pid);
    }
    return c.exited;
  }

  void Terminate(Child& c) {
    kill(c.pid, SIGTERM);
    const auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (!Reap(c, WNOHANG) && std::chrono::steady_clock::now() < hard) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!c.exited) {
      kill(c.pid, SIGKILL);
      Reap(c, 0);
    }
  }

  void Say(const std::string& line) {
    MutexLock g(out_mu_);
    err_ << line << std::endl;
  }

  void Pump(int fd, const std::string& prefix) {
    ForEachLine(fd, [&](const std::string& line) {
      MutexLock g(out_mu_);
      out_ << prefix << line << "\n" << std::flush;
    });
    close(fd);
  }

  std::ostream& out_;
  std::ostream& err_;
  SignalWatcher& signals_;
  Mutex out_mu_;  // one line at a time on out_ and err_
  Mutex pids_mu_;
  std::vector<pid_t> pids_ TFJOB_GUARDED_BY(pids_mu_);  // started and not reaped
  std::vector<std::unique_ptr<Child>> children_;        // the launcher's thread only
};

}  // namespace

int RunLocal(const std::vector<std::string>& args, const programs::ProgramList& programs, const std::string& self_exe,
             std::ostream& out, std::ostream& err) {
  // Before any thread (SignalWatcher's rule).
  SignalWatcher signals;
  auto options = ParseLocalFlags(args, programs);
  if (!options.ok()) return ReportError(options.status(), err);
  auto bound = BindCluster(*options);
  if (!bound.ok()) return ReportError(bound.status(), err);

  // One task token per run: the tasks accept only each other.
  const std::string token = rpc::NewToken();
  // With --tls, a CA and certificate for this run only, in a private
  // directory removed when the run ends.
  std::unique_ptr<pki::TempTlsDir> tls;
  if (options->tls) {
    auto made = pki::TempTlsDir::Make("tfjob-runtime-local");
    if (!made.ok()) return ReportError(made.status().WithContext("local --tls"), err);
    tls = std::move(made).value();
  }
  const std::string tls_dir = tls ? tls->path() : "";
  std::vector<std::string> argv{SelfExe(self_exe)};
  argv.insert(argv.end(), options->program.begin(), options->program.end());
  const bool with_chief = options->ps > 0;
  const std::string lead = with_chief ? "chief:0" : "worker:0";

  TaskSet tasks(out, err, signals);
  auto start = [&](const std::string& job, int64_t index) {
    const std::string name = job + ":" + std::to_string(index);
    const cluster::ClusterConfig cfg{bound->spec, cluster::TaskId{job, index}, "cloud", ""};
    // The child has its own copy from here on; the launcher's goes.
    return tasks.Start(argv, name, cluster::ToTfConfigJson(cfg), token, tls_dir, std::move(bound->sockets[name]),
                       name == lead);
  };
  Status started;
  for (int64_t k = 0; k < options->ps && started.ok(); ++k) started = start("ps", k);
  for (int64_t k = 0; k < options->workers && started.ok(); ++k) started = start("worker", k);
  if (started.ok() && with_chief) started = start("chief", 0);

  int rc = 1;
  if (started.ok()) {
    rc = tasks.WaitFor(lead);
  } else {
    ReportError(started, err);
  }
  // A lead that failed shuts nothing down (a restarted chief would need the
  // cluster), and this launcher restarts nobody: stop the rest at once.
  tasks.StopAll(lead, std::chrono::seconds(rc == 0 ? 10 : 0));
  return rc;
}

}  // namespace tfjob::runtime
