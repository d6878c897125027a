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

}  // namespace
}  // namespace dctrain
