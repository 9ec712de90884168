// Keras' layer wrappers, each holding the layers it wraps (built from
// LayerSpec::wrapped by MakeLayer) and passing them their share of the
// parameters:
//
// - Bidirectional runs a recurrent layer forward and a copy of it backward
//   (go_backwards flipped) over the same input, and merges their outputs
//   (concat on the last axis, sum, mul, ave). With return_sequences the
//   backward layer's sequence is turned back into input order first, as
//   Keras does, so step t of both halves saw input step t last. Variables:
//   the forward layer's, then the backward layer's.
// - TimeDistributed applies its layer to every time step: [batch, time,
//   ...] is seen by the layer as [batch * time, ...] (one call, one set of
//   variables), and its output reshaped back.
#include <algorithm>

#include "services/model/layers_more.h"
#include "services/tensor/eigen.h"

namespace tfjob::model::internal {
namespace {

using Mat = Eigen::Map<RowMatrix>;
using CMat = Eigen::Map<const RowMatrix>;

// x [batch, time, rest...] with the time axis reversed.
Tensor ReverseTime(const Tensor& x) {
  Tensor y = Tensor::Zeros(DType::kFloat32, x.shape());
  const int64_t batch = x.dim(0), steps = x.dim(1), row = x.size() / std::max<int64_t>(batch * steps, 1);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < steps; ++t) {
      const float* from = x.data<float>() + (b * steps + t) * row;
      std::copy(from, from + row, y.data<float>() + (b * steps + steps - 1 - t) * row);
    }
  }
  return y;
}

class Bidirectional final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (spec_.wrapped.size() != 2) return Error("needs a forward and a backward layer");
    halves_.clear();
    nvars_.clear();
    for (size_t i = 0; i < 2; ++i) {
      // Named as Keras names the copies, so the variables are
      // "<bidirectional>/forward_<layer>/kernel", as TF.js writes them.
      LayerSpec w = spec_.wrapped[i];
      w.name = spec_.name + (i == 0 ? "/forward_" : "/backward_") + w.name;
      ASSIGN_OR_RETURN(auto layer, MakeLayer(w));
      ASSIGN_OR_RETURN(Shape out, layer->Build(in, dtype));
      if (!halves_.empty() && out != out_half_) {
        return Error("the forward and backward layers' outputs differ (" + ShapeString(out_half_) + " and " +
                     ShapeString(out) + ")");
      }
      out_half_ = out;
      nvars_.push_back(layer->Variables().size());
      halves_.push_back(std::move(layer));
    }
    sequences_ = spec_.wrapped[0].return_sequences;
    in_shape_ = in;
    Shape out = out_half_;
    if (spec_.bidi_merge == BidiMerge::kConcat) out.back() *= 2;
    return out;
  }

  std::vector<VariableSpec> Variables() const override {
    std::vector<VariableSpec> v;
    for (const auto& h : halves_) {
      auto part = h->Variables();
      v.insert(v.end(), part.begin(), part.end());
    }
    return v;
  }

  MaskUse mask_use() const override { return MaskUse::kConsume; }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool training) override {
    RETURN_IF_ERROR(CheckInput(x));
    for (auto& h : halves_) h->SetInputMask(mask_);
    ASSIGN_OR_RETURN(Tensor yf, halves_[0]->Forward(params.first(nvars_[0]), x, training));
    ASSIGN_OR_RETURN(Tensor yb, halves_[1]->Forward(params.subspan(nvars_[0]), x, training));
    if (sequences_) yb = ReverseTime(yb);
    const int64_t rows = yf.size() / out_half_.back(), n = out_half_.back();
    CMat f(yf.data<float>(), rows, n), b(yb.data<float>(), rows, n);
    if (spec_.bidi_merge == BidiMerge::kConcat) {
      Shape shape = yf.shape();
      shape.back() *= 2;
      Tensor y = Tensor::Zeros(DType::kFloat32, shape);
      Mat out(y.data<float>(), rows, 2 * n);
      out.leftCols(n) = f;
      out.rightCols(n) = b;
      return y;
    }
    Tensor y = Tensor::Zeros(DType::kFloat32, yf.shape());
    Mat out(y.data<float>(), rows, n);
    switch (spec_.bidi_merge) {
      case BidiMerge::kSum: out = f + b; break;
      case BidiMerge::kMul:
        out = f.array() * b.array();
        yf_ = yf;
        yb_ = yb;
        break;
      case BidiMerge::kAve: out = (f + b) * 0.5f; break;
      case BidiMerge::kConcat: break;
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    Shape half_shape = WithBatch(batch_, out_half_);
    const int64_t n = out_half_.back(), rows = NumElements(half_shape) / n;
    const int64_t width = spec_.bidi_merge == BidiMerge::kConcat ? 2 * n : n;
    if (!dy.on_cpu() || dy.size() != rows * width) {
      return Error("gradient " + dy.DebugString() + " does not match the output");
    }
    Tensor df = Tensor::Zeros(DType::kFloat32, half_shape), db = Tensor::Zeros(DType::kFloat32, half_shape);
    CMat d(dy.data<float>(), rows, width);
    Mat f(df.data<float>(), rows, n), b(db.data<float>(), rows, n);
    switch (spec_.bidi_merge) {
      case BidiMerge::kConcat:
        f = d.leftCols(n);
        b = d.rightCols(n);
        break;
      case BidiMerge::kSum: f = b = d; break;
      case BidiMerge::kMul:
        f = d.array() * CMat(yb_.data<float>(), rows, n).array();
        b = d.array() * CMat(yf_.data<float>(), rows, n).array();
        break;
      case BidiMerge::kAve: f = b = d * 0.5f; break;
    }
    if (sequences_) db = ReverseTime(db);
    ASSIGN_OR_RETURN(Tensor dxf, halves_[0]->Backward(params.first(nvars_[0]), std::move(df), need_input_grad,
                                                      grads.first(nvars_[0])));
    ASSIGN_OR_RETURN(Tensor dxb, halves_[1]->Backward(params.subspan(nvars_[0]), std::move(db), need_input_grad,
                                                      grads.subspan(nvars_[0])));
    if (!need_input_grad) return Tensor();
    AsArray(dxf) += AsArray(dxb);
    return dxf;
  }

 private:
  std::vector<std::unique_ptr<Layer>> halves_;
  std::vector<size_t> nvars_;
  Shape out_half_;
  bool sequences_ = false;
  Tensor yf_, yb_;  // the halves' outputs, for mul's gradient
};

