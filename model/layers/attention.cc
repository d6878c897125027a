#include "model/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/random.h"
#include "model/blas.h"
#include "model/layers/dropout.h"
#include "model/layers/linear.h"

namespace dctrain {
namespace {

using blas::Trans;

uint64_t head_key(const AttentionDropout& dropout, int s, int h) {
  return hash_key({dropout.keys[s], static_cast<uint64_t>(h)});
}

}  // namespace

size_t attention_forward_scratch(int t) {
  return static_cast<size_t>(t) * t;
}

size_t attention_backward_scratch(int n, int t, int hidden) {
  return 4 * static_cast<size_t>(n) * t * hidden + 2 * static_cast<size_t>(t) * t;
}

template <typename T>
void attention_forward(T* y, const AttentionSaved<T>& saved, T* scratch, const T* x,
                       const uint8_t* attention, const AttentionParams<T>& params,
                       const AttentionDropout& dropout, int n, int t, int hidden, int heads) {
  const int rows = n * t, dh = hidden / heads;
  linear_forward(saved.q, x, params.wq, params.bq, rows, hidden, hidden);
  linear_forward(saved.k, x, params.wk, params.bk, rows, hidden, hidden);
  linear_forward(saved.v, x, params.wv, params.bv, rows, hidden, hidden);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dh)));
  const size_t tt = static_cast<size_t>(t) * t;
  for (int s = 0; s < n; ++s) {
    const size_t base = static_cast<size_t>(s) * t * hidden;
    const uint8_t* real = attention + static_cast<size_t>(s) * t;
    for (int h = 0; h < heads; ++h) {
      const T* q = saved.q + base + h * dh;
      const T* k = saved.k + base + h * dh;
      const T* v = saved.v + base + h * dh;
      T* p = saved.probs + (static_cast<size_t>(s) * heads + h) * tt;
      // scores (t, t) = scale * q k^T + mask; softmax over each row.
      blas::gemm<T>(Trans::kNo, Trans::kYes, t, t, dh, scale, q, hidden, k, hidden, T(0), p, t);
      for (int i = 0; i < t; ++i) {
        T* row = p + static_cast<size_t>(i) * t;
        T top = -std::numeric_limits<T>::infinity();
        for (int j = 0; j < t; ++j) {
          if (real[j] == 0) row[j] += static_cast<T>(kAttentionMaskScore);
          top = std::max(top, row[j]);
        }
        T sum = 0;
        for (int j = 0; j < t; ++j) {
          row[j] = std::exp(row[j] - top);
          sum += row[j];
        }
        const T inv = T(1) / sum;
        for (int j = 0; j < t; ++j) row[j] *= inv;
      }
      const T* used = p;
      if (dropout.p > 0.0) {
        dropout_forward(scratch, p, dropout.p, head_key(dropout, s, h), tt);
        used = scratch;
      }
      // context (t, dh) = probs (t, t) v (t, dh)
      blas::gemm<T>(Trans::kNo, Trans::kNo, t, dh, t, T(1), used, t, v, hidden, T(0),
                    saved.context + base + h * dh, hidden);
    }
  }
  linear_forward(y, saved.context, params.wo, params.bo, rows, hidden, hidden);
}

