#include "comm/rank_order_sum.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace dctrain {

namespace {

// A received float, loaded unaligned (the compiler makes it a vector load).
inline float load(const std::byte* c, size_t i) {
  float v;
  std::memcpy(&v, c + i * sizeof(float), sizeof v);
  return v;
}

// The tree sum keeps its partial sums of a block on the stack: one per level
// of the tree still open (at most 64), kBlock floats each.
constexpr size_t kBlock = 256;
constexpr size_t kLevels = 64;

// The leaves of the tree over `n` sources: leaf v's first source and how
// many (1 or 2).
struct Leaves {
  size_t count;  // P
  size_t extra;  // n - P
  size_t first(size_t v) const { return v < extra ? 2 * v : v + extra; }
  size_t width(size_t v) const { return v < extra ? 2 : 1; }
};

Leaves leaves_of(size_t n) {
  const size_t p = std::bit_floor(n);
  return {p, n - p};
}

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

void add_node(const float* a, const std::byte* b, float* out, size_t count, bool root) {
  if (root) {
    for (size_t i = 0; i < count; ++i) out[i] = 0.0f + (a[i] + load(b, i));
  } else {
    for (size_t i = 0; i < count; ++i) out[i] = a[i] + load(b, i);
  }
}

void finish_single(const float* a, float* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = 0.0f + a[i];
}

void sum_in_rank_order(std::span<const std::byte* const> sources, size_t count, float* out) {
  const size_t n = sources.size();
  if (n == 0) {
    std::fill(out, out + count, 0.0f);
    return;
  }
  const Leaves leaves = leaves_of(n);
  // The open partial sums, a binary counter over the leaves: level[k] holds
  // a subtree of 2^height[k] leaves; equal heights merge as they meet.
  float partial[kLevels][kBlock];
  size_t height[kLevels];
  for (size_t i = 0; i < count; i += kBlock) {
    const size_t m = std::min(kBlock, count - i);
    const size_t at = i * sizeof(float);
    size_t open = 0;
    for (size_t v = 0; v < leaves.count; ++v) {
      float* leaf = partial[open];
      const size_t first = leaves.first(v);
      if (leaves.width(v) == 2) {
        for (size_t j = 0; j < m; ++j) {
          leaf[j] = load(sources[first] + at, j) + load(sources[first + 1] + at, j);
        }
      } else {
        for (size_t j = 0; j < m; ++j) leaf[j] = load(sources[first] + at, j);
      }
      size_t h = 0;
      while (open > 0 && height[open - 1] == h) {
        float* left = partial[open - 1];
        for (size_t j = 0; j < m; ++j) left[j] = left[j] + leaf[j];
        leaf = left;
        --open;
        ++h;
      }
      height[open++] = h;
    }
    // P is a power of two: one subtree is left, the root.
    finish_single(partial[0], out + i, m);
  }
}

std::optional<size_t> first_overflowing_node(std::span<const std::byte* const> sources,
                                             size_t count, float bound) {
  const size_t n = sources.size();
  if (n == 0) return std::nullopt;
  const Leaves leaves = leaves_of(n);
  const auto over = [bound](float v) { return !(std::fabs(v) < bound); };
  struct Node {
    float value;
    size_t first;  // its first source
    bool over;     // it or a node below it reached the bound
    size_t height;
  };
  std::optional<size_t> found;
  const auto merge = [&](const Node& a, const Node& b, size_t height) {
    const float v = a.value + b.value;
    const bool fresh = over(v) && !a.over && !b.over;
    if (fresh && (!found || b.first < *found)) found = b.first;
    return Node{v, a.first, a.over || b.over || over(v), height};
  };
  std::vector<Node> open;
  for (size_t i = 0; i < count; ++i) {
    open.clear();
    for (size_t v = 0; v < leaves.count; ++v) {
      const size_t first = leaves.first(v);
      const float x = load(sources[first], i);
      Node node{x, first, over(x), 0};
      if (leaves.width(v) == 2) {
        const float y = load(sources[first + 1], i);
        node = merge(node, Node{y, first + 1, over(y), 0}, 0);
      }
      while (!open.empty() && open.back().height == node.height) {
        node = merge(open.back(), node, node.height + 1);
        open.pop_back();
      }
      open.push_back(node);
    }
  }
  return found;
}

}  // namespace dctrain
