// A contribution's totals and clocks against its plan
// (contribution_totals_problem): what the coordinator checks before a
// contribution's loss, accuracy and weight enter the step.
#include "comm/validation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace dctrain {
namespace {

bool mentions(const std::optional<std::string>& problem, const std::string& what) {
  return problem.has_value() && problem->find(what) != std::string::npos;
}

// What a classifier's worker sends for 8 completed samples.
v1::Contribution honest() {
  v1::Contribution c;
  c.set_samples(8);
  c.set_loss_terms(8);
  c.set_loss_sum(15.5);
  c.set_correct(3);
  c.set_compute_seconds(0.25);
  c.set_overhead_seconds(0.01);
  return c;
}

TEST(ContributionTotals, AnHonestContributionPasses) {
  EXPECT_FALSE(contribution_totals_problem(honest(), 8, 1).has_value());
  // Masked-language modelling: up to the sequence length per sample.
  v1::Contribution mlm = honest();
  mlm.set_loss_terms(8 * 128);
  EXPECT_FALSE(contribution_totals_problem(mlm, 8, 128).has_value());
  // Nothing completed: nothing to count.
  v1::Contribution empty;
  EXPECT_FALSE(contribution_totals_problem(empty, 0, 1).has_value());
}

TEST(ContributionTotals, SamplesMustBeThoseOfTheCompletedMicroBatches) {
  EXPECT_TRUE(mentions(contribution_totals_problem(honest(), 12, 1),
                       "it claims 8 samples, its completed micro-batches hold 12"));
}

// Found while hardening the coordinator: loss_terms was never checked, and
// the step's loss, accuracy and gradient divisor are divided by its sum, so
// one worker could scale every replica's update down (or the loss to 0).
TEST(ContributionTotals, LossTermsAreBoundedByTheSamplesTheyCameFrom) {
  v1::Contribution c = honest();
  c.set_loss_terms(9);
  EXPECT_TRUE(mentions(contribution_totals_problem(c, 8, 1),
                       "9 loss terms from 8 samples, at most 1 per sample"));
  c.set_loss_terms(8 * 128 + 1);
  EXPECT_TRUE(contribution_totals_problem(c, 8, 128).has_value());
  // samples * terms per sample must not wrap around to let it through.
  c.set_loss_terms(std::numeric_limits<uint64_t>::max());
  c.set_samples(uint64_t{1} << 62);
  EXPECT_FALSE(contribution_totals_problem(c, uint64_t{1} << 62, 8).has_value())
      << "2^62 samples of 8 terms may hold any count (saturated, not wrapped)";
  c.set_loss_terms((uint64_t{1} << 62) * 2 + 1);
  EXPECT_TRUE(contribution_totals_problem(c, uint64_t{1} << 62, 2).has_value());
}

TEST(ContributionTotals, NoLossTermsMeansNoLoss) {
  v1::Contribution c;
  c.set_loss_sum(2.0);
  EXPECT_TRUE(mentions(contribution_totals_problem(c, 0, 1), "over no loss terms"));
}

TEST(ContributionTotals, CorrectPredictionsAreAtMostTheLossTerms) {
  v1::Contribution c = honest();
  c.set_correct(9);
  EXPECT_TRUE(
      mentions(contribution_totals_problem(c, 8, 1), "9 correct predictions among 8 loss terms"));
}

TEST(ContributionTotals, LossAndClocksAreFiniteAndNotNegative) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (double bad : {nan, inf, -inf, -1.0}) {
    v1::Contribution loss = honest();
    loss.set_loss_sum(bad);
    EXPECT_TRUE(mentions(contribution_totals_problem(loss, 8, 1), "loss sum")) << bad;
    v1::Contribution compute = honest();
    compute.set_compute_seconds(bad);
    EXPECT_TRUE(mentions(contribution_totals_problem(compute, 8, 1), "compute time")) << bad;
    v1::Contribution overhead = honest();
    overhead.set_overhead_seconds(bad);
    EXPECT_TRUE(mentions(contribution_totals_problem(overhead, 8, 1), "overhead")) << bad;
  }
}

TEST(ContributionTotals, TermsPerSampleFollowTheModel) {
  v1::ModelConfig model;
  model.set_name(v1::MODEL_RESNET20);
  EXPECT_EQ(max_loss_terms_per_sample(model), 1u);
  model.set_name(v1::MODEL_BERT_TINY);
  model.set_max_seq_len(64);
  EXPECT_EQ(max_loss_terms_per_sample(model), 64u);
  model.set_max_seq_len(0);
  EXPECT_EQ(max_loss_terms_per_sample(model), 128u);
}

}  // namespace
}  // namespace dctrain
