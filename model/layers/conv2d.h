// 2-D convolution (PyTorch's nn.Conv2d layout, no groups, no dilation).
//
// conv2d_forward / conv2d_backward pick the fastest path this host has. The
// portable one lowers each sample to a GEMM: im2col gathers the receptive
// fields into col (K, P) with K = in_channels * kernel_h * kernel_w and
// P = out_height * out_width, then y (out_channels, P) = w (out_channels, K) *
// col. A 1x1, stride-1, unpadded convolution skips im2col (col is x itself).
// The direct-loop reference below is kept beside it; tests hold them equal.
//
// Conventions as in linear.h: outputs, scratch and saved values, inputs,
// parameters, sizes; backward ADDS into dw and db, OVERWRITES dx and skips it
// when null.
#pragma once

#include <cstdint>

namespace dctrain {

struct Conv2dShape {
  int n = 1;  // samples
  int in_channels = 1, in_height = 1, in_width = 1;
  int out_channels = 1;
  int kernel_h = 1, kernel_w = 1;
  int stride = 1;
  int padding = 0;  // zeros on every side

  int out_height() const { return (in_height + 2 * padding - kernel_h) / stride + 1; }
  int out_width() const { return (in_width + 2 * padding - kernel_w) / stride + 1; }
  int64_t in_size() const { return int64_t{in_channels} * in_height * in_width; }  // per sample
  int64_t out_size() const {
    return int64_t{out_channels} * out_height() * out_width();
  }  // per sample
  int64_t weight_size() const { return int64_t{out_channels} * in_channels * kernel_h * kernel_w; }
  // True when the layer is a plain GEMM on x (no im2col, no scratch used).
  bool pointwise() const { return kernel_h == 1 && kernel_w == 1 && stride == 1 && padding == 0; }
  // Floats of scratch the fast paths need per call (at least one sample's
  // col; 0 when pointwise).
  int64_t col_size() const;
};

// Throws std::invalid_argument naming the bad field when the shape is not a
// valid convolution (non-positive sizes, kernel larger than the padded input).
void validate(const Conv2dShape& s);

// y (n, out_c, out_h, out_w) = x (n, in_c, in_h, in_w) conv w (out_c, in_c, kh, kw) + b (out_c).
// col: scratch of s.col_size() floats. b may be null.
template <typename T>
void conv2d_forward(T* y, T* col, const T* x, const T* w, const T* b, const Conv2dShape& s);

// dx (n, in_c, in_h, in_w) = d/dx (skipped when null); dw (out_c, in_c, kh, kw) += d/dw;
// db (out_c) += sum of dy over samples and positions (skipped when null).
// dy (n, out_c, out_h, out_w); col: scratch of s.col_size() floats.
// accumulate_dx: ADD into dx instead of overwriting it, for an input that
// also feeds another branch (a residual block's input) at no extra cost.
template <typename T>
void conv2d_backward(T* dx, T* dw, T* db, T* col, const T* dy, const T* x, const T* w,
                     const Conv2dShape& s, bool accumulate_dx = false);

// The portable fast path: im2col + one BLAS GEMM per sample. conv2d_forward
// and conv2d_backward take it for double, for pointwise layers, and on hosts
// without AVX-512 (model/layers/conv2d_avx512.h); exposed so that tests hold
// it to the reference on every host.
template <typename T>
void conv2d_forward_gemm(T* y, T* col, const T* x, const T* w, const T* b, const Conv2dShape& s);
template <typename T>
void conv2d_backward_gemm(T* dx, T* dw, T* db, T* col, const T* dy, const T* x, const T* w,
                          const Conv2dShape& s, bool accumulate_dx = false);

// Direct-loop references with the same contracts (no scratch).
template <typename T>
void conv2d_forward_reference(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s);
template <typename T>
void conv2d_backward_reference(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w,
                               const Conv2dShape& s);

}  // namespace dctrain
