#include "model/layers/residual.h"

namespace dctrain {

template <typename T>
void identity_shortcut_forward(T* y, const T* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] += x[i];
}

template <typename T>
void identity_shortcut_backward(T* dx, const T* dy, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dx[i] += dy[i];
}

template <typename T>
void option_a_shortcut_forward(T* y, const T* x, const ShortcutShape& s) {
  const int oh = s.out_height(), ow = s.out_width(), pad = s.pad();
  for (int i = 0; i < s.n; ++i) {
    for (int c = 0; c < s.in_channels; ++c) {
      const T* xc = x + (int64_t{i} * s.in_channels + c) * s.in_height * s.in_width;
      T* yc = y + (int64_t{i} * s.out_channels + c + pad) * oh * ow;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          yc[oy * ow + ox] += xc[(oy * s.stride) * s.in_width + ox * s.stride];
        }
      }
    }
  }
}

template <typename T>
void option_a_shortcut_backward(T* dx, const T* dy, const ShortcutShape& s) {
  const int oh = s.out_height(), ow = s.out_width(), pad = s.pad();
  for (int i = 0; i < s.n; ++i) {
    for (int c = 0; c < s.in_channels; ++c) {
      T* dxc = dx + (int64_t{i} * s.in_channels + c) * s.in_height * s.in_width;
      const T* dyc = dy + (int64_t{i} * s.out_channels + c + pad) * oh * ow;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          dxc[(oy * s.stride) * s.in_width + ox * s.stride] += dyc[oy * ow + ox];
        }
      }
    }
  }
}

#define DCTRAIN_RESIDUAL(T)                                                       \
  template void identity_shortcut_forward<T>(T*, const T*, int64_t);              \
  template void identity_shortcut_backward<T>(T*, const T*, int64_t);             \
  template void option_a_shortcut_forward<T>(T*, const T*, const ShortcutShape&); \
  template void option_a_shortcut_backward<T>(T*, const T*, const ShortcutShape&);
DCTRAIN_RESIDUAL(float)
DCTRAIN_RESIDUAL(double)
#undef DCTRAIN_RESIDUAL

}  // namespace dctrain
