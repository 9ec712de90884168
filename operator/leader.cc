#include "operator/leader.h"

#include <ostream>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>

#include "common/time.h"

namespace tfjob::op {
namespace {

class RealClock final : public LeaderClock {
 public:
  std::chrono::system_clock::time_point Wall() override { return std::chrono::system_clock::now(); }
  std::chrono::steady_clock::time_point Now() override { return std::chrono::steady_clock::now(); }
  void SleepFor(std::chrono::nanoseconds d, const std::atomic<bool>& stop) override {
    // In slices, so a stop request is noticed within 50 ms.
    const auto end = std::chrono::steady_clock::now() + d;
    while (!stop) {
      const auto left = end - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds(0)) return;
      std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(50)));
    }
  }
};

int64_t Seconds(std::chrono::milliseconds d) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(d.count()) / 1000.0)));
}

// The parts of a Lease's spec that make up client-go's LeaderElectionRecord.
nlohmann::json Record(const nlohmann::json& spec) {
  nlohmann::json r = nlohmann::json::object();
  if (!spec.is_object()) return r;
  for (const char* k : {"holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions"}) {
    if (spec.contains(k)) r[k] = spec[k];
  }
  return r;
}

int64_t IntOr(const nlohmann::json& j, const char* key, int64_t fallback) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) return fallback;
  return j[key].get<int64_t>();
}

std::string StrOr(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

}  // namespace

std::shared_ptr<LeaderClock> RealLeaderClock() { return std::make_shared<RealClock>(); }

Status ValidateLeaderOptions(const LeaderOptions& o) {
  if (o.identity.empty()) return InvalidArgument("leader election: identity is empty");
  if (o.retry_period.count() <= 0) return InvalidArgument("leader election: retry period must be positive");
  if (o.lease_duration <= o.renew_deadline) {
    return InvalidArgument("leader election: lease duration (" + std::to_string(o.lease_duration.count()) +
                           " ms) must be greater than the renew deadline (" + std::to_string(o.renew_deadline.count()) +
                           " ms)");
  }
  // client-go's JitterFactor: a renewal must fit more than one retry.
  if (static_cast<double>(o.renew_deadline.count()) <= 1.2 * static_cast<double>(o.retry_period.count())) {
    return InvalidArgument("leader election: renew deadline (" + std::to_string(o.renew_deadline.count()) +
                           " ms) must be greater than 1.2 x the retry period (" +
                           std::to_string(o.retry_period.count()) + " ms)");
  }
  return Status::Ok();
}

namespace {
LeaderOptions WithDefaults(LeaderOptions o) {
  if (!o.clock) o.clock = RealLeaderClock();
  if (!o.uniform) {
    // Called only from the thread that runs Acquire.
    auto gen = std::make_shared<std::mt19937_64>(std::random_device{}());
    o.uniform = [gen] { return std::uniform_real_distribution<double>(0.0, 1.0)(*gen); };
  }
  return o;
}
}  // namespace

LeaderElector::LeaderElector(kube::Client& client, LeaderOptions options)
    : client_(client), options_(WithDefaults(std::move(options))) {}

void LeaderElector::SetLeader(bool leader) {
  if (leader_.exchange(leader) == leader) return;
  const auto& cb = leader ? options_.on_started_leading : options_.on_stopped_leading;
  if (cb) cb();
}

