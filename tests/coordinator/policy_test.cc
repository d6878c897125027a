// The step policies in the coordinator, in one process with a fake clock:
// the micro-batch times the coordinator reads are the test's (each
// contribution's times are rewritten before it arrives), so a worker is as
// slow as the test says whatever the machine does. Speed-aware shares
// ("rebalance") follow the times and keep the global batch and the ledger
// exact; backup workers ("backup") close the step after N - b
// contributions and requeue the rest without ever counting it as a miss.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "coordinator/coordinator.h"
#include "metrics/metrics_json.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"
#include "runtime/text_format.h"
#include "tests/coordinator/coordinator_fixture.h"
#include "tests/testing/fake_cluster.h"

namespace dctrain {
namespace {

using testing::as_received;
using testing::CapturedLog;
using testing::FakeWorker;
using testing::RecordingOutbox;

const char* kConfig = R"(
name: "policy"
seed: 7
workers: 3
model { name: "mlp" image_channels: 1 image_height: 8 image_width: 8 }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 240 }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
step { global_batch: 24 micro_batch: 4 }
liveness { heartbeat_seconds: 0.5 silence_seconds: 10 grace_seconds: 0.5 join_timeout_seconds: 120 }
stop { max_steps: 30 }
)";

class PolicyTest : public testing::CoordinatorFixture {
 protected:
  // Delivered in `order`; each contribution's micro-batch times are set to
  // seconds_of(worker, step) before the coordinator sees it.
  PolicyTest() : CoordinatorFixture(kConfig, "policy") {
    hello_on_start = true;
    seen_plan = [this](const std::string& name, uint64_t step, const v1::Plan& plan) {
      plan_sizes[step][name] = plan.micro_batches_size();
    };
    tamper = [this](const std::string& name, uint64_t step, Message& contribution) {
      v1::Contribution& c = *contribution.envelope.mutable_contribution();
      const double t = seconds_of(name, step);
      for (v1::MicroBatchTime& mb : *c.mutable_completed()) mb.set_compute_seconds(t);
      c.set_compute_seconds(t * c.completed_size());
    };
  }

  std::function<double(const std::string&, uint64_t)> seconds_of = [](const std::string&,
                                                                      uint64_t) { return 0.01; };
  std::map<uint64_t, std::map<std::string, int>> plan_sizes;
};

TEST_F(PolicyTest, RebalanceGivesTheSlowWorkerFewerAndFollowsAChangeOfSpeed) {
  config.mutable_step()->set_policy(v1::POLICY_REBALANCE);
  // a (rank 0) twice as slow until step 12, then c (rank 2) instead.
  seconds_of = [](const std::string& name, uint64_t step) {
    const std::string slow = step < 12 ? "a" : "c";
    return name == slow ? 0.02 : 0.01;
  };
  start();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0) << coordinator->stop_reason();
  // 6 micro-batches: a at 1 (0.02 s), b and c at 3 and 2 (<= 0.03 s)
  // beats 2 each (0.04 s); from step 3 on, once every worker has 3 steps
  // on record.
  for (uint64_t step = 0; step < 3; ++step) EXPECT_EQ(plan_sizes[step]["a"], 2) << step;
  for (uint64_t step = 3; step < 12; ++step) {
    EXPECT_EQ(plan_sizes[step]["a"], 1) << "step " << step;
    EXPECT_EQ(plan_sizes[step]["a"] + plan_sizes[step]["b"] + plan_sizes[step]["c"], 6);
  }
  EXPECT_EQ(plan_sizes[29]["c"], 1) << "c is the slow one now";
  EXPECT_GE(plan_sizes[29]["a"], 2);
  EXPECT_TRUE(log.contains("micro-batch shares by measured speed")) << log.text.str();

  // The shares are in every step record; the global batch stays whole; the
  // ledger is exact (3 epochs of 240 samples in 30 steps, nothing lost).
  const MetricsRecords records = metrics();
  ASSERT_EQ(records.steps.size(), 30u);
  for (const v1::StepRecord& r : records.steps) {
    EXPECT_EQ(r.policy(), "rebalance");
    EXPECT_EQ(r.planned(), 6u) << r.ShortDebugString();
    uint32_t shares = 0;
    for (const v1::WorkerStep& w : r.workers()) shares += w.planned();
    EXPECT_EQ(shares, 6u) << r.ShortDebugString();
    if (r.step() == 5) {
      EXPECT_DOUBLE_EQ(r.workers(0).estimated_micro_batch_seconds(), 0.02);
      EXPECT_DOUBLE_EQ(r.workers(1).estimated_micro_batch_seconds(), 0.01);
    }
  }
  ASSERT_EQ(records.epochs.size(), 3u);
  for (const v1::EpochRecord& e : records.epochs) {
    EXPECT_TRUE(e.audit_ok()) << e.ShortDebugString();
    EXPECT_EQ(e.done(), 240u);
  }
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
}

