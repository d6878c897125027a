// The Coordinator's state and phases, behind coordinator/coordinator.h's
// contract. The phases, each in its own file:
//
//   coordinator.cc           construction, the contract's calls
//   coordinator_messages.cc  accept: decode, version, sender; hello, bye,
//                            ready, contribution; bad messages, refused
//                            hellos, lost connections
//   coordinator_steps.cc     plan, collect, settle, apply, record a step;
//                            who leaves a step (remove), misses and release;
//                            the threshold
//   coordinator_observe.cc   evaluations off the step loop, live metrics
//   coordinator_run.cc       evaluation, checkpoints, stop criteria, the end
//                            of the run; tick()'s liveness and progress
//   coordinator_async.cc     policy "async": plans as the staleness bound
//                            admits them, each contribution a step
//
// Where the star and the exchange differ, the phases call the data plane
// (coordinator/planes/data_plane.h: star_plane.h, exchange_plane.h), which sees
// this class only as its PlaneHost (coordinator/planes/plane_host.h).
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "comm/message.h"
#include "coordinator/coordinator.h"
#include "coordinator/evaluation_thread.h"
#include "coordinator/evaluations.h"
#include "coordinator/evaluator.h"
#include "coordinator/exit_codes.h"
#include "coordinator/ledger.h"
#include "coordinator/live_metrics.h"
#include "coordinator/planes/data_plane.h"
#include "coordinator/planes/plane_host.h"
#include "coordinator/planner.h"
#include "coordinator/run_metrics.h"
#include "coordinator/speed_planner.h"
#include "coordinator/step/async_flights.h"
#include "coordinator/step/membership.h"
#include "coordinator/step/peer_limits.h"
#include "coordinator/step/step_book.h"
#include "coordinator/step/update_guard.h"
#include "coordinator/threshold.h"
#include "coordinator/worker_summary.h"
#include "model/lr_schedule.h"
#include "proto/checkpoint.pb.h"
#include "proto/config.pb.h"
#include "runtime/checkpoint.h"
#include "runtime/replica.h"
#include "trace/timeline.h"

namespace dctrain {

class CoordinatorImpl : private PlaneHost {
 public:
  // The contract's calls, as coordinator.h describes them.
  CoordinatorImpl(CoordinatorSetup setup, Replica& replica, Evaluator* evaluator, Outbox& outbox,
                  std::shared_ptr<spdlog::logger> log, CoordinatorClock clock);
  void handle(Received message, double now);
  void tick(double now);
  void on_disconnected(const std::string& peer, double now);
  void stop(const std::string& reason, int exit_code, double now);
  bool finished() const { return phase_ == Phase::kFinished; }
  int exit_code() const { return exit_code_; }
  const std::string& stop_reason() const { return stop_reason_; }
  uint64_t step() const override { return step_; }
  const Ledger& ledger() const { return ledger_; }
  const v1::RunTotals& totals() const { return metrics_.totals(); }
  double tau() const { return threshold_.tau(); }
  double epochs() const;

 private:
  enum class Phase { kJoining, kStepping, kWaiting, kFinished };

  // What the data plane may read and ask (coordinator/planes/plane_host.h).
  bool stepping() const override { return phase_ == Phase::kStepping; }
  uint64_t start_checksum() const override { return start_checksum_; }
  double deadline() const override { return deadline_; }
  void set_deadline(double deadline) override { deadline_ = deadline; }
  PlaneRooms plane_rooms();

  void dispatch(Received message, double now);
  void on_hello(const Received& from, const Message& message, double now);
  void on_contribution(const std::string& peer, Message message, double now);
  // What is wrong with a contribution against what its sender was planned
  // (`p`), if anything: its tensors, its micro-batches, its totals.
  std::optional<std::string> contribution_problem(const Planned& p, const Message& message) const;
  void on_bye(const std::string& peer, const Message& message, double now);
  void on_ready(const std::string& peer, double now);
  // The data plane's own messages (ExchangeSum, RoundCheckAnswer), from a
  // live member.
  void on_plane_message(const std::string& peer, Message message, double now);

