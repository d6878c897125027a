// The compute side of a worker: its training data, its replica and the
// compute loop. It takes the coordinator's welcome, plans, updates and bye
// in arrival order and answers each with what the worker sends back (a
// Ready, a contribution) or, at the end, with the worker's exit status. In
// the process it runs on the compute thread (worker/compute_thread.h); tests
// call it directly.
#pragma once

#include <spdlog/logger.h>

#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "comm/message.h"
#include "comm/validation.h"
#include "data/dataset.h"
#include "model/model.h"
#include "proto/config.pb.h"
#include "runtime/replica.h"
#include "worker/compute_loop.h"
#include "worker/data_plane.h"
#include "worker/delay_model.h"
#include "worker/options.h"
#include "worker/worker_clock.h"

namespace dctrain {

// A message from the coordinator for the compute side, with the time it
// arrived on the worker's clock.
struct ComputeJob {
  Message message;
  double received = 0.0;
};

// The compute side is finished: the worker exits with `exit_code`
// (worker/exit_codes.h).
struct ComputeStatus {
  int exit_code = 0;
};

// What the compute side hands back: a message for the coordinator, or its
// final status. Typed, so that no message is ever taken for a status.
using ComputeOutput = std::variant<Message, ComputeStatus>;

// Where the session hands the compute side its jobs, in arrival order: the
// compute thread's queue in the process, a recorder in tests.
class ComputeQueue {
 public:
  virtual ~ComputeQueue() = default;
  virtual void push(ComputeJob job) = 0;
};

// How a trainer gets its training set and builds its model for a run
// config. The process's (process_parts) read the worker's --data-dir and
// build the run's model; a test may hand in its own dataset and model.
struct TrainerParts {
  std::function<std::unique_ptr<Dataset>(const v1::RunConfig&)> open_train;
  std::function<std::unique_ptr<Model>(const v1::RunConfig&, const Dataset& train)> make_model;
};

TrainerParts process_parts(const WorkerOptions& options);

class Trainer {
 public:
  // `options` gives the worker's name (the sender of what it sends) and
  // whether it has a data root; `clock` is the compute loop's.
  Trainer(WorkerOptions options, TrainerParts parts, WorkerClock& clock,
          std::shared_ptr<spdlog::logger> log);

  // Takes one job; returns what to hand back, in order. A failure is logged
  // and answered with an error for the coordinator and ComputeStatus
  // kWorkerFailed; after any status the trainer takes no further job.
  std::vector<ComputeOutput> handle(ComputeJob job);

  // Data plane "exchange": the worker's peer (owned by the caller, outliving
  // the trainer). Without it, plans that name an exchange round fail.
  void set_data_plane(WorkerDataPlane* data_plane) { data_plane_ = data_plane; }

  bool finished() const { return finished_; }
  // Told of every plan as it arrives, by the thread that receives it (safe
  // while a job runs): see LatestPlan.
  LatestPlan& latest_plan() { return latest_plan_; }
  // The replica, once welcomed (null before).
  Replica* replica() { return replica_.get(); }

 private:
  std::vector<ComputeOutput> dispatch(ComputeJob& job);
  Message on_welcome(const Message& welcome);
  std::vector<ComputeOutput> on_plan(const ComputeJob& job);
  void on_update(const Message& update);
  // Policy "async": the plan's parameters and buffers into the replica,
  // checked against the plan's checksum.
  void take_parameters(const Message& plan);
  ComputeStatus on_bye(const v1::Bye& bye);
  // Data plane "exchange" (worker/trainer_exchange.cc): compute, sum with
  // the round's members, report; the sum waits for the coordinator's commit.
  std::vector<ComputeOutput> on_exchange_plan(const ComputeJob& job);
  // One round over the held contribution: the first after the compute, or a
  // redo (attempt > 0) among the members left after a failed one. Appends
  // the report to `out`, and the round's sum after it from the lowest member.
  void exchange_round(const ComputeJob& job, std::vector<ComputeOutput>& out);
  void on_commit(const Message& commit);
  // The coordinator asks for a committed round's sum: the lowest member's
  // did not reach it.
  Message on_sum_request(const Message& request);
  // The coordinator's check of the round before its commit: the tags of the
  // sum held (exchange/sum_digest.h) and the sketch of the contribution
  // held (exchange/sum_sketch.h), as asked, or an error when it holds
  // neither.
  Message on_round_check_request(const Message& request);
  // The held round's sum as an ExchangeSum, its frames over exchange_sum_.
  Message sum_message(uint64_t step, uint32_t attempt);
  // exchange_sum_, sized to `floats`, to be written: a fresh buffer while
  // ZeroMQ may still read the last one's forwarded frames.
  std::vector<float>& writable_sum(size_t floats);

  WorkerOptions options_;
  TrainerParts parts_;
  WorkerClock& clock_;
  std::shared_ptr<spdlog::logger> log_;
  bool finished_ = false;
  v1::RunConfig config_;
  uint32_t rank_ = 0;
  std::string data_key_;
  std::unique_ptr<Dataset> train_;
  std::unique_ptr<Replica> replica_;
  std::unique_ptr<DelayModel> delays_;
  LatestPlan latest_plan_;
  std::unique_ptr<ComputeLoop> loop_;
  std::vector<TensorSpec> expected_;
  WorkerDataPlane* data_plane_ = nullptr;
  // Data plane "exchange": the step's contribution as computed, kept until
  // the commit, so that a failed round is redone without computing again.
  struct HeldContribution {
    uint64_t step = 0;
    v1::Envelope envelope;          // the contribution (no tensors), before its report
    std::span<const float> values;  // [gradient | statistics]
  };
  std::optional<HeldContribution> held_;
  std::vector<float> exchange_values_;  // [gradient | statistics] when the model has statistics
  // The gradient as computed, when the model has no statistics: traded for
  // the arena's buffer (Arena::swap_storage), which is zeroed for the next
  // step while this one is held.
  std::vector<float> held_gradient_;
  // Data plane "exchange": the arenas zeroed for the next step on a thread
  // of their own, beside the round and the commit's update, which use other
  // buffers; when it was asked for, and its begin and end, on the worker's
  // clock. Joined before anything uses the arenas again (the next compute,
  // a whole update, a welcome).
  struct ZeroingSpan {
    double asked, begin, end;
  };
  std::future<ZeroingSpan> zeroing_;
  void start_zeroing();
  void finish_zeroing();
  // The round's sum, [gradient | statistics]; shared with the frames that
  // forward it to the coordinator until ZeroMQ has sent them.
  std::shared_ptr<std::vector<float>> exchange_sum_;
  // The round whose sum exchange_sum_ holds, past its commit until the next
  // round writes it (the coordinator may ask for it: on_sum_request),
  // whether its commit came, and whether it is still as summed (a run that
  // clips averages it in place).
  struct SummedRound {
    uint64_t step = 0;
    uint32_t attempt = 0;
    bool committed = false;
    bool as_summed = true;
  };
  std::optional<SummedRound> summed_;
  std::vector<float> averaged_statistics_;  // the commit's, beside the sum
};

}  // namespace dctrain
