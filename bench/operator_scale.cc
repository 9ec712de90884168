// The operator at scale, on a real API server (../shared/envtest: etcd,
// kube-apiserver, kube-controller-manager on this machine). For each N: N TFJobs of
// 1 chief + 1 PS + 3 workers (5 pods, 5 services each) are created as fast
// as the bench's client allows; then, playing the kubelet, every pod is
// marked Running, then every chief Succeeded, then every job is deleted.
// The bench watches pods and TFJobs (its own list+watch caches) and reports:
//   - seconds from the first create to the last pod created;
//   - p50 / p99 of each job's create-to-all-pods-created latency;
//   - p50 / p99 of chief-Succeeded-to-job-Succeeded latency;
//   - API requests the operator made per job, by verb (its own
//     rest_client_requests_total);
//   - the operator's peak RSS and RSS per 1,000 cached pods, CPU seconds;
//   - duplicates (a pod created twice) and missed transitions (a job never
//     Running or never Succeeded): none allowed.
// The operator runs as its own process with its default --workers, --qps
// and --burst unless given. Bounded: each phase gives up after --timeout
// seconds. Prints a table and a verdict against the goals (docs/operations.md).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "bench/cli.h"
#include "common/flags.h"
#include "kube/config.h"
#include "kube/informer.h"
#include "kube/rest_client.h"
#include "services/base/tests/http_get.h"
#include "tests/support/envtest.h"
#include "tests/support/process.h"
#include "tests/support/subprocess.h"

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace kube = tfjob::kube;
namespace t = tfjob::testing;

namespace {

const kube::Resource kNamespaces{"", "v1", "namespaces"};

json Job(const std::string& ns, int i) {
  json container{
      {"name", "tensorflow"}, {"image", "tfjob/runtime-cpu:0.1.0"}, {"command", {"tfjob-runtime", "counter"}}};
  auto replica = [&](int n) {
    return json{{"replicas", n},
                {"restartPolicy", "OnFailure"},
                {"template", {{"spec", {{"containers", json::array({container})}}}}}};
  };
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", "job-" + std::to_string(i)}, {"namespace", ns}}},
          {"spec", {{"tfReplicaSpecs", {{"Chief", replica(1)}, {"PS", replica(1)}, {"Worker", replica(3)}}}}}};
}

json ContainerStatus(const json& state, bool ready) {
  return json::array({{{"name", "tensorflow"},
                       {"image", "tfjob/runtime-cpu:0.1.0"},
                       {"imageID", ""},
                       {"ready", ready},
                       {"restartCount", 0},
                       {"state", state}}});
}

long ProcStatusKiB(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::string(field).size()));
  }
  return -1;
}

double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

