// Max-pooling (square window, no padding) and global average pooling.
// Conventions as in linear.h.
#pragma once

#include <cstdint>

namespace dctrain {

struct MaxPoolShape {
  int n = 1, channels = 1, in_height = 1, in_width = 1;
  int window = 2;
  int stride = 2;

  int out_height() const { return (in_height - window) / stride + 1; }
  int out_width() const { return (in_width - window) / stride + 1; }
};

// y (n, c, out_h, out_w) = max over each window of x (n, c, in_h, in_w);
// argmax (n, c, out_h, out_w) = the index within the sample's channel plane
// (iy * in_w + ix) of the first maximum, saved for backward.
template <typename T>
void max_pool_forward(T* y, int32_t* argmax, const T* x, const MaxPoolShape& s);

// dx (n, c, in_h, in_w) overwritten: dy routed to the saved argmax positions
// (summed where windows overlap). Skipped when null.
template <typename T>
void max_pool_backward(T* dx, const T* dy, const int32_t* argmax, const MaxPoolShape& s);

// y (n, c) = mean of x (n, c, spatial) over spatial.
template <typename T>
void global_avg_pool_forward(T* y, const T* x, int n, int channels, int spatial);

// dx (n, c, spatial) = dy (n, c) / spatial.
template <typename T>
void global_avg_pool_backward(T* dx, const T* dy, int n, int channels, int spatial);

}  // namespace dctrain
