#include "model/layers/layer_norm.h"

#include <cmath>
#include <cstddef>

namespace dctrain {

template <typename T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, int n,
                        int dim, double eps) {
  for (int i = 0; i < n; ++i) {
    const T* xi = x + static_cast<size_t>(i) * dim;
    T* yi = y + static_cast<size_t>(i) * dim;
    // Two passes in the scalar type's accumulator: the mean, then the
    // centred second moment (no cancellation from E[x^2] - E[x]^2).
    T sum = 0;
    for (int j = 0; j < dim; ++j) sum += xi[j];
    const T m = sum / static_cast<T>(dim);
    T sq = 0;
    for (int j = 0; j < dim; ++j) {
      const T c = xi[j] - m;
      sq += c * c;
    }
    const T r =
        static_cast<T>(1.0 / std::sqrt(static_cast<double>(sq / static_cast<T>(dim)) + eps));
    mean[i] = m;
    rstd[i] = r;
    for (int j = 0; j < dim; ++j) yi[j] = (xi[j] - m) * r * gamma[j] + beta[j];
  }
}

template <typename T>
void layer_norm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* mean, const T* rstd,
                         const T* x, const T* gamma, int n, int dim) {
  for (int i = 0; i < n; ++i) {
    const T* xi = x + static_cast<size_t>(i) * dim;
    const T* gi = dy + static_cast<size_t>(i) * dim;
    const T m = mean[i], r = rstd[i];
    // With xhat = (x - m) r and g = dy * gamma:
    // dx = r (g - mean(g) - xhat mean(g xhat)).
    T sum_g = 0, sum_gx = 0;
    for (int j = 0; j < dim; ++j) {
      const T xhat = (xi[j] - m) * r;
      const T g = gi[j] * gamma[j];
      sum_g += g;
      sum_gx += g * xhat;
      dgamma[j] += gi[j] * xhat;
      dbeta[j] += gi[j];
    }
    if (dx == nullptr) continue;
    const T mean_g = sum_g / static_cast<T>(dim), mean_gx = sum_gx / static_cast<T>(dim);
    T* di = dx + static_cast<size_t>(i) * dim;
    for (int j = 0; j < dim; ++j) {
      const T xhat = (xi[j] - m) * r;
      di[j] = r * (gi[j] * gamma[j] - mean_g - xhat * mean_gx);
    }
  }
}

template void layer_norm_forward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, int, int, double);
template void layer_norm_forward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, int, int, double);
template void layer_norm_backward<float>(float*, float*, float*, const float*, const float*,
                                         const float*, const float*, const float*, int, int);
template void layer_norm_backward<double>(double*, double*, double*, const double*, const double*,
                                          const double*, const double*, const double*, int, int);

}  // namespace dctrain
