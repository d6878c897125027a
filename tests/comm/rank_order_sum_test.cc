// The one summation of every data plane and schedule (comm/rank_order_sum.h):
// the tree over the sources in rank order (tests/testing/tree_sum.h writes it
// out from its definition); from zero in rank order for up to 3 sources; over
// frames that are not float-aligned, into one of its sources; its nodes one
// at a time as recursive halving adds them; the node that overflowed.
#include "comm/rank_order_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tests/testing/tree_sum.h"

namespace dctrain {
namespace {

using Values = std::vector<float>;

std::vector<Values> sources_for(size_t count, size_t length, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mantissa(0.5f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<Values> out(count, Values(length));
  for (auto& v : out) {
    for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng)) * (rng() & 1 ? -1.0f : 1.0f);
  }
  return out;
}

Values reference(const std::vector<Values>& sources) {
  return testing::tree_sum(sources);
}
Values sequential(const std::vector<Values>& sources) {
  return testing::sequential_sum(sources);
}

bool same_bits(const Values& a, const Values& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Each source one byte off float alignment, as a received frame may be.
struct Unaligned {
  std::vector<std::vector<std::byte>> bytes;
  std::vector<const std::byte*> at;
  explicit Unaligned(const std::vector<Values>& sources) : bytes(sources.size()) {
    for (size_t s = 0; s < sources.size(); ++s) {
      bytes[s].resize(sources[s].size() * sizeof(float) + 1);
      std::memcpy(bytes[s].data() + 1, sources[s].data(), sources[s].size() * sizeof(float));
      at.push_back(bytes[s].data() + 1);
    }
  }
};

TEST(RankOrderSum, IsTheTreeOverTheSourcesInRankOrderForOneToSeventeenOverUnalignedBytes) {
  // Longer than the block the sum keeps on the stack, and odd.
  constexpr size_t kLength = 2 * 256 + 37;
  for (size_t n = 1; n <= 17; ++n) {
    auto sources = sources_for(n, kLength, 3 + n);
    for (auto& s : sources) s[5] = -0.0f;
    const Values expected = reference(sources);
    EXPECT_FALSE(std::signbit(expected[5])) << n;  // 0.0f + -0.0f is +0.0f
    const Unaligned in(sources);
    Values out(kLength);
    sum_in_rank_order(in.at, kLength, out.data());
    EXPECT_TRUE(same_bits(out, expected)) << n << " sources";
    // Up to 3 sources the tree is the sum from zero in rank order.
    if (n <= 3) {
      EXPECT_TRUE(same_bits(out, sequential(sources))) << n << " sources";
    }
  }
}

TEST(RankOrderSum, TheGroupingIsTheSumsOwnFromFourSources) {
  auto sources = sources_for(8, 3000, 5);
  const Values expected = reference(sources);
  const Unaligned in(sources);
  Values out(3000);
  sum_in_rank_order(in.at, 3000, out.data());
  ASSERT_TRUE(same_bits(out, expected));
  // Another grouping of the same numbers gives other bits: from zero in
  // rank order, or the tree over the sources rotated by one. (Reversed, a
  // balanced tree is its own mirror image: addition commutes bit for bit.)
  EXPECT_FALSE(same_bits(sequential(sources), expected));
  std::vector<const std::byte*> rotated(in.at.begin() + 1, in.at.end());
  rotated.push_back(in.at.front());
  Values other(3000);
  sum_in_rank_order(rotated, 3000, other.data());
  EXPECT_FALSE(same_bits(other, expected));
  std::vector<const std::byte*> reversed(in.at.rbegin(), in.at.rend());
  sum_in_rank_order(reversed, 3000, other.data());
  EXPECT_TRUE(same_bits(other, expected));
}

TEST(RankOrderSum, TheOutputMayBeOneOfTheSources) {
  auto sources = sources_for(6, 3000, 8);
  const Values expected = reference(sources);
  std::vector<const std::byte*> at;
  for (const auto& s : sources) at.push_back(reinterpret_cast<const std::byte*>(s.data()));
  sum_in_rank_order(at, 3000, sources[1].data());
  EXPECT_TRUE(same_bits(sources[1], expected));
}

TEST(RankOrderSum, NodesAddedOneAtATimeGiveTheSameBits) {
  // Six sources: (s0 + s1), (s2 + s3), s4, s5 as leaves; the nodes as
  // recursive halving adds them, with the received half unaligned.
  auto s = sources_for(6, 700, 9);
  const Unaligned in(s);
  Values a(700), b(700), out(700);
  add_node(s[0].data(), in.at[1], a.data(), 700, false);
  add_node(s[2].data(), in.at[3], b.data(), 700, false);
  add_node(a.data(), reinterpret_cast<const std::byte*>(b.data()), a.data(), 700, false);
  add_node(s[4].data(), in.at[5], b.data(), 700, false);
  add_node(a.data(), reinterpret_cast<const std::byte*>(b.data()), out.data(), 700, true);
  EXPECT_TRUE(same_bits(out, reference(s)));
  Values one(700);
  finish_single(s[2].data(), one.data(), 700);
  EXPECT_TRUE(same_bits(one, reference({s[2]})));
}

TEST(RankOrderSum, TheNodeThatOverflowedNamesTheFirstSourceOfItsRightHalf) {
  constexpr float kBound = 18446744073709551616.0f;  // 2^64
  std::vector<Values> s(5, Values(3, 1.0f));
  // Leaves (s0 + s1), s2, s3, s4: in element 1, ((s0 + s1) + s2) and
  // (s3 + s4) stay below the bound and the root reaches it.
  s[2][1] = s[3][1] = 1e19f;
  std::vector<const std::byte*> at;
  for (const auto& v : s) at.push_back(reinterpret_cast<const std::byte*>(v.data()));
  EXPECT_EQ(first_overflowing_node(at, 3, kBound), 3u);
  // In element 0, the pair leaf (s0 + s1) reaches it first (source order).
  s[0][0] = s[1][0] = 1e19f;
  EXPECT_EQ(first_overflowing_node(at, 3, kBound), 1u);
  // A source beyond the bound alone is no node's doing.
  std::vector<Values> alone(3, Values(2, 1.0f));
  alone[1][0] = std::numeric_limits<float>::infinity();
  std::vector<const std::byte*> at_alone;
  for (const auto& v : alone) at_alone.push_back(reinterpret_cast<const std::byte*>(v.data()));
  EXPECT_EQ(first_overflowing_node(at_alone, 2, kBound), std::nullopt);
  std::vector<Values> fine(4, Values(2, 1.0f));
  std::vector<const std::byte*> at_fine;
  for (const auto& v : fine) at_fine.push_back(reinterpret_cast<const std::byte*>(v.data()));
  EXPECT_EQ(first_overflowing_node(at_fine, 2, kBound), std::nullopt);
}

TEST(RankOrderSum, MeasuredAdditionsReportTheLargestMagnitudes) {
  std::vector<float> sum = {1.0f, -3.0f, 0.5f};
  const std::vector<float> c = {-8.0f, 2.0f, 0.25f};
  const AddedMagnitudes m =
      add_contribution_measured(sum, reinterpret_cast<const std::byte*>(c.data()));
  EXPECT_EQ(m.contribution, magnitude_bits(8.0f));
  EXPECT_EQ(m.sum, magnitude_bits(7.0f));  // |1 - 8|
  EXPECT_EQ(sum, (std::vector<float>{-7.0f, -1.0f, 0.75f}));

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> zero(2, 0.0f);
  const std::vector<float> bad = {-inf, 1.0f};
  EXPECT_EQ(add_contribution_measured(zero, reinterpret_cast<const std::byte*>(bad.data())).sum,
            magnitude_bits(inf));
  const std::vector<float> worse = {nan, 1.0f};
  EXPECT_GT(add_contribution_measured(zero, reinterpret_cast<const std::byte*>(worse.data()))
                .contribution,
            magnitude_bits(inf));
}

}  // namespace
}  // namespace dctrain
