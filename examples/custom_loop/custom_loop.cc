// A custom training loop on parameter servers, the C++ counterpart of the
// seeds' ParameterServerStrategy tutorial: string features go through a
// lookup vocabulary, an Embedding (dim 20) partitioned with FixedShards(2)
// and averaged over each example's bag, then Dense(1, sigmoid); RMSprop with
// learning rate 0.1; accuracy printed per epoch.
//
// This binary links the runtime library and adds one program, "custom_loop",
// to the built-ins, so the same binary serves every role:
//   build/bin/custom_training_loop local --ps 2 --workers 2 -- custom_loop
#include <algorithm>
#include <iostream>
#include <map>
#include <mutex>

#include "common/files.h"
#include "common/flags.h"
#include "services/model/metrics.h"
#include "services/model/model.h"
#include "services/model/random.h"
#include "services/programs/program.h"
#include "services/runtime/runtime.h"
#include "services/strategy/variable_store.h"

namespace tfjob::examples {
namespace {

using programs::ReportError;

const std::vector<std::string> kVocabulary = {"avenger",   "ironman",  "batman",       "hulk",
                                              "spiderman", "kingkong", "wonder_woman", "thor"};
constexpr int64_t kEmbeddingDim = 20;
constexpr int64_t kBagSize = 3;
constexpr const char* kData = "custom_loop/data";
constexpr const char* kStep = "custom_loop/step";

// The lookup layer: vocabulary words get 1..n, anything else the OOV id 0,
// like a StringLookup with one OOV bucket. n + 1 rows in the embedding.
int64_t Lookup(const std::string& word) {
  auto it = std::find(kVocabulary.begin(), kVocabulary.end(), word);
  return it == kVocabulary.end() ? 0 : 1 + (it - kVocabulary.begin());
}
int64_t VocabularyRows() { return static_cast<int64_t>(kVocabulary.size()) + 1; }

// The tutorial's toy data: three distinct words, label "yes" when "avenger"
// is among them.
std::pair<std::vector<std::vector<std::string>>, std::vector<float>> ToyExamples(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<std::string>> features;
  std::vector<float> labels;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<std::string> pool = kVocabulary, pick;
    for (int k = 0; k < kBagSize; ++k) {
      size_t j = rng.Next() % pool.size();
      pick.push_back(pool[j]);
      pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(j));
    }
    labels.push_back(std::count(pick.begin(), pick.end(), "avenger") ? 1.f : 0.f);
    features.push_back(pick);
  }
  return {features, labels};
}

model::ModelSpec Spec(int64_t embedding_rows) {
  model::ModelSpec m;
  m.input_shape = {kBagSize};
  m.input_dtype = DType::kInt64;
  model::LayerSpec emb;
  emb.type = model::LayerType::kEmbedding;
  emb.name = "embedding";
  emb.input_dim = embedding_rows;
  emb.output_dim = kEmbeddingDim;
  emb.combiner = model::Combiner::kMean;
  emb.path = "embedding";
  model::LayerSpec dense;
  dense.type = model::LayerType::kDense;
  dense.name = "dense";
  dense.units = 1;
  dense.activation = model::Activation::kSigmoid;
  dense.path = "dense";
  m.layers = {emb, dense};
  return m;
}

model::LossSpec Loss() { return {model::LossType::kBinaryCrossentropy, false}; }

model::OptimizerSpec RmsProp() {
  model::OptimizerSpec o;
  o.type = model::OptimizerType::kRMSprop;
  o.learning_rate = 0.1;
  return o;
}

strategy::Placement Place(int64_t num_ps) {
  strategy::Placement p(num_ps, strategy::Partitioner::FixedShards(2));
  (void)p.Add("embedding/embeddings", {VocabularyRows(), kEmbeddingDim});
  (void)p.Add("dense/kernel", {kEmbeddingDim, 1});
  (void)p.Add("dense/bias", {1});
  return p;
}

