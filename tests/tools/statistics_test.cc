// The report's statistics against known values: closed forms of Student's
// t for 1 and 2 degrees of freedom, and reference numbers computed with
// mpmath at 30 digits (numerical integration of the t density, and a root
// finder for the quantiles), written down here.
#include "tools/report/statistics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace dctrain {
namespace {

TEST(Statistics, StudentTCdfMatchesClosedForms) {
  for (double t : {-30.0, -2.5, -1.0, -0.1, 0.0, 0.3, 1.0, 4.0, 100.0}) {
    // df = 1: Cauchy.
    EXPECT_NEAR(student_t_cdf(t, 1.0), 0.5 + std::atan(t) / std::numbers::pi, 1e-13) << t;
    // df = 2: 1/2 + t / (2 sqrt(2 + t^2)).
    EXPECT_NEAR(student_t_cdf(t, 2.0), 0.5 + t / (2.0 * std::sqrt(2.0 + t * t)), 1e-13) << t;
  }
  EXPECT_EQ(student_t_cdf(0.0, 7.5), 0.5);
}

TEST(Statistics, StudentTCdfMatchesReferenceValues) {
  EXPECT_NEAR(student_t_cdf(2.0, 3.0), 0.93033701572057841, 1e-12);
  EXPECT_NEAR(student_t_cdf(1.5, 7.3), 0.91221845359845716, 1e-12);
  EXPECT_NEAR(student_t_cdf(-0.7, 4.5), 0.25921980115580899, 1e-12);
  EXPECT_NEAR(student_t_cdf(3.1, 12.0), 0.99540500181080433, 1e-12);
}

TEST(Statistics, StudentTQuantileMatchesReferenceValues) {
  EXPECT_NEAR(student_t_quantile(0.975, 2.0), 4.3026527297494639, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 4.0), 2.7764451051977944, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 10.0), 2.2281388519862747, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 3.7), 2.8675207071911894, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.025, 10.0), -2.2281388519862747, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.5, 3.0), 0.0, 1e-12);
}

TEST(Statistics, MeanIntervalOfFourValues) {
  const MeanInterval ci = mean_interval({10.2, 11.1, 9.8, 10.5});
  EXPECT_NEAR(ci.mean, 10.4, 1e-12);
  EXPECT_NEAR(ci.low, 9.5284511852735704, 1e-9);
  EXPECT_NEAR(ci.high, 11.271548814726429, 1e-9);
  EXPECT_EQ(ci.count, 4u);
  const MeanInterval one = mean_interval({3.0});
  EXPECT_EQ(one.low, 3.0);
  EXPECT_EQ(one.high, 3.0);
}

TEST(Statistics, WelchTestMatchesReferenceValues) {
  const auto w = welch_test({10.2, 11.1, 9.8, 10.5}, {12.0, 12.9, 11.4});
  ASSERT_TRUE(w.has_value());
  EXPECT_NEAR(w->t, -3.3023719320146993, 1e-12);
  EXPECT_NEAR(w->df, 3.5244667503136746, 1e-12);
  EXPECT_NEAR(w->p, 0.036038930736991897, 1e-10);
  // Symmetric in its arguments but for the sign of t.
  const auto back = welch_test({12.0, 12.9, 11.4}, {10.2, 11.1, 9.8, 10.5});
  ASSERT_TRUE(back.has_value());
  EXPECT_NEAR(back->t, -w->t, 1e-12);
  EXPECT_NEAR(back->p, w->p, 1e-12);
  // Identical samples: no evidence of a difference.
  EXPECT_NEAR(welch_test({1.0, 2.0, 3.0}, {1.0, 2.0, 3.0})->p, 1.0, 1e-12);
  // Too few values, or no spread at all: no test.
  EXPECT_FALSE(welch_test({1.0}, {2.0, 3.0}).has_value());
  EXPECT_FALSE(welch_test({1.0, 1.0}, {2.0, 2.0}).has_value());
}

