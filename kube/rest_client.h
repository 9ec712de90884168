// The Client over HTTP(S) with cpprestsdk: credentials kept current by
// credentials.h (bearer token, token file, exec plugin, client certificate),
// a custom CA, a client-side rate limit (QPS with burst, as client-go's), and
// a deadline on every call except watches (which end by their own
// timeoutSeconds). A 401 refreshes the credentials (re-reads the token
// file, re-runs the exec plugin) and retries the request once.
// TLS material is checked when the client is created (and when an exec
// plugin hands over a new certificate): a bad CA, certificate or key, or a
// key that does not match its certificate, is an error naming where it came
// from (file or kubeconfig field) and OpenSSL's reason.
// Thread-safety: safe for concurrent use. Failure: Status per client.h.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include "common/mutex.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/credentials.h"

namespace tfjob::kube {

// Time for the rate limiter: Now() and a sleep that lets it pass. Tests
// inject one that records sleeps and advances its own time.
class RateClock {
 public:
  virtual ~RateClock() = default;
  virtual std::chrono::steady_clock::time_point Now() = 0;
  virtual void SleepFor(std::chrono::nanoseconds d) = 0;
};
// The steady clock and std::this_thread::sleep_for.
std::shared_ptr<RateClock> RealRateClock();

struct RestOptions {
  double qps = 50;
  int burst = 100;
  std::chrono::seconds timeout{30};
  std::shared_ptr<RateClock> rate_clock;  // default: RealRateClock()
  Credentials::Options credentials;       // clocks and exec timeout
  // Called once per request sent, with its HTTP method and the response's
  // status code, or "<error>" when none came (client-go's
  // rest_client_requests_total{code,method,host}). May be called from any
  // thread; must not block.
  std::function<void(const std::string& method, const std::string& code)> on_response;
};

// client-go's token bucket (flowcontrol.NewTokenBucketRateLimiter): full at
// start, `burst` tokens at most, refilled at `qps` per second; each request
// takes one, waiting for it when the bucket is empty.
// Thread-safety: Take may be called concurrently.
class TokenBucket {
 public:
  TokenBucket(double qps, int burst, std::shared_ptr<RateClock> clock = nullptr);
  // Blocks until a token is available.
  void Take();

 private:
  Mutex mu_;
  std::shared_ptr<RateClock> clock_;
  const double qps_;
  const double burst_;
  double tokens_ TFJOB_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_ TFJOB_GUARDED_BY(mu_);
};

class RestClient final : public Client {
 public:
  static StatusOr<std::unique_ptr<RestClient>> Create(const ClusterConfig& config, RestOptions options = {});
  ~RestClient() override;

  StatusOr<nlohmann::json> Get(const Resource& r, const std::string& ns, const std::string& name) override;
  StatusOr<nlohmann::json> List(const Resource& r, const std::string& ns, const ListOptions& o) override;
  StatusOr<nlohmann::json> Create(const Resource& r, const std::string& ns, const nlohmann::json& obj) override;
  StatusOr<nlohmann::json> Update(const Resource& r, const std::string& ns, const nlohmann::json& obj) override;
  StatusOr<nlohmann::json> UpdateStatus(const Resource& r, const std::string& ns, const nlohmann::json& obj) override;
  StatusOr<nlohmann::json> MergePatch(const Resource& r, const std::string& ns, const std::string& name,
                                      const nlohmann::json& patch, bool status) override;
  Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                const std::string& propagation = "Background", int64_t grace_period_seconds = -1) override;
  Status Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
               const std::function<bool(const WatchEvent&)>& on_event, const std::atomic<bool>& stop) override;

  // Requests sent so far (for the operator's API metrics).
  int64_t requests() const { return requests_.load(); }
  Credentials& credentials();

 private:
  struct Impl;
  RestClient() = default;
  StatusOr<nlohmann::json> Send(const std::string& method, const std::string& path_and_query,
                                const nlohmann::json* body, const std::string& content_type, const std::string& what);
  Status WatchOnce(const Resource& r, const std::string& ns, const WatchOptions& o,
                   const std::function<bool(const WatchEvent&)>& on_event, const std::atomic<bool>& stop,
                   bool* unauthorized);

  void Observe(const std::string& method, const std::string& code);

  std::unique_ptr<Impl> impl_;
  std::atomic<int64_t> requests_{0};
  std::function<void(const std::string&, const std::string&)> on_response_;
};

std::string UrlEncode(const std::string& s);

}  // namespace tfjob::kube