  void welcome(uint32_t rank);
  void refuse(const std::string& peer, const std::string& reason);
  void ask_to_rejoin(const std::string& peer, const std::string& why);
  // Takes a worker out of the open step (coordinator/step/step_book.h), once:
  // its contribution, if any, is dropped, the step no longer waits for it,
  // and its micro-batches are requeued (lost with step.requeue false). A
  // lost worker is logged with `why`; the other removals are logged by
  // their caller.
  void remove(uint32_t rank, Removal removal, const std::string& why) override;
  // remove(rank, Removal::kLost, why) while the step still waits for the
  // worker's contribution or report; nothing once it arrived.
  void lose_if_awaited(uint32_t rank, const std::string& why);
  // The open step is dropped for the worker through no fault of its own
  // (the exchange's rounds are spent, or its round failed for all): the
  // step no longer waits for it, what it reported is dropped, and its
  // micro-batches are requeued (lost without requeue); no missed step.
  void drop_from_step(uint32_t rank) override;
  // The worker is presumed dead (it left, died, restarted, went silent, or
  // was released): out of the open step if the step waits for it
  // (lose_if_awaited), and its slot free; heard again, it is asked to say
  // hello. The caller logs why.
  void declare_dead(uint32_t rank, const std::string& why) override;
  // Logs the workers that became or stopped being standbys (rebalance).
  void log_standby(const StepShares& shares);
  // Whether a member missed liveness.release_after_missed_steps steps in a
  // row, or failed liveness.release_after_failed_rounds exchange rounds.
  bool missed_too_many(const Member& m) const;
  // Releases a worker that missed too many steps in a row (`why`, for the
  // log and its bye): its slot is freed (a restarted worker may take it)
  // and it is told to leave.
  void release(uint32_t rank, const std::string& why) override;
  void start_step(double now);
  // The plan message of `plan` at the open step under `tau`, its entry `p`
  // filled in.
  Message plan_message(const WorkerPlan& plan, Planned& p, double tau);
  // A step is open and nothing more is awaited (never under policy
  // "async", whose steps close as their contribution lands).
  bool step_all_in() const { return phase_ == Phase::kStepping && !async() && plane_->all_in(); }

  // Policy "async" (coordinator_async.cc, coordinator/step/async_flights.h).
  bool async() const { return flights_.has_value(); }
  // A plan with the replica's parameters to each ready worker without one,
  // while the staleness bound admits it.
  void send_async_plans(double now);
  // A contribution lands: a step of its own, closed at once.
  void on_async_contribution(uint32_t rank, Message message, double now);
  // The flight of `rank` ends without its contribution (`why`, for the
  // log): its micro-batches are requeued (lost without requeue).
  void lose_flight(uint32_t rank, const std::string& why);
  // Flights past their deadline are lost.
  void tick_flights(double now);
  // Starts a step once the workers are ready (all of them to begin the
  // run; any one after every worker was lost); true when it did.
  bool start_when_ready(double now);
  void close_step(double now) override;
  // The data plane's pending update into the replica (DataPlane::apply_pending).
  void apply_pending();
  // The contributions of the closed step into the ledger and its record.
  ClosedStep settle_step();
  // A bad message: counted, and logged within the peer's bounds.
  void bad_message(const std::string& peer, const std::string& line, double now);
  // A hello refused with `reason`: answered within the bounds on refused peers.
  void refuse_hello(const std::string& peer, const std::string& line, const std::string& reason,
                    double now);
  void count_step(const v1::StepRecord& record);
  // Consecutive misses per worker; releases those past the limit.
  void track_misses(const v1::StepRecord& record);
  // Feeds a closed step to the threshold; logs and records its estimates.
  void observe_threshold(const ClosedStep& closed, double now);
  void record_estimate(const ThresholdDecision& d, double now);
  void record_trial_end(const ThresholdDecision& d, double now);
  void note_tau_change(double tau);
  // The checkpoint of the state now, written to checkpoint.bin.tmp and
  // synced; put in place by the caller once the records it covers are
  // durable (close_step, finish). None without a run folder.
  std::optional<PendingFile> write_checkpoint(double now);
  // The records so far made durable, then `checkpoint` put in place.
  void put_checkpoint_in_place(PendingFile& checkpoint);
  // The trained model as RUN_DIR/model.safetensors (runtime/model_file.h),
  // at the end of a completed run.
  void write_model_files();
  // A write to the run folder failed (`what` says which and why): the run
  // stops with kCoordinatorRunFolderFailed, as cleanly as it can.
  void run_folder_failed(const std::string& what, double now);
  // Evaluations (coordinator_observe.cc), wherever they run
  // (coordinator/evaluations.h). Starts one of the replica as it is now,
  // after waiting for the previous one if it still runs; returns the seconds
  // the step loop spent (all of it when evaluations run in the step loop,
  // then recorded at once).
  double request_evaluation(double now);
  // Records a finished evaluation, if any (true then); `wait`: waits for a
  // running one.
  bool collect_evaluation(bool wait, double now);
  void record_evaluation(const EvaluationResult& result, double now);
  // Resuming: adopts an evaluation recorded after the checkpoint was
  // written, or evaluates the restored replica if one was due at its step.
  void resume_evaluations(double now);
  // Hands a snapshot of the live metrics to setup_.publish_metrics.
  void publish_live(double now);
  // Says at the start whether the norm guard is on, and why not.
  void log_norm_guard() const;
  std::optional<std::string> stop_reached(double now) const;
  void finish(std::string reason, int exit_code, double now);
  // tick()'s and on_disconnected()'s work; those stop the run when it
  // throws FileWriteError.
  void advance(double now);
  void declare_disconnected(const std::string& peer, double now);
  void progress(double now);
  void send(const std::string& peer, Message message) override;
  double wall(double now) const { return wall_offset_ + (now - run_started_); }
  // The divisor of the step's gradient sum (normalization, short steps).
  double step_divisor(const ClosedStep& closed) const override;
  // The learning rate of the open step's update: the outer optimizer's
  // under local-sgd.
  double step_learning_rate() const override;
  // The schedule's rate for the open step's gradient steps (local-sgd: the
  // workers' local steps).
  double inner_learning_rate() const;
  // Gradient steps per step of the run: step.local_steps under local-sgd, else 1.
  uint32_t local_steps() const;

