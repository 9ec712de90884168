#include "services/strategy/registry.h"

#include <cstdlib>
#include <iostream>

namespace tfjob::strategy {
namespace {

// The built-in strategies, in the order --strategy's error lists them: one
// line each.
void AddBuiltinStrategies(StrategyRegistry& r) {
  for (StrategyEntry e : {
           SyncEntry(StrategyKind::kOneDevice),
           SyncEntry(StrategyKind::kMirrored),
           SyncEntry(StrategyKind::kMultiWorkerMirrored),
           SyncEntry(StrategyKind::kCentralStorage),
           ParameterServerEntry(),
       }) {
    Status s = r.Add(std::move(e));
    if (!s.ok()) {
      std::cerr << "tfjob: built-in strategy: " << s << std::endl;
      std::abort();
    }
  }
}

}  // namespace

StrategyRegistry& StrategyRegistry::Global() {
  static StrategyRegistry* registry = [] {
    auto* r = new StrategyRegistry;  // never destroyed: registrars may run in any order
    AddBuiltinStrategies(*r);
    return r;
  }();
  return *registry;
}

Status StrategyRegistry::Add(StrategyEntry entry) {
  if (entry.name.empty()) return InvalidArgument("strategy registry: an entry without a name");
  if (!entry.make) return InvalidArgument("strategy registry: \"" + entry.name + "\" has no factory");
  MutexLock l(mu_);
  for (const StrategyEntry& e : entries_) {
    if (e.name == entry.name) return AlreadyExists("strategy registry: \"" + entry.name + "\" is registered twice");
  }
  entries_.push_back(std::move(entry));
  return Status::Ok();
}

StatusOr<StrategyEntry> StrategyRegistry::Find(std::string_view name) const {
  std::string names;
  {
    MutexLock l(mu_);
    for (const StrategyEntry& e : entries_) {
      if (e.name == name) return e;
      names += (names.empty() ? "" : ", ") + e.name;
    }
  }
  return InvalidArgument("flag --strategy: \"" + std::string(name) + "\" is not one of " + names);
}

std::vector<std::string> StrategyRegistry::Names() const {
  MutexLock l(mu_);
  std::vector<std::string> names;
  for (const StrategyEntry& e : entries_) names.push_back(e.name);
  return names;
}

StrategyRegistrar::StrategyRegistrar(StrategyEntry entry) {
  const std::string name = entry.name;
  if (Status s = StrategyRegistry::Global().Add(std::move(entry)); !s.ok()) {
    std::cerr << "tfjob: registering strategy \"" << name << "\": " << s << std::endl;
    std::abort();
  }
}

}  // namespace tfjob::strategy
