#pragma once
// RFC 3339 times as Kubernetes writes them (metav1.Time, ExecCredential
// expirationTimestamp). GCC 12's <chrono> has no std::chrono::parse and no
// Debian library reads this format without bringing its own time types, so
// this is hand-written (see the README). Pure functions, thread-safe.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace tfjob {

using SystemTime = std::chrono::system_clock::time_point;

// "2024-05-01T12:00:00Z": UTC, whole seconds (fractions are truncated), the
// form the API server writes for metav1.Time.
std::string FormatRfc3339(SystemTime t);

// metav1.MicroTime: "2024-05-01T12:00:00.000123Z", UTC, microseconds (a Lease's
// acquireTime and renewTime).
std::string FormatRfc3339Micro(SystemTime t);

// Accepts "YYYY-MM-DDTHH:MM:SS", optional fraction ".d+" (kept to the
// nanosecond the clock holds), then "Z"/"z" or "+HH:MM"/"-HH:MM". Anything
// else, including out-of-range fields, is nullopt.
std::optional<SystemTime> ParseRfc3339(std::string_view s);

// A duration for messages, in seconds without trailing zeros: 2500 ms is
// "2.5", 3000 ms "3".
std::string FormatSeconds(std::chrono::milliseconds ms);

}  // namespace tfjob