// rest_client_requests_total{code,host,method} summed by method.
std::map<std::string, double> RequestsByMethod(const std::string& metrics) {
  std::map<std::string, double> out;
  std::istringstream in(metrics);
  std::string line;
  const std::regex method_re("method=\"([A-Z]+)\"");
  while (std::getline(in, line)) {
    if (line.rfind("rest_client_requests_total{", 0) != 0) continue;
    std::smatch m;
    if (!std::regex_search(line, m, method_re)) continue;
    out[m[1]] += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return out;
}

struct Result {
  std::string backend;
  int jobs = 0;
  bool ok = false;
  std::string why;  // what did not finish
  double all_pods_s = -1, create_p50 = -1, create_p99 = -1, success_p50 = -1, success_p99 = -1;
  std::map<std::string, double> requests;  // by verb, per job
  double requests_per_job = 0, events_per_job = 0;
  double peak_rss_mib = -1, rss_per_1000_pods_mib = -1, cpu_s = -1;
  int duplicates = 0, missed = 0;
  int pods_left = 0;  // a minute after the jobs were deleted
};

// What the bench's watches saw, stamped on arrival.
class Observer {
 public:
  explicit Observer(int jobs)
      : pods_seen_(static_cast<size_t>(jobs)),
        running_(static_cast<size_t>(jobs)),
        succeeded_(static_cast<size_t>(jobs)) {}

  void OnPod(const std::string& type, const json& pod) {
    if (type != "ADDED") return;
    const int job = JobIndex(pod["metadata"]["labels"].value("training.kubeflow.org/job-name", ""));
    if (job < 0) return;
    std::lock_guard<std::mutex> l(mu_);
    const std::string name = pod["metadata"].value("name", "");
    if (++added_[name] > 1) ++duplicates_;
    auto& seen = pods_seen_[static_cast<size_t>(job)];
    seen.push_back(Clock::now());
    ++pods_;
  }

  void OnJob(const std::string& type, const json& job) {
    if (type == "DELETED") return;
    const int i = JobIndex(job["metadata"].value("name", ""));
    if (i < 0) return;
    const auto conds = job.contains("status") ? job["status"].value("conditions", json::array()) : json::array();
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& c : conds) {
      if (c.value("status", "") != "True") continue;
      const std::string t = c.value("type", "");
      auto& slot = t == "Running" ? running_[static_cast<size_t>(i)] : succeeded_[static_cast<size_t>(i)];
      if ((t == "Running" || t == "Succeeded") && !slot) slot = Clock::now();
    }
  }

  int pods() {
    std::lock_guard<std::mutex> l(mu_);
    return pods_;
  }
  int Count(bool succeeded) {
    std::lock_guard<std::mutex> l(mu_);
    const auto& v = succeeded ? succeeded_ : running_;
    return static_cast<int>(std::count_if(v.begin(), v.end(), [](const auto& o) { return o.has_value(); }));
  }
  int duplicates() {
    std::lock_guard<std::mutex> l(mu_);
    return duplicates_;
  }
  // Per job: the arrival of its last pod (nullopt until all 5 came).
  std::optional<Clock::time_point> AllPods(int job, size_t want) {
    std::lock_guard<std::mutex> l(mu_);
    const auto& v = pods_seen_[static_cast<size_t>(job)];
    if (v.size() < want) return std::nullopt;
    return *std::max_element(v.begin(), v.end());
  }
  std::optional<Clock::time_point> Succeeded(int job) {
    std::lock_guard<std::mutex> l(mu_);
    return succeeded_[static_cast<size_t>(job)];
  }

 private:
  static int JobIndex(const std::string& name) {
    if (name.rfind("job-", 0) != 0) return -1;
    try {
      return std::stoi(name.substr(4));
    } catch (...) {
      return -1;
    }
  }

  std::mutex mu_;
  std::vector<std::vector<Clock::time_point>> pods_seen_;
  std::vector<std::optional<Clock::time_point>> running_, succeeded_;
  std::map<std::string, int> added_;
  int pods_ = 0, duplicates_ = 0;
};

