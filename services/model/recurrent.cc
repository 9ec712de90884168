// SimpleRNN, LSTM and GRU on the host, as Keras computes them: input
// [batch, time, features], the zero state to start, the output the last
// state or (return_sequences) every step's, in the order the steps ran
// (go_backwards runs them last to first). The input projections of all time
// steps are one matrix product before the loop; each step adds the
// recurrent product and applies the gates. Backward is backpropagation
// through time over the states Forward kept.
//
// Weights are Keras': kernel [features, G * units], recurrent_kernel
// [units, G * units], bias [G * units] with the gates side by side in
// Keras' order (LSTM i, f, c, o; GRU z, r, h; G = 1, 4, 3), and for a GRU
// with reset_after a bias [2, 3 * units] whose second row is added to the
// recurrent product (the reset gate multiplies that product, bias
// included). Without reset_after (TF.js, tf.keras 1) the reset gate
// multiplies the state before its product with the candidate's kernel.
//
// Dropout (training only) is one mask per example over the input features
// and one over the state's units, the same for every step, as Keras draws
// them; the GRU carries the masked state, as TF.js' does.
//
// A time-step mask (layers.h: Masking, Embedding(mask_zero)) makes a padded
// step keep the state, and the LSTM its cell, that the step started from;
// its gradient passes straight through to the step before.
#include <algorithm>

#include "services/model/layers_more.h"
#include "services/model/random.h"
#include "services/tensor/eigen.h"

namespace tfjob::model::internal {
namespace {

using Mat = Eigen::Map<RowMatrix>;
using CMat = Eigen::Map<const RowMatrix>;
using Strided = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

class Recurrent final : public HostLayer {
 public:
  explicit Recurrent(const LayerSpec& spec)
      : HostLayer(spec),
        gates_(spec.type == LayerType::kLSTM  ? 4
               : spec.type == LayerType::kGRU ? 3
                                              : 1),
        rng_(MixSeed(static_cast<uint64_t>(spec.seed), NameHash(spec.name))) {}

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    if (in.size() != 2 || in[0] <= 0 || in[1] <= 0) {
      return Error("expects input [batch, time steps, features], got " + ShapeString(WithBatch(-1, in)));
    }
    if (spec_.units <= 0) return Error("units must be positive");
    in_shape_ = in;
    steps_ = in[0];
    features_ = in[1];
    u_ = spec_.units;
    gu_ = gates_ * u_;
    if (!spec_.return_state) return main_shape();
    return Shape{NumElements(main_shape()) + states() * u_};
  }

  MaskUse mask_use() const override { return MaskUse::kConsume; }

  std::vector<VariableSpec> Variables() const override {
    std::vector<VariableSpec> v;
    v.push_back(Weight(spec_.name + "/kernel", {features_, gu_}, spec_.kernel_initializer, spec_.kernel_regularizer,
                       spec_.kernel_constraint));
    v.push_back(Weight(spec_.name + "/recurrent_kernel", {u_, gu_}, spec_.recurrent_initializer,
                       spec_.recurrent_regularizer, spec_.recurrent_constraint));
    if (spec_.use_bias) {
      VariableSpec b = Weight(spec_.name + "/bias", two_biases() ? Shape{2, gu_} : Shape{gu_}, spec_.bias_initializer,
                              spec_.bias_regularizer, spec_.bias_constraint);
      if (spec_.type == LayerType::kLSTM && spec_.unit_forget_bias) {
        // Keras: the bias initializer's values for i, ones for f, the
        // initializer's for c and o. Drawn here for the deterministic
        // initializers; a random one is refused when the model is built
        // (keras_layers.cc), so the value is the same on every task.
        b.init = Initializer::kValue;
        b.value = Tensor::Zeros(DType::kFloat32, {gu_});
        const float base = spec_.bias_initializer.kind == Initializer::Kind::kOnes ? 1.f
                           : spec_.bias_initializer.kind == Initializer::Kind::kConstant
                               ? float(spec_.bias_initializer.value)
                               : 0.f;
        float* p = b.value.data<float>();
        std::fill(p, p + gu_, base);
        std::fill(p + u_, p + 2 * u_, 1.f);
      }
      v.push_back(std::move(b));
    }
    return v;
  }

