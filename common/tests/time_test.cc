#include "common/time.h"

#include <gtest/gtest.h>

namespace tfjob {
namespace {

using namespace std::chrono_literals;

TEST(Rfc3339Test, ParsesTheFormsKubernetesWrites) {
  const SystemTime y2030 = std::chrono::system_clock::from_time_t(1893456000);
  EXPECT_EQ(ParseRfc3339("2030-01-01T00:00:00Z"), y2030);
  EXPECT_EQ(ParseRfc3339("2030-01-01t00:00:00z"), y2030);
  EXPECT_EQ(ParseRfc3339("2030-01-01T02:00:00+02:00"), y2030);
  EXPECT_EQ(ParseRfc3339("2029-12-31T22:30:00-01:30"), y2030);
  EXPECT_EQ(*ParseRfc3339("2030-01-01T00:00:00.5Z") - y2030, 500ms);
  EXPECT_EQ(*ParseRfc3339("2030-01-01T02:00:00.123456+02:00") - y2030, 123456us);
}

TEST(Rfc3339Test, RejectsMalformedTimes) {
  for (const char* bad :
       {"", "yesterday", "2030-01-01", "2030-01-01T00:00:00", "2030-13-01T00:00:00Z", "2030-01-01T24:00:00Z",
        "2030-01-01T00:00:00.Z", "2030-01-01T00:00:00+0200", "2030-01-01T00:00:00Zjunk", "2030-1-01T00:00:00Z",
        "2030-01-01 00:00:00Z", "2030-01-01T00:00:00+02:00junk", "+030-01-01T00:00:00Z"}) {
    EXPECT_FALSE(ParseRfc3339(bad).has_value()) << bad;
  }
}

TEST(Rfc3339Test, FormatsUtcWholeSecondsAndRoundTrips) {
  EXPECT_EQ(FormatRfc3339(std::chrono::system_clock::from_time_t(1893456000) + 700ms), "2030-01-01T00:00:00Z");
  const auto t = ParseRfc3339("2024-05-01T14:00:00.123456+02:00");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(FormatRfc3339(*t), "2024-05-01T12:00:00Z");
  EXPECT_EQ(ParseRfc3339(FormatRfc3339(*t)), std::chrono::time_point_cast<std::chrono::seconds>(*t));
}

TEST(Rfc3339Test, FormatsMicroTimeAsALeaseHoldsIt) {
  const SystemTime y2030 = std::chrono::system_clock::from_time_t(1893456000);
  EXPECT_EQ(FormatRfc3339Micro(y2030 + 123456789ns), "2030-01-01T00:00:00.123456Z");
  EXPECT_EQ(FormatRfc3339Micro(std::chrono::system_clock::from_time_t(0) - 1us), "1969-12-31T23:59:59.999999Z");
  EXPECT_EQ(ParseRfc3339(FormatRfc3339Micro(y2030 + 42us)), y2030 + 42us);
}

}  // namespace
}  // namespace tfjob
