// The runtime's Keras layers and models against TensorFlow.js 4.22, case by
// case: services/model/tests/data/tfjs/layers.json (one case per layer and
// argument) and models_goldens.json (whole models), written by
// tools/tfjs/gen_goldens.js (see there, and golden_lib.js, for the format
// and for what TF.js lacks or gets wrong and is therefore kept out).
//
// Per case: the Keras JSON TF.js wrote (model.toJSON) is parsed and built
// (mean squared error, so no final activation is fused into the loss); the
// golden weights are given to the variables by name; the inputs are packed;
// the model runs forward in inference mode and backward from dL/d(output) =
// upstream (L = sum(output * upstream)). The output, the gradient of every
// trainable weight and of every float32 input must each be within
// atol + rtol * |want| of TF.js', with the case's own rtol and atol (the
// generator measured them; they are never widened here). Cases without
// "grads" are forward only (their "note" says why).
//
// A case whose model uses a layer class the runtime does not have yet is
// skipped, but only for the classes in kNotYetSupported; any other parse or
// build failure fails the case, so a layer that regresses cannot hide.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "services/model/keras_model.h"
#include "services/model/model.h"
#include "tests/support/subprocess.h"

namespace tfjob::model {
namespace {

using json = nlohmann::json;

// Layer classes the runtime does not parse yet: a case whose parse fails
// with "unsupported layer <Class>" for one of these is skipped. Remove a
// class once it is implemented (NotYetSupportedListIsCurrent fails until
// then).
const std::set<std::string> kNotYetSupported = {
    // (none: every class the goldens use parses)
};

// TF.js 4.22's SeparableConv.getConfig() (tfjs-layers convolutional.js)
// leaves out depth_multiplier, so its JSON reads as Keras' default 1 (TF.js
// reloading it would build multiplier 1 too, and its weights would not
// fit); the multiplier survives only as the last dimension of the depthwise
// kernel [kh, kw, in, multiplier]. Put it back from the golden
// weights, as TF.js meant it. Nothing else in the model JSON is changed.
json WithTfjsFixes(json model, const json& weights) {
  json* layers = nullptr;
  if (model.contains("config") && model["config"].is_object() && model["config"].contains("layers")) {
    layers = &model["config"]["layers"];
  }
  if (!layers || !layers->is_array()) return model;
  for (json& l : *layers) {
    if (l.value("class_name", "") != "SeparableConv2D" || !l.contains("config") || !l["config"].is_object()) continue;
    json& cfg = l["config"];
    if (cfg.contains("depth_multiplier")) continue;
    const std::string kernel = cfg.value("name", "") + "/depthwise_kernel";
    for (const json& w : weights) {
      if (w.value("name", "") == kernel && w.contains("shape") && w["shape"].size() == 4) {
        cfg["depth_multiplier"] = w["shape"][3];
      }
    }
  }
  return model;
}

// Specific cases whose TF.js result differs from Keras' meaning in a way
// the test cannot undo, or that use an argument the runtime refuses (one
// line naming it) until it is implemented, with the reason. Such a case is
// skipped.
const std::map<std::string, std::string> kKnownDifferences = {
    {"up_sampling2d_bilinear",
     "UpSampling2D interpolation \"bilinear\" is refused (nearest only); TF.js also maps pixels the TF1 way "
     "(no half-pixel centres), unlike tf.keras 2 and Keras 3"},
};

const char* const kFiles[] = {"layers.json", "models_goldens.json"};

std::string GoldenDir() { return tfjob::testing::SourceDir() + "/services/model/tests/data/tfjs/"; }

// A golden file, parsed once per process; `error` says why it is not there.
struct GoldenFile {
  json doc;
  std::string error;
};

const GoldenFile& Load(const std::string& file) {
  static std::map<std::string, GoldenFile>* cache = new std::map<std::string, GoldenFile>;
  auto it = cache->find(file);
  if (it != cache->end()) return it->second;
  GoldenFile& g = (*cache)[file];
  const std::string path = GoldenDir() + file;
  std::ifstream in(path);
  if (!in) {
    g.error = "cannot read " + path + " (node tools/tfjs/gen_goldens.js writes it)";
    return g;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  g.doc = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (g.doc.is_discarded() || !g.doc.is_object() || !g.doc.contains("cases") || !g.doc["cases"].is_array()) {
    g.error = path + " is not a goldens file ({\"cases\": [...]})";
  }
  return g;
}

struct CaseRef {
  std::string file;
  size_t index = 0;  // into cases; npos for a file that did not load
  std::string name;  // the test's name: the case name in [A-Za-z0-9_]
};

std::string Sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out.empty() ? "_" : out;
}

std::vector<CaseRef> AllCases() {
  std::vector<CaseRef> refs;
  std::set<std::string> names;
  for (const char* file : kFiles) {
    const GoldenFile& g = Load(file);
    if (!g.error.empty()) {
      refs.push_back({file, std::string::npos, "unreadable_" + Sanitize(file)});
      continue;
    }
    const json& cases = g.doc["cases"];
    for (size_t i = 0; i < cases.size(); ++i) {
      std::string name = Sanitize(cases[i].value("name", "case" + std::to_string(i)));
      while (!names.insert(name).second) name += "_";
      refs.push_back({file, i, name});
    }
  }
  return refs;
}

// ---- comparisons ----

std::string IndexString(int64_t flat, const Shape& shape) {
  if (shape.empty()) return "[]";
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t n = std::max<int64_t>(shape[d], 1);
    idx[d] = flat % n;
    flat /= n;
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

// |got - want| <= atol + rtol * |want| elementwise; one failure naming the
// first few mismatches (with indices), how many, and the largest error.
void ExpectClose(const std::string& what, const Tensor& got, const Shape& shape, const json& want, double rtol,
                 double atol) {
  if (got.dtype() != DType::kFloat32) {
    ADD_FAILURE() << what << ": got " << got.DebugString() << ", want float32";
    return;
  }
  if (got.size() == 0 && NumElements(shape) > 0) {
    ADD_FAILURE() << what << ": the runtime returned no gradient (an empty tensor), want shape " << ShapeString(shape);
    return;
  }
  if (got.shape() != shape) {
    ADD_FAILURE() << what << ": got shape " << ShapeString(got.shape()) << ", want " << ShapeString(shape);
    return;
  }
  if (!want.is_array() || static_cast<int64_t>(want.size()) != got.size()) {
    ADD_FAILURE() << what << ": the golden has " << (want.is_array() ? want.size() : 0) << " values for shape "
                  << ShapeString(shape);
    return;
  }
  const float* g = got.data<float>();
  int64_t bad = 0;
  double max_err = 0, max_ratio = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double w = want[static_cast<size_t>(i)].get<double>();
    const double v = g[i];
    const double err = std::isfinite(v) ? std::fabs(v - w) : INFINITY;
    const double tol = atol + rtol * std::fabs(w);
    max_err = std::max(max_err, err);
    max_ratio = std::max(max_ratio, err / tol);
    if (!(err <= tol)) {
      if (bad < 5)
        first << "\n    " << IndexString(i, shape) << ": got " << v << ", want " << w << " (|diff| " << err << ")";
      ++bad;
    }
  }
  if (bad > 0) {
    ADD_FAILURE() << what << ": " << bad << " of " << got.size() << " values differ beyond atol " << atol << " + rtol "
                  << rtol << " * |want|; max |diff| " << max_err << " (" << max_ratio << "x the tolerance)"
                  << first.str();
  }
}

Shape ShapeOf(const json& j) { return j.get<Shape>(); }

std::string WeightList(const json& weights) {
  std::string s;
  for (const json& w : weights) {
    s += (s.empty() ? "" : ", ") + w.value("name", "?") + (w.contains("shape") ? ShapeString(ShapeOf(w["shape"])) : "");
  }
  return "[" + s + "]";
}

std::string VariableList(const std::vector<VariableSpec>& vars) {
  std::string s;
  for (const VariableSpec& v : vars) {
    s += (s.empty() ? "" : ", ") + v.name + ShapeString(v.shape) + (v.trainable ? "" : " (non-trainable)");
  }
  return "[" + s + "]";
}

std::string InputList(const std::vector<InputSpec>& ins) {
  std::string s;
  for (const InputSpec& in : ins) {
    s += (s.empty() ? "" : ", ") + in.name + std::string(DTypeName(in.dtype)) + ShapeString(in.shape);
  }
  return "[" + s + "]";
}

// "unsupported layer X": X, else "".
std::string UnsupportedClass(const Status& s) {
  if (s.code() != Code::kInvalidArgument) return "";
  static const std::string kTag = "unsupported layer ";
  const size_t at = s.message().find(kTag);
  if (at == std::string::npos) return "";
  size_t end = at + kTag.size();
  while (end < s.message().size() &&
         (std::isalnum(static_cast<unsigned char>(s.message()[end])) || s.message()[end] == '_'))
    ++end;
  return s.message().substr(at + kTag.size(), end - at - kTag.size());
}

Tensor Densify(const Gradient& g, const Shape& shape) {
  if (!g.sparse) return g.dense;
  Tensor d = Tensor::Zeros(DType::kFloat32, shape);
  const int64_t rows = g.indices.size();
  const int64_t row = rows > 0 ? g.values.size() / rows : 0;
  for (int64_t k = 0; k < rows; ++k) {
    const int64_t r = g.indices.data<int64_t>()[k];
    if (r < 0 || (r + 1) * row > d.size()) {
      ADD_FAILURE() << "sparse gradient row " << r << " outside " << ShapeString(shape);
      continue;
    }
    for (int64_t i = 0; i < row; ++i) d.data<float>()[r * row + i] += g.values.data<float>()[k * row + i];
  }
  return d;
}

// The test's name and file, not the bytes of the struct, in gtest's output.
void PrintTo(const CaseRef& r, std::ostream* os) { *os << r.file << ": " << r.name; }

class TfjsGoldenTest : public ::testing::TestWithParam<CaseRef> {};

TEST_P(TfjsGoldenTest, Matches) {
  const CaseRef& ref = GetParam();
  const GoldenFile& file = Load(ref.file);
  ASSERT_TRUE(file.error.empty()) << file.error;
  const json& c = file.doc["cases"][ref.index];
  const std::string name = c.value("name", ref.name);
  if (auto k = kKnownDifferences.find(name); k != kKnownDifferences.end()) {
    GTEST_SKIP() << "known difference: " << k->second;
  }
  const double rtol = c.at("rtol").get<double>(), atol = c.at("atol").get<double>();
  SCOPED_TRACE(ref.file + ": " + name + (c.contains("note") ? " (" + c["note"].get<std::string>() + ")" : ""));

  // Parse and build.
  auto spec = ParseKerasModel(WithTfjsFixes(c.at("model"), c.at("weights")), ref.file + ": " + name);
  if (!spec.ok()) {
    const std::string cls = UnsupportedClass(spec.status());
    if (!cls.empty() && kNotYetSupported.count(cls)) GTEST_SKIP() << "layer " << cls << " is not supported yet";
    FAIL() << "parse: " << spec.status().ToString();
  }
  auto created = Model::Create(*spec, LossSpec{LossType::kMeanSquaredError, false});
  if (!created.ok()) {
    const std::string cls = UnsupportedClass(created.status());
    if (!cls.empty() && kNotYetSupported.count(cls)) GTEST_SKIP() << "layer " << cls << " is not supported yet";
    FAIL() << "build: " << created.status().ToString();
  }
  Model& m = **created;

  // Weights, by name: one golden weight of the same shape per variable, and
  // every golden weight used.
  const json& weights = c.at("weights");
  const std::vector<VariableSpec>& vars = m.variables();
  std::vector<Tensor> values(vars.size());
  {
    std::map<std::string, size_t> golden;
    for (size_t i = 0; i < weights.size(); ++i) golden[weights[i].at("name").get<std::string>()] = i;
    std::set<size_t> used;
    std::string problems;
    for (size_t k = 0; k < vars.size(); ++k) {
      auto it = golden.find(vars[k].name);
      if (it == golden.end()) {
        problems += "\n  variable " + vars[k].name + " has no golden weight";
        continue;
      }
      const json& w = weights[it->second];
      const Shape shape = ShapeOf(w.at("shape"));
      if (shape != vars[k].shape) {
        problems +=
            "\n  " + vars[k].name + ": variable " + ShapeString(vars[k].shape) + ", golden " + ShapeString(shape);
        continue;
      }
      if (!used.insert(it->second).second) {
        problems += "\n  golden weight " + vars[k].name + " matches two variables";
        continue;
      }
      auto t = Tensor::FromVector(shape, w.at("values").get<std::vector<float>>());
      if (!t.ok()) {
        problems += "\n  " + vars[k].name + ": " + t.status().ToString();
        continue;
      }
      values[k] = *std::move(t);
    }
    for (size_t i = 0; i < weights.size(); ++i) {
      if (!used.count(i) &&
          std::none_of(vars.begin(), vars.end(), [&](const VariableSpec& v) { return v.name == weights[i]["name"]; })) {
        problems += "\n  golden weight " + weights[i]["name"].get<std::string>() + " matches no variable";
      }
    }
    ASSERT_TRUE(problems.empty()) << "weights do not match by name and shape:" << problems
                                  << "\n  variables: " << VariableList(vars)
                                  << "\n  golden:    " << WeightList(weights);
  }

  // Inputs, in the model's order (by name when there are several).
  const json& inputs = c.at("inputs");
  const std::vector<InputSpec>& ins = m.inputs();
  ASSERT_EQ(ins.size(), inputs.size()) << "the model has inputs " << InputList(ins) << ", the golden "
                                       << WeightList(inputs);
  std::vector<size_t> golden_of(ins.size());  // golden input of each model input
  for (size_t i = 0; i < ins.size(); ++i) {
    if (ins.size() == 1) {
      golden_of[i] = 0;
      continue;
    }
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const json& in) { return in.at("name") == ins[i].name; });
    ASSERT_TRUE(it != inputs.end()) << "model input " << ins[i].name << " is not in the golden's " << WeightList(inputs)
                                    << " (model: " << InputList(ins) << ")";
    golden_of[i] = static_cast<size_t>(it - inputs.begin());
  }
  std::vector<Tensor> xs;
  for (size_t i = 0; i < ins.size(); ++i) {
    const json& in = inputs[golden_of[i]];
    const Shape shape = ShapeOf(in.at("shape"));
    const std::string dtype = in.at("dtype").get<std::string>();
    if (dtype != "int32") {
      ASSERT_EQ(dtype, "float32") << "input " << in.at("name");
    }
    // (A StatusOr is never built from an OK Status: status.h asserts it.)
    StatusOr<Tensor> t = dtype == "int32" ? Tensor::FromVector(shape, in.at("values").get<std::vector<int64_t>>())
                                          : Tensor::FromVector(shape, in.at("values").get<std::vector<float>>());
    ASSERT_TRUE(t.ok()) << "input " << in.at("name") << ": " << t.status().ToString();
    ASSERT_EQ(t->dtype(), ins[i].dtype) << "input " << ins[i].name << ": the model takes " << DTypeName(ins[i].dtype)
                                        << ", the golden has " << dtype;
    xs.push_back(*std::move(t));
  }
  auto x = m.PackInputs(xs);
  ASSERT_TRUE(x.ok()) << "pack: " << x.status().ToString();

