#include "operator/local/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <ostream>
#include <string_view>
#include <thread>

#include "contract/env.h"
#include "common/child_process.h"
#include "common/files.h"
#include "common/mutex.h"
#include "common/pki.h"
#include "operator/api/codec.h"
#include "operator/api/defaults.h"
#include "operator/api/names.h"
#include "operator/api/validation.h"
#include "operator/controller/planner.h"
#include "common/token.h"
#include "services/base/ports.h"

namespace tfjob::op::local {
namespace {

using json = nlohmann::json;
using controller::Action;
using controller::PodView;
using controller::ServiceView;

constexpr const char* kUid = "local-run";

// The port in a replica's "metrics: serving on :P" line
// (services/monitoring/runtime_metrics.h), or 0.
int MetricsPortIn(const std::string& line) {
  static constexpr std::string_view kPrefix = "metrics: serving on :";
  if (line.rfind(kPrefix, 0) != 0) return 0;
  const std::string digits = line.substr(kPrefix.size());
  if (digits.empty() || digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  const int port = std::stoi(digits);
  return port <= 65535 ? port : 0;
}

struct LocalPod {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string restart_policy;  // the pod spec's: Never, OnFailure, Always
  int listen_fd = -1;          // the replica's listening socket (the runner keeps it), -1: none
  // The /metrics port the running process reported ("metrics: serving on
  // :P"), 0 until it does; written by the output pump.
  std::atomic<int> metrics_port{0};
  pid_t pid = -1;
  int fd = -1;
  bool start_failed = false;  // it could not be started: Poll takes it as exit code 127
  std::thread pump;
  std::string phase = "Pending";
  std::optional<int> exit_code;
  int32_t restarts = 0;
};

class Backend {
 public:
  // `sockets`: each replica's listening socket by pod name, kept by the
  // caller for the whole run (a restarted replica gets the same one).
  Backend(const RunOptions& o, Mutex& out_mu, const std::map<std::string, base::ListeningSocket>& sockets)
      : o_(o), out_mu_(out_mu), sockets_(sockets) {}
  ~Backend() {
    for (auto& [name, p] : pods_) Kill(*p);
  }

  void Create(const json& pod) {
    auto p = std::make_unique<LocalPod>();
    const auto& meta = pod["metadata"];
    p->name = meta.value("name", "");
    for (auto it = meta["labels"].begin(); it != meta["labels"].end(); ++it)
      p->labels[it.key()] = it->get<std::string>();
    p->restart_policy = pod["spec"].value("restartPolicy", "Never");
    if (auto s = sockets_.find(p->name); s != sockets_.end()) p->listen_fd = s->second.fd();
    for (const auto& c : pod["spec"].value("containers", json::array())) {
      if (c.value("name", "") != api::kDefaultContainerName) continue;
      for (const auto& a : c.value("command", json::array())) p->argv.push_back(a.get<std::string>());
      for (const auto& a : c.value("args", json::array())) p->argv.push_back(a.get<std::string>());
      for (const auto& e : c.value("env", json::array())) {
        if (e.contains("value") && e["value"].is_string()) p->env[e.value("name", "")] = e["value"].get<std::string>();
      }
    }
    Start(*p);
    pods_[p->name] = std::move(p);
  }

  void Delete(const std::string& name) {
    auto it = pods_.find(name);
    if (it == pods_.end()) return;
    Kill(*it->second);
    pods_.erase(it);
  }

  // Reaps exited processes, restarting in place where the pod's policy says.
  void Poll() {
    for (auto& [name, p] : pods_) {
      int code = 127;
      if (p->start_failed) {
        p->start_failed = false;
      } else {
        if (p->pid <= 0) continue;
        int status = 0;
        if (waitpid(p->pid, &status, WNOHANG) != p->pid) continue;
        code = ExitCodeOf(status);
      }
      p->pid = -1;
      p->exit_code = code;
      Say("[" + name + "] exited with code " + std::to_string(code));
      const bool restart = p->restart_policy == "Always" || (p->restart_policy == "OnFailure" && code != 0);
      if (restart) {
        ++p->restarts;
        Say("[" + name + "] restarting (restart " + std::to_string(p->restarts) + ")");
        if (p->pump.joinable()) p->pump.join();
        Start(*p);
      } else {
        p->phase = code == 0 ? "Succeeded" : "Failed";
      }
    }
  }

  std::vector<PodView> Views() const {
    std::vector<PodView> out;
    for (const auto& [name, p] : pods_) {
      PodView v;
      v.name = name;
      v.uid = name + "-" + std::to_string(p->restarts);
      v.labels = p->labels;
      v.phase = p->phase;
      v.exit_code = p->exit_code;
      v.restart_count = p->restarts;
      v.controller_uid = kUid;
      out.push_back(v);
    }
    return out;
  }

  bool AnyRunning() const {
    for (const auto& [n, p] : pods_) {
      if (p->pid > 0) return true;
    }
    return false;
  }

  bool Running(const std::string& name) const {
    auto it = pods_.find(name);
    return it != pods_.end() && it->second->pid > 0;
  }

  // While a replica is down (exited, being re-created, not yet started) the
  // runner still holds its port, so connections to it would be accepted
  // by the kernel and then hang until the caller's timeout. Here they are
  // reset at once instead, as a closed port would refuse them: callers see
  // the replica gone and move on (a coordinator re-queues its closures).
  void RefuseWhileDown() {
    for (const auto& [name, socket] : sockets_) {
      if (Running(name)) continue;
      pollfd p{socket.fd(), POLLIN, 0};
      while (poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) {
        const int fd = accept4(socket.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        const linger reset{1, 0};  // close with RST, not FIN
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
        close(fd);
      }
    }
  }

  void KillAll() {
    for (auto& [n, p] : pods_) Kill(*p);
  }

  // Prometheus file-based service discovery: one target per replica that
  // serves /metrics, at the port its running process reported. Rewritten
  // only when it changes.
  void WriteTargets(const std::string& dir) {
    json targets = json::array();
    for (const auto& entry : pods_) {
      // A named reference, not a structured binding: clang 14 (the
      // thread-safety check) cannot capture bindings in a lambda.
      const auto& p = entry.second;
      const int port = p->metrics_port.load();
      if (port == 0) continue;
      auto label = [&](std::string_view k) {
        auto it = p->labels.find(std::string(k));
        return it == p->labels.end() ? std::string() : it->second;
      };
      targets.push_back({{"targets", json::array({"127.0.0.1:" + std::to_string(port)})},
                         {"labels",
                          {{"tfjob_job_name", label(api::kJobNameLabel)},
                           {"replica_type", label(api::kReplicaTypeLabel)},
                           {"replica_index", label(api::kReplicaIndexLabel)}}}});
    }
    const std::string text = targets.dump(2) + "\n";
    if (text == targets_written_) return;
    if (WriteFileAtomic(dir + "/prometheus-targets.json", text).ok()) targets_written_ = text;
  }

  // One <pod>.pid per live replica. A live replica's file is only ever
  // replaced by rename, never removed first, so a reader always finds it.
  void WritePidFiles(const std::string& dir) {
    std::map<std::string, pid_t> live;
    for (const auto& [name, p] : pods_) {
      if (p->pid > 0) live[name + ".pid"] = p->pid;
    }
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() == ".pid" && !live.count(entry.path().filename().string())) {
        std::filesystem::remove(entry.path());
        pids_written_.erase(entry.path().filename().string());
      }
    }
    for (const auto& [file, pid] : live) {
      auto it = pids_written_.find(file);
      if (it != pids_written_.end() && it->second == pid) continue;
      if (WriteFileAtomic(dir + "/" + file, std::to_string(pid) + "\n").ok()) pids_written_[file] = pid;
    }
  }

 private:
  std::string Resolve(const std::string& cmd) const {
    if (cmd.find('/') != std::string::npos || o_.bin_dir.empty()) return cmd;
    const std::string local = o_.bin_dir + "/" + cmd;
    if (access(local.c_str(), X_OK) == 0) return local;
    return cmd;
  }

  void Start(LocalPod& p) {
    p.phase = "Running";
    p.exit_code.reset();
    p.metrics_port = 0;
    ChildOptions c;
    c.argv = p.argv;
    if (!c.argv.empty()) c.argv[0] = Resolve(c.argv[0]);
    // Replicas are placed by the TF_CONFIG this runner gives them, even
    // when the user's shell selects another resolver (e.g. Slurm's).
    c.unset_env = {contract::kClusterResolverEnv, base::kListenFdEnv};
    c.env = p.env;
    // The socket at the replica's TF_CONFIG address, already listening: the
    // replica serves on it (services/base/ports.h).
    if (p.listen_fd >= 0) base::PassListenerToChild(p.listen_fd, c);
    // A replica dies with the runner, even a SIGKILLed one: nothing is left
    // running that no runner watches. (Spawned by this thread, the one that
    // starts every replica and lives as long as the run.)
    c.die_with_parent = true;
    c.own_process_group = true;
    auto spawned = SpawnChild(c);
    if (!spawned.ok()) {
      // As a container that cannot start: its reason in its log, exit code
      // 127, and the restart policy decides (the next Poll).
      Say("[" + p.name + "] tfjob run: " +
          (c.argv.empty() ? std::string("the tensorflow container has no command") : spawned.status().message()));
      p.start_failed = true;
      return;
    }
    p.pid = spawned->pid;
    p.fd = spawned->out_fd;
    p.pump = std::thread([this, &p, fd = p.fd, prefix = "[" + p.name + "] "] {
      ForEachLine(fd, [&](const std::string& line) {
        Say(prefix + line);
        if (const int port = MetricsPortIn(line); port > 0 && p.metrics_port.exchange(port) != port) {
          Say("[tfjob] " + p.name + ": metrics on 127.0.0.1:" + std::to_string(port));
        }
      });
      close(fd);
    });
  }

  // SIGTERM, as a pod deletion sends it; SIGKILL after 5 s. Says how the
  // replica ended, so a clean shutdown (exit 0) shows.
  void Kill(LocalPod& p) {
    if (p.pid > 0) {
      kill(-p.pid, SIGTERM);
      int status = 0;
      bool gone = false;
      for (int i = 0; i < 50 && !gone; ++i) {
        gone = waitpid(p.pid, &status, WNOHANG) == p.pid;
        if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!gone) {
        kill(-p.pid, SIGKILL);
        waitpid(p.pid, &status, 0);
      }
      p.pid = -1;
      if (p.pump.joinable()) p.pump.join();
      Say("[" + p.name + "] stopped: " +
          (WIFEXITED(status) ? "exited with code " + std::to_string(WEXITSTATUS(status))
                             : "killed by signal " + std::to_string(WTERMSIG(status))));
    }
    if (p.pump.joinable()) p.pump.join();
  }

  void Say(const std::string& line) {
    MutexLock g(out_mu_);
    *o_.out << line << std::endl;
  }

  const RunOptions& o_;
  Mutex& out_mu_;
  const std::map<std::string, base::ListeningSocket>& sockets_;
  std::map<std::string, std::unique_ptr<LocalPod>> pods_;
  std::string targets_written_;
  std::map<std::string, pid_t> pids_written_;
};

// The tensorflow container's env plus TFJOB_METRICS_PORT=0 (each replica's
// /metrics on a port it binds itself and reports), the job name
// (services/monitoring reads both) and the run's task token
// (services/rpc/auth.h: on Kubernetes it comes from the job's Secret; here
// one is made per run), and with --task-tls the run's TLS directory. The
// runner's values win over the manifest's: on Kubernetes every pod has its
// own IP, here they share one. Without --task-tls a manifest's own
// TFJOB_TLS_DIR is kept, as the operator keeps it.
json WithRunnerEnv(json pod, const std::string& job_name, const std::string& token, const std::string& tls_dir) {
  for (auto& c : pod["spec"]["containers"]) {
    if (c.value("name", "") != api::kDefaultContainerName) continue;
    json env = json::array();
    for (const auto& e : c.value("env", json::array())) {
      const std::string name = e.value("name", "");
      if (name != contract::kMetricsPortEnv && name != contract::kJobNameEnv && name != kTokenEnv &&
          name != kTokenFileEnv && name != base::kListenFdEnv && !(name == pki::kTlsDirEnv && !tls_dir.empty())) {
        env.push_back(e);
      }
    }
    env.push_back({{"name", contract::kMetricsPortEnv}, {"value", "0"}});
    env.push_back({{"name", contract::kJobNameEnv}, {"value", job_name}});
    env.push_back({{"name", kTokenEnv}, {"value", token}});
    if (!tls_dir.empty()) env.push_back({{"name", pki::kTlsDirEnv}, {"value", tls_dir}});
    c["env"] = env;
  }
  return pod;
}

bool Finished(const api::JobStatus& s, std::string* which) {
  for (const auto& c : s.conditions) {
    if ((c.type == api::kConditionSucceeded || c.type == api::kConditionFailed) && c.status == api::kConditionTrue) {
      *which = c.type;
      return true;
    }
  }
  return false;
}

// The manifest as the operator would hold it: decoded, defaulted and
// validated. The error is the line `tfjob` prints (exit code 2).
StatusOr<api::TFJob> LoadJob(const std::string& manifest) {
  auto decoded = api::ReadTfJobManifest(manifest);
  if (!decoded.ok()) return decoded.status();
  api::TFJob job = std::move(decoded).value();
  if (job.metadata.namespace_.empty()) job.metadata.namespace_ = "default";
  job.metadata.uid = kUid;
  api::SetDefaults(job);
  // The operator's validation, with the operator's message.
  if (auto errors = api::Validate(job); !errors.empty()) {
    return InvalidArgument("TFJob " + job.metadata.namespace_ + "/" + job.metadata.name +
                           " is invalid: " + api::ToMessage(errors));
  }
  return job;
}

// One listening socket per replica for the whole run, at the address its
// TF_CONFIG names: bound here and kept, so no other process can take the
// port, and handed to the replica at every (re)start.
StatusOr<std::map<std::string, base::ListeningSocket>> BindReplicas(const api::TFJob& job) {
  std::map<std::string, base::ListeningSocket> sockets;
  for (const auto& spec : job.spec.replica_specs) {
    for (int i = 0; i < api::ReplicasOrDefault(spec); ++i) {
      ASSIGN_OR_RETURN(base::ListeningSocket s, base::ListeningSocket::Listen("127.0.0.1", 0));
      sockets[api::PodName(job.metadata.name, api::TypeLabel(spec), i)] = std::move(s);
    }
  }
  return sockets;
}

// One PKI for the run: a CA that signs the one certificate every replica
// presents and then is gone. The directory is the run's own (0700), so only
// this user reads the key, and is removed when the run ends; an absolute
// path, so a replica that changes directory still finds it.
StatusOr<std::string> MakeRunTls(const std::string& dir, const std::string& job_name) {
  std::error_code ec;
  const std::string tls_dir = std::filesystem::absolute(dir + "/tls", ec).lexically_normal().string();
  if (!ec) std::filesystem::create_directories(tls_dir, ec);
  if (!ec) std::filesystem::permissions(tls_dir, std::filesystem::perms::owner_all, ec);
  if (ec) return Internal("cannot create TLS directory " + tls_dir + ": " + ec.message());
  auto pki = pki::NewJobPki(job_name);
  Status written = pki.ok() ? pki::WriteTlsDir(tls_dir, *pki) : pki.status();
  if (!written.ok()) return Internal("TLS material for the run: " + written.message());
  return tls_dir;
}

// The run's loop state, and the plan's actions carried out on one machine.
class LocalRun {
 public:
  LocalRun(api::TFJob job, const RunOptions& o, std::string dir, std::map<std::string, base::ListeningSocket> sockets,
           std::string tls_dir)
      : job_(std::move(job)),
        o_(o),
        dir_(std::move(dir)),
        sockets_(std::move(sockets)),
        token_(NewToken()),
        tls_dir_(std::move(tls_dir)),
        backend_(o, out_mu_, sockets_) {
    // The run makes its own token and TLS material and has no network to
    // police.
    popts_.task_auth = false;
    popts_.task_tls = false;
    popts_.network_policy = false;
    popts_.address = [this](const api::ReplicaSpec& spec, int index) {
      return "127.0.0.1:" +
             std::to_string(sockets_[api::PodName(job_.metadata.name, api::TypeLabel(spec), index)].port());
    };
  }

