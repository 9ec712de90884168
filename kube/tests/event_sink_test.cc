// The asynchronous event writer against the real API server (envtest), slow
// and refused writes from the FaultProxy in front of it: events are
// written in the order recorded, Record never waits for the server, a full
// queue drops (and counts) instead of growing, and a refused event is
// dropped with one line on the log.
#include "kube/event_sink.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "kube/rest_client.h"
#include "kube/tests/real_server.h"

namespace tfjob::kube {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

json Event(const std::string& ns, int i) {
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"name", "e" + std::to_string(i)}, {"namespace", ns}}},
          {"involvedObject", {{"kind", "TFJob"}, {"name", "job"}, {"namespace", ns}}},
          {"reason", "R" + std::to_string(i)},
          {"message", "m"},
          {"type", "Normal"}};
}

class EventSinkTest : public RealServerTest {};

TEST_F(EventSinkTest, WritesInOrderWithoutMakingTheRecorderWait) {
  // The server holds the first event write for 2 s: a recorder that waited
  // for its writes would find at least one written when Record returns.
  ASSERT_TRUE(
      proxy_->InjectFault({.method = "POST", .path_regex = ".*/events", .code = 0, .count = 1, .delay = 2s}).ok());
  std::ostringstream log;
  EventSink sink(*client_, &log);
  for (int i = 0; i < 20; ++i) sink.Record(ns_, Event(ns_, i));
  EXPECT_EQ(sink.written(), 0) << "Record waited for the server";
  ASSERT_TRUE(sink.Flush(30s));
  EXPECT_EQ(sink.written(), 20);
  EXPECT_EQ(sink.dropped(), 0);
  // In the order recorded: the server's resource versions follow the writes.
  auto listed = admin_->List(kEvents, ns_, {});
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  std::vector<json> events((*listed)["items"].begin(), (*listed)["items"].end());
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
      proxy_->InjectFault({.method = "POST", .path_regex = ".*/events", .code = 0, .count = 1, .delay = 500ms}).ok());
  std::ostringstream log;
  {
    EventSink sink(*client_, &log, /*capacity=*/3);
    for (int i = 0; i < 10; ++i) sink.Record(ns_, Event(ns_, i));
    ASSERT_TRUE(sink.Flush(30s));
    // At most one in flight and three queued: at least three written, the
    // rest dropped.
    EXPECT_GE(sink.written(), 3);
    EXPECT_EQ(sink.written() + sink.dropped(), 10);
    EXPECT_GT(sink.dropped(), 0);
  }
  // Refused (403, say RBAC without events): dropped, said once.
  ASSERT_TRUE(proxy_->InjectFault({.method = "POST", .path_regex = ".*/events", .code = 403, .count = -1}).ok());
  EventSink sink(*client_, &log);
  for (int i = 0; i < 5; ++i) sink.Record(ns_, Event(ns_, 100 + i));
  ASSERT_TRUE(sink.Flush(30s));
  EXPECT_EQ(sink.dropped(), 5);
  const std::string said = log.str();
  EXPECT_THAT(said, ::testing::HasSubstr("event not recorded"));
  EXPECT_EQ(said.find("event not recorded"), said.rfind("event not recorded")) << said;
}

}  // namespace
}  // namespace tfjob::kube
