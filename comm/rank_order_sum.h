// The one summation of contributions, whichever data plane makes it.
//
// Every replica applies the same float32 sum, bit for bit, because every
// data plane and every exchange schedule adds the same numbers in the same
// tree. The tree is fixed by the number of contributions n and their rank
// order c_0 < c_1 < ... (ranks), nothing else:
//
//   P = the largest power of two <= n, extra = n - P
//   leaves, in rank order:  l_v = c_2v + c_2v+1        for v < extra
//                           l_v = c_(v + extra)         for extra <= v < P
//   a balanced pairwise tree over the P leaves: (l_0 + l_1), (l_2 + l_3), ...
//   then those pairs in pairs, until one root
//   sum = 0.0f + root      (so a column of -0.0 sums to +0.0)
//
// For n <= 3 this is the sum from zero in rank order; from 4 on it is not:
// the tree is what recursive halving computes (exchange/halving_round.h: the
// first 2 * extra members fold into pairs, then P members halve), and the
// direct exchange's shard owners and the star's reducer compute the same
// tree from all the contributions at once. Float addition is commutative bit
// for bit, so which member adds a node's two halves does not matter; its
// grouping is what fixes the bits.
//
// Contributions are read from received frames, which carry no alignment
// promise: they are taken as bytes and loaded with memcpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
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

// The same, also returning the magnitudes.
AddedMagnitudes add_contribution_measured(std::span<float> sum, const std::byte* c);

// out[i] = the tree sum (above) of sources[0..n)[i] for i < count, sources
// in ascending rank order. `out` may be one of the sources.
void sum_in_rank_order(std::span<const std::byte* const> sources, size_t count, float* out);

// One node of the tree: out[i] = a[i] + b[i]; `root`: the tree's root,
// out[i] = 0.0f + (a[i] + b[i]). `out` may be `a`.
void add_node(const float* a, const std::byte* b, float* out, size_t count, bool root);
// The root of a tree of one leaf: out[i] = 0.0f + a[i].
void finish_single(const float* a, float* out, size_t count);

// Of sources whose tree sum holds a value at or beyond `bound` in magnitude
// (or NaN) while no source does: the position of the first source of the
// right-hand half of the first node (in source order) that reached it while
// its two halves had not. Nothing when no node did. For naming the
// contribution that made the sum overflow (the star's update guard); slow,
// for the rare step whose sum is unusable.
std::optional<size_t> first_overflowing_node(std::span<const std::byte* const> sources,
                                             size_t count, float bound);

// The bits of |v| (its sign cleared).
inline uint32_t magnitude_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits & 0x7fffffffu;
}

}  // namespace dctrain