  // Plans and acts until the job is done, then stops what still runs. The
  // exit code of `tfjob run`.
  int Run() {
    while (!Interrupted()) {
      backend_.Poll();
      controller::Plan plan =
          controller::PlanJob(job_, backend_.Views(), services_, std::chrono::system_clock::now(), popts_);
      if (plan.status_changed) UpdateStatus(plan.status);
      for (const Action& a : plan.actions) Apply(a);
      backend_.RefuseWhileDown();
      backend_.WritePidFiles(dir_);
      backend_.WriteTargets(dir_);
      if (Done()) break;
      std::this_thread::sleep_for(o_.tick);
    }
    if (backend_.AnyRunning()) Say("[tfjob] stopping replicas still running after the job finished");
    backend_.KillAll();
    backend_.WritePidFiles(dir_);
    (void)WriteFileAtomic(dir_ + "/prometheus-targets.json", "[]\n");  // nothing left to scrape
    Say("[tfjob] " + job_.metadata.name + " " + outcome_ + "; status in " + dir_ + "/status.json");
    return outcome_ == api::kConditionSucceeded ? 0 : 1;
  }

 private:
  void Say(const std::string& line) {
    MutexLock g(out_mu_);
    *o_.out << line << std::endl;
  }

  bool Interrupted() {
    if (!o_.stop || !o_.stop->load()) return false;
    Say("[tfjob] interrupted; stopping every replica");
    outcome_ = "interrupted";
    return true;
  }

