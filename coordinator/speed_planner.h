// Speed-aware planning (step.policy "rebalance" and "rebalance+dropcompute"):
// each worker gets a number of micro-batches in proportion to its measured
// speed, so a persistent straggler gets fewer and the step keeps its whole
// global batch. The idea of DynMo's load balancing, for data parallelism.
//
// The estimate. A worker's micro-batch time is the median, over its last
// `window_steps` observed steps, of each step's mean micro-batch compute
// time (injected delays included, as the worker reports them): robust to
// the odd stalled step, which tau is there to catch, quick to follow a
// persistent change (half a window), and it sees real slowness, which a
// median over micro-batches does not: under a CPU quota most micro-batches
// run at full speed and a few of every step carry the throttled waits. Under a threshold the
// completed micro-batches are an unbiased sample of the plan's times when they are independent
// (Wald's identity), so the drops do not bias it. A worker that missed the deadline or died
// reported nothing; it is recorded as at least as slow as the time the step waited for it, spread
// over its plan (a lower bound), so a worker that never answers in time sinks to the bottom of the
// order.
//
// The shares. Even until every worker has kMinHistorySteps steps on record.
// Then the step's micro-batches go one by one to the worker that
// would finish its plan earliest with one more ((n + 1) t), which minimises
// the predicted slowest worker's compute, max n t. The new shares replace
// the ones in force only when they cut that prediction by more than
// `min_gain` (relative), so noise among equally fast workers does not
// churn them. A worker with no micro-batch (its share would be below one)
// is kept as a standby: an empty plan (it stays in the step, takes every
// update and answers at once) and, every `probe_every_steps` steps, one
// micro-batch taken from the worker predicted to finish last, to measure it
// again.
//
// The order. Micro-batches are dealt position by position over the workers
// sorted by predicted finish (n t, earliest first; ties rotate with the
// step), so the head of the ledger (requeued micro-batches) goes to the
// front of the plans of the workers with the most time to spare, where a
// threshold does not cut them again.
//
// Deterministic: the shares are a function of the recorded times, the ranks
// and the step only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "coordinator/ledger.h"
#include "coordinator/planner.h"
#include "proto/config.pb.h"
#include "proto/metrics.pb.h"

namespace dctrain {

struct WorkerShare {
  uint32_t rank = 0;
  uint32_t micro_batches = 0;
  double estimate_seconds = 0.0;  // predicted micro-batch time; 0: none recorded yet
  bool standby = false;           // kept with no share (or a probe of one)
};

struct StepShares {
  std::vector<WorkerShare> workers;  // in the order the plans are dealt
  std::vector<uint32_t> entered_standby;
  std::vector<uint32_t> left_standby;
  bool changed = false;  // the shares in force moved this step
};

class SpeedPlanner {
 public:
  // `config`: finalized (runtime/step_policy.h sets its defaults when the
  // policy is speed-aware; otherwise the planner is not asked).
  explicit SpeedPlanner(const v1::RebalanceConfig& config);

  // A worker's completed micro-batch times in one step (none: it completed
  // nothing, e.g. an empty plan; that records nothing).
  void observe(uint32_t rank, std::span<const double> micro_batch_seconds);
  // A worker that missed the step: it had `planned` micro-batches and the
  // step waited `waited_seconds` for it.
  void observe_missed(uint32_t rank, uint32_t planned, double waited_seconds);
  // A new worker took `rank`: its history is not this one's.
  void forget(uint32_t rank);

  // The median over the rank's window of each step's mean micro-batch
  // time; nothing when it has no record.
  std::optional<double> estimate(uint32_t rank) const;
  // Steps in the rank's window.
  size_t steps_recorded(uint32_t rank) const;

  // Steps every worker must have on record (or the whole window, if
  // shorter) before the shares first move.
  static constexpr size_t kMinHistorySteps = 3;

  // The shares of `count` micro-batches over `ranks` (ascending) for `step`.
  StepShares shares(std::span<const uint32_t> ranks, uint64_t step, uint32_t count);

 private:
  // Each rank's estimated micro-batch time for planning (`measured`: the
  // estimates themselves, none where a rank has none).
  std::vector<double> planning_times(std::span<const uint32_t> ranks,
                                     std::vector<std::optional<double>>& measured) const;
  // The shares last used when they cover these ranks and this count, else
  // even ones.
  std::vector<uint32_t> shares_in_force(std::span<const uint32_t> ranks, uint32_t count) const;
  // The ranks without a share (standby), a probe of one micro-batch given to
  // each every probe_every_steps from the worker predicted to finish last;
  // who entered and left standby into `out`.
  std::vector<bool> take_standbys(std::span<const uint32_t> ranks, std::vector<uint32_t>& chosen,
                                  const std::vector<double>& times, uint64_t step,
                                  StepShares& out);

  v1::RebalanceConfig config_;
  std::map<uint32_t, std::deque<std::vector<double>>> history_;  // per rank, per step
  std::map<uint32_t, uint32_t> in_force_;                        // the shares last used
  std::set<uint32_t> standby_;
};

// Takes the micro-batches of `shares` from the head of the ledger, dealt
// position by position in the order of `shares.workers`; stops early when
// the epoch runs out. One plan per worker, empty ones included.
std::vector<WorkerPlan> plan_shares(Ledger& ledger, const StepShares& shares, uint64_t step,
                                    uint32_t micro_batch);

// The plans of one step under `policy`: speed-aware shares (the returned
// shares say who got what) or the even dealing of plan_step (no shares).
struct PolicyPlans {
  std::vector<WorkerPlan> plans;
  std::optional<StepShares> shares;
};
PolicyPlans plan_for_policy(v1::Policy policy, SpeedPlanner& planner, Ledger& ledger,
                            std::span<const uint32_t> ranks, uint64_t step, uint32_t global_batch,
                            uint32_t micro_batch);

// Writes each worker's share (planned micro-batches, estimate, standby)
// into its entry of a step record (workers listed by rank); the planned
// counts also for even shares.
void record_shares(const std::optional<StepShares>& shares, v1::StepRecord& record,
                   const std::map<uint32_t, uint64_t>& planned);

// Feeds a closed step's record to the planner: each contributor's
// micro-batch times, each missed worker's lower bound (`step_seconds`
// waited). A worker cut by the backup policy is not slow by that alone, so
// it records nothing.
void observe_step(SpeedPlanner& planner, const v1::StepRecord& record);

}  // namespace dctrain
