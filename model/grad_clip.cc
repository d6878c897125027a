#include "model/grad_clip.h"

#include <cmath>

namespace dctrain {

double clip_grad_norm(std::span<float> gradients, double max_norm) {
  double squares = 0.0;
  for (float g : gradients) squares += static_cast<double>(g) * static_cast<double>(g);
  const double norm = std::sqrt(squares);
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1.0) {
    const auto factor = static_cast<float>(coefficient);
    for (float& g : gradients) g *= factor;
  }
  return norm;
}

}  // namespace dctrain
