// The argument readers every Keras layer shares (weights' initializers,
// regularizers and constraints, activation, padding), declared in
// keras_config.h. Split from keras_model.cc, which reads the layers.
#include "common/json_reader.h"
#include "services/model/keras_config.h"
#include "services/model/layers.h"

namespace tfjob::model::keras {

using json = nlohmann::json;

Status InitializerArgument(Config& c, const std::string& key, Initializer& out) {
  const json* v = c.Take(key);
  if (!v) return Status::Ok();
  auto init = ParseInitializer(*v);
  if (!init.ok()) return c.Error("argument " + key + ": " + init.status().message());
  out = *init;
  return Status::Ok();
}

Status RegularizerArgument(Config& c, const std::string& key, Regularizer& out) {
  const json* v = c.Take(key);
  if (!v) return Status::Ok();
  auto bad = [&](const std::string& why) { return c.Error("argument " + key + "=" + Dump(*v) + ": " + why); };
  std::string name;
  json config = json::object();
  if (v->is_string()) {
    name = v->get<std::string>();
  } else if (v->is_object() && v->contains("class_name") && (*v)["class_name"].is_string()) {
    name = (*v)["class_name"].get<std::string>();
    if (v->contains("config") && (*v)["config"].is_object()) config = (*v)["config"];
  } else {
    return bad("not a regularizer");
  }
  Regularizer r;
  // Keras' defaults: L1(0.01), L2(0.01), L1L2(0, 0); the names l1, l2, l1_l2.
  if (name == "L1" || name == "l1") {
    r.l1 = 0.01;
  } else if (name == "L2" || name == "l2") {
    r.l2 = 0.01;
  } else if (name == "L1L2" || name == "l1_l2") {
    r.l1 = name == "l1_l2" ? 0.01 : 0;
    r.l2 = name == "l1_l2" ? 0.01 : 0;
  } else {
    return bad("only L1, L2 and L1L2 are supported");
  }
  for (auto it = config.begin(); it != config.end(); ++it) {
    const bool l1 = it.key() == "l1" && name != "L2" && name != "l2";
    const bool l2 = it.key() == "l2" && name != "L1" && name != "l1";
    if (!l1 && !l2) return bad("argument " + it.key() + " is not supported");
    if (!it->is_number() || it->get<double>() < 0) return bad(it.key() + " must be a number >= 0");
    (l1 ? r.l1 : r.l2) = it->get<double>();
  }
  out = r;
  return Status::Ok();
}

Status ConstraintArgument(Config& c, const std::string& key, Constraint& out) {
  const json* v = c.Take(key);
  if (!v) return Status::Ok();
  auto bad = [&](const std::string& why) { return c.Error("argument " + key + "=" + Dump(*v) + ": " + why); };
  std::string name;
  json config = json::object();
  if (v->is_string()) {
    name = v->get<std::string>();
  } else if (v->is_object() && v->contains("class_name") && (*v)["class_name"].is_string()) {
    name = (*v)["class_name"].get<std::string>();
    if (v->contains("config") && (*v)["config"].is_object()) config = (*v)["config"];
  } else {
    return bad("not a constraint");
  }
  Constraint k;
  std::set<std::string> allowed;
  if (name == "MaxNorm" || name == "max_norm") {
    k.kind = Constraint::Kind::kMaxNorm;
    allowed = {"max_value", "axis"};
  } else if (name == "NonNeg" || name == "non_neg") {
    k.kind = Constraint::Kind::kNonNeg;
  } else if (name == "UnitNorm" || name == "unit_norm") {
    k.kind = Constraint::Kind::kUnitNorm;
    allowed = {"axis"};
  } else if (name == "MinMaxNorm" || name == "min_max_norm") {
    k.kind = Constraint::Kind::kMinMaxNorm;
    k.max_value = 1;
    allowed = {"min_value", "max_value", "rate", "axis"};
  } else {
    return bad("only MaxNorm, NonNeg, UnitNorm and MinMaxNorm are supported");
  }
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (!allowed.count(it.key())) return bad("argument " + it.key() + " is not supported");
    if (it.key() == "axis") {
      k.axis.clear();
      if (it->is_number_integer()) {
        k.axis.push_back(it->get<int64_t>());
      } else if (it->is_array()) {
        for (const json& a : *it) {
          if (!a.is_number_integer()) return bad("axis must be an integer or a list of them");
          k.axis.push_back(a.get<int64_t>());
        }
      } else {
        return bad("axis must be an integer or a list of them");
      }
      continue;
    }
    if (!it->is_number()) return bad(it.key() + " must be a number");
    const double x = it->get<double>();
    if (it.key() == "min_value") k.min_value = x;
    if (it.key() == "max_value") k.max_value = x;
    if (it.key() == "rate") k.rate = x;
  }
  out = k;
  return Status::Ok();
}

Status WeightArguments(Config& c, LayerSpec& s, bool bias) {
  RETURN_IF_ERROR(InitializerArgument(c, "kernel_initializer", s.kernel_initializer));
  RETURN_IF_ERROR(RegularizerArgument(c, "kernel_regularizer", s.kernel_regularizer));
  RETURN_IF_ERROR(ConstraintArgument(c, "kernel_constraint", s.kernel_constraint));
  RETURN_IF_ERROR(RegularizerArgument(c, "activity_regularizer", s.activity_regularizer));
  if (bias) {
    RETURN_IF_ERROR(InitializerArgument(c, "bias_initializer", s.bias_initializer));
    RETURN_IF_ERROR(RegularizerArgument(c, "bias_regularizer", s.bias_regularizer));
    RETURN_IF_ERROR(ConstraintArgument(c, "bias_constraint", s.bias_constraint));
  }
  for (const char* k : {"lora_rank", "lora_alpha", "quantization_config"}) RETURN_IF_ERROR(c.Null(k));
  return Status::Ok();
}

Status ActivationArgument(Config& c, LayerSpec& s, bool required) {
  const json* a = c.Take("activation");
  if (!a) {
    if (required) return c.Error("argument activation is missing");
    return Status::Ok();
  }
  if (!a->is_string()) return c.Error("argument activation=" + Dump(*a) + " is not supported (a built-in name)");
  auto act = ParseActivation(a->get<std::string>());
  if (!act.ok()) return c.Error("argument activation: " + act.status().message());
  s.activation = *act;
  return Status::Ok();
}

Status PaddingArgument(Config& c, LayerSpec& s) {
  std::string p = "valid";
  RETURN_IF_ERROR(c.String("padding", p));
  if (p == "valid")
    s.padding = Padding::kValid;
  else if (p == "same")
    s.padding = Padding::kSame;
  else
    return c.Error("argument padding=\"" + p + "\" is not supported (valid, same)");
  return c.Only("data_format", {"channels_last"}, "only channels_last (NHWC)");
}

}  // namespace tfjob::model::keras
