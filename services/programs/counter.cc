// The seeds' first example: every closure adds its increment to one variable
// on a parameter server; the result must be the exact sum, however closures
// are retried, and however often the chief itself is restarted: a restarted
// chief re-issues the same closure ids (the namespace its predecessor agreed
// with the PS), so what was already applied is not applied again.
#include <chrono>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/files.h"
#include "common/flags.h"
#include "services/programs/program.h"
#include "services/programs/programs.h"
#include "services/strategy/variable_store.h"

namespace tfjob::programs {
namespace {

constexpr const char* kIncrement = "counter/increment";

StatusOr<std::vector<double>> ParseIncrements(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0') return InvalidArgument("flag --increments: \"" + item + "\" is not a number");
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgument("flag --increments: no values");
  return out;
}

class Counter final : public Program {
 public:
  std::string name() const override { return "counter"; }
  std::string usage() const override {
    return "counter --increments 1,2,3 [--summary-json OUT] [--closure-seconds S] [--rounds R] [--pause-seconds S]";
  }

  Status RegisterWorker(worker::Registry& r) override {
    return r.AddClosure(
        kIncrement,
        [](worker::ClosureContext& ctx, const nlohmann::json& a,
           const std::vector<Tensor>&) -> StatusOr<worker::ClosureResult> {
          if (!a.is_object() || !a.contains("x") || !a.contains("ps") || !a.contains("var")) {
            return InvalidArgument("counter/increment: args need x, ps and var");
          }
          const int64_t ps = a["ps"].get<int64_t>();
          if (ps < 0 || ps >= static_cast<int64_t>(ctx.ps().size()))
            return InvalidArgument("counter/increment: bad ps index");
          // A slow closure spends half its time before its push and half after,
          // so a worker lost at any moment exercises both re-queueing (nothing
          // applied yet) and exactly-once (applied, result never delivered).
          const auto half = std::chrono::duration<double>(a.value("seconds", 0.0) / 2);
          std::this_thread::sleep_for(half);
          Tensor delta = *Tensor::FromVector({}, std::vector<float>{a["x"].get<float>()});
          ASSIGN_OR_RETURN(int dup,
                           ctx.ps()[ps]->Push(ctx.closure_id(), 0,
                                              {{a["var"].get<std::string>(), ps::Update::Kind::kAssignAdd, delta, {}}},
                                              ctx.generation()));
          std::this_thread::sleep_for(half);
          return worker::ClosureResult{{{"worker", ctx.worker_index()}, {"duplicate", dup}}, {}};
        });
  }

