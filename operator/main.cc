// tfjob-operator: watches TFJobs and runs them as pods and services.
//
// main is the steps below, in the order they always ran: the command line
// into Options, the API clients, the controller, leader election, the
// metrics and health servers, then the controller until a signal (or lost
// leadership) stops it. Every failure is a message on stderr and exit code
// 2 (a bad flag, a missing file or API) or 1 (anything else); see Fail.
#include <malloc.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include <unistd.h>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "common/flags.h"
#include "common/signals.h"
#include "operator/controller/controller.h"
#include "kube/config.h"
#include "kube/rest_client.h"
#include "operator/leader.h"
#include "services/base/exposition.h"
#include "services/base/http_server.h"

namespace {

using namespace tfjob;

int Fail(const Status& s) {
  std::cerr << "tfjob-operator: error: " << s.message() << std::endl;
  return s.code() == Code::kInvalidArgument || s.code() == Code::kNotFound ? 2 : 1;
}

std::optional<std::string> Getenv(const std::string& k) {
  const char* v = std::getenv(k.c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

// The namespace this process runs in, when it runs in a pod: what
// controller-runtime defaults the leader-election namespace to.
std::string PodNamespace() {
  if (auto v = Getenv("POD_NAMESPACE"); v && !v->empty()) return *v;
  std::ifstream in("/var/run/secrets/kubernetes.io/serviceaccount/namespace");
  std::string ns;
  std::getline(in, ns);
  return ns;
}

void TuneMalloc() {
  // Two malloc arenas, not glibc's 8 per core: the informers, workers and
  // HTTP threads would each keep an arena of freed watch-event buffers,
  // which at 10,000 cached pods was most of the operator's resident memory
  // (docs/operations.md). Allocation here is not contended enough to miss
  // the others.
  mallopt(M_ARENA_MAX, 2);
  // Buffers over 128 KiB (list pages, a watch's backlog) are mapped on their
  // own and unmapped when freed; glibc's dynamic threshold would otherwise
  // rise to the largest one seen and put the next ones on the heap.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  mallopt(M_TRIM_THRESHOLD, 512 * 1024);
}

// The command line, checked and typed, with the environment's fallbacks
// ($KUBECONFIG, $CUSTOM_CLUSTER_DOMAIN) applied.
struct Options {
  std::string kubeconfig, context, ns;
  int workers = 0;
  double qps = 0;
  int burst = 0;
  bool task_auth = false, task_tls = false, network_policy = false;
  std::chrono::seconds pending_timeout{0}, node_unreachable_grace{0};
  bool recreate_pending = false;
  std::string cluster_domain, gang_scheduler, kueue;
  std::string metrics_address, health_address;
  bool leader_elect = false;
  std::string leader_election_namespace;
  // The Lease timings are read with the rest but, as before the split, a
  // bad one is reported only under --leader-elect and only after the
  // clients and the controller were built: the first error, in
  // lease / renew / retry order.
  Status leader_timing_error;
  std::chrono::milliseconds lease_duration{}, renew_deadline{}, retry_period{};
};

Flags DeclareFlags() {
  Flags flags;
  flags.Value("kubeconfig", "kubeconfig file (default $KUBECONFIG, else in-cluster)")
      .Value("context", "kubeconfig context (default: current)")
      .Value("namespace", "watch only this namespace (default: all)")
      .Bool("leader-elect", "run only while holding the coordination.k8s.io/v1 Lease")
      .Value("leader-election-namespace",
             "namespace of the Lease (default: the pod's namespace in a cluster, else --namespace)")
      .Value("leader-election-lease-duration",
             "seconds a standby waits, after it last saw the Lease change, before taking it over", "15")
      .Value("leader-election-renew-deadline",
             "seconds the leader retries a renewal before giving leadership up (default: 2/3 of the lease duration)")
      .Value("leader-election-retry-period",
             "seconds between attempts to acquire or renew (default: 2/15 of the lease duration)")
      .Value("metrics-bind-address", "address for /metrics", ":8080")
      .Value("health-probe-bind-address", "address for /healthz and /readyz", ":8081")
      .Value("workers", "concurrent reconciles", "2")
      .Value("qps", "API requests per second (docs/operations.md)", "100")
      .Value("burst", "API request burst", "200")
      .Value("cluster-domain",
             "DNS suffix for TF_CONFIG addresses (default: $CUSTOM_CLUSTER_DOMAIN, else none: {pod}.{ns}.svc)")
      .Value("task-auth", "true: a Secret per TFJob holds a task token every task-to-task call must carry", "true")
      .Value("task-tls",
             "true: a per-job CA and certificate, kept in the job's task-auth Secret, for mutual TLS "
             "between a job's tasks (needs --task-auth)",
             "false")
      .Value("network-policy", "true: a NetworkPolicy per TFJob lets only the job's pods reach its tfjob-port", "false")
      .Value("gang-scheduler-name",
             "gang scheduling, as Kubeflow's: volcano (scheduling.volcano.sh/v1beta1 PodGroups), "
             "or the scheduler-plugins scheduler's name, e.g. scheduler-plugins "
             "(scheduling.x-k8s.io/v1alpha1 PodGroups); empty: off")
      .Value("kueue",
             "external: the operator is Kueue's external integration for TFJob (list TFJob.v1.kubeflow.org under "
             "Kueue's integrations.externalFrameworks) and manages the Workloads of jobs labelled "
             "kueue.x-k8s.io/queue-name; empty: off (docs/kueue.md)")
      .Value("pending-timeout-seconds",
             "a pod Pending this long (unschedulable, image missing) gets a Warning event and the job a PodsPending "
             "condition naming it and why; 0: off (docs/operations.md)",
             "600")
      .Value("recreate-pending-pods",
             "true: a pod Pending past --pending-timeout-seconds is deleted and created again, once per replica index",
             "false")
      .Value("node-unreachable-grace-seconds",
             "a job's pods on a node whose Ready condition has not been True this long are deleted with no grace "
             "period and created again elsewhere (needs list/watch on nodes); 0: off, as training-operator "
             "(docs/operations.md)",
             "60");
  return flags;
}

StatusOr<bool> TrueOrFalse(const Flags& flags, const std::string& name) {
  const std::string v = flags.Get(name);
  if (v == "true") return true;
  if (v == "false") return false;
  return InvalidArgument("flag --" + name + ": \"" + v + "\" is not true or false");
}

// Seconds (fractions allowed) to milliseconds; renew deadline and retry
// period default to client-go's 10 s and 2 s of 15 s, scaled to the lease.
Status ReadLeaderTimings(const Flags& flags, Options& o) {
  auto seconds = [&](const std::string& name, double fallback) -> StatusOr<std::chrono::milliseconds> {
    double v = fallback;
    if (!flags.Get(name).empty()) {
      ASSIGN_OR_RETURN(v, flags.GetDouble(name));
    }
    if (!(v > 0) || v > 1e6) return InvalidArgument("flag --" + name + ": must be a positive number of seconds");
    return std::chrono::milliseconds(static_cast<int64_t>(v * 1000));
  };
  ASSIGN_OR_RETURN(o.lease_duration, seconds("leader-election-lease-duration", 15));
  const double lease_s = static_cast<double>(o.lease_duration.count()) / 1000;
  ASSIGN_OR_RETURN(o.renew_deadline, seconds("leader-election-renew-deadline", lease_s * 2 / 3));
  ASSIGN_OR_RETURN(o.retry_period, seconds("leader-election-retry-period", lease_s * 2 / 15));
  return Status::Ok();
}

// Reads the command line into *o. Returns the exit code when the process
// ends here: 0 after --help or --version, Fail's code for a bad flag.
std::optional<int> ParseCommandLine(int argc, char** argv, Options& o) {
  Flags flags = DeclareFlags();
  const std::string usage = "usage: tfjob-operator [flags]\n" + flags.Usage();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      std::cout << usage;
      return 0;
    }
    if (a == "--version") {
      std::cout << "tfjob-operator " << TFJOB_VERSION << std::endl;
      return 0;
    }
  }
  if (Status s = flags.Parse({argv + 1, argv + argc}); !s.ok()) {
    std::cerr << usage;
    return Fail(s);
  }
  auto workers = flags.GetInt("workers");
  auto qps = flags.GetDouble("qps");
  auto burst = flags.GetInt("burst");
  if (!workers.ok()) return Fail(workers.status());
  if (!qps.ok()) return Fail(qps.status());
  if (!burst.ok()) return Fail(burst.status());
  auto task_auth = TrueOrFalse(flags, "task-auth");
  if (!task_auth.ok()) return Fail(task_auth.status());
  auto network_policy = TrueOrFalse(flags, "network-policy");
  if (!network_policy.ok()) return Fail(network_policy.status());
  auto task_tls = TrueOrFalse(flags, "task-tls");
  if (!task_tls.ok()) return Fail(task_tls.status());
  // The TLS material lives in the task-auth Secret, and a job whose tasks
  // check certificates but not tokens is not a configuration to offer.
  if (*task_tls && !*task_auth) {
    return Fail(
        InvalidArgument("flag --task-tls=true needs --task-auth=true (the job's TLS material is kept in its "
                        "task-auth Secret)"));
  }
  auto pending_timeout = flags.GetInt("pending-timeout-seconds");
  if (!pending_timeout.ok()) return Fail(pending_timeout.status());
  if (*pending_timeout < 0 || *pending_timeout > 366LL * 24 * 3600) {
    return Fail(InvalidArgument("flag --pending-timeout-seconds: " + std::to_string(*pending_timeout) +
                                " is not from 0 (off) to a year"));
  }
  auto recreate_pending = TrueOrFalse(flags, "recreate-pending-pods");
  if (!recreate_pending.ok()) return Fail(recreate_pending.status());
  auto node_grace = flags.GetInt("node-unreachable-grace-seconds");
  if (!node_grace.ok()) return Fail(node_grace.status());
  if (*node_grace < 0 || *node_grace > 366LL * 24 * 3600) {
    return Fail(InvalidArgument("flag --node-unreachable-grace-seconds: " + std::to_string(*node_grace) +
                                " is not from 0 (off) to a year"));
  }
  o.node_unreachable_grace = std::chrono::seconds(*node_grace);
  o.pending_timeout = std::chrono::seconds(*pending_timeout);
  o.recreate_pending = *recreate_pending;
  o.workers = static_cast<int>(*workers);
  o.qps = *qps;
  o.burst = static_cast<int>(*burst);
  o.task_auth = *task_auth;
  o.task_tls = *task_tls;
  o.network_policy = *network_policy;
  o.kubeconfig = flags.Get("kubeconfig");
  if (o.kubeconfig.empty()) o.kubeconfig = Getenv("KUBECONFIG").value_or("");
  o.context = flags.Get("context");
  o.ns = flags.Get("namespace");
  // Kubeflow's training-operator reads CUSTOM_CLUSTER_DOMAIN; the flag wins.
  o.cluster_domain = flags.Get("cluster-domain");
  if (o.cluster_domain.empty()) o.cluster_domain = Getenv("CUSTOM_CLUSTER_DOMAIN").value_or("");
  o.gang_scheduler = flags.Get("gang-scheduler-name");
  o.kueue = flags.Get("kueue");
  if (!o.kueue.empty() && o.kueue != op::controller::kKueueExternal) {
    return Fail(InvalidArgument("flag --kueue: \"" + o.kueue + "\" is not \"external\" or empty"));
  }
  o.metrics_address = flags.Get("metrics-bind-address");
  o.health_address = flags.Get("health-probe-bind-address");
  o.leader_elect = flags.GetBool("leader-elect");
  o.leader_election_namespace = flags.Get("leader-election-namespace");
  if (o.leader_elect) o.leader_timing_error = ReadLeaderTimings(flags, o);
  return std::nullopt;
}

// The controller's client (also the Lease's) and the events' own.
struct Clients {
  std::unique_ptr<kube::RestClient> api;
  // Events go through a client of their own, with its own token bucket, off
  // the reconcile path (controller-runtime's event recorder has its own
  // clientset): a job's creation events never delay its pods.
  std::unique_ptr<kube::RestClient> events;
};

// Both clients count their requests in the registry's
// rest_client_requests_total, which must outlive them.
StatusOr<Clients> BuildClients(const kube::ClusterConfig& config, const Options& o, prometheus::Registry& registry) {
  // client-go's rest_client_requests_total{code,method,host}.
  auto& rest_requests = prometheus::BuildCounter()
                            .Name("rest_client_requests_total")
                            .Help("Number of HTTP requests, partitioned by status code, method, and host.")
                            .Register(registry);
  const std::string host = [&] {
    std::string h =
        config.server.substr(config.server.find("://") == std::string::npos ? 0 : config.server.find("://") + 3);
    return h.substr(0, h.find('/'));
  }();
  kube::RestOptions ro;
  ro.qps = o.qps;
  ro.burst = o.burst;
  ro.on_response = [&rest_requests, host](const std::string& method, const std::string& code) {
    rest_requests.Add({{"code", code}, {"method", method}, {"host", host}}).Increment();
  };
  Clients c;
  ASSIGN_OR_RETURN(c.api, kube::RestClient::Create(config, ro));
  ASSIGN_OR_RETURN(c.events, kube::RestClient::Create(config, ro));
  return c;
}

// INVALID_ARGUMENT when --gang-scheduler-name names a scheduler whose
// PodGroup CRD the API server does not serve, or --kueue=external finds no
// Workload CRD.
StatusOr<op::controller::ControllerOptions> ControllerOptionsFor(const Options& o, kube::Client& client,
                                                                 kube::EventSink* events) {
  op::controller::ControllerOptions co;
  co.ns = o.ns;
  co.workers = o.workers;
  co.events = events;
  co.planner.cluster_domain = o.cluster_domain;
  co.planner.task_auth = o.task_auth;
  co.planner.task_tls = o.task_tls;
  co.planner.gang_scheduler = o.gang_scheduler;
  if (!co.planner.gang_scheduler.empty()) {
    // Said at start-up rather than as an informer that never syncs: the
    // scheduler's PodGroup CRD must be installed.
    const auto r = op::controller::PodGroupResourceFor(co.planner.gang_scheduler);
    kube::ListOptions one;
    one.limit = 1;
    Status served = client.List({r.group, r.version, "podgroups"}, co.ns, one).status();
    if (served.code() == Code::kNotFound) {
      return InvalidArgument("flag --gang-scheduler-name " + co.planner.gang_scheduler +
                             ": the API server does not serve " + r.group + "/" + r.version +
                             " podgroups; install the scheduler's CRDs");
    }
  }
  co.planner.kueue = o.kueue;
  if (co.planner.kueue == op::controller::kKueueExternal) {
    // As for the PodGroups: Kueue's Workload CRD must be served, in the
    // version the operator writes.
    kube::ListOptions one;
    one.limit = 1;
    const auto& w = op::controller::kWorkloads;
    Status served = client.List(w, co.ns, one).status();
    if (served.code() == Code::kNotFound) {
      return InvalidArgument("flag --kueue=external: the API server does not serve " + w.group + "/" + w.version +
                             " workloads; install Kueue's CRDs");
    }
  }
  co.planner.network_policy = o.network_policy;
  co.planner.pending_timeout = o.pending_timeout;
  co.planner.recreate_pending = o.recreate_pending;
  co.planner.node_unreachable_grace = o.node_unreachable_grace;
  if (o.node_unreachable_grace.count() > 0) {
    // Nodes are cluster-scoped: a namespaced install needs a ClusterRole for
    // them (the chart makes one). Said now rather than as an informer that
    // never syncs.
    kube::ListOptions one;
    one.limit = 1;
    Status listed = client.List(kube::kNodes, "", one).status();
    if (listed.code() == Code::kPermissionDenied) {
      return InvalidArgument(
          "flag --node-unreachable-grace-seconds=" + std::to_string(o.node_unreachable_grace.count()) +
          ": the operator may not list nodes (" + listed.message() +
          "); grant list and watch on nodes (the chart's nodeFailure values do) or set it to 0");
    }
  }
  return co;
}

// The Lease's settings under --leader-elect; registers client-go's
// leader_election_master_status in `registry`, which the callbacks set.
StatusOr<op::LeaderOptions> LeaderOptionsFor(const Options& o, prometheus::Registry& registry) {
  char hostname[256] = {};
  gethostname(hostname, sizeof hostname - 1);
  op::LeaderOptions lo;
  // controller-runtime's default: the operator's own namespace.
  lo.ns = o.leader_election_namespace;
  if (lo.ns.empty()) lo.ns = PodNamespace();
  if (lo.ns.empty()) lo.ns = o.ns;
  if (lo.ns.empty()) {
    return InvalidArgument(
        "flag --leader-elect: give --leader-election-namespace (outside a pod there is no "
        "namespace of the operator's own to keep the Lease in)");
  }
  lo.identity = std::string(hostname) + "_" + std::to_string(getpid());
  lo.log = &std::cerr;
  // client-go's leader_election_master_status{name}.
  auto& master = prometheus::BuildGauge()
                     .Name("leader_election_master_status")
                     .Help(
                         "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 "
                         "indicates master. 'name' is the string used to identify the lease. Please make sure to "
                         "group by name.")
                     .Register(registry)
                     .Add({{"name", lo.name}});
  lo.on_started_leading = [&master] { master.Set(1); };
  lo.on_stopped_leading = [&master] { master.Set(0); };
  RETURN_IF_ERROR(o.leader_timing_error);
  lo.lease_duration = o.lease_duration;
  lo.renew_deadline = o.renew_deadline;
  lo.retry_period = o.retry_period;
  RETURN_IF_ERROR(ValidateLeaderOptions(lo));
  return lo;
}

// The /metrics and the /healthz + /readyz servers. Their handlers hold
// references to everything passed in, so the servers must go first.
struct Servers {
  std::unique_ptr<base::HttpServer> metrics, health;
};

StatusOr<Servers> StartServing(const Options& o, const prometheus::Registry& registry, const Clients& clients,
                               base::ProcessMetrics& process, prometheus::Gauge& api_requests,
                               op::controller::Controller& controller,
                               const std::optional<op::LeaderElector>& elector) {
  using base::HttpResponse;
  Servers s;
  auto metrics = base::HttpServer::Start(
      o.metrics_address,
      {{"/metrics", base::MetricsHandler(registry, [&] {
          api_requests.Set(static_cast<double>(clients.api->requests() + clients.events->requests()));
          process.Refresh();
          controller.RefreshMetrics();
        })}});
  if (!metrics.ok()) return metrics.status().WithContext("flag --metrics-bind-address");
  s.metrics = std::move(*metrics);
  auto health = base::HttpServer::Start(
      o.health_address, {{"/healthz",
                          [] {
                            return HttpResponse{200, "ok\n"};
                          }},
                         {"/readyz", [&] {
                            // A standby replica (not leading) is ready: it can take over.
                            const bool ready = (elector && !elector->IsLeader()) || controller.Ready();
                            return ready ? HttpResponse{200, "ok\n"} : HttpResponse{503, "caches not synced\n"};
                          }}});
  if (!health.ok()) return health.status().WithContext("flag --health-probe-bind-address");
  s.health = std::move(*health);
  return s;
}

// Leadership (when elected), then the controller until `stop` or lost
// leadership; then the orderly shutdown. Returns the exit code: 0, or 1
// when leadership was lost.
int RunUntilStopped(const Options& o, const std::string& server, const std::atomic<bool>& stop,
                    op::controller::Controller& controller, std::optional<op::LeaderElector>& elector,
                    prometheus::Gauge& leader_gauge, Servers& servers) {
  if (elector) {
    std::cout << "tfjob-operator: waiting for leadership" << std::endl;
    if (!elector->Acquire(stop)) return 0;
  }
  // Without --leader-elect this replica is the one that reconciles.
  leader_gauge.Set(1);
  std::cout << "tfjob-operator: watching " << (o.ns.empty() ? std::string("all namespaces") : "namespace " + o.ns)
            << " on " << server << std::endl;
  controller.Start();
  // Every few seconds, freed heap pages go back to the kernel (glibc only
  // gives back the top of a heap by itself): after a burst of watch events
  // the parsed objects are gone but their pages would stay resident
  // (docs/operations.md).
  // A jthread: asked to stop and joined on every way out of this function.
  std::jthread trimmer([&stop](std::stop_token done) {
    for (int tick = 1; !stop && !done.stop_requested(); ++tick) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (tick % 50 == 0) malloc_trim(0);
    }
  });
  bool lost = false;
  if (elector) {
    lost = !elector->Hold(stop);
  } else {
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  controller.Stop();
  if (elector) elector->Release();
  servers.metrics.reset();
  servers.health.reset();
  if (lost) {
    std::cerr << "tfjob-operator: lost leadership; exiting" << std::endl;
    return 1;
  }
  std::cout << "tfjob-operator: shut down" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  TuneMalloc();
  // Before any library starts threads: SIGTERM/SIGINT become an orderly stop.
  SignalWatcher signals;

  Options o;
  if (std::optional<int> exit_code = ParseCommandLine(argc, argv, o)) return *exit_code;
  auto config = o.kubeconfig.empty() ? kube::InClusterConfig(Getenv) : kube::LoadKubeconfig(o.kubeconfig, o.context);
  if (!config.ok()) return Fail(config.status());
  // The registry outlives everything that registers in it (declared first,
  // destroyed last).
  prometheus::Registry registry;
  auto clients = BuildClients(*config, o, registry);
  if (!clients.ok()) return Fail(clients.status());
  kube::EventSink events(*clients->events, &std::cerr);

  base::ProcessMetrics process(registry);
  auto& api_requests = prometheus::BuildGauge()
                           .Name("tfjob_operator_api_requests")
                           .Help("Kubernetes API requests sent")
                           .Register(registry)
                           .Add({});
  auto& leader_gauge = prometheus::BuildGauge()
                           .Name("tfjob_operator_leader")
                           .Help("1 while this replica leads")
                           .Register(registry)
                           .Add({});
  auto co = ControllerOptionsFor(o, *clients->api, &events);
  if (!co.ok()) return Fail(co.status());
  op::controller::Controller controller(*clients->api, *co, registry);

  std::optional<op::LeaderElector> elector;
  if (o.leader_elect) {
    auto lo = LeaderOptionsFor(o, registry);
    if (!lo.ok()) return Fail(lo.status());
    elector.emplace(*clients->api, *lo);
  }
  auto servers = StartServing(o, registry, *clients, process, api_requests, controller, elector);
  if (!servers.ok()) return Fail(servers.status());
  std::cout << "tfjob-operator: metrics on :" << servers->metrics->port()
            << ", health probes on :" << servers->health->port() << std::endl;
  return RunUntilStopped(o, config->server, signals.stop(), controller, elector, leader_gauge, *servers);
}
