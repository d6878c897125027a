// The float convolution path for x86-64 hosts with AVX-512: stride-1
// convolutions computed straight from a zero-padded copy of the input, with
// no im2col and no BLAS.
//
//   forward:  y (out_c, P) = w (out_c, K) * B, where row k = (c, ky, kx) of B
//             is the padded input plane c shifted by (ky, kx): the kernel
//             loads it directly, 16 output positions per vector.
//   dx:       the same kernel on the padded dy with the weights transposed
//             and flipped (a stride-1 convolution's input gradient is a
//             convolution of dy), so no col2im scatter.
//   dw:       dw (out_c, K) += dy (out_c, P) * B^T, 4 x 6 outputs per tile,
//             16 positions per vector, summed over a group of samples before
//             the horizontal sums.
//
// Output positions go 16 to a vector: a row's positions (masked at the row's
// end) when rows are wider than 8, two consecutive rows of up to 8 each
// otherwise. Summation orders depend on the shape and the number of samples
// per call only, so results do not depend on the thread count; they do
// differ from the BLAS path in the last bits (FMA, other order).
#pragma once

#include <cstdint>

#include "model/layers/conv2d.h"

namespace dctrain::conv2d_avx512 {

// True when this host has the instructions and the shape is one this path
// computes (stride 1, not pointwise, padding at most kernel - 1).
bool handles(const Conv2dShape& s);

// Floats of scratch the path needs per call (at most Conv2dShape::col_size()).
int64_t scratch_size(const Conv2dShape& s);

// Contracts of conv2d_forward / conv2d_backward; scratch holds
// Conv2dShape::col_size() floats. Only when handles(s).
void forward(float* y, float* scratch, const float* x, const float* w, const float* b,
             const Conv2dShape& s);
void backward(float* dx, float* dw, float* db, float* scratch, const float* dy, const float* x,
              const float* w, const Conv2dShape& s, bool accumulate_dx);

}  // namespace dctrain::conv2d_avx512
