#include "model/layers/batch_norm.h"

// GCC 12's AVX-512 headers build "undefined" vectors from themselves, which
// -Wmaybe-uninitialized reports wherever they are inlined (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

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

// The lanes are copied into locals for the loops: a and b may be the same
// object as far as the compiler knows, which would keep them in memory.

// lanes += x[j]
template <typename T>
void add_values(Lanes& lanes, const T* x, int count) {
  Lanes v = lanes;
  int j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) v.v[l] += static_cast<double>(x[j + l]);
  }
  for (; j < count; ++j) v.v[j % kLanes] += static_cast<double>(x[j]);
  lanes = v;
}

// lanes += (x[j] - m)^2
template <typename T>
void add_squares(Lanes& lanes, const T* x, double m, int count) {
  Lanes v = lanes;
  int j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double d = static_cast<double>(x[j + l]) - m;
      v.v[l] += d * d;
    }
  }
  for (; j < count; ++j) {
    const double d = static_cast<double>(x[j]) - m;
    v.v[j % kLanes] += d * d;
  }
  lanes = v;
}

// a += dy[j];  b += dy[j] * (x[j] - m)
template <typename T>
void add_products(Lanes& a, Lanes& b, const T* dy, const T* x, double m, int count) {
  Lanes va = a, vb = b;
  int j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double g = static_cast<double>(dy[j + l]);
      va.v[l] += g;
      vb.v[l] += g * (static_cast<double>(x[j + l]) - m);
    }
  }
  for (; j < count; ++j) {
    const double g = static_cast<double>(dy[j]);
    va.v[j % kLanes] += g;
    vb.v[j % kLanes] += g * (static_cast<double>(x[j]) - m);
  }
  a = va;
  b = vb;
}

// y = x * a + b
template <typename T>
void affine(T* y, const T* x, T a, T b, int count) {
  for (int j = 0; j < count; ++j) y[j] = x[j] * a + b;
}

// dx = a * dy + b * x + d
template <typename T>
void affine2(T* dx, const T* dy, const T* x, T a, T b, T d, int count) {
  for (int j = 0; j < count; ++j) dx[j] = a * dy[j] + b * x[j] + d;
}

// The float loops again for AVX-512 hosts: one vector holds the 8 lanes, and
// every operation is the scalar one (no FMA), so the results are
// bit-identical to the loops above, only 8 or 16 at a time.
#define DCTRAIN_AVX512 __attribute__((target("avx512f")))

bool have_avx512() {
  return __builtin_cpu_supports("avx512f");
}

DCTRAIN_AVX512 void add_values_avx512(Lanes& lanes, const float* x, int count) {
  __m512d v = _mm512_loadu_pd(lanes.v);
  int j = 0;
  for (; j + kLanes <= count; j += kLanes)
    v = _mm512_add_pd(v, _mm512_cvtps_pd(_mm256_loadu_ps(x + j)));
  _mm512_storeu_pd(lanes.v, v);
  for (; j < count; ++j) lanes.v[j % kLanes] += static_cast<double>(x[j]);
}

DCTRAIN_AVX512 void add_squares_avx512(Lanes& lanes, const float* x, double m, int count) {
  __m512d v = _mm512_loadu_pd(lanes.v);
  const __m512d mv = _mm512_set1_pd(m);
  int j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    const __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + j)), mv);
    v = _mm512_add_pd(v, _mm512_mul_pd(d, d));
  }
  _mm512_storeu_pd(lanes.v, v);
  for (; j < count; ++j) {
    const double d = static_cast<double>(x[j]) - m;
    lanes.v[j % kLanes] += d * d;
  }
}

DCTRAIN_AVX512 void add_products_avx512(Lanes& a, Lanes& b, const float* dy, const float* x,
                                        double m, int count) {
  __m512d va = _mm512_loadu_pd(a.v), vb = _mm512_loadu_pd(b.v);
  const __m512d mv = _mm512_set1_pd(m);
  int j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    const __m512d g = _mm512_cvtps_pd(_mm256_loadu_ps(dy + j));
    va = _mm512_add_pd(va, g);
    vb = _mm512_add_pd(
        vb, _mm512_mul_pd(g, _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + j)), mv)));
  }
  _mm512_storeu_pd(a.v, va);
  _mm512_storeu_pd(b.v, vb);
  for (; j < count; ++j) {
    const double g = static_cast<double>(dy[j]);
    a.v[j % kLanes] += g;
    b.v[j % kLanes] += g * (static_cast<double>(x[j]) - m);
  }
}

