#include "services/strategy/stats.h"

namespace tfjob::strategy {

void BatchStats::Merge(const BatchStats& o) {
  loss.Merge(o.loss);
  if (metrics.size() < o.metrics.size()) metrics.resize(o.metrics.size());
  for (size_t i = 0; i < o.metrics.size(); ++i) metrics[i].Merge(o.metrics[i]);
}

NamedValues BatchStats::Values(const std::vector<std::string>& names) const {
  NamedValues v{{"loss", loss.Result()}};
  for (size_t i = 0; i < names.size() && i < metrics.size(); ++i) v.emplace_back(names[i], metrics[i].Result());
  return v;
}

nlohmann::json BatchStats::ToJson() const {
  nlohmann::json m = nlohmann::json::array();
  for (const auto& s : metrics) m.push_back({s.total, s.count});
  return {{"loss", {loss.total, loss.count}}, {"metrics", m}};
}

StatusOr<BatchStats> BatchStats::FromJson(const nlohmann::json& j) {
  try {
    BatchStats s;
    s.loss = {j.at("loss").at(0).get<double>(), j.at("loss").at(1).get<double>()};
    for (const auto& m : j.at("metrics")) s.metrics.push_back({m.at(0).get<double>(), m.at(1).get<double>()});
    return s;
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("training stats: ") + e.what());
  }
}

Status RecordBatch(const model::Model::Output& out, const Tensor& labels, const std::vector<model::MetricType>& types,
                   BatchStats& stats) {
  const double batch = static_cast<double>(out.predictions.dim(0));
  // Weighted by batch size, as Keras' Mean with sample weights: a partial
  // last batch counts for what it holds.
  stats.loss.total += out.loss * batch;
  stats.loss.count += batch;
  stats.metrics.resize(types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    RETURN_IF_ERROR(model::UpdateMetric(types[i], out.predictions, labels, out.logits, stats.metrics[i]));
  }
  return Status::Ok();
}

void TrainState::Record(const BatchStats& stats, int64_t steps, int64_t n) {
  partial.Merge(stats);
  partial_steps += steps;
  step += steps;
  examples += n;
}

nlohmann::json TrainState::ToJson() const {
  nlohmann::json h = nlohmann::json::array();
  for (const auto& e : history)
    h.push_back({{"epoch", e.epoch}, {"steps", e.steps}, {"seconds", e.seconds}, {"values", e.values}});
  nlohmann::json p = partial.ToJson();
  p["steps"] = partial_steps;
  return {{"step", step},         {"history", h},
          {"partial", p},         {"partial_seconds", partial_seconds},
          {"examples", examples}, {"train_seconds", train_seconds}};
}

StatusOr<TrainState> TrainState::FromJson(const nlohmann::json& j) {
  try {
    TrainState s;
    s.step = j.at("step").get<int64_t>();
    for (const auto& e : j.at("history")) {
      s.history.push_back({e.at("epoch").get<int64_t>(), e.at("steps").get<int64_t>(), e.at("seconds").get<double>(),
                           e.at("values").get<NamedValues>()});
    }
    ASSIGN_OR_RETURN(s.partial, BatchStats::FromJson(j.at("partial")));
    s.partial_steps = j.at("partial").at("steps").get<int64_t>();
    s.partial_seconds = j.at("partial_seconds").get<double>();
    s.examples = j.at("examples").get<int64_t>();
    s.train_seconds = j.at("train_seconds").get<double>();
    if (s.step < 0) return DataLoss("training state: negative step");
    return s;
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("training state: ") + e.what());
  }
}

nlohmann::json FitSummary::ToJson() const {
  nlohmann::json j;
  j["name"] = name;
  j["steps"] = steps;
  j["examples"] = examples;
  j["train_seconds"] = train_seconds;
  j["examples_per_second"] = train_seconds > 0 ? static_cast<double>(examples) / train_seconds : 0.0;
  j["epochs"] = history.size();
  auto& h = j["history"] = nlohmann::json::array();
  for (const EpochResult& e : history) {
    nlohmann::json row{{"epoch", e.epoch}, {"steps", e.steps}, {"seconds", e.seconds}};
    for (const auto& [k, v] : e.values) row[k] = v;
    h.push_back(row);
  }
  if (!history.empty()) {
    for (const auto& [k, v] : history.back().values) j["train_" + k] = v;
  }
  if (eval) {
    for (const auto& [k, v] : *eval) {
      j["eval_" + k] = v;
      // eval_accuracy is the headline figure whichever accuracy flavour the job named.
      if (k.find("acc") != std::string::npos && !j.contains("eval_accuracy")) j["eval_accuracy"] = v;
    }
  }
  return j;
}

}  // namespace tfjob::strategy
