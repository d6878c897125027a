#include "model/layers/conv2d.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "model/blas.h"
#include "model/layers/conv2d_avx512.h"
#include "model/layers/conv2d_lowering.h"

namespace dctrain {

using blas::Trans;

int64_t Conv2dShape::col_size() const {
  if (pointwise()) return 0;
  const int64_t col = int64_t{in_channels} * kernel_h * kernel_w * out_height() * out_width();
  return std::max(col, conv2d_avx512::scratch_size(*this));
}

void validate(const Conv2dShape& s) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("conv2d: " + what);
  };
  require(
      s.n >= 1 && s.in_channels >= 1 && s.in_height >= 1 && s.in_width >= 1 && s.out_channels >= 1,
      "batch, channels and input sizes must be positive");
  require(s.kernel_h >= 1 && s.kernel_w >= 1 && s.stride >= 1 && s.padding >= 0,
          "kernel and stride must be positive and padding non-negative");
  require(s.in_height + 2 * s.padding >= s.kernel_h && s.in_width + 2 * s.padding >= s.kernel_w,
          "kernel " + std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) +
              " is larger than the padded input " + std::to_string(s.in_height + 2 * s.padding) +
              "x" + std::to_string(s.in_width + 2 * s.padding));
}

namespace {

// The range of output positions o in [0, out) whose input coordinate
// o * stride - padding + k lies inside [0, in).
struct Span1d {
  int begin, end;
};
Span1d valid_outputs(int k, int in, int out, int stride, int padding) {
  // o * stride >= padding - k  and  o * stride < in + padding - k
  const int lo = padding - k;
  int begin = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  const int hi = in + padding - k;  // exclusive bound on o * stride
  int end = hi <= 0 ? 0 : (hi + stride - 1) / stride;
  begin = std::min(begin, out);
  end = std::clamp(end, begin, out);
  return {begin, end};
}

}  // namespace

// col (in_c * kh * kw, out_h * out_w) from one sample x (in_c, in_h, in_w).
template <typename T>
void im2col(T* col, const T* x, const Conv2dShape& s) {
  const int oh = s.out_height(), ow = s.out_width();
  for (int c = 0; c < s.in_channels; ++c) {
    const T* xc = x + int64_t{c} * s.in_height * s.in_width;
    for (int ky = 0; ky < s.kernel_h; ++ky) {
      const Span1d rows = valid_outputs(ky, s.in_height, oh, s.stride, s.padding);
      for (int kx = 0; kx < s.kernel_w; ++kx) {
        const Span1d cols = valid_outputs(kx, s.in_width, ow, s.stride, s.padding);
        T* out = col;
        col += int64_t{oh} * ow;
        std::fill(out, out + int64_t{rows.begin} * ow, T(0));
        for (int oy = rows.begin; oy < rows.end; ++oy) {
          T* o = out + int64_t{oy} * ow;
          const T* xr = xc + int64_t{oy * s.stride - s.padding + ky} * s.in_width;
          const int x0 = kx - s.padding;
          std::fill(o, o + cols.begin, T(0));
          if (s.stride == 1) {
            std::copy(xr + cols.begin + x0, xr + cols.end + x0, o + cols.begin);
          } else {
            for (int ox = cols.begin; ox < cols.end; ++ox) o[ox] = xr[ox * s.stride + x0];
          }
          std::fill(o + cols.end, o + ow, T(0));
        }
        std::fill(out + int64_t{rows.end} * ow, out + int64_t{oh} * ow, T(0));
      }
    }
  }
}

