// The Coordinator's state and phases, behind coordinator/coordinator.h's
// contract. The phases, each in its own file:
//
//   coordinator.cc           construction, the contract's calls
//   coordinator_messages.cc  accept: decode, version, sender; hello, bye,
//                            ready, contribution
//   coordinator_steps.cc     plan, collect, settle, apply, record a step;
//                            misses and release; the threshold
//   coordinator_guard.cc     the star's guards before a step settles
//   exchange_steps.cc        the exchange data plane's rounds: plan, collect
//                            the members' reports, judge, redo or settle
//   exchange_commit.cc       the exchange's commit, its forwarded sum, and
//                            the sum's apply to the replica
//   exchange_norm_guard.cc   the exchange's norm guard (sketches)
//   coordinator_observe.cc   evaluations off the step loop, live metrics
//   coordinator_run.cc       evaluation, checkpoints, stop criteria, the end
//                            of the run; tick()'s liveness and progress
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
#include "coordinator/checkpoint.h"
#include "coordinator/coordinator.h"
#include "coordinator/evaluation_thread.h"
#include "coordinator/evaluations.h"
#include "coordinator/evaluator.h"
#include "coordinator/exit_codes.h"
#include "coordinator/ledger.h"
#include "coordinator/live_metrics.h"
#include "coordinator/membership.h"
#include "coordinator/peer_limits.h"
#include "coordinator/planner.h"
#include "coordinator/reducer.h"
#include "coordinator/round_deadline.h"
#include "coordinator/run_metrics.h"
#include "coordinator/sketch_check.h"
#include "coordinator/speed_planner.h"
#include "coordinator/step_book.h"
#include "coordinator/threshold.h"
#include "coordinator/update_guard.h"
#include "coordinator/worker_summary.h"
#include "model/lr_schedule.h"
#include "proto/checkpoint.pb.h"
#include "proto/config.pb.h"
#include "runtime/replica.h"
#include "trace/timeline.h"

namespace dctrain {

class CoordinatorImpl {
 public:
  // The contract's calls, as coordinator.h describes them.
  CoordinatorImpl(CoordinatorSetup setup, Replica& replica, Evaluator* evaluator, Outbox& outbox,
                  std::shared_ptr<spdlog::logger> log, CoordinatorClock clock);
  void handle(Received message, double now);
  void tick(double now);
  void on_disconnected(const std::string& peer, double now);  // coordinator_guard.cc
  void stop(const std::string& reason, int exit_code, double now);
  bool finished() const { return phase_ == Phase::kFinished; }
  int exit_code() const { return exit_code_; }
  const std::string& stop_reason() const { return stop_reason_; }
  uint64_t step() const { return step_; }
  const Ledger& ledger() const { return ledger_; }
  const v1::RunTotals& totals() const { return metrics_.totals(); }
  double tau() const { return threshold_.tau(); }
  double epochs() const;

 private:
  enum class Phase { kJoining, kStepping, kWaiting, kFinished };

  void dispatch(Received message, double now);
  void on_hello(const Received& from, const Message& message, double now);
  void on_contribution(const std::string& peer, Message message, double now);
  void on_bye(const std::string& peer, const Message& message, double now);
  void on_ready(const std::string& peer, double now);
  // Data plane "exchange": a round's sum from one of its members
  // (coordinator/exchange_steps.cc).
  void on_exchange_sum(const std::string& peer, Message message, double now);

