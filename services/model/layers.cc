#include "services/model/layers.h"

#include <algorithm>
#include <unordered_map>

#include "services/tensor/backend.h"
#include "services/model/layer_factories.h"
#include "services/model/layer_shapes.h"
#include "services/tensor/eigen.h"
#include "services/tensor/gemm.h"

namespace tfjob::model {

Status Layer::Error(const std::string& what) const { return InvalidArgument("layer \"" + spec_.name + "\": " + what); }

Layer::MaskUse Layer::mask_use() const {
  switch (spec_.type) {
    // Layers that compute each time step on its own pass a mask on (Keras'
    // supports_masking); the recurrent layers, Bidirectional and
    // GlobalAveragePooling1D override this to consume it. Not
    // BatchNormalization: Keras leaves padded steps out of its batch
    // statistics, which this runtime does not, so it refuses the mask.
    case LayerType::kDense:
    case LayerType::kActivation:
    case LayerType::kDropout:
    case LayerType::kSpatialDropout1D:
    case LayerType::kGaussianNoise:
    case LayerType::kGaussianDropout:
    case LayerType::kReLU:
    case LayerType::kLeakyReLU:
    case LayerType::kPReLU:
    case LayerType::kELU:
    case LayerType::kSoftmax:
    case LayerType::kThresholdedReLU:
    case LayerType::kRescaling:
    case LayerType::kLayerNormalization:
    case LayerType::kTimeDistributed:
    case LayerType::kMasking: return MaskUse::kPass;
    default: return MaskUse::kRefuse;
  }
}

bool Layer::output_masked(bool input_masked) const {
  if (makes_mask()) return true;
  if (!input_masked) return false;
  const MaskUse use = mask_use();
  if (use == MaskUse::kPass) return true;
  return use == MaskUse::kConsume && spec_.return_sequences;
}

StatusOr<Tensor> Layer::OutputMask(const Tensor&) const {
  const MaskUse use = mask_use();
  if (use == MaskUse::kPass || (use == MaskUse::kConsume && spec_.return_sequences)) return mask_;
  return Tensor();
}

StatusOr<Shape> Layer::BuildMulti(std::span<const Shape>, std::span<const DType>) {
  return Error("takes one input, not a list");
}
StatusOr<Tensor> Layer::ForwardMulti(std::span<const Tensor>, std::span<const Tensor>, bool) {
  return Error("takes one input, not a list");
}
StatusOr<std::vector<Tensor>> Layer::BackwardMulti(std::span<const Tensor>, Tensor, const std::vector<bool>&,
                                                   std::span<Gradient>) {
  return Error("takes one input, not a list");
}

namespace {

// A new device tensor, uninitialised (every element is about to be written).
StatusOr<Tensor> DeviceEmpty(DType dtype, Shape shape, Device d) {
  return Tensor::CreateUninitialized(dtype, std::move(shape), d);
}

using internal::WithBatch;

class Dense final : public Layer {
 public:
  using Layer::Layer;

  bool device_kernels() const override { return ActivationOnDevice(spec_.activation); }

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    if (in.empty()) return Error("expects input of rank >= 1 per example, got a scalar");
    if (spec_.units <= 0) return Error("units must be positive, got " + std::to_string(spec_.units));
    in_shape_ = in;
    in_features_ = in.back();
    out_shape_ = in;
    out_shape_.back() = spec_.units;
    return out_shape_;
  }

