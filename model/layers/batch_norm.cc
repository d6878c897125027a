#include "model/layers/batch_norm.h"

#include <cmath>

namespace dctrain {

// Sums over N * HW elements per channel run in double: 131,072 float terms in
// ResNet-20's first stage would otherwise lose digits in the variance.

template <typename T>
void batch_norm_forward_train(T* y, T* mean, T* var, const T* x, const T* gamma, const T* beta,
                              const BatchNormShape& s) {
  const int64_t plane = int64_t{s.channels} * s.spatial;
  const double count = static_cast<double>(s.n) * s.spatial;
  for (int c = s.channel_begin; c < s.end(); ++c) {
    double sum = 0.0;
    for (int i = 0; i < s.n; ++i) {
      const T* xc = x + i * plane + int64_t{c} * s.spatial;
      for (int j = 0; j < s.spatial; ++j) sum += static_cast<double>(xc[j]);
    }
    const double m = sum / count;
    double squares = 0.0;
    for (int i = 0; i < s.n; ++i) {
      const T* xc = x + i * plane + int64_t{c} * s.spatial;
      for (int j = 0; j < s.spatial; ++j) {
        const double d = static_cast<double>(xc[j]) - m;
        squares += d * d;
      }
    }
    const double v = squares / count;
    mean[c] = static_cast<T>(m);
    var[c] = static_cast<T>(v);
    const T scale = static_cast<T>(static_cast<double>(gamma[c]) / std::sqrt(v + kBatchNormEps));
    const T shift = static_cast<T>(static_cast<double>(beta[c]) - m * static_cast<double>(scale));
    for (int i = 0; i < s.n; ++i) {
      const T* xc = x + i * plane + int64_t{c} * s.spatial;
      T* yc = y + i * plane + int64_t{c} * s.spatial;
      for (int j = 0; j < s.spatial; ++j) yc[j] = xc[j] * scale + shift;
    }
  }
}

template <typename T>
void batch_norm_forward_eval(T* y, const T* x, const T* gamma, const T* beta,
                             const T* running_mean, const T* running_var, const BatchNormShape& s) {
  const int64_t plane = int64_t{s.channels} * s.spatial;
  for (int c = s.channel_begin; c < s.end(); ++c) {
    const double scale_d =
        static_cast<double>(gamma[c]) / std::sqrt(static_cast<double>(running_var[c]) + kBatchNormEps);
    const T scale = static_cast<T>(scale_d);
    const T shift = static_cast<T>(static_cast<double>(beta[c]) -
                                   static_cast<double>(running_mean[c]) * scale_d);
    for (int i = 0; i < s.n; ++i) {
      const T* xc = x + i * plane + int64_t{c} * s.spatial;
      T* yc = y + i * plane + int64_t{c} * s.spatial;
      for (int j = 0; j < s.spatial; ++j) yc[j] = xc[j] * scale + shift;
    }
  }
}

template <typename T>
void batch_norm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* mean, const T* var,
                         const T* x, const T* gamma, const BatchNormShape& s) {
  // With xhat = (x - mean) * inv_std:
  //   dbeta = sum dy, dgamma = sum dy * xhat,
  //   dx = gamma * inv_std * (dy - dbeta / M - xhat * dgamma / M), M = N * HW.
  const int64_t plane = int64_t{s.channels} * s.spatial;
  const double count = static_cast<double>(s.n) * s.spatial;
  for (int c = s.channel_begin; c < s.end(); ++c) {
    const double m = static_cast<double>(mean[c]);
    const double inv_std = 1.0 / std::sqrt(static_cast<double>(var[c]) + kBatchNormEps);
    double sum_dy = 0.0, sum_dy_xmu = 0.0;
    for (int i = 0; i < s.n; ++i) {
      const T* xc = x + i * plane + int64_t{c} * s.spatial;
      const T* dyc = dy + i * plane + int64_t{c} * s.spatial;
      for (int j = 0; j < s.spatial; ++j) {
        const double g = static_cast<double>(dyc[j]);
        sum_dy += g;
        sum_dy_xmu += g * (static_cast<double>(xc[j]) - m);
      }
    }
    dbeta[c] += static_cast<T>(sum_dy);
    dgamma[c] += static_cast<T>(sum_dy_xmu * inv_std);
    if (dx == nullptr) continue;
    // dx = a * dy + b * x + d, per channel.
    const double gi = static_cast<double>(gamma[c]) * inv_std;
    const double k = sum_dy_xmu * inv_std * inv_std / count;
    const T a = static_cast<T>(gi);
    const T b = static_cast<T>(-gi * k);
    const T d = static_cast<T>(gi * (m * k - sum_dy / count));
    for (int i = 0; i < s.n; ++i) {
      const T* xc = x + i * plane + int64_t{c} * s.spatial;
      const T* dyc = dy + i * plane + int64_t{c} * s.spatial;
      T* dxc = dx + i * plane + int64_t{c} * s.spatial;
      for (int j = 0; j < s.spatial; ++j) dxc[j] = a * dyc[j] + b * xc[j] + d;
    }
  }
}

#define DCTRAIN_BATCH_NORM(T)                                                                   \
  template void batch_norm_forward_train<T>(T*, T*, T*, const T*, const T*, const T*,           \
                                            const BatchNormShape&);                             \
  template void batch_norm_forward_eval<T>(T*, const T*, const T*, const T*, const T*, const T*, \
                                           const BatchNormShape&);                              \
  template void batch_norm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,       \
                                       const T*, const BatchNormShape&);
DCTRAIN_BATCH_NORM(float)
DCTRAIN_BATCH_NORM(double)
#undef DCTRAIN_BATCH_NORM

}  // namespace dctrain
