// The one summation of contributions, whichever data plane makes it.
//
// Every replica applies the same float32 sum, bit for bit, because both data
// planes add the same numbers in the same order:
//
//   sum[i] = ((0.0f + c_r0[i]) + c_r1[i]) + ...      r0 < r1 < ... (ranks)
//
// The star adds each contribution as it arrives (coordinator/step/reducer.h, in
// rank order whatever the arrival order); the exchange adds a piece's
// sources at once (exchange/peer.cc). Both call these two functions, so a
// change to the order or the arithmetic changes both.
//
// Contributions are read from received frames, which carry no alignment
// promise: they are taken as bytes and loaded with memcpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace dctrain {

// The largest |x| seen by add_contribution_measured, as the bits of the
// float with its sign cleared (NaN and infinity have the largest).
struct AddedMagnitudes {
  uint32_t contribution = 0;  // of the contribution's values
  uint32_t sum = 0;           // of the running sum after the addition
};

// sum[i] += c[i] for i < sum.size(), `c` holding sum.size() floats.
void add_contribution(std::span<float> sum, const std::byte* c);

// The same, also returning the magnitudes (the star's update guard names the
// contribution that overflowed, or made the running sum overflow).
AddedMagnitudes add_contribution_measured(std::span<float> sum, const std::byte* c);

// out[i] = the rank-order sum of sources[0..n)[i] for i < count, sources in
// ascending rank order. `out` may be one of the sources.
void sum_in_rank_order(std::span<const std::byte* const> sources, size_t count, float* out);

// The bits of |v| (its sign cleared).
inline uint32_t magnitude_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits & 0x7fffffffu;
}

}  // namespace dctrain