  std::vector<VariableSpec> Variables() const override {
    std::vector<VariableSpec> v{{spec_.name + "/kernel", {in_features_, spec_.units}, spec_.kernel_initializer, false}};
    if (spec_.use_bias) v.push_back({spec_.name + "/bias", {spec_.units}, spec_.bias_initializer, false});
    return v;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool) override {
    if (x.dtype() != DType::kFloat32 || x.rank() != static_cast<int>(in_shape_.size()) + 1 ||
        !std::equal(in_shape_.begin(), in_shape_.end(), x.shape().begin() + 1)) {
      return Error("expected input " + std::string(DTypeName(DType::kFloat32)) + ShapeString(WithBatch(-1, in_shape_)) +
                   ", got " + x.DebugString());
    }
    const Tensor& w = params[0];
    int64_t rows = x.size() / std::max<int64_t>(in_features_, 1);
    Shape out_shape = x.shape();
    out_shape.back() = spec_.units;
    if (!x.on_cpu() || !w.on_cpu()) return ForwardOnDevice(params, x, rows, std::move(out_shape));
    Tensor y = Tensor::Zeros(DType::kFloat32, out_shape);
    Eigen::Map<RowMatrix> Y(y.data<float>(), rows, spec_.units);
    Gemm(false, false, rows, spec_.units, in_features_, x.data<float>(), in_features_, w.data<float>(), spec_.units,
         0.f, y.data<float>(), spec_.units);
    if (spec_.use_bias) {
      Eigen::Map<const Eigen::RowVectorXf> b(params[1].data<float>(), spec_.units);
      Y.rowwise() += b;
    }
    z_ = ActivationNeedsInput(spec_.activation) ? y.Clone() : Tensor();
    ApplyActivation(spec_.activation, y);
    x_ = x;
    y_ = y;
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    if (dy.shape() != y_.shape()) {
      return Error("gradient shape " + ShapeString(dy.shape()) + " does not match output " + ShapeString(y_.shape()));
    }
    int64_t rows = y_.size() / spec_.units;
    if (!dy.on_cpu() || !y_.on_cpu()) return BackwardOnDevice(params, std::move(dy), rows, need_input_grad, grads);
    ActivationBackward(spec_.activation, z_, y_, dy);
    Eigen::Map<const RowMatrix> D(dy.data<float>(), rows, spec_.units);
    ASSIGN_OR_RETURN(Tensor dw, Tensor::CreateUninitialized(DType::kFloat32, {in_features_, spec_.units}));
    Gemm(true, false, in_features_, spec_.units, rows, x_.data<float>(), in_features_, dy.data<float>(), spec_.units,
         0.f, dw.data<float>(), spec_.units);
    grads[0] = Gradient{false, dw, {}, {}};
    if (spec_.use_bias) {
      Tensor db = Tensor::Zeros(DType::kFloat32, {spec_.units});
      Eigen::Map<Eigen::RowVectorXf>(db.data<float>(), spec_.units) = D.colwise().sum();
      grads[1] = Gradient{false, db, {}, {}};
    }
    if (!need_input_grad) return Tensor();
    ASSIGN_OR_RETURN(Tensor dx, Tensor::CreateUninitialized(DType::kFloat32, x_.shape()));
    Gemm(false, true, rows, in_features_, spec_.units, dy.data<float>(), spec_.units, params[0].data<float>(),
         spec_.units, 0.f, dx.data<float>(), in_features_);
    return dx;
  }

 private:
  // The same computation queued on the device the tensors share: cuBLAS
  // products, then bias and activation kernels.
  StatusOr<Tensor> ForwardOnDevice(std::span<const Tensor> params, const Tensor& x, int64_t rows, Shape out_shape) {
    RETURN_IF_ERROR(device::CheckSameDevice(spec_.name, {&x, &params[0]}));
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(x.device()));
    ASSIGN_OR_RETURN(Tensor y, DeviceEmpty(DType::kFloat32, out_shape, x.device()));
    ASSIGN_OR_RETURN(Tensor x2, x.Reshape({rows, in_features_}));
    ASSIGN_OR_RETURN(Tensor y2, y.Reshape({rows, spec_.units}));
    RETURN_IF_ERROR(b->MatMul(x2, false, params[0], false, y2, 0.f));
    if (spec_.use_bias) {
      RETURN_IF_ERROR(device::CheckSameDevice(spec_.name, {&x, &params[1]}));
      RETURN_IF_ERROR(b->BiasAdd(y, params[1]));
    }
    RETURN_IF_ERROR(Activate(spec_.activation, y));
    x_ = x;
    y_ = y;
    return y;
  }