bool WaitUntil(const std::function<bool()>& done, int timeout_s) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// Runs `work(i)` for i in [0, n) on `threads` threads; the first error wins.
tfjob::Status Parallel(int n, int threads, const std::function<tfjob::Status(int)>& work) {
  std::atomic<int> next{0};
  std::mutex mu;
  tfjob::Status first = tfjob::Status::Ok();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) {
        tfjob::Status s = work(i);
        if (!s.ok()) {
          std::lock_guard<std::mutex> l(mu);
          if (first.ok()) first = s;
          return;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  return first;
}

// One N on the control plane whose admin kubeconfig is `kubeconfig`, in a
// namespace of its own.
Result RunOne(const std::string& kubeconfig, int jobs, const tfjob::Flags& flags, const std::string& ns) {
  Result r;
  r.backend = "real API server";
  r.jobs = jobs;
  const int timeout = static_cast<int>(*flags.GetInt("timeout"));
  auto config = kube::LoadKubeconfig(kubeconfig);
  if (!config.ok()) {
    r.why = config.status().ToString();
    return r;
  }
  kube::RestOptions bench_options;
  bench_options.qps = 5000;
  bench_options.burst = 5000;
  auto client = kube::RestClient::Create(*config, bench_options);
  if (!client.ok()) {
    r.why = client.status().ToString();
    return r;
  }
  kube::Client& c = **client;
  {
    auto made = c.Create(kNamespaces, "", {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
    if (!made.ok() && made.status().code() != tfjob::Code::kAlreadyExists) {
      r.why = "namespace: " + made.status().ToString();
      return r;
    }
  }

  std::vector<std::string> args{flags.Get("operator"),
                                "--kubeconfig",
                                kubeconfig,
                                "--namespace",
                                ns,
                                "--metrics-bind-address",
                                "127.0.0.1:0",
                                "--health-probe-bind-address",
                                "127.0.0.1:0"};
  for (const char* f : {"workers", "qps", "burst"}) {
    if (!flags.Get(f).empty()) {
      args.push_back(std::string("--") + f);
      args.push_back(flags.Get(f));
    }
  }
  t::Process op(args);
  int metrics = 0, health = 0;
  const auto ports = op.WaitForLine("tfjob-operator: metrics on :");
  if (!ports || std::sscanf(ports->c_str(), "%d, health probes on :%d", &metrics, &health) != 2) {
    r.why = "the operator did not start:\n" + op.output();
    return r;
  }
  if (!WaitUntil([&] { return t::HttpGet(health, "/readyz").status == 200; }, 60)) {
    r.why = "the operator never became ready:\n" + op.output();
    return r;
  }
  const long rss_ready = ProcStatusKiB(op.pid(), "VmRSS:");

  Observer seen(jobs);
  kube::Informer pods(c, kube::kPods, ns, "training.kubeflow.org/job-name");
  kube::Informer tfjobs(c, kube::kTFJobs, ns);
  pods.AddHandler([&](const std::string& type, const json& o) { seen.OnPod(type, o); });
  tfjobs.AddHandler([&](const std::string& type, const json& o) { seen.OnJob(type, o); });
  pods.Start();
  tfjobs.Start();
  if (!WaitUntil([&] { return pods.HasSynced() && tfjobs.HasSynced(); }, 60)) {
    r.why = "the bench's watches never synced";
    return r;
  }

  // 1. Create every job, as fast as the bench's client allows.
  const int threads = static_cast<int>(*flags.GetInt("client-threads"));
  std::vector<Clock::time_point> created(static_cast<size_t>(jobs));
  const auto t0 = Clock::now();
  if (auto s = Parallel(jobs, threads,
                        [&](int i) {
                          auto res = c.Create(kube::kTFJobs, ns, Job(ns, i));
                          created[static_cast<size_t>(i)] = Clock::now();
                          return res.ok() ? tfjob::Status::Ok() : res.status();
                        });
      !s.ok()) {
    r.why = "create: " + s.ToString();
    return r;
  }
  const int want_pods = 5 * jobs;
  if (!WaitUntil([&] { return seen.pods() >= want_pods; }, timeout)) {
    r.why = "pods created: " + std::to_string(seen.pods()) + " of " + std::to_string(want_pods);
  }
  std::vector<double> create_latency;
  Clock::time_point last_pod = t0;
  for (int i = 0; i < jobs; ++i) {
    if (auto at = seen.AllPods(i, 5)) {
      create_latency.push_back(std::chrono::duration<double>(*at - created[static_cast<size_t>(i)]).count());
      last_pod = std::max(last_pod, *at);
    }
  }
  r.all_pods_s = std::chrono::duration<double>(last_pod - t0).count();
  r.create_p50 = Percentile(create_latency, 0.5);
  r.create_p99 = Percentile(create_latency, 0.99);

  // 2. Every pod Running, as the kubelet would report it.
  const json running{
      {"status", {{"phase", "Running"}, {"containerStatuses", ContainerStatus({{"running", json::object()}}, true)}}}};
  std::vector<json> all = pods.List(ns);
  if (r.why.empty()) {
    if (auto s = Parallel(static_cast<int>(all.size()), threads,
                          [&](int i) {
                            auto res = c.MergePatch(kube::kPods, ns, all[static_cast<size_t>(i)]["metadata"]["name"],
                                                    running, true);
                            return res.ok() ? tfjob::Status::Ok() : res.status();
                          });
        !s.ok()) {
      r.why = "pod status: " + s.ToString();
    }
  }
  if (r.why.empty() && !WaitUntil([&] { return seen.Count(false) >= jobs; }, timeout)) {
    r.why = "jobs Running: " + std::to_string(seen.Count(false)) + " of " + std::to_string(jobs);
  }
  // Every pod cached, Running: the operator's memory at its fullest.
  const long rss_full = ProcStatusKiB(op.pid(), "VmRSS:");

  // 3. Every chief Succeeded.
  const json done{
      {"status",
       {{"phase", "Succeeded"},
        {"containerStatuses", ContainerStatus({{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}}, false)}}}};
  std::vector<Clock::time_point> chief_done(static_cast<size_t>(jobs));
  if (r.why.empty()) {
    if (auto s = Parallel(jobs, threads,
                          [&](int i) {
                            auto res =
                                c.MergePatch(kube::kPods, ns, "job-" + std::to_string(i) + "-chief-0", done, true);
                            chief_done[static_cast<size_t>(i)] = Clock::now();
                            return res.ok() ? tfjob::Status::Ok() : res.status();
                          });
        !s.ok()) {
      r.why = "chief status: " + s.ToString();
    }
  }
  if (r.why.empty() && !WaitUntil([&] { return seen.Count(true) >= jobs; }, timeout)) {
    r.why = "jobs Succeeded: " + std::to_string(seen.Count(true)) + " of " + std::to_string(jobs);
  }
  std::vector<double> success_latency;
  for (int i = 0; i < jobs; ++i) {
    if (auto at = seen.Succeeded(i)) {
      success_latency.push_back(
          std::max(0.0, std::chrono::duration<double>(*at - chief_done[static_cast<size_t>(i)]).count()));
    }
  }
  r.success_p50 = Percentile(success_latency, 0.5);
  r.success_p99 = Percentile(success_latency, 0.99);
  r.missed = (jobs - seen.Count(false)) + (jobs - seen.Count(true));
  r.duplicates = seen.duplicates();

  // The operator's requests so far: the workload's, from create to success,
  // and the events among them (written by their own client).
  const kube::Resource events{"", "v1", "events"};
  int64_t event_count = -1;
  WaitUntil(
      [&] {
        auto list = c.List(events, ns, {});
        const int64_t n = list.ok() && (*list)["items"].is_array() ? static_cast<int64_t>((*list)["items"].size()) : -1;
        const bool settled = n == event_count;
        event_count = n;
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        return settled;
      },
      60);
  r.requests = RequestsByMethod(t::HttpGet(metrics, "/metrics").body);
  for (auto& [verb, n] : r.requests) {
    n /= jobs;
    r.requests_per_job += n;
  }
  r.events_per_job = static_cast<double>(event_count) / jobs;

  // 4. Delete every job; where there is a garbage collector, it deletes the pods.
  if (auto s = Parallel(jobs, threads,
                        [&](int i) { return c.Delete(kube::kTFJobs, ns, "job-" + std::to_string(i), "Background"); });
      !s.ok() && r.why.empty()) {
    r.why = "delete: " + s.ToString();
  }
  // Every job gone from the API server; where there is a garbage collector,
  // it deletes the pods at its own pace (kube-controller-manager's client
  // is limited to 20 requests/s by default): reported, not waited for
  // beyond a minute.
  auto jobs_left = [&] { return tfjobs.size(); };
  if (r.why.empty() && !WaitUntil([&] { return jobs_left() == 0; }, timeout)) {
    r.why = "jobs left after deleting them: " + std::to_string(jobs_left());
  }
  WaitUntil([&] { return pods.size() == 0; }, 60);
  r.pods_left = static_cast<int>(pods.size());
  r.peak_rss_mib = static_cast<double>(ProcStatusKiB(op.pid(), "VmHWM:")) / 1024.0;
  if (rss_full > 0 && rss_ready > 0) {
    r.rss_per_1000_pods_mib = static_cast<double>(rss_full - rss_ready) / 1024.0 / (want_pods / 1000.0);
  }
  r.cpu_s = CpuSeconds(op.pid());
  pods.Stop();
  tfjobs.Stop();
  op.Stop(SIGTERM);
  (void)c.Delete(kNamespaces, "", ns, "Background");
  r.ok = r.why.empty() && r.duplicates == 0 && r.missed == 0;
  return r;
}

void PrintRow(const Result& r) {
  char create[32], success[32];
  std::snprintf(create, sizeof create, "%.2f/%.2f s", r.create_p50, r.create_p99);
  std::snprintf(success, sizeof success, "%.2f/%.2f s", r.success_p50, r.success_p99);
  std::printf("%-18s %6d %8.1fs %13s %13s %9.1f %8.1fM %9.2f %9.1f %7d %6d %5s\n", r.backend.c_str(), r.jobs,
              r.all_pods_s, create, success, r.requests_per_job, r.peak_rss_mib, r.rss_per_1000_pods_mib, r.cpu_s,
              r.duplicates, r.missed, r.ok ? "yes" : "NO");
  std::string verbs;
  for (const auto& [verb, n] : r.requests) verbs += " " + verb + " " + std::to_string(n).substr(0, 5);
  // The least this workload needs per job: 5 pods, 5 services and the
  // task-auth Secret created, and the status written for Created, Running
  // and Succeeded; events (Kubeflow's, one per pod and service created)
  // come on top.
  const double minimum = 14, workload = r.requests_per_job - r.events_per_job;
  std::printf("    requests per job by verb:%s; events %.1f; without events %.1f = %.0f%% of the minimum %.0f\n",
              verbs.c_str(), r.events_per_job, workload, 100 * workload / minimum, minimum);
  if (r.pods_left > 0) {
    std::printf("    a minute after the jobs were deleted the garbage collector had %d of %d pods still to delete\n",
                r.pods_left, 5 * r.jobs);
  }
  if (!r.why.empty()) std::printf("    did not finish: %s\n", r.why.c_str());
  std::fflush(stdout);
}

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) out.push_back(std::stoi(part));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  tfjob::Flags flags;
  flags.Value("jobs", "comma-separated job counts N", "100,500,2000")
      .Value("operator", "path of tfjob-operator", "build/bin/tfjob-operator")
      .Value("workers", "operator --workers (default: the operator's)", "")
      .Value("qps", "operator --qps (default: the operator's)", "")
      .Value("burst", "operator --burst (default: the operator's)", "")
      .Value("client-threads", "the bench's concurrent requests", "8")
      .Value("timeout", "seconds each phase may take", "600");
  const std::vector<std::string> args(argv + 1, argv + argc);
  const std::string usage = "usage: bench_operator_scale [flags] (bench/operator_scale.sh runs it)\n" + flags.Usage();
  if (auto code = tfjob::bench::AnswerHelpOrVersion(args, "bench_operator_scale", usage)) return *code;
  if (auto s = flags.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n" << usage;
    return 2;
  }
  std::vector<int> counts;
  try {
    counts = ParseList(flags.Get("jobs"));
  } catch (const std::exception&) {
    std::cerr << "--jobs: a comma-separated list of counts, got '" << flags.Get("jobs") << "'\n";
    return 2;
  }
  std::vector<Result> results;
  auto flag_or = [&](const char* f, const char* d) {
    return flags.Get(f).empty() ? std::string(d) + " (default)" : flags.Get(f);
  };
  std::printf("Operator scale: N TFJobs of 1 chief + 1 PS + 3 workers; operator --workers %s --qps %s --burst %s\n",
              flag_or("workers", "2").c_str(), flag_or("qps", "100").c_str(), flag_or("burst", "200").c_str());
  std::printf("%-18s %6s %9s %13s %13s %9s %9s %9s %9s %7s %6s %5s\n", "backend", "N", "all pods", "create p50/p99",
              "success p50/99", "req/job", "peak RSS", "MiB/1k", "CPU s", "dup", "missed", "ok");

  std::string why;
  t::ControlPlane* cp = t::ControlPlane::Shared(&why);
  if (!cp) {
    std::cerr << "bench/operator_scale: " << why << std::endl;
    return 1;
  }
  auto crd = cp->Kubectl({"apply", "--server-side", "-f", t::SourceDir() + "/crds/kubeflow.org_tfjobs.yaml"});
  // Polled: `kubectl wait` fails outright when it looks before the CRD
  // has any condition.
  const bool established =
      crd.exit_code == 0 &&
      WaitUntil(
          [&] {
            return cp->Kubectl({"get", "crd", "tfjobs.kubeflow.org", "-o",
                                "jsonpath={.status.conditions[?(@.type==\"Established\")].status}"})
                       .out == "True";
          },
          60);
  if (!established) {
    std::cerr << "bench/operator_scale: installing the TFJob CRD failed: " << crd.err << std::endl;
    return 1;
  }
  for (int n : counts) {
    std::cerr << "real API server: " << n << " jobs..." << std::endl;
    results.push_back(RunOne(cp->admin_kubeconfig(), n, flags, "scale-" + std::to_string(n)));
    PrintRow(results.back());
  }

  // The goals (docs/operations.md).
  bool all_ok = true;
  std::string verdict;
  for (const Result& r : results) {
    all_ok = all_ok && r.ok;
    if (r.jobs == 500) {
      verdict += std::string(" create p99 at N=500 ") + (r.create_p99 <= 5 ? "<= 5 s (met)" : "> 5 s (missed)") + ";";
    }
    if (r.jobs >= 2000) {
      verdict += std::string(" peak RSS at ") + std::to_string(5 * r.jobs) + " pods " +
                 (r.peak_rss_mib <= 64 ? "<= 64 MiB (met)" : "> 64 MiB (missed)") + ";";
    }
    const double workload = r.requests_per_job - r.events_per_job;
    char req[96];
    std::snprintf(req, sizeof req, " N=%d requests per job without events %.1f %s;", r.jobs, workload,
                  workload <= 1.1 * 14 ? "within 10% of 14 (met)" : "over 10% above 14 (missed)");
    verdict += req;
  }
  std::printf("verdict: %s;%s\n",
              all_ok ? "every run completed, no duplicate pod, no missed transition"
                     : "a run did not complete, or had a duplicate or a missed transition",
              verdict.c_str());
  return all_ok ? 0 : 1;
}
