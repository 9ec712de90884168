// The asynchronous event writer against the API-server double: events are
// written in the order recorded, Record never waits for the server, a full
// queue drops (and counts) instead of growing, and a refused event is
// dropped with one line on the log.
#include "kube/event_sink.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "kube/rest_client.h"
#include "tests/support/apiserver/apiserver_double.h"

namespace tfjob::kube {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

json Event(int i) {
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"name", "e" + std::to_string(i)}, {"namespace", "default"}}},
          {"involvedObject", {{"kind", "TFJob"}, {"name", "job"}, {"namespace", "default"}}},
          {"reason", "R" + std::to_string(i)},
          {"message", "m"},
          {"type", "Normal"}};
}

class EventSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = *testing::ApiServerDouble::Start({});
    ClusterConfig c;
    c.server = server_->url();
    client_ = *RestClient::Create(c);
  }
  std::unique_ptr<testing::ApiServerDouble> server_;
  std::unique_ptr<RestClient> client_;
};

TEST_F(EventSinkTest, WritesInOrderWithoutMakingTheRecorderWait) {
  // The server holds the first event write for 2 s: a recorder that waited
  // for its writes would find at least one written when Record returns.
  ASSERT_TRUE(
      server_->InjectFault({.method = "POST", .path_regex = ".*/events", .code = 0, .count = 1, .delay = 2s}).ok());
  std::ostringstream log;
  EventSink sink(*client_, &log);
  for (int i = 0; i < 20; ++i) sink.Record("default", Event(i));
  EXPECT_EQ(sink.written(), 0) << "Record waited for the server";
  ASSERT_TRUE(sink.Flush(30s));
  EXPECT_EQ(sink.written(), 20);
  EXPECT_EQ(sink.dropped(), 0);
  // In the order recorded: the server's resource versions follow the writes.
  auto events = server_->List("events", "default").value();
  ASSERT_EQ(events.size(), 20u);
  std::sort(events.begin(), events.end(), [](const json& a, const json& b) {
    return std::stoll(a["metadata"]["resourceVersion"].get<std::string>()) <
           std::stoll(b["metadata"]["resourceVersion"].get<std::string>());
  });
  for (int i = 0; i < 20; ++i) EXPECT_EQ(events[static_cast<size_t>(i)]["reason"], "R" + std::to_string(i));
  EXPECT_TRUE(log.str().empty()) << log.str();
}

TEST_F(EventSinkTest, AFullQueueDropsAndARefusedEventIsSaidOnce) {
  // The server holds the first write for a while: the queue (capacity 3)
  // fills behind it and the rest are dropped, not queued without bound.
  ASSERT_TRUE(
      server_->InjectFault({.method = "POST", .path_regex = ".*/events", .code = 0, .count = 1, .delay = 500ms}).ok());
  std::ostringstream log;
  {
    EventSink sink(*client_, &log, /*capacity=*/3);
    for (int i = 0; i < 10; ++i) sink.Record("default", Event(i));
    ASSERT_TRUE(sink.Flush(30s));
    // At most one in flight and three queued: at least three written, the
    // rest dropped.
    EXPECT_GE(sink.written(), 3);
    EXPECT_EQ(sink.written() + sink.dropped(), 10);
    EXPECT_GT(sink.dropped(), 0);
  }
  // Refused (403, say RBAC without events): dropped, said once.
  ASSERT_TRUE(server_->InjectFault({.method = "POST", .path_regex = ".*/events", .code = 403, .count = -1}).ok());
  EventSink sink(*client_, &log);
  for (int i = 0; i < 5; ++i) sink.Record("default", Event(100 + i));
  ASSERT_TRUE(sink.Flush(30s));
  EXPECT_EQ(sink.dropped(), 5);
  const std::string said = log.str();
  EXPECT_THAT(said, ::testing::HasSubstr("event not recorded"));
  EXPECT_EQ(said.find("event not recorded"), said.rfind("event not recorded")) << said;
}

}  // namespace
}  // namespace tfjob::kube