  StatusOr<Tensor> BackwardOnDevice(std::span<const Tensor> params, Tensor dy, int64_t rows, bool need_input_grad,
                                    std::span<Gradient> grads) {
    RETURN_IF_ERROR(device::CheckSameDevice(spec_.name, {&dy, &y_, &params[0]}));
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(dy.device()));
    RETURN_IF_ERROR(ActivateBackward(spec_.activation, y_, dy));
    ASSIGN_OR_RETURN(Tensor x2, x_.Reshape({rows, in_features_}));
    ASSIGN_OR_RETURN(Tensor d2, dy.Reshape({rows, spec_.units}));
    ASSIGN_OR_RETURN(Tensor dw, DeviceEmpty(DType::kFloat32, {in_features_, spec_.units}, dy.device()));
    RETURN_IF_ERROR(b->MatMul(x2, true, d2, false, dw, 0.f));
    grads[0] = Gradient{false, dw, {}, {}};
    if (spec_.use_bias) {
      ASSIGN_OR_RETURN(Tensor db, DeviceEmpty(DType::kFloat32, {spec_.units}, dy.device()));
      RETURN_IF_ERROR(b->ColumnSum(d2, db));
      grads[1] = Gradient{false, db, {}, {}};
    }
    if (!need_input_grad) return Tensor();
    ASSIGN_OR_RETURN(Tensor dx, DeviceEmpty(DType::kFloat32, x_.shape(), dy.device()));
    ASSIGN_OR_RETURN(Tensor dx2, dx.Reshape({rows, in_features_}));
    RETURN_IF_ERROR(b->MatMul(d2, false, params[0], true, dx2, 0.f));
    return dx;
  }

  Shape in_shape_, out_shape_;
  int64_t in_features_ = 0;
  Tensor x_, y_;
  Tensor z_;  // the pre-activation, when the activation's gradient needs it
};

