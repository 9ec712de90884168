// Errors as values, with gRPC's status codes so they cross RPC boundaries
// unchanged. Nothing in this project throws across a module boundary: a
// function that can fail returns Status or StatusOr<T>.
//
// Thread-safety: Status and StatusOr are plain values; const access from many
// threads is safe, mutation needs external synchronisation.
#pragma once

#include <cassert>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tfjob {

// Numeric values match grpc::StatusCode, so conversion is a cast.
enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {
    if (code_ == Code::kOk) message_.clear();
  }

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

  // Prepends context ("reading x.gz: ") to the message, keeping the code.
  Status WithContext(std::string_view context) const;

  bool operator==(const Status& o) const { return code_ == o.code_ && message_ == o.message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& s);

// `value` as an error message may echo it: whole when it is at most `max`
// bytes, else its first `max` bytes (never half a UTF-8 character) and
// "... (N bytes)", so one bad input never makes a 100 KB "one-line" error.
std::string Elide(std::string_view value, size_t max = 200);

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {Code::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status DataLoss(std::string m) { return {Code::kDataLoss, std::move(m)}; }
inline Status Cancelled(std::string m) { return {Code::kCancelled, std::move(m)}; }
inline Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }

// Either a value or a non-OK Status. Accessing value() of an error is a
// programmer error (asserted), never an I/O outcome.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& v) : v_(v) {}          // NOLINT: implicit by design
  StatusOr(T&& v) : v_(std::move(v)) {}    // NOLINT
  StatusOr(Status s) : v_(std::move(s)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "StatusOr built from OK status");
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInternal, "StatusOr built from OK status");
  }
  template <typename U>
  requires(std::is_convertible_v<U&&, T> && !std::is_same_v<std::decay_t<U>, Status> &&
           !std::is_same_v<std::decay_t<U>, T> && !std::is_same_v<std::decay_t<U>, StatusOr<T>>) StatusOr(U&& u)
      : v_(T(std::forward<U>(u))) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  T& value() & {
    assert(ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(v_));
  }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace tfjob

#define TFJOB_CONCAT_INNER(a, b) a##b
#define TFJOB_CONCAT(a, b) TFJOB_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)     \
  do {                            \
    ::tfjob::Status _st = (expr); \
    if (!_st.ok()) return _st;    \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(TFJOB_CONCAT(_statusor_, __LINE__), lhs, expr)
