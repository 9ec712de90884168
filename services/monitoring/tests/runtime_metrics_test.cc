// RuntimeMetrics: names, task labels, which series each role starts with,
// checkpoint age computed at scrape time; the exporter's configuration
// (flag over environment) and its HTTP routes.
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/monitoring/runtime_metrics.h"
#include "services/base/tests/http_get.h"

namespace tfjob::runtime_metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

constexpr const char* kChief = R"({job_name="mnist",task_index="0",task_type="chief"})";

TEST(RuntimeMetrics, ChiefStartsWithZeroCountersAndRecordsEpochs) {
  RuntimeMetrics m({"mnist", "chief", 0});
  std::string text = m.Serialize();
  EXPECT_THAT(text, HasSubstr(std::string("tfjob_runtime_steps_total") + kChief + " 0\n"));
  EXPECT_THAT(text, HasSubstr(std::string("tfjob_runtime_closures_retried_total") + kChief + " 0\n"));
  // No loss before the first epoch: a 0 would read as a perfect model.
  EXPECT_THAT(text, Not(HasSubstr("tfjob_runtime_loss{")));

  m.RecordTraining(10, 320, 2.0, 0.5);
  m.RecordTraining(5, 160, 0.5, 0.25);
  m.RecordClosureRetried();
  m.RecordWorkerFailure();
  m.RecordClosure(0.003);
  text = m.Serialize();
  EXPECT_THAT(text, HasSubstr(std::string("tfjob_runtime_steps_total") + kChief + " 15\n"));
  EXPECT_THAT(text, HasSubstr(std::string("tfjob_runtime_examples_total") + kChief + " 480\n"));
  EXPECT_THAT(text, HasSubstr(std::string("tfjob_runtime_examples_per_second") + kChief + " 320\n"));
  EXPECT_THAT(text, HasSubstr(std::string("tfjob_runtime_loss") + kChief + " 0.25\n"));
  EXPECT_THAT(text, HasSubstr(std::string("tfjob_runtime_closures_retried_total") + kChief + " 1\n"));
  EXPECT_THAT(text, HasSubstr(std::string("tfjob_runtime_worker_failures_total") + kChief + " 1\n"));
  // prometheus-cpp writes a bucket's "le" after the series' own labels.
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(tfjob_runtime_closure_latency_seconds_bucket{job_name="mnist",task_index="0",task_type="chief",le="0.004"} 1)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(tfjob_runtime_closure_latency_seconds_bucket{job_name="mnist",task_index="0",task_type="chief",le="0.002"} 0)"));
  EXPECT_THAT(text, HasSubstr("# TYPE tfjob_runtime_closure_latency_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tfjob_runtime_steps_total counter\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tfjob_runtime_loss gauge\n"));
  EXPECT_THAT(text, HasSubstr(std::string("tfjob_runtime_closure_latency_seconds_count") + kChief + " 1\n"));
}

TEST(RuntimeMetrics, CheckpointAgeIsAbsentUntilTheFirstCheckpointThenMeasuredAtScrapeTime) {
  auto now = std::chrono::system_clock::time_point(1000s);
  RuntimeMetrics m({"j", "chief", 0}, [&] { return now; });
  EXPECT_THAT(m.Serialize(), Not(HasSubstr("tfjob_runtime_checkpoint_age_seconds{")));
  m.RecordCheckpoint(120);
  now += 42s;
  std::string text = m.Serialize();
  EXPECT_THAT(text,
              HasSubstr(R"(tfjob_runtime_checkpoint_age_seconds{job_name="j",task_index="0",task_type="chief"} 42)"));
  EXPECT_THAT(text,
              HasSubstr(R"(tfjob_runtime_last_checkpoint_step{job_name="j",task_index="0",task_type="chief"} 120)"));
  EXPECT_THAT(text, HasSubstr(R"(tfjob_runtime_checkpoints_total{job_name="j",task_index="0",task_type="chief"} 1)"));
  m.RecordCheckpoint(240);
  now += 1s;
  EXPECT_THAT(m.Serialize(),
              HasSubstr(R"(tfjob_runtime_checkpoint_age_seconds{job_name="j",task_index="0",task_type="chief"} 1)"));
}

