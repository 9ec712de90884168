// fit: the job description trained by Keras-style model.fit, under the
// strategy TensorFlow's users would expect from where it runs:
//
//   no TF_CONFIG                       one_device (or --strategy mirrored /
//                                      central_storage with --replicas N)
//   TF_CONFIG with "ps" tasks          parameter_server: this is the chief;
//                                      workers run the closures
//                                      (services/strategy/ps_closures.h)
//   TF_CONFIG with chief/worker only   multi_worker_mirrored: every task
//                                      trains, gradients all-reduced
//   TF_CONFIG task "evaluator"         the side-car evaluator (fit_evaluator.h)
//
// --strategy names one explicitly; a strategy that does not fit the cluster
// is one clear line and exit 2. The training loop is the same for all
// (services/strategy/loop.h).
#include <iostream>

#include "common/files.h"
#include "common/json_reader.h"
#include "services/tensor/gemm.h"
#include "services/collective/nccl.h"
#include "services/model/keras_model.h"
#include "services/model/text.h"
#include "services/model/tfjs_export.h"
#include "services/programs/fit_evaluator.h"
#include "services/programs/fit_flags.h"
#include "services/programs/fit_ps.h"
#include "services/programs/programs.h"
#include "services/strategy/fit.h"
#include "services/strategy/ps_closures.h"
#include "services/tensor/threads.h"

namespace tfjob::programs {

namespace {

using fit::Parsed;
using strategy::Topology;

// The strategy --strategy names, or the role's default (which fills
// p.options.strategy). Parse has checked the name.
StatusOr<strategy::StrategyEntry> StrategyFor(Parsed& p, const char* role_default) {
  if (p.options.strategy.empty()) p.options.strategy = role_default;
  return strategy::StrategyRegistry::Global().Find(p.options.strategy);
}

class Fit final : public Program {
 public:
  std::string name() const override { return "fit"; }
  std::string usage() const override { return fit::Usage(); }

  bool HasSingleProcessMode() const override { return true; }

  // No TF_CONFIG: this process alone.
  int RunSingleProcess(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                       SignalWatcher* signals) override {
    auto p = fit::Parse(args);
    if (!p.ok()) return ReportError(p.status(), err);
    if (signals) signals->ExitAfter(p->options.shutdown_grace);
    auto entry = StrategyFor(*p, "one_device");
    if (!entry.ok()) return ReportError(entry.status(), err);
    if (entry->topology == Topology::kParameterServers) {
      return ReportError(InvalidArgument("flag --strategy " + entry->name +
                                         ": needs a cluster with \"ps\" tasks "
                                         "(TF_CONFIG, tfjob run, or tfjob-runtime local --ps N)"),
                         err);
    }
    if (Status s = fit::CheckCommunication(p->options.communication, *entry); !s.ok()) return ReportError(s, err);
    // A strategy of a group without a cluster trains in a group of one (as in TF).
    std::unique_ptr<collective::Group> group;
    if (entry->topology == Topology::kGroup) {
      auto g = collective::Group::Create({{"worker:0", "127.0.0.1:0"}}, 0, p->options.collective);
      if (!g.ok()) return ReportError(g.status(), err);
      group = std::move(g).value();
    }
    strategy::FitContext fc;
    fc.out = &out;
    fc.group = group.get();
    if (signals) fc.stop = &signals->stop();
    return Train(*p, std::move(fc), signals, err, /*run_errors=*/false);
  }

  // Every chief and worker of a cluster without parameter servers.
  int RunCollective(const std::vector<std::string>& args, const CollectiveContext& ctx) override {
    auto p = fit::Parse(args);
    if (!p.ok()) return ReportError(p.status(), *ctx.err);
    if (ctx.signals) ctx.signals->ExitAfter(p->options.shutdown_grace);
    auto entry = StrategyFor(*p, "multi_worker_mirrored");
    if (!entry.ok()) return ReportError(entry.status(), *ctx.err);
    if (entry->topology != Topology::kGroup) {
      const std::string why =
          entry->topology == Topology::kParameterServers
              ? "the cluster has no \"ps\" tasks"
              : "this task is one of " + std::to_string(ctx.members.size()) +
                    " chief/worker tasks in TF_CONFIG, which train together with multi_worker_mirrored";
      return ReportError(InvalidArgument("flag --strategy " + entry->name + ": " + why), *ctx.err);
    }
    if (Status s = fit::CheckCommunication(p->options.communication, *entry); !s.ok()) {
      return ReportError(s, *ctx.err);
    }
    collective::Options& co = p->options.collective;
    if (!p->options.rejoin_timeout_given) co.rendezvous_timeout = ctx.connect_timeout;
    co.token = ctx.credentials.token;
    co.tls = ctx.credentials.tls;
    auto group = [&]() -> StatusOr<std::unique_ptr<collective::Group>> {
      if (!ctx.listener || !ctx.listener->valid()) return collective::Group::Create(ctx.members, ctx.rank, co);
      const int port = ctx.listener->port();
      return collective::Group::Create(ctx.members, ctx.rank, co,
                                       net::Listener{net::Fd(ctx.listener->Release()), port});
    }();
    if (!group.ok()) return ReportError(group.status(), *ctx.err);
    *ctx.out << "fit: " << entry->name << ", " << (*group)->self().name << " is rank " << ctx.rank << " of "
             << ctx.members.size() << ", listening on port " << (*group)->port() << std::endl;
    strategy::FitContext fc;
    fc.out = ctx.out;
    fc.metrics = ctx.metrics;
    fc.group = group->get();
    if (ctx.signals) fc.stop = &ctx.signals->stop();
    return Train(*p, std::move(fc), ctx.signals, *ctx.err, /*run_errors=*/false);
  }

