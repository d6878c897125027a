#include "model/layers/relu.h"

namespace dctrain {

template <typename T>
void relu_forward(T* y, const T* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}

template <typename T>
void relu_backward(T* dx, const T* dy, const T* y, int64_t count) {
  // Both loads unconditional, so the select compiles to a vector blend
  // instead of a branch that mispredicts on every other element.
  for (int64_t i = 0; i < count; ++i) {
    const T g = dy[i];
    dx[i] = y[i] > T(0) ? g : T(0);
  }
}

template void relu_forward<float>(float*, const float*, int64_t);
template void relu_forward<double>(double*, const double*, int64_t);
template void relu_backward<float>(float*, const float*, const float*, int64_t);
template void relu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace dctrain
