#include "contract/tf_config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <iterator>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/json_reader.h"

namespace tfjob::contract {
namespace {

using nlohmann::json;

// JSON quoting keeps user text on one line in error messages and gives the
// serialiser correct escaping. The replace handler means invalid UTF-8 in a
// programmatically built config cannot make dump() throw.
std::string QuoteWhole(std::string_view s) {
  return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

// For error messages: long values cut (a 100 KB address is not echoed whole).
std::string Quote(std::string_view s) { return QuoteWhole(Elide(s)); }

Status TfConfigError(const std::string& message) { return InvalidArgument("TF_CONFIG: " + message); }

std::string Tasks(int64_t n) { return std::to_string(n) + (n == 1 ? " task" : " tasks"); }

// The five roles in the order the operator writes them; any other job sorts
// after them.
constexpr const char* kRoleOrder[] = {kChief, kMaster, kPs, kWorker, kEvaluator};
constexpr size_t kNotARole = std::size(kRoleOrder);

size_t JobRank(const std::string& job) {
  for (size_t i = 0; i < kNotARole; ++i) {
    if (job == kRoleOrder[i]) return i;
  }
  return kNotARole;
}

bool IsHostChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'; }

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Digits only, no sign: a task index as a JSON object key or a port.
std::optional<int64_t> ParseDigits(std::string_view s) {
  if (!AllDigits(s)) return std::nullopt;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

Status ValidateIpv6(std::string_view host) {
  std::string_view addr = host.substr(0, host.find('%'));
  if (addr.find(':') == std::string_view::npos) return InvalidArgument("bracketed host is not an IPv6 literal");
  for (char c : addr) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') {
      return InvalidArgument("IPv6 host contains invalid character " + Quote(std::string(1, c)));
    }
  }
  if (addr.size() < host.size()) {
    std::string_view zone = host.substr(addr.size() + 1);
    if (zone.empty() || !std::all_of(zone.begin(), zone.end(), IsHostChar)) {
      return InvalidArgument("invalid IPv6 zone " + Quote(zone));
    }
  }
  return Status::Ok();
}

// TF's int(): an integer, an integral float, or a string holding one (with
// optional surrounding whitespace and sign). Booleans are refused although
// Python would take True as 1: a boolean index is always a mistake.
StatusOr<int64_t> ParseIndex(const json& j) {
  auto bad = [&] {
    return TfConfigError("task.index must be an integer or a numeric string, got " +
                         j.dump(-1, ' ', false, json::error_handler_t::replace));
  };
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return bad();
    return static_cast<int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) {
    double d = j.get<double>();
    // Python truncates 1.5 to 1; a fractional index is refused instead.
    if (!(d >= -9.2e18 && d <= 9.2e18) || d != static_cast<double>(static_cast<int64_t>(d))) return bad();
    return static_cast<int64_t>(d);
  }
  if (!j.is_string()) return bad();
  std::string_view s = j.get_ref<const std::string&>();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  bool negative = false;
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  std::optional<int64_t> v = ParseDigits(s);
  if (!v) return bad();
  return negative ? -*v : *v;
}

Status ParseJob(const std::string& name, const json& tasks, ClusterSpec& cluster) {
  if (Status s = ValidateJobName(name); !s.ok()) return TfConfigError(s.message());
  const std::string job = "job " + Quote(name);
  if (tasks.is_array()) {
    std::vector<std::string> addresses;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (!tasks[i].is_string()) {
        return TfConfigError(job + " task " + std::to_string(i) + ": address must be a string, got " +
                             tasks[i].dump(-1, ' ', false, json::error_handler_t::replace));
      }
      addresses.push_back(tasks[i].get<std::string>());
    }
    if (Status s = cluster.AddJob(name, addresses); !s.ok()) return TfConfigError(s.message());
    return Status::Ok();
  }
  if (tasks.is_object()) {
    RETURN_IF_ERROR(cluster.AddJob(name, {}));
    for (auto it = tasks.begin(); it != tasks.end(); ++it) {
      std::optional<int64_t> index = ParseDigits(it.key());
      if (!index) {
        return TfConfigError(job + " has task index " + Quote(it.key()) + "; expected a non-negative integer");
      }
      if (!it.value().is_string()) {
        return TfConfigError(job + " task " + it.key() + ": address must be a string, got " +
                             it.value().dump(-1, ' ', false, json::error_handler_t::replace));
      }
      Status s = cluster.AddTask(name, *index, it.value().get<std::string>());
      // Python's int() maps "1" and "01" to the same task and keeps the last;
      // a TF_CONFIG that names a task twice is refused instead.
      if (s.code() == Code::kAlreadyExists) {
        return TfConfigError(job + " defines task " + std::to_string(*index) + " more than once");
      }
      if (!s.ok()) return TfConfigError(s.message());
    }
    return Status::Ok();
  }
  return TfConfigError(job + " must be a list of addresses or an object mapping task indices to addresses, got " +
                       std::string(tasks.type_name()));
}