template <typename T>
void attention_backward(T* dx, const AttentionGrads<T>& grads, T* scratch, const T* dy,
                        const AttentionSaved<T>& saved, const T* x,
                        const AttentionParams<T>& params, const AttentionDropout& dropout, int n,
                        int t, int hidden, int heads) {
  const int rows = n * t, dh = hidden / heads;
  const size_t plane = static_cast<size_t>(rows) * hidden, tt = static_cast<size_t>(t) * t;
  T* dcontext = scratch;     // (n, t, hidden)
  T* dq = dcontext + plane;  // (n, t, hidden)
  T* dk = dq + plane;        // (n, t, hidden)
  T* dv = dk + plane;        // (n, t, hidden)
  T* dprobs = dv + plane;    // (t, t)
  T* dropped = dprobs + tt;  // (t, t) probabilities after dropout
  linear_backward(dcontext, grads.wo, grads.bo, dy, saved.context, params.wo, rows, hidden, hidden);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dh)));
  for (int s = 0; s < n; ++s) {
    const size_t base = static_cast<size_t>(s) * t * hidden;
    for (int h = 0; h < heads; ++h) {
      const size_t at = base + h * dh;
      const T* p = saved.probs + (static_cast<size_t>(s) * heads + h) * tt;
      const T* used = p;
      if (dropout.p > 0.0) {
        dropout_forward(dropped, p, dropout.p, head_key(dropout, s, h), tt);
        used = dropped;
      }
      // dv = used^T dcontext; d(used) = dcontext v^T.
      blas::gemm<T>(Trans::kYes, Trans::kNo, t, dh, t, T(1), used, t, dcontext + at, hidden, T(0),
                    dv + at, hidden);
      blas::gemm<T>(Trans::kNo, Trans::kYes, t, t, dh, T(1), dcontext + at, hidden, saved.v + at,
                    hidden, T(0), dprobs, t);
      if (dropout.p > 0.0) dropout_backward(dprobs, dprobs, dropout.p, head_key(dropout, s, h), tt);
      // Softmax backward, with the score scale folded in:
      // dscores = scale * p (dprobs - sum_j dprobs p).
      for (int i = 0; i < t; ++i) {
        T* g = dprobs + static_cast<size_t>(i) * t;
        const T* pi = p + static_cast<size_t>(i) * t;
        T dot = 0;
        for (int j = 0; j < t; ++j) dot += g[j] * pi[j];
        for (int j = 0; j < t; ++j) g[j] = scale * pi[j] * (g[j] - dot);
      }
      // dq = dscores k; dk = dscores^T q.
      blas::gemm<T>(Trans::kNo, Trans::kNo, t, dh, t, T(1), dprobs, t, saved.k + at, hidden, T(0),
                    dq + at, hidden);
      blas::gemm<T>(Trans::kYes, Trans::kNo, t, dh, t, T(1), dprobs, t, saved.q + at, hidden, T(0),
                    dk + at, hidden);
    }
  }
  linear_backward<T>(nullptr, grads.wq, grads.bq, dq, x, params.wq, rows, hidden, hidden);
  linear_backward<T>(nullptr, grads.wk, grads.bk, dk, x, params.wk, rows, hidden, hidden);
  linear_backward<T>(nullptr, grads.wv, grads.bv, dv, x, params.wv, rows, hidden, hidden);
  if (dx != nullptr) {
    blas::gemm<T>(Trans::kNo, Trans::kNo, rows, hidden, hidden, T(1), dq, params.wq, T(0), dx);
    blas::gemm<T>(Trans::kNo, Trans::kNo, rows, hidden, hidden, T(1), dk, params.wk, T(1), dx);
    blas::gemm<T>(Trans::kNo, Trans::kNo, rows, hidden, hidden, T(1), dv, params.wv, T(1), dx);
  }
}

template void attention_forward<float>(float*, const AttentionSaved<float>&, float*, const float*,
                                       const uint8_t*, const AttentionParams<float>&,
                                       const AttentionDropout&, int, int, int, int);
template void attention_forward<double>(double*, const AttentionSaved<double>&, double*,
                                        const double*, const uint8_t*,
                                        const AttentionParams<double>&, const AttentionDropout&,
                                        int, int, int, int);
template void attention_backward<float>(float*, const AttentionGrads<float>&, float*, const float*,
                                        const AttentionSaved<float>&, const float*,
                                        const AttentionParams<float>&, const AttentionDropout&, int,
                                        int, int, int);
template void attention_backward<double>(double*, const AttentionGrads<double>&, double*,
                                         const double*, const AttentionSaved<double>&,
                                         const double*, const AttentionParams<double>&,
                                         const AttentionDropout&, int, int, int, int);

}  // namespace dctrain
