// Optimizers with Keras 3's update rules and default hyperparameters
// (keras.optimizers.SGD / Adagrad / RMSprop / Adam):
//   SGD      m = momentum*m - lr*g;  w += nesterov ? momentum*m - lr*g : m
//            (no momentum: w -= lr*g)
//   Adagrad  a += g^2;  w -= lr*g / sqrt(a + eps)      (a starts at 0.1)
//   RMSprop  v = rho*v + (1-rho)*g^2;  [centered: mg = rho*mg + (1-rho)*g,
//            den = v - mg^2 + eps]  else den = v + eps;  inc = lr*g/sqrt(den);
//            momentum: m = momentum*m + inc, w -= m;  else w -= inc
//   Adam     t += 1;  alpha = lr*sqrt(1-b2^t)/(1-b1^t);  m += (g-m)*(1-b1);
//            v += (g^2-v)*(1-b2);  [amsgrad: vh = max(vh, v), v = vh]
//            w -= alpha*m / (sqrt(v) + eps)
//
// The optimizer object is immutable; per-variable state lives in SlotState,
// owned by whoever owns the variable (the trainer, or a parameter server next
// to its shard). Sparse updates apply the same rule to the rows sent only
// (TF's sparse apply ops; for Adam this is the "lazy" variant), and count as
// one iteration.
//
// Thread-safety: Apply* on different SlotStates may run concurrently; one
// variable's value and SlotState need external synchronisation.
// Failure: shape or dtype mismatches return INVALID_ARGUMENT; nothing is
// modified then.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "services/model/layers.h"
#include "services/model/spec.h"
#include "services/tensor/tensor.h"

namespace tfjob::model {

struct SlotState {
  std::vector<Tensor> slots;  // same shape as the variable, in SlotNames() order
  int64_t iterations = 0;
};

class Optimizer {
 public:
  // `split_dense`: a large dense update on the host runs over the compute
  // threads (threads.h), in blocks that give one thread's bits. For the
  // thread that owns them (a synchronous strategy's training loop); a
  // parameter server splits its updates over its own pool instead.
  explicit Optimizer(OptimizerSpec spec, bool split_dense = false);

  const OptimizerSpec& spec() const { return spec_; }
  std::string_view name() const;
  // Names of the slots for a variable ("momentum", "velocity", ...).
  std::vector<std::string> SlotNames() const;
  SlotState CreateSlots(const Tensor& var) const;

  // Variables on a device are updated there (the slots must live with
  // them); sparse indices are then device int64, distinct and in range (as
  // the Embedding layer makes them: the device cannot check without waiting).
  Status ApplyDense(Tensor& var, const Tensor& grad, SlotState& state) const;
  Status ApplySparse(Tensor& var, const Tensor& indices, const Tensor& values, SlotState& state) const;
  // A delta (non-trainable state) is added as is (AddDelta).
  Status Apply(Tensor& var, const Gradient& grad, SlotState& state) const;
  // Device variables only: the rows whose mask (float32 [rows]) is > 0 get
  // the rule with the matching rows of a dense gradient, as ApplySparse
  // would with those rows (one iteration).
  Status ApplyMaskedRows(Tensor& var, const Tensor& grad, const Tensor& mask, SlotState& state) const;

 private:
  // Applies the rule to n contiguous elements at `offset` of var and slots.
  void UpdateRange(Tensor& var, int64_t offset, const float* g, int64_t n, SlotState& state, float alpha) const;
  float StepAlpha(int64_t iteration) const;
  Status CheckDevice(const Tensor& var, std::initializer_list<const Tensor*> others, const SlotState& st) const;

  OptimizerSpec spec_;
  bool split_dense_ = false;
};

std::string_view OptimizerName(OptimizerType t);

// var += delta: the update of a non-trainable variable (Gradient::delta),
// on the host or on the device both live on.
Status AddDelta(Tensor& var, const Tensor& delta);

}  // namespace tfjob::model
