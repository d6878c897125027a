#include "model/layers/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "common/batch.h"
#include "tests/model/gradcheck.h"

namespace dctrain {
namespace {

using testing::expect_gradient_matches;
using testing::random_vector;

TEST(SoftmaxCrossEntropy, LossMatchesTheDefinition) {
  constexpr int n = 4, classes = 5;
  const auto logits = random_vector(n * classes, 1, 3.0);
  const std::vector<int32_t> labels = {0, 4, kIgnoreLabel, 2};
  const CrossEntropyResult r =
      softmax_cross_entropy<double>(nullptr, logits.data(), labels.data(), n, classes);
  double expected = 0.0;
  int64_t correct = 0;
  for (int i = 0; i < n; ++i) {
    if (labels[i] == kIgnoreLabel) continue;
    double sum = 0.0;
    int argmax = 0;
    for (int c = 0; c < classes; ++c) {
      sum += std::exp(logits[i * classes + c]);
      if (logits[i * classes + c] > logits[i * classes + argmax]) argmax = c;
    }
    expected += -std::log(std::exp(logits[i * classes + labels[i]]) / sum);
    if (argmax == labels[i]) ++correct;
  }
  EXPECT_NEAR(r.loss_sum, expected, 1e-12);
  EXPECT_EQ(r.scored, 3);
  EXPECT_EQ(r.correct, correct);
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  constexpr int n = 5, classes = 7;
  auto logits = random_vector(n * classes, 2, 4.0);
  const std::vector<int32_t> labels = {6, kIgnoreLabel, 0, 3, 3};
  std::vector<double> dlogits(logits.size(), 42.0);
  softmax_cross_entropy<double>(dlogits.data(), logits.data(), labels.data(), n, classes);
  for (int c = 0; c < classes; ++c) EXPECT_EQ(dlogits[1 * classes + c], 0.0);  // ignored row
  auto loss = [&] {
    return softmax_cross_entropy<double>(nullptr, logits.data(), labels.data(), n, classes)
        .loss_sum;
  };
  expect_gradient_matches("logits", loss, logits, dlogits);
}

TEST(SoftmaxCrossEntropy, GradientMayOverwriteTheLogits) {
  constexpr int n = 3, classes = 4;
  const auto logits = random_vector(n * classes, 3, 2.0);
  std::vector<float> separate(logits.begin(), logits.end()), in_place = separate, d(n * classes);
  const std::vector<int32_t> labels = {1, 2, 3};
  const auto a = softmax_cross_entropy<float>(d.data(), separate.data(), labels.data(), n, classes);
  const auto b =
      softmax_cross_entropy<float>(in_place.data(), in_place.data(), labels.data(), n, classes);
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i], in_place[i]);
}

TEST(SoftmaxCrossEntropy, LargeLogitsStayFinite) {
  const std::vector<float> logits = {1000.0f, -1000.0f, 999.0f};
  const std::vector<int32_t> labels = {2};
  std::vector<float> d(3);
  const auto r = softmax_cross_entropy<float>(d.data(), logits.data(), labels.data(), 1, 3);
  EXPECT_NEAR(r.loss_sum, std::log1p(std::exp(-1.0)) + 1.0, 1e-5);
  EXPECT_EQ(r.correct, 0);
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
}

TEST(SoftmaxCrossEntropy, RejectsALabelOutOfRange) {
  const std::vector<float> logits(6, 0.0f);
  const std::vector<int32_t> labels = {0, 3};
  EXPECT_THROW(softmax_cross_entropy<float>(nullptr, logits.data(), labels.data(), 2, 3),
               std::out_of_range);
}

}  // namespace
}  // namespace dctrain