class Embedding final : public Layer {
 public:
  using Layer::Layer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kInt64) {
      return Error("expects int64 ids, got " + std::string(DTypeName(dtype)) +
                   " (set model.input_dtype to \"int64\" and make it the first layer)");
    }
    if (in.size() > 1) return Error("expects a scalar id or a bag [n] of ids per example, got " + ShapeString(in));
    if (spec_.input_dim <= 0 || spec_.output_dim <= 0) {
      return Error("input_dim and output_dim must be positive");
    }
    bag_ = in.empty() ? 1 : in[0];
    in_shape_ = in;
    if (spec_.mask_zero && (in.size() != 1 || spec_.combiner != Combiner::kNone)) {
      return Error("mask_zero needs a sequence of ids [time] per example, not combined, got " + ShapeString(in));
    }
    if (spec_.combiner != Combiner::kNone && bag_ == 0) return Error("cannot combine an empty bag of ids");
    if (spec_.combiner != Combiner::kNone || in.empty()) return Shape{spec_.output_dim};
    return Shape{bag_, spec_.output_dim};
  }

  std::vector<VariableSpec> Variables() const override {
    return {{spec_.name + "/embeddings", {spec_.input_dim, spec_.output_dim}, spec_.embeddings_initializer, true}};
  }

  bool makes_mask() const override { return spec_.mask_zero; }
  // mask_zero: the steps whose id is not 0.
  StatusOr<Tensor> OutputMask(const Tensor& x) const override {
    if (!spec_.mask_zero) return Tensor();
    if (!x.on_cpu()) return Error("mask_zero makes its mask on the host; the ids are on a device");
    Tensor m = Tensor::Zeros(DType::kFloat32, x.shape());
    for (int64_t i = 0; i < x.size(); ++i) m.data<float>()[i] = x.data<int64_t>()[i] != 0 ? 1.f : 0.f;
    return m;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool) override {
    if (x.dtype() != DType::kInt64 || x.rank() != static_cast<int>(in_shape_.size()) + 1 ||
        (!in_shape_.empty() && x.dim(1) != bag_)) {
      return Error("expected input int64" + ShapeString(WithBatch(-1, in_shape_)) + ", got " + x.DebugString());
    }
    const int64_t* ids = x.data<int64_t>();
    for (int64_t i = 0; i < x.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= spec_.input_dim) {
        return Error("id " + std::to_string(ids[i]) + " at position " + std::to_string(i) + " is outside [0, " +
                     std::to_string(spec_.input_dim) + ")");
      }
    }
    const int64_t batch = x.dim(0), d = spec_.output_dim;
    ids_ = x;
    if (!params[0].on_cpu()) return ForwardOnDevice(params[0], x);
    const float* table = params[0].data<float>();
    if (spec_.combiner == Combiner::kNone) {
      Shape s = x.shape();
      s.push_back(d);
      Tensor y = Tensor::Zeros(DType::kFloat32, s);
      for (int64_t i = 0; i < x.size(); ++i) std::copy_n(table + ids[i] * d, d, y.data<float>() + i * d);
      return y;
    }
    Tensor y = Tensor::Zeros(DType::kFloat32, {batch, d});
    const float scale = spec_.combiner == Combiner::kMean ? 1.f / static_cast<float>(bag_) : 1.f;
    for (int64_t b = 0; b < batch; ++b) {
      Eigen::Map<Eigen::ArrayXf> row(y.data<float>() + b * d, d);
      for (int64_t j = 0; j < bag_; ++j) row += Eigen::Map<const Eigen::ArrayXf>(table + ids[b * bag_ + j] * d, d);
      row *= scale;
    }
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    if (need_input_grad) return Error("ids have no gradient: an Embedding must be the first layer");
    if (!dy.on_cpu()) return BackwardOnDevice(dy, grads);
    const int64_t d = spec_.output_dim;
    const int64_t* ids = ids_.data<int64_t>();
    const bool combined = spec_.combiner != Combiner::kNone;
    const int64_t expect_rows = combined ? ids_.dim(0) : ids_.size();
    if (dy.size() != expect_rows * d)
      return Error("gradient shape " + ShapeString(dy.shape()) + " does not match output");
    const float scale = spec_.combiner == Combiner::kMean ? 1.f / static_cast<float>(bag_) : 1.f;

    // Distinct ids in ascending order, so gradients are deterministic.
    std::vector<int64_t> uniq(ids, ids + ids_.size());
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    std::unordered_map<int64_t, int64_t> slot;
    slot.reserve(uniq.size() * 2);
    for (size_t i = 0; i < uniq.size(); ++i) slot.emplace(uniq[i], static_cast<int64_t>(i));

    const int64_t k = static_cast<int64_t>(uniq.size());
    Tensor indices = Tensor::Zeros(DType::kInt64, {k});
    std::copy(uniq.begin(), uniq.end(), indices.data<int64_t>());
    Tensor values = Tensor::Zeros(DType::kFloat32, {k, d});
    float* v = values.data<float>();
    const float* g = dy.data<float>();
    for (int64_t i = 0; i < ids_.size(); ++i) {
      const int64_t src = combined ? i / std::max<int64_t>(bag_, 1) : i;
      Eigen::Map<Eigen::ArrayXf>(v + slot[ids[i]] * d, d) += scale * Eigen::Map<const Eigen::ArrayXf>(g + src * d, d);
    }
    grads[0] = Gradient{true, {}, indices, values};
    return Tensor();
  }

 private:
  // The table lives on the device; the ids stay on the host (they were
  // checked there) and travel with the step's other uploads.
  StatusOr<Tensor> ForwardOnDevice(const Tensor& table, const Tensor& ids) {
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(table.device()));
    ASSIGN_OR_RETURN(Tensor ids_dev, ids.ToDevice(table.device()));
    const bool combine = spec_.combiner != Combiner::kNone;
    Shape s = combine ? Shape{ids.dim(0), spec_.output_dim} : ids.shape();
    if (!combine) s.push_back(spec_.output_dim);
    ASSIGN_OR_RETURN(Tensor y, DeviceEmpty(DType::kFloat32, s, table.device()));
    const float scale = spec_.combiner == Combiner::kMean ? 1.f / static_cast<float>(bag_) : 1.f;
    RETURN_IF_ERROR(b->EmbeddingForward(table, ids_dev, bag_, combine, scale, y));
    return y;
  }

  // Distinct ids in ascending order (as on the host), each with the
  // positions that used it, so the device sums each row's contributions in
  // a fixed order without atomics.
  StatusOr<Tensor> BackwardOnDevice(const Tensor& dy, std::span<Gradient> grads) {
    const bool combined = spec_.combiner != Combiner::kNone;
    const int64_t expect_rows = combined ? ids_.dim(0) : ids_.size();
    if (dy.size() != expect_rows * spec_.output_dim) {
      return Error("gradient shape " + ShapeString(dy.shape()) + " does not match output");
    }
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(dy.device()));
    const int64_t* ids = ids_.data<int64_t>();
    std::vector<std::pair<int64_t, int64_t>> by_id;  // (id, position)
    by_id.reserve(static_cast<size_t>(ids_.size()));
    for (int64_t i = 0; i < ids_.size(); ++i) by_id.emplace_back(ids[i], i);
    std::sort(by_id.begin(), by_id.end());
    std::vector<int64_t> uniq, offsets, positions;
    positions.reserve(by_id.size());
    for (size_t i = 0; i < by_id.size(); ++i) {
      if (i == 0 || by_id[i].first != by_id[i - 1].first) {
        uniq.push_back(by_id[i].first);
        offsets.push_back(static_cast<int64_t>(i));
      }
      positions.push_back(by_id[i].second);
    }
    offsets.push_back(static_cast<int64_t>(by_id.size()));
    const int64_t k = static_cast<int64_t>(uniq.size());
    ASSIGN_OR_RETURN(Tensor indices, Tensor::FromVector({k}, uniq));
    ASSIGN_OR_RETURN(Tensor pos, Tensor::FromVector({static_cast<int64_t>(positions.size())}, positions));
    ASSIGN_OR_RETURN(Tensor off, Tensor::FromVector({k + 1}, offsets));
    ASSIGN_OR_RETURN(Tensor indices_dev, indices.ToDevice(dy.device()));
    ASSIGN_OR_RETURN(Tensor pos_dev, pos.ToDevice(dy.device()));
    ASSIGN_OR_RETURN(Tensor off_dev, off.ToDevice(dy.device()));
    ASSIGN_OR_RETURN(Tensor values, DeviceEmpty(DType::kFloat32, {k, spec_.output_dim}, dy.device()));
    const float scale = spec_.combiner == Combiner::kMean ? 1.f / static_cast<float>(bag_) : 1.f;
    RETURN_IF_ERROR(
        b->EmbeddingBackward(dy, pos_dev, off_dev, combined ? std::max<int64_t>(bag_, 1) : 1, scale, values));
    grads[0] = Gradient{true, {}, indices_dev, values};
    return Tensor();
  }

  Shape in_shape_;
  int64_t bag_ = 1;
  Tensor ids_;
};

