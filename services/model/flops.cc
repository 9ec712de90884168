// Model::Flops: the multiply-add work of one example, per layer call, as a
// roofline counts it (model.h says what is counted).
#include <algorithm>
#include <string>

#include "services/model/layer_shapes.h"
#include "services/model/model.h"

namespace tfjob::model {
namespace {

bool HasSuffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Elements of one example's tensor; an unknown dimension (-1) counts as 1.
int64_t ExampleElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= std::max<int64_t>(d, 1);
  return n;
}

bool AppliedPerStep(LayerType t) {
  return t == LayerType::kSimpleRNN || t == LayerType::kLSTM || t == LayerType::kGRU || t == LayerType::kBidirectional;
}

// Kernel taps that land inside the input along one axis, summed over the
// output positions: with "same" padding the edge windows hang over zeros,
// which no kernel multiplies (so a count of whole windows would put a
// 3x3 convolution on 7x7 at 22 % more work than it does).
int64_t TapsInside(int64_t in, int64_t window, int64_t stride, Padding padding) {
  const internal::AxisGeometry g = internal::Geometry(in, window, stride, padding);
  int64_t taps = 0;
  for (int64_t o = 0; o < g.out; ++o) {
    const int64_t first = o * stride - g.pad_before;
    taps += std::max<int64_t>(0, std::min(first + window, in) - std::max<int64_t>(first, 0));
  }
  return taps;
}

// A Conv1D's or Conv2D's forward multiply-adds per example, counting only
// taps inside the input; -1 where the layer is not one (or is dilated).
int64_t ConvMultiplyAdds(const LayerSpec& spec, const Shape& in, const Shape& kernel) {
  if (spec.dilation_rate != std::array<int64_t, 2>{1, 1}) return -1;
  const int64_t channels = kernel.size() >= 2 ? kernel[kernel.size() - 2] * kernel.back() : 0;
  if (spec.type == LayerType::kConv2D && in.size() == 3) {
    return channels * TapsInside(in[0], spec.kernel_size[0], spec.strides[0], spec.padding) *
           TapsInside(in[1], spec.kernel_size[1], spec.strides[1], spec.padding);
  }
  if (spec.type == LayerType::kConv1D && in.size() == 2) {
    return channels * TapsInside(in[0], spec.kernel_size[0], spec.strides[0], spec.padding);
  }
  return -1;
}

}  // namespace

std::vector<Model::LayerFlops> Model::Flops() const {
  std::vector<LayerFlops> out;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    const LayerSpec& spec = layer_specs_[node.layer];
    Shape in_shape;
    bool input_needs_grad = false;
    if (!node.inputs.empty()) {
      const TensorRef& r = node.inputs[0];
      if (r.node >= 0) {
        in_shape = nodes_[r.node].out_shape;
        input_needs_grad = nodes_[r.node].needs_grad;
      } else if (r.input >= 0 && static_cast<size_t>(r.input) < spec_.inputs.size()) {
        in_shape = spec_.inputs[r.input].shape;
      }
    }
    LayerFlops f;
    f.name = spec.name;
    f.type = std::string(LayerTypeName(spec.type));
    if (f.type.find("Conv") != std::string::npos && !in_shape.empty()) f.input_channels = in_shape.back();
    const auto [first, count] = layer_vars_[node.layer];
    for (size_t v = first; v < first + count; ++v) {
      const VariableSpec& var = variables_[v];
      if (var.shape.size() < 2) continue;  // biases, scales: elementwise
      const int64_t k = ExampleElements(var.shape), cols = var.shape.back();
      // How many times per example the kernel is applied, and whether the
      // operand it multiplies needs its gradient (so backward computes it).
      int64_t uses = 0;
      bool operand_grad = input_needs_grad;
      if (AppliedPerStep(spec.type)) {
        uses = in_shape.empty() ? 1 : std::max<int64_t>(in_shape[0], 1);  // time steps
        if (HasSuffix(var.name, "/recurrent_kernel")) {
          operand_grad = true;  // the state, every step
        } else if (!HasSuffix(var.name, "/kernel")) {
          continue;
        }
      } else if (spec.type == LayerType::kConv2DTranspose && HasSuffix(var.name, "/kernel")) {
        // Applied at every input position: [kh, kw, filters, in channels].
        uses = in_shape.empty() ? 0 : ExampleElements(in_shape) / std::max<int64_t>(in_shape.back(), 1);
      } else if (HasSuffix(var.name, "/pointwise_kernel")) {
        uses = ExampleElements(node.out_shape) / std::max<int64_t>(cols, 1);
        operand_grad = true;  // the depthwise stage's output
      } else if (HasSuffix(var.name, "/depthwise_kernel")) {
        // One position per output position of the depthwise stage, which
        // has the layer's output's spatial shape.
        const int64_t out_channels = node.out_shape.empty() ? 1 : node.out_shape.back();
        uses = ExampleElements(node.out_shape) / std::max<int64_t>(out_channels, 1);
      } else if (HasSuffix(var.name, "/kernel")) {
        // Dense (on the last axis), Conv1D/2D: one use per output position.
        uses = ExampleElements(node.out_shape) / std::max<int64_t>(cols, 1);
      } else {
        continue;  // embeddings (a gather), normalization statistics
      }
      const int64_t conv = HasSuffix(var.name, "/kernel") ? ConvMultiplyAdds(spec, in_shape, var.shape) : -1;
      const int64_t forward = 2 * (conv >= 0 ? conv : k * uses);
      f.forward += forward;
      f.backward += forward;                    // the kernel's gradient
      if (operand_grad) f.backward += forward;  // the operand's gradient
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace tfjob::model