  StatusOr<Tensor> Forward(std::span<const Tensor> params, const Tensor& x, bool training) override {
    RETURN_IF_ERROR(CheckInput(x));
    const int64_t B = batch_, T = steps_, F = features_, U = u_, GU = gu_;
    const float* kernel = params[0].data<float>();
    const float* rk = params[1].data<float>();
    const float* bias = spec_.use_bias ? params[2].data<float>() : nullptr;

    // Dropout masks, scaled so the expected value is kept.
    in_mask_ = training && spec_.rate > 0 ? Mask(B, F, spec_.rate) : Tensor();
    rec_mask_ = training && spec_.recurrent_dropout > 0 ? Mask(B, U, spec_.recurrent_dropout) : Tensor();
    xin_ = x;
    if (in_mask_.size() > 0) {
      xin_ = Tensor::Zeros(DType::kFloat32, x.shape());
      for (int64_t b = 0; b < B; ++b) {
        Mat(xin_.data<float>() + b * T * F, T, F) =
            CMat(x.data<float>() + b * T * F, T, F).array().rowwise() *
            Eigen::Map<const Eigen::RowVectorXf>(in_mask_.data<float>() + b * F, F).array();
      }
    }
    xw_ = Tensor::Zeros(DType::kFloat32, {B * T, GU});
    Mat xw(xw_.data<float>(), B * T, GU);
    xw.noalias() = CMat(xin_.data<float>(), B * T, F) * CMat(kernel, F, GU);
    if (bias) xw.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias, GU);

    h_ = Tensor::Zeros(DType::kFloat32, {(T + 1) * B, U});
    if (spec_.type == LayerType::kLSTM) c_ = Tensor::Zeros(DType::kFloat32, {(T + 1) * B, U});
    pre_.assign(static_cast<size_t>(gates_), Tensor());
    post_.assign(static_cast<size_t>(gates_), Tensor());
    for (int k = 0; k < gates_; ++k) {
      pre_[k] = Tensor::Zeros(DType::kFloat32, {T * B, U});
      post_[k] = Tensor::Zeros(DType::kFloat32, {T * B, U});
    }
    // LSTM: act(c); GRU: the reset gate's operand (see Step).
    if (gates_ > 1) aux_ = Tensor::Zeros(DType::kFloat32, {T * B, U});
    if (mask_.size() > 0 && (!mask_.on_cpu() || mask_.shape() != Shape{B, T})) {
      return Error("mask " + mask_.DebugString() + " does not match the input's [batch, time] [" + std::to_string(B) +
                   ", " + std::to_string(T) + "]");
    }
    RowMatrix hm(B, U), m(B, GU);
    for (int64_t s = 0; s < T; ++s) {
      RETURN_IF_ERROR(StepForward(s, rk, bias, hm, m));
      // A padded step keeps the state it started from (and the LSTM its
      // cell), so its output is the last real step's, as Keras carries it.
      for (int64_t b = 0; b < B; ++b) {
        if (Real(b, s)) continue;
        State(h_, s + 1).row(b) = State(h_, s).row(b);
        if (spec_.type == LayerType::kLSTM) State(c_, s + 1).row(b) = State(c_, s).row(b);
      }
    }

