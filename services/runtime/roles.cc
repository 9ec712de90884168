#include <cerrno>
#include <climits>
#include <csignal>
#include <iostream>
#include <thread>

#include "services/base/ports.h"
#include "services/checkpoint/manager.h"
#include "services/collective/group.h"
#include "services/net/net.h"
#include "services/coordinator/coordinator.h"
#include "services/monitoring/runtime_metrics.h"
#include "services/ps/ps_client.h"
#include "services/ps/ps_service.h"
#include "services/rpc/rpc.h"
#include "services/tensor/threads.h"
#include "services/cluster/resolver.h"
#include "services/runtime/in_process_cluster.h"
#include "services/runtime/launcher.h"
#include "services/runtime/runtime.h"
#include "contract/env.h"
#include "services/runtime/config.h"

namespace tfjob::runtime {
namespace {

using programs::ReportError;

StatusOr<std::string> ListenAddress(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("address \"" + address + "\" has no port");
  // Listen on every interface: in a pod the address is the service's DNS name.
  // "[::]" is IPv6 and IPv4 alike (gRPC makes it one dual-stack socket), so
  // IPv6-only clusters reach the task too.
  return "[::]:" + address.substr(colon + 1);
}

// Where a serving role listens: the socket its launcher handed it
// (`listener`, already bound to this task's port), else its own port on
// every interface.
struct Listen {
  std::string server_address;  // for rpc::StartServer
  std::string shown;           // "[::]:PORT", "127.0.0.1:PORT"
};

StatusOr<Listen> ListenFor(const std::string& address, std::optional<base::ListeningSocket>& listener) {
  ASSIGN_OR_RETURN(std::string any, ListenAddress(address));
  if (!listener) return Listen{any, any};
  std::string shown = listener->address();
  // The server owns the descriptor from here on.
  return Listen{"fd:" + std::to_string(listener->Release()), std::move(shown)};
}

std::vector<std::string> Addresses(const cluster::ClusterSpec& c, const std::string& job) {
  std::vector<std::string> out;
  for (int64_t i : c.TaskIndices(job)) out.push_back(*c.Address(job, i));
  return out;
}

// A serving role's last line and exit code: 0 when a chief said training
// is complete, else (a signal) kExitStopped.
int Ended(const char* role, int64_t index, bool completed, std::ostream& out) {
  if (completed) {
    out << role << " " << index << ": shut down, training is complete" << std::endl;
    return 0;
  }
  out << role << " " << index << ": stopped by a signal before training was complete; exiting " << kExitStopped
      << std::endl;
  return kExitStopped;
}

int ServePs(const cluster::ClusterConfig& cfg, const programs::Program& program, const std::vector<std::string>& args,
            const rpc::Credentials& credentials, runtime_metrics::RuntimeMetrics* metrics,
            std::optional<base::ListeningSocket>& listener, std::optional<uint64_t> max_tensor_bytes,
            SignalWatcher& signals, std::ostream& out, std::ostream& err) {
  auto self = cfg.cluster.Address(cfg.task->type, cfg.task->index);
  if (!self.ok()) return ReportError(self.status(), err);
  auto any = ListenAddress(*self);
  if (!any.ok()) return ReportError(any.status(), err);
  auto checkpoint_dir = program.CheckpointDir(args);
  if (!checkpoint_dir.ok()) return ReportError(checkpoint_dir.status(), err);
  // The PS writes its own checkpoint files: a directory it cannot write is
  // bad input, said now rather than at the first save.
  if (!checkpoint_dir->empty()) {
    if (Status s = checkpoint::CheckWritable(*checkpoint_dir); !s.ok()) return ReportError(s, err);
  }
  ps::PsOptions options;
  options.metrics = metrics;
  // The only files this PS ever touches: <dir>/ckpt-<step>/ps-<index>.ckpt.
  options.checkpoint_dir = *checkpoint_dir;
  options.checkpoint_file = "ps-" + std::to_string(cfg.task->index) + ".ckpt";
  options.credentials = credentials;
  if (max_tensor_bytes) options.max_tensor_bytes = options.max_request_bytes = *max_tensor_bytes;
  // The PS's one port carries gRPC and its data plane: it takes the socket
  // over itself (services/ps/ps_service.h).
  StatusOr<std::unique_ptr<ps::PsServer>> server = Internal("not started");
  std::string shown;
  if (listener) {
    shown = listener->address();
    net::Listener l;
    l.port = listener->port();
    l.fd = net::Fd(listener->Release());
    server = ps::PsServer::Start(std::move(l), options);
  } else {
    server = ps::PsServer::Start(*any, options);
  }
  if (!server.ok()) return ReportError(server.status(), err);
  // The port it got (port 0 in TF_CONFIG picks one): "[::]:PORT".
  if (!listener) shown = any->substr(0, any->rfind(':') + 1) + std::to_string((*server)->port());
  // SIGTERM / SIGINT stop a serving role cleanly, as a pod deletion does;
  // it has not finished (a chief did not say training is complete): 143.
  signals.OnStop([&service = (*server)->service()] { service.RequestShutdown(); });
  out << "ps " << cfg.task->index << ": serving on " << shown << std::endl;
  (*server)->Wait();
  return Ended("ps", cfg.task->index, (*server)->service().completed(), out);
}

int ServeWorker(const cluster::ClusterConfig& cfg, const cluster::ClusterSpec& training,
                const programs::ProgramList& all, const rpc::Credentials& credentials,
                runtime_metrics::RuntimeMetrics* metrics, std::optional<base::ListeningSocket>& listener,
                SignalWatcher& signals, std::ostream& out, std::ostream& err) {
  auto self = cfg.cluster.Address(cfg.task->type, cfg.task->index);
  if (!self.ok()) return ReportError(self.status(), err);
  auto listen = ListenFor(*self, listener);
  if (!listen.ok()) return ReportError(listen.status(), err);
  worker::Registry registry;
  for (const auto& p : all) {
    if (Status s = p->RegisterWorker(registry); !s.ok()) return ReportError(s, err);
  }
  ps::ClientOptions ps_options;
  ps_options.credentials = credentials;
  // A closure whose PS is gone fails within a second instead of retrying:
  // waiting for a PS to come back (and restoring it) is the chief's job,
  // bounded by its TFJOB_PS_TIMEOUT_SECONDS, and every second a worker
  // spends retrying is a second before the chief even learns of the loss.
  ps_options.retry.max_attempts = 4;
  ps_options.retry.max_backoff = std::chrono::milliseconds(400);
  auto server = worker::WorkerServer::Start(listen->server_address, registry,
                                            {cfg.task->index, Addresses(training, cluster::kPs), ps_options, metrics});
  if (!server.ok()) return ReportError(server.status(), err);
  signals.OnStop([&service = (*server)->service()] { service.RequestShutdown(); });
  out << "worker " << cfg.task->index << ": serving on " << listen->shown << std::endl;
  (*server)->Wait();
  return Ended("worker", cfg.task->index, (*server)->service().completed(), out);
}

// How long the chief waits, from the environment.
// The listening socket a launcher handed down (services/base/ports.h) must
// be at this task's own port, or the others could not reach it.
Status CheckInheritedListener(const cluster::ClusterConfig& cfg, const std::optional<base::ListeningSocket>& listener) {
  const std::string& type = cfg.task->type;
  if (!listener || !cfg.cluster.HasJob(type)) return Status::Ok();
  auto self = cfg.cluster.Address(type, cfg.task->index);
  if (!self.ok()) return self.status();
  auto hp = net::SplitAddress(*self);
  if (!hp.ok()) return hp.status();
  if (hp->port != listener->port()) {
    return InvalidArgument(std::string(base::kListenFdEnv) + ": the socket listens on port " +
                           std::to_string(listener->port()) + ", but TF_CONFIG puts " + type + ":" +
                           std::to_string(cfg.task->index) + " at " + *self);
  }
  return Status::Ok();
}

// Without parameter servers, the chief and the workers train together
// (TensorFlow's MultiWorkerMirroredStrategy): every one runs the program.
int RunCollectiveRole(programs::Program& program, const std::vector<std::string>& args,
                      const cluster::ClusterConfig& cfg, const cluster::ClusterSpec& training,
                      const rpc::Credentials& credentials, runtime_metrics::RuntimeMetrics* metrics,
                      std::optional<base::ListeningSocket>& listener, std::chrono::milliseconds connect_timeout,
                      SignalWatcher& signals, std::ostream& out, std::ostream& err) {
  auto members = collective::MembersFromCluster(training);
  if (!members.ok()) return ReportError(members.status(), err);
  auto rank = collective::RankOf(*members, cfg.task->type, cfg.task->index);
  if (!rank.ok()) return ReportError(rank.status(), err);
  std::shared_ptr<base::ListeningSocket> inherited;
  if (listener) inherited = std::make_shared<base::ListeningSocket>(std::move(*listener));
  programs::CollectiveContext ctx{*members, *rank,       &out,     &err,     connect_timeout,
                                  metrics,  credentials, &signals, inherited};
  return program.RunCollective(args, ctx);
}

// The chief of a job with parameter servers: runs the program as the
// coordinator of the workers, and ends the cluster once training completes.
int RunChiefRole(programs::Program& program, const std::vector<std::string>& args, const cluster::ClusterSpec& training,
                 runtime_metrics::RuntimeMetrics* metrics, const RoleConfig& role, SignalWatcher& signals,
                 std::ostream& out, std::ostream& err) {
  const Timeouts& timeouts = role.timeouts;
  const rpc::Credentials& credentials = role.credentials;
  programs::ChiefContext ctx{Addresses(training, cluster::kPs), Addresses(training, cluster::kWorker), {}, &out, &err};
  ctx.connect_timeout = timeouts.connect;
  ctx.coordinator_options.connect_timeout = timeouts.connect;
  ctx.credentials = credentials;
  ctx.coordinator_options.credentials = credentials;
  ctx.metrics = metrics;
  ctx.coordinator_options.metrics = metrics;
  ctx.signals = &signals;
  ctx.ps_timeout = timeouts.ps;
  ctx.pod_created_ms = role.pod_created_ms;
  if (ctx.worker_addresses.empty())
    return ReportError(InvalidArgument("TF_CONFIG: the cluster has no \"worker\" tasks"), err);
  const int rc = program.RunChief(args, ctx);
  // Training is complete: the PS tasks and workers may exit (0), so a
  // finished job leaves nothing running. Any other end leaves them up: a
  // restarted chief (OnFailure, ExitCode) finds them and goes on.
  if (rc == 0) ShutdownCluster(ctx.ps_addresses, ctx.worker_addresses, ctx.credentials, ctx.claimed_generation());
  return rc;
}

}  // namespace

void ShutdownCluster(const std::vector<std::string>& ps, const std::vector<std::string>& workers,
                     const rpc::Credentials& credentials, uint64_t generation) {
  for (const auto& a : workers) {
    auto stub = proto::Worker::NewStub(rpc::MakeChannel(a, credentials));
    proto::WorkerShutdownRequest req;
    req.set_coordinator_incarnation(generation);
    proto::WorkerShutdownResponse resp;
    auto ctx = rpc::Context(std::chrono::milliseconds(2000), credentials);
    stub->Shutdown(ctx.get(), req, &resp);  // best effort: a gone worker needs no shutdown
  }
  for (const auto& a : ps) {
    ps::ClientOptions o;
    o.timeout = std::chrono::milliseconds(2000);
    o.retry.max_attempts = 2;
    o.credentials = credentials;
    (void)ps::PsClient(a, o).Shutdown(generation);
  }
}

int RunRole(programs::Program& program, const std::vector<std::string>& args, const programs::ProgramList& all,
            const RuntimeConfig& config, std::ostream& out, std::ostream& err) {
  // First, before any thread exists: SIGTERM (every pod deletion) and
  // SIGINT become an orderly stop in every role, bounded by a grace period
  // inside Kubernetes' default 30 s (programs may set their own).
  SignalWatcher signals;
  signals.ExitAfter(kDefaultShutdownGrace);
  const RoleConfig& role = config.role;
  const Timeouts& timeouts = role.timeouts;
  // TF_CONFIG, the Slurm step, or the job's pods (TFJOB_CLUSTER_RESOLVER).
  auto resolved = cluster::ResolveCluster(role.resolver);
  if (resolved.status().code() == Code::kNotFound) {
    if (program.HasSingleProcessMode()) return program.RunSingleProcess(args, out, err, &signals);
    auto local = InProcessCluster::Start(1, 1, all);
    if (!local.ok()) return ReportError(local.status(), err);
    programs::ChiefContext ctx{(*local)->ps_addresses(), (*local)->worker_addresses(), {}, &out, &err};
    ctx.signals = &signals;
    ctx.ps_timeout = timeouts.ps;
    return program.RunChief(args, ctx);
  }
  if (!resolved.ok()) return ReportError(resolved.status(), err);
  // Before anything touches CUDA: under Slurm each task gets its share of the node's GPUs.
  if (resolved->cuda_visible_devices) setenv("CUDA_VISIBLE_DEVICES", resolved->cuda_visible_devices->c_str(), 1);
  const cluster::ClusterConfig* cfg = &resolved->config;
  // The job's task token (TFJOB_AUTH_TOKEN or TFJOB_AUTH_TOKEN_FILE): what
  // every task-to-task call carries and every service requires.
  const rpc::Credentials* credentials = &role.credentials;
  if (credentials->tls) {
    out << cfg->task->type << " " << cfg->task->index
        << ": task-to-task connections are mutual TLS with the job's certificate" << std::endl;
  }
  // The evaluator is a side-car, never part of the training cluster.
  const cluster::ClusterSpec training = cfg->cluster.WithoutJob(cluster::kEvaluator);
  const std::string& type = cfg->task->type;
  // Serving roles compute with one thread unless a program says otherwise
  // (fit passes its --threads to workers): OpenMP's default of every core
  // spins against the other tasks on the same machine.
  SetComputeThreads(1);
  // The process's metrics (services/monitoring): created once, passed down to
  // the role, served on TFJOB_METRICS_PORT (or --metrics-port) when set.
  runtime_metrics::ExporterConfig metrics_config = config.metrics;
  metrics_config.identity.task_type = type;
  metrics_config.identity.task_index = cfg->task->index;
  auto exporter = runtime_metrics::Exporter::Start(metrics_config, out);
  if (!exporter.ok()) return ReportError(exporter.status(), err);
  runtime_metrics::RuntimeMetrics* metrics = (*exporter)->metrics();
  auto listener = base::AdoptInheritedListener(role.listen_fd);
  if (!listener.ok()) return ReportError(listener.status(), err);
  if (Status s = CheckInheritedListener(*cfg, *listener); !s.ok()) return ReportError(s, err);
  if (type == cluster::kPs) {
    return ServePs(*cfg, program, args, *credentials, metrics, *listener, role.ps_max_tensor_bytes, signals, out, err);
  }
  if ((type == cluster::kWorker || cluster::IsChief(type)) && !training.HasJob(cluster::kPs)) {
    return RunCollectiveRole(program, args, *cfg, training, *credentials, metrics, *listener, timeouts.connect, signals,
                             out, err);
  }
  if (type == cluster::kWorker) {
    return ServeWorker(*cfg, training, all, *credentials, metrics, *listener, signals, out, err);
  }
  if (cluster::IsChief(type)) {
    return RunChiefRole(program, args, training, metrics, role, signals, out, err);
  }
  if (type == cluster::kEvaluator) {
    // Reads the chief's checkpoints only: it needs no PS or worker.
    programs::EvaluatorContext ectx{&out, &err, metrics, &signals};
    return program.RunEvaluator(args, ectx);
  }
  return ReportError(InvalidArgument("TF_CONFIG: task type \"" + type + "\" has no role in this runtime"), err);
}

namespace {

std::string Usage(const programs::ProgramList& programs) {
  std::string s =
      "usage: tfjob-runtime PROGRAM [flags]            run PROGRAM in the role TF_CONFIG assigns\n"
      "       tfjob-runtime local --ps N --workers M [--host H] [--] PROGRAM [flags]\n"
      "                                                one process per task on 127.0.0.1 (or H)\n"
      "       tfjob-runtime --metrics-port N PROGRAM|local ...\n"
      "                                                serve Prometheus /metrics, /healthz, /readyz on :N\n"
      "                                                (0 picks a free port; env TFJOB_METRICS_PORT, the\n"
      "                                                flag wins; job_name label from TFJOB_JOB_NAME)\n"
      "       tfjob-runtime --help | --version\n"
      "With TFJOB_CLUSTER_RESOLVER=slurm the role comes from the Slurm step (srun), laid out by\n"
      "TFJOB_SLURM_JOBS (e.g. chief:1,ps:1,worker:2) and TFJOB_SLURM_PORT_BASE; see docs/slurm.md.\n"
      "With TFJOB_CLUSTER_RESOLVER=kubernetes it comes from this pod's labels and the job's pods in the\n"
      "Kubernetes API (POD_NAME, POD_NAMESPACE, KUBECONFIG); see docs/kubernetes-resolver.md.\n"
      "programs:\n";
  for (const auto& p : programs) s += "  " + p->usage() + "\n";
  return s;
}

}  // namespace

int RunMain(const std::vector<std::string>& command_line, const programs::ProgramList& programs, std::ostream& out,
            std::ostream& err) {
  // The one global flag, before the command: --metrics-port N (or =N).
  std::vector<std::string> all_args = command_line;
  std::optional<std::string> metrics_port;
  if (!all_args.empty() && all_args[0].rfind("--metrics-port", 0) == 0) {
    const std::string& a = all_args[0];
    if (a.rfind("--metrics-port=", 0) == 0) {
      metrics_port = a.substr(std::string("--metrics-port=").size());
      all_args.erase(all_args.begin());
    } else if (a == "--metrics-port" && all_args.size() >= 2) {
      metrics_port = all_args[1];
      all_args.erase(all_args.begin(), all_args.begin() + 2);
    }
  }
  // The configuration, once: the flag and the environment, validated.
  const cluster::Env env = ProcessEnv();
  RuntimeConfig config;
  auto metrics = runtime_metrics::ParseExporterConfig(env, metrics_port, "", 0);
  if (!metrics.ok()) return ReportError(metrics.status(), err);
  config.metrics = std::move(metrics).value();
  if (all_args.empty() || all_args[0] == "--help" || all_args[0] == "-h" || all_args[0] == "help") {
    (all_args.empty() ? err : out) << Usage(programs);
    return all_args.empty() ? 2 : 0;
  }
  if (all_args[0] == "--version") {
    // The binary's own name: custom programs link this same entry point.
    out << program_invocation_short_name << " " << TFJOB_VERSION << std::endl;
    return 0;
  }
  const std::string cmd = all_args[0];
  const std::vector<std::string> args(all_args.begin() + 1, all_args.end());
  auto settings = ReadProcessSettings(env);
  if (!settings.ok()) return ReportError(settings.status(), err);
  config.process = std::move(settings).value();
  // The process-wide switches, before anything computes.
  ApplyProcessSettings(config.process);
  if (cmd == "local") {
    // Every task of a local cluster serves its own metrics: each picks a free
    // port (0) and prints it, whatever port was asked for. Each task reads
    // the rest of its configuration itself.
    if (config.metrics.port) setenv(contract::kMetricsPortEnv, "0", 1);
    return RunLocal(args, programs, config.process.self_exe, out, err);
  }
  for (const auto& p : programs) {
    if (p->name() != cmd) continue;
    auto role = ReadRoleConfig(env);
    if (!role.ok()) return ReportError(role.status(), err);
    config.role = std::move(role).value();
    return RunRole(*p, args, programs, config, out, err);
  }
  err << "tfjob-runtime: error: unknown command \"" << cmd << "\"\n" << Usage(programs);
  return 2;
}

}  // namespace tfjob::runtime
