#include "coordinator/planner.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "coordinator/ledger.h"
#include "coordinator/speed_planner.h"

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

// ------------------------------------------------ speed-aware planning

v1::RebalanceConfig rebalance(uint32_t window = 8, double min_gain = 0.05, uint32_t probe = 20) {
  v1::RebalanceConfig c;
  c.set_window_steps(window);
  c.set_min_gain(min_gain);
  c.set_probe_every_steps(probe);
  return c;
}

// Records one step in which each rank ran `per_step` micro-batches of its
// time in `seconds` (the fake clock: the times are the test's).
void record(SpeedPlanner& planner, const std::map<uint32_t, double>& seconds,
            uint32_t per_step = 4) {
  for (const auto& [rank, t] : seconds) planner.observe(rank, std::vector<double>(per_step, t));
}

// The same times over the steps the planner needs before shares move.
void record_enough(SpeedPlanner& planner, const std::map<uint32_t, double>& seconds) {
  for (size_t i = 0; i < SpeedPlanner::kMinHistorySteps; ++i) record(planner, seconds);
}

std::map<uint32_t, uint32_t> by_rank(const StepShares& shares) {
  std::map<uint32_t, uint32_t> out;
  for (const WorkerShare& s : shares.workers) out[s.rank] = s.micro_batches;
  return out;
}

uint32_t total(const StepShares& shares) {
  uint32_t n = 0;
  for (const WorkerShare& s : shares.workers) n += s.micro_batches;
  return n;
}

const std::vector<uint32_t> kFour = {0, 1, 2, 3};

TEST(SpeedPlanner, EvenSharesBeforeAnythingIsMeasured) {
  SpeedPlanner planner(rebalance());
  const StepShares s = planner.shares(kFour, 0, 16);
  EXPECT_EQ(by_rank(s), (std::map<uint32_t, uint32_t>{{0, 4}, {1, 4}, {2, 4}, {3, 4}}));
  for (const WorkerShare& w : s.workers) EXPECT_EQ(w.estimate_seconds, 0.0);
}

TEST(SpeedPlanner, SharesStayEvenUntilEveryWorkerHasAFewStepsOnRecord) {
  SpeedPlanner planner(rebalance());
  for (size_t i = 1; i < SpeedPlanner::kMinHistorySteps; ++i) {
    record(planner, {{0, 0.2}, {1, 0.1}, {2, 0.1}, {3, 0.1}});
    EXPECT_EQ(by_rank(planner.shares(kFour, i, 16)).at(0), 4u) << "after " << i << " steps";
  }
  record(planner, {{0, 0.2}, {1, 0.1}, {2, 0.1}, {3, 0.1}});
  EXPECT_EQ(by_rank(planner.shares(kFour, 9, 16)).at(0), 2u);
}

TEST(SpeedPlanner, SlowWorkerGetsFewerAndTheBatchStaysWhole) {
  SpeedPlanner planner(rebalance());
  record_enough(planner, {{0, 0.2}, {1, 0.1}, {2, 0.1}, {3, 0.1}});
  const StepShares s = planner.shares(kFour, 1, 16);
  EXPECT_EQ(total(s), 16u) << "the global batch is kept whole";
  const auto shares = by_rank(s);
  // Min over shares of max n t: rank 0 at 2 x 0.2 = 0.4 s, the others
  // 14 micro-batches as 5, 5, 4 (0.5 s); 3 on rank 0 would take 0.6 s.
  EXPECT_EQ(shares.at(0), 2u);
  EXPECT_EQ(shares.at(1) + shares.at(2) + shares.at(3), 14u);
  for (uint32_t r : {1u, 2u, 3u}) EXPECT_GE(shares.at(r), 4u) << r;
  EXPECT_TRUE(s.changed);
  for (const WorkerShare& w : s.workers) EXPECT_GT(w.estimate_seconds, 0.0) << w.rank;
  EXPECT_DOUBLE_EQ(*planner.estimate(0), 0.2);
}