  CoordinatorSetup setup_;
  const v1::RunConfig& config_;
  Replica& replica_;
  // Where evaluations run: setup_.evaluation_thread, else inline_evaluations_
  // over the evaluator given (null without one).
  std::optional<InlineEvaluations> inline_evaluations_;
  Evaluations* evaluations_ = nullptr;
  Outbox& outbox_;
  std::shared_ptr<spdlog::logger> log_;
  CoordinatorClock clock_;
  LrScheduleSpec schedule_;  // the run's, in the units of its clock

  Membership membership_;
  Ledger ledger_;
  RunMetrics metrics_;
  Threshold threshold_;
  std::unique_ptr<DataPlane> plane_;  // config_.data_plane().kind()'s
  WorkerSummary worker_summary_;
  Timeline timeline_;  // trace.json (trace/timeline.h)
  UpdateGuard guard_;
  PeerLog peer_log_;
  SpeedPlanner speed_planner_;
  std::optional<StepShares> shares_;  // the open step's, when speed-aware
  std::optional<AsyncFlights> flights_;  // policy "async" only
  uint64_t staleness_ = 0;               // policy "async": the landing contribution's

  bool needs_data_root_ = false;
  Phase phase_ = Phase::kJoining;
  int exit_code_ = 0;
  std::string stop_reason_;
  uint64_t step_ = 0;  // the open step, or the next to open
  double created_ = 0.0;
  double run_started_ = 0.0;  // the first step's start
  double wall_offset_ = 0.0;  // training time of earlier processes (resume)
  double waiting_since_ = 0.0;
  double step_started_ = 0.0;
  double deadline_ = 0.0;
  double last_heartbeat_ = 0.0;
  double last_progress_ = 0.0;
  uint64_t progress_samples_ = 0;
  uint64_t start_checksum_ = 0;
  uint64_t epoch_samples_ = 0;  // settled (done or lost) in the current epoch
  StepBook planned_;
  double last_loss_ = 0.0;
  double recent_step_seconds_ = 0.0;
  LiveMetrics live_metrics_;
  uint64_t evaluations_finished_ = 0;  // finished since this process started
};

}  // namespace dctrain
