// The GEMM lowering of a convolution shared by the convolution paths.
#pragma once

#include "model/layers/conv2d.h"

namespace dctrain {

// col (in_c * kh * kw, out_h * out_w) from one sample x (in_c, in_h, in_w).
template <typename T>
void im2col(T* col, const T* x, const Conv2dShape& s);

// x (in_c, in_h, in_w) += the adjoint of im2col applied to col.
template <typename T>
void col2im_add(T* x, const T* col, const Conv2dShape& s);

}  // namespace dctrain