TEST(SpeedPlanner, SharesFollowAChangeOfSpeed) {
  SpeedPlanner planner(rebalance(4));
  uint64_t step = 0;
  for (; step < 4; ++step) {  // a full window
    record(planner, {{0, 0.2}, {1, 0.1}, {2, 0.1}, {3, 0.1}});
    planner.shares(kFour, step, 16);
  }
  EXPECT_EQ(by_rank(planner.shares(kFour, step++, 16)).at(0), 2u);
  // Rank 0 recovers and rank 2 turns three times slower: within a window
  // (4 steps) the shares follow.
  for (int i = 0; i < 4; ++i, ++step) {
    record(planner, {{0, 0.1}, {1, 0.1}, {2, 0.3}, {3, 0.1}});
    planner.shares(kFour, step, 16);
  }
  const auto shares = by_rank(planner.shares(kFour, step, 16));
  EXPECT_LT(shares.at(2), shares.at(0));
  EXPECT_LT(shares.at(2), shares.at(1));
  EXPECT_LT(shares.at(2), shares.at(3));
  EXPECT_EQ(shares.at(0) + shares.at(1) + shares.at(2) + shares.at(3), 16u);
  // Once all are equal again, so are the shares.
  for (int i = 0; i < 4; ++i, ++step) {
    record(planner, {{0, 0.1}, {1, 0.1}, {2, 0.1}, {3, 0.1}});
    planner.shares(kFour, step, 16);
  }
  EXPECT_EQ(by_rank(planner.shares(kFour, step, 16)),
            (std::map<uint32_t, uint32_t>{{0, 4}, {1, 4}, {2, 4}, {3, 4}}));
}

TEST(SpeedPlanner, NoiseAmongEqualWorkersDoesNotChurnTheShares) {
  // Medians 3% apart: moving a micro-batch cannot cut the slowest by the
  // 5% the shares need to move.
  SpeedPlanner planner(rebalance());
  record_enough(planner, {{0, 0.103}, {1, 0.1}, {2, 0.101}, {3, 0.098}});
  const StepShares s = planner.shares(kFour, 1, 16);
  EXPECT_EQ(by_rank(s), (std::map<uint32_t, uint32_t>{{0, 4}, {1, 4}, {2, 4}, {3, 4}}));
}

TEST(SpeedPlanner, RobustToTheOddStall) {
  // One stall of 5 s among 32 micro-batches of 0.1 s: the median ignores it.
  SpeedPlanner planner(rebalance());
  for (int i = 0; i < 8; ++i) record(planner, {{0, 0.1}, {1, 0.1}, {2, 0.1}, {3, 0.1}});
  planner.observe(0, std::vector<double>{5.0, 0.1, 0.1, 0.1});
  EXPECT_DOUBLE_EQ(*planner.estimate(0), 0.1);
  EXPECT_EQ(by_rank(planner.shares(kFour, 9, 16)).at(0), 4u);
}

TEST(SpeedPlanner, ChronicallySlowWorkerIsKeptAsAStandbyAndProbed) {
  SpeedPlanner planner(rebalance(8, 0.05, 5));
  record_enough(planner, {{0, 1.0}, {1, 0.1}, {2, 0.1}, {3, 0.1}});
  StepShares s = planner.shares(kFour, 1, 8);
  EXPECT_EQ(by_rank(s).at(0), 0u) << "one micro-batch on rank 0 (1 s) > all 8 on the others";
  EXPECT_EQ(total(s), 8u);
  EXPECT_EQ(s.entered_standby, std::vector<uint32_t>{0});
  bool standby = false;
  for (const WorkerShare& w : s.workers) standby |= w.rank == 0 && w.standby;
  EXPECT_TRUE(standby);
  // Every 5th step it gets one micro-batch, to be measured again.
  s = planner.shares(kFour, 5, 8);
  EXPECT_EQ(by_rank(s).at(0), 1u);
  EXPECT_EQ(total(s), 8u);
  EXPECT_TRUE(s.entered_standby.empty()) << "said once";
  // It recovers: measured fast, it has a share again.
  for (int i = 0; i < 8; ++i) record(planner, {{0, 0.1}, {1, 0.1}, {2, 0.1}, {3, 0.1}});
  s = planner.shares(kFour, 6, 8);
  EXPECT_EQ(by_rank(s).at(0), 2u);
  EXPECT_EQ(s.left_standby, std::vector<uint32_t>{0});
}

TEST(SpeedPlanner, MissedWorkerCountsAsAtLeastAsSlowAsTheWait) {
  SpeedPlanner planner(rebalance());
  record_enough(planner, {{1, 0.1}, {2, 0.1}, {3, 0.1}});
  for (size_t i = 0; i < SpeedPlanner::kMinHistorySteps; ++i)
    planner.observe_missed(0, 4, 2.0);  // waited 2 s for 4 micro-batches
  EXPECT_DOUBLE_EQ(*planner.estimate(0), 0.5);
  EXPECT_LT(by_rank(planner.shares(kFour, 1, 16)).at(0), 2u);
}

