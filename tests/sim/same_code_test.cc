// The simulator drives the coordinator's own planner and ledger, not a copy:
// one run config under the speed-aware policy ("rebalance") goes through
// the coordinator's test fixture (the real Coordinator, in-process workers
// whose micro-batch times the test sets) and through dctrain-simulate's
// engine (simulated workers whose micro-batch times come from a trace of
// the same times), and every step's shares, estimates and standbys, and
// every epoch's audit, are the same in both run folders. A change to the
// planner moves both; a simulator that planned by itself would drift from
// the coordinator on the first step where the two differ.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include <array>
#include <cstdio>
#include <string>

#include "metrics/metrics_json.h"
#include "runtime/run_config.h"
#include "sim/simulation.h"
#include "tests/coordinator/coordinator_fixture.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"

namespace dctrain {
namespace {

// 3 workers; 6 micro-batches of 4 a step; 3 epochs of 240 samples.
constexpr const char* kConfig = R"(
name: "same-code"
seed: 7
workers: 3
model { name: "mlp" image_channels: 1 image_height: 8 image_width: 8 }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 240 }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
step { global_batch: 24 micro_batch: 4 policy: "rebalance" }
liveness { heartbeat_seconds: 0.5 silence_seconds: 10 grace_seconds: 0.5 join_timeout_seconds: 120 }
stop { max_steps: 30 }
)";

// Each rank's micro-batch time, chosen so that no two workers' predicted
// finishes tie ((n + 1) t differ for every n that the shares reach): the
// planner's choice never rests on the last bits of a clock.
constexpr std::array<double, 3> kMicroBatchSeconds = {0.0291, 0.0100, 0.0137};

class SameCodeTest : public testing::CoordinatorFixture {
 protected:
  SameCodeTest() : CoordinatorFixture(kConfig, "same-code") {
    hello_on_start = true;
    // Workers a, b, c take ranks 0, 1, 2 in the order they say hello.
    tamper = [](const std::string& name, uint64_t, Message& contribution) {
      const double t = kMicroBatchSeconds.at(static_cast<size_t>(name.at(0) - 'a'));
      v1::Contribution& c = *contribution.envelope.mutable_contribution();
      for (v1::MicroBatchTime& mb : *c.mutable_completed()) mb.set_compute_seconds(t);
      c.set_compute_seconds(t * c.completed_size());
    };
  }
};

// A metrics.jsonl with one step in which each rank completed one
// micro-batch of 4 samples in its time: the simulator's trace.
std::string trace_of_the_times() {
  v1::StepRecord step;
  step.set_type("step");
  for (uint32_t rank = 0; rank < kMicroBatchSeconds.size(); ++rank) {
    v1::WorkerStep& w = *step.add_workers();
    w.set_rank(rank);
    w.set_contributed(true);
    w.set_completed(1);
    w.set_samples(4);
    w.add_micro_batch_seconds(kMicroBatchSeconds[rank]);
  }
  return metrics_line(step);
}

TEST_F(SameCodeTest, TheSimulatorAndTheCoordinatorPlanEveryStepAlike) {
  start();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  ASSERT_EQ(coordinator->exit_code(), 0) << coordinator->stop_reason();
  const MetricsRecords real = metrics();

  const testing::ScratchDir dir("same-code-sim");
  const std::filesystem::path trace = dir / "trace.jsonl";
  std::ofstream(trace) << trace_of_the_times();
  SimulationOptions o;
  o.config = parse_run_config(kConfig, "same-code.cfg");
  o.run_dir = dir / "run";
  o.trace = trace;
  o.progress_seconds = 0.0;
  auto quiet =
      std::make_shared<spdlog::logger>("sim", std::make_shared<spdlog::sinks::null_sink_mt>());
  const SimulationResult result = simulate(o, quiet);
  ASSERT_EQ(result.exit_code, 0);
  const MetricsRecords simulated =
      parse_metrics(testing::read_text(o.run_dir / "metrics.jsonl"), "metrics.jsonl");

  ASSERT_EQ(real.steps.size(), 30u);
  ASSERT_EQ(simulated.steps.size(), real.steps.size());
  int moved = 0;  // steps whose shares are not even
  for (size_t s = 0; s < real.steps.size(); ++s) {
    const v1::StepRecord& a = real.steps[s];
    const v1::StepRecord& b = simulated.steps[s];
    ASSERT_EQ(a.workers_size(), b.workers_size()) << "step " << s;
    EXPECT_EQ(a.planned(), b.planned()) << "step " << s;
    bool even = true;
    for (int i = 0; i < a.workers_size(); ++i) {
      const v1::WorkerStep& x = a.workers(i);
      const v1::WorkerStep& y = b.workers(i);
      ASSERT_EQ(x.rank(), y.rank());
      EXPECT_EQ(x.planned(), y.planned()) << "step " << s << " rank " << x.rank();
      EXPECT_EQ(x.standby(), y.standby()) << "step " << s << " rank " << x.rank();
      EXPECT_NEAR(x.estimated_micro_batch_seconds(), y.estimated_micro_batch_seconds(), 1e-9)
          << "step " << s << " rank " << x.rank();
      EXPECT_EQ(x.completed(), y.completed()) << "step " << s << " rank " << x.rank();
      even = even && x.planned() == 2;
    }
    moved += even ? 0 : 1;
  }
  // The planner did move the shares: the comparison is not of even plans.
  EXPECT_GE(moved, 25) << "steps with speed-aware shares";
  std::printf("%zu steps alike in both run folders, %d of them with speed-aware shares\n",
              real.steps.size(), moved);
  EXPECT_EQ(real.steps.back().workers(0).planned(), 1u) << "the slowest rank's last share";
  ASSERT_EQ(real.epochs.size(), simulated.epochs.size());
  for (size_t e = 0; e < real.epochs.size(); ++e) {
    EXPECT_TRUE(real.epochs[e].audit_ok());
    EXPECT_TRUE(simulated.epochs[e].audit_ok());
    EXPECT_EQ(real.epochs[e].step(), simulated.epochs[e].step()) << "epoch " << e;
    EXPECT_EQ(real.epochs[e].done(), simulated.epochs[e].done()) << "epoch " << e;
  }
}

}  // namespace
}  // namespace dctrain