DCTRAIN_AVX512 void affine_avx512(float* y, const float* x, float a, float b, int count) {
  const __m512 av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b);
  int j = 0;
  for (; j + 16 <= count; j += 16) {
    _mm512_storeu_ps(y + j, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x + j), av), bv));
  }
  for (; j < count; ++j) y[j] = x[j] * a + b;
}

DCTRAIN_AVX512 void affine2_avx512(float* dx, const float* dy, const float* x, float a, float b,
                                   float d, int count) {
  const __m512 av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b), dv = _mm512_set1_ps(d);
  int j = 0;
  for (; j + 16 <= count; j += 16) {
    const __m512 u = _mm512_mul_ps(av, _mm512_loadu_ps(dy + j));
    const __m512 w = _mm512_mul_ps(bv, _mm512_loadu_ps(x + j));
    _mm512_storeu_ps(dx + j, _mm512_add_ps(_mm512_add_ps(u, w), dv));
  }
  for (; j < count; ++j) dx[j] = a * dy[j] + b * x[j] + d;
}
#undef DCTRAIN_AVX512

void add_values(Lanes& lanes, const float* x, int count) {
  if (have_avx512()) return add_values_avx512(lanes, x, count);
  add_values<float>(lanes, x, count);
}
void add_squares(Lanes& lanes, const float* x, double m, int count) {
  if (have_avx512()) return add_squares_avx512(lanes, x, m, count);
  add_squares<float>(lanes, x, m, count);
}
void add_products(Lanes& a, Lanes& b, const float* dy, const float* x, double m, int count) {
  if (have_avx512()) return add_products_avx512(a, b, dy, x, m, count);
  add_products<float>(a, b, dy, x, m, count);
}
void affine(float* y, const float* x, float a, float b, int count) {
  if (have_avx512()) return affine_avx512(y, x, a, b, count);
  affine<float>(y, x, a, b, count);
}
void affine2(float* dx, const float* dy, const float* x, float a, float b, float d, int count) {
  if (have_avx512()) return affine2_avx512(dx, dy, x, a, b, d, count);
  affine2<float>(dx, dy, x, a, b, d, count);
}

}  // namespace

template <typename T>
void batch_norm_forward_train(T* y, T* mean, T* var, const T* x, const T* gamma, const T* beta,
                              const BatchNormShape& s) {
  const int64_t plane = int64_t{s.channels} * s.spatial;
  const double count = static_cast<double>(s.n) * s.spatial;
  for (int c = s.channel_begin; c < s.end(); ++c) {
    Lanes sum;
    for (int i = 0; i < s.n; ++i)
      add_values(sum, x + i * plane + int64_t{c} * s.spatial, s.spatial);
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
      affine(yc, xc, scale, shift, s.spatial);
    }
  }
}

template <typename T>
void batch_norm_forward_eval(T* y, const T* x, const T* gamma, const T* beta, const T* running_mean,
                             const T* running_var, const BatchNormShape& s) {
  const int64_t plane = int64_t{s.channels} * s.spatial;
  for (int c = s.channel_begin; c < s.end(); ++c) {
    const double scale_d = static_cast<double>(gamma[c]) /
                           std::sqrt(static_cast<double>(running_var[c]) + kBatchNormEps);
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
      affine2(dxc, dyc, xc, a, b, d, s.spatial);
    }
  }
}

#define DCTRAIN_BATCH_NORM(T)                                                                    \
  template void batch_norm_forward_train<T>(T*, T*, T*, const T*, const T*, const T*,            \
                                            const BatchNormShape&);                              \
  template void batch_norm_forward_eval<T>(T*, const T*, const T*, const T*, const T*, const T*, \
                                           const BatchNormShape&);                               \
  template void batch_norm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,       \
                                       const T*, const BatchNormShape&);
DCTRAIN_BATCH_NORM(float)
DCTRAIN_BATCH_NORM(double)
#undef DCTRAIN_BATCH_NORM

}  // namespace dctrain
