#include "tools/report/statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dctrain {

namespace {

// The continued fraction of I_x(a, b) (modified Lentz), good for
// x < (a + 1) / (a + b + 2).
double beta_fraction(double x, double a, double b) {
  constexpr double kTiny = 1e-300;
  constexpr double kEpsilon = 1e-15;
  double c = 1.0;
  double d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::abs(d) < kTiny) d = kTiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double md = m;
    // Even step.
    double num = md * (b - md) * x / ((a + 2.0 * md - 1.0) * (a + 2.0 * md));
    d = 1.0 + num * d;
    if (std::abs(d) < kTiny) d = kTiny;
    c = 1.0 + num / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    h *= d * c;
    // Odd step.
    num = -(a + md) * (a + b + md) * x / ((a + 2.0 * md) * (a + 2.0 * md + 1.0));
    d = 1.0 + num * d;
    if (std::abs(d) < kTiny) d = kTiny;
    c = 1.0 + num / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double step = d * c;
    h *= step;
    if (std::abs(step - 1.0) < kEpsilon) break;
  }
  return h;
}

double variance(const std::vector<double>& v, double mean) {
  double squares = 0.0;
  for (double x : v) squares += (x - mean) * (x - mean);
  return squares / static_cast<double>(v.size() - 1);
}

double mean_of(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

}  // namespace

double incomplete_beta(double x, double a, double b) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double log_front =
      std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  const double front = std::exp(log_front);
  // The fraction converges fast on one side; the symmetry
  // I_x(a, b) = 1 - I_{1-x}(b, a) covers the other.
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_fraction(x, a, b) / a;
  return 1.0 - front * beta_fraction(1.0 - x, b, a) / b;
}

double student_t_cdf(double t, double df) {
  if (std::isnan(t) || !(df > 0.0)) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(t)) return t > 0 ? 1.0 : 0.0;
  // Near 0, df / (df + t^2) rounds to 1 and the tail form loses t; there
  // P(|T| < |t|) = I_{t^2 / (df + t^2)}(1/2, df / 2) keeps it.
  if (t * t < df) {
    const double central = 0.5 * incomplete_beta(t * t / (df + t * t), 0.5, 0.5 * df);
    return t >= 0.0 ? 0.5 + central : 0.5 - central;
  }
  const double tail = 0.5 * incomplete_beta(df / (df + t * t), 0.5 * df, 0.5);
  return t >= 0.0 ? 1.0 - tail : tail;
}

double student_t_quantile(double p, double df) {
  if (!(p > 0.0 && p < 1.0) || !(df > 0.0)) return std::numeric_limits<double>::quiet_NaN();
  double lo = -1.0, hi = 1.0;
  while (student_t_cdf(lo, df) > p) lo *= 2.0;
  while (student_t_cdf(hi, df) < p) hi *= 2.0;
  for (int i = 0; i < 200 && hi - lo > 1e-13 * std::max(1.0, std::abs(hi)); ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

MeanInterval mean_interval(const std::vector<double>& values) {
  MeanInterval out;
  out.count = values.size();
  if (values.empty()) return out;
  out.mean = out.low = out.high = mean_of(values);
  if (values.size() < 2) return out;
  const double n = static_cast<double>(values.size());
  const double half =
      student_t_quantile(0.975, n - 1.0) * std::sqrt(variance(values, out.mean) / n);
  out.low = out.mean - half;
  out.high = out.mean + half;
  return out;
}

std::optional<TTest> welch_test(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < 2 || b.size() < 2) return std::nullopt;
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  const double ma = mean_of(a), mb = mean_of(b);
  const double va = variance(a, ma) / na, vb = variance(b, mb) / nb;
  if (va + vb <= 0.0) return std::nullopt;
  TTest w;
  w.t = (ma - mb) / std::sqrt(va + vb);
  w.df = (va + vb) * (va + vb) / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
  w.p = std::min(1.0, 2.0 * student_t_cdf(-std::abs(w.t), w.df));
  return w;
}

std::optional<MeanInterval> ratio_interval(const std::vector<double>& a,
                                           const std::vector<double>& b) {
  if (a.size() < 2 || b.size() < 2) return std::nullopt;
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  const double ma = mean_of(a), mb = mean_of(b);
  if (!(ma > 0.0) || !(mb > 0.0)) return std::nullopt;
  MeanInterval out;
  out.count = a.size() + b.size();
  out.mean = out.low = out.high = ma / mb;
  // The relative variances of the two means: the log ratio's variance.
  const double va = variance(a, ma) / (na * ma * ma), vb = variance(b, mb) / (nb * mb * mb);
  if (va + vb <= 0.0) return out;
  const double df = (va + vb) * (va + vb) / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
  const double half = student_t_quantile(0.975, df) * std::sqrt(va + vb);
  out.low = out.mean * std::exp(-half);
  out.high = out.mean * std::exp(half);
  return out;
}

namespace {

// The one-sample t-test of `values` against 0 (size - 1 degrees of
// freedom); nothing with fewer than two values or no spread.
std::optional<TTest> one_sample_test(const std::vector<double>& values) {
  if (values.size() < 2) return std::nullopt;
  const double n = static_cast<double>(values.size());
  const double mean = mean_of(values);
  const double se = std::sqrt(variance(values, mean) / n);
  if (!(se > 0.0)) return std::nullopt;
  TTest t;
  t.t = mean / se;
  t.df = n - 1.0;
  t.p = std::min(1.0, 2.0 * student_t_cdf(-std::abs(t.t), t.df));
  return t;
}

}  // namespace

std::optional<PairedRatio> paired_ratio(const std::vector<double>& a,
                                        const std::vector<double>& b) {
  if (a.size() < 2 || a.size() != b.size()) return std::nullopt;
  std::vector<double> logs;
  logs.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] > 0.0) || !(b[i] > 0.0)) return std::nullopt;
    logs.push_back(std::log(a[i] / b[i]));
  }
  // The log ratios' mean and interval, back to ratios.
  const MeanInterval logged = mean_interval(logs);
  PairedRatio out;
  out.ratio.count = logged.count;
  out.ratio.mean = std::exp(logged.mean);
  out.ratio.low = std::exp(logged.low);
  out.ratio.high = std::exp(logged.high);
  out.test = one_sample_test(logs);
  return out;
}

std::optional<TTest> paired_t_test(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::nullopt;
  std::vector<double> differences;
  differences.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) differences.push_back(a[i] - b[i]);
  return one_sample_test(differences);
}

}  // namespace dctrain
