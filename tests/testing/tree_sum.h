// The summation every data plane and schedule must make
// (comm/rank_order_sum.h), written out from its definition, independently of
// the production code: the first 2 * extra contributions in pairs, the rest
// alone, a balanced tree over those leaves, then 0.0f + the root.
#pragma once

#include <cstddef>
#include <vector>

namespace dctrain::testing {

inline std::vector<float> plus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

// Leaves [begin, end), a power of two of them: the sum of their two halves.
inline std::vector<float> balanced_tree(const std::vector<std::vector<float>>& leaves, size_t begin,
                                        size_t end) {
  if (end - begin == 1) return leaves[begin];
  const size_t middle = begin + (end - begin) / 2;
  return plus(balanced_tree(leaves, begin, middle), balanced_tree(leaves, middle, end));
}

// `contributions` in rank order, at least one.
inline std::vector<float> tree_sum(const std::vector<std::vector<float>>& contributions) {
  size_t p = 1;
  while (p * 2 <= contributions.size()) p *= 2;
  const size_t extra = contributions.size() - p;
  std::vector<std::vector<float>> leaves;
  for (size_t v = 0; v < p; ++v) {
    leaves.push_back(v < extra ? plus(contributions[2 * v], contributions[2 * v + 1])
                               : contributions[v + extra]);
  }
  std::vector<float> sum = balanced_tree(leaves, 0, p);
  for (float& x : sum) x = 0.0f + x;
  return sum;
}

// From zero, each contribution in turn: the same as tree_sum for up to 3.
inline std::vector<float> sequential_sum(const std::vector<std::vector<float>>& contributions) {
  std::vector<float> sum(contributions.front().size(), 0.0f);
  for (const auto& c : contributions) sum = plus(sum, c);
  return sum;
}

}  // namespace dctrain::testing
