// Monitoring end to end, with real tools: the operator (against the real
// API server, tests/support/envtest.h, in a namespace of each test's own)
// and a local TFJob (`tfjob run`: chief, PS and workers
// training with `fit`) serve /metrics; promtool lints every endpoint; a real
// Prometheus scrapes the operator statically and the job through the
// runner's file_sd targets, and its HTTP API returns the series; every
// metric the Grafana dashboard names is one of those the processes export.
#include <regex>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "kube/rest_client.h"
#include "operator/tests/envtest_support.h"
#include "services/base/tests/http_get.h"
#include "tests/support/process.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace tfjob::runtime_metrics {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace t = ::tfjob::testing;

constexpr const char* kJob = "metrics-e2e";
constexpr auto kPatience = 40s;

bool Patiently(const std::function<bool()>& pred) { return t::WaitUntil(pred, kPatience, 100ms); }

// The value of the first sample of `name` whose line contains `with`.
std::optional<double> Sample(const std::string& text, const std::string& name, const std::string& with = "") {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 || line.find(with) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nullopt;
}

// The real API server's part (op::envtest::RealApiServerTest): the
// control plane with the TFJob CRD, this test's namespace (ns_) with its
// "default" ServiceAccount, a temporary directory (dir_), the operator (op_).
class Monitoring : public op::envtest::RealApiServerTest {
 protected:
  void SetUp() override {
    RealApiServerTest::SetUp();
    if (HasFatalFailure()) return;
    // The operator, watching this test's namespace, with one TFJob so its
    // job counters have samples; its endpoints on ports it binds itself.
    ASSERT_NO_FATAL_FAILURE(StartOperator());
    operator_port_ = metrics_port_;
    Kubectl({"apply", "-n", ns_, "-f", t::SourceDir() + "/examples/counter/tfjob.yaml"});
    ASSERT_FALSE(HasFailure());

    // A local job that trains until stopped: many tiny epochs.
    json config{
        {"name", "metrics-e2e"},
        {"seed", 3},
        {"model",
         {{"input_shape", {8}},
          {"layers", json::array({{{"type", "Dense"}, {"units", 3}, {"activation", "softmax"}}})}}},
        {"loss", "sparse_categorical_crossentropy"},
        {"optimizer", {{"type", "SGD"}, {"learning_rate", 0.05}}},
        {"metrics", {"accuracy"}},
        {"data",
         {{"train",
           {{"source", "synthetic"}, {"num_examples", 256}, {"feature_shape", {8}}, {"num_classes", 3}, {"seed", 1}}},
          {"eval",
           {{"source", "synthetic"}, {"num_examples", 64}, {"feature_shape", {8}}, {"num_classes", 3}, {"seed", 2}}}}},
        {"batch_size", 16},
        {"steps_per_epoch", 4},
        {"epochs", 1000000}};
    ASSERT_TRUE(WriteFileAtomic(dir_ + "/model.json", config.dump(2)).ok());
    const std::string runtime = t::BinDir() + "/tfjob-runtime";
    // The chief checkpoints, so the side-car evaluator has something to evaluate.
    const std::string ckpt = "\", \"--checkpoint-dir\", \"" + dir_ + "/ckpt";
    auto replica = [&](int n, const std::string& extra = "") {
      return "      replicas: " + std::to_string(n) +
             "\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n"
             "            - name: tensorflow\n              image: tfjob/runtime-cpu:0.1.0\n"
             "              command: [\"" +
             runtime + "\", \"fit\", \"--config\", \"" + dir_ + "/model.json" + extra + "\"]\n";
    };
    const std::string manifest =
        std::string("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: ") + kJob +
        "\nspec:\n  tfReplicaSpecs:\n    Chief:\n" + replica(1, ckpt + "\", \"--checkpoint-every-steps\", \"40") +
        "    PS:\n" + replica(1, ckpt) + "    Worker:\n" + replica(2) + "    Evaluator:\n" + replica(1, ckpt);
    ASSERT_TRUE(WriteFileAtomic(dir_ + "/tfjob.yaml", manifest).ok());
    job_ = std::make_unique<t::Process>(
        std::vector<std::string>{t::BinDir() + "/tfjob", "run", dir_ + "/tfjob.yaml", "--state-dir", dir_ + "/state"});
    // Every replica listed in the targets file, serving, and the chief past its first epoch.
    ASSERT_TRUE(Patiently([&] {
      auto targets = ReadFile(dir_ + "/state/prometheus-targets.json");
      if (!targets.ok()) return false;
      json j = json::parse(*targets, nullptr, false);
      if (!j.is_array() || j.size() != 5) return false;
      runtime_ports_.clear();
      for (const auto& target : j) {
        const std::string addr = target["targets"][0];
        const std::string who =
            target["labels"].value("replica_type", "") + "-" + target["labels"].value("replica_index", "");
        runtime_ports_[who] = std::stoi(addr.substr(addr.rfind(':') + 1));
      }
      return true;
    })) << job_->output();
    ASSERT_TRUE(Patiently([&] {
      for (const auto& [who, port] : runtime_ports_) {
        if (t::HttpGet(port, "/metrics").status != 200) return false;
      }
      return Sample(t::HttpGet(runtime_ports_["chief-0"], "/metrics").body, "tfjob_runtime_steps_total").value_or(0) >
                 0 &&
             Sample(t::HttpGet(runtime_ports_["evaluator-0"], "/metrics").body, "tfjob_runtime_evaluated_step")
                     .value_or(0) > 0 &&
             t::HttpGet(operator_port_, "/metrics").body.find("training_operator_jobs_created_total{") !=
                 std::string::npos;
    })) << job_->output()
        << op_->output();
  }

