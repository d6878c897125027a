// The compute of one step on a worker: the plan's micro-batches in order
// under the threshold tau, gradients summed into the replica's gradient
// arena, and the contribution that reports them; then the step's update.
//
// The step compute clock starts when the plan's compute starts; injected
// delay counts as compute (it is slept on the same clock). Before each
// micro-batch the clock is read: once it has passed tau no further
// micro-batch starts (the rest are dropped); a running micro-batch is never
// cut. The clock is injected: the steady clock in the process, a manual one
// in tests.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "comm/message.h"
#include "data/dataset.h"
#include "runtime/replica.h"
#include "trace/recorder.h"
#include "worker/delay_model.h"
#include "worker/local_steps.h"
#include "worker/worker_clock.h"

namespace dctrain {

// The step of the plan the worker heard last: written by the thread that
// receives plans, read by the compute thread before each micro-batch. A plan
// for another step means the coordinator has closed the step being computed
// (cut this worker as a backup, or stopped waiting for it at its deadline)
// and requeued its micro-batches, so starting one more is wasted work that
// would also delay the next step.
// Until a plan is heard (a trainer driven without a receiving thread) no
// step is closed.
class LatestPlan {
 public:
  void heard(uint64_t step) { step_plus_one_.store(step + 1, std::memory_order_release); }
  bool closes(uint64_t step) const {
    const uint64_t latest = step_plus_one_.load(std::memory_order_acquire);
    return latest != 0 && latest != step + 1;
  }

 private:
  std::atomic<uint64_t> step_plus_one_{0};  // 0: none heard
};

class ComputeLoop {
 public:
  // Without `latest` every planned micro-batch under tau runs. `local`:
  // policy "local-sgd"'s steps (the loop keeps it), for plans with local
  // steps.
  ComputeLoop(Replica& replica, const Dataset& train, uint64_t data_seed, DelayModel& delays,
              WorkerClock& clock, const LatestPlan* latest = nullptr,
              std::unique_ptr<LocalSteps> local = nullptr);

  // Runs `plan` for `step`; returns the contribution, signed by `sender`.
  // `received` is when the plan arrived on `clock` (for the overhead figure).
  // A plan with local steps (worker/local_steps.h) moves the parameters and
  // leaves the period's delta in the gradient arena; the next update, or
  // end_local_steps(), puts the parameters back first.
  // Without `attach_tensors` (data plane "exchange") the gradient and
  // statistics stay in the replica's arenas and the message carries none.
  Message run(const v1::Plan& plan, uint64_t step, const std::string& sender, double received,
              bool attach_tensors = true);

  // Applies a validated update (tensor 0: gradient, 1: statistics if any).
  void apply(const Message& update);
  // The parameters a local-step plan started from, back in the replica
  // (before an update applied elsewhere: the exchange's commit).
  void end_local_steps();

  // The replica's parameter checksum at the start of the next run(): the
  // one its last update computed as it wrote them (applied()), else read
  // now and kept until run() has reported it.
  uint64_t start_checksum();
  // The replica's parameters were just updated elsewhere (the exchange's
  // commit), and `checksum` is what the update computed.
  void applied(uint64_t checksum) { start_checksum_ = checksum; }

  // Zeroes the gradient and statistics arenas for the next run() now, so
  // that it starts computing at once: for a caller with time to spare
  // before the next plan (the exchange's wait for its commit).
  void zero_for_next_step();

  // The timeline's events of traced steps (trace/recorder.h), carried by
  // the next contribution.
  TraceRecorder& trace() { return trace_; }

 private:
  // One micro-batch of a step that started at `start` under `tau`: its
  // compute and injected delay, its time into `c`.
  MicroBatchResult run_micro_batch(const v1::MicroBatch& mb, double tau, double start,
                                   v1::Contribution& c);

  Replica& replica_;
  const Dataset& train_;
  uint64_t data_seed_;
  DelayModel& delays_;
  WorkerClock& clock_;
  const LatestPlan* latest_;
  std::unique_ptr<LocalSteps> local_;
  Batch batch_;
  std::vector<uint64_t> ids_;
  std::vector<float> statistics_;
  TraceRecorder trace_;
  bool zeroed_ = false;  // the arenas were zeroed for the next run()
  std::optional<uint64_t> start_checksum_;
};

}  // namespace dctrain
