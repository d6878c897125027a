#include "model/layers/gelu.h"

#include <cmath>
#include <numbers>

namespace dctrain {

template <typename T>
void gelu_forward(T* y, const T* x, size_t count) {
  const T inv_sqrt2 = static_cast<T>(1.0 / std::numbers::sqrt2);
  for (size_t i = 0; i < count; ++i) {
    const T v = x[i];
    y[i] = static_cast<T>(0.5) * v * (static_cast<T>(1) + std::erf(v * inv_sqrt2));
  }
}

template <typename T>
void gelu_backward(T* dx, const T* dy, const T* x, size_t count) {
  const T inv_sqrt2 = static_cast<T>(1.0 / std::numbers::sqrt2);
  const T inv_sqrt_2pi = static_cast<T>(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  for (size_t i = 0; i < count; ++i) {
    const T v = x[i];
    const T cdf = static_cast<T>(0.5) * (static_cast<T>(1) + std::erf(v * inv_sqrt2));
    const T pdf = inv_sqrt_2pi * std::exp(static_cast<T>(-0.5) * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_forward<double>(double*, const double*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t);
template void gelu_backward<double>(double*, const double*, const double*, size_t);

}  // namespace dctrain
