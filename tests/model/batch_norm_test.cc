#include "model/layers/batch_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/model/gradcheck.h"

namespace dctrain {
namespace {

using testing::expect_gradient_matches;
using testing::random_vector;
using testing::weighted_sum;

BatchNormShape shape(int n, int c, int spatial) {
  BatchNormShape s;
  s.n = n;
  s.channels = c;
  s.spatial = spatial;
  return s;
}

TEST(BatchNorm, TrainingForwardNormalisesWithBiasedBatchStatistics) {
  const BatchNormShape s = shape(3, 2, 5);
  const auto x = random_vector(30, 1, 2.0), gamma = random_vector(2, 2), beta = random_vector(2, 3);
  std::vector<double> y(30), mean(2), var(2);
  batch_norm_forward_train(y.data(), mean.data(), var.data(), x.data(), gamma.data(), beta.data(),
                           s);
  for (int c = 0; c < 2; ++c) {
    double m = 0.0, v = 0.0;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) m += x[(i * 2 + c) * 5 + j];
    m /= 15;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) v += (x[(i * 2 + c) * 5 + j] - m) * (x[(i * 2 + c) * 5 + j] - m);
    v /= 15;  // biased
    EXPECT_NEAR(mean[c], m, 1e-14);
    EXPECT_NEAR(var[c], v, 1e-14);
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 5; ++j) {
        const int at = (i * 2 + c) * 5 + j;
        EXPECT_NEAR(y[at], gamma[c] * (x[at] - m) / std::sqrt(v + 1e-5) + beta[c], 1e-12);
      }
    }
  }
}

TEST(BatchNorm, EvalForwardUsesRunningStatistics) {
  const BatchNormShape s = shape(2, 3, 4);
  const auto x = random_vector(24, 4), gamma = random_vector(3, 5), beta = random_vector(3, 6);
  const std::vector<double> running_mean = {0.1, -0.2, 0.3}, running_var = {0.5, 1.5, 2.0};
  std::vector<double> y(24);
  batch_norm_forward_eval(y.data(), x.data(), gamma.data(), beta.data(), running_mean.data(),
                          running_var.data(), s);
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 3; ++c)
      for (int j = 0; j < 4; ++j) {
        const int at = (i * 3 + c) * 4 + j;
        EXPECT_NEAR(
            y[at],
            gamma[c] * (x[at] - running_mean[c]) / std::sqrt(running_var[c] + 1e-5) + beta[c],
            1e-12);
      }
}

TEST(BatchNorm, GradientsMatchFiniteDifferences) {
  const BatchNormShape s = shape(4, 3, 6);
  auto x = random_vector(72, 7, 2.0), gamma = random_vector(3, 8), beta = random_vector(3, 9);
  const auto r = random_vector(72, 10);
  std::vector<double> y(72), mean(3), var(3);
  auto loss = [&] {
    batch_norm_forward_train(y.data(), mean.data(), var.data(), x.data(), gamma.data(), beta.data(),
                             s);
    return weighted_sum(y, r);
  };
  loss();
  std::vector<double> dx(72), dgamma(3, 0.0), dbeta(3, 0.0);
  batch_norm_backward(dx.data(), dgamma.data(), dbeta.data(), r.data(), mean.data(), var.data(),
                      x.data(), gamma.data(), s);
  expect_gradient_matches("x", loss, x, dx);
  expect_gradient_matches("gamma", loss, gamma, dgamma);
  expect_gradient_matches("beta", loss, beta, dbeta);
}

TEST(BatchNorm, ChannelRangesComposeToTheWholeLayer) {
  const BatchNormShape s = shape(3, 5, 7);
  const auto xd = random_vector(105, 11), gd = random_vector(5, 12), bd = random_vector(5, 13);
  const auto dyd = random_vector(105, 14);
  const std::vector<float> x(xd.begin(), xd.end()), gamma(gd.begin(), gd.end()),
      beta(bd.begin(), bd.end()), dy(dyd.begin(), dyd.end());
  std::vector<float> y(105), mean(5), var(5), dx(105), dg(5, 0.0f), dbt(5, 0.0f);
  batch_norm_forward_train(y.data(), mean.data(), var.data(), x.data(), gamma.data(), beta.data(),
                           s);
  batch_norm_backward(dx.data(), dg.data(), dbt.data(), dy.data(), mean.data(), var.data(),
                      x.data(), gamma.data(), s);
  std::vector<float> y2(105), mean2(5), var2(5), dx2(105), dg2(5, 0.0f), dbt2(5, 0.0f);
  for (int c = 0; c < 5; ++c) {
    BatchNormShape part = s;
    part.channel_begin = c;
    part.channel_end = c + 1;
    batch_norm_forward_train(y2.data(), mean2.data(), var2.data(), x.data(), gamma.data(),
                             beta.data(), part);
    batch_norm_backward(dx2.data(), dg2.data(), dbt2.data(), dy.data(), mean2.data(), var2.data(),
                        x.data(), gamma.data(), part);
  }
  EXPECT_EQ(y, y2);
  EXPECT_EQ(dx, dx2);
  EXPECT_EQ(dg, dg2);
  EXPECT_EQ(dbt, dbt2);
}

}  // namespace
}  // namespace dctrain
