// The statistics of the report: Student's t distribution (CDF and
// quantile), the 95% interval of a mean over seeds, and Welch's t-test of
// two cases (unequal variances), so that a speedup cell can say whether the
// difference is more than the spread between seeds.
#pragma once

#include <optional>
#include <vector>

namespace dctrain {

// P(T <= t) for Student's t with `df` > 0 degrees of freedom (real df, as
// Welch's test gives), through the regularized incomplete beta function:
// for t >= 0, 1 - I_{df/(df+t^2)}(df/2, 1/2) / 2, or near 0 (t^2 < df)
// 1/2 + I_{t^2/(df+t^2)}(1/2, df/2) / 2.
double student_t_cdf(double t, double df);

// The t with P(T <= t) = p, 0 < p < 1 (bisection on student_t_cdf).
double student_t_quantile(double p, double df);

// I_x(a, b), the regularized incomplete beta function (continued fraction,
// Lentz's method), 0 <= x <= 1, a, b > 0.
double incomplete_beta(double x, double a, double b);

struct MeanInterval {
  double mean = 0.0;
  double low = 0.0, high = 0.0;  // the 95% interval; mean, mean with one value
  size_t count = 0;
};
// Mean and 95% interval (t distribution, n - 1 degrees of freedom).
MeanInterval mean_interval(const std::vector<double>& values);

struct WelchTest {
  double t = 0.0;   // (mean a - mean b) / sqrt(var a / n a + var b / n b)
  double df = 0.0;  // Welch-Satterthwaite
  double p = 1.0;   // two-sided
};
// Welch's t-test of a against b; nothing with fewer than two values in
// either, or when both have no spread at all.
std::optional<WelchTest> welch_test(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace dctrain