class CustomLoop final : public programs::Program {
 public:
  std::string name() const override { return "custom_loop"; }
  std::string usage() const override { return "custom_loop [--epochs N] [--steps-per-epoch N] [--summary-json OUT]"; }

  Status RegisterWorker(worker::Registry& r) override {
    RETURN_IF_ERROR(
        r.AddDataset(kData, [](const worker::WorkerEnv& env, const nlohmann::json& a) -> StatusOr<data::Dataset> {
          auto [words, labels] =
              ToyExamples(a.value("examples", int64_t{200}), 1000 + static_cast<uint64_t>(env.worker_index));
          std::vector<int64_t> ids;
          for (const auto& bag : words)
            for (const auto& w : bag) ids.push_back(Lookup(w));
          const int64_t n = static_cast<int64_t>(labels.size());
          ASSIGN_OR_RETURN(Tensor x, Tensor::FromVector({n, kBagSize}, ids));
          ASSIGN_OR_RETURN(Tensor y, Tensor::FromVector({n}, labels));
          return data::Dataset::FromTensors({x, y})
              .Shuffle(n, static_cast<uint64_t>(env.worker_index))
              .Batch(32)
              .Repeat();
        }));
    return r.AddClosure(
        kStep,
        [](worker::ClosureContext& ctx, const nlohmann::json& a,
           const std::vector<Tensor>&) -> StatusOr<worker::ClosureResult> {
          strategy::VariableStore store(Place(a.at("num_ps").get<int64_t>()), ctx.ps());
          ASSIGN_OR_RETURN(std::optional<data::Element> e, ctx.Next(kData));
          if (!e) return OutOfRange("custom_loop: dataset ended");
          const Tensor& x = (*e)[0];
          const Tensor& y = (*e)[1];
          // Only the rows this batch uses are fetched, from the shards holding them.
          std::vector<int64_t> unique(x.data<int64_t>(), x.data<int64_t>() + x.size());
          std::sort(unique.begin(), unique.end());
          unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
          std::map<int64_t, int64_t> compact;
          for (size_t i = 0; i < unique.size(); ++i) compact[unique[i]] = static_cast<int64_t>(i);
          Tensor local_ids = Tensor::Zeros(DType::kInt64, x.shape());
          for (int64_t i = 0; i < x.size(); ++i) local_ids.data<int64_t>()[i] = compact[x.data<int64_t>()[i]];

          ASSIGN_OR_RETURN(Tensor rows, store.Lookup("embedding/embeddings", unique));
          ASSIGN_OR_RETURN(std::vector<Tensor> dense, store.Pull({"dense/kernel", "dense/bias"}));
          ASSIGN_OR_RETURN(auto m, model::Model::Create(Spec(static_cast<int64_t>(unique.size())), Loss()));
          std::vector<Tensor> values{rows, dense[0], dense[1]};
          ASSIGN_OR_RETURN(model::Model::Output out, m->ComputeGradients(values, local_ids, y));
          // Back from batch-local rows to the vocabulary's rows.
          model::Gradient emb = out.grads[0];
          for (int64_t i = 0; i < emb.indices.size(); ++i)
            emb.indices.data<int64_t>()[i] = unique[emb.indices.data<int64_t>()[i]];
          // With the closure's id (applied once however often it re-runs) and
          // its chief's generation (refused once a newer chief took over).
          RETURN_IF_ERROR(
              store
                  .PushGradients(
                      ctx.closure_id(), 0,
                      {{"embedding/embeddings", emb}, {"dense/kernel", out.grads[1]}, {"dense/bias", out.grads[2]}},
                      ctx.generation())
                  .status());
          model::MetricState acc;
          RETURN_IF_ERROR(model::UpdateMetric(model::MetricType::kBinaryAccuracy, out.predictions, y, out.logits, acc));
          return worker::ClosureResult{{{"correct", acc.total}, {"count", acc.count}, {"loss", out.loss}}, {}};
        });
  }