  void welcome(uint32_t rank);
  void refuse(const std::string& peer, const std::string& reason);
  void ask_to_rejoin(const std::string& peer, const std::string& why);
  // Takes a worker out of the open step (coordinator/step_book.h), once:
  // its contribution, if any, is dropped, the step no longer waits for it,
  // and its micro-batches are requeued (lost with step.requeue false). A
  // lost worker is logged with `why`; the other removals are logged by
  // their caller.
  void remove(uint32_t rank, Removal removal, const std::string& why);
  // remove(rank, Removal::kLost, why) while the step still waits for the
  // worker's contribution or report; nothing once it arrived.
  void lose_if_awaited(uint32_t rank, const std::string& why);
  // Policy "backup": once N - b contributions are in, the others are cut
  // from the step (their micro-batches requeued).
  void cut_backup_workers();
  // Logs the workers that became or stopped being standbys (rebalance).
  void log_standby(const StepShares& shares);
  // Whether a member missed liveness.release_after_missed_steps steps in a
  // row, or failed liveness.release_after_failed_rounds exchange rounds.
  bool missed_too_many(const Member& m) const;
  // Releases a worker that missed too many steps in a row (`why`, for the
  // log and its bye): its slot is freed (a restarted worker may take it)
  // and it is told to leave.
  void release(uint32_t rank, const std::string& why);
  void start_step(double now);
  // Starts a step once the workers are ready (all of them to begin the
  // run; any one after every worker was lost); true when it did.
  bool start_when_ready(double now);
  void close_step(double now);
  // The contributions of the closed step into the ledger and its record.
  ClosedStep settle_step();
  // The reduce, the update to every live replica and the coordinator's own.
  void reduce_and_apply(ClosedStep& closed, uint64_t planned_samples);
  // The guard before the step settles (coordinator_guard.cc): the norm
  // guard, then the reduced update's check; a refused contribution or a
  // discarded step has its micro-batches requeued.
  GuardedStep guard_step();
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
  // The checkpoint of the state now, written to checkpoint.bin.tmp and
  // synced; put in place by the caller once the records it covers are
  // durable (close_step, finish). None without a run folder.
  std::optional<PendingFile> write_checkpoint(double now);
  // The records so far made durable, then `checkpoint` put in place.
  void put_checkpoint_in_place(PendingFile& checkpoint);
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
  std::optional<std::string> stop_reached(double now) const;
  void finish(std::string reason, int exit_code, double now);
  // tick()'s and on_disconnected()'s work; those stop the run when it
  // throws FileWriteError.
  void advance(double now);
  void declare_disconnected(const std::string& peer, double now);
  void progress(double now);
  void send(const std::string& peer, Message message);
  double wall(double now) const { return wall_offset_ + (now - run_started_); }
  // The divisor of the step's gradient sum (normalization, short steps).
  double step_divisor(const ClosedStep& closed, uint64_t planned_samples) const;