    // A copy: the next layer may own and change its input.
    Tensor y = Tensor::Zeros(DType::kFloat32, WithBatch(B, main_shape()));
    if (!spec_.return_sequences) {
      Mat(y.data<float>(), B, U) = State(h_, T);
    } else {
      for (int64_t s = 0; s < T; ++s) {
        Strided(y.data<float>() + s * U, B, U, Eigen::OuterStride<>(T * U)) = State(h_, s + 1);
      }
    }
    if (!spec_.return_state) return y;
    // return_state: [output | h | c] per example, taken apart by the
    // kOutputPart layers after it.
    const int64_t main = NumElements(main_shape()), P = main + states() * U;
    Tensor packed = Tensor::Zeros(DType::kFloat32, {B, P});
    Strided rows(packed.data<float>(), B, P, Eigen::OuterStride<>(P));
    rows.leftCols(main) = CMat(y.data<float>(), B, main);
    rows.middleCols(main, U) = State(h_, T);
    if (states() == 2) rows.middleCols(main + U, U) = State(c_, T);
    return packed;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor> params, Tensor dy, bool need_input_grad,
                            std::span<Gradient> grads) override {
    const int64_t B = batch_, T = steps_, F = features_, U = u_, GU = gu_;
    // return_state: the gradients of the final states join the output's.
    RowMatrix dh_final = RowMatrix::Zero(B, U), dc_final = RowMatrix::Zero(B, U);
    if (spec_.return_state) {
      const int64_t main = NumElements(main_shape()), P = main + states() * U;
      RETURN_IF_ERROR(CheckGradient(dy, {P}));
      Strided rows(dy.data<float>(), B, P, Eigen::OuterStride<>(P));
      Tensor d = Tensor::Zeros(DType::kFloat32, WithBatch(B, main_shape()));
      Mat(d.data<float>(), B, main) = rows.leftCols(main);
      dh_final = rows.middleCols(main, U);
      if (states() == 2) dc_final = rows.middleCols(main + U, U);
      dy = std::move(d);
    }
    RETURN_IF_ERROR(CheckGradient(dy, main_shape()));
    const float* kernel = params[0].data<float>();
    const float* rk = params[1].data<float>();
    dxw_ = Tensor::Zeros(DType::kFloat32, {B * T, GU});
    Tensor drk = Tensor::Zeros(DType::kFloat32, {U, GU});
    dbr_ = RowMatrix::Zero(1, GU);
    RowMatrix dh = dh_final;
    dc_ = dc_final;
    for (int64_t s = T - 1; s >= 0; --s) {
      if (spec_.return_sequences) {
        dh += Strided(dy.data<float>() + s * U, B, U, Eigen::OuterStride<>(T * U));
      } else if (s == T - 1) {
        dh += CMat(dy.data<float>(), B, U);
      }
      // A padded step passed its state through untouched: its gradient
      // goes straight to the state before it, and none into the step.
      RowMatrix carry_h = RowMatrix::Zero(B, U), carry_c = RowMatrix::Zero(B, U);
      for (int64_t b = 0; b < B; ++b) {
        if (Real(b, s)) continue;
        carry_h.row(b) = dh.row(b);
        dh.row(b).setZero();
        if (spec_.type == LayerType::kLSTM) {
          carry_c.row(b) = dc_.row(b);
          dc_.row(b).setZero();
        }
      }
      RETURN_IF_ERROR(StepBackward(s, rk, dh, Mat(drk.data<float>(), U, GU)));
      dh += carry_h;
      if (spec_.type == LayerType::kLSTM) dc_ += carry_c;
    }
    CMat dxw(dxw_.data<float>(), B * T, GU);
    Tensor dk = Tensor::Zeros(DType::kFloat32, {F, GU});
    Mat(dk.data<float>(), F, GU).noalias() = CMat(xin_.data<float>(), B * T, F).transpose() * dxw;
    grads[0] = Gradient{false, dk, {}, {}};
    grads[1] = Gradient{false, drk, {}, {}};
    if (spec_.use_bias) {
      Tensor db = Tensor::Zeros(DType::kFloat32, two_biases() ? Shape{2, GU} : Shape{GU});
      Mat(db.data<float>(), 1, GU) = dxw.colwise().sum();
      if (two_biases()) Mat(db.data<float>() + GU, 1, GU) = dbr_;
      grads[2] = Gradient{false, db, {}, {}};
    }
    if (!need_input_grad) return Tensor();
    Tensor dx = Tensor::Zeros(DType::kFloat32, {B, T, F});
    Mat(dx.data<float>(), B * T, F).noalias() = dxw * CMat(kernel, F, GU).transpose();
    if (in_mask_.size() > 0) {
      for (int64_t b = 0; b < B; ++b) {
        Mat(dx.data<float>() + b * T * F, T, F).array().rowwise() *=
            Eigen::Map<const Eigen::RowVectorXf>(in_mask_.data<float>() + b * F, F).array();
      }
    }
    return dx;
  }

 private:
  bool two_biases() const { return spec_.type == LayerType::kGRU && spec_.reset_after; }
  // The output without the states, and how many states return_state adds.
  Shape main_shape() const { return spec_.return_sequences ? Shape{steps_, u_} : Shape{u_}; }
  int64_t states() const { return spec_.type == LayerType::kLSTM ? 2 : 1; }
  // Whether processing step s of example b reads a real (unmasked) step.
  bool Real(int64_t b, int64_t s) const {
    return mask_.size() == 0 || mask_.data<float>()[b * steps_ + TimeOf(s)] != 0;
  }
  // The input time step that processing step s reads.
  int64_t TimeOf(int64_t s) const { return spec_.go_backwards ? steps_ - 1 - s : s; }

