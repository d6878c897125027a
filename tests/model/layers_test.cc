// ReLU, pooling and residual shortcuts.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/layers/pooling.h"
#include "model/layers/relu.h"
#include "model/layers/residual.h"
#include "tests/model/gradcheck.h"

namespace dctrain {
namespace {

using testing::expect_gradient_matches;
using testing::random_vector;
using testing::weighted_sum;

TEST(Relu, ForwardAndFiniteDifferences) {
  auto x = random_vector(50, 1);
  const auto r = random_vector(50, 2);
  std::vector<double> y(50);
  auto loss = [&] {
    relu_forward(y.data(), x.data(), 50);
    return weighted_sum(y, r);
  };
  loss();
  for (int i = 0; i < 50; ++i) EXPECT_EQ(y[i], std::max(x[i], 0.0));
  std::vector<double> dx(50);
  relu_backward(dx.data(), r.data(), y.data(), 50);
  expect_gradient_matches("x", loss, x, dx);
}

TEST(MaxPool, ForwardPicksTheWindowMaximum) {
  MaxPoolShape s;
  s.n = 1;
  s.channels = 1;
  s.in_height = s.in_width = 4;
  const std::vector<double> x = {1, 5, 2,  0,   //
                                 3, 4, 8,  8,   //
                                 0, 0, -1, -2,  //
                                 0, 7, -3, -4};
  std::vector<double> y(4);
  std::vector<int32_t> arg(4);
  max_pool_forward(y.data(), arg.data(), x.data(), s);
  EXPECT_EQ(y, (std::vector<double>{5, 8, 7, -1}));
  EXPECT_EQ(arg, (std::vector<int32_t>{1, 6, 13, 10}));  // first maximum on the tie 8, 8
}

TEST(MaxPool, GradientsMatchFiniteDifferences) {
  for (int window : {2, 3}) {
    MaxPoolShape s;
    s.n = 2;
    s.channels = 3;
    s.in_height = 7;
    s.in_width = 6;
    s.window = window;
    s.stride = 2;  // window 3, stride 2: overlapping windows
    const size_t in = 2 * 3 * 7 * 6, out = 2 * 3 * s.out_height() * s.out_width();
    auto x = random_vector(in, 3);
    const auto r = random_vector(out, 4);
    std::vector<double> y(out);
    std::vector<int32_t> arg(out);
    auto loss = [&] {
      max_pool_forward(y.data(), arg.data(), x.data(), s);
      return weighted_sum(y, r);
    };
    loss();
    std::vector<double> dx(in, 7.0);
    max_pool_backward(dx.data(), r.data(), arg.data(), s);
    expect_gradient_matches("x", loss, x, dx);
  }
}

TEST(GlobalAvgPool, GradientsMatchFiniteDifferences) {
  auto x = random_vector(2 * 3 * 5, 5);
  const auto r = random_vector(6, 6);
  std::vector<double> y(6);
  auto loss = [&] {
    global_avg_pool_forward(y.data(), x.data(), 2, 3, 5);
    return weighted_sum(y, r);
  };
  loss();
  EXPECT_NEAR(y[4], (x[20] + x[21] + x[22] + x[23] + x[24]) / 5, 1e-14);
  std::vector<double> dx(30);
  global_avg_pool_backward(dx.data(), r.data(), 2, 3, 5);
  expect_gradient_matches("x", loss, x, dx);
}

TEST(OptionAShortcut, SubsamplesAndPadsChannelsOnBothSides) {
  ShortcutShape s;
  s.n = 2;
  s.in_channels = 2;
  s.in_height = s.in_width = 4;
  s.out_channels = 4;  // one zero channel each side: planes // 4 with planes = 4
  const auto x = random_vector(2 * 2 * 16, 7);
  std::vector<double> y(2 * 4 * 4, 1.0);
  option_a_shortcut_forward(y.data(), x.data(), s);
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 4; ++c)
      for (int oy = 0; oy < 2; ++oy)
        for (int ox = 0; ox < 2; ++ox) {
          const double expected =
              (c == 0 || c == 3) ? 0.0 : x[((i * 2 + c - 1) * 4 + 2 * oy) * 4 + 2 * ox];
          EXPECT_EQ(y[((i * 4 + c) * 2 + oy) * 2 + ox], 1.0 + expected);
        }
}

TEST(OptionAShortcut, GradientsMatchFiniteDifferences) {
  ShortcutShape s;
  s.n = 2;
  s.in_channels = 3;
  s.in_height = 5;
  s.in_width = 6;
  s.out_channels = 7;
  const size_t in = 2 * 3 * 5 * 6, out = 2 * 7 * s.out_height() * s.out_width();
  auto x = random_vector(in, 8);
  const auto r = random_vector(out, 9);
  std::vector<double> y(out);
  auto loss = [&] {
    std::fill(y.begin(), y.end(), 0.0);
    option_a_shortcut_forward(y.data(), x.data(), s);
    return weighted_sum(y, r);
  };
  std::vector<double> dx(in, 0.0);
  option_a_shortcut_backward(dx.data(), r.data(), s);
  expect_gradient_matches("x", loss, x, dx);
}

TEST(IdentityShortcut, AddsIntoBothDirections) {
  const auto x = random_vector(10, 10);
  std::vector<double> y(10, 2.0), dx(10, 3.0);
  identity_shortcut_forward(y.data(), x.data(), 10);
  identity_shortcut_backward(dx.data(), x.data(), 10);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(y[i], 2.0 + x[i]);
    EXPECT_EQ(dx[i], 3.0 + x[i]);
  }
}

}  // namespace
}  // namespace dctrain