  // Each condition that changed, once, and the status file.
  void UpdateStatus(const api::JobStatus& status) {
    job_.status = status;
    for (const auto& c : job_.status.conditions) {
      const std::string key = c.status + " " + c.reason;
      if (seen_[c.type] == key) continue;
      seen_[c.type] = key;
      Say("[tfjob] " + c.type + "=" + c.status + " (" + c.reason + "): " + c.message);
    }
    json st = api::Encode(job_).value("status", json::object());
    (void)WriteFileAtomic(dir_ + "/status.json", st.dump(2) + "\n");
  }

  void Apply(const Action& a) {
    switch (a.kind) {
      case Action::Kind::kCreatePod:
        backend_.Create(WithRunnerEnv(a.object, job_.metadata.name, token_, tls_dir_));
        break;
      case Action::Kind::kDeletePod:
      case Action::Kind::kForceDeletePod: backend_.Delete(a.name); break;
      case Action::Kind::kCreateService: services_.push_back(controller::ViewService(a.object)); break;
      case Action::Kind::kDeleteService:
        std::erase_if(services_, [&](const ServiceView& s) { return s.name == a.name; });
        break;
      case Action::Kind::kDeleteJob: deleted_ = true; break;
      case Action::Kind::kPatchJob: {  // annotations (restart counts, succeeded indices)
        const json& annotations = a.object.value("metadata", json::object()).value("annotations", json::object());
        for (auto it = annotations.begin(); it != annotations.end(); ++it) {
          if (it->is_string()) job_.metadata.annotations[it.key()] = it->get<std::string>();
        }
        break;
      }
      case Action::Kind::kAdoptPod:  // no orphans: the runner made every replica
      case Action::Kind::kAdoptService:
      case Action::Kind::kCreateSecret:
      case Action::Kind::kCreateNetworkPolicy:
      case Action::Kind::kCreatePodGroup:  // no gang scheduler on one machine
      case Action::Kind::kUpdatePodGroup:
      case Action::Kind::kDeletePodGroup:
      case Action::Kind::kCreateWorkload:  // no Kueue on one machine (PlannerOptions::kueue is off)
      case Action::Kind::kDeleteWorkload:
      case Action::Kind::kPatchWorkloadStatus:
      case Action::Kind::kPatchJobSpec: break;
    }
  }

