// A step's phases: plan (start_step), collect (the deadline and the backup
// cut), settle (the ledger, the guards), apply (the reduce and the update),
// record (totals, misses and release, the threshold).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "coordinator/coordinator_impl.h"
#include "runtime/checkpoint.h"
#include "runtime/setup.h"
#include "runtime/text_format.h"

namespace dctrain {

// ------------------------------------------------------------------- steps

void CoordinatorImpl::lose_if_awaited(uint32_t rank, const std::string& why) {
  if (plane_->awaits(rank)) remove(rank, Removal::kLost, why);
}

void CoordinatorImpl::drop_from_step(uint32_t rank) {
  plane_->forget(rank);  // nothing once it settled
  planned_.drop(rank);
  ledger_.orphan_worker(rank);
}

void CoordinatorImpl::declare_dead(uint32_t rank, const std::string& why) {
  if (async()) lose_flight(rank, why);
  if (stepping()) lose_if_awaited(rank, why);
  membership_.mark_dead(rank);
}

void CoordinatorImpl::remove(uint32_t rank, Removal removal, const std::string& why) {
  if (!planned_.take_out(rank, removal)) return;
  const Planned& p = planned_.at(rank);
  plane_->forget(rank);  // nothing to forget once it has reported
  ledger_.orphan_worker(rank);
  log_->log(removal == Removal::kLost ? spdlog::level::warn : spdlog::level::debug,
            "worker '{}' (rank {}) is out of step {} because {}; its {} micro-batches ({} "
            "samples) are {}",
            membership_.at(rank).name, rank, step_, why, p.micro_batches.size(), p.samples,
            config_.step().requeue() ? "requeued" : "lost");
}

void CoordinatorImpl::start_step(double now) {
  std::vector<uint32_t> ranks = membership_.ready_ranks();
  if (ranks.empty() && (!async() || flights_->empty())) {
    if (phase_ != Phase::kWaiting && membership_.live_count() == 0) {
      log_->warn("no live worker left; waiting up to {:.0f} s for one to join",
                 config_.liveness().join_timeout_seconds());
      waiting_since_ = now;
    }
    phase_ = Phase::kWaiting;
    return;
  }
  if (phase_ != Phase::kStepping && step_ == (setup_.resume ? setup_.resume->next_step() : 0)) {
    run_started_ = now;
    last_progress_ = now;
  }
  if (async()) {
    phase_ = Phase::kStepping;
    send_async_plans(now);
    return;
  }
  std::vector<WorkerPlan> plans;
  for (int attempt = 0; attempt < 2; ++attempt) {
    PolicyPlans planned = plan_for_policy(config_.step().policy(), speed_planner_, ledger_, ranks,
                                          step_, config_.step().global_batch() * local_steps(),
                                          config_.step().micro_batch());
    plans = std::move(planned.plans);
    shares_ = std::move(planned.shares);
    uint64_t total = 0;
    for (const WorkerPlan& p : plans) total += p.micro_batches.size();
    if (total > 0 || !ledger_.epoch_complete()) break;
    ledger_.start_next_epoch();
    epoch_samples_ = 0;
  }
  if (shares_) log_standby(*shares_);
  planned_.clear();
  // The planned ranks, ascending: the reducer's and the exchange round's.
  std::vector<uint32_t> planned;
  for (const WorkerPlan& plan : plans) planned.push_back(plan.rank);
  std::sort(planned.begin(), planned.end());
  const double tau = threshold_.tau();
  plane_->open_step(planned, now, tau);
  for (const WorkerPlan& plan : plans) {
    Message m = plan_message(plan, planned_.plan(plan.rank), tau);
    plane_->add_to_plan(*m.envelope.mutable_plan());
    timeline_.plan(step_, *m.envelope.mutable_plan(), clock_());
    send(membership_.at(plan.rank).name, std::move(m));
  }
  timeline_.span("plan", now, clock_());
  phase_ = Phase::kStepping;
  step_started_ = now;
  worker_summary_.step_started(step_, now);
  deadline_ = plane_->deadline(now, tau);
}

Message CoordinatorImpl::plan_message(const WorkerPlan& plan, Planned& p, double tau) {
  Message m;
  m.envelope = make_envelope(step_, kCoordinatorName);
  v1::Plan& body = *m.envelope.mutable_plan();
  body.set_tau(tau);
  body.set_parameter_checksum(start_checksum_);
  if (config_.step().policy() == v1::POLICY_LOCAL_SGD) {
    body.mutable_local()->set_steps(local_steps());
    body.mutable_local()->set_learning_rate(inner_learning_rate());
  }
  for (const PlannedMicroBatch& mb : plan.micro_batches) {
    p.micro_batches.insert(mb.id);
    p.sizes[mb.id] = mb.samples.size();
    p.samples += mb.samples.size();
    v1::MicroBatch& out = *body.add_micro_batches();
    out.set_id(mb.id);
    out.set_epoch(mb.epoch);
    out.mutable_samples()->Assign(mb.samples.begin(), mb.samples.end());
  }
  return m;
}

void CoordinatorImpl::close_step(double now) {
  if (plane_->hold_open(now)) return;
  timeline_.span("step", step_started_, now);
  const GuardedStep guarded = plane_->settle();
  ClosedStep closed = settle_step();
  v1::StepRecord& record = closed.record;
  record.set_discarded(guarded.discarded);
  record.set_refused_norm(guarded.refused_norm);
  record.set_step_seconds(now - step_started_);
  plane_->record(record);
  record_shares(shares_, record, closed.planned);
  record.set_policy(word(config_.step().policy()));
  if (async()) record.set_staleness(static_cast<uint32_t>(staleness_));
  observe_step(speed_planner_, record);
  record.set_lr(step_learning_rate());
  if (config_.step().policy() == v1::POLICY_LOCAL_SGD) record.set_inner_lr(inner_learning_rate());
  if (auto checksum = plane_->apply(closed)) start_checksum_ = *checksum;
  count_step(record);
  record.set_epoch(static_cast<uint32_t>(ledger_.epoch()));
  record.set_epochs(epochs());
  record.set_wall_seconds(wall(now));
  if (setup_.host_load) record.set_host_load(setup_.host_load());
  worker_summary_.step_closed(record, closed.planned);
  track_misses(record);
  for (const auto& [rank, p] : planned_) {
    if (p.resync && membership_.at(rank).live) {
      log_->info("resending the coordinator's state to worker '{}' (rank {})",
                 membership_.at(rank).name, rank);
      welcome(rank);
    }
  }
  planned_.clear();
  ++step_;

  v1::RunTotals& t = metrics_.totals();
  bool epoch_ended = false;
  if (ledger_.epoch_complete()) {
    const EpochAudit audit = ledger_.audit();
    metrics_.record_epoch(audit, t.steps(), wall(now));
    t.set_epochs_completed(t.epochs_completed() + 1);
    if (audit.ok()) {
      log_->info("epoch {} complete: {} samples done exactly once, {} lost", audit.epoch,
                 audit.done, audit.lost.size());
    } else {
      t.set_audits_failed(t.audits_failed() + 1);
      log_->error("epoch {} ledger audit FAILED: {} duplicated, {} missing", audit.epoch,
                  audit.duplicated.size(), audit.missing.size());
    }
    ledger_.start_next_epoch();
    epoch_samples_ = 0;
    epoch_ended = true;
  }

  // The coordinator's own work between steps: on its clock, never on the
  // workers' (the next step's clock starts when its plans go out).
  const uint64_t every = config_.eval().every_steps();
  const bool eval_due = evaluations_ != nullptr &&
                        ((every > 0 && t.steps() % every == 0) || (every == 0 && epoch_ended));
  collect_evaluation(false, now);  // one finished off the step loop may reach the target
  // In the step loop, before the stop criteria, which its result may meet;
  // off it, after the checkpoint, which then never waits for it.
  const bool in_step_loop = eval_due && evaluations_->in_step_loop();
  if (in_step_loop) record.set_eval_seconds(request_evaluation(now));
  const uint64_t checkpoint_every = config_.checkpoint().every_steps();
  const std::optional<std::string> stop = stop_reached(now);
  const bool checkpoint_due = checkpoint_every > 0 && t.steps() % checkpoint_every == 0 && !stop;
  const double checkpoint_begin = clock_();
  std::optional<PendingFile> checkpoint =
      checkpoint_due ? write_checkpoint(now) : std::optional<PendingFile>();
  if (checkpoint_due) record.set_checkpoint_seconds(clock_() - checkpoint_begin);
  // After the checkpoint is written, so that it never waits for this
  // evaluation.
  if (eval_due && !in_step_loop) record.set_eval_seconds(request_evaluation(now));
  metrics_.record_step(record);
  // The step's record is durable before the checkpoint that covers it is
  // in place: a crash in between leaves the record, whose step the resumed
  // run (from the checkpoint before) removes and does again.
  if (checkpoint) put_checkpoint_in_place(*checkpoint);
  live_metrics_.step_recorded(record);
  observe_threshold(closed, now);
  publish_live(now);
  if (const auto failure = guard_.step_closed(guarded.discarded, record.applied())) {
    finish(*failure, 1, now);
    return;
  }
  if (stop) {
    finish(*stop, 0, now);
    return;
  }
  start_step(clock_());
  apply_pending();  // after the next plans are out
}

ClosedStep CoordinatorImpl::settle_step() {
  ClosedStep closed;
  v1::StepRecord& record = closed.record;
  record.set_step(static_cast<uint32_t>(step_));
  *record.mutable_tau() = tau_value(threshold_.tau());
  const bool requeue = config_.step().requeue();
  uint64_t planned = 0, samples = 0, completed = 0, dropped = 0, orphaned = 0, lost_samples = 0;
  for (auto& [rank, p] : planned_) {
    v1::WorkerStep& w = *record.add_workers();
    w.set_rank(rank);
    w.set_name(membership_.at(rank).name);
    w.set_missed(p.out());
    w.set_cut(p.removed == Removal::kCut);
    closed.planned[rank] = p.micro_batches.size();
    w.set_checksum_ok(!p.resync);
    if (p.removed) w.set_refused(std::string(refused_word(*p.removed)));
    planned += p.micro_batches.size();
    if (p.contribution) {
      const v1::Contribution& c = *p.contribution;
      w.set_contributed(true);
      w.set_compute_seconds(c.compute_seconds());
      w.set_overhead_seconds(c.overhead_seconds());
      w.set_completed(static_cast<uint32_t>(c.completed_size()));
      w.set_dropped(static_cast<uint32_t>(c.dropped_size()));
      w.set_samples(static_cast<uint32_t>(c.samples()));
      for (const v1::MicroBatchTime& t : c.completed()) {
        w.add_micro_batch_seconds(t.compute_seconds());
        ledger_.complete(t.id());
      }
      uint64_t dropped_samples = 0;
      for (uint64_t id : c.dropped()) {
        ledger_.drop(id);
        dropped_samples += p.sizes[id];
      }
      if (!requeue) lost_samples += dropped_samples;
      closed.loss_sum += c.loss_sum();
      closed.loss_terms += c.loss_terms();
      samples += c.samples();
      closed.correct += c.correct();
      completed += w.completed();
      dropped += w.dropped();
    } else {
      orphaned += p.micro_batches.size();
      if (!requeue) lost_samples += p.samples;
    }
  }
  record.set_planned(static_cast<uint32_t>(planned));
  record.set_samples(static_cast<uint32_t>(samples));
  record.set_completed(static_cast<uint32_t>(completed));
  record.set_dropped(static_cast<uint32_t>(dropped));
  record.set_orphaned(static_cast<uint32_t>(orphaned));
  record.set_lost_samples(static_cast<uint32_t>(lost_samples));
  record.set_requeued(requeue ? record.dropped() + record.orphaned() : 0);
  record.set_applied(samples > 0);
  if (closed.loss_terms > 0) {
    const auto terms = static_cast<double>(closed.loss_terms);
    record.set_loss(closed.loss_sum / terms);
    record.set_accuracy(static_cast<double>(closed.correct) / terms);
    last_loss_ = record.loss();
  }
  return closed;
}

double CoordinatorImpl::step_learning_rate() const {
  if (config_.step().policy() == v1::POLICY_LOCAL_SGD) return config_.step().outer_optimizer().lr();
  return inner_learning_rate();
}

double CoordinatorImpl::inner_learning_rate() const {
  // Under local-sgd the replica's updates are syncs, each of local_steps
  // inner updates on the workers.
  const v1::RunTotals& t = metrics_.totals();
  return learning_rate(schedule_,
                       schedule_position(config_, replica_.optimizer_steps() * local_steps(),
                                         t.samples_completed() + t.samples_lost()));
}

uint32_t CoordinatorImpl::local_steps() const {
  return config_.step().policy() == v1::POLICY_LOCAL_SGD ? config_.step().local_steps() : 1;
}

double CoordinatorImpl::step_divisor(const ClosedStep& closed) const {
  // The gradient of the mean loss over what was completed (or, with
  // normalize "nominal", over what was planned): loss terms are samples for
  // the classifiers and masked tokens for MLM, so the divisor is in the
  // loss's own units. A short step at the end of an epoch (fewer samples
  // planned than the global batch) is weighted by its size, so the epoch's
  // last few samples do not move the model as much as a full step.
  const v1::StepRecord& record = closed.record;
  const uint64_t planned_samples = planned_.planned_samples();
  const auto terms = static_cast<double>(closed.loss_terms);
  // Local SGD: the workers' deltas, each weighted by its loss terms (its
  // local steps were averaged over their own terms already).
  if (config_.step().policy() == v1::POLICY_LOCAL_SGD) return terms;
  double divisor = terms;
  switch (config_.step().normalize()) {
    case v1::NORMALIZE_NOMINAL:
      if (record.samples() > 0) {
        divisor =
            terms * static_cast<double>(planned_samples) / static_cast<double>(record.samples());
      }
      break;
    case v1::NORMALIZE_COMPLETED:
    case v1::NORMALIZE_UNSET:
    case v1::Normalize_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::Normalize_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  const auto global_batch = static_cast<double>(config_.step().global_batch());
  if (planned_samples > 0 && static_cast<double>(planned_samples) < global_batch) {
    divisor *= global_batch / static_cast<double>(planned_samples);
  }
  return divisor;
}

void CoordinatorImpl::count_step(const v1::StepRecord& record) {
  double max_compute = 0.0, compute_total = 0.0;
  for (const v1::WorkerStep& w : record.workers()) {
    if (!w.contributed()) continue;
    max_compute = std::max(max_compute, w.compute_seconds());
    compute_total += w.compute_seconds();
  }
  // What one step costs on the clock the threshold predicts: plans out to
  // the update applied, without evaluations and checkpoints.
  const double cycle = record.step_seconds() + record.reduce_seconds() + record.apply_seconds();
  v1::RunTotals& t = metrics_.totals();
  t.set_steps(t.steps() + 1);
  t.set_samples_completed(t.samples_completed() + record.samples());
  t.set_microbatches_completed(t.microbatches_completed() + record.completed());
  t.set_microbatches_dropped(t.microbatches_dropped() + record.dropped());
  t.set_microbatches_orphaned(t.microbatches_orphaned() + record.orphaned());
  t.set_samples_lost(t.samples_lost() + record.lost_samples());
  t.set_compute_seconds(t.compute_seconds() + compute_total);
  t.set_step_seconds(t.step_seconds() + record.step_seconds());
  t.set_max_compute_seconds(t.max_compute_seconds() + max_compute);
  t.set_steps_at_tau(t.steps_at_tau() + 1);
  t.set_step_seconds_at_tau(t.step_seconds_at_tau() + cycle);
  t.set_microbatches_planned_at_tau(t.microbatches_planned_at_tau() + record.planned());
  t.set_microbatches_dropped_at_tau(t.microbatches_dropped_at_tau() + record.dropped() +
                                    record.orphaned());
  epoch_samples_ += record.samples() + record.lost_samples();
  progress_samples_ += record.samples();
  recent_step_seconds_ =
      recent_step_seconds_ == 0.0 ? cycle : 0.8 * recent_step_seconds_ + 0.2 * cycle;
}

bool CoordinatorImpl::missed_too_many(const Member& m) const {
  const uint32_t limit = config_.liveness().release_after_missed_steps();
  const uint32_t rounds = config_.liveness().release_after_failed_rounds();
  return (limit > 0 && m.missed_in_a_row >= limit) ||
         (rounds > 0 && m.failed_rounds_in_a_row >= rounds);
}

void CoordinatorImpl::track_misses(const v1::StepRecord& record) {
  for (const v1::WorkerStep& w : record.workers()) {
    Member& m = membership_.at(w.rank());
    // A member taken out of the exchange's round is presumed dead before
    // the step closes, and comes back under its name: it counts too (it is
    // released when it says hello again, not welcomed).
    if (m.name != w.name()) continue;
    m.missed_in_a_row = lost_from_step(w) ? m.missed_in_a_row + 1 : 0;
    // A contribution to the step ends the exchange's count of failed
    // rounds, unless the member failed a round of it (a withheld sum).
    const auto p = planned_.find(w.rank());
    if (w.contributed() && (p == planned_.end() || !p->second.struck)) {
      m.failed_rounds_in_a_row = 0;
    }
    if (m.live && missed_too_many(m)) {
      release(w.rank(), fmt::format("after missing {} step deadlines in a row", m.missed_in_a_row));
    }
  }
}

void CoordinatorImpl::release(uint32_t rank, const std::string& why) {
  Member& m = membership_.at(rank);
  const uint32_t missed = m.missed_in_a_row;
  // Settled: a worker restarted under its name starts afresh.
  m.missed_in_a_row = 0;
  m.failed_rounds_in_a_row = 0;
  const std::string reason = fmt::format(
      "released from the run {} (liveness.release_after_missed_steps); its slot is free for a "
      "restarted or new worker",
      why);
  log_->warn("worker '{}' (rank {}) {}", m.name, rank, reason);
  v1::RunTotals& t = metrics_.totals();
  t.set_workers_released(t.workers_released() + 1);
  worker_summary_.worker_released(m.name, rank, step_, missed);
  Message bye;
  bye.envelope = make_envelope(step_, kCoordinatorName);
  bye.envelope.mutable_bye()->set_reason(reason);
  bye.envelope.mutable_bye()->set_released(true);
  send(m.name, std::move(bye));
  membership_.mark_dead(rank);
}

void CoordinatorImpl::observe_threshold(const ClosedStep& closed, double now) {
  if (!threshold_.automatic()) return;
  const v1::StepRecord& record = closed.record;
  StepObservation observation;
  observation.step = record.step();
  double max_compute = 0.0;
  bool complete = true;
  for (const v1::WorkerStep& w : record.workers()) {
    if (w.contributed()) {
      observation.workers.push_back(
          {w.rank(),
           {w.micro_batch_seconds().begin(), w.micro_batch_seconds().end()},
           w.dropped()});
      max_compute = std::max(max_compute, w.compute_seconds());
    } else {
      // A worker that missed the deadline or died: its times are unknown.
      // Leaving the step out would keep only the fast steps; it stays, with
      // its whole plan filled as dropped micro-batches are.
      observation.workers.push_back(
          {w.rank(), {}, static_cast<uint32_t>(closed.planned.at(w.rank()))});
      complete = false;
    }
  }
  if (observation.workers.empty()) return;
  // Time outside the slowest compute on the step's own clock (plans out to
  // the coordinator's update applied; evaluations and checkpoints are not in
  // it). A step that waited for a deadline says nothing about it.
  observation.overhead_seconds = std::max(
      0.0, record.step_seconds() + record.reduce_seconds() + record.apply_seconds() - max_compute);
  observation.overhead_known = complete;
  observation.cycle_seconds =
      record.step_seconds() + record.reduce_seconds() + record.apply_seconds();
  const std::optional<ThresholdDecision> d = threshold_.observe(std::move(observation));
  if (!d) return;
  if (d->measured_after) {
    record_trial_end(*d, now);
  } else {
    record_estimate(*d, now);
  }
}

void CoordinatorImpl::record_estimate(const ThresholdDecision& d, double now) {
  const ThresholdEstimate& e = d.estimate;
  v1::RunTotals& t = metrics_.totals();
  v1::TauEstimate& last = *t.mutable_last_tau_estimate();
  last.set_step(d.step);
  last.set_tau(e.tau);
  last.set_drop_rate(e.drop_rate);
  last.set_speedup(e.speedup);
  last.set_step_seconds(e.step_seconds);
  last.set_baseline_step_seconds(e.baseline_step_seconds);
  last.set_overhead_seconds(e.overhead_seconds);
  last.set_steps(static_cast<uint32_t>(e.steps));
  v1::TauRecord r;
  r.set_step(static_cast<uint32_t>(d.step));
  r.set_wall_seconds(wall(now));
  r.set_why(d.why);
  r.set_changed(d.changed);
  *r.mutable_old_tau() = tau_value(d.old_tau);
  *r.mutable_new_tau() = tau_value(d.new_tau);
  *r.mutable_best_tau() = tau_value(e.tau);
  r.set_predicted_drop_rate(e.drop_rate);
  r.set_predicted_speedup(1.0 + e.speedup);  // records give ratios; the model, gains
  r.set_predicted_step_seconds(e.step_seconds);
  r.set_predicted_baseline_step_seconds(e.baseline_step_seconds);
  r.set_overhead_seconds(e.overhead_seconds);
  r.set_steps(static_cast<uint32_t>(e.steps));
  r.set_old_tau_drop_rate(d.in_force.drop_rate);
  r.set_old_tau_speedup(1.0 + d.in_force.speedup);
  r.set_gain_low(d.gain_spread.low);
  r.set_gain_high(d.gain_spread.high);
  r.set_within_noise(d.within_noise);
  r.set_trial(d.trial);
  metrics_.record_tau(r);
  if (d.trial) {
    log_->info(
        "tau {} on trial after step {} ({} over {} steps): predicted drop rate {:.1f}%, speedup "
        "{:.3f}x (tau in force, {}: {:.3f}x); the next steps alternate between the two until "
        "each has run {}, and the faster measured stays",
        describe_tau(e.tau), d.step, d.why, e.steps, 100.0 * e.drop_rate, 1.0 + e.speedup,
        describe_tau(d.old_tau), 1.0 + d.in_force.speedup, threshold_.trial_steps());
  } else if (d.changed) {
    note_tau_change(d.new_tau);
    log_->info(
        "tau {} -> {} after step {} ({} over {} steps): predicted drop rate {:.1f}%, "
        "step {:.4g} s against {:.4g} s at inf, speedup {:.3f}x (tau in force: {:.3f}x{})",
        describe_tau(d.old_tau), describe_tau(d.new_tau), d.step, d.why, e.steps,
        100.0 * e.drop_rate, e.step_seconds, e.baseline_step_seconds, 1.0 + e.speedup,
        1.0 + d.in_force.speedup,
        d.in_force_over_bound
            ? fmt::format(", dropping {:.1f}%, above max_drop_rate", 100.0 * d.in_force.drop_rate)
            : std::string());
  } else if (d.held) {
    log_->info(
        "tau stays {} after step {} ({} over {} steps): the best tau, {}, is predicted to gain "
        "{:+.1f}%, but a trial measured less than its prediction; no move for gain is tried "
        "before step {}",
        describe_tau(d.old_tau), d.step, d.why, e.steps, describe_tau(e.tau), 100.0 * d.gain,
        d.step + threshold_.steps_held());
  } else if (d.within_noise) {
    log_->info(
        "tau stays {} after step {} ({} over {} steps): the best tau, {}, would gain {:+.1f}%, "
        "but that is within the window's noise (resampled 5th to 95th percentile {:+.1f}% to "
        "{:+.1f}%)",
        describe_tau(d.old_tau), d.step, d.why, e.steps, describe_tau(e.tau), 100.0 * d.gain,
        100.0 * d.gain_spread.low, 100.0 * d.gain_spread.high);
  } else {
    log_->debug(
        "tau stays {} after step {} ({} over {} steps): best {} would give {:.3f}x "
        "against {:.3f}x in force",
        describe_tau(d.old_tau), d.step, d.why, e.steps, describe_tau(e.tau), 1.0 + e.speedup,
        1.0 + d.in_force.speedup);
  }
}

void CoordinatorImpl::note_tau_change(double tau) {
  v1::RunTotals& t = metrics_.totals();
  t.set_tau_changes(t.tau_changes() + 1);
  t.set_tau(tau);
  t.set_steps_at_tau(0);
  t.set_step_seconds_at_tau(0.0);
  t.set_microbatches_planned_at_tau(0);
  t.set_microbatches_dropped_at_tau(0);
}

void CoordinatorImpl::record_trial_end(const ThresholdDecision& d, double now) {
  v1::TauRecord r;
  r.set_step(static_cast<uint32_t>(d.step));
  r.set_wall_seconds(wall(now));
  r.set_why(d.why);
  r.set_changed(d.changed);
  *r.mutable_old_tau() = tau_value(d.old_tau);
  *r.mutable_new_tau() = tau_value(d.new_tau);
  *r.mutable_best_tau() = tau_value(d.tried_tau);
  r.set_measured_before(*d.measured_before);
  r.set_measured_after(*d.measured_after);
  metrics_.record_tau(r);
  if (d.changed) note_tau_change(d.new_tau);
  log_->info(
      "tau {} after step {}: on trial, {} measured {:.1f} micro-batches/s against {:.1f} at {} "
      "({:.3f}x){}",
      describe_tau(d.new_tau), d.step, describe_tau(d.tried_tau), *d.measured_after,
      *d.measured_before, describe_tau(d.old_tau), *d.measured_after / *d.measured_before,
      d.changed ? ""
                : fmt::format(": it stays {}; no move for gain before step {}",
                              describe_tau(d.old_tau), d.step + threshold_.steps_held()));
}

}  // namespace dctrain
