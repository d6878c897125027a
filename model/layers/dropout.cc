#include "model/layers/dropout.h"

#include <cmath>

#include "common/random.h"

namespace dctrain {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

uint64_t drop_threshold(double p) {
  return static_cast<uint64_t>(std::ldexp(p, 32));  // in [0, 2^32) for p in [0, 1)
}

// Applies mask * scale to x into y, two elements per 64-bit draw.
template <typename T>
void apply_mask(T* y, const T* x, double p, uint64_t key, size_t count) {
  if (p <= 0.0) {
    if (y != x) {
      for (size_t i = 0; i < count; ++i) y[i] = x[i];
    }
    return;
  }
  const uint64_t threshold = drop_threshold(p);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  size_t i = 0;
  for (uint64_t draw = 0; i < count; ++draw) {
    const uint64_t bits = mix64(key + draw * kGolden);
    y[i] = (bits & 0xffffffffULL) >= threshold ? x[i] * scale : T(0);
    ++i;
    if (i < count) {
      y[i] = (bits >> 32) >= threshold ? x[i] * scale : T(0);
      ++i;
    }
  }
}

}  // namespace

bool dropout_keeps(uint64_t key, size_t index, double p) {
  const uint64_t bits = mix64(key + static_cast<uint64_t>(index / 2) * kGolden);
  const uint64_t lane = index % 2 == 0 ? (bits & 0xffffffffULL) : (bits >> 32);
  return lane >= drop_threshold(p);
}

template <typename T>
void dropout_forward(T* y, const T* x, double p, uint64_t key, size_t count) {
  apply_mask(y, x, p, key, count);
}

template <typename T>
void dropout_backward(T* dx, const T* dy, double p, uint64_t key, size_t count) {
  apply_mask(dx, dy, p, key, count);
}

template void dropout_forward<float>(float*, const float*, double, uint64_t, size_t);
template void dropout_forward<double>(double*, const double*, double, uint64_t, size_t);
template void dropout_backward<float>(float*, const float*, double, uint64_t, size_t);
template void dropout_backward<double>(double*, const double*, double, uint64_t, size_t);

}  // namespace dctrain
