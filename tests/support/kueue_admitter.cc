#include "tests/support/kueue_admitter.h"

#include <set>
#include <utility>

namespace tfjob::testing {
namespace {

// Every item of a list, page after page.
StatusOr<std::vector<nlohmann::json>> ListAll(kube::Client& client, const kube::Resource& r, const std::string& ns) {
  std::vector<nlohmann::json> out;
  kube::ListOptions o;
  o.limit = 500;
  for (;;) {
    ASSIGN_OR_RETURN(nlohmann::json page, client.List(r, ns, o));
    if (page.contains("items") && page["items"].is_array()) {
      for (auto& item : page["items"]) out.push_back(std::move(item));
    }
    const auto meta = page.find("metadata");
    const bool more =
        meta != page.end() && meta->is_object() && meta->contains("continue") && (*meta)["continue"].is_string();
    o.continue_token = more ? (*meta)["continue"].get<std::string>() : "";
    if (o.continue_token.empty()) return out;
  }
}

}  // namespace

TestKueue::TestKueue(kube::Client& client, Options options) : client_(client), options_(std::move(options)) {}

TestKueue::~TestKueue() { Stop(); }

void TestKueue::Start() {
  MutexLock l(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void TestKueue::Stop() {
  {
    MutexLock l(mu_);
    stopping_ = true;
    wake_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

void TestKueue::Loop() {
  for (;;) {
    auto writes = RunOnce();
    if (!writes.ok()) Log("pass failed: " + writes.status().ToString());
    MutexLock l(mu_);
    wake_.WaitFor(l, options_.interval, [&]() TFJOB_REQUIRES(mu_) { return stopping_; });
    if (stopping_) return;
  }
}

StatusOr<kueue::Observed> TestKueue::Observe() {
  kueue::Observed o;
  ASSIGN_OR_RETURN(o.flavors, ListAll(client_, kKueueResourceFlavors, ""));
  ASSIGN_OR_RETURN(o.cluster_queues, ListAll(client_, kKueueClusterQueues, ""));
  ASSIGN_OR_RETURN(o.local_queues, ListAll(client_, kKueueLocalQueues, options_.ns));
  ASSIGN_OR_RETURN(o.workloads, ListAll(client_, kKueueWorkloads, options_.ns));
  return o;
}

StatusOr<int> TestKueue::RunOnce() {
  MutexLock pass(pass_mu_);
  ++passes_;
  ASSIGN_OR_RETURN(kueue::Observed observed, Observe());
  const kueue::Plan plan = kueue::PlanPass(observed, std::chrono::system_clock::now());
  // A bad object is reported once, not on every pass it stays bad.
  std::set<std::string> skipped(plan.skipped.begin(), plan.skipped.end());
  for (const auto& line : skipped) {
    if (!reported_.count(line)) Log("skipped " + line);
  }
  reported_ = std::move(skipped);
  int written = 0;
  for (const auto& w : plan.writes) {
    const std::string ns = w.workload.value(nlohmann::json::json_pointer("/metadata/namespace"), "");
    auto r = client_.UpdateStatus(kKueueWorkloads, ns, w.workload);
    if (!r.ok()) {
      // A conflict means someone wrote meanwhile: the next pass reads again.
      Log("write of " + w.what + ": " + r.status().ToString());
      continue;
    }
    ++written;
    Log(w.what);
  }
  return written;
}

Status TestKueue::Evict(const std::string& ns, const std::string& name, const std::string& reason) {
  MutexLock pass(pass_mu_);
  Status last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    ASSIGN_OR_RETURN(nlohmann::json wl, client_.Get(kKueueWorkloads, ns, name));
    ASSIGN_OR_RETURN(nlohmann::json evicted, kueue::EvictedWorkload(wl, reason, std::chrono::system_clock::now()));
    if (evicted == wl) return Status::Ok();
    auto r = client_.UpdateStatus(kKueueWorkloads, ns, evicted);
    if (r.ok()) {
      Log(ns + "/" + name + " evicted: " + reason);
      return Status::Ok();
    }
    last = r.status();
    if (last.code() != Code::kAborted) break;  // only a conflict is worth reading again
  }
  return last.WithContext("evicting workload " + ns + "/" + name);
}

void TestKueue::Log(const std::string& line) {
  if (options_.log) *options_.log << "test-kueue: " << line << std::endl;
}

}  // namespace tfjob::testing
