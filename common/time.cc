#include "common/time.h"

#include <cstdint>
#include <cstdio>
#include <ctime>

namespace tfjob {
namespace {

// Reads exactly n digits at s[*pos]; false when any is not a digit.
bool Digits(std::string_view s, size_t* pos, size_t n, int* out) {
  if (*pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    const char c = s[*pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *pos += n;
  *out = v;
  return true;
}

bool Expect(std::string_view s, size_t* pos, char c) {
  if (*pos >= s.size() || s[*pos] != c) return false;
  ++*pos;
  return true;
}

}  // namespace

std::string FormatRfc3339(SystemTime t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string FormatRfc3339Micro(SystemTime t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  // Floor division, so a time before 1970 keeps a non-negative fraction.
  const std::time_t secs = static_cast<std::time_t>(us / 1000000 - (us % 1000000 < 0 ? 1 : 0));
  const long micros = static_cast<long>(((us % 1000000) + 1000000) % 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, micros);
  return buf;
}

std::optional<SystemTime> ParseRfc3339(std::string_view s) {
  size_t p = 0;
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;  // set before use; GCC without -march=native cannot tell
  if (!Digits(s, &p, 4, &y) || !Expect(s, &p, '-') || !Digits(s, &p, 2, &mo) || !Expect(s, &p, '-') ||
      !Digits(s, &p, 2, &d)) {
    return std::nullopt;
  }
  if (p >= s.size() || (s[p] != 'T' && s[p] != 't')) return std::nullopt;
  ++p;
  if (!Digits(s, &p, 2, &h) || !Expect(s, &p, ':') || !Digits(s, &p, 2, &mi) || !Expect(s, &p, ':') ||
      !Digits(s, &p, 2, &sec)) {
    return std::nullopt;
  }
  // 60 is a leap second; timegm carries it into the next minute.
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  SystemTime t = std::chrono::system_clock::from_time_t(timegm(&tm));
  if (p < s.size() && s[p] == '.') {
    ++p;
    const size_t first = p;
    int64_t nanos = 0, scale = 100000000;
    while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
      nanos += (s[p] - '0') * scale;
      scale /= 10;
      ++p;
    }
    if (p == first) return std::nullopt;
    t += std::chrono::duration_cast<SystemTime::duration>(std::chrono::nanoseconds(nanos));
  }
  if (p < s.size() && (s[p] == 'Z' || s[p] == 'z') && p + 1 == s.size()) return t;
  if (p < s.size() && (s[p] == '+' || s[p] == '-')) {
    const char sign = s[p++];
    int oh, om;
    if (!Digits(s, &p, 2, &oh) || !Expect(s, &p, ':') || !Digits(s, &p, 2, &om) || p != s.size() || oh > 23 ||
        om > 59) {
      return std::nullopt;
    }
    const auto offset = std::chrono::hours(oh) + std::chrono::minutes(om);
    return sign == '+' ? t - offset : t + offset;
  }
  return std::nullopt;
}

std::string FormatSeconds(std::chrono::milliseconds ms) {
  std::string s = std::to_string(static_cast<double>(ms.count()) / 1000.0);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace tfjob