Status LeaderElector::TryAcquireOrRenew() {
  LeaderClock& clock = *options_.clock;
  const std::string stamp = FormatRfc3339Micro(clock.Wall());
  auto lease = client_.Get(kube::kLeases, options_.ns, options_.name);
  if (lease.status().code() == Code::kNotFound) {
    nlohmann::json spec{{"holderIdentity", options_.identity},
                        {"leaseDurationSeconds", Seconds(options_.lease_duration)},
                        {"acquireTime", stamp},
                        {"renewTime", stamp},
                        {"leaseTransitions", 0}};
    nlohmann::json obj{{"apiVersion", "coordination.k8s.io/v1"},
                       {"kind", "Lease"},
                       {"metadata", {{"name", options_.name}, {"namespace", options_.ns}}},
                       {"spec", spec}};
    RETURN_IF_ERROR(client_.Create(kube::kLeases, options_.ns, obj).status());
    observed_ = Record(spec);
    observed_at_ = clock.Now();
    return Status::Ok();
  }
  if (!lease.ok()) return lease.status();
  if (!lease->is_object()) return Internal("lease " + options_.ns + "/" + options_.name + " is not an object");
  nlohmann::json& spec = (*lease)["spec"];
  if (!spec.is_object()) spec = nlohmann::json::object();
  // The record changed since we last looked: restart our view of its lease
  // from now, by our clock.
  const nlohmann::json record = Record(spec);
  if (record != observed_) {
    observed_ = record;
    observed_at_ = clock.Now();
  }
  const std::string holder = StrOr(observed_, "holderIdentity");
  const bool we_hold = holder == options_.identity;
  const auto lease_for = std::chrono::seconds(IntOr(observed_, "leaseDurationSeconds", 0));
  const bool valid = observed_at_ + lease_for > clock.Now();
  if (!holder.empty() && !we_hold && valid) return FailedPrecondition("lease held by " + holder);

  // Renewing keeps acquireTime and the transition count; taking over
  // counts a transition.
  if (!we_hold) {
    spec["acquireTime"] = stamp;
    spec["leaseTransitions"] = IntOr(spec, "leaseTransitions", 0) + 1;
  }
  spec["holderIdentity"] = options_.identity;
  spec["leaseDurationSeconds"] = Seconds(options_.lease_duration);
  spec["renewTime"] = stamp;
  // The resourceVersion in the object makes a racing candidate's write fail with 409.
  RETURN_IF_ERROR(client_.Update(kube::kLeases, options_.ns, *lease).status());
  observed_ = Record(spec);
  observed_at_ = clock.Now();
  return Status::Ok();
}

bool LeaderElector::Acquire(const std::atomic<bool>& stop) {
  std::string last_holder;
  while (!stop) {
    const Status s = TryAcquireOrRenew();
    if (s.ok()) {
      SetLeader(true);
      return true;
    }
    if (options_.log) {
      const std::string where = options_.ns + "/" + options_.name;
      if (s.code() != Code::kFailedPrecondition) {
        *options_.log << "tfjob-operator: leader election: cannot acquire Lease " << where << ": " << s.message()
                      << std::endl;
      } else if (s.message() != last_holder) {
        last_holder = s.message();
        *options_.log << "tfjob-operator: leader election: Lease " << where << " " << s.message() << "; waiting"
                      << std::endl;
      }
    }
    const double factor = 1.0 + std::max(0.0, options_.jitter_factor) * options_.uniform();
    options_.clock->SleepFor(std::chrono::duration_cast<std::chrono::nanoseconds>(options_.retry_period * factor),
                             stop);
  }
  return false;
}

bool LeaderElector::Hold(const std::atomic<bool>& stop) {
  LeaderClock& clock = *options_.clock;
  while (!stop) {
    clock.SleepFor(options_.retry_period, stop);
    if (stop) break;
    // client-go's renew: retry until one renewal succeeds or the deadline
    // passes. A success that comes back after the deadline is not trusted:
    // by then a candidate may be close to taking over.
    const auto deadline = clock.Now() + options_.renew_deadline;
    for (;;) {
      const bool renewed = TryAcquireOrRenew().ok();
      if (renewed && clock.Now() < deadline) break;
      if (clock.Now() >= deadline) {
        SetLeader(false);
        return false;
      }
      clock.SleepFor(options_.retry_period, stop);
      if (stop) return true;
    }
  }
  return true;
}

void LeaderElector::Release() {
  if (!leader_.load()) return;
  auto lease = client_.Get(kube::kLeases, options_.ns, options_.name);
  if (lease.ok() && lease->is_object() && StrOr((*lease)["spec"], "holderIdentity") == options_.identity) {
    // client-go's release: no holder, a one-second lease, the transitions kept.
    const std::string stamp = FormatRfc3339Micro(options_.clock->Wall());
    nlohmann::json& spec = (*lease)["spec"];
    spec["holderIdentity"] = "";
    spec["leaseDurationSeconds"] = 1;
    spec["acquireTime"] = stamp;
    spec["renewTime"] = stamp;
    (void)client_.Update(kube::kLeases, options_.ns, *lease);
  }
  SetLeader(false);
}

}  // namespace tfjob::op