  // Data plane "exchange" (coordinator/exchange_steps.cc): the workers sum
  // their gradients among themselves; the coordinator names each round's
  // members, collects their reports, commits or drops the round for all on
  // the reports alone, and applies the sum that one member sends after its
  // report once the commit and the next plans are out.
  bool exchange_mode() const { return config_.data_plane().kind() == v1::DATA_PLANE_EXCHANGE; }
  std::optional<std::string> exchange_hello_problem(const v1::Hello& hello) const;
  // The round of `ranks` under `attempt` (0: the step's first round, after
  // the compute; above: a redo among the members left, on what they computed).
  void plan_exchange(v1::Plan& plan, std::vector<uint32_t> ranks, uint32_t attempt) const;
  double exchange_deadline(double now, double tau) const;
  // What is wrong with a member's report of its round, if anything: no
  // exchange report, tensors (the sum comes on its own), or ranks it names
  // (suspects, missing contributions and sums) that are not other members
  // of the round, named twice, or more than the round has.
  std::optional<std::string> exchange_report_problem(const Message& report) const;
  // A member's report of the round. A failed one names whom it blames; the
  // blame is weighed once every member has reported (judge_exchange_round)
  // or the data plane's timeout has passed since the first failed report.
  void accept_exchange_report(uint32_t rank, Message report, double now);
  // The members of a round that have not reported by silent_after_: out
  // of the step, presumed dead, each a failed round (strike()).
  void take_out_silent_members(double now);
  // Once the round is overdue (the round deadline after its first report,
  // from a member that heard from every other; the data plane's timeout
  // after a first report that did not), the members that have not
  // reported are told to end the round and report what they have
  // (ExchangeCancel); those that cannot answer within the round deadline
  // are taken out by take_out_silent_members().
  void cancel_overdue_members(double now);
  // A member of the open step that has not reported and whose control plane
  // is silent for 3 heartbeats (a stopped process) is presumed dead then,
  // not after liveness.silence_seconds: a round waits on it.
  void take_out_stopped_members(double now);
  // When a member of the round in flight is out of the step (it died, left,
  // went silent, was rejected) while others still wait in the round for its
  // pieces: the round is ended at once, redone among the members left on
  // what they computed (their plans of the next attempt end the old one),
  // or, with no rounds left, the step is dropped.
  void end_round_without_lost_members(double now);
  // A member failed a round by its own fault: counted (Member::
  // failed_rounds_in_a_row), and released at the limit.
  void strike(uint32_t rank, const std::string& why);
  // A committed round's round times into the round deadline.
  void observe_round();
  // Once every member of a failed round reported or is out: takes out the
  // members coordinator/exchange_blame.h judges at fault, before the redo.
  void judge_exchange_round();
  // Before settle_step(): a round that did not succeed on every member is
  // dropped, every micro-batch of the step requeued.
  // Drops the step unless every member's round succeeded; discarded (as the
  // star guard discards) when a member found the sum unusable.
  GuardedStep settle_exchange();
  // Every member of the current round reported it ok, the lowest saying
  // that its sum follows.
  bool exchange_reports_ok() const;
  // That, and the sum is here (or no member computed a sample: nothing to
  // apply, no sum needed).
  bool exchange_succeeded() const;
  // When the round's reports are ok and its sum is not here yet: sends the
  // commit to the members (once), and returns true while the step waits for
  // the sum; false when the step can close (the sum is here, nothing is to
  // be applied, or no member is left to send the sum).
  bool commit_ahead_of_sum(double now);
  // A member's forwarded sum whose digests are not those its report gave
  // (then not those of the sum every member holds): why, after striking it.
  std::optional<std::string> forwarded_sum_problem(uint32_t rank, const Message& sum);
  // Every member reported the round ok but their digests of the sum
  // disagree: takes out the owners of the shards they disagree on and the
  // members that differ from them, and redoes the round (true), or leaves
  // the step to be dropped (false, also when they agree).
  bool refuse_disagreeing_sums(double now);
  // The norm guard on the exchange (guard.norm_multiple, sum checks on, at
  // least 3 members, as the star's needs): on for this round.
  bool sketch_guard_on() const;
  // Once every member reported the round ok and their digests agree: asks
  // them for sketches of their contributions (once), and with the sketches
  // and the sum in, takes out the members whose contribution the guard
  // refuses and redoes the round without them (coordinator/sketch_check.h).
  // True while the step waits for it, or when it redid the round; false
  // when the round may be committed (or the guard is off).
  bool check_contribution_norms(double now);
  // Removes the members named (`out`: rank -> why) and redoes the round
  // without them (true), or leaves the step to be dropped (false).
  bool redo_without(double now, Removal removal, const std::map<uint32_t, std::string>& out,
                    const std::string& why);
  void on_contribution_sketch(const std::string& peer, const Message& message, double now);
  // The committed round's sum not received from the member it was awaited
  // from, which died or let the data plane's timeout pass: asks the next.
  void chase_committed_sum(double now);
  // Asks the next member of the committed round that has not failed to send
  // its sum; with none left, the sum is lost (the step is dropped and the
  // members that applied it get the coordinator's state).
  void ask_next_for_sum(double now);
  // The commit of the current round: the divisors, the rate and whether
  // anything is applied, from the members' reports.
  v1::Update exchange_commit() const;
  // The learning rate of the open step's update.
  double step_learning_rate() const;
  // A member found the exchanged sum unusable (NaN, infinite, too large).
  bool exchange_sum_unusable() const;
  // When the round failed but members are left who reported, and the step
  // has rounds left (data_plane.rounds_per_step): plans the round again
  // among them under the next attempt and returns true; the step stays open.
  bool redo_exchange(double now);
  // Plans the round again among `members` under the next attempt, if the
  // step has rounds left (false otherwise).
  bool plan_next_attempt(double now, std::vector<uint32_t> members, const std::string& why);
  // The same among the members that reported and are still in the step and
  // alive (false: no rounds left, and close_step() goes on to drop the step).
  bool redo_among_the_rest(double now, const std::string& why);
  // The commit to the members (unless it went out ahead of the sum), the
  // whole update to a live worker outside the round, and the sum kept for
  // apply_pending().
  void commit_exchange(ClosedStep& closed);
  // The committed sum into the coordinator's replica, if not done yet.
  void apply_pending();
  // The pending sum into the reducer, checked: false when it is not usable
  // (then nothing is applied, and the workers resync to this replica).
  bool take_pending_sum();

