// GELU in its exact (erf) form, as BERT and PyTorch's nn.GELU():
// y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
#pragma once

#include <cstddef>

namespace dctrain {

// y (count) = gelu(x). Backward reads x, so y must not overwrite it.
template <typename T>
void gelu_forward(T* y, const T* x, size_t count);

// dx (count) = dy * (Phi(x) + x phi(x)); dx may alias dy.
template <typename T>
void gelu_backward(T* dx, const T* dy, const T* x, size_t count);

}  // namespace dctrain
