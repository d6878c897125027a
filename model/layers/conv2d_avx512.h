// The float convolution path for x86-64 hosts with AVX-512.
//
// Stride 1 with padding below the kernel size (every ResNet-20 and MNIST-CNN
// layer but the two stride-2 ones) works straight from a zero-padded copy of
// the input, with no im2col:
//   forward:  y (out_c, P) = w (out_c, K) * B, where row k = (c, ky, kx) of B
//             is the padded input plane c shifted by (ky, kx): the kernel
//             loads it directly, 16 output positions per vector, in an
//             8-channel x 3-vector register tile.
//   dx:       the same kernel on the padded dy with the weights transposed
//             and flipped (a stride-1 convolution's input gradient is a
//             convolution of dy), so no col2im scatter.
//   dw:       dw (out_c, K) += dy (out_c, P) * B^T, 4 x 5 outputs per tile,
//             16 positions per vector, summed over a group of samples that
//             stays in L2 before the horizontal sums.
// Other shapes run the same forward kernel on one sample's im2col matrix,
// and the backward as im2col + BLAS (dw) and BLAS + col2im (dx).
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

// True when this host has the instructions and the layer is not pointwise
// (a pointwise layer is one plain GEMM, left to BLAS).
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