  struct PendingApply {
    double divisor = 0.0;
    double statistics_divisor = 0.0;
    double lr = 0.0;
    uint64_t step = 0;           // the committed step (step_ moves on before the apply)
    std::optional<Message> sum;  // the lowest member's report, until take_pending_sum()
    bool usable = true;
    bool divided = false;
  };
  // A round committed on its reports, before its sum arrived.
  struct CommittedAhead {
    v1::Update commit;          // as the members got it
    uint32_t source = 0;        // the member the sum is awaited from
    double asked_at = 0.0;      // since when (the commit, or the request)
    std::set<uint32_t> failed;  // members that did not send it
    bool lost = false;          // no member left to send it
  };
  std::map<uint32_t, std::string> exchange_endpoints_;  // rank -> its hello's endpoint
  std::map<uint32_t, std::string> exchange_tokens_;     // rank -> its hello's exchange token
  std::optional<Message> exchange_sum_;  // the round's sum (an ExchangeSum), once it arrived
  std::optional<CommittedAhead> committed_ahead_;
  // Members of the current round whose forwarded sum was refused (its
  // digests were not the round's): the commit asks the next member at once.
  std::set<uint32_t> refused_sums_;
  // The exchange's norm guard on the current round (sketch_check.h), from
  // the request until the round is judged; passed once it let the round be
  // committed.
  std::optional<SketchCheck> sketch_check_;
  bool sketch_check_passed_ = false;
  uint32_t refused_norm_in_step_ = 0;  // contributions the norm guard took out, all rounds
  std::optional<PendingApply> pending_apply_;
  // This process's start (Unix microseconds): the `run` of its exchange
  // rounds, later than any earlier process's of the same run.
  uint64_t exchange_run_ = 0;
  uint32_t exchange_attempt_ = 0;  // the current step's round: 0, or the redo's number
  // When the members of the current round that have not reported are told
  // to end it (cancel_overdue_members), from its first report.
  std::optional<double> overdue_at_;
  // Once they were told: when those that still have not reported are taken
  // out (take_out_silent_members).
  std::optional<double> silent_after_;
  std::vector<uint32_t> exchange_members_;  // the current round's, ascending

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
  Reducer reducer_;
  RunMetrics metrics_;
  Threshold threshold_;
  WorkerSummary worker_summary_;
  Timeline timeline_;  // trace.json (trace/timeline.h)
  UpdateGuard guard_;
  PeerLog peer_log_;
  SpeedPlanner speed_planner_;
  RoundDeadline round_deadline_;      // the exchange's, from measured rounds
  std::optional<StepShares> shares_;  // the open step's, when speed-aware

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
  std::map<uint32_t, Planned> planned_;
  double last_loss_ = 0.0;
  double recent_step_seconds_ = 0.0;
  LiveMetrics live_metrics_;
  uint64_t evaluations_finished_ = 0;  // finished since this process started
};

}  // namespace dctrain
