#include "common/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace dctrain {
namespace {

TEST(HashKey, IsAPureFunctionOfItsParts) {
  EXPECT_EQ(hash_key({7, 3, 12345}), hash_key({7, 3, 12345}));
  EXPECT_NE(hash_key({7, 3, 12345}), hash_key({7, 3, 12346}));
  EXPECT_NE(hash_key({7, 3, 12345}), hash_key({7, 4, 12345}));
  // Order matters: (epoch, id) is not (id, epoch).
  EXPECT_NE(hash_key({1, 2}), hash_key({2, 1}));
}

TEST(Rng, SameKeySameStream) {
  Rng a({1, 2, 3});
  Rng b({1, 2, 3});
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.next_u64(), b.next_u64());
}

TEST(Rng, UniformFloatCoversUnitIntervalWithTheRightMean) {
  Rng rng(42);
  double sum = 0.0;
  float lo = 1.0f, hi = 0.0f;
  constexpr int kDraws = 200000;
  for (int i = 0; i < kDraws; ++i) {
    const float u = rng.uniform_float();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  // Standard error of the mean is 0.29 / sqrt(2e5) = 6.5e-4: 0.005 is 7 sigma.
  EXPECT_NEAR(sum / kDraws, 0.5, 0.005);
  EXPECT_LT(lo, 0.001f);
  EXPECT_GT(hi, 0.999f);
}

TEST(Rng, BelowStaysInRangeAndHitsEveryValue) {
  Rng rng(7);
  std::set<uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t v = rng.below(10);
    ASSERT_LT(v, 10u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(Rng, NormalHasUnitMomentsApproximately) {
  Rng rng(99);
  constexpr int kDraws = 200000;
  double sum = 0.0, sum_sq = 0.0;
  for (int i = 0; i < kDraws; ++i) {
    const double x = rng.normal();
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
  }
  const double mean = sum / kDraws;
  // Standard error of the mean is 1 / sqrt(2e5) = 2.2e-3; of the variance 3.2e-3.
  EXPECT_NEAR(mean, 0.0, 0.015);
  EXPECT_NEAR(sum_sq / kDraws - mean * mean, 1.0, 0.02);
}

}  // namespace
}  // namespace dctrain
