#include "services/model/tfjs_export.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/files.h"
#include "common/json_reader.h"

#ifndef TFJOB_VERSION
#define TFJOB_VERSION "unknown"
#endif

namespace tfjob::model {
namespace {

using json = nlohmann::json;

// The shard holds the host's float32 bytes as they are.
static_assert(std::endian::native == std::endian::little, "TF.js weight shards are little-endian");

constexpr const char* kShard = "group1-shard1of1.bin";

json ShapeJson(const Shape& s) { return json(std::vector<int64_t>(s.begin(), s.end())); }

// The variables of `m` in the manifest's order: per layer, trainable then
// non-trainable (TF.js' layer.weights), layers in order.
std::vector<size_t> ManifestOrder(const Model& m) {
  std::vector<size_t> order;
  for (size_t l = 0; l < m.num_layers(); ++l) {
    auto [first, count] = m.layer_variables(l);
    for (bool trainable : {true, false}) {
      for (size_t v = first; v < first + count; ++v) {
        if (m.variables()[v].trainable == trainable) order.push_back(v);
      }
    }
  }
  return order;
}

std::string Join(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

// One weight of a manifest: where its bytes are in its group's data.
struct Entry {
  Shape shape;
  const std::string* data = nullptr;  // the group's shards, concatenated
  size_t offset = 0;
  bool used = false;
};

StatusOr<Shape> ReadShape(const json& v, const std::string& where) {
  if (!v.is_array()) return InvalidArgument(where + ": \"shape\" is not a list of sizes");
  Shape s;
  for (const json& d : v) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return InvalidArgument(where + ": \"shape\" holds " + d.dump() + ", not a size");
    }
    s.push_back(d.get<int64_t>());
  }
  return s;
}

// One group of the manifest: its shards read and concatenated, each weight's
// place in them recorded in `entries`.
Status ReadGroup(const json& group, size_t g, const std::string& dir, const std::string& source,
                 std::vector<std::string>& datas, std::map<std::string, Entry>& entries) {
  const std::string where = source + ": weightsManifest[" + std::to_string(g) + "]";
  if (!group.is_object() || !group.contains("paths") || !group["paths"].is_array() || !group.contains("weights") ||
      !group["weights"].is_array()) {
    return InvalidArgument(where + ": expected {\"paths\": [...], \"weights\": [...]}");
  }
  std::string& data = datas[g];
  for (const json& p : group["paths"]) {
    if (!p.is_string()) return InvalidArgument(where + ": paths holds " + p.dump() + ", not a file name");
    auto bytes = ReadFile(Join(dir, p.get<std::string>()));
    if (!bytes.ok()) return bytes.status();
    data += *bytes;
  }
  size_t offset = 0;
  for (const json& w : group["weights"]) {
    if (!w.is_object() || !w.contains("name") || !w["name"].is_string() || !w.contains("shape")) {
      return InvalidArgument(where + ": expected weights as {\"name\": ..., \"shape\": [...], \"dtype\": ...}");
    }
    const std::string name = w["name"].get<std::string>();
    const std::string at = where + ": weight \"" + name + "\"";
    const std::string dtype = w.contains("dtype") && w["dtype"].is_string() ? w["dtype"].get<std::string>() : "";
    if (dtype != "float32") return InvalidArgument(at + ": dtype " + w.value("dtype", json()).dump() + ", not float32");
    if (w.contains("quantization") && !w["quantization"].is_null()) {
      return InvalidArgument(at + ": quantized weights are not supported (export without quantization)");
    }
    ASSIGN_OR_RETURN(Shape shape, ReadShape(w["shape"], at));
    const size_t bytes = static_cast<size_t>(NumElements(shape)) * sizeof(float);
    if (offset + bytes > data.size()) {
      return DataLoss(at + ": the shards hold " + std::to_string(data.size()) + " bytes, the weights up to it " +
                      std::to_string(offset + bytes));
    }
    if (!entries.emplace(name, Entry{shape, &data, offset}).second) {
      return InvalidArgument(at + ": the manifest names it twice");
    }
    offset += bytes;
  }
  if (offset != data.size()) {
    return DataLoss(where + ": the shards hold " + std::to_string(data.size()) + " bytes, the weights " +
                    std::to_string(offset));
  }
  return Status::Ok();
}

StatusOr<std::vector<Tensor>> Import(const Model& m, const std::string& dir) {
  const std::string source = Join(dir, "model.json");
  ASSIGN_OR_RETURN(json doc, ReadJsonFile(source));
  if (!doc.is_object() || !doc.contains("weightsManifest") || !doc["weightsManifest"].is_array()) {
    return InvalidArgument(source + ": no weightsManifest (not a TF.js layers model)");
  }
  const json& manifest = doc["weightsManifest"];
  std::vector<std::string> datas(manifest.size());
  std::map<std::string, Entry> entries;
  for (size_t g = 0; g < manifest.size(); ++g) {
    RETURN_IF_ERROR(ReadGroup(manifest[g], g, dir, source, datas, entries));
  }
  std::vector<Tensor> values;
  for (const VariableSpec& v : m.variables()) {
    auto it = entries.find(v.name);
    if (it == entries.end()) {
      return InvalidArgument(source + ": weight \"" + v.name + "\" (float32" + ShapeString(v.shape) +
                             ") of the model is missing");
    }
    Entry& e = it->second;
    if (e.shape != v.shape) {
      return InvalidArgument(source + ": weight \"" + v.name + "\" is float32" + ShapeString(e.shape) +
                             ", the model's is float32" + ShapeString(v.shape));
    }
    Tensor t = Tensor::Zeros(DType::kFloat32, v.shape);
    std::memcpy(t.raw(), e.data->data() + e.offset, t.bytes());
    values.push_back(std::move(t));
    e.used = true;
  }
  for (const auto& [name, e] : entries) {
    if (!e.used) {
      return InvalidArgument(source + ": weight \"" + name + "\" is not a variable of the model (its variables: " +
                             std::to_string(m.variables().size()) + ", named \"<layer>/<weight>\")");
    }
  }
  return values;
}

json TensorValues(const Tensor& t) {
  if (t.dtype() == DType::kInt64) return json(std::vector<int64_t>(t.flat<int64_t>().begin(), t.flat<int64_t>().end()));
  return json(std::vector<float>(t.flat<float>().begin(), t.flat<float>().end()));
}

}  // namespace