Status OptionalString(const json& doc, const char* key, std::string& out) {
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) {
    return TfConfigError(Quote(key) + " must be a string, got " +
                         it->dump(-1, ' ', false, json::error_handler_t::replace));
  }
  out = it->get<std::string>();
  return Status::Ok();
}

std::string JoinJobs(const ClusterSpec& cluster) {
  std::vector<std::string> names = cluster.JobNames();
  if (names.empty()) return "the cluster has no jobs";
  std::string s = "jobs: ";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

StatusOr<TaskId> ParseTask(const json& task, const ClusterSpec& cluster) {
  if (!task.is_object()) {
    return TfConfigError("\"task\" must be an object with \"type\" and \"index\", got " +
                         std::string(task.type_name()));
  }
  // Unknown task fields are ignored, as TF does: AI Platform adds "trial"
  // and "cloud" next to type and index.
  auto type_it = task.find("type");
  if (type_it == task.end() || type_it->is_null()) return TfConfigError("task.type is missing");
  if (!type_it->is_string()) {
    return TfConfigError("task.type must be a string, got " +
                         type_it->dump(-1, ' ', false, json::error_handler_t::replace));
  }
  TaskId id;
  id.type = type_it->get<std::string>();
  if (id.type.empty()) return TfConfigError("task.type is empty");
  // Only the five roles can be played, even when the cluster lists other jobs.
  if (!IsKnownTaskType(id.type)) {
    return TfConfigError("unknown task type " + Quote(id.type) + "; expected chief, master, ps, worker or evaluator");
  }
  // Estimator requires an index whenever a cluster is given; the resolver's
  // None would fail later in every strategy, so it is required here.
  auto index_it = task.find("index");
  if (index_it == task.end() || index_it->is_null()) return TfConfigError("task.index is missing");
  ASSIGN_OR_RETURN(id.index, ParseIndex(*index_it));
  if (id.index < 0) return TfConfigError("task index " + std::to_string(id.index) + " is negative");

  if (!cluster.HasJob(id.type)) {
    // Estimator's convention: the evaluator may sit outside the cluster.
    if (id.type == kEvaluator) return id;
    return TfConfigError("task type " + Quote(id.type) + " is not a job in the cluster (" + JoinJobs(cluster) + ")");
  }
  if (!cluster.Address(id.type, id.index).ok()) {
    if (cluster.IsDense(id.type)) {
      return TfConfigError("task index " + std::to_string(id.index) + " is out of range for job " + Quote(id.type) +
                           " with " + Tasks(cluster.NumTasks(id.type)));
    }
    std::string indices;
    for (int64_t i : cluster.TaskIndices(id.type)) indices += (indices.empty() ? "" : ", ") + std::to_string(i);
    return TfConfigError("task index " + std::to_string(id.index) + " is not defined in sparse job " + Quote(id.type) +
                         " (indices " + indices + ")");
  }
  return id;
}

}  // namespace

// TF's multi_worker_util allows at most one chief and one evaluator; Estimator
// holds "master" to the same rule when it plays the chief.
Status ValidateRoleCounts(const ClusterSpec& cluster) {
  for (const char* job : {kChief, kMaster, kEvaluator}) {
    int64_t n = cluster.NumTasks(job);
    if (n > 1) return InvalidArgument("job " + Quote(job) + " has " + Tasks(n) + "; at most one is allowed");
  }
  if (cluster.HasJob(kChief) && cluster.HasJob(kMaster)) {
    return InvalidArgument("the cluster has both \"chief\" and \"master\" jobs; only one coordinator is allowed");
  }
  return Status::Ok();
}

Status ValidateDistinctAddresses(const ClusterSpec& cluster) {
  std::map<std::string, std::string> owner;  // address -> "job:index"
  for (const std::string& job : cluster.JobNames()) {
    for (int64_t index : cluster.TaskIndices(job)) {
      const std::string address = cluster.Address(job, index).value();
      const std::string task = job + ":" + std::to_string(index);
      auto [it, fresh] = owner.emplace(address, task);
      if (!fresh) {
        return InvalidArgument(it->second + " and " + task + " have the same address " + Quote(address) +
                               "; every task needs its own host:port");
      }
    }
  }
  return Status::Ok();
}

bool IsChief(const std::string& type) { return type == kChief || type == kMaster; }

bool IsKnownTaskType(const std::string& type) { return JobRank(type) < kNotARole; }

std::ostream& operator<<(std::ostream& os, const TaskId& t) { return os << t.type << ':' << t.index; }