  // Step s's block of a [steps * batch, units] cache, or state s of a
  // [(steps + 1) * batch, units] one.
  Mat State(Tensor& t, int64_t s) const { return Mat(t.data<float>() + s * batch_ * u_, batch_, u_); }
  Tensor StepView(const Tensor& t, int64_t s) const { return *t.Rows(s * batch_, (s + 1) * batch_); }
  // The input projections of the time step that step s reads, and their
  // gradients, [batch, G * units] with a stride of a whole example.
  Strided XwOf(Tensor& t, int64_t s) const {
    return Strided(t.data<float>() + TimeOf(s) * gu_, batch_, gu_, Eigen::OuterStride<>(steps_ * gu_));
  }
  Activation GateActivation(int k) const {
    const bool candidate = spec_.type == LayerType::kSimpleRNN || (spec_.type == LayerType::kLSTM && k == 2) ||
                           (spec_.type == LayerType::kGRU && k == 2);
    return candidate ? spec_.activation : spec_.recurrent_activation;
  }
  // pre_[k] of step s through gate k's activation into post_[k].
  void Activate(int k, int64_t s) {
    State(post_[k], s) = State(pre_[k], s);
    Tensor y = StepView(post_[k], s);
    ApplyActivation(GateActivation(k), y);
  }
  // dL/d(post) in g becomes dL/d(pre) of gate k at step s.
  void ActivateBack(int k, int64_t s, RowMatrix& g) {
    Tensor gt = Tensor::Zeros(DType::kFloat32, {batch_, u_});
    Mat(gt.data<float>(), batch_, u_) = g;
    ActivationBackward(GateActivation(k), StepView(pre_[k], s), StepView(post_[k], s), gt);
    g = Mat(gt.data<float>(), batch_, u_);
  }

  Tensor Mask(int64_t rows, int64_t cols, double rate) {
    Tensor m = Tensor::Zeros(DType::kFloat32, {rows, cols});
    const float keep = 1.f - static_cast<float>(rate);
    float* p = m.data<float>();
    for (int64_t i = 0; i < m.size(); ++i) p[i] = rng_.Uniform() < keep ? 1.f / keep : 0.f;
    return m;
  }
  // The state step s starts from, as the recurrent products see it.
  RowMatrix& Masked(int64_t s, RowMatrix& hm) {
    hm = State(h_, s);
    if (rec_mask_.size() > 0) hm.array() *= Mat(rec_mask_.data<float>(), batch_, u_).array();
    return hm;
  }