class ActivationLayer final : public Layer {
 public:
  using Layer::Layer;

  bool device_kernels() const override { return ActivationOnDevice(spec_.activation); }

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input");
    if (spec_.activation == Activation::kSoftmax && in.empty()) return Error("softmax needs a feature axis");
    in_shape_ = in;
    return in;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    if (x.dtype() != DType::kFloat32 || x.rank() != static_cast<int>(in_shape_.size()) + 1 ||
        !std::equal(in_shape_.begin(), in_shape_.end(), x.shape().begin() + 1)) {
      return Error("expected input float32" + ShapeString(WithBatch(-1, in_shape_)) + ", got " + x.DebugString());
    }
    ASSIGN_OR_RETURN(y_, x.Copy());
    x_ = ActivationNeedsInput(spec_.activation) ? x : Tensor();
    RETURN_IF_ERROR(Activate(spec_.activation, y_));
    return y_;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool, std::span<Gradient>) override {
    if (dy.shape() != y_.shape()) return Error("gradient shape does not match output");
    RETURN_IF_ERROR(ActivateBackward(spec_.activation, x_, y_, dy));
    return dy;
  }

 private:
  Shape in_shape_;
  Tensor x_;  // the input, when the activation's gradient needs it
  Tensor y_;
};

class Flatten final : public Layer {
 public:
  using Layer::Layer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    dtype_ = dtype;
    in_shape_ = in;
    return Shape{NumElements(in)};
  }

  DType output_dtype() const override { return dtype_; }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    if (x.dtype() != dtype_ || x.rank() != static_cast<int>(in_shape_.size()) + 1 ||
        !std::equal(in_shape_.begin(), in_shape_.end(), x.shape().begin() + 1)) {
      return Error("expected input " + std::string(DTypeName(dtype_)) + ShapeString(WithBatch(-1, in_shape_)) +
                   ", got " + x.DebugString());
    }
    x_shape_ = x.shape();
    return x.Reshape({x.dim(0), NumElements(in_shape_)});
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad) return Tensor();
    return dy.Reshape(x_shape_);
  }

 private:
  DType dtype_ = DType::kFloat32;
  Shape in_shape_, x_shape_;
};

}  // namespace