  int RunChief(const std::vector<std::string>& args, const ChiefContext& ctx) override {
    std::ostream& out = *ctx.out;
    std::ostream& err = *ctx.err;
    Flags flags;
    flags.Value("increments", "comma-separated increments", "1,2,3,4,5")
        .Value("summary-json", "write the result here")
        .Value("closure-seconds", "how long each increment takes on its worker (demos, failure tests)", "0")
        .Value("rounds", "schedule the increments this many times, joining after each round", "1")
        .Value("pause-seconds", "idle time between rounds (failure tests: a worker lost between closures)", "0");
    if (Status s = flags.Parse(args); !s.ok()) return ReportError(s, err);
    auto seconds = flags.GetDouble("closure-seconds");
    if (!seconds.ok()) return ReportError(seconds.status(), err);
    if (*seconds < 0 || *seconds > 3600)
      return ReportError(InvalidArgument("flag --closure-seconds: must be in [0, 3600]"), err);
    auto pause = flags.GetDouble("pause-seconds");
    if (!pause.ok()) return ReportError(pause.status(), err);
    if (*pause < 0 || *pause > 3600)
      return ReportError(InvalidArgument("flag --pause-seconds: must be in [0, 3600]"), err);
    auto rounds = flags.GetInt("rounds");
    if (!rounds.ok()) return ReportError(rounds.status(), err);
    if (*rounds < 1 || *rounds > 1000000)
      return ReportError(InvalidArgument("flag --rounds: must be in 1..1000000"), err);
    auto incs = ParseIncrements(flags.Get("increments"));
    if (!incs.ok()) return ReportError(incs.status(), err);
    const SignalWatcher* signals = ctx.signals;
    auto end = [&](const Status& s) { return ReportRunEnd(s, signals, out, err); };

    // Fences off any previous chief and learns the job's closure namespace.
    auto claim = ctx.ClaimCluster();
    if (!claim.ok()) return end(claim.status());
    if (claim->previous != 0) {
      out << "counter: fenced off the previous chief (generation " << claim->previous
          << "); closures it applied are not applied again" << std::endl;
    }
    std::vector<std::shared_ptr<ps::PsClient>> clients = ctx.PsClients();
    strategy::Placement placement(static_cast<int64_t>(clients.size()), strategy::Partitioner::None());
    if (auto p = placement.Add("counter", {}); !p.ok()) return ReportError(p.status(), err);
    strategy::VariableStore store(placement, clients);
    // A no-op where a previous chief created it: its value is kept.
    if (Status s = store.Create("counter", Tensor::Scalar(0), std::nullopt); !s.ok()) return end(s);

    auto options = ctx.CoordinatorOptions();
    if (!options.ok()) return end(options.status());
    coordinator::ClusterCoordinator coord(ctx.worker_addresses, *options);
    const auto& shard = placement.variables()[0].shards[0];
    double expected = 0;
    int64_t already_applied = 0;
    const int64_t closures = *rounds * static_cast<int64_t>(incs->size());
    for (int64_t round = 1; round <= *rounds; ++round) {
      std::vector<coordinator::RemoteValue> values;
      for (double x : *incs) {
        expected += x;
        values.push_back(
            coord.Schedule(kIncrement, {{"x", x}, {"ps", shard.ps}, {"var", shard.name}, {"seconds", *seconds}}));
      }
      if (round == 1) {
        out << "counter: scheduled " << incs->size() << " closures on " << ctx.worker_addresses.size() << " workers"
            << (*rounds > 1 ? " (round 1 of " + std::to_string(*rounds) + ")" : std::string()) << std::endl;
      }
      if (Status s = coord.Join(); !s.ok()) return end(s);
      for (const auto& v : values) {
        auto r = v.Fetch();
        if (r.ok() && r->json.is_object()) already_applied += r->json.value("duplicate", int64_t{0});
      }
      if (*rounds > 1) out << "counter: round " << round << "/" << *rounds << " joined" << std::endl;
      // The pause, short slices at a time: a signal must not wait for it.
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(round < *rounds ? *pause : 0);
      while (std::chrono::steady_clock::now() < until && !(signals && signals->stop())) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (signals && signals->stop()) return end(Cancelled("stopped by a signal"));
    }
    // One closure is one step; the counter has no examples or loss.
    if (ctx.metrics) ctx.metrics->RecordTraining(closures, 0, 0, std::nullopt);
    auto value = store.Pull({"counter"});
    if (!value.ok()) return end(value.status());
    const double v = (*value)[0].data<float>()[0];
    const auto st = coord.stats();
    out << "counter: value " << v << " after " << closures << " closures (" << st.retried << " retried, "
        << st.worker_failures << " worker failures, " << already_applied << " already applied)" << std::endl;
    if (flags.Has("summary-json")) {
      nlohmann::json j{{"value", v},
                       {"expected", expected},
                       {"closures", closures},
                       {"retried", st.retried},
                       {"scheduled", st.scheduled},
                       {"completed", st.completed},
                       {"worker_failures", st.worker_failures},
                       {"already_applied", already_applied},
                       {"generation", claim->generation},
                       {"previous_generation", claim->previous},
                       {"num_ps", ctx.ps_addresses.size()},
                       {"num_workers", ctx.worker_addresses.size()}};
      if (Status s = WriteFileAtomic(flags.Get("summary-json"), j.dump(2) + "\n"); !s.ok()) return end(s);
    }
    if (v != expected) {
      return ReportRuntimeError(
          Internal("counter: value " + std::to_string(v) + ", expected " + std::to_string(expected)), err);
    }
    return 0;
  }
};

}  // namespace

std::shared_ptr<Program> MakeCounter() { return std::make_shared<Counter>(); }

}  // namespace tfjob::programs