Status ValidateAddress(const std::string& address) {
  auto bad = [&](const std::string& reason) {
    return InvalidArgument("invalid address " + Quote(address) + ": " + reason);
  };
  std::string_view a = address;
  std::string_view port;
  // Checked first: the colon in "grpc://" would otherwise read as an IPv6 host.
  if (a.find("://") != std::string_view::npos) return bad("expected host:port without a URL scheme");
  if (!a.empty() && a.front() == '[') {
    size_t close = a.find(']');
    if (close == std::string_view::npos) return bad("unterminated '[' in IPv6 host");
    if (close + 1 >= a.size() || a[close + 1] != ':') return bad("expected [ipv6]:port");
    std::string_view host = a.substr(1, close - 1);
    if (host.empty()) return bad("empty host");
    if (Status s = ValidateIpv6(host); !s.ok()) return bad(s.message());
    port = a.substr(close + 2);
  } else {
    size_t colon = a.rfind(':');
    if (colon == std::string_view::npos) return bad("expected host:port");
    std::string_view host = a.substr(0, colon);
    if (host.find(':') != std::string_view::npos) return bad("an IPv6 host must be bracketed, as in [::1]:2222");
    if (host.empty()) return bad("empty host");
    for (char c : host) {
      if (!IsHostChar(c)) return bad("host contains invalid character " + Quote(std::string(1, c)));
    }
    port = a.substr(colon + 1);
  }
  std::optional<int64_t> p = port.size() <= 5 ? ParseDigits(port) : std::nullopt;
  if (!p || *p < 1 || *p > 65535) return bad("port " + Quote(port) + " is not a number from 1 to 65535");
  return Status::Ok();
}