Status ExportTfjs(const Model& m, std::span<const Tensor> values, const json& topology, const std::string& dir) {
  if (values.size() != m.variables().size()) {
    return InvalidArgument("the model has " + std::to_string(m.variables().size()) + " variables, got " +
                           std::to_string(values.size()) + " values");
  }
  json weights = json::array();
  std::string shard;
  for (size_t v : ManifestOrder(m)) {
    const VariableSpec& spec = m.variables()[v];
    const Tensor& t = values[v];
    if (t.dtype() != DType::kFloat32 || t.shape() != spec.shape || !t.on_cpu()) {
      return InvalidArgument("variable " + spec.name + " should be float32" + ShapeString(spec.shape) +
                             " on the host, got " + t.DebugString());
    }
    weights.push_back({{"name", spec.name}, {"shape", ShapeJson(spec.shape)}, {"dtype", "float32"}});
    shard.append(reinterpret_cast<const char*>(t.raw()), t.bytes());
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status(Code::kPermissionDenied, dir + ": cannot create the directory (" + ec.message() + ")");
  RETURN_IF_ERROR(WriteFileAtomic(Join(dir, kShard), shard));
  json doc = {{"format", "layers-model"},
              {"generatedBy", std::string("tfjob-runtime ") + TFJOB_VERSION},
              {"convertedBy", nullptr},
              {"modelTopology", topology},
              {"weightsManifest", json::array({{{"paths", json::array({kShard})}, {"weights", weights}}})}};
  return WriteFileAtomic(Join(dir, "model.json"), doc.dump() + "\n");
}

StatusOr<std::vector<Tensor>> ImportTfjs(const Model& m, const std::string& dir) {
  // The checks above leave nlohmann nothing to throw; should one be missed,
  // a bad file is still an error, never a crash.
  try {
    return Import(m, dir);
  } catch (const json::exception& e) {
    return InvalidArgument(Join(dir, "model.json") + ": not a TF.js layers model (" + e.what() + ")");
  }
}

Status WritePredictions(Model& m, std::span<const Tensor> values, const Tensor& features, int64_t n,
                        const std::string& path) {
  if (n < 1) return InvalidArgument("predictions: the number of examples must be >= 1");
  const int64_t rows = std::min<int64_t>(n, features.dim(0));
  ASSIGN_OR_RETURN(Tensor x, features.Rows(0, rows));
  ASSIGN_OR_RETURN(Tensor pred, m.Predict(values, x));
  std::vector<Tensor> parts{x};
  if (m.packed_input()) {
    ASSIGN_OR_RETURN(parts, m.UnpackInputs(x));
  }
  json inputs = json::array();
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string name = i < m.inputs().size() ? m.inputs()[i].name : "input";
    inputs.push_back({{"name", name},
                      {"dtype", parts[i].dtype() == DType::kInt64 ? "int64" : "float32"},
                      {"shape", ShapeJson(parts[i].shape())},
                      {"values", TensorValues(parts[i])}});
  }
  json doc = {{"inputs", inputs},
              {"predictions", {{"shape", ShapeJson(pred.shape())}, {"values", TensorValues(pred)}}}};
  return WriteFileAtomic(path, doc.dump() + "\n");
}

}  // namespace tfjob::model
