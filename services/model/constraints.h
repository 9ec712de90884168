// Keras' weight constraints (spec.h's Constraint), applied to a variable's
// value after each optimizer update, as Keras' optimizers do.
//
// Thread-safety: reentrant. Failure: INVALID_ARGUMENT for an axis outside
// the variable; FAILED_PRECONDITION for a value on a device (constraints
// run on the host).
#pragma once

#include "common/status.h"
#include "services/model/spec.h"
#include "services/tensor/tensor.h"

namespace tfjob::model {

Status ApplyConstraint(const Constraint& c, Tensor& value);

}  // namespace tfjob::model
