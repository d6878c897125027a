// The star's reduce (coordinator/step/reducer.h) sums contributions in the
// tree fixed by their rank order whatever order they arrive in: the sum the
// exchange's members make (comm/rank_order_sum.h, tests/exchange/peer_test.cc),
// bit for bit, and the tree written out (tests/testing/tree_sum.h); a
// contribution settled without a message or forgotten adds nothing; a held
// reduce adds nothing until released, then all but the refused; an unusable
// sum names the contribution that made it so.
#include "coordinator/step/reducer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "comm/framing.h"
#include "comm/rank_order_sum.h"
#include "common/usable_values.h"
#include "tests/testing/tree_sum.h"

namespace dctrain {
namespace {

constexpr size_t kGradient = 1001, kStatistics = 7;

std::vector<float> values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mantissa(0.5f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng)) * (rng() & 1 ? -1.0f : 1.0f);
  v[0] = -0.0f;  // an all -0.0 column sums to +0.0 from zero
  return v;
}

Message contribution(const std::vector<float>& v) {
  Message m;
  add_tensor(m, "gradient", std::span<const float>(v).first(kGradient));
  add_tensor(m, "statistics", std::span<const float>(v).last(kStatistics));
  return m;
}

// The exchange's form: the members' contributions as one span each.
std::vector<float> exchange_sum(const std::vector<std::vector<float>>& in_rank_order) {
  std::vector<const std::byte*> at;
  for (const auto& v : in_rank_order) at.push_back(reinterpret_cast<const std::byte*>(v.data()));
  std::vector<float> out(kGradient + kStatistics);
  sum_in_rank_order(at, out.size(), out.data());
  return out;
}

std::vector<float> star_sum(Reducer& r) {
  std::vector<float> out(r.gradient().begin(), r.gradient().end());
  out.insert(out.end(), r.statistics().begin(), r.statistics().end());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Reducer, ContributionsArrivingInAnyOrderGiveTheExchangesRankOrderSumBitForBit) {
  const std::vector<uint32_t> ranks{0, 2, 3, 5};
  std::vector<std::vector<float>> c;
  for (uint32_t r : ranks) c.push_back(values(kGradient + kStatistics, 100 + r));
  const std::vector<float> expected = exchange_sum(c);
  EXPECT_FALSE(std::signbit(expected[0]));
  EXPECT_TRUE(same_bits(testing::tree_sum(c), expected));

  for (const std::vector<size_t>& arrival :
       {std::vector<size_t>{3, 2, 1, 0}, std::vector<size_t>{1, 3, 0, 2}}) {
    Reducer star(kGradient, kStatistics);
    star.begin({5, 3, 2, 0});
    for (size_t i : arrival) star.add(ranks[i], contribution(c[i]));
    ASSERT_TRUE(star.complete());
    EXPECT_TRUE(same_bits(star_sum(star), expected));
  }
  // The check has teeth: in the first arrival order the sum differs.
  const std::vector<std::vector<float>> arrived{c[1], c[3], c[0], c[2]};
  EXPECT_FALSE(same_bits(exchange_sum(arrived), expected));
}

TEST(Reducer, SettledAndForgottenRanksAddNothing) {
  std::vector<std::vector<float>> c{values(kGradient + kStatistics, 1),
                                    values(kGradient + kStatistics, 2),
                                    values(kGradient + kStatistics, 3)};
  Reducer star(kGradient, kStatistics);
  star.begin({0, 1, 2});
  star.add(2, contribution(c[2]));
  star.forget(1);  // died before its contribution
  EXPECT_FALSE(star.complete());
  star.add(0, contribution(c[0]));
  EXPECT_TRUE(star.complete());
  EXPECT_TRUE(star.has(0));
  EXPECT_FALSE(star.has(1));
  EXPECT_TRUE(same_bits(star_sum(star), exchange_sum({c[0], c[2]})));
}

TEST(Reducer, AHeldReduceAddsOnlyOnReleaseAndLeavesTheRefusedOut) {
  std::vector<std::vector<float>> c{values(kGradient + kStatistics, 4),
                                    values(kGradient + kStatistics, 5),
                                    values(kGradient + kStatistics, 6)};
  Reducer star(kGradient, kStatistics);
  star.set_holding(true);
  star.begin({0, 1, 2});
  for (uint32_t r : {2u, 0u, 1u}) star.add(r, contribution(c[r]));
  ASSERT_TRUE(star.complete());
  EXPECT_TRUE(same_bits(star_sum(star), std::vector<float>(kGradient + kStatistics, 0.0f)));
  star.release({1});
  EXPECT_FALSE(star.has(1));
  EXPECT_TRUE(same_bits(star_sum(star), exchange_sum({c[0], c[2]})));
}

TEST(Reducer, AnUnusableSumNamesTheContributionsThatMadeItSo) {
  // Ranks 0-4 (leaves (c0 + c1), c2, c3, c4): c3 and c4 hold 1e19 in one
  // element, below 2^64 alone; the node (c3 + c4) reaches it.
  std::vector<std::vector<float>> c;
  for (uint32_t r = 0; r < 5; ++r) c.push_back(values(kGradient + kStatistics, 20 + r));
  c[3][10] = c[4][10] = 1e19f;
  Reducer star(kGradient, kStatistics);
  star.begin({0, 1, 2, 3, 4});
  for (uint32_t r : {4u, 1u, 0u, 3u, 2u}) star.add(r, contribution(c[r]));
  ASSERT_TRUE(star.complete());
  EXPECT_FALSE(usable(star.gradient()));
  for (const auto& [rank, a] : star.added()) {
    EXPECT_FALSE(a.overflows) << rank;
    EXPECT_EQ(a.sum_overflowed, rank == 4) << rank;
  }
  // A contribution beyond the bound alone is named as such.
  c[2][kGradient + 1] = 1e30f;
  star.begin({0, 1, 2, 3, 4});
  for (uint32_t r = 0; r < 5; ++r) star.add(r, contribution(c[r]));
  EXPECT_TRUE(star.added().at(2).overflows);
  EXPECT_FALSE(star.added().at(3).overflows);
}

}  // namespace
}  // namespace dctrain