  const Shape out_shape = ShapeOf(c.at("output").at("shape"));
  if (!c.contains("grads")) {  // forward only
    auto y = m.Predict(values, *x);
    ASSERT_TRUE(y.ok()) << "predict: " << y.status().ToString();
    ExpectClose("output", *y, out_shape, c["output"]["values"], rtol, atol);
    return;
  }

  auto dy = Tensor::FromVector(out_shape, c.at("upstream").get<std::vector<float>>());
  ASSERT_TRUE(dy.ok()) << dy.status().ToString();
  auto b = m.Differentiate(values, *x, *std::move(dy), /*training=*/false);
  ASSERT_TRUE(b.ok()) << "differentiate: " << b.status().ToString();
  ExpectClose("output", b->output, out_shape, c["output"]["values"], rtol, atol);

  // Weight gradients: every trainable variable has one golden gradient, by
  // name, and every golden gradient a trainable variable.
  const json& grads = c["grads"];
  ASSERT_EQ(b->grads.size(), vars.size()) << "one gradient per variable";
  std::set<std::string> checked;
  for (size_t k = 0; k < vars.size(); ++k) {
    if (!vars[k].trainable) continue;
    auto it = std::find_if(grads.at("weights").begin(), grads.at("weights").end(),
                           [&](const json& g) { return g.at("name") == vars[k].name; });
    if (it == grads.at("weights").end()) {
      ADD_FAILURE() << "trainable variable " << vars[k].name
                    << " has no golden gradient (golden: " << WeightList(grads["weights"])
                    << "; variables: " << VariableList(vars) << ")";
      continue;
    }
    checked.insert(vars[k].name);
    ExpectClose("dL/d " + vars[k].name, Densify(b->grads[k], vars[k].shape), vars[k].shape, (*it)["values"], rtol,
                atol);
  }
  for (const json& g : grads.at("weights")) {
    EXPECT_TRUE(checked.count(g.at("name").get<std::string>()))
        << "golden gradient of " << g["name"] << " has no trainable variable (variables: " << VariableList(vars) << ")";
  }