  Status StepForward(int64_t s, const float* rk, const float* bias, RowMatrix& hm, RowMatrix& m) {
    const int64_t U = u_;
    Strided xw = XwOf(xw_, s);
    Masked(s, hm);
    switch (spec_.type) {
      case LayerType::kSimpleRNN:
        State(pre_[0], s) = xw + hm * CMat(rk, U, U);
        Activate(0, s);
        State(h_, s + 1) = State(post_[0], s);
        break;
      case LayerType::kLSTM: {
        m.noalias() = hm * CMat(rk, U, gu_);
        for (int k = 0; k < 4; ++k) {
          State(pre_[k], s) = xw.middleCols(k * U, U) + m.middleCols(k * U, U);
          Activate(k, s);
        }
        auto i = State(post_[0], s).array(), f = State(post_[1], s).array();
        auto g = State(post_[2], s).array(), o = State(post_[3], s).array();
        State(c_, s + 1) = f * State(c_, s).array() + i * g;
        // act(c) through the candidate's activation: aux_ holds it, c_ the
        // pre-activation for its gradient.
        State(aux_, s) = State(c_, s + 1);
        Tensor a = StepView(aux_, s);
        ApplyActivation(spec_.activation, a);
        State(h_, s + 1) = o * State(aux_, s).array();
        break;
      }
      case LayerType::kGRU: {
        CMat r_kernel(rk, U, gu_);
        if (spec_.reset_after) {
          m.noalias() = hm * r_kernel;
          if (bias) m.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias + gu_, gu_);
        } else {
          m.leftCols(2 * U).noalias() = hm * r_kernel.leftCols(2 * U);
        }
        for (int k = 0; k < 2; ++k) {
          State(pre_[k], s) = xw.middleCols(k * U, U) + m.middleCols(k * U, U);
          Activate(k, s);
        }
        auto r = State(post_[1], s).array();
        if (spec_.reset_after) {
          State(aux_, s) = m.rightCols(U);
          State(pre_[2], s) = xw.rightCols(U).array() + r * State(aux_, s).array();
        } else {
          State(aux_, s) = r * hm.array();
          State(pre_[2], s) = xw.rightCols(U) + State(aux_, s) * r_kernel.rightCols(U);
        }
        Activate(2, s);
        auto z = State(post_[0], s).array();
        State(h_, s + 1) = z * hm.array() + (1 - z) * State(post_[2], s).array();
        break;
      }
      default: return Error("is not a recurrent layer");
    }
    return Status::Ok();
  }

  // dh: dL/d(state s + 1) on entry, dL/d(state s) on return.
  Status StepBackward(int64_t s, const float* rk, RowMatrix& dh, Mat drk) {
    const int64_t B = batch_, U = u_;
    Strided dxw = XwOf(dxw_, s);
    RowMatrix hm(B, U);
    Masked(s, hm);
    RowMatrix dhm;  // dL/d(the masked state)
    switch (spec_.type) {
      case LayerType::kSimpleRNN: {
        RowMatrix da = dh;
        ActivateBack(0, s, da);
        dxw = da;
        drk.noalias() += hm.transpose() * da;
        dhm.noalias() = da * CMat(rk, U, U).transpose();
        break;
      }
      case LayerType::kLSTM: {
        auto i = State(post_[0], s).array(), f = State(post_[1], s).array();
        auto g = State(post_[2], s).array(), o = State(post_[3], s).array();
        std::vector<RowMatrix> d(4, RowMatrix(B, U));
        d[3] = dh.array() * State(aux_, s).array();
        // Through act(c): aux_ is its output, c_ its input.
        Tensor dact = Tensor::Zeros(DType::kFloat32, {B, U});
        Mat(dact.data<float>(), B, U) = dh.array() * o;
        ActivationBackward(spec_.activation, StepView(c_, s + 1), StepView(aux_, s), dact);
        dc_ += Mat(dact.data<float>(), B, U);
        d[0] = dc_.array() * g;
        d[1] = dc_.array() * State(c_, s).array();
        d[2] = dc_.array() * i;
        dc_ = dc_.array() * f;
        for (int k = 0; k < 4; ++k) {
          ActivateBack(k, s, d[k]);
          dxw.middleCols(k * U, U) = d[k];
        }
        RowMatrix dz(B, gu_);
        for (int k = 0; k < 4; ++k) dz.middleCols(k * U, U) = d[k];
        drk.noalias() += hm.transpose() * dz;
        dhm.noalias() = dz * CMat(rk, U, gu_).transpose();
        break;
      }
      case LayerType::kGRU: {
        CMat r_kernel(rk, U, gu_);
        auto z = State(post_[0], s).array(), r = State(post_[1], s).array();
        auto hh = State(post_[2], s).array();
        RowMatrix dz = dh.array() * (hm.array() - hh);
        RowMatrix dah = dh.array() * (1 - z);
        dhm = dh.array() * z;
        ActivateBack(2, s, dah);
        RowMatrix dr;
        RowMatrix dm(B, gu_);
        if (spec_.reset_after) {
          dr = dah.array() * State(aux_, s).array();
          dm.rightCols(U) = dah.array() * r;
        } else {
          RowMatrix drh = dah * r_kernel.rightCols(U).transpose();
          drk.rightCols(U).noalias() += State(aux_, s).transpose() * dah;
          dr = drh.array() * hm.array();
          dhm.array() += drh.array() * r;
        }
        ActivateBack(0, s, dz);
        ActivateBack(1, s, dr);
        dm.leftCols(U) = dz;
        dm.middleCols(U, U) = dr;
        dxw.leftCols(U) = dz;
        dxw.middleCols(U, U) = dr;
        dxw.rightCols(U) = dah;
        if (spec_.reset_after) {
          drk.noalias() += hm.transpose() * dm;
          dbr_ += dm.colwise().sum();
          dhm.noalias() += dm * r_kernel.transpose();
        } else {
          drk.leftCols(2 * U).noalias() += hm.transpose() * dm.leftCols(2 * U);
          dhm.noalias() += dm.leftCols(2 * U) * r_kernel.leftCols(2 * U).transpose();
        }
        break;
      }
      default: return Error("is not a recurrent layer");
    }
    // The state reached the products through the mask (and the GRU's carry
    // is the masked state too; the LSTM's cell state is never masked).
    if (rec_mask_.size() > 0) dhm.array() *= Mat(rec_mask_.data<float>(), B, U).array();
    dh = dhm;
    return Status::Ok();
  }

  const int gates_;
  Rng rng_;
  int64_t steps_ = 0, features_ = 0, u_ = 0, gu_ = 0;
  // Forward's record for Backward.
  Tensor xin_;                      // the input after dropout, [batch, time, features]
  Tensor in_mask_, rec_mask_;       // dropout masks, empty when off
  Tensor xw_;                       // input projections, [batch * time, G * units]
  Tensor h_, c_;                    // states 0..T, [(T + 1) * batch, units]
  std::vector<Tensor> pre_, post_;  // per gate, [T * batch, units], step-major
  Tensor aux_;                      // LSTM act(c); GRU r * state or the recurrent candidate product
  // Backward's scratch.
  Tensor dxw_;
  RowMatrix dbr_, dc_;
};

