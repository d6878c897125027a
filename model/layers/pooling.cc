#include "model/layers/pooling.h"

#include <algorithm>

namespace dctrain {

template <typename T>
void max_pool_forward(T* y, int32_t* argmax, const T* x, const MaxPoolShape& s) {
  const int oh = s.out_height(), ow = s.out_width();
  const int64_t planes = int64_t{s.n} * s.channels;
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = x + p * s.in_height * s.in_width;
    T* yp = y + p * oh * ow;
    int32_t* ap = argmax + p * oh * ow;
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox) {
        int best = (oy * s.stride) * s.in_width + ox * s.stride;
        for (int ky = 0; ky < s.window; ++ky) {
          for (int kx = 0; kx < s.window; ++kx) {
            const int at = (oy * s.stride + ky) * s.in_width + ox * s.stride + kx;
            if (xp[at] > xp[best]) best = at;
          }
        }
        yp[oy * ow + ox] = xp[best];
        ap[oy * ow + ox] = best;
      }
    }
  }
}

template <typename T>
void max_pool_backward(T* dx, const T* dy, const int32_t* argmax, const MaxPoolShape& s) {
  if (dx == nullptr) return;
  const int64_t out_plane = int64_t{s.out_height()} * s.out_width();
  const int64_t in_plane = int64_t{s.in_height} * s.in_width;
  const int64_t planes = int64_t{s.n} * s.channels;
  std::fill(dx, dx + planes * in_plane, T(0));
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t o = 0; o < out_plane; ++o)
      dx[p * in_plane + argmax[p * out_plane + o]] += dy[p * out_plane + o];
  }
}

template <typename T>
void global_avg_pool_forward(T* y, const T* x, int n, int channels, int spatial) {
  const int64_t planes = int64_t{n} * channels;
  for (int64_t p = 0; p < planes; ++p) {
    T sum = T(0);
    for (int j = 0; j < spatial; ++j) sum += x[p * spatial + j];
    y[p] = sum / static_cast<T>(spatial);
  }
}

template <typename T>
void global_avg_pool_backward(T* dx, const T* dy, int n, int channels, int spatial) {
  const int64_t planes = int64_t{n} * channels;
  for (int64_t p = 0; p < planes; ++p) {
    const T g = dy[p] / static_cast<T>(spatial);
    for (int j = 0; j < spatial; ++j) dx[p * spatial + j] = g;
  }
}

#define DCTRAIN_POOLING(T)                                                               \
  template void max_pool_forward<T>(T*, int32_t*, const T*, const MaxPoolShape&);        \
  template void max_pool_backward<T>(T*, const T*, const int32_t*, const MaxPoolShape&); \
  template void global_avg_pool_forward<T>(T*, const T*, int, int, int);                 \
  template void global_avg_pool_backward<T>(T*, const T*, int, int, int);
DCTRAIN_POOLING(float)
DCTRAIN_POOLING(double)
#undef DCTRAIN_POOLING

}  // namespace dctrain