  Status RegisterWorker(worker::Registry& r) override { return strategy::RegisterParameterServerClosures(r); }

  // A PS needs only --checkpoint-dir; it checks the other flags' syntax but
  // does not read the job file.
  StatusOr<std::string> CheckpointDir(const std::vector<std::string>& args) const override {
    Flags f = fit::FitFlags();
    RETURN_IF_ERROR(f.Parse(args));
    return f.Has("checkpoint-dir") ? f.Get("checkpoint-dir") : std::string();
  }

  // The chief of a cluster with parameter servers. Everything that can be
  // wrong with the input is checked before the cluster is touched (the
  // strategy claims it through the context).
  int RunChief(const std::vector<std::string>& args, const ChiefContext& ctx) override {
    std::ostream& err = *ctx.err;
    auto p = fit::Parse(args);
    if (!p.ok()) return ReportError(p.status(), err);
    if (ctx.signals) ctx.signals->ExitAfter(p->options.shutdown_grace);
    auto entry = StrategyFor(*p, "parameter_server");
    if (!entry.ok()) return ReportError(entry.status(), err);
    if (entry->topology != Topology::kParameterServers) {
      return ReportError(InvalidArgument("flag --strategy " + entry->name +
                                         ": the cluster has \"ps\" tasks, which only parameter_server uses "
                                         "(leave them out of the cluster for synchronous training)"),
                         err);
    }
    strategy::FitContext fc;
    fc.out = ctx.out;
    fc.metrics = ctx.metrics;
    if (ctx.signals) fc.stop = &ctx.signals->stop();
    fc.claim_ps_cluster = [&ctx]() { return fit::ClaimPsCluster(ctx); };
    return Train(*p, std::move(fc), ctx.signals, err, /*run_errors=*/true);
  }

  int RunEvaluator(const std::vector<std::string>& args, const EvaluatorContext& ctx) override {
    auto p = fit::Parse(args);
    if (!p.ok()) return ReportError(p.status(), *ctx.err);
    if (ctx.signals) ctx.signals->ExitAfter(p->options.shutdown_grace);
    return fit::RunEvaluator(*p, ctx);
  }

 private:
  // A run a signal stopped before it was complete: the loop has
  // checkpointed where it checkpoints, and the task exits 143 (retryable).
  static bool Stopped(const Status& s, const SignalWatcher* signals) {
    return s.code() == Code::kCancelled && signals && signals->stop();
  }

  // Every role's run: the input checked (an error there is bad input), then
  // the strategy built and trained (fit.h). `run_errors`: an error from
  // there on is the run's (ReportRunEnd: the chief of a cluster, which has
  // touched it); otherwise ReportError's code, as for input.
  static int Train(const Parsed& p, strategy::FitContext fc, SignalWatcher* signals, std::ostream& err,
                   bool run_errors) {
    std::ostream& out = *fc.out;
    auto after_fit = fit::AfterFit(p, out);
    if (!after_fit.ok()) return ReportError(after_fit.status(), err);
    fc.after_fit = std::move(after_fit).value();
    auto run = strategy::FitRun::Prepare(p.job, p.options, fc);
    if (!run.ok()) return ReportError(run.status(), err);
    nlohmann::json sj;
    auto summary = (*run)->Train(&sj);
    if (!summary.ok()) {
      if (run_errors || Stopped(summary.status(), signals)) return ReportRunEnd(summary.status(), signals, out, err);
      return ReportError(summary.status(), err);
    }
    if (collective::Group* group = fc.group) {
      const nlohmann::json& r = sj["recovery"];
      out << "fit: " << group->self().name << " done at step " << summary->steps << " (generation " << r["generation"]
          << ", " << r["regroups"] << " regroups, computed " << r["steps_computed"] << " and took "
          << r["steps_adopted"] << " steps from the group since joining at step " << r["joined_at_step"] << ", lost "
          << r["lost_steps"] << ")" << std::endl;
      // Rank 0 speaks for the group (TensorFlow's chief); the others only
      // train, so they write nothing another task could overwrite.
      if (group->rank() != 0) return 0;
    }
    if (Status s = fit::WriteSummary(p.flags, fit::SummaryJson(*summary, sj, p)); !s.ok()) {
      return run_errors ? ReportRuntimeError(s, err) : ReportError(s, err);
    }
    return 0;
  }
};

}  // namespace

std::shared_ptr<Program> MakeFit() { return std::make_shared<Fit>(); }

}  // namespace tfjob::programs
