// Central finite differences in double precision, for layer gradient tests;
// and, for whole models (float32 only), directional derivatives.
//
// A layer test builds a scalar loss L = sum(r * y) with fixed random weights r
// over the layer's output y, runs the layer's backward with dy = r, and hands
// every input and parameter tensor with its analytic gradient to
// expect_gradient_matches().
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/batch.h"
#include "common/random.h"
#include "model/model.h"

namespace dctrain::testing {

inline std::vector<double> random_vector(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = scale * (2.0 * rng.uniform_double() - 1.0);
  return v;
}

inline double weighted_sum(const std::vector<double>& y, const std::vector<double>& r) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
  return s;
}

struct GradCheckOptions {
  double step = 1e-6;       // h in (L(x+h) - L(x-h)) / 2h
  double tolerance = 1e-6;  // on |analytic - numeric| / max(1, |analytic|, |numeric|)
  size_t max_checks = 400;  // coordinates checked (spread evenly) per tensor
  // A coordinate whose one-sided differences disagree by more than this
  // (relative) sits on a kink (ReLU at 0, max-pool tie) and is skipped.
  double kink_tolerance = 1e-3;
};

// Perturbs each checked element of `x` in place (restoring it), evaluating
// `loss` each time, and compares with `analytic` (the gradient of loss by x).
inline void expect_gradient_matches(const std::string& name, const std::function<double()>& loss,
                                    std::vector<double>& x, const std::vector<double>& analytic,
                                    const GradCheckOptions& options = {}) {
  ASSERT_EQ(x.size(), analytic.size()) << name;
  const double base = loss();
  const size_t stride = std::max<size_t>(1, x.size() / options.max_checks);
  size_t checked = 0, skipped = 0;
  for (size_t i = 0; i < x.size(); i += stride) {
    const double saved = x[i];
    x[i] = saved + options.step;
    const double plus = loss();
    x[i] = saved - options.step;
    const double minus = loss();
    x[i] = saved;
    const double forward = (plus - base) / options.step;
    const double backward = (base - minus) / options.step;
    const double scale = std::max({1.0, std::abs(forward), std::abs(backward)});
    if (std::abs(forward - backward) / scale > options.kink_tolerance) {
      ++skipped;
      continue;
    }
    const double numeric = (plus - minus) / (2.0 * options.step);
    const double error =
        std::abs(analytic[i] - numeric) / std::max({1.0, std::abs(analytic[i]), std::abs(numeric)});
    ASSERT_LE(error, options.tolerance)
        << name << "[" << i << "]: analytic " << analytic[i] << " vs numeric " << numeric;
    ++checked;
  }
  // A check that skipped everything proved nothing.
  EXPECT_GT(checked, skipped) << name << ": " << skipped << " of " << checked + skipped
                              << " coordinates sat on kinks";
}

// A whole model's gradient on `batch`, checked along directions: its own
// (d = g / |g|), and `tilted` more, each g / |g| plus a random unit vector
// (normalised), so that the random part moves every parameter while g . d
// stays well above the loss's float32 rounding. Each g . d is compared with
// the central difference (L(p + h d) - L(p - h d)) / 2h of the training
// loss sum, within `tolerance` of |g . d|.
inline void expect_directional_derivatives(Model& model, const Batch& batch, int tilted, double h,
                                           double tolerance) {
  model.gradients().zero();
  model.train_micro_batch(batch);
  const std::vector<float> gradient(model.gradients().flat().begin(),
                                    model.gradients().flat().end());
  const std::vector<float> start(model.parameters().flat().begin(),
                                 model.parameters().flat().end());
  double norm = 0.0;
  for (const float g : gradient) norm += static_cast<double>(g) * g;
  norm = std::sqrt(norm);
  ASSERT_GT(norm, 0.0);
  const auto loss_at = [&](const std::vector<double>& d, double t) {
    std::span<float> p = model.parameters().flat();
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(start[i] + t * d[i]);
    model.gradients().zero();
    return model.train_micro_batch(batch).loss_sum;
  };
  for (int k = 0; k <= tilted; ++k) {
    std::vector<double> d(gradient.size()), r(gradient.size(), 0.0);
    if (k > 0) {
      Rng rng(1000 + static_cast<uint64_t>(k));
      double length = 0.0;
      for (double& x : r) {
        x = rng.normal();
        length += x * x;
      }
      for (double& x : r) x /= std::sqrt(length);
    }
    double length = 0.0;
    for (size_t i = 0; i < d.size(); ++i) {
      d[i] = gradient[i] / norm + r[i];
      length += d[i] * d[i];
    }
    for (double& x : d) x /= std::sqrt(length);
    double analytic = 0.0;
    for (size_t i = 0; i < d.size(); ++i) analytic += gradient[i] * d[i];
    const double numeric = (loss_at(d, h) - loss_at(d, -h)) / (2.0 * h);
    EXPECT_LE(std::abs(numeric - analytic), tolerance * std::abs(analytic))
        << "direction " << k << ": analytic " << analytic << ", numeric " << numeric;
    std::printf("direction %d: g.d %.7g, finite difference %.7g (relative error %.2g)\n", k,
                analytic, numeric, std::abs(numeric - analytic) / std::abs(analytic));
  }
  std::copy(start.begin(), start.end(), model.parameters().flat().begin());
}

}  // namespace dctrain::testing
