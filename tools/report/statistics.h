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

struct TTest {
  // Welch: (mean a - mean b) / sqrt(var a / n a + var b / n b); paired: the
  // mean of the pairs' log ratios over its standard error.
  double t = 0.0;
  double df = 0.0;  // Welch-Satterthwaite; paired: pairs - 1
  double p = 1.0;   // two-sided
};
// Welch's t-test of a against b; nothing with fewer than two values in
// either, or when both have no spread at all.
std::optional<TTest> welch_test(const std::vector<double>& a, const std::vector<double>& b);

// The ratio of two means, mean(a) / mean(b), with its 95% interval: on
// the log scale, where the ratio is a difference, by the delta method
// (var log mean(x) ~ var(x) / (n mean(x)^2)) and a t quantile with
// Welch-Satterthwaite's degrees of freedom; back to the ratio by exp. Seeds
// of two cases are independent samples, so a speedup's interval. Nothing
// with fewer than two values in either or a mean <= 0; the ratio alone
// (low = high) when neither has any spread.
std::optional<MeanInterval> ratio_interval(const std::vector<double>& a,
                                           const std::vector<double>& b);

// The ratio of a to b when a[i] and b[i] are a pair (two cases run with one
// seed: the same data order, initialisation and injected delays, common
// random numbers): the geometric mean of a[i] / b[i] with the 95% interval
// and the two-sided p of the one-sample t-test of the log ratios against 0
// (pairs - 1 degrees of freedom). What the seeds share cancels, so a small
// effect under noisy delays shows with few seeds. Nothing with fewer than
// two pairs, sizes that differ or a value <= 0; no test (the ratio alone)
// when every pair has the same ratio.
// The paired t-test of a against b (a[i] and b[i] from one seed): the
// mean of a[i] - b[i] over its standard error, pairs - 1 degrees of freedom.
// Nothing with fewer than two pairs, sizes that differ, or no spread in the
// differences.
std::optional<TTest> paired_t_test(const std::vector<double>& a, const std::vector<double>& b);

struct PairedRatio {
  MeanInterval ratio;
  std::optional<TTest> test;
};
std::optional<PairedRatio> paired_ratio(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace dctrain
