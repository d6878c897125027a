// ReLU: y = max(x, 0). Conventions as in linear.h.
#pragma once

#include <cstdint>

namespace dctrain {

// y (count) = max(x, 0); y may alias x.
template <typename T>
void relu_forward(T* y, const T* x, int64_t count);

// dx (count) = dy where the forward output y > 0, else 0 (the gradient at 0
// is taken as 0, as PyTorch does). Uses the saved output y, so the forward may
// run in place. dx may alias dy.
template <typename T>
void relu_backward(T* dx, const T* dy, const T* y, int64_t count);

}  // namespace dctrain