TEST(SpeedPlanner, SameHistoryGivesTheSamePlans) {
  const auto run = [] {
    Ledger ledger(512, 9, true);
    SpeedPlanner planner(rebalance());
    std::vector<std::vector<uint64_t>> out;
    for (uint64_t step = 0; step < 6; ++step) {
      record(planner, {{0, 0.2 + 0.01 * static_cast<double>(step)}, {1, 0.1}, {2, 0.11}, {3, 0.1}});
      for (const WorkerPlan& p : plan_shares(ledger, planner.shares(kFour, step, 16), step, 4)) {
        out.emplace_back();
        out.back().push_back(p.rank);
        for (const PlannedMicroBatch& mb : p.micro_batches) {
          out.back().push_back(mb.id);
          ledger.complete(mb.id);
        }
      }
    }
    return out;
  };
  EXPECT_EQ(run(), run());
}

TEST(SpeedPlanner, LedgerStaysExactWithDropsOverAnEpoch) {
  // Rank 0 twice as slow and dropping the second half of its plan every
  // step (a threshold): every sample is done exactly once per epoch.
  Ledger ledger(1000, 4, true);
  SpeedPlanner planner(rebalance());
  uint64_t step = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (; step < 1000 && !ledger.epoch_complete(); ++step) {
      const StepShares shares = planner.shares(kFour, step, 16);
      uint32_t planned = 0;
      for (const WorkerPlan& p : plan_shares(ledger, shares, step, 8)) {
        planned += static_cast<uint32_t>(p.micro_batches.size());
        std::vector<double> times;
        for (size_t i = 0; i < p.micro_batches.size(); ++i) {
          if (p.rank == 0 && i >= 1) {
            ledger.drop(p.micro_batches[i].id);
          } else {
            ledger.complete(p.micro_batches[i].id);
            times.push_back(p.rank == 0 ? 0.2 : 0.1);
          }
        }
        planner.observe(p.rank, times);
      }
      EXPECT_LE(planned, 16u);
    }
    ASSERT_TRUE(ledger.epoch_complete()) << "epoch " << epoch;
    const EpochAudit audit = ledger.audit();
    EXPECT_TRUE(audit.ok()) << audit.duplicated.size() << " duplicated, " << audit.missing.size()
                            << " missing";
    EXPECT_EQ(audit.done, 1000u);
    ledger.start_next_epoch();
  }
}

TEST(SpeedPlanner, RequeuedMicroBatchesGoToTheWorkersWithTimeToSpare) {
  Ledger ledger(400, 2, true);
  SpeedPlanner planner(rebalance());
  record_enough(planner, {{0, 0.3}, {1, 0.1}, {2, 0.1}, {3, 0.12}});
  // Step 0: two micro-batches come back (dropped), to the head of the ledger.
  std::vector<uint64_t> requeued;
  for (const WorkerPlan& p : plan_shares(ledger, planner.shares(kFour, 0, 16), 0, 4)) {
    for (const PlannedMicroBatch& mb : p.micro_batches) {
      if (p.rank == 0) {
        ledger.drop(mb.id);
        requeued.insert(requeued.end(), mb.samples.begin(), mb.samples.end());
      } else {
        ledger.complete(mb.id);
      }
    }
  }
  ASSERT_FALSE(requeued.empty());
  const StepShares shares = planner.shares(kFour, 1, 16);
  const std::vector<WorkerPlan> plans = plan_shares(ledger, shares, 1, 4);
  // The predicted finish (share x estimate) of each plan, in dealing order.
  std::vector<double> finish;
  for (const WorkerShare& w : shares.workers)
    finish.push_back(static_cast<double>(w.micro_batches) * w.estimate_seconds);
  double spare_most = finish.front();
  for (double f : finish) EXPECT_LE(spare_most, f);
  // The requeued samples lead the plan of the worker that finishes first.
  const PlannedMicroBatch& head = plans.front().micro_batches.front();
  EXPECT_EQ(std::vector<uint64_t>(head.samples.begin(), head.samples.end()),
            std::vector<uint64_t>(requeued.begin(), requeued.begin() + 4));
}

}  // namespace
}  // namespace dctrain
