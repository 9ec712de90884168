// The shared HTTP server (cpp-httplib) and the Prometheus exposition
// (prometheus-cpp's TextSerializer): exact routes, 404 elsewhere, port 0,
// a port in use, and the text format's families, labels and histograms.
#include "services/base/http_server.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/base/exposition.h"
#include "services/base/tests/http_get.h"

namespace tfjob::base {
namespace {

using ::testing::HasSubstr;

TEST(HttpServer, ServesItsRoutesOnAPickedPortAnd404Elsewhere) {
  auto s = HttpServer::Start("127.0.0.1:0", {{"/healthz",
                                              [] {
                                                return HttpResponse{200, "ok\n"};
                                              }},
                                             {"/readyz", [] {
                                                return HttpResponse{503, "not yet\n"};
                                              }}});
  ASSERT_TRUE(s.ok()) << s.status();
  const int port = (*s)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ(testing::HttpGet(port, "/healthz").body, "ok\n");
  auto r = testing::HttpGet(port, "/readyz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "not yet\n");
  EXPECT_EQ(testing::HttpGet(port, "/healthz/x").status, 404);
}

TEST(HttpServer, APortInUseIsUnavailableAndABadAddressInvalid) {
  std::map<std::string, HttpHandler> routes{{"/", [] { return HttpResponse{200, "x"}; }}};
  auto a = HttpServer::Start("127.0.0.1:0", routes);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = HttpServer::Start("127.0.0.1:" + std::to_string((*a)->port()), routes);
  EXPECT_EQ(b.status().code(), Code::kUnavailable);
  EXPECT_EQ(HttpServer::Start("127.0.0.1:http", routes).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(HttpServer::Start("127.0.0.1:65536", routes).status().code(), Code::kInvalidArgument);
}

TEST(Exposition, CountersGaugesAndHistogramsInTextFormat) {
  prometheus::Registry reg;
  auto& created = prometheus::BuildCounter()
                      .Name("training_operator_jobs_created_total")
                      .Help("Counts number of jobs created")
                      .Register(reg);
  created.Add({{"job_namespace", "ns"}, {"framework", "tensorflow"}}).Increment();
  created.Add({{"job_namespace", "ns"}, {"framework", "tensorflow"}}).Increment(2);
  created.Add({{"job_namespace", "other"}, {"framework", "tensorflow"}}).Increment();
  auto& depth = prometheus::BuildGauge().Name("workqueue_depth").Help("Items waiting").Register(reg);
  depth.Add({{"name", "tfjob"}}).Set(4);
  depth.Add({{"name", "tfjob"}}).Decrement();
  auto& lat = prometheus::BuildHistogram().Name("reconcile_seconds").Help("Reconcile time").Register(reg);
  auto& h = lat.Add({{"controller", "tfjob"}}, prometheus::Histogram::BucketBoundaries{0.1, 1});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(7);
  const std::string text = Serialize(reg);
  EXPECT_THAT(text, HasSubstr("# HELP training_operator_jobs_created_total Counts number of jobs created\n"
                              "# TYPE training_operator_jobs_created_total counter\n"));
  EXPECT_THAT(text,
              HasSubstr("training_operator_jobs_created_total{framework=\"tensorflow\",job_namespace=\"ns\"} 3\n"));
  EXPECT_THAT(text,
              HasSubstr("training_operator_jobs_created_total{framework=\"tensorflow\",job_namespace=\"other\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE workqueue_depth gauge\nworkqueue_depth{name=\"tfjob\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("reconcile_seconds_bucket{controller=\"tfjob\",le=\"0.1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("reconcile_seconds_bucket{controller=\"tfjob\",le=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("reconcile_seconds_bucket{controller=\"tfjob\",le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("reconcile_seconds_sum{controller=\"tfjob\"} 7.55\n"));
  EXPECT_THAT(text, HasSubstr("reconcile_seconds_count{controller=\"tfjob\"} 3\n"));
  EXPECT_EQ(ExponentialBuckets(0.001, 10, 3), (prometheus::Histogram::BucketBoundaries{0.001, 0.01, 0.1}));
}

TEST(Exposition, MetricsHandlerRunsItsHookThenRenders) {
  prometheus::Registry reg;
  auto& g = prometheus::BuildGauge().Name("age_seconds").Help("computed at scrape time").Register(reg).Add({});
  int scrapes = 0;
  auto handler = MetricsHandler(reg, [&] { g.Set(++scrapes * 10); });
  HttpResponse r = handler();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, kExpositionContentType);
  EXPECT_THAT(r.body, HasSubstr("age_seconds 10\n"));
  EXPECT_THAT(handler().body, HasSubstr("age_seconds 20\n"));
}

}  // namespace
}  // namespace tfjob::base
