// Fused softmax + cross-entropy over the rows of a logit matrix.
//
// One pass per row computes the log-sum-exp, the loss term, the argmax and,
// when asked, the gradient softmax - onehot, so the (n, classes) probability
// matrix is never stored separately (for a 30,522-word MLM head this is most
// of the step's non-GEMM time).
#pragma once

#include <cstdint>

namespace dctrain {

struct CrossEntropyResult {
  double loss_sum = 0.0;  // sum over scored rows of -log softmax(logits)[label]
  int64_t scored = 0;     // rows whose label is not kIgnoreLabel
  int64_t correct = 0;    // scored rows whose argmax (first on ties) is the label
};

// logits (n, classes); labels (n), rows labelled kIgnoreLabel (common/batch.h)
// take no part. dlogits (n, classes) = d loss_sum / d logits, zero rows where
// ignored; skipped when null. dlogits may alias logits. Throws
// std::out_of_range for a label outside [0, classes) that is not ignored.
template <typename T>
CrossEntropyResult softmax_cross_entropy(T* dlogits, const T* logits, const int32_t* labels, int n,
                                         int classes);

}  // namespace dctrain
