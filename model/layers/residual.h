// The shortcut branch of a residual block, out = F(x) + shortcut(x).
//
// Both functions here are the SECOND branch of a fork, so unlike other layers
// they ADD into their outputs: the forward adds the shortcut onto F(x)
// (fusing the residual add), the backward adds its share onto the input
// gradient already written by F's backward.
//
// Identity shortcut: shortcut(x) = x. Option A of He et al. 2016 (the CIFAR
// ResNets): when a stage halves the resolution and doubles the channels,
// shortcut(x) = x[:, :, ::2, ::2] with (out_c - in_c) / 2 zero channels on each
// side, a parameter-free projection (as in the common CIFAR ResNet code:
// F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, planes // 4, planes // 4))).
#pragma once

#include <cstdint>

namespace dctrain {

// y (count) += x (count)
template <typename T>
void identity_shortcut_forward(T* y, const T* x, int64_t count);
// dx (count) += dy (count)
template <typename T>
void identity_shortcut_backward(T* dx, const T* dy, int64_t count);

struct ShortcutShape {
  int n = 1;
  int in_channels = 1, in_height = 1, in_width = 1;
  int out_channels = 1;  // in_channels + 2 * pad, pad >= 0
  int stride = 2;        // subsampling step in both directions

  int out_height() const { return (in_height + stride - 1) / stride; }
  int out_width() const { return (in_width + stride - 1) / stride; }
  int pad() const { return (out_channels - in_channels) / 2; }
};

// y (n, out_c, out_h, out_w) += pad_channels(x (n, in_c, in_h, in_w)[:, :, ::stride, ::stride])
template <typename T>
void option_a_shortcut_forward(T* y, const T* x, const ShortcutShape& s);
// dx (n, in_c, in_h, in_w) += the adjoint: dy's kept channels scattered back
// to the subsampled positions.
template <typename T>
void option_a_shortcut_backward(T* dx, const T* dy, const ShortcutShape& s);

}  // namespace dctrain