// x (in_c, in_h, in_w) += the adjoint of im2col applied to col.
template <typename T>
void col2im_add(T* x, const T* col, const Conv2dShape& s) {
  const int oh = s.out_height(), ow = s.out_width();
  for (int c = 0; c < s.in_channels; ++c) {
    T* xc = x + int64_t{c} * s.in_height * s.in_width;
    for (int ky = 0; ky < s.kernel_h; ++ky) {
      const Span1d rows = valid_outputs(ky, s.in_height, oh, s.stride, s.padding);
      for (int kx = 0; kx < s.kernel_w; ++kx) {
        const Span1d cols = valid_outputs(kx, s.in_width, ow, s.stride, s.padding);
        const T* in = col;
        col += int64_t{oh} * ow;
        for (int oy = rows.begin; oy < rows.end; ++oy) {
          const T* o = in + int64_t{oy} * ow;
          T* xr = xc + int64_t{oy * s.stride - s.padding + ky} * s.in_width;
          const int x0 = kx - s.padding;
          if (s.stride == 1) {
            T* xo = xr + x0;
            for (int ox = cols.begin; ox < cols.end; ++ox) xo[ox] += o[ox];
          } else {
            for (int ox = cols.begin; ox < cols.end; ++ox) xr[ox * s.stride + x0] += o[ox];
          }
        }
      }
    }
  }
}

template <typename T>
void conv2d_forward(T* y, T* col, const T* x, const T* w, const T* b, const Conv2dShape& s) {
  if constexpr (std::is_same_v<T, float>) {
    if (conv2d_avx512::handles(s)) return conv2d_avx512::forward(y, col, x, w, b, s);
  }
  conv2d_forward_gemm(y, col, x, w, b, s);
}

template <typename T>
void conv2d_backward(T* dx, T* dw, T* db, T* col, const T* dy, const T* x, const T* w,
                     const Conv2dShape& s, bool accumulate_dx) {
  if constexpr (std::is_same_v<T, float>) {
    if (conv2d_avx512::handles(s)) {
      return conv2d_avx512::backward(dx, dw, db, col, dy, x, w, s, accumulate_dx);
    }
  }
  conv2d_backward_gemm(dx, dw, db, col, dy, x, w, s, accumulate_dx);
}

template <typename T>
void conv2d_forward_gemm(T* y, T* col, const T* x, const T* w, const T* b, const Conv2dShape& s) {
  const int p = s.out_height() * s.out_width();
  const int k = s.in_channels * s.kernel_h * s.kernel_w;
  for (int i = 0; i < s.n; ++i) {
    const T* xi = x + i * s.in_size();
    T* yi = y + i * s.out_size();
    const T* cols = xi;
    if (!s.pointwise()) {
      im2col(col, xi, s);
      cols = col;
    }
    if (b != nullptr) {
      for (int o = 0; o < s.out_channels; ++o)
        std::fill(yi + int64_t{o} * p, yi + int64_t{o + 1} * p, b[o]);
    }
    blas::gemm<T>(Trans::kNo, Trans::kNo, s.out_channels, p, k, T(1), w, cols,
                  b != nullptr ? T(1) : T(0), yi);
  }
}

template <typename T>
void conv2d_backward_gemm(T* dx, T* dw, T* db, T* col, const T* dy, const T* x, const T* w,
                          const Conv2dShape& s, bool accumulate_dx) {
  const int p = s.out_height() * s.out_width();
  const int k = s.in_channels * s.kernel_h * s.kernel_w;
  for (int i = 0; i < s.n; ++i) {
    const T* xi = x + i * s.in_size();
    const T* dyi = dy + i * s.out_size();
    if (db != nullptr) {
      for (int o = 0; o < s.out_channels; ++o) {
        const T* row = dyi + int64_t{o} * p;
        T sum = T(0);
        for (int j = 0; j < p; ++j) sum += row[j];
        db[o] += sum;
      }
    }
    // dw (out_c, K) += dy_i (out_c, P) * col^T (P, K); then col is reused for dcol.
    const T* cols = xi;
    if (!s.pointwise()) {
      im2col(col, xi, s);
      cols = col;
    }
    blas::gemm<T>(Trans::kNo, Trans::kYes, s.out_channels, k, p, T(1), dyi, cols, T(1), dw);
    if (dx == nullptr) continue;
    T* dxi = dx + i * s.in_size();
    if (s.pointwise()) {
      blas::gemm<T>(Trans::kYes, Trans::kNo, k, p, s.out_channels, T(1), w, dyi,
                    accumulate_dx ? T(1) : T(0), dxi);
    } else {
      blas::gemm<T>(Trans::kYes, Trans::kNo, k, p, s.out_channels, T(1), w, dyi, T(0), col);
      if (!accumulate_dx) std::fill(dxi, dxi + s.in_size(), T(0));
      col2im_add(dxi, col, s);
    }
  }
}

