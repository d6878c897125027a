// Per-worker totals over a run, and which workers were slow and why: a
// worker whose micro-batches take much longer than the others' is slow in
// compute; one whose contributions arrive late although its own compute was
// quick is slow in communication (the plan reached it late, or its
// contribution took long on the wire). Written into summary.json as
// "per_worker" and "slow_workers".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "proto/metrics.pb.h"
#include "proto/wire.pb.h"

namespace dctrain {

struct WorkerTotals {
  std::string name;
  uint32_t rank = 0;  // the last rank it had
  uint64_t steps_planned = 0, steps_contributed = 0, steps_missed = 0;
  uint64_t completed = 0, dropped = 0, orphaned = 0;  // micro-batches
  uint64_t timed = 0;                  // micro-batches it reported computing, in time or late
  double micro_batch_seconds = 0.0;    // their summed compute time
  double delay_seconds = 0.0;          // of which injected delays
  uint64_t timed_samples = 0;          // their samples
  uint64_t arrivals = 0;               // contributions that arrived, in time or late
  double arrival_seconds = 0.0;        // sum of plan sent -> contribution arrived
  double communication_seconds = 0.0;  // sum of arrival - the worker's own compute and overhead
  uint64_t late = 0;                   // contributions that arrived after their step closed
  double late_arrival_seconds = 0.0;   // sum of their plan sent -> arrival
  std::optional<v1::BlasInfo> blas;    // from its (latest) hello; none from older workers
  uint32_t threads = 1;                // compute threads, from its hello

  double mean_micro_batch_seconds() const;
  double mean_communication_seconds() const;
  // Training FLOPs per second over its timed samples' compute less their
  // delays; 0 when nothing was timed or `training_flops_per_sample` is 0.
  double achieved_flops_per_second(double training_flops_per_sample) const;
  // That against its sgemm peak x threads; 0 when either is unknown.
  double mfu(double training_flops_per_sample) const;
};

class WorkerSummary {
 public:
  // `largest_micro_batch`: the run's micro-batch size, which bounds the
  // samples a contribution's timed micro-batches can hold.
  explicit WorkerSummary(uint32_t largest_micro_batch)
      : largest_micro_batch_(largest_micro_batch) {}

  // Call when a worker is admitted: keeps what its hello says about its BLAS.
  void joined(const std::string& name, uint32_t rank, const v1::Hello& hello);
  // Call when the plans of `step` are sent.
  void step_started(uint64_t step, double now);
  // Call for every contribution from a member, accepted or not (a late one
  // is never validated by the coordinator). Returns false, and counts
  // nothing of it, when one of its times is negative or not finite, or would
  // make a total infinite (such times would poison every mean after them),
  // or when it claims more samples than its timed micro-batches can hold
  // (they would inflate its FLOP/s, or wrap the count).
  bool contribution_arrived(const std::string& name, uint64_t step, const v1::Contribution& c,
                            double now);
  // Call when a step closes, before the record is written: fills each
  // worker's arrival_seconds and adds the step to the totals. `planned`:
  // micro-batches planned, by rank (a worker that did not contribute
  // orphaned them all).
  void step_closed(v1::StepRecord& record, const std::map<uint32_t, uint64_t>& planned);

  // Call when the coordinator releases a worker for missing `missed`
  // deadlines in a row; summary.json lists it under "released_workers".
  void worker_released(const std::string& name, uint32_t rank, uint64_t step, uint32_t missed);

  std::vector<WorkerTotals> totals() const;
  // Workers at least `factor` times slower than the median of the others, in
  // mean micro-batch time ("compute") or mean communication time
  // ("communication"), each with its cause.
  std::vector<std::pair<WorkerTotals, std::string>> slow_workers(double factor = 1.5) const;
  // summary.json's "per_worker", "slow_workers" and "released_workers",
  // with each worker's model FLOPs utilization from the model's
  // `training_flops_per_sample` (0: not counted) and its mean over the
  // workers.
  void add_to(v1::RunSummary& summary, double training_flops_per_sample) const;

 private:
  struct Release {
    std::string name;
    uint32_t rank = 0;
    uint64_t step = 0;
    uint32_t missed = 0;
  };
  uint32_t largest_micro_batch_;
  std::map<std::string, WorkerTotals> workers_;
  std::vector<Release> released_;
  std::map<uint64_t, double> started_;                  // recent steps' start times
  std::map<std::string, double> arrival_in_open_step_;  // name -> arrival seconds
  uint64_t open_step_ = 0;
  bool step_open_ = false;
};

}  // namespace dctrain