Status ValidateJobName(const std::string& job) {
  bool ok = !job.empty() && std::isalpha(static_cast<unsigned char>(job[0])) &&
            std::all_of(job.begin(), job.end(),
                        [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  if (!ok) {
    return InvalidArgument("invalid job name " + Quote(job) + "; expected a letter followed by letters, digits or '_'");
  }
  return Status::Ok();
}

StatusOr<ClusterSpec> ClusterSpec::FromLists(const std::map<std::string, std::vector<std::string>>& jobs) {
  ClusterSpec spec;
  for (const auto& [name, addresses] : jobs) RETURN_IF_ERROR(spec.AddJob(name, addresses));
  return spec;
}

Status ClusterSpec::AddTask(const std::string& job, int64_t index, const std::string& address) {
  RETURN_IF_ERROR(ValidateJobName(job));
  const std::string where = "job " + Quote(job) + " task " + std::to_string(index);
  if (index < 0) return InvalidArgument(where + ": index must be non-negative");
  RETURN_IF_ERROR(ValidateAddress(address).WithContext(where));
  auto& tasks = jobs_[job];
  if (!tasks.emplace(index, address).second) return AlreadyExists(where + " is already defined");
  return Status::Ok();
}

Status ClusterSpec::AddJob(const std::string& job, const std::vector<std::string>& addresses) {
  RETURN_IF_ERROR(ValidateJobName(job));
  if (HasJob(job)) return AlreadyExists("job " + Quote(job) + " is already defined");
  std::map<std::int64_t, std::string> tasks;
  for (size_t i = 0; i < addresses.size(); ++i) {
    RETURN_IF_ERROR(ValidateAddress(addresses[i]).WithContext("job " + Quote(job) + " task " + std::to_string(i)));
    tasks.emplace(static_cast<int64_t>(i), addresses[i]);
  }
  jobs_.emplace(job, std::move(tasks));
  return Status::Ok();
}

std::vector<std::string> ClusterSpec::JobNames() const {
  std::vector<std::string> names;
  for (const auto& [name, tasks] : jobs_) names.push_back(name);
  std::stable_sort(names.begin(), names.end(),
                   [](const std::string& a, const std::string& b) { return JobRank(a) < JobRank(b); });
  return names;
}

bool ClusterSpec::HasJob(const std::string& job) const { return jobs_.count(job) > 0; }

int64_t ClusterSpec::NumTasks(const std::string& job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

std::vector<int64_t> ClusterSpec::TaskIndices(const std::string& job) const {
  std::vector<int64_t> out;
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return out;
  for (const auto& [index, address] : it->second) out.push_back(index);
  return out;
}

bool ClusterSpec::IsDense(const std::string& job) const {
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.empty()) return true;
  // Indices are distinct and ascending, so dense iff the largest is n-1.
  return it->second.rbegin()->first == static_cast<int64_t>(it->second.size()) - 1;
}

StatusOr<std::string> ClusterSpec::Address(const std::string& job, int64_t index) const {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return NotFound("no job " + Quote(job) + " in the cluster");
  auto t = it->second.find(index);
  if (t == it->second.end()) return NotFound("job " + Quote(job) + " has no task " + std::to_string(index));
  return t->second;
}

ClusterSpec ClusterSpec::WithoutJob(const std::string& job) const {
  ClusterSpec copy = *this;
  copy.jobs_.erase(job);
  return copy;
}

StatusOr<ClusterConfig> ParseTfConfig(const std::string& text, TaskRequirement requirement) {
  ASSIGN_OR_RETURN(json doc, ParseJson(text, kTfConfigEnv));
  if (!doc.is_object()) return TfConfigError("expected a JSON object, got " + std::string(doc.type_name()));

  ClusterConfig config;
  // TF itself treats a missing cluster as "run locally"; a runtime that was
  // handed a TF_CONFIG without one has been misconfigured, so say so.
  auto cluster = doc.find("cluster");
  if (cluster == doc.end() || cluster->is_null()) return TfConfigError("\"cluster\" is missing");
  if (!cluster->is_object()) {
    return TfConfigError("\"cluster\" must be an object mapping job names to addresses, got " +
                         std::string(cluster->type_name()));
  }
  for (auto it = cluster->begin(); it != cluster->end(); ++it) {
    RETURN_IF_ERROR(ParseJob(it.key(), it.value(), config.cluster));
  }
  if (Status s = ValidateRoleCounts(config.cluster); !s.ok()) return TfConfigError(s.message());
  if (Status s = ValidateDistinctAddresses(config.cluster); !s.ok()) return TfConfigError(s.message());
  RETURN_IF_ERROR(OptionalString(doc, "environment", config.environment));
  RETURN_IF_ERROR(OptionalString(doc, "rpc_layer", config.rpc_layer));

  auto task = doc.find("task");
  if (task == doc.end() || task->is_null()) {
    if (requirement == TaskRequirement::kRequired) return TfConfigError("\"task\" is missing");
    return config;
  }
  ASSIGN_OR_RETURN(TaskId id, ParseTask(*task, config.cluster));
  config.task = std::move(id);
  return config;
}

std::string WriteTfConfig(const TfConfigDoc& doc) {
  std::string out = "{\"cluster\":{";
  bool first_job = true;
  for (const auto& [job, tasks] : doc.cluster) {
    if (!first_job) out += ',';
    first_job = false;
    out += QuoteWhole(job);
    out += ':';
    // Dense: indices 0..n-1 (an empty job too), written as a list.
    const bool dense =
        tasks.empty() || (tasks.begin()->first == 0 && tasks.rbegin()->first == static_cast<int64_t>(tasks.size()) - 1);
    out += dense ? '[' : '{';
    bool first_task = true;
    for (const auto& [index, address] : tasks) {
      if (!first_task) out += ',';
      first_task = false;
      if (!dense) out += '"' + std::to_string(index) + "\":";
      out += QuoteWhole(address);
    }
    out += dense ? ']' : '}';
  }
  out += '}';
  if (doc.task) {
    out += ",\"task\":{\"type\":" + QuoteWhole(doc.task->type) + ",\"index\":" + std::to_string(doc.task->index) + "}";
  }
  if (!doc.environment.empty()) out += ",\"environment\":" + QuoteWhole(doc.environment);
  if (!doc.rpc_layer.empty()) out += ",\"rpc_layer\":" + QuoteWhole(doc.rpc_layer);
  out += '}';
  return out;
}

std::string WriteSparseTfConfig(const std::map<int64_t, std::string>& workers,
                                const std::optional<std::vector<std::string>>& ps, const TaskId& task) {
  std::string out = "{\"cluster\":{\"worker\":{";
  bool first = true;
  for (const auto& [index, address] : workers) {
    if (!first) out += ',';
    first = false;
    out += '"' + std::to_string(index) + "\":" + QuoteWhole(address);
  }
  out += "},\"ps\":";
  if (!ps) {
    out += "null";
  } else {
    out += '[';
    for (size_t i = 0; i < ps->size(); ++i) {
      if (i > 0) out += ',';
      out += QuoteWhole((*ps)[i]);
    }
    out += ']';
  }
  out += "},\"task\":{\"type\":" + QuoteWhole(task.type) + ",\"index\":" + std::to_string(task.index) + "}}";
  return out;
}

std::string ToTfConfigJson(const ClusterConfig& config) {
  TfConfigDoc doc;
  for (const std::string& job : config.cluster.JobNames()) {
    auto& tasks = doc.cluster[job];
    for (int64_t index : config.cluster.TaskIndices(job)) tasks[index] = config.cluster.Address(job, index).value();
  }
  doc.task = config.task;
  doc.environment = config.environment;
  doc.rpc_layer = config.rpc_layer;
  return WriteTfConfig(doc);
}

}  // namespace tfjob::contract
