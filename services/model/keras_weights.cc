#include "services/model/keras_weights.h"

#include <hdf5.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "services/model/keras_model.h"

namespace tfjob::model {
namespace {

// Closes an HDF5 handle when it goes out of scope.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

class Writer {
 public:
  explicit Writer(std::string path) : path_(std::move(path)) {}

  Status Open() {
    // HDF5 prints its error stack to stderr by default; errors are returned here instead.
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    file_ = H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file_ < 0) return Status(Code::kPermissionDenied, path_ + ": HDF5 cannot create the file");
    return Status::Ok();
  }
  ~Writer() {
    if (file_ >= 0) H5Fclose(file_);
  }

  // A group at `path` ("layers/dense/vars"), with its parents.
  StatusOr<hid_t> Group(const std::string& path) {
    auto it = groups_.find(path);
    if (it != groups_.end()) return it->second->get();
    const size_t slash = path.rfind('/');
    hid_t parent = file_;
    std::string leaf = path;
    if (slash != std::string::npos) {
      ASSIGN_OR_RETURN(parent, Group(path.substr(0, slash)));
      leaf = path.substr(slash + 1);
    }
    auto g =
        std::make_unique<Handle>(H5Gcreate2(parent, leaf.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (!g->ok()) return Internal(path_ + ": HDF5 cannot create group /" + path);
    const hid_t id = g->get();
    groups_.emplace(path, std::move(g));
    return id;
  }

  // A dataset `name` in group `group`: float32 or int64 little-endian.
  Status Dataset(const std::string& group, const std::string& name, const Shape& shape, const void* data, bool int64) {
    ASSIGN_OR_RETURN(hid_t g, Group(group));
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    Handle space(
        shape.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
        H5Sclose);
    if (!space.ok()) return Internal(path_ + ": HDF5 cannot make a dataspace for " + group + "/" + name);
    const hid_t file_type = int64 ? H5T_STD_I64LE : H5T_IEEE_F32LE;
    const hid_t mem_type = int64 ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT;
    Handle ds(H5Dcreate2(g, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (!ds.ok()) return Internal(path_ + ": HDF5 cannot create dataset /" + group + "/" + name);
    if (H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
      return Internal(path_ + ": HDF5 cannot write dataset /" + group + "/" + name);
    }
    return Status::Ok();
  }

  Status Close() {
    groups_.clear();
    const herr_t rc = H5Fclose(file_);
    file_ = -1;
    if (rc < 0) return Internal(path_ + ": HDF5 cannot close the file");
    return Status::Ok();
  }

 private:
  std::string path_;
  hid_t file_ = -1;
  std::map<std::string, std::unique_ptr<Handle>> groups_;
};

// Where Keras 3 keeps a layer's variables, below layers/<name>, with how
// many of the layer's variables (in order) each group holds: a layer's own
// in vars; a recurrent layer's in its cell (cell/vars); Bidirectional's in
// its two copies (forward_layer/..., backward_layer/...); TimeDistributed's
// in its layer (layer/...).
std::vector<std::pair<std::string, size_t>> KerasGroups(const LayerSpec& spec, size_t count) {
  auto own = [](const LayerSpec& s) {
    const bool cell = s.type == LayerType::kSimpleRNN || s.type == LayerType::kLSTM || s.type == LayerType::kGRU;
    return std::string(cell ? "/cell/vars" : "/vars");
  };
  if (spec.type == LayerType::kBidirectional && spec.wrapped.size() == 2) {
    return {{"/forward_layer" + own(spec.wrapped[0]), count / 2},
            {"/backward_layer" + own(spec.wrapped[1]), count / 2}};
  }
  if (spec.type == LayerType::kTimeDistributed && spec.wrapped.size() == 1) {
    return {{"/layer" + own(spec.wrapped[0]), count}};
  }
  return {{own(spec), count}};
}

}  // namespace

Status ExportKerasWeights(const Model& m, const std::vector<Tensor>& values, const std::string& path) {
  const std::string suffix = ".weights.h5";
  if (path.size() < suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return InvalidArgument("weights file " + path + ": the name must end in .weights.h5, as Keras requires");
  }
  if (values.size() != m.variables().size()) {
    return InvalidArgument("the model has " + std::to_string(m.variables().size()) + " variables, got " +
                           std::to_string(values.size()) + " values");
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].dtype() != DType::kFloat32 || values[i].shape() != m.variables()[i].shape) {
      return InvalidArgument("variable " + m.variables()[i].name + " should be float32" +
                             ShapeString(m.variables()[i].shape) + ", got " + values[i].DebugString());
    }
  }
  // Written beside the target and renamed over it, so a failed export never
  // leaves a half-written file under the real name.
  const std::string tmp = path + ".tmp";
  {
    Writer w(tmp);
    RETURN_IF_ERROR(w.Open());
    RETURN_IF_ERROR(w.Group("vars").status());
    std::map<std::string, int> used;
    for (size_t l = 0; l < m.num_layers(); ++l) {
      const LayerSpec& spec = m.layer_spec(l);
      if (spec.type == LayerType::kOutputPart) continue;  // not a Keras layer (spec.h)
      std::string name = KerasSnakeCase(std::string(LayerTypeName(spec.type)));
      const int n = used[name]++;
      // Appended piece by piece: GCC 12 warns (-Wrestrict) on "literal" + string.
      if (n > 0) name.append("_").append(std::to_string(n));
      std::string base = "layers/";
      base.append(name);
      RETURN_IF_ERROR(w.Group(base + "/vars").status());
      auto [first, count] = m.layer_variables(l);
      std::string group = base + "/vars";
      int k = 0;
      for (const auto& [where, n] : KerasGroups(spec, count)) {
        group = base + where;
        RETURN_IF_ERROR(w.Group(group).status());
        k = 0;
        // Trainable variables first, then the rest, as Keras lists them.
        for (bool trainable : {true, false}) {
          for (size_t v = first; v < first + n; ++v) {
            if (m.variables()[v].trainable != trainable) continue;
            Shape shape = values[v].shape();
            if (spec.type == LayerType::kNormalization && spec.axis_none) shape = {};  // Keras' scalar statistics
            RETURN_IF_ERROR(w.Dataset(group, std::to_string(k++), shape, values[v].data<float>(), false));
          }
        }
        first += n;
      }
      if (spec.type == LayerType::kNormalization && count > 0) {
        const int64_t adapted = m.adapt_count(l);
        RETURN_IF_ERROR(w.Dataset(group, std::to_string(k++), {}, &adapted, true));
      }
    }
    RETURN_IF_ERROR(w.Close());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Internal(path + ": cannot move the written file into place");
  }
  return Status::Ok();
}

}  // namespace tfjob::model