  void TearDown() override {
    if (prometheus_) prometheus_->Stop(SIGTERM);
    // SIGTERM: the runner stops its replicas (they run in their own process groups).
    if (job_) job_->Stop(SIGTERM);
    if (op_) op_->Stop(SIGTERM);
    op_.reset();
    RealApiServerTest::TearDown();  // deletes the namespace
  }

  // Every /metrics body: the operator's and each replica's, by name.
  std::map<std::string, std::string> Endpoints() {
    std::map<std::string, std::string> out{{"operator", t::HttpGet(operator_port_, "/metrics").body}};
    for (const auto& [who, port] : runtime_ports_) out[who] = t::HttpGet(port, "/metrics").body;
    return out;
  }

  std::unique_ptr<t::Process> job_, prometheus_;
  int operator_port_ = 0;
  std::map<std::string, int> runtime_ports_;  // "ps-0" -> its metrics port
};

TEST_F(Monitoring, PromtoolFindsNoProblemInAnyEndpoint) {
  auto endpoints = Endpoints();
  ASSERT_EQ(endpoints.size(), 6u);  // operator, chief, ps, two workers, evaluator
  for (const auto& [who, body] : endpoints) {
    SCOPED_TRACE(who);
    ASSERT_FALSE(body.empty());
    const std::string file = dir_ + "/" + who + ".prom";
    ASSERT_TRUE(WriteFileAtomic(file, body).ok());
    // promtool prints nothing and exits 0 when the exposition is clean.
    auto r = t::Run({"/bin/sh", "-c", "exec promtool check metrics < '" + file + "'"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err << body;
    EXPECT_EQ(r.out + r.err, "") << body;
  }
  // Each role's own series, labelled with the task.
  EXPECT_THAT(
      endpoints["ps-0"],
      ::testing::HasSubstr(
          R"(tfjob_runtime_ps_received_bytes_total{job_name="metrics-e2e",method="Push",task_index="0",task_type="ps"})"));
  // fit's workers push with the next pull, in one exchange.
  EXPECT_GT(Sample(endpoints["ps-0"], "tfjob_runtime_ps_received_bytes_total", "method=\"PushPull\"").value_or(0), 0);
  EXPECT_GT(Sample(endpoints["worker-1"], "tfjob_runtime_worker_closures_total", "task_index=\"1\"").value_or(0), 0);
  EXPECT_GT(Sample(endpoints["chief-0"], "tfjob_runtime_examples_total", "task_type=\"chief\"").value_or(0), 0);
  EXPECT_TRUE(Sample(endpoints["chief-0"], "tfjob_runtime_loss").has_value());
  EXPECT_GT(Sample(endpoints["chief-0"], "tfjob_runtime_checkpoints_total").value_or(0), 0);
  EXPECT_TRUE(Sample(endpoints["chief-0"], "tfjob_runtime_checkpoint_age_seconds").has_value());
  EXPECT_TRUE(Sample(endpoints["evaluator-0"], "tfjob_runtime_evaluation", "metric=\"accuracy\"").has_value());
}

TEST_F(Monitoring, PrometheusScrapesTheOperatorAndTheLocalJob) {
  const std::string config =
      "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
      "  - job_name: tfjob-operator\n    static_configs:\n      - targets: ['127.0.0.1:" +
      std::to_string(operator_port_) + "']\n  - job_name: tfjob-runtime\n    file_sd_configs:\n      - files: ['" +
      dir_ + "/state/prometheus-targets.json']\n        refresh_interval: 1s\n";
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/prometheus.yml", config).ok());
  // Everything on loopback and in the temp dir; Prometheus has no phone-home.
  // It binds port 0 itself and logs the address it got.
  prometheus_ = std::make_unique<t::Process>(std::vector<std::string>{
      "/usr/bin/prometheus", "--config.file=" + dir_ + "/prometheus.yml", "--storage.tsdb.path=" + dir_ + "/tsdb",
      "--web.listen-address=127.0.0.1:0", "--log.level=info"});
  const auto listening = prometheus_->WaitForLine("msg=\"Listening on\" address=127.0.0.1:");
  ASSERT_TRUE(listening) << prometheus_->output();
  const int port = std::stoi(*listening);
  auto series = [&](const std::string& query) -> json {
    auto r = t::HttpGet(port, "/api/v1/query?query=" + kube::UrlEncode(query));
    if (r.status != 200) return json::array();
    json j = json::parse(r.body, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success") return json::array();
    return j["data"]["result"];
  };
  const std::vector<std::pair<std::string, size_t>> expected{
      {R"(training_operator_jobs_created_total{job="tfjob-operator",job_namespace=")" + ns_ +
           R"(",framework="tensorflow"})",
       1},
      {R"(tfjob_runtime_steps_total{job="tfjob-runtime",job_name="metrics-e2e",task_type="chief",replica_type="chief"} > 0)",
       1},
      {R"(tfjob_runtime_ps_received_bytes_total{job="tfjob-runtime",task_type="ps",method="PushPull"} > 0)", 1},
      {R"(tfjob_runtime_worker_closures_total{job="tfjob-runtime",task_type="worker"} > 0)", 2},
      {R"(tfjob_runtime_evaluated_step{job="tfjob-runtime",task_type="evaluator"} > 0)", 1},
      {R"(up{job="tfjob-runtime",tfjob_job_name="metrics-e2e"} == 1)", 5},
  };
  for (const auto& [query, n] : expected) {
    SCOPED_TRACE(query);
    EXPECT_TRUE(Patiently([&] { return series(query).size() == n; })) << series(query).dump() << "\n"
                                                                      << prometheus_->output();
  }
}

