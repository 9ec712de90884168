// Adding a strategy takes one file and one registration line: this file
// registers "noop" (a strategy of its own class that trains on this
// process's one device through the built-in synchronous step), and `fit
// --strategy noop` then trains the MNIST MLP in process, as `fit` does for
// every registered strategy (docs/contributing.md, "Adding a strategy").
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/programs/programs.h"
#include "services/strategy/registry.h"
#include "services/strategy/sync.h"
#include "tests/support/subprocess.h"

namespace tfjob::strategy {
namespace {

// Distributes nothing: every call goes to a one_device strategy; only the
// name is its own.
class NoopStrategy final : public Strategy {
 public:
  explicit NoopStrategy(std::unique_ptr<Strategy> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return "noop"; }
  int64_t num_replicas_in_sync() const override { return inner_->num_replicas_in_sync(); }
  Status Start(TrainState& st) override { return inner_->Start(st); }
  Status Run(TrainState& st, int64_t end) override { return inner_->Run(st, end); }
  Status Recover(const Status& cause, TrainState& st) override { return inner_->Recover(cause, st); }
  Status Checkpoint(const TrainState& st, bool final) override { return inner_->Checkpoint(st, final); }
  StatusOr<std::vector<Tensor>> Values() override { return inner_->Values(); }
  nlohmann::json SummaryJson() const override {
    nlohmann::json j = inner_->SummaryJson();
    j["strategy"] = "noop";
    return j;
  }

 private:
  std::unique_ptr<Strategy> inner_;
};

StatusOr<std::unique_ptr<Strategy>> MakeNoop(const StrategyArgs& a) {
  SyncOptions o;
  o.kind = StrategyKind::kOneDevice;
  o.checkpoints = a.options.checkpoints;
  o.log = a.context.out;
  o.stop = a.context.stop;
  o.initial_values = a.initial_values;
  ASSIGN_OR_RETURN(std::unique_ptr<Strategy> inner, MakeSyncStrategy(a.job, a.train, std::move(o)));
  return std::unique_ptr<Strategy>(std::make_unique<NoopStrategy>(std::move(inner)));
}

// The registration: one line (topology and placement keep their defaults,
// this process alone on one device).
const StrategyRegistrar kNoop({.name = "noop", .make = MakeNoop});

namespace t = ::tfjob::testing;
using ::testing::HasSubstr;

struct FitResult {
  int code = -1;
  std::string out, err;
};

// `fit` in this process, as tfjob-runtime runs it without TF_CONFIG.
FitResult RunFit(std::vector<std::string> args) {
  std::vector<std::string> argv{"--config", t::SourceDir() + "/examples/mnist/mlp.json", "--data-dir", t::MnistDir()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::ostringstream out, err;
  FitResult r;
  r.code = programs::MakeFit()->RunSingleProcess(argv, out, err, nullptr);
  r.out = out.str();
  r.err = err.str();
  return r;
}

TEST(NoopStrategyTest, FitTrainsTheMnistMlp) {
  const std::string dir = t::MakeTempDir("noop-strategy");
  FitResult r = RunFit({"--strategy", "noop", "--summary-json", dir + "/out.json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto s = nlohmann::json::parse(t::ReadText(dir + "/out.json"));
  EXPECT_EQ(s["strategy"], "noop") << s.dump();
  EXPECT_EQ(s["num_replicas_in_sync"], 1);
  EXPECT_EQ(s["steps"].get<int>(), 5 * 125);
  // What one_device reaches on the same job (FitAcceptanceTest.MlpOnMnist).
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.925) << s.dump();
  EXPECT_THAT(r.out, HasSubstr("Epoch 5/5\n125/125 - "));
}

TEST(NoopStrategyTest, UnknownNamesListTheRegisteredOnes) {
  FitResult r = RunFit({"--strategy", "noap"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "tfjob-runtime: error: flag --strategy: \"noap\" is not one of one_device, mirrored, "
            "multi_worker_mirrored, central_storage, parameter_server, noop\n");
}

TEST(NoopStrategyTest, ItsEntrySaysWhatFitChecks) {
  // One replica in this process: --replicas is refused as for one_device.
  FitResult r = RunFit({"--strategy", "noop", "--replicas", "2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("flag --replicas: only --strategy mirrored and central_storage"));
  // A second registration of the name is refused.
  EXPECT_EQ(StrategyRegistry::Global().Add({.name = "noop", .make = MakeNoop}).code(), Code::kAlreadyExists);
}

}  // namespace
}  // namespace tfjob::strategy
