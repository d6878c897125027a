#include "model/layers/cross_entropy.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "common/batch.h"

namespace dctrain {

template <typename T>
CrossEntropyResult softmax_cross_entropy(T* dlogits, const T* logits, const int32_t* labels, int n,
                                         int classes) {
  CrossEntropyResult result;
  for (int i = 0; i < n; ++i) {
    const T* row = logits + static_cast<int64_t>(i) * classes;
    T* drow = dlogits != nullptr ? dlogits + static_cast<int64_t>(i) * classes : nullptr;
    const int32_t label = labels[i];
    if (label == kIgnoreLabel) {
      if (drow != nullptr) {
        for (int c = 0; c < classes; ++c) drow[c] = T(0);
      }
      continue;
    }
    if (label < 0 || label >= classes) {
      throw std::out_of_range("softmax_cross_entropy: row " + std::to_string(i) + " has label " +
                              std::to_string(label) + ", outside [0, " + std::to_string(classes) +
                              ") and not kIgnoreLabel (" + std::to_string(kIgnoreLabel) +
                              "); check the dataset's labels against the model's classes");
    }
    const T target = row[label];  // read before an aliased dlogits overwrites it
    int argmax = 0;
    T max = row[0];
    for (int c = 1; c < classes; ++c) {
      if (row[c] > max) {
        max = row[c];
        argmax = c;
      }
    }
    // The sum of exponentials is accumulated in double: 30,522 float terms
    // would otherwise lose digits that the loss curve can show.
    double sum = 0.0;
    if (drow != nullptr) {
      for (int c = 0; c < classes; ++c) {
        const T e = std::exp(row[c] - max);
        drow[c] = e;
        sum += static_cast<double>(e);
      }
      const T inv = static_cast<T>(1.0 / sum);
      for (int c = 0; c < classes; ++c) drow[c] *= inv;
      drow[label] -= T(1);
    } else {
      for (int c = 0; c < classes; ++c) sum += static_cast<double>(std::exp(row[c] - max));
    }
    result.loss_sum += std::log(sum) + static_cast<double>(max) - static_cast<double>(target);
    ++result.scored;
    if (argmax == label) ++result.correct;
  }
  return result;
}

template CrossEntropyResult softmax_cross_entropy<float>(float*, const float*, const int32_t*, int,
                                                         int);
template CrossEntropyResult softmax_cross_entropy<double>(double*, const double*, const int32_t*,
                                                          int, int);

}  // namespace dctrain