TEST(RuntimeMetrics, PsCountsBytesAndLatencyByMethod) {
  RuntimeMetrics m({"j", "ps", 1});
  std::string text = m.Serialize();
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(tfjob_runtime_ps_received_bytes_total{job_name="j",method="Push",task_index="1",task_type="ps"} 0)"));
  // fit's workers send each push with a pull (Op::kPushPull): at zero too.
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(tfjob_runtime_ps_sent_bytes_total{job_name="j",method="PushPull",task_index="1",task_type="ps"} 0)"));
  // A PS does not train: no chief series.
  EXPECT_THAT(text, Not(HasSubstr("tfjob_runtime_steps_total{")));
  m.RecordPsRpc("Push", 1000, 10, 0.0002);
  m.RecordPsRpc("Push", 500, 10, 0.0002);
  m.RecordPsRpc("Pull", 20, 4000, 0.001);
  text = m.Serialize();
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(tfjob_runtime_ps_received_bytes_total{job_name="j",method="Push",task_index="1",task_type="ps"} 1500)"));
  EXPECT_THAT(
      text,
      HasSubstr(R"(tfjob_runtime_ps_sent_bytes_total{job_name="j",method="Pull",task_index="1",task_type="ps"} 4000)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(tfjob_runtime_ps_rpc_latency_seconds_count{job_name="j",method="Push",task_index="1",task_type="ps"} 2)"));
}

TEST(RuntimeMetrics, EvaluatorExportsOneGaugePerMetricAndTheStep) {
  RuntimeMetrics m({"j", "evaluator", 0});
  m.RecordEvaluation(300, {{"loss", 0.75}, {"accuracy", 0.5}, {"bad", std::nan("")}});
  const std::string text = m.Serialize();
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(tfjob_runtime_evaluation{job_name="j",metric="accuracy",task_index="0",task_type="evaluator"} 0.5)"));
  EXPECT_THAT(
      text,
      HasSubstr(R"(tfjob_runtime_evaluation{job_name="j",metric="loss",task_index="0",task_type="evaluator"} 0.75)"));
  EXPECT_THAT(text, Not(HasSubstr("metric=\"bad\"")));
  EXPECT_THAT(text,
              HasSubstr(R"(tfjob_runtime_evaluated_step{job_name="j",task_index="0",task_type="evaluator"} 300)"));
}

EnvFn Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

TEST(ExporterConfig, FlagWinsOverEnvironmentAndJobNameFallsBackToLocal) {
  auto c = ParseExporterConfig(Env({{"TFJOB_METRICS_PORT", "9100"}, {"TFJOB_JOB_NAME", "mnist"}}), "9200", "worker", 3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->port, 9200);
  EXPECT_EQ(c->identity.job_name, "mnist");
  EXPECT_EQ(c->identity.task_type, "worker");
  EXPECT_EQ(c->identity.task_index, 3);
  c = ParseExporterConfig(Env({{"TFJOB_METRICS_PORT", "9100"}}), std::nullopt, "ps", 0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->port, 9100);
  EXPECT_EQ(c->identity.job_name, "local");
  c = ParseExporterConfig(Env({}), std::nullopt, "ps", 0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->port.has_value());
}

TEST(ExporterConfig, BadPortsAreInvalidArgumentsNamingTheirSource) {
  auto c = ParseExporterConfig(Env({{"TFJOB_METRICS_PORT", "80a"}}), std::nullopt, "ps", 0);
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("TFJOB_METRICS_PORT"));
  c = ParseExporterConfig(Env({}), "70000", "ps", 0);
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("--metrics-port"));
}

TEST(Exporter, ServesMetricsHealthAndReadinessOnAPickedPort) {
  std::ostringstream out;
  auto e = Exporter::Start({0, {"j", "worker", 1}}, out);
  ASSERT_TRUE(e.ok()) << e.status();
  const int port = (*e)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ(out.str(), "metrics: serving on :" + std::to_string(port) + "\n");
  (*e)->metrics()->RecordWorkerClosure(0.01);
  auto r = testing::HttpGet(port, "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(r.body,
              HasSubstr(R"(tfjob_runtime_worker_closures_total{job_name="j",task_index="1",task_type="worker"} 1)"));
  EXPECT_EQ(testing::HttpGet(port, "/healthz").body, "ok\n");
  EXPECT_EQ(testing::HttpGet(port, "/readyz").status, 200);
  EXPECT_EQ(testing::HttpGet(port, "/nope").status, 404);
}

TEST(Exporter, WithoutAPortRecordsButDoesNotServe) {
  std::ostringstream out;
  auto e = Exporter::Start({std::nullopt, {"j", "ps", 0}}, out);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->port(), 0);
  EXPECT_EQ(out.str(), "");
  ASSERT_NE((*e)->metrics(), nullptr);
}

}  // namespace
}  // namespace tfjob::runtime_metrics