TEST_F(PolicyTest, SamePlansForTheSameSeedAndTimes) {
  config.mutable_step()->set_policy(v1::POLICY_REBALANCE);
  seconds_of = [](const std::string& name, uint64_t step) {
    return name == "b" ? 0.015 + 0.001 * static_cast<double>(step % 3) : 0.01;
  };
  start();
  pump();
  ASSERT_TRUE(coordinator->finished());
  const auto first = plan_sizes;
  const MetricsRecords one = metrics();

  coordinator.reset();
  TearDown();
  SetUp();
  config.mutable_step()->set_policy(v1::POLICY_REBALANCE);
  outbox.inbox.clear();
  workers.clear();
  plan_sizes.clear();
  start();
  pump();
  ASSERT_TRUE(coordinator->finished());
  EXPECT_EQ(plan_sizes, first);
  const MetricsRecords two = metrics();
  ASSERT_EQ(one.steps.size(), two.steps.size());
  for (size_t i = 0; i < one.steps.size(); ++i) {
    for (int w = 0; w < one.steps[i].workers_size(); ++w) {
      EXPECT_EQ(one.steps[i].workers(w).planned(), two.steps[i].workers(w).planned());
    }
  }
}

TEST_F(PolicyTest, BackupWorkersCloseTheStepAfterNMinusBAndRequeueTheRest) {
  config.mutable_step()->set_policy(v1::POLICY_BACKUP);
  config.mutable_step()->set_backup_workers(1);
  config.mutable_liveness()->set_release_after_missed_steps(3);
  // The fake clock's order of arrival: c always last (its plan is
  // delivered after a's and b's contributions closed the step).
  order = {"a", "b", "c"};
  start();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0) << coordinator->stop_reason();
  const MetricsRecords records = metrics();
  ASSERT_EQ(records.steps.size(), 30u);
  uint32_t cut = 0;
  for (const v1::StepRecord& r : records.steps) {
    EXPECT_EQ(r.policy(), "backup");
    uint32_t contributed = 0, cut_here = 0;
    for (const v1::WorkerStep& w : r.workers()) {
      contributed += w.contributed() ? 1 : 0;
      if (w.cut()) {
        ++cut_here;
        EXPECT_TRUE(w.missed());
        EXPECT_EQ(r.orphaned(), w.planned()) << r.ShortDebugString();
      }
    }
    EXPECT_EQ(contributed, 2u) << r.ShortDebugString();
    EXPECT_EQ(cut_here, 1u) << r.ShortDebugString();
    cut += cut_here;
  }
  EXPECT_EQ(cut, 30u);
  // Cut every step, yet never released: a backup is not a missed deadline.
  EXPECT_EQ(coordinator->totals().workers_released(), 0u) << log.text.str();
  EXPECT_FALSE(log.contains("released from the run"));
  // Requeued, not lost: each epoch audits exactly once.
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
  ASSERT_FALSE(records.epochs.empty());
  for (const v1::EpochRecord& e : records.epochs) EXPECT_TRUE(e.audit_ok()) << e.ShortDebugString();
}