StatusOr<std::unique_ptr<Layer>> MakeLayer(const LayerSpec& spec) {
  switch (spec.type) {
    case LayerType::kDense: return std::unique_ptr<Layer>(new Dense(spec));
    case LayerType::kEmbedding: return std::unique_ptr<Layer>(new Embedding(spec));
    case LayerType::kActivation: return std::unique_ptr<Layer>(new ActivationLayer(spec));
    case LayerType::kFlatten: return std::unique_ptr<Layer>(new Flatten(spec));
    case LayerType::kConv2D: return internal::MakeConv2D(spec);
    case LayerType::kMaxPooling2D:
    case LayerType::kAveragePooling2D:
    case LayerType::kGlobalAveragePooling2D: return internal::MakePooling2D(spec);
    case LayerType::kDropout: return internal::MakeDropout(spec);
    case LayerType::kBatchNormalization: return internal::MakeBatchNormalization(spec);
    case LayerType::kReshape: return internal::MakeReshape(spec);
    case LayerType::kNormalization: return internal::MakeNormalization(spec);
    case LayerType::kStringLookup:
    case LayerType::kIntegerLookup: return internal::MakeLookupLayer(spec);
    case LayerType::kAdd:
    case LayerType::kSubtract:
    case LayerType::kMultiply:
    case LayerType::kAverage:
    case LayerType::kMaximum:
    case LayerType::kMinimum:
    case LayerType::kConcatenate:
    case LayerType::kDot: return internal::MakeMerge(spec);
    default: return internal::MakeMoreLayer(spec);
  }
  return InvalidArgument("unknown layer type");
}

std::string_view LayerTypeName(LayerType t) {
  switch (t) {
    case LayerType::kDense: return "Dense";
    case LayerType::kEmbedding: return "Embedding";
    case LayerType::kActivation: return "Activation";
    case LayerType::kFlatten: return "Flatten";
    case LayerType::kConv2D: return "Conv2D";
    case LayerType::kMaxPooling2D: return "MaxPooling2D";
    case LayerType::kAveragePooling2D: return "AveragePooling2D";
    case LayerType::kGlobalAveragePooling2D: return "GlobalAveragePooling2D";
    case LayerType::kDropout: return "Dropout";
    case LayerType::kBatchNormalization: return "BatchNormalization";
    case LayerType::kReshape: return "Reshape";
    case LayerType::kStringLookup: return "StringLookup";
    case LayerType::kIntegerLookup: return "IntegerLookup";
    case LayerType::kNormalization: return "Normalization";
    case LayerType::kAdd: return "Add";
    case LayerType::kSubtract: return "Subtract";
    case LayerType::kMultiply: return "Multiply";
    case LayerType::kAverage: return "Average";
    case LayerType::kMaximum: return "Maximum";
    case LayerType::kMinimum: return "Minimum";
    case LayerType::kConcatenate: return "Concatenate";
    case LayerType::kDot: return "Dot";
    default: return MoreLayerTypeName(t);
  }
  return "?";
}

}  // namespace tfjob::model
