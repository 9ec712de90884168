#include "services/cluster/slurm.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace tfjob::cluster {
namespace {

// Far beyond any real Slurm allocation; stops "n[0-999999999999]" or a
// typo'd repeat count from exhausting memory before anything is checked.
constexpr int64_t kMaxHosts = 1'000'000;
constexpr int64_t kMaxTasks = 1'000'000;
constexpr int64_t kMaxGpusPerNode = 4096;

std::string QuoteJson(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// At most 18 digits, so every value fits in int64 with room for ranges.
std::optional<int64_t> ParseSlurmCount(std::string_view s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  if (!std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

// The alternatives of one bracket group, "01-03,7" -> 01 02 03 7. Each range
// is padded to the width of its lower bound, as TF and Slurm do.
Status ExpandRanges(std::string_view body, const std::string& text, int64_t budget, std::vector<std::string>& out) {
  auto bad = [&](const std::string& reason) {
    return InvalidArgument("invalid hostlist " + QuoteJson(text) + ": " + reason);
  };
  if (body.empty()) return bad("empty brackets");
  for (std::string_view item : Split(body, ',')) {
    size_t dash = item.find('-');
    std::string_view lo_text = item.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    std::optional<int64_t> lo = ParseSlurmCount(lo_text);
    std::optional<int64_t> hi = ParseSlurmCount(hi_text);
    if (!lo || !hi) return bad("range " + QuoteJson(item) + " is not N or N-M");
    if (*hi < *lo) return bad("range " + QuoteJson(item) + " is descending");
    if (*hi - *lo + 1 > budget - static_cast<int64_t>(out.size())) {
      return bad("expands to more than " + std::to_string(kMaxHosts) + " hosts");
    }
    for (int64_t v = *lo; v <= *hi; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo_text.size()) digits.insert(0, lo_text.size() - digits.size(), '0');
      out.push_back(std::move(digits));
    }
  }
  return Status::Ok();
}

std::string JobsSummary(const std::map<std::string, int64_t>& jobs) {
  std::string s;
  for (const auto& [name, count] : jobs) s += (s.empty() ? "" : ", ") + name + ": " + std::to_string(count);
  return s;
}

struct Var {
  std::string name;
  std::string value;
};

// The step-level variable describes the processes this srun started; the
// job-level one is the fallback for batch scripts run outside a step.
StatusOr<Var> GetVar(const Env& env, const std::string& primary, const std::string& fallback) {
  for (const std::string& name : {primary, fallback}) {
    if (name.empty()) continue;
    if (std::optional<std::string> v = env(name)) return Var{name, *v};
  }
  if (fallback.empty()) return NotFound("Slurm: " + primary + " is not set; not running inside a Slurm step?");
  return NotFound("Slurm: neither " + primary + " nor " + fallback + " is set; not running inside a Slurm step?");
}

StatusOr<int64_t> ParseVarCount(const Var& var) {
  std::optional<int64_t> v = ParseSlurmCount(var.value);
  if (!v) return InvalidArgument("Slurm: " + var.name + " " + QuoteJson(var.value) + " is not a non-negative integer");
  return *v;
}

Status ValidateOptions(const SlurmOptions& o) {
  if (o.port_base < 1 || o.port_base > 65535) {
    return InvalidArgument("Slurm: port_base " + std::to_string(o.port_base) + " is not a port from 1 to 65535");
  }
  if (o.tasks_per_node && (*o.tasks_per_node < 1 || *o.tasks_per_node > kMaxTasks)) {
    return InvalidArgument("Slurm: tasks_per_node " + std::to_string(*o.tasks_per_node) + " is not from 1 to " +
                           std::to_string(kMaxTasks));
  }
  for (auto [name, value] :
       {std::pair{"gpus_per_node", o.gpus_per_node}, std::pair{"gpus_per_task", o.gpus_per_task}}) {
    if (value && (*value < 0 || *value > kMaxGpusPerNode)) {
      return InvalidArgument(std::string("Slurm: ") + name + " " + std::to_string(*value) + " is not from 0 to " +
                             std::to_string(kMaxGpusPerNode));
    }
  }
  for (const auto& [name, count] : o.jobs) {
    if (Status s = ValidateJobName(name); !s.ok()) return InvalidArgument("Slurm: " + s.message());
    if (count < 0 || count > kMaxTasks) {
      return InvalidArgument("Slurm: job " + QuoteJson(name) + " has task count " + std::to_string(count) +
                             ", expected 0 to " + std::to_string(kMaxTasks));
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<std::string>> VisibleDevices(const std::string& value) {
  std::vector<std::string> devices;
  if (value.empty()) return devices;
  for (std::string_view d : Split(value, ',')) {
    if (d.empty()) return InvalidArgument("Slurm: CUDA_VISIBLE_DEVICES " + QuoteJson(value) + " has an empty entry");
    devices.emplace_back(d);
  }
  return devices;
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& text) {
  auto bad = [&](const std::string& reason) {
    return InvalidArgument("invalid hostlist " + QuoteJson(text) + ": " + reason);
  };
  if (text.empty()) return bad("it is empty");

  // Commas separate names only outside brackets ("n[1,3],m").
  std::vector<std::string_view> names;
  std::string_view all = text;
  size_t start = 0;
  bool in_brackets = false;
  for (size_t i = 0; i < all.size(); ++i) {
    char c = all[i];
    if (c == '[') {
      if (in_brackets) return bad("nested '['");
      in_brackets = true;
    } else if (c == ']') {
      if (!in_brackets) return bad("unmatched ']'");
      in_brackets = false;
    } else if (c == ',' && !in_brackets) {
      names.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  }
  if (in_brackets) return bad("unclosed '['");
  names.push_back(all.substr(start));

  std::vector<std::string> hosts;
  for (std::string_view name : names) {
    if (name.empty()) return bad("empty host name");
    // Each bracket group multiplies the names so far: a cartesian product,
    // leftmost group varying slowest, as Slurm expands "r[1-2]n[1-2]".
    std::vector<std::string> expanded = {""};
    size_t pos = 0;
    while (pos < name.size()) {
      if (name[pos] == '[') {
        size_t close = name.find(']', pos);
        std::vector<std::string> alternatives;
        const int64_t budget = kMaxHosts - static_cast<int64_t>(hosts.size());
        RETURN_IF_ERROR(ExpandRanges(name.substr(pos + 1, close - pos - 1), text, budget, alternatives));
        if (static_cast<int64_t>(alternatives.size()) > budget / static_cast<int64_t>(expanded.size())) {
          return bad("expands to more than " + std::to_string(kMaxHosts) + " hosts");
        }
        std::vector<std::string> next;
        next.reserve(expanded.size() * alternatives.size());
        for (const std::string& head : expanded) {
          for (const std::string& alt : alternatives) next.push_back(head + alt);
        }
        expanded = std::move(next);
        pos = close + 1;
      } else {
        size_t open = std::min(name.find('[', pos), name.size());
        for (std::string& h : expanded) h.append(name.substr(pos, open - pos));
        pos = open;
      }
    }
    hosts.insert(hosts.end(), std::make_move_iterator(expanded.begin()), std::make_move_iterator(expanded.end()));
  }
  return hosts;
}

StatusOr<std::vector<int64_t>> ExpandTasksPerNode(const std::string& text) {
  auto bad = [&](const std::string& reason) {
    return InvalidArgument("invalid tasks-per-node list " + QuoteJson(text) + ": " + reason);
  };
  if (text.empty()) return bad("it is empty");
  std::vector<int64_t> counts;
  for (std::string_view part : Split(text, ',')) {
    if (part.empty()) return bad("empty entry");
    size_t paren = part.find('(');
    std::optional<int64_t> tasks = ParseSlurmCount(part.substr(0, paren));
    std::optional<int64_t> repeat = 1;
    if (paren != std::string_view::npos) {
      std::string_view suffix = part.substr(paren);
      bool shaped = suffix.size() > 3 && suffix.substr(0, 2) == "(x" && suffix.back() == ')';
      repeat = shaped ? ParseSlurmCount(suffix.substr(2, suffix.size() - 3)) : std::nullopt;
    }
    if (!tasks || !repeat) return bad("entry " + QuoteJson(part) + " is not N or N(xM)");
    if (*tasks > kMaxTasks)
      return bad("entry " + QuoteJson(part) + " has more than " + std::to_string(kMaxTasks) + " tasks");
    if (*repeat == 0) return bad("entry " + QuoteJson(part) + " repeats zero times");
    if (*repeat > kMaxHosts - static_cast<int64_t>(counts.size())) {
      return bad("describes more than " + std::to_string(kMaxHosts) + " nodes");
    }
    counts.insert(counts.end(), static_cast<size_t>(*repeat), *tasks);
  }
  return counts;
}

StatusOr<SlurmResolution> ResolveSlurm(const SlurmOptions& options, const Env& env) {
  assert(env && "ResolveSlurm needs an environment accessor");
  RETURN_IF_ERROR(ValidateOptions(options));

  ASSIGN_OR_RETURN(Var procid, GetVar(env, "SLURM_PROCID", ""));
  ASSIGN_OR_RETURN(int64_t rank, ParseVarCount(procid));

  std::map<std::string, int64_t> jobs = options.jobs;
  if (jobs.empty()) {
    ASSIGN_OR_RETURN(Var ntasks, GetVar(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"));
    ASSIGN_OR_RETURN(int64_t n, ParseVarCount(ntasks));
    jobs[kWorker] = n;
  }

  ASSIGN_OR_RETURN(Var nodelist, GetVar(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"));
  StatusOr<std::vector<std::string>> expanded = ExpandHostlist(nodelist.value);
  if (!expanded.ok()) return expanded.status().WithContext("Slurm: " + nodelist.name);
  const std::vector<std::string> hosts = std::move(expanded).value();
  // TF folds the nodes into a dict, silently merging repeats; Slurm never
  // repeats a node, so a repeat means the variable was built by hand wrongly.
  std::set<std::string> seen;
  for (const std::string& h : hosts) {
    if (!seen.insert(h).second) {
      return InvalidArgument("Slurm: " + nodelist.name + " " + QuoteJson(nodelist.value) + " lists host " +
                             QuoteJson(h) + " more than once");
    }
  }

  std::vector<int64_t> tasks_per_node;
  if (options.tasks_per_node) {
    tasks_per_node.assign(hosts.size(), *options.tasks_per_node);
  } else {
    ASSIGN_OR_RETURN(Var tpn, GetVar(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"));
    StatusOr<std::vector<int64_t>> counts = ExpandTasksPerNode(tpn.value);
    if (!counts.ok()) return counts.status().WithContext("Slurm: " + tpn.name);
    tasks_per_node = std::move(counts).value();
    // TF zips the two lists and drops the excess; a mismatch means the
    // variables describe different steps, so nothing sensible can be built.
    if (tasks_per_node.size() != hosts.size()) {
      return InvalidArgument("Slurm: " + tpn.name + " " + QuoteJson(tpn.value) + " describes " +
                             std::to_string(tasks_per_node.size()) + " nodes but " + nodelist.name + " " +
                             QuoteJson(nodelist.value) + " lists " + std::to_string(hosts.size()));
    }
  }

  int64_t num_tasks = 0;
  int64_t max_per_node = 0;
  for (int64_t n : tasks_per_node) {
    num_tasks += n;
    max_per_node = std::max(max_per_node, n);
    if (num_tasks > kMaxTasks) {
      return InvalidArgument("Slurm: the step has more than " + std::to_string(kMaxTasks) + " tasks");
    }
  }
  int64_t wanted = 0;
  for (const auto& [name, count] : jobs) wanted += count;  // each <= kMaxTasks: no overflow
  // Like TF, every Slurm task must belong to exactly one job.
  if (wanted != num_tasks) {
    return InvalidArgument("Slurm: the jobs (" + JobsSummary(jobs) + ") have " + std::to_string(wanted) +
                           " tasks but the Slurm step has " + std::to_string(num_tasks) + "; the counts must match");
  }
  if (rank >= num_tasks) {
    return InvalidArgument("Slurm: " + procid.name + " " + std::to_string(rank) + " is out of range for a step with " +
                           std::to_string(num_tasks) + " tasks");
  }

  const std::string visible_text = env("CUDA_VISIBLE_DEVICES").value_or("");
  ASSIGN_OR_RETURN(std::vector<std::string> visible, VisibleDevices(visible_text));
  const int64_t gpus_per_node = options.gpus_per_node.value_or(static_cast<int64_t>(visible.size()));
  if (!visible.empty() && gpus_per_node > static_cast<int64_t>(visible.size())) {
    return InvalidArgument("Slurm: gpus_per_node is " + std::to_string(gpus_per_node) + " but CUDA_VISIBLE_DEVICES " +
                           QuoteJson(visible_text) + " lists " + std::to_string(visible.size()));
  }
  const int64_t gpus_per_task = options.gpus_per_task.value_or(max_per_node > 0 ? gpus_per_node / max_per_node : 0);
  // max_per_node * gpus_per_task > gpus_per_node, without overflow.
  if (gpus_per_task > 0 && max_per_node > gpus_per_node / gpus_per_task) {
    return InvalidArgument("Slurm: a node runs up to " + std::to_string(max_per_node) + " tasks taking " +
                           std::to_string(gpus_per_task) + " GPU(s) each, but gpus_per_node is " +
                           std::to_string(gpus_per_node));
  }

  // Tasks in rank order: Slurm's default block distribution fills each node
  // in the nodelist's order. (TF sorts host names as strings here, which
  // puts "n10" before "n9" and so disagrees with Slurm's ranks.)
  std::vector<std::string> addresses;
  int64_t local_rank = 0;
  for (size_t h = 0; h < hosts.size(); ++h) {
    if (options.port_base + tasks_per_node[h] - 1 > 65535) {
      return InvalidArgument("Slurm: host " + QuoteJson(hosts[h]) + " runs " + std::to_string(tasks_per_node[h]) +
                             " tasks from port_base " + std::to_string(options.port_base) + ", past port 65535");
    }
    for (int64_t k = 0; k < tasks_per_node[h]; ++k) {
      if (static_cast<int64_t>(addresses.size()) == rank) local_rank = k;
      addresses.push_back(hosts[h] + ":" + std::to_string(options.port_base + k));
    }
  }

  SlurmResolution out;
  out.config.rpc_layer = options.rpc_layer;
  int64_t begin = 0;
  for (const auto& [name, count] : jobs) {
    std::vector<std::string> slice(addresses.begin() + begin, addresses.begin() + begin + count);
    if (Status s = out.config.cluster.AddJob(name, slice); !s.ok()) return Status(s.code(), "Slurm: " + s.message());
    if (rank >= begin && rank < begin + count) out.config.task = TaskId{name, rank - begin};
    begin += count;
  }
  if (Status s = ValidateRoleCounts(out.config.cluster); !s.ok()) return InvalidArgument("Slurm: " + s.message());

  if (gpus_per_task > 0) {
    std::string devices;
    for (int64_t g = local_rank * gpus_per_task; g < (local_rank + 1) * gpus_per_task; ++g) {
      if (!devices.empty()) devices += ',';
      devices += visible.empty() ? std::to_string(g) : visible[static_cast<size_t>(g)];
    }
    out.cuda_visible_devices = std::move(devices);
  }
  return out;
}

}  // namespace tfjob::cluster
