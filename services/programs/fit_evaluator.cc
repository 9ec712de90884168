// fit's side-car evaluator (TF_CONFIG task type "evaluator"): it never
// contacts the cluster; it evaluates each newer valid checkpoint the chief
// (or rank 0 of a multi-worker group) commits, whatever strategy wrote it,
// and exits 0 after the final one.
#include <chrono>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

#include "services/checkpoint/manager.h"
#include "services/programs/fit_evaluator.h"
#include "services/strategy/checkpoints.h"
#include "services/strategy/loop.h"

namespace tfjob::programs::fit {

int RunEvaluator(const Parsed& p, const EvaluatorContext& ctx) {
  using Clock = std::chrono::steady_clock;
  std::ostream& out = *ctx.out;
  std::ostream& err = *ctx.err;
  const model::JobConfig& job = p.job;
  auto fail = [&](const Status& s) { return ReportError(s.WithContext(job.source), err); };
  if (!p.options.checkpoints.enabled()) {
    return ReportError(
        InvalidArgument("evaluator: flag --checkpoint-dir is required (it evaluates the chief's checkpoints)"), err);
  }
  if (!job.data.eval) return fail(InvalidArgument("data.eval: the evaluator needs an eval dataset"));
  auto m = model::Model::Create(job.model, job.loss);
  if (!m.ok()) return fail(m.status());
  auto eval = strategy::LoadExamples(*job.data.eval, p.options.data_dir, **m);
  if (!eval.ok()) return fail(eval.status());
  if (Status s = strategy::CheckExamples(*eval, job.data.eval->field, (*m)->input_shape(), (*m)->input_dtype());
      !s.ok()) {
    return fail(s);
  }
  // Lenient: a damaged checkpoint is skipped (and said so) while the
  // evaluator waits for the next good one.
  checkpoint::Manager mgr(p.options.checkpoints.dir, static_cast<int>(p.options.checkpoints.keep),
                          /*ignore_damaged=*/true);
  out << "evaluator: watching " << mgr.dir() << " for checkpoints" << std::endl;
  nlohmann::json results = nlohmann::json::array();
  int64_t last = -1;
  auto last_new = Clock::now();
  std::set<std::string> reported;  // damaged checkpoints already logged
  auto timed_out = [&](Clock::time_point since) {
    if (p.options.eval_timeout_seconds <= 0 ||
        std::chrono::duration<double>(Clock::now() - since).count() <= p.options.eval_timeout_seconds) {
      return Status::Ok();
    }
    return DeadlineExceeded("evaluator: no new checkpoint in " + mgr.dir() + " for " +
                            p.flags.Get("eval-timeout-seconds") + " s; the final one never came");
  };
  while (true) {
    if (ctx.signals && ctx.signals->stop()) {
      out << "evaluator: stopped by a signal before the final checkpoint; exiting " << kExitStopped << std::endl;
      return kExitStopped;
    }
    // Verifying reads every file: only worth it when something newer is there.
    const std::optional<int64_t> newest = mgr.NewestCommittedStep();
    if (!newest || *newest <= last) {
      if (Status s = timed_out(last_new); !s.ok()) return ReportError(s, err);
      std::this_thread::sleep_for(std::chrono::duration<double>(p.options.eval_poll_seconds));
      continue;
    }
    std::ostringstream skipped;
    auto latest = mgr.Latest(&skipped);
    {
      std::istringstream lines(skipped.str());
      for (std::string line; std::getline(lines, line);) {
        if (reported.insert(line).second) out << "evaluator: " << line << std::endl;
      }
    }
    if (!latest.ok()) return ReportError(latest.status(), err);
    if (latest->has_value() && (*latest)->step > last) {
      const checkpoint::Committed& c = **latest;
      auto values = strategy::ValuesFromCheckpoint(c, **m);
      if (values.ok()) {
        const auto t0 = Clock::now();
        auto r = strategy::Evaluate(**m, job, *eval, *values);
        if (!r.ok()) return ReportError(r.status(), err);
        out << "evaluator: checkpoint step " << c.step << (c.final ? " (final)" : "") << "\n"
            << strategy::FormatProgress(r->first, r->first, std::chrono::duration<double>(Clock::now() - t0).count(),
                                        r->second)
            << std::endl;
        if (ctx.metrics) ctx.metrics->RecordEvaluation(c.step, r->second);
        nlohmann::json e{{"step", c.step}, {"final", c.final}};
        for (const auto& [k, v] : r->second) e["eval_" + k] = v;
        results.push_back(e);
        if (Status s = WriteSummary(p.flags, {{"evaluations", results}}); !s.ok()) return ReportError(s, err);
        last = c.step;
        last_new = Clock::now();
        if (c.final) return 0;
      } else {
        // Retention may remove a checkpoint between listing and reading.
        out << "evaluator: checkpoint step " << c.step << " not evaluated: " << values.status().message() << std::endl;
      }
    }
    if (Status s = timed_out(last_new); !s.ok()) return ReportError(s, err);
    std::this_thread::sleep_for(std::chrono::duration<double>(p.options.eval_poll_seconds));
  }
}

}  // namespace tfjob::programs::fit
