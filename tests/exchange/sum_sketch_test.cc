// The sketches members report of their contributions (exchange/sum_sketch.h):
// linear, so the sketch of a sum is the sum of the sketches; an estimate of
// the squared norm, shard by shard and part by part; drawn from the seed.
#include "exchange/sum_sketch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "exchange/plan.h"

namespace dctrain {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(n);
  for (float& v : out) v = normal(rng);
  return out;
}

double total(const std::vector<double>& sketch, const SketchShape& shape, bool statistics) {
  double sum = 0.0;
  for (size_t s = 0; s < shape.shards; ++s) {
    sum += squared_norm(sketch, statistics ? shape.statistics_at(s) : shape.gradient_at(s),
                        shape.buckets);
  }
  return sum;
}

TEST(SumSketch, TheSketchOfASumIsTheSumOfTheSketchesUpToTheSumsRounding) {
  const SketchShape shape{10000, 10240, 3, kSketchBuckets, 0x1234};
  const std::vector<float> a = random_values(shape.length, 1);
  const std::vector<float> b = random_values(shape.length, 2);
  std::vector<float> sum(shape.length);
  double magnitude = 0.0;
  for (size_t i = 0; i < sum.size(); ++i) {
    sum[i] = a[i] + b[i];
    magnitude += std::abs(a[i]) + std::abs(b[i]);
  }
  const std::vector<double> sa = sketch_shards(a, shape), sb = sketch_shards(b, shape);
  const std::vector<double> ss = sketch_shards(sum, shape);
  ASSERT_EQ(ss.size(), shape.size());
  for (size_t i = 0; i < ss.size(); ++i) {
    // Each float addition rounds by at most half an ulp of its result.
    EXPECT_NEAR(ss[i], sa[i] + sb[i], magnitude * 0x1p-24) << i;
  }
}

TEST(SumSketch, ItsSquaredNormEstimatesTheSquaredNormOfEachPart) {
  const SketchShape base{50000, 52000, 4, kSketchBuckets, 0};
  std::vector<float> values = random_values(base.parameters, 3);
  const std::vector<float> statistics = random_values(base.length - base.parameters, 4, 30.0f);
  values.insert(values.end(), statistics.begin(), statistics.end());
  double gradient_norm = 0.0, statistics_norm = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    (i < base.parameters ? gradient_norm : statistics_norm) +=
        static_cast<double>(values[i]) * values[i];
  }
  // Over 200 seeds: unbiased (the mean within 3%), and every single
  // estimate within the bounds that its buckets give: the gradient spreads
  // over 4 shards x 64 buckets (a relative standard deviation of about
  // sqrt(2 / 256) = 9%), the statistics lie in the last shard's 64 (18%).
  double mean_gradient = 0.0, mean_statistics = 0.0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SketchShape shape = base;
    shape.seed = seed * 0x9e3779b97f4a7c15ULL;
    const std::vector<double> sketch = sketch_shards(values, shape);
    const double g = total(sketch, shape, false) / gradient_norm;
    const double s = total(sketch, shape, true) / statistics_norm;
    EXPECT_GT(g, 0.7) << seed;
    EXPECT_LT(g, 1.35) << seed;
    EXPECT_GT(s, 0.45) << seed;
    EXPECT_LT(s, 1.8) << seed;
    mean_gradient += g / 200;
    mean_statistics += s / 200;
  }
  EXPECT_NEAR(mean_gradient, 1.0, 0.03);
  EXPECT_NEAR(mean_statistics, 1.0, 0.03);
}

TEST(SumSketch, EachShardAndPartHasItsOwnBuckets) {
  const SketchShape shape{900, 1000, 3, 16, 77};
  const ExchangePlan plan(shape.length, shape.shards, 1);
  // One value in shard 1's gradient, one in shard 2's statistics.
  std::vector<float> values(shape.length, 0.0f);
  values[plan.shard_begin(1) + 5] = 3.0f;
  values[950] = -2.0f;
  ASSERT_GE(950u, plan.shard_begin(2));
  const std::vector<double> sketch = sketch_shards(values, shape);
  for (size_t s = 0; s < shape.shards; ++s) {
    EXPECT_DOUBLE_EQ(squared_norm(sketch, shape.gradient_at(s), shape.buckets), s == 1 ? 9.0 : 0.0);
    EXPECT_DOUBLE_EQ(squared_norm(sketch, shape.statistics_at(s), shape.buckets),
                     s == 2 ? 4.0 : 0.0);
  }
}

TEST(SumSketch, AnotherSeedGivesAnotherSketch) {
  const SketchShape a{1000, 1000, 2, kSketchBuckets, 1};
  SketchShape b = a;
  b.seed = 2;
  const std::vector<float> values = random_values(a.length, 5);
  EXPECT_NE(sketch_shards(values, a), sketch_shards(values, b));
  EXPECT_EQ(sketch_shards(values, a), sketch_shards(values, a)) << "and the same seed the same";
  EXPECT_THROW(sketch_shards(std::vector<float>(999), a), std::invalid_argument);
}

}  // namespace
}  // namespace dctrain
