// The controller's "act": carrying out a plan's actions through the client
// (slow-start batches of creates, deletes that find the object gone
// counting as done, orphans adopted), the job's task-auth Secret, and the
// events of failures, in Kubeflow's words.
#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/pki.h"
#include "common/token.h"
#include "operator/api/codec.h"
#include "operator/api/names.h"
#include "operator/controller/builders.h"
#include "operator/controller/controller.h"
#include "operator/controller/slow_start.h"

namespace tfjob::op::controller {
namespace {

// The API server's own words in an error from the client ("create pods
// ns/x: HTTP 403 Forbidden: <message>"): what Kubeflow's events quote.
std::string ApiMessage(const Status& s) {
  const std::string& m = s.message();
  const size_t http = m.find(": HTTP ");
  if (http == std::string::npos) return m;
  const size_t colon = m.find(": ", http + 7);
  return colon == std::string::npos ? m : m.substr(colon + 2);
}

// Whether a Secret read back holds `key`: the API server keeps it in
// `data` (stringData is write-only); the test double keeps what was written.
bool SecretHas(const nlohmann::json& secret, std::string_view key) {
  for (const char* field : {"data", "stringData"}) {
    const auto f = secret.find(field);
    if (f == secret.end() || !f->is_object()) continue;
    const auto v = f->find(std::string(key));
    if (v != f->end() && v->is_string() && !v->get<std::string>().empty()) return true;
  }
  return false;
}

}  // namespace

void SlowStartBatch(size_t n, const std::function<bool(size_t)>& work) {
  size_t next = 0;
  Mutex mu;
  std::exception_ptr thrown;
  auto run = [&](size_t i) {
    try {
      return work(i);
    } catch (...) {
      MutexLock g(mu);
      if (!thrown) thrown = std::current_exception();
      return false;
    }
  };
  for (size_t batch = 1; next < n; batch = std::min(batch * 2, kMaxBatch)) {
    const size_t end = std::min(n, next + batch);
    std::atomic<bool> all_ok{true};
    std::vector<std::thread> threads;
    for (size_t i = next + 1; i < end; ++i) {
      threads.emplace_back([&, i] {
        if (!run(i)) all_ok = false;
      });
    }
    if (!run(next)) all_ok = false;
    for (auto& t : threads) t.join();
    if (thrown) std::rethrow_exception(thrown);
    next = end;
    if (!all_ok) return;
  }
}

void Controller::Execute(const api::TFJob& job, const Plan& plan, Status& first_error) {
  const std::string& ns = job.metadata.namespace_;
  auto note = [&](Status s) {
    if (!s.ok() && first_error.ok()) first_error = s;
  };
  // The job's own records first (restart counts, succeeded indices): a
  // restart is never carried out uncounted.
  for (const Action& a : plan.actions) {
    if (a.kind != Action::Kind::kPatchJob) continue;
    auto r = client_.MergePatch(kube::kTFJobs, ns, a.name, a.object, false);
    if (!r.ok()) {
      note(r.status().WithContext("recording restart counts or succeeded replicas on the TFJob"));
      return;  // the requeue plans again, from the same world
    }
  }
  bool secret_failed = false;  // the planner puts the Secret before the pods
  std::vector<const Action*> creates;
  for (const Action& a : plan.actions) {
    if (a.kind == Action::Kind::kPatchJob) continue;
    if (a.kind == Action::Kind::kCreatePod || a.kind == Action::Kind::kCreateService) {
      // After every other action (the Secret, the PodGroup they need):
      // below, in slow-start batches.
      creates.push_back(&a);
      continue;
    }
    Status s = ExecuteAction(job, a);
    if (!s.ok()) {
      note(s);
      if (a.kind == Action::Kind::kCreateSecret) secret_failed = true;
    }
  }
  if (secret_failed) {
    // A pod whose Secret is missing or lacks a key it mounts would sit in
    // ContainerCreating; the requeue (the error noted above) brings the
    // Secret and then the pods.
    creates.erase(std::remove_if(creates.begin(), creates.end(),
                                 [](const Action* a) { return a->kind == Action::Kind::kCreatePod; }),
                  creates.end());
  }
  CreateInBatches(job, creates, first_error);
}

Status Controller::ExecuteAction(const api::TFJob& job, const Action& a) {
  const std::string& ns = job.metadata.namespace_;
  auto event = [&](const char* type, const char* reason, const std::string& message) {
    RecordEvent(job, Event{type, reason, message});
  };
  switch (a.kind) {
    case Action::Kind::kPatchJob:
    case Action::Kind::kCreatePod:
    case Action::Kind::kCreateService: return Status::Ok();  // Execute's own: before and after these
    case Action::Kind::kDeletePod:
    case Action::Kind::kForceDeletePod:
    case Action::Kind::kDeleteService: {
      const bool pod = a.kind != Action::Kind::kDeleteService;
      Status s = client_.Delete(pod ? kube::kPods : kube::kServices, ns, a.name, "Background",
                                a.kind == Action::Kind::kForceDeletePod ? 0 : -1);
      if (s.ok()) {
        event("Normal", pod ? "SuccessfulDeletePod" : "SuccessfulDeleteService",
              std::string(pod ? "Deleted pod: " : "Deleted service: ") + a.name);
      } else if (s.code() != Code::kNotFound) {
        event("Warning", pod ? "FailedDeletePod" : "FailedDeleteService", "Error deleting: " + ApiMessage(s));
        return s;
      }
      return Status::Ok();
    }
    case Action::Kind::kAdoptPod:
    case Action::Kind::kAdoptService: {
      auto r = client_.MergePatch(a.kind == Action::Kind::kAdoptPod ? kube::kPods : kube::kServices, ns, a.name,
                                  a.object, false);
      // Gone (or replaced: the uid precondition) is fine: nothing to adopt.
      if (!r.ok() && r.status().code() != Code::kNotFound && r.status().code() != Code::kInvalidArgument &&
          r.status().code() != Code::kAborted) {
        return r.status();
      }
      return Status::Ok();
    }
    case Action::Kind::kDeleteJob: {
      Status s = client_.Delete(kube::kTFJobs, ns, a.name);
      if (s.ok()) {
        event("Normal", "SuccessfulDeleteJob", "Deleted job: " + a.name);
      } else if (s.code() != Code::kNotFound) {
        event("Warning", "FailedDeleteJob", "Error deleting: " + ApiMessage(s));
        return s;
      }
      return Status::Ok();
    }
    case Action::Kind::kCreateSecret: return EnsureSecret(job, a);
    case Action::Kind::kCreateNetworkPolicy: {
      auto r = client_.Create(kube::kNetworkPolicies, ns, a.object);
      if (!r.ok() && r.status().code() != Code::kAlreadyExists) return r.status();
      return Status::Ok();
    }
    case Action::Kind::kCreatePodGroup: {
      auto r = client_.Create(pod_group_resource_, ns, a.object);
      if (!r.ok() && r.status().code() != Code::kAlreadyExists) return r.status();
      return Status::Ok();
    }
    case Action::Kind::kUpdatePodGroup:
      // A 409 (the scheduler wrote in between) requeues; the next plan
      // starts from the newer object.
      return client_.Update(pod_group_resource_, ns, a.object).status();
    case Action::Kind::kCreateWorkload: return CreateWorkload(job, a);
    case Action::Kind::kDeleteWorkload: {
      Status s = client_.Delete(kWorkloads, ns, a.name);
      if (!s.ok() && s.code() != Code::kNotFound) return s.WithContext("deleting Workload " + ns + "/" + a.name);
      event("Normal", "DeletedWorkload", "Deleted not matching Workload: " + ns + "/" + a.name);
      return Status::Ok();
    }
    case Action::Kind::kPatchWorkloadStatus: {
      // Gone is fine (its job goes with it); a 409 (Kueue wrote in between) requeues.
      auto r = client_.MergePatch(kWorkloads, ns, a.name, a.object, true);
      if (!r.ok() && r.status().code() != Code::kNotFound) {
        return r.status().WithContext("writing the status of Workload " + ns + "/" + a.name);
      }
      return Status::Ok();
    }
    case Action::Kind::kPatchJobSpec: {
      auto r = client_.MergePatch(kube::kTFJobs, ns, a.name, a.object, false);
      if (!r.ok() && r.status().code() != Code::kNotFound) return r.status().WithContext("suspending or resuming");
      return Status::Ok();
    }
    case Action::Kind::kDeletePodGroup: {
      event("Normal", "JobTerminated", "Job has been terminated. Deleting PodGroup");
      Status s = client_.Delete(pod_group_resource_, ns, a.name);
      if (s.ok() || s.code() == Code::kNotFound) {
        event("Normal", "SuccessfulDeletePodGroup", "Deleted PodGroup: " + a.name);
        return Status::Ok();
      }
      event("Warning", "FailedDeletePodGroup", "Error deleting: " + ApiMessage(s));
      return s;
    }
  }
  return Status::Ok();
}

Status Controller::CreateOne(const api::TFJob& job, const Action& a) {
  const bool pod = a.kind == Action::Kind::kCreatePod;
  const kube::Resource& r = pod ? kube::kPods : kube::kServices;
  auto created = client_.Create(r, job.metadata.namespace_, a.object);
  if (created.ok()) {
    RecordEvent(job, Event{"Normal", pod ? "SuccessfulCreatePod" : "SuccessfulCreateService",
                           std::string(pod ? "Created pod: " : "Created service: ") + a.name});
    return Status::Ok();
  }
  Status s = created.status();
  if (s.code() == Code::kAlreadyExists) {
    // Ours already (a stale cache) is success; an orphan is adopted (the
    // next pass sees it owned); another owner's is an error the user must
    // see: the index cannot be filled.
    s = ClaimExisting(job, r, a.name);
    if (s.ok()) return s;
  }
  RecordEvent(job,
              Event{"Warning", pod ? "FailedCreatePod" : "FailedCreateService", "Error creating: " + ApiMessage(s)});
  return s;
}

void Controller::CreateInBatches(const api::TFJob& job, const std::vector<const Action*>& creates,
                                 Status& first_error) {
  Mutex note_mu;
  auto create = [&](const Action& a) {
    Status s = CreateOne(job, a);
    if (s.ok()) return true;
    MutexLock g(note_mu);
    if (first_error.ok()) first_error = s;
    return false;
  };
  // Services and pods as two independent sequences, side by side: a pod
  // the quota refuses does not hold back the services, nor the reverse.
  std::vector<const Action*> services, pods;
  for (const Action* a : creates) (a->kind == Action::Kind::kCreatePod ? pods : services).push_back(a);
  std::thread service_thread;
  std::exception_ptr service_thrown;
  if (!services.empty()) {
    service_thread = std::thread([&] {
      try {
        SlowStartBatch(services.size(), [&](size_t i) { return create(*services[i]); });
      } catch (...) {
        service_thrown = std::current_exception();
      }
    });
  }
  std::exception_ptr pod_thrown;
  try {
    SlowStartBatch(pods.size(), [&](size_t i) { return create(*pods[i]); });
  } catch (...) {
    pod_thrown = std::current_exception();
  }
  if (service_thread.joinable()) service_thread.join();
  if (pod_thrown) std::rethrow_exception(pod_thrown);
  if (service_thrown) std::rethrow_exception(service_thrown);
}

Status Controller::ClaimExisting(const api::TFJob& job, const kube::Resource& r, const std::string& name) {
  const std::string& ns = job.metadata.namespace_;
  auto existing = client_.Get(r, ns, name);
  if (existing.status().code() == Code::kNotFound)
    return Unavailable(r.plural + " " + ns + "/" + name + " was just deleted");
  // Without the right to look (an older RBAC), assume our own stale cache,
  // as before: the next pass sees the object.
  if (existing.status().code() == Code::kPermissionDenied) return Status::Ok();
  if (!existing.ok()) return existing.status();
  const PodView v = ViewPod(*existing);  // the metadata it reads is a service's too
  if (v.controller_uid == job.metadata.uid) return Status::Ok();
  const bool ours_by_labels = v.labels.count(std::string(api::kJobNameLabel)) &&
                              v.labels.at(std::string(api::kJobNameLabel)) == job.metadata.name;
  if (v.controller_uid.empty() && ours_by_labels && !v.deleting) {
    const nlohmann::json patch{
        {"metadata", {{"uid", v.uid}, {"ownerReferences", nlohmann::json::array({internal::OwnerRef(job)})}}}};
    return client_.MergePatch(r, ns, name, patch, false).status();
  }
  // Kubeflow's message for this create: the API server's "already exists".
  return AlreadyExists(r.plural + " \"" + name + "\" already exists" +
                       (v.controller_uid.empty() ? "" : " (controlled by another owner)"));
}

Status Controller::CreateWorkload(const api::TFJob& job, const Action& create) {
  const std::string& ns = job.metadata.namespace_;
  nlohmann::json workload = create.object;
  // ExtractPriority's lookup (pkg/util/priority, GetPriorityFromPriorityClass):
  // the class's value; a class that does not exist is the user's to fix,
  // said as an event, and retried with backoff.
  const auto& spec = workload["spec"];
  if (spec.contains("priorityClassName") && spec["priorityClassName"].is_string()) {
    const std::string name = spec["priorityClassName"].get<std::string>();
    auto pc = client_.Get(kPriorityClasses, "", name);
    if (!pc.ok()) {
      RecordEvent(job, Event{"Warning", "ErrWorkloadCompose",
                             "PriorityClass " + name + " of the Workload: " + ApiMessage(pc.status())});
      return pc.status().WithContext("PriorityClass " + name + " for Workload " + ns + "/" + create.name);
    }
    const auto value = pc->find("value");
    workload["spec"]["priority"] = value != pc->end() && value->is_number_integer() ? value->get<int64_t>() : 0;
  }
  auto r = client_.Create(kWorkloads, ns, workload);
  if (r.ok()) {
    RecordEvent(job, Event{"Normal", "CreatedWorkload", "Created Workload: " + ns + "/" + create.name});
    return Status::Ok();
  }
  // There already (a stale cache, or the one being deleted for a change of
  // pod sets): the next pass sees it, or its DELETED event brings the job back.
  if (r.status().code() == Code::kAlreadyExists) return Status::Ok();
  return r.status().WithContext("creating Workload " + ns + "/" + create.name);
}

Status Controller::EnsureSecret(const api::TFJob& job, const Action& create) {
  const std::string& ns = job.metadata.namespace_;
  const bool tls = options_.planner.task_tls;
  // The token and the PKI are made here, once: a Secret that exists keeps
  // them, so running pods and new ones agree. The CA's key never leaves
  // NewJobPki; the Secret holds only what the tasks present and check.
  nlohmann::json secret = create.object;
  secret["stringData"] = {{std::string(api::kAuthSecretKey), NewToken()}};
  if (tls) {
    auto made = pki::NewJobPki(job.metadata.name);
    if (!made.ok()) return made.status().WithContext("TLS material for Secret " + ns + "/" + create.name);
    secret["stringData"][pki::kCaFile] = made->ca_pem;
    secret["stringData"][pki::kCertFile] = made->cert_pem;
    secret["stringData"][pki::kKeyFile] = made->key_pem;
  }
  auto r = client_.Create(kube::kSecrets, ns, secret);
  if (r.ok()) return Status::Ok();
  if (r.status().code() != Code::kAlreadyExists) return r.status();
  if (!tls) return Status::Ok();
  // A Secret made before --task-tls was turned on (or edited since) would
  // leave the pods' volume waiting forever for keys it lacks: add them,
  // keeping the token. The three TLS keys only make sense together, so a
  // partial set is replaced whole. The update carries the resourceVersion
  // read here: a concurrent writer makes it a 409, and the requeue reads
  // again.
  auto existing = client_.Get(kube::kSecrets, ns, create.name);
  if (!existing.ok()) return existing.status().WithContext("Secret " + ns + "/" + create.name);
  const bool has_tls =
      SecretHas(*existing, pki::kCaFile) && SecretHas(*existing, pki::kCertFile) && SecretHas(*existing, pki::kKeyFile);
  const bool has_token = SecretHas(*existing, api::kAuthSecretKey);
  if (has_tls && has_token) return Status::Ok();
  nlohmann::json updated = *existing;
  nlohmann::json& add = updated["stringData"];
  if (!add.is_object()) add = nlohmann::json::object();
  const std::string token_key(api::kAuthSecretKey);
  if (!has_token) add[token_key] = secret["stringData"][token_key];
  if (!has_tls) {
    for (const char* key : {pki::kCaFile, pki::kCertFile, pki::kKeyFile}) add[key] = secret["stringData"][key];
  }
  auto u = client_.Update(kube::kSecrets, ns, updated);
  return u.ok() ? Status::Ok() : u.status().WithContext("adding TLS keys to Secret " + ns + "/" + create.name);
}

}  // namespace tfjob::op::controller
