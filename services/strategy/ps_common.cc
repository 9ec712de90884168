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
  if (!pull_rows || job.model.layers.empty() || m.variables().empty()) return std::nullopt;
  const model::ModelSpec& spec = job.model;
  const int64_t width = NumElements(m.input_shape());
  std::optional<RowPlan> best;
  auto consider = [&](size_t layer, int64_t offset, int64_t count) {
    const model::LayerSpec& e = spec.layers[layer];
    const int64_t capacity = job.batch_size * count;
    if (capacity <= 0 || capacity >= e.input_dim) return;
    if (best && best->input_dim >= e.input_dim) return;
    const size_t var = m.layer_variables(layer).first;
    best = RowPlan{};
    best->var = var;
    best->name = m.variables()[var].name;
    best->layer = e.name;
    best->input_dim = e.input_dim;
    best->capacity = capacity;
    best->layer_index = layer;
    best->id_offset = offset;
    best->id_count = count;
    best->width = width;
  };
  if (!spec.functional()) {
    if (spec.layers[0].type == model::LayerType::kEmbedding) consider(0, 0, width);
    return best;
  }
  // An Embedding called once, straight on an input no other call takes.
  std::vector<int> calls(spec.layers.size(), 0), takers(spec.inputs.size(), 0);
  for (const model::NodeSpec& n : spec.nodes) {
    ++calls[n.layer];
    for (const model::TensorRef& r : n.inputs) {
      if (r.node < 0) ++takers[static_cast<size_t>(r.input)];
    }
  }
  int64_t offset = 0;
  std::vector<int64_t> offsets;
  for (const model::InputSpec& in : spec.inputs) {
    offsets.push_back(offset);
    offset += NumElements(in.shape);
  }
  for (const model::NodeSpec& n : spec.nodes) {
    if (spec.layers[n.layer].type != model::LayerType::kEmbedding || calls[n.layer] != 1 || n.inputs.size() != 1 ||
        n.inputs[0].node >= 0) {
      continue;
    }
    const size_t input = static_cast<size_t>(n.inputs[0].input);
    if (takers[input] != 1 || spec.inputs[input].dtype != DType::kInt64) continue;
    consider(n.layer, offsets[input], NumElements(spec.inputs[input].shape));
  }
  return best;
}

}  // namespace tfjob::strategy::ps_detail
