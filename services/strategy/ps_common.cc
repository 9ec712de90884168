#include "services/strategy/ps_common.h"

namespace tfjob::strategy::ps_detail {

StatusOr<Placement> PlaceModel(const model::Model& m, int64_t num_ps, const Partitioner& part) {
  Placement placement(num_ps, part);
  for (const auto& v : m.variables()) RETURN_IF_ERROR(placement.Add(v.name, v.shape).status());
  return placement;
}

std::vector<std::string> VariableNames(const model::Model& m) {
  std::vector<std::string> names;
  for (const auto& v : m.variables()) names.push_back(v.name);
  return names;
}

nlohmann::json PsStepSeconds::ToJson() const {
  return {{"input", input},   {"pull_wait", pull_wait}, {"compute", compute}, {"push", push},
          {"record", record}, {"push_wait", push_wait}, {"closure", closure}};
}

void PsStepSeconds::Add(const nlohmann::json& j) {
  if (!j.is_object()) return;
  auto add = [&](const char* key, double& into) {
    if (auto it = j.find(key); it != j.end() && it->is_number()) into += it->get<double>();
  };
  add("input", input);
  add("pull_wait", pull_wait);
  add("compute", compute);
  add("push", push);
  add("record", record);
  add("push_wait", push_wait);
  add("closure", closure);
}

nlohmann::json StatsToJson(const BatchStats& s, int64_t steps, int64_t examples) {
  nlohmann::json j = s.ToJson();
  j["steps"] = steps;
  j["examples"] = examples;
  return j;
}

std::optional<RowPlan> PlanRows(const model::JobConfig& job, const model::Model& m, bool pull_rows) {
  // Rows-only pulls remap the ids of a Sequential model's first Embedding,
  // which are its whole input; a Functional model's Embedding pulls its
  // whole table (its ids are one input among several).
  if (!pull_rows || job.model.functional() || job.model.layers.empty() ||
      job.model.layers[0].type != model::LayerType::kEmbedding)
    return std::nullopt;
  const model::LayerSpec& e = job.model.layers[0];
  const int64_t bag = job.model.input_shape.empty() ? 1 : NumElements(job.model.input_shape);
  const int64_t capacity = job.batch_size * bag;
  if (capacity <= 0 || capacity >= e.input_dim || m.variables().empty()) return std::nullopt;
  return RowPlan{0, m.variables()[0].name, e.name, e.input_dim, capacity};
}

}  // namespace tfjob::strategy::ps_detail
