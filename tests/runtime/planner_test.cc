#include "coordinator/planner.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "coordinator/ledger.h"

namespace dctrain {
namespace {

TEST(Planner, DealsTheGlobalBatchEvenlyFromTheHeadOfTheLedger) {
  Ledger ledger(1000, 3, true);
  const std::vector<uint32_t> ranks = {0, 1, 2};
  const auto plans = plan_step(ledger, ranks, 0, 48, 8);
  ASSERT_EQ(plans.size(), 3u);
  std::set<uint64_t> samples;
  for (const WorkerPlan& plan : plans) {
    EXPECT_EQ(plan.micro_batches.size(), 2u) << "rank " << plan.rank;
    for (const PlannedMicroBatch& mb : plan.micro_batches)
      samples.insert(mb.samples.begin(), mb.samples.end());
  }
  EXPECT_EQ(samples.size(), 48u) << "six micro-batches of 8 distinct samples";
}

// A worker that misses every deadline (its micro-batches orphaned and
// requeued each step) must not hold the end of the epoch: the requeued
// micro-batches lead the queue, so the dealing has to move on to others.
TEST(Planner, RequeuedWorkMovesOnWhenOneWorkerAlwaysMissesTheDeadline) {
  Ledger ledger(100, 1, true);
  const std::vector<uint32_t> ranks = {0, 1, 2, 3};
  uint64_t step = 0;
  for (; step < 100 && !ledger.epoch_complete(); ++step) {
    for (const WorkerPlan& plan : plan_step(ledger, ranks, step, 32, 4)) {
      for (const PlannedMicroBatch& mb : plan.micro_batches) {
        if (plan.rank == 0) {
          ledger.drop(mb.id);
        } else {
          ledger.complete(mb.id);
        }
      }
    }
  }
  ASSERT_TRUE(ledger.epoch_complete()) << "epoch still open after " << step << " steps";
  EXPECT_TRUE(ledger.audit().ok());
  // 25 micro-batches, 6 completed per step at worst: a handful of steps.
  EXPECT_LE(step, 8u);
}

}  // namespace
}  // namespace dctrain