TEST_F(PolicyTest, ThePolicyNamesTheSharesAndTauTheThreshold) {
  // "sync" with a threshold is DropCompute: the policy says how the
  // micro-batches are shared, tau whether there is a threshold. (Before,
  // the policy said both, and "sync" with a finite tau was refused.)
  config.mutable_step()->set_policy(v1::POLICY_SYNC);
  config.mutable_step()->set_tau(0.5);
  finalize_run_config(config);
  EXPECT_EQ(config.step().policy(), v1::POLICY_SYNC);
  EXPECT_DOUBLE_EQ(config.step().tau(), 0.5);

  v1::RunConfig unset = parse_run_config(kConfig, "policy");
  unset.mutable_step()->set_tau(0.5);
  finalize_run_config(unset);
  EXPECT_EQ(unset.step().policy(), v1::POLICY_SYNC) << "a config without a policy";
  apply_tau_option("inf", *unset.mutable_step());
  finalize_run_config(unset);
  EXPECT_EQ(unset.step().policy(), v1::POLICY_SYNC) << "--tau inf on a printed config";

  // The older spellings that named the threshold too are read as their
  // shares, and still need a threshold.
  for (const auto& [old, shares] :
       {std::pair{v1::POLICY_DROPCOMPUTE, v1::POLICY_SYNC},
        std::pair{v1::POLICY_REBALANCE_DROPCOMPUTE, v1::POLICY_REBALANCE}}) {
    v1::RunConfig c = parse_run_config(kConfig, "policy");
    c.mutable_step()->set_policy(old);
    c.mutable_step()->set_tau_policy(v1::TAU_POLICY_AUTO);
    finalize_run_config(c);
    EXPECT_EQ(c.step().policy(), shares) << word(old);
    EXPECT_NE(to_text(c).find(fmt::format("policy: \"{}\"", word(shares))), std::string::npos)
        << to_text(c);

    v1::RunConfig without = parse_run_config(kConfig, "policy");
    without.mutable_step()->set_policy(old);
    try {
      finalize_run_config(without);
      FAIL() << word(old) << " without a threshold was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(
          std::string(e.what()).find(fmt::format("step.policy '{}' needs a threshold", word(old))),
          std::string::npos)
          << e.what();
    }
    // --tau on a printed config of an older run keeps the shares.
    v1::RunConfig printed = parse_run_config(kConfig, "policy");
    printed.mutable_step()->set_policy(old);
    apply_tau_option("inf", *printed.mutable_step());
    finalize_run_config(printed);
    EXPECT_EQ(printed.step().policy(), shares) << word(old);
  }

  // Backup workers close the step without the slowest: no threshold.
  v1::RunConfig backup = parse_run_config(kConfig, "policy");
  backup.mutable_step()->set_policy(v1::POLICY_BACKUP);
  backup.mutable_step()->set_tau(0.5);
  try {
    finalize_run_config(backup);
    FAIL() << "backup with a finite tau was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("step.policy 'backup' runs at tau = inf"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dctrain

namespace dctrain {
namespace {

// kConfig with `step_text` added to its step, and `extra` to the config.
std::string with_step(const std::string& step_text, const std::string& extra = "") {
  const std::string step = "step { global_batch: 24 micro_batch: 4";
  std::string text = kConfig;
  text.replace(text.find(step), step.size(), step + " " + step_text);
  return text + extra + "\n";
}

// The message of finalize_run_config's refusal of the config, or "".
std::string refusal(const std::string& step_text, const std::string& extra = "") {
  v1::RunConfig c = parse_run_config(with_step(step_text, extra), "policy");
  try {
    finalize_run_config(c);
    return "";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

TEST(Policies, AsyncAndLocalSgdHaveDefaultsAndRefuseWhatMakesNoSense) {
  v1::RunConfig async = parse_run_config(with_step("policy: \"async\""), "policy");
  finalize_run_config(async);
  EXPECT_EQ(async.step().max_staleness(), 4u);
  EXPECT_EQ(async.data_plane().kind(), v1::DATA_PLANE_STAR) << "the server is the coordinator";

  v1::RunConfig local = parse_run_config(
      with_step("policy: \"local-sgd\"", "data_plane { kind: \"exchange\" }"), "policy");
  finalize_run_config(local);
  EXPECT_EQ(local.step().local_steps(), 4u);
  EXPECT_EQ(local.step().outer_optimizer().kind(), v1::OPTIMIZER_SGD);
  EXPECT_DOUBLE_EQ(local.step().outer_optimizer().lr(), 1.0) << "plain averaging";
  EXPECT_EQ(&replicated_optimizer(local), &local.step().outer_optimizer());
  EXPECT_EQ(&replicated_optimizer(async), &async.optimizer());

  EXPECT_EQ(refusal("policy: \"async\" max_staleness: 0"), "");
  for (const auto& [step, extra, why] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"policy: \"async\" tau_policy: \"auto\"", "", "no step for the automatic threshold"},
           {"policy: \"async\"", "data_plane { kind: \"exchange\" }", "it has no exchange rounds"},
           {"max_staleness: 2", "", "step.max_staleness is set but step.policy is 'sync'"},
           {"policy: \"rebalance\" local_steps: 4", "", "use policy 'local-sgd'"},
           {"policy: \"local-sgd\" outer_optimizer { lr: -1 }", "", "outer_optimizer.lr is -1"},
           {"policy: \"local-sgd\" outer_optimizer { nesterov: true }", "", "needs momentum > 0"},
           {"policy: \"local-sgd\" outer_optimizer { clip_norm: 1 }", "", "takes no clip_norm"},
       }) {
    const std::string message = refusal(step, extra);
    EXPECT_NE(message.find(why), std::string::npos) << step << " " << extra << ":\n" << message;
  }
}

}  // namespace
}  // namespace dctrain