  // Input gradients: every float32 input's.
  ASSERT_EQ(b->input_grads.size(), ins.size()) << "one input gradient per input";
  std::set<size_t> input_checked;
  for (size_t i = 0; i < ins.size(); ++i) {
    if (ins[i].dtype != DType::kFloat32) continue;
    const json& in = inputs[golden_of[i]];
    const std::string gname = in.at("name").get<std::string>();
    auto it = std::find_if(grads.at("inputs").begin(), grads.at("inputs").end(),
                           [&](const json& g) { return g.at("name") == gname; });
    if (it == grads.at("inputs").end()) {
      ADD_FAILURE() << "float input " << gname << " has no golden gradient";
      continue;
    }
    input_checked.insert(golden_of[i]);
    ExpectClose("dL/d input " + gname, b->input_grads[i], ShapeOf(in.at("shape")), (*it)["values"], rtol, atol);
  }
  EXPECT_EQ(input_checked.size(), grads.at("inputs").size()) << "some golden input gradient was not checked";
}

INSTANTIATE_TEST_SUITE_P(Tfjs, TfjsGoldenTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<CaseRef>& info) { return info.param.name; });

// Every class in kNotYetSupported is still reported unsupported by some
// case's parse, so the list shrinks as layers arrive.
TEST(TfjsGoldenListsTest, NotYetSupportedListIsCurrent) {
  std::set<std::string> unsupported, used;
  for (const char* f : kFiles) {
    const GoldenFile& g = Load(f);
    ASSERT_TRUE(g.error.empty()) << g.error;
    for (const json& c : g.doc["cases"]) {
      for (const json& cls : c.at("layers")) used.insert(cls.get<std::string>());
      auto spec = ParseKerasModel(WithTfjsFixes(c.at("model"), c.at("weights")), c.value("name", "?"));
      if (!spec.ok()) {
        const std::string cls = UnsupportedClass(spec.status());
        if (!cls.empty()) unsupported.insert(cls);
      }
    }
  }
  for (const std::string& cls : kNotYetSupported) {
    EXPECT_TRUE(used.count(cls)) << cls << " is in kNotYetSupported but no case uses it";
    EXPECT_TRUE(unsupported.count(cls)) << cls << " parses now: remove it from kNotYetSupported";
  }
}

// Every kKnownDifferences entry names a case.
TEST(TfjsGoldenListsTest, KnownDifferencesNameCases) {
  std::set<std::string> names;
  for (const char* f : kFiles) {
    const GoldenFile& g = Load(f);
    ASSERT_TRUE(g.error.empty()) << g.error;
    for (const json& c : g.doc["cases"]) names.insert(c.value("name", ""));
  }
  for (const auto& [name, reason] : kKnownDifferences) {
    EXPECT_TRUE(names.count(name)) << "kKnownDifferences names " << name << ", which is no case";
    EXPECT_FALSE(reason.empty()) << name;
  }
}

}  // namespace
}  // namespace tfjob::model
