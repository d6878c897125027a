#include "model/layers/conv2d.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "tests/model/gradcheck.h"

namespace dctrain {
namespace {

using testing::expect_gradient_matches;
using testing::random_vector;
using testing::weighted_sum;

Conv2dShape shape(int n, int c, int h, int w, int oc, int kh, int kw, int stride, int pad) {
  Conv2dShape s;
  s.n = n;
  s.in_channels = c;
  s.in_height = h;
  s.in_width = w;
  s.out_channels = oc;
  s.kernel_h = kh;
  s.kernel_w = kw;
  s.stride = stride;
  s.padding = pad;
  validate(s);
  return s;
}

// The shapes ResNet-20 and the MNIST CNN use, plus awkward ones: odd sizes,
// a non-square kernel, stride larger than the kernel, padding larger than
// the kernel's half.
std::vector<Conv2dShape> shapes() {
  return {shape(2, 3, 8, 8, 4, 3, 3, 1, 1),   shape(2, 4, 9, 7, 6, 3, 3, 2, 1),
          shape(2, 1, 10, 10, 3, 5, 5, 1, 2), shape(3, 5, 6, 6, 7, 1, 1, 1, 0),
          shape(2, 3, 7, 9, 2, 1, 1, 2, 0),   shape(2, 2, 7, 6, 3, 3, 2, 2, 0),
          shape(1, 2, 5, 5, 2, 2, 2, 3, 2),   shape(2, 3, 4, 4, 2, 3, 3, 1, 3)};
}

std::vector<float> as_float(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

// Holds a float fast path (forward + backward) to the direct loops on every
// test shape.
template <typename Forward, typename Backward>
void expect_matches_direct_loops_in_float(Forward forward, Backward backward) {
  for (const Conv2dShape& s : shapes()) {
    SCOPED_TRACE(::testing::PrintToString(std::vector<int>{s.in_channels, s.in_height, s.in_width,
                                                           s.out_channels, s.kernel_h, s.kernel_w,
                                                           s.stride, s.padding}));
    const auto x = as_float(random_vector(s.n * s.in_size(), 1));
    const auto w = as_float(random_vector(s.weight_size(), 2));
    const auto b = as_float(random_vector(s.out_channels, 3));
    const auto dy = as_float(random_vector(s.n * s.out_size(), 4));
    std::vector<float> col(std::max<int64_t>(1, s.col_size()));
    std::vector<float> y(s.n * s.out_size()), y_ref(y.size());
    forward(y.data(), col.data(), x.data(), w.data(), b.data(), s);
    conv2d_forward_reference(y_ref.data(), x.data(), w.data(), b.data(), s);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], y_ref[i], 1e-5) << "y[" << i << "]";

    std::vector<float> dx(x.size(), 9.0f), dw(w.size(), 0.5f), db(b.size(), 0.25f);
    std::vector<float> dx_ref(x.size(), -9.0f), dw_ref = dw, db_ref = db;
    backward(dx.data(), dw.data(), db.data(), col.data(), dy.data(), x.data(), w.data(), s, false);
    conv2d_backward_reference(dx_ref.data(), dw_ref.data(), db_ref.data(), dy.data(), x.data(),
                              w.data(), s);
    for (size_t i = 0; i < dx.size(); ++i) ASSERT_NEAR(dx[i], dx_ref[i], 1e-5) << "dx[" << i << "]";
    for (size_t i = 0; i < dw.size(); ++i) ASSERT_NEAR(dw[i], dw_ref[i], 1e-4) << "dw[" << i << "]";
    for (size_t i = 0; i < db.size(); ++i) ASSERT_NEAR(db[i], db_ref[i], 1e-4) << "db[" << i << "]";
  }
}

// The path this host takes (AVX-512 direct convolution where available).
TEST(Conv2d, FastPathMatchesTheDirectLoopsInFloat) {
  expect_matches_direct_loops_in_float(conv2d_forward<float>, conv2d_backward<float>);
}

// The portable im2col + GEMM path, which hosts without AVX-512 take.
TEST(Conv2d, GemmPathMatchesTheDirectLoopsInFloat) {
  expect_matches_direct_loops_in_float(conv2d_forward_gemm<float>, conv2d_backward_gemm<float>);
}

TEST(Conv2d, ReferenceMatchesAHandComputedValue) {
  // One 3x3 input, 2x2 kernel, stride 1, no padding: y[0][0] = sum x[0..1][0..1] * w.
  const Conv2dShape s = shape(1, 1, 3, 3, 1, 2, 2, 1, 0);
  const std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w = {1, 10, 100, 1000}, b = {0.5};
  std::vector<double> y(4);
  conv2d_forward_reference(y.data(), x.data(), w.data(), b.data(), s);
  EXPECT_EQ(y[0], 1 + 20 + 400 + 5000 + 0.5);
  EXPECT_EQ(y[3], 5 + 60 + 800 + 9000 + 0.5);
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  for (const Conv2dShape& s : shapes()) {
    auto x = random_vector(s.n * s.in_size(), 5), w = random_vector(s.weight_size(), 6);
    auto b = random_vector(s.out_channels, 7);
    const auto r = random_vector(s.n * s.out_size(), 8);
    std::vector<double> col(std::max<int64_t>(1, s.col_size())), y(r.size());
    auto loss = [&] {
      conv2d_forward(y.data(), col.data(), x.data(), w.data(), b.data(), s);
      return weighted_sum(y, r);
    };
    std::vector<double> dx(x.size()), dw(w.size(), 0.0), db(b.size(), 0.0);
    conv2d_backward(dx.data(), dw.data(), db.data(), col.data(), r.data(), x.data(), w.data(), s);
    expect_gradient_matches("x", loss, x, dx);
    expect_gradient_matches("w", loss, w, dw);
    expect_gradient_matches("b", loss, b, db);
  }
}

TEST(Conv2d, NoBiasAndNoInputGradient) {
  const Conv2dShape s = shape(2, 3, 6, 6, 4, 3, 3, 1, 1);
  const auto x = random_vector(s.n * s.in_size(), 9), w = random_vector(s.weight_size(), 10);
  const auto dy = random_vector(s.n * s.out_size(), 11);
  std::vector<double> col(s.col_size()), y(dy.size()), y_ref(dy.size());
  conv2d_forward<double>(y.data(), col.data(), x.data(), w.data(), nullptr, s);
  conv2d_forward_reference<double>(y_ref.data(), x.data(), w.data(), nullptr, s);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], y_ref[i], 1e-12);
  std::vector<double> dw(w.size(), 0.0), dw_ref(w.size(), 0.0);
  conv2d_backward<double>(nullptr, dw.data(), nullptr, col.data(), dy.data(), x.data(), w.data(),
                          s);
  conv2d_backward_reference<double>(nullptr, dw_ref.data(), nullptr, dy.data(), x.data(), w.data(),
                                    s);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], dw_ref[i], 1e-12);
}

