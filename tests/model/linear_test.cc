#include "model/layers/linear.h"

#include <gtest/gtest.h>

#include "tests/model/gradcheck.h"

namespace dctrain {
namespace {

using testing::expect_gradient_matches;
using testing::random_vector;
using testing::weighted_sum;

TEST(Linear, ForwardMatchesTheDefinition) {
  constexpr int n = 3, in = 4, out = 5;
  const auto x = random_vector(n * in, 1), w = random_vector(out * in, 2),
             b = random_vector(out, 3);
  std::vector<double> y(n * out);
  linear_forward(y.data(), x.data(), w.data(), b.data(), n, in, out);
  for (int i = 0; i < n; ++i) {
    for (int o = 0; o < out; ++o) {
      double expected = b[o];
      for (int k = 0; k < in; ++k) expected += x[i * in + k] * w[o * in + k];
      EXPECT_NEAR(y[i * out + o], expected, 1e-12);
    }
  }
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  constexpr int n = 3, in = 7, out = 5;
  auto x = random_vector(n * in, 1), w = random_vector(out * in, 2), b = random_vector(out, 3);
  const auto r = random_vector(n * out, 4);
  std::vector<double> y(n * out);
  auto loss = [&] {
    linear_forward(y.data(), x.data(), w.data(), b.data(), n, in, out);
    return weighted_sum(y, r);
  };
  std::vector<double> dx(x.size()), dw(w.size(), 0.0), db(b.size(), 0.0);
  loss();
  linear_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), n, in, out);
  expect_gradient_matches("x", loss, x, dx);
  expect_gradient_matches("w", loss, w, dw);
  expect_gradient_matches("b", loss, b, db);
}

TEST(Linear, BackwardAccumulatesParameterGradients) {
  constexpr int n = 2, in = 3, out = 2;
  const auto x = random_vector(n * in, 5), w = random_vector(out * in, 6),
             dy = random_vector(n * out, 7);
  std::vector<double> dw_once(w.size(), 0.0), db_once(out, 0.0);
  linear_backward<double>(nullptr, dw_once.data(), db_once.data(), dy.data(), x.data(), w.data(), n,
                          in, out);
  std::vector<double> dw_twice = dw_once, db_twice = db_once;
  linear_backward<double>(nullptr, dw_twice.data(), db_twice.data(), dy.data(), x.data(), w.data(),
                          n, in, out);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(dw_twice[i], 2.0 * dw_once[i], 1e-12);
  for (int o = 0; o < out; ++o) EXPECT_NEAR(db_twice[o], 2.0 * db_once[o], 1e-12);
}

}  // namespace
}  // namespace dctrain
