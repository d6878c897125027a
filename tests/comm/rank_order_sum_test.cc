// The one summation of both data planes (comm/rank_order_sum.h): from zero,
// in the order of the sources, over frames that are not float-aligned, into
// one of its sources; the magnitudes the star's update guard reads.
#include "comm/rank_order_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace dctrain {
namespace {

std::vector<std::vector<float>> sources_for(size_t count, size_t length, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mantissa(0.5f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<std::vector<float>> out(count, std::vector<float>(length));
  for (auto& v : out) {
    for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng)) * (rng() & 1 ? -1.0f : 1.0f);
  }
  return out;
}

// The definition, written out: a zero-filled sum, each source added in turn.
std::vector<float> reference(const std::vector<std::vector<float>>& sources) {
  std::vector<float> sum(sources[0].size(), 0.0f);
  for (const auto& s : sources) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += s[i];
  }
  return sum;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(RankOrderSum, BothFormsAreTheSumFromZeroInTheSourcesOrderOverUnalignedBytes) {
  // Longer than the block the piece sum keeps on the stack, and odd.
  constexpr size_t kLength = 2 * 1024 + 37;
  auto sources = sources_for(5, kLength, 3);
  sources[0][5] = sources[1][5] = sources[2][5] = sources[3][5] = sources[4][5] = -0.0f;
  const std::vector<float> expected = reference(sources);
  EXPECT_FALSE(std::signbit(expected[5]));  // 0.0f + -0.0f is +0.0f

  // Each source one byte off float alignment, as a received frame may be.
  std::vector<std::vector<std::byte>> bytes(sources.size());
  std::vector<const std::byte*> at(sources.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    bytes[s].resize(kLength * sizeof(float) + 1);
    std::memcpy(bytes[s].data() + 1, sources[s].data(), kLength * sizeof(float));
    at[s] = bytes[s].data() + 1;
  }
  std::vector<float> pieces(kLength);
  sum_in_rank_order(at, kLength, pieces.data());
  EXPECT_TRUE(same_bits(pieces, expected));

  std::vector<float> running(kLength, 0.0f);
  for (const std::byte* s : at) add_contribution(running, s);
  EXPECT_TRUE(same_bits(running, expected));

  std::vector<float> measured(kLength, 0.0f);
  for (const std::byte* s : at) add_contribution_measured(measured, s);
  EXPECT_TRUE(same_bits(measured, expected));

  // The order is the sum's: reversed, the bits differ.
  std::vector<const std::byte*> reversed(at.rbegin(), at.rend());
  std::vector<float> other(kLength);
  sum_in_rank_order(reversed, kLength, other.data());
  EXPECT_FALSE(same_bits(other, expected));
}

TEST(RankOrderSum, TheOutputMayBeOneOfTheSources) {
  auto sources = sources_for(3, 3000, 8);
  const std::vector<float> expected = reference(sources);
  std::vector<const std::byte*> at;
  for (const auto& s : sources) at.push_back(reinterpret_cast<const std::byte*>(s.data()));
  sum_in_rank_order(at, 3000, sources[1].data());
  EXPECT_TRUE(same_bits(sources[1], expected));
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