TEST(Conv2d, RejectsAKernelLargerThanThePaddedInput) {
  Conv2dShape s;
  s.in_height = s.in_width = 2;
  s.kernel_h = s.kernel_w = 5;
  EXPECT_THROW(validate(s), std::invalid_argument);
}

}  // namespace
}  // namespace dctrain

namespace dctrain {
namespace {

TEST(Conv2d, BackwardCanAccumulateTheInputGradient) {
  for (const Conv2dShape& s : shapes()) {
    const auto x = random_vector(s.n * s.in_size(), 12), w = random_vector(s.weight_size(), 13);
    const auto dy = random_vector(s.n * s.out_size(), 14), prior = random_vector(x.size(), 15);
    std::vector<double> col(std::max<int64_t>(1, s.col_size())), dw(w.size(), 0.0);
    std::vector<double> dx(x.size()), dx_acc = prior;
    conv2d_backward<double>(dx.data(), dw.data(), nullptr, col.data(), dy.data(), x.data(),
                            w.data(), s);
    conv2d_backward<double>(dx_acc.data(), dw.data(), nullptr, col.data(), dy.data(), x.data(),
                            w.data(), s, /*accumulate_dx=*/true);
    for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx_acc[i], prior[i] + dx[i], 1e-12);
  }
}

}  // namespace
}  // namespace dctrain
