#include "model/layers/batch_norm.h"

#include <cmath>

namespace dctrain {

// Sums over N * HW elements per channel run in double: 131,072 float terms in
// ResNet-20's first stage would otherwise lose digits in the variance. Each
// sum keeps kLanes independent partial sums (element j goes to lane j mod
// kLanes, lanes added in order at the end): the order is fixed, so results
// are deterministic, and the additions no longer wait on each other.

namespace {

constexpr int kLanes = 8;

struct Lanes {
  double v[kLanes] = {};
  double total() const {
    double t = 0.0;
    for (double x : v) t += x;
    return t;
  }
};

// lanes += x[j]
template <typename T>
void add_values(Lanes& lanes, const T* x, int count) {
  int j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes.v[l] += static_cast<double>(x[j + l]);
  }
  for (; j < count; ++j) lanes.v[j % kLanes] += static_cast<double>(x[j]);
}

// lanes += (x[j] - m)^2
template <typename T>
void add_squares(Lanes& lanes, const T* x, double m, int count) {
  int j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double d = static_cast<double>(x[j + l]) - m;
      lanes.v[l] += d * d;
    }
  }
  for (; j < count; ++j) {
    const double d = static_cast<double>(x[j]) - m;
    lanes.v[j % kLanes] += d * d;
  }
}

// a += dy[j];  b += dy[j] * (x[j] - m)
template <typename T>
void add_products(Lanes& a, Lanes& b, const T* dy, const T* x, double m, int count) {
  int j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double g = static_cast<double>(dy[j + l]);
      a.v[l] += g;
      b.v[l] += g * (static_cast<double>(x[j + l]) - m);
    }
  }
  for (; j < count; ++j) {
    const double g = static_cast<double>(dy[j]);
    a.v[j % kLanes] += g;
    b.v[j % kLanes] += g * (static_cast<double>(x[j]) - m);
  }
}

}  // namespace

template <typename T>
void batch_norm_forward_train(T* y, T* mean, T* var, const T* x, const T* gamma, const T* beta,
                              const BatchNormShape& s) {
  const int64_t plane = int64_t{s.channels} * s.spatial;
  const double count = static_cast<double>(s.n) * s.spatial;
  for (int c = s.channel_begin; c < s.end(); ++c) {
    Lanes sum;
    for (int i = 0; i < s.n; ++i) add_values(sum, x + i * plane + int64_t{c} * s.spatial, s.spatial);
    const double m = sum.total() / count;
    Lanes squares;
    for (int i = 0; i < s.n; ++i) {
      add_squares(squares, x + i * plane + int64_t{c} * s.spatial, m, s.spatial);
    }
    const double v = squares.total() / count;
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
    Lanes lanes_dy, lanes_dy_xmu;
    for (int i = 0; i < s.n; ++i) {
      const int64_t at = i * plane + int64_t{c} * s.spatial;
      add_products(lanes_dy, lanes_dy_xmu, dy + at, x + at, m, s.spatial);
    }
    const double sum_dy = lanes_dy.total(), sum_dy_xmu = lanes_dy_xmu.total();
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
