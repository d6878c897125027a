// Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_ with
// norm_type 2): the flat gradient is scaled by max_norm / (norm + 1e-6) when
// that factor is below 1.
#pragma once

#include <span>

namespace dctrain {

// Returns the norm before clipping. The sum of squares is accumulated in
// double, in index order: the same bits on every replica.
double clip_grad_norm(std::span<float> gradients, double max_norm);

}  // namespace dctrain
