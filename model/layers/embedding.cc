#include "model/layers/embedding.h"

#include <cstddef>

namespace dctrain {

template <typename T>
void embedding_forward(T* y, const int32_t* tokens, const int32_t* types, const T* word,
                       const T* position, const T* token_type, int n, int t, int hidden) {
  const auto h = static_cast<size_t>(hidden);
  for (int s = 0; s < n; ++s) {
    for (int p = 0; p < t; ++p) {
      const size_t row = static_cast<size_t>(s) * t + p;
      const T* w = word + static_cast<size_t>(tokens[row]) * h;
      const T* q = position + static_cast<size_t>(p) * h;
      const T* k = token_type + static_cast<size_t>(types[row]) * h;
      T* out = y + row * h;
      for (size_t j = 0; j < h; ++j) out[j] = w[j] + q[j] + k[j];
    }
  }
}

template <typename T>
void embedding_backward(T* dword, T* dposition, T* dtoken_type, const T* dy, const int32_t* tokens,
                        const int32_t* types, int n, int t, int hidden) {
  const auto h = static_cast<size_t>(hidden);
  for (int s = 0; s < n; ++s) {
    for (int p = 0; p < t; ++p) {
      const size_t row = static_cast<size_t>(s) * t + p;
      const T* g = dy + row * h;
      if (dword != nullptr) {
        T* w = dword + static_cast<size_t>(tokens[row]) * h;
        for (size_t j = 0; j < h; ++j) w[j] += g[j];
      }
      if (dposition != nullptr) {
        T* q = dposition + static_cast<size_t>(p) * h;
        for (size_t j = 0; j < h; ++j) q[j] += g[j];
      }
      if (dtoken_type != nullptr) {
        T* k = dtoken_type + static_cast<size_t>(types[row]) * h;
        for (size_t j = 0; j < h; ++j) k[j] += g[j];
      }
    }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const int32_t*, const float*,
                                       const float*, const float*, int, int, int);
template void embedding_forward<double>(double*, const int32_t*, const int32_t*, const double*,
                                        const double*, const double*, int, int, int);
template void embedding_backward<float>(float*, float*, float*, const float*, const int32_t*,
                                        const int32_t*, int, int, int);
template void embedding_backward<double>(double*, double*, double*, const double*, const int32_t*,
                                         const int32_t*, int, int, int);

}  // namespace dctrain