class TimeDistributed final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (spec_.wrapped.size() != 1) return Error("needs the layer it applies");
    if (in.size() < 2) return Error("expects input [batch, time, ...], got " + ShapeString(WithBatch(-1, in)));
    LayerSpec w = spec_.wrapped[0];
    w.name = spec_.name;  // its variables are "<time_distributed>/kernel", as TF.js names them
    ASSIGN_OR_RETURN(inner_, MakeLayer(w));
    if (inner_->arity() != 1) return Error("cannot apply a layer of several inputs to each time step");
    ASSIGN_OR_RETURN(Shape out, inner_->Build(Shape(in.begin() + 1, in.end()), dtype));
    in_shape_ = in;
    dtype_ = dtype;
    inner_out_ = out;
    out.insert(out.begin(), in[0]);
    return out;
  }
  DType output_dtype() const override { return inner_->output_dtype(); }
  std::vector<VariableSpec> Variables() const override { return inner_->Variables(); }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool training) override {
    RETURN_IF_ERROR(CheckInput(x, dtype_));
    const int64_t steps = in_shape_[0];
    Shape flat{batch_ * steps};
    flat.insert(flat.end(), in_shape_.begin() + 1, in_shape_.end());
    ASSIGN_OR_RETURN(Tensor xs, x.Reshape(flat));
    ASSIGN_OR_RETURN(Tensor y, inner_->Forward(params, xs, training));
    Shape out{batch_, steps};
    out.insert(out.end(), inner_out_.begin(), inner_out_.end());
    return y.Reshape(out);
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    Shape flat{batch_ * in_shape_[0]};
    flat.insert(flat.end(), inner_out_.begin(), inner_out_.end());
    if (!dy.on_cpu() || dy.size() != NumElements(flat)) {
      return Error("gradient " + dy.DebugString() + " does not match the output");
    }
    ASSIGN_OR_RETURN(Tensor d, dy.Reshape(flat));
    ASSIGN_OR_RETURN(Tensor dx, inner_->Backward(params, std::move(d), need_input_grad, grads));
    if (!need_input_grad) return Tensor();
    return dx.Reshape(WithBatch(batch_, in_shape_));
  }

 private:
  std::unique_ptr<Layer> inner_;
  Shape inner_out_;
  DType dtype_ = DType::kFloat32;
};

}  // namespace

std::unique_ptr<Layer> MakeWrapper(const LayerSpec& spec) {
  if (spec.type == LayerType::kBidirectional) return std::make_unique<Bidirectional>(spec);
  return std::make_unique<TimeDistributed>(spec);
}

}  // namespace tfjob::model::internal