TEST_F(Monitoring, TheDashboardNamesOnlyMetricsTheCodeExports) {
  // What the processes export: every "# TYPE name" line of a live run.
  std::set<std::string> exported;
  for (const auto& [who, body] : Endpoints()) {
    std::istringstream in(body);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("# TYPE ", 0) == 0) exported.insert(line.substr(7, line.find(' ', 7) - 7));
    }
  }
  auto text = ReadFile(t::SourceDir() + "/charts/tfjob-operator/dashboards/tfjob-dashboard.json");
  ASSERT_TRUE(text.ok()) << text.status();
  json dash = json::parse(*text, nullptr, false);
  ASSERT_FALSE(dash.is_discarded());
  std::vector<std::string> exprs;
  std::function<void(const json&)> walk = [&](const json& j) {
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) {
        if ((it.key() == "expr" || it.key() == "definition") && it->is_string()) exprs.push_back(*it);
        walk(*it);
      }
    } else if (j.is_array()) {
      for (const auto& e : j) walk(e);
    }
  };
  walk(dash);
  // Metric names are the identifiers with our prefixes; PromQL's functions,
  // labels and keywords have none of them.
  const std::regex name(R"(\b(training_operator_|tfjob_)[a-zA-Z0-9_:]*)");
  std::set<std::string> named;
  for (const auto& e : exprs) {
    for (std::sregex_iterator it(e.begin(), e.end(), name), end; it != end; ++it) {
      std::string n = it->str();
      for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
        if (n.size() > suffix.size() && n.ends_with(suffix) && !exported.count(n)) n.resize(n.size() - suffix.size());
      }
      named.insert(n);
    }
  }
  EXPECT_GE(named.size(), 15u);  // the panels the issue asks for
  for (const auto& n : named) EXPECT_TRUE(exported.count(n)) << n << " is on the dashboard but no process exports it";
  // A Prometheus data source variable, used by every panel.
  bool has_datasource = false;
  for (const auto& v : dash["templating"]["list"])
    has_datasource |= v.value("type", "") == "datasource" && v.value("query", "") == "prometheus";
  EXPECT_TRUE(has_datasource);
  for (const auto& p : dash["panels"]) {
    if (p.value("type", "") != "row") {
      EXPECT_EQ(p["datasource"]["uid"], "${datasource}") << p.value("title", "");
    }
  }
}

}  // namespace
}  // namespace tfjob::runtime_metrics