TEST(Statistics, RatioIntervalOfTwoMeansOnTheLogScale) {
  // Means 2 and 1; relative variances of the means 0.04 / (3 * 4) and
  // 0.01 / 3, equal, so Welch-Satterthwaite gives 2 (n - 1) = 4 degrees of
  // freedom; half width t(0.975, 4) sqrt(2 / 300) on the log scale.
  const auto r = ratio_interval({2.0, 2.2, 1.8}, {1.0, 1.1, 0.9});
  ASSERT_TRUE(r.has_value());
  const double half = 2.7764451051977944 * std::sqrt(2.0 / 300.0);
  EXPECT_NEAR(r->mean, 2.0, 1e-12);
  EXPECT_NEAR(r->low, 2.0 * std::exp(-half), 1e-9);
  EXPECT_NEAR(r->high, 2.0 * std::exp(half), 1e-9);
  // No spread: the ratio alone; too few values or a mean <= 0: nothing.
  const auto exact = ratio_interval({3.0, 3.0}, {1.5, 1.5});
  ASSERT_TRUE(exact.has_value());
  EXPECT_EQ(exact->low, 2.0);
  EXPECT_EQ(exact->high, 2.0);
  EXPECT_FALSE(ratio_interval({1.0}, {1.0, 2.0}).has_value());
  EXPECT_FALSE(ratio_interval({-1.0, 0.5}, {1.0, 2.0}).has_value());
}

TEST(Statistics, PairedTestsAgainstClosedFormsAtTwoDegreesOfFreedom) {
  // Three pairs: differences 0.2, 0.6, -0.1; mean 7/30, sample variance
  // 0.37 / 3; t = mean / sqrt(variance / 3); with df = 2 the two-sided p is
  // 1 - |t| / sqrt(2 + t^2).
  const auto t = paired_t_test({10.2, 11.1, 9.8}, {10.0, 10.5, 9.9});
  ASSERT_TRUE(t.has_value());
  const double expected_t = (7.0 / 30.0) / std::sqrt(0.37 / 3.0 / 3.0);
  EXPECT_NEAR(t->t, expected_t, 1e-12);
  EXPECT_EQ(t->df, 2.0);
  EXPECT_NEAR(t->p, 1.0 - expected_t / std::sqrt(2.0 + expected_t * expected_t), 1e-12);
  EXPECT_FALSE(paired_t_test({1.0, 2.0}, {0.0, 1.0}).has_value()) << "no spread";
  EXPECT_FALSE(paired_t_test({1.0, 2.0, 3.0}, {1.0, 2.0}).has_value()) << "not pairs";

  // Ratios 1.1, 1.2, 1.05 (the pairs' shared factor cancels): the geometric
  // mean, the interval from t(0.975, 2) on the log ratios, the same p form.
  const auto r = paired_ratio({110.0, 24.0, 1.05}, {100.0, 20.0, 1.0});
  ASSERT_TRUE(r.has_value());
  const double logs[] = {std::log(1.1), std::log(1.2), std::log(1.05)};
  const double mean = (logs[0] + logs[1] + logs[2]) / 3.0;
  double squares = 0.0;
  for (double v : logs) squares += (v - mean) * (v - mean);
  const double se = std::sqrt(squares / 2.0 / 3.0);
  EXPECT_NEAR(r->ratio.mean, std::exp(mean), 1e-12);
  EXPECT_NEAR(r->ratio.low, std::exp(mean - 4.3026527297494639 * se), 1e-9);
  EXPECT_NEAR(r->ratio.high, std::exp(mean + 4.3026527297494639 * se), 1e-9);
  ASSERT_TRUE(r->test.has_value());
  const double rt = mean / se;
  EXPECT_NEAR(r->test->p, 1.0 - rt / std::sqrt(2.0 + rt * rt), 1e-12);
  // The same ratio in every pair: exact, no test.
  const auto same = paired_ratio({2.0, 4.0}, {1.0, 2.0});
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->ratio.low, 2.0);
  EXPECT_FALSE(same->test.has_value());
  EXPECT_FALSE(paired_ratio({1.0}, {1.0}).has_value());
}

}  // namespace
}  // namespace dctrain
