// Reading what `tfjob-runtime fit` prints, for tests.
// Thread-safety: pure functions.
#pragma once

#include <string>

namespace tfjob::testing {

// The evaluation a fit process reported: the Keras-style progress line
// ("13/13 - 0s - loss: L - accuracy: A") after its "Evaluation" line. In a
// log where several processes' lines interleave, each behind its own
// "[name] " prefix (or the chief's with none), the line taken is the next one
// with the "Evaluation" line's prefix. -1 where the log has no such line, or
// the line no accuracy.
struct Evaluation {
  double loss = -1;
  double accuracy = -1;
};
Evaluation ParseEvaluation(const std::string& out);

}  // namespace tfjob::testing