  int RunChief(const std::vector<std::string>& args, const programs::ChiefContext& ctx) override {
    std::ostream& out = *ctx.out;
    std::ostream& err = *ctx.err;
    Flags flags;
    flags.Value("epochs", "epochs", "20")
        .Value("steps-per-epoch", "steps per epoch", "20")
        .Value("summary-json", "write results here");
    if (Status s = flags.Parse(args); !s.ok()) return ReportError(s, err);
    auto epochs = flags.GetInt("epochs");
    auto steps = flags.GetInt("steps-per-epoch");
    if (!epochs.ok() || !steps.ok() || *epochs < 1 || *steps < 1) {
      return ReportError(InvalidArgument("--epochs and --steps-per-epoch must be positive integers"), err);
    }
    const int64_t num_ps = static_cast<int64_t>(ctx.ps_addresses.size());
    // This chief's generation and closure ids: a previous chief's closures
    // still running on workers are fenced off.
    auto options = ctx.CoordinatorOptions();
    if (!options.ok()) return programs::ReportRunEnd(options.status(), ctx.signals, out, err);
    std::vector<std::shared_ptr<ps::PsClient>> clients = ctx.PsClients();
    strategy::VariableStore store(Place(num_ps), clients);
    auto full = model::Model::Create(Spec(VocabularyRows()), Loss());
    if (!full.ok()) return ReportError(full.status(), err);
    std::vector<Tensor> init = (*full)->InitialValues(42);
    const std::vector<std::string> names = {"embedding/embeddings", "dense/kernel", "dense/bias"};
    for (size_t i = 0; i < names.size(); ++i) {
      if (Status s = store.Create(names[i], init[i], RmsProp()); !s.ok()) return ReportError(s, err);
    }
    // Where the embedding's shards live, read back from each PS.
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& s : (*store.placement().Find("embedding/embeddings"))->shards) {
      auto v = clients[s.ps]->Pull({s.name});
      if (!v.ok()) return ReportError(v.status(), err);
      const Shape& sh = (*v)[0].shape();
      out << "embedding shard " << s.name << " on ps " << s.ps << ": shape (" << sh[0] << ", " << sh[1] << ")"
          << std::endl;
      shards.push_back({{"name", s.name}, {"ps", s.ps}, {"shape", sh}});
    }

    coordinator::ClusterCoordinator coord(ctx.worker_addresses, *options);
    if (Status s = coord.CreatePerWorkerDataset(kData, {{"examples", 200}}, kData); !s.ok()) return ReportError(s, err);
    double accuracy = 0;
    nlohmann::json history = nlohmann::json::array();
    for (int64_t epoch = 0; epoch < *epochs; ++epoch) {
      std::vector<coordinator::RemoteValue> results;
      for (int64_t i = 0; i < *steps; ++i) results.push_back(coord.Schedule(kStep, {{"num_ps", num_ps}}));
      if (Status s = coord.Join(); !s.ok()) return programs::ReportRunEnd(s, ctx.signals, out, err);
      double correct = 0, count = 0;
      for (auto& r : results) {
        auto v = r.Fetch();
        if (!v.ok()) return ReportError(v.status(), err);
        correct += v->json["correct"].get<double>();
        count += v->json["count"].get<double>();
      }
      accuracy = correct / count;
      history.push_back(accuracy);
      char line[96];
      std::snprintf(line, sizeof line, "Finished epoch %lld, accuracy is %f.", static_cast<long long>(epoch), accuracy);
      out << line << std::endl;
    }
    if (flags.Has("summary-json")) {
      nlohmann::json j{{"accuracy", accuracy}, {"history", history}, {"embedding_shards", shards}};
      if (Status s = WriteFileAtomic(flags.Get("summary-json"), j.dump(2) + "\n"); !s.ok()) return ReportError(s, err);
    }
    return 0;
  }
};

}  // namespace
}  // namespace tfjob::examples

int main(int argc, char** argv) {
  auto programs = tfjob::programs::BuiltinPrograms();
  programs.push_back(std::make_shared<tfjob::examples::CustomLoop>());
  return tfjob::runtime::RunMain({argv + 1, argv + argc}, programs, std::cout, std::cerr);
}