template <typename T>
void conv2d_forward_reference(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s) {
  const int oh = s.out_height(), ow = s.out_width();
  for (int i = 0; i < s.n; ++i) {
    for (int o = 0; o < s.out_channels; ++o) {
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          T sum = b != nullptr ? b[o] : T(0);
          for (int c = 0; c < s.in_channels; ++c) {
            for (int ky = 0; ky < s.kernel_h; ++ky) {
              const int iy = oy * s.stride - s.padding + ky;
              if (iy < 0 || iy >= s.in_height) continue;
              for (int kx = 0; kx < s.kernel_w; ++kx) {
                const int ix = ox * s.stride - s.padding + kx;
                if (ix < 0 || ix >= s.in_width) continue;
                sum += x[((int64_t{i} * s.in_channels + c) * s.in_height + iy) * s.in_width + ix] *
                       w[((int64_t{o} * s.in_channels + c) * s.kernel_h + ky) * s.kernel_w + kx];
              }
            }
          }
          y[((int64_t{i} * s.out_channels + o) * oh + oy) * ow + ox] = sum;
        }
      }
    }
  }
}

template <typename T>
void conv2d_backward_reference(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w,
                               const Conv2dShape& s) {
  const int oh = s.out_height(), ow = s.out_width();
  if (dx != nullptr) std::fill(dx, dx + s.n * s.in_size(), T(0));
  for (int i = 0; i < s.n; ++i) {
    for (int o = 0; o < s.out_channels; ++o) {
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          const T g = dy[((int64_t{i} * s.out_channels + o) * oh + oy) * ow + ox];
          if (db != nullptr) db[o] += g;
          for (int c = 0; c < s.in_channels; ++c) {
            for (int ky = 0; ky < s.kernel_h; ++ky) {
              const int iy = oy * s.stride - s.padding + ky;
              if (iy < 0 || iy >= s.in_height) continue;
              for (int kx = 0; kx < s.kernel_w; ++kx) {
                const int ix = ox * s.stride - s.padding + kx;
                if (ix < 0 || ix >= s.in_width) continue;
                const int64_t xi =
                    ((int64_t{i} * s.in_channels + c) * s.in_height + iy) * s.in_width + ix;
                const int64_t wi =
                    ((int64_t{o} * s.in_channels + c) * s.kernel_h + ky) * s.kernel_w + kx;
                dw[wi] += g * x[xi];
                if (dx != nullptr) dx[xi] += g * w[wi];
              }
            }
          }
        }
      }
    }
  }
}

#define DCTRAIN_CONV2D(T)                                                                          \
  template void im2col<T>(T*, const T*, const Conv2dShape&);                                       \
  template void col2im_add<T>(T*, const T*, const Conv2dShape&);                                   \
  template void conv2d_forward<T>(T*, T*, const T*, const T*, const T*, const Conv2dShape&);       \
  template void conv2d_backward<T>(T*, T*, T*, T*, const T*, const T*, const T*,                   \
                                   const Conv2dShape&, bool);                                      \
  template void conv2d_forward_gemm<T>(T*, T*, const T*, const T*, const T*, const Conv2dShape&);  \
  template void conv2d_backward_gemm<T>(T*, T*, T*, T*, const T*, const T*, const T*,              \
                                        const Conv2dShape&, bool);                                 \
  template void conv2d_forward_reference<T>(T*, const T*, const T*, const T*, const Conv2dShape&); \
  template void conv2d_backward_reference<T>(T*, T*, T*, const T*, const T*, const T*,             \
                                             const Conv2dShape&);
DCTRAIN_CONV2D(float)
DCTRAIN_CONV2D(double)
#undef DCTRAIN_CONV2D

}  // namespace dctrain
