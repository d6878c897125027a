#include "model/layers/linear.h"

#include "model/blas.h"

namespace dctrain {

using blas::Trans;

template <typename T>
void linear_forward(T* y, const T* x, const T* w, const T* b, int n, int in, int out) {
  if (b != nullptr) {
    for (int i = 0; i < n; ++i) {
      for (int o = 0; o < out; ++o) y[i * out + o] = b[o];
    }
  }
  blas::gemm<T>(Trans::kNo, Trans::kYes, n, out, in, T(1), x, w, b != nullptr ? T(1) : T(0), y);
}

template <typename T>
void linear_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int n, int in,
                     int out) {
  if (dx != nullptr) blas::gemm<T>(Trans::kNo, Trans::kNo, n, in, out, T(1), dy, w, T(0), dx);
  blas::gemm<T>(Trans::kYes, Trans::kNo, out, in, n, T(1), dy, x, T(1), dw);
  if (db != nullptr) {
    for (int i = 0; i < n; ++i) {
      for (int o = 0; o < out; ++o) db[o] += dy[i * out + o];
    }
  }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int, int,
                                    int);
template void linear_forward<double>(double*, const double*, const double*, const double*, int, int,
                                     int);
template void linear_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int, int, int);
template void linear_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int, int, int);

}  // namespace dctrain