// One output of a layer that packs several (spec.h: kOutputPart).
class OutputPart final : public HostLayer {
 public:
  using HostLayer::HostLayer;

  StatusOr<Shape> Build(const Shape& in, DType dtype) override {
    if (dtype != DType::kFloat32) return Error("expects float32 input, got " + std::string(DTypeName(dtype)));
    const int64_t U = spec_.units, k = spec_.output_index;
    in_shape_ = in;
    if (spec_.part_of_states) {
      const int64_t main = in.size() == 1 ? in[0] - spec_.part_states * U : 0;
      if (main <= 0 || main % U != 0) return Error("expects the packed outputs of its layer, got " + ShapeString(in));
      begin_ = k == 0 ? 0 : main + (k - 1) * U;
      size_ = k == 0 ? main : U;
      return k == 0 && spec_.return_sequences ? Shape{main / U, U} : Shape{size_};
    }
    if (in.empty() || in.back() != 2 * U) return Error("expects both directions' outputs, got " + ShapeString(in));
    begin_ = k * U;
    size_ = U;
    Shape out = in;
    out.back() = U;
    return out;
  }

  // A sequence output keeps the time-step mask (Layer::output_masked).
  MaskUse mask_use() const override { return MaskUse::kConsume; }

  StatusOr<Tensor> Forward(std::span<const Tensor>, const Tensor& x, bool) override {
    RETURN_IF_ERROR(CheckInput(x));
    const int64_t width = in_shape_.back(), rows = x.size() / width;
    Shape out{batch_};
    if (spec_.part_of_states && spec_.output_index == 0 && spec_.return_sequences) {
      out.push_back(size_ / spec_.units);
      out.push_back(spec_.units);
    } else {
      out.insert(out.end(), in_shape_.begin(), in_shape_.end() - 1);
      out.push_back(size_);
    }
    Tensor y = Tensor::Zeros(DType::kFloat32, out);
    Mat(y.data<float>(), rows, size_) =
        Strided(const_cast<float*>(x.data<float>()) + begin_, rows, size_, Eigen::OuterStride<>(width));
    return y;
  }

  StatusOr<Tensor> Backward(std::span<const Tensor>, Tensor dy, bool need_input_grad, std::span<Gradient>) override {
    if (!need_input_grad) return Tensor();
    const int64_t width = in_shape_.back(), rows = dy.size() / size_;
    Tensor dx = Tensor::Zeros(DType::kFloat32, WithBatch(batch_, in_shape_));
    Strided(dx.data<float>() + begin_, rows, size_, Eigen::OuterStride<>(width)) = CMat(dy.data<float>(), rows, size_);
    return dx;
  }

 private:
  int64_t begin_ = 0, size_ = 0;  // along the input's last axis
};

}  // namespace

std::unique_ptr<Layer> MakeRecurrent(const LayerSpec& spec) { return std::make_unique<Recurrent>(spec); }
std::unique_ptr<Layer> MakeOutputPart(const LayerSpec& spec) { return std::make_unique<OutputPart>(spec); }

}  // namespace tfjob::model::internal
