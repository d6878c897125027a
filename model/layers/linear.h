// Fully connected layer: y = x W^T + b (PyTorch's nn.Linear layout).
//
// Layer conventions (every file in model/layers/ follows them):
// - forward and backward side by side, templated on the scalar (float for
//   training, double for finite-difference checks);
// - argument order: outputs, saved values, inputs, parameters, sizes;
// - backward ADDS into parameter gradients; it OVERWRITES the input gradient,
//   and skips it when that pointer is null (first layer).
#pragma once

namespace dctrain {

// y (n, out) = x (n, in) * w^T (in, out) + b (out). b may be null (no bias).
template <typename T>
void linear_forward(T* y, const T* x, const T* w, const T* b, int n, int in, int out);

// dx (n, in) = dy (n, out) * w (out, in)      (skipped when dx is null)
// dw (out, in) += dy^T * x;  db (out) += sum over rows of dy (skipped when null)
template <typename T>
void linear_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int n, int in,
                     int out);

}  // namespace dctrain
