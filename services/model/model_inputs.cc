// The model's inputs: the check a batch must pass, several named inputs
// packed into the one tensor the data pipeline carries and unpacked again,
// and string terms looked up for a model whose first layer is a lookup.
#include <cstring>

#include "services/model/layer_factories.h"
#include "services/model/layer_shapes.h"
#include "services/model/model.h"

namespace tfjob::model {

Status Model::CheckInput(const Tensor& x) const {
  bool ok = x.dtype() == spec_.input_dtype && x.rank() == static_cast<int>(spec_.input_shape.size()) + 1 &&
            std::equal(spec_.input_shape.begin(), spec_.input_shape.end(), x.shape().begin() + 1);
  if (ok) return Status::Ok();
  Shape want{-1};
  want.insert(want.end(), spec_.input_shape.begin(), spec_.input_shape.end());
  return InvalidArgument("features " + x.DebugString() + " do not match model.input_shape: expected " +
                         std::string(DTypeName(spec_.input_dtype)) + ShapeString(want) + " (batch first)");
}

StatusOr<Tensor> Model::PackInputs(std::span<const Tensor> xs) const {
  if (xs.size() != spec_.inputs.size()) {
    return InvalidArgument("the model has " + std::to_string(spec_.inputs.size()) + " inputs, got " +
                           std::to_string(xs.size()) + " tensors");
  }
  if (!packed_input()) return xs[0];
  const int64_t batch = xs.empty() || xs[0].rank() < 1 ? 0 : xs[0].dim(0);
  const int64_t width = spec_.input_shape[0];
  Tensor out = Tensor::Zeros(spec_.input_dtype, {batch, width});
  for (size_t i = 0; i < xs.size(); ++i) {
    const InputSpec& in = spec_.inputs[i];
    if (!internal::Matches(xs[i], in.dtype, in.shape) || xs[i].dim(0) != batch || !xs[i].on_cpu()) {
      return InvalidArgument("input \"" + in.name + "\": " + internal::Expected(in.dtype, in.shape, xs[i]));
    }
    const int64_t n = NumElements(in.shape), at = input_offsets_[i];
    for (int64_t b = 0; b < batch; ++b) {
      if (spec_.input_dtype == DType::kFloat32) {
        std::copy_n(xs[i].data<float>() + b * n, n, out.data<float>() + b * width + at);
      } else if (in.dtype == DType::kInt64) {
        std::copy_n(xs[i].data<int64_t>() + b * n, n, out.data<int64_t>() + b * width + at);
      } else {
        for (int64_t k = 0; k < n; ++k) {
          uint32_t bits;
          std::memcpy(&bits, xs[i].data<float>() + b * n + k, sizeof bits);
          out.data<int64_t>()[b * width + at + k] = static_cast<int64_t>(bits);
        }
      }
    }
  }
  return out;
}

StatusOr<std::vector<Tensor>> Model::UnpackInputs(const Tensor& x) const {
  RETURN_IF_ERROR(CheckInput(x));
  if (!packed_input()) return std::vector<Tensor>{x};
  if (!x.on_cpu()) return InvalidArgument("packed inputs are unpacked on the host, got " + x.DebugString());
  const int64_t batch = x.dim(0), width = spec_.input_shape[0];
  std::vector<Tensor> out;
  for (size_t i = 0; i < spec_.inputs.size(); ++i) {
    const InputSpec& in = spec_.inputs[i];
    const int64_t n = NumElements(in.shape), at = input_offsets_[i];
    Tensor t = Tensor::Zeros(in.dtype, internal::WithBatch(batch, in.shape));
    for (int64_t b = 0; b < batch; ++b) {
      if (x.dtype() == DType::kFloat32) {
        std::copy_n(x.data<float>() + b * width + at, n, t.data<float>() + b * n);
      } else if (in.dtype == DType::kInt64) {
        std::copy_n(x.data<int64_t>() + b * width + at, n, t.data<int64_t>() + b * n);
      } else {
        for (int64_t k = 0; k < n; ++k) {
          const uint32_t bits = static_cast<uint32_t>(x.data<int64_t>()[b * width + at + k]);
          std::memcpy(t.data<float>() + b * n + k, &bits, sizeof bits);
        }
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

StatusOr<Tensor> Model::LookupStrings(const std::vector<std::string>& terms, const Shape& shape) const {
  if (!spec_.string_input) return FailedPrecondition("the model's input is not strings (model.input_dtype)");
  if (text_) {
    const int64_t n = shape.empty() ? 0 : shape[0];
    if (static_cast<int64_t>(terms.size()) != n) {
      return InvalidArgument("layer \"" + TextLayer(spec_)->name + "\" takes one text per example, got " +
                             std::to_string(terms.size()) + " strings for " + std::to_string(n) + " examples");
    }
    return text_->Vectorize(terms);
  }
  for (const Node& node : nodes_) {
    if (node.inputs.size() != 1 || node.inputs[0].node >= 0) continue;
    const Lookup* table = internal::LookupTable(*node.impl);
    if (!table) continue;
    auto ids = table->LookupStrings(terms, shape);
    if (!ids.ok()) return ids.status().WithContext("layer \"" + node.impl->name() + "\"");
    return ids;
  }
  return Internal("the model's input feeds no StringLookup");
}

}  // namespace tfjob::model