  // Done once the job finished and nothing runs (PS tasks exit when the
  // chief says training is complete), the TTL, if any, has passed, or the
  // grace period is over. A failed job has nothing to wait for: its PS
  // tasks and workers never exit by themselves (they wait for a chief).
  bool Done() {
    if (!finished_at_ && Finished(job_.status, &outcome_)) finished_at_ = std::chrono::steady_clock::now();
    if (!finished_at_) return false;
    const bool ttl_pending = job_.spec.run_policy.ttl_seconds_after_finished && !deleted_;
    const bool failed = outcome_ == api::kConditionFailed;
    return ((!backend_.AnyRunning() || failed) && !ttl_pending) || deleted_ ||
           std::chrono::steady_clock::now() - *finished_at_ > o_.finish_grace;
  }

  api::TFJob job_;
  const RunOptions& o_;
  const std::string dir_;
  std::map<std::string, base::ListeningSocket> sockets_;
  // One task token for the run: every replica gets it, nobody else has it.
  const std::string token_;
  const std::string tls_dir_;
  controller::PlannerOptions popts_;
  Mutex out_mu_;  // one line at a time on the run's output (the pumps write too)
  Backend backend_;
  std::vector<ServiceView> services_;
  std::map<std::string, std::string> seen_;  // condition type -> "status reason"
  std::optional<std::chrono::steady_clock::time_point> finished_at_;
  std::string outcome_;
  bool deleted_ = false;
};

}  // namespace

int RunJob(const std::string& manifest, const RunOptions& o) {
  std::ostream& err = *o.err;
  auto job = LoadJob(manifest);
  if (!job.ok()) {
    err << "tfjob: error: " << job.status().message() << std::endl;
    return 2;
  }
  std::string dir = o.state_dir;
  if (dir.empty()) dir = "/tmp/tfjob-run-" + job->metadata.name + "-" + std::to_string(getpid());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    err << "tfjob: error: cannot create state directory " << dir << ": " << ec.message() << std::endl;
    return 2;
  }
  auto sockets = BindReplicas(*job);
  if (!sockets.ok()) {
    err << "tfjob: error: " << sockets.status().message() << std::endl;
    return 1;
  }
  std::string tls_dir;
  if (o.task_tls) {
    auto made = MakeRunTls(dir, job->metadata.name);
    if (!made.ok()) {
      err << "tfjob: error: " << made.status().message() << std::endl;
      return 1;
    }
    tls_dir = *made;
  }
  LocalRun run(std::move(job).value(), o, dir, std::move(sockets).value(), tls_dir);
  const int code = run.Run();
  // The CA's certificate and the run's key serve this run only: they go
  // with it (docs/security.md). Run returns once every replica has exited.
  std::error_code removed;
  if (!tls_dir.empty()) std::filesystem::remove_all(tls_dir, removed);
  if (removed) err << "tfjob: warning: cannot remove " << tls_dir << ": " << removed.message() << std::endl;
  return code;
}

}  // namespace tfjob::op::local
