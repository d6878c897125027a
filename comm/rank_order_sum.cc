#include "comm/rank_order_sum.h"

#include <algorithm>
#include <cstring>

namespace dctrain {

namespace {

// A received float, loaded unaligned (the compiler makes it a vector load).
inline float load(const std::byte* c, size_t i) {
  float v;
  std::memcpy(&v, c + i * sizeof(float), sizeof v);
  return v;
}

// The rank-order sum keeps its running block on the stack while every source
// of a piece is added.
constexpr size_t kBlock = 1024;

}  // namespace

void add_contribution(std::span<float> sum, const std::byte* c) {
  float* a = sum.data();
  for (size_t i = 0; i < sum.size(); ++i) a[i] += load(c, i);
}

AddedMagnitudes add_contribution_measured(std::span<float> sum, const std::byte* c) {
  AddedMagnitudes out;
  float* a = sum.data();
  for (size_t i = 0; i < sum.size(); ++i) {
    const float v = load(c, i);
    a[i] += v;
    out.contribution = std::max(out.contribution, magnitude_bits(v));
    out.sum = std::max(out.sum, magnitude_bits(a[i]));
  }
  return out;
}

void sum_in_rank_order(std::span<const std::byte* const> sources, size_t count, float* out) {
  float acc[kBlock];
  for (size_t i = 0; i < count; i += kBlock) {
    const size_t m = std::min(kBlock, count - i);
    std::fill(acc, acc + m, 0.0f);
    for (const std::byte* source : sources) add_contribution({acc, m}, source + i * sizeof(float));
    std::memcpy(out + i, acc, m * sizeof(float));
  }
}

}  // namespace dctrain
