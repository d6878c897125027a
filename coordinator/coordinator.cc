#include "coordinator/coordinator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "coordinator/checkpoint.h"
#include "runtime/setup.h"
#include "runtime/text_format.h"

namespace dctrain {

namespace {

Ledger initial_ledger(const CoordinatorSetup& setup) {
  if (setup.resume) {
    Ledger ledger = Ledger::restore(setup.resume->ledger());
    ledger.drop_all_in_flight();
    return ledger;
  }
  return Ledger(setup.train_size, setup.config.seed(), setup.config.step().requeue());
}

std::string describe_seconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<uint64_t>(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string describe_tau(double tau) {
  return std::isinf(tau) ? std::string("inf") : fmt::format("{:.3g} s", tau);
}

}  // namespace

Coordinator::Coordinator(CoordinatorSetup setup, Replica& replica, Evaluator* evaluator,
                         Outbox& outbox, std::shared_ptr<spdlog::logger> log,
                         CoordinatorClock clock)
    : setup_(std::move(setup)),
      config_(setup_.config),
      replica_(replica),
      evaluator_(evaluator),
      outbox_(outbox),
      log_(std::move(log)),
      clock_(std::move(clock)),
      schedule_(run_schedule_spec(config_)),
      membership_(config_.workers()),
      ledger_(initial_ledger(setup_)),
      reducer_(replica.parameter_count(), replica.buffer_count()),
      metrics_(setup_.run_dir, config_.run_id(),
               setup_.resume ? std::optional<uint64_t>(setup_.resume->next_step()) : std::nullopt),
      threshold_(config_.step(), config_.seed()),
      timeline_(setup_.run_dir, config_.trace(), clock_(), log_),
      guard_(config_.guard()),
      peer_log_(config_.guard(), log_),
      speed_planner_(config_.step().rebalance()),
      round_deadline_(config_.data_plane()),
      needs_data_root_(needs_data_root(config_)) {
  reducer_.set_holding(guard_.norm_guard());
  exchange_run_ = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count());
  const double now = clock_();
  created_ = run_started_ = waiting_since_ = now;
  if (setup_.resume) {
    if (metrics_.records_superseded() > 0) {
      log_->info(
          "metrics.jsonl: removed {} records written after the checkpoint (steps from {} "
          "on are run again)",
          metrics_.records_superseded(), setup_.resume->next_step());
    }
    step_ = setup_.resume->next_step();
    metrics_.totals() = setup_.resume->totals();
    wall_offset_ = metrics_.totals().wall_seconds();
    const EpochAudit audit = ledger_.audit();
    epoch_samples_ = audit.done + audit.lost.size();
    log_->info("resuming at step {} (epoch {}, {} updates applied, {:.1f} s trained before)", step_,
               ledger_.epoch(), replica_.optimizer_steps(), wall_offset_);
  }
  start_checksum_ = replica_.parameter_checksum();
  if (threshold_.automatic()) {
    const v1::AutoTauConfig& a = config_.step().auto_tau();
    log_->info(
        "tau: auto; inf for a warm-up of {} steps, then estimated from the recorded "
        "micro-batch times and re-estimated every {} steps on the last {}",
        a.warmup_steps(), a.reestimate_every_steps(), a.window_steps());
  }
  log_->info("data plane: {}", exchange_mode() ? "exchange (the workers sum among themselves; "
                                                 "this process commits each step)"
                                               : "star (every gradient through this process)");
  // A resumed run starts its automatic threshold afresh, with a warm-up.
  metrics_.totals().set_tau(threshold_.tau());
  metrics_.totals().set_steps_at_tau(0);
  metrics_.totals().set_step_seconds_at_tau(0.0);
  metrics_.totals().set_microbatches_planned_at_tau(0);
  metrics_.totals().set_microbatches_dropped_at_tau(0);
  if (setup_.resume) resume_evaluations(now);
  publish_live(now);
}

double Coordinator::epochs() const {
  const double size = static_cast<double>(std::max<uint64_t>(setup_.train_size, 1));
  return static_cast<double>(metrics_.totals().epochs_completed()) +
         static_cast<double>(epoch_samples_) / size;
}

void Coordinator::send(const std::string& peer, Message message) {
  message.envelope.set_protocol_version(make_envelope(0, "").protocol_version());
  outbox_.send(peer, std::move(message));
}

// ---------------------------------------------------------------- messages

void Coordinator::handle(Received received, double now) {
  try {
    dispatch(std::move(received), now);
    end_round_without_lost_members(now);
    if (phase_ == Phase::kStepping && reducer_.complete()) close_step(now);
    start_when_ready(now);
  } catch (const FileWriteError& e) {
    run_folder_failed(e.what(), now);
  }
}

bool Coordinator::start_when_ready(double now) {
  if (phase_ == Phase::kJoining && membership_.ready_ranks().size() == config_.workers()) {
    log_->info("all {} workers joined and loaded their data; training starts", config_.workers());
    start_step(now);
    return true;
  }
  if (phase_ == Phase::kWaiting && !membership_.ready_ranks().empty()) {
    start_step(now);
    return true;
  }
  return false;
}

void Coordinator::dispatch(Received received, double now) {
  const std::string peer = received.peer;
  Message message;
  if (const auto problem = decode(std::move(received.parts), message)) {
    bad_message(peer, fmt::format("dropped a message from peer '{}': {}", peer, *problem), now);
    return;
  }
  if (const auto problem = version_problem(message.envelope)) {
    refuse_hello(peer, fmt::format("refused peer '{}': {}", peer, *problem), *problem, now);
    return;
  }
  if (message.envelope.sender() != peer) {
    bad_message(peer,
                fmt::format("dropped a {} from peer '{}' that signs as '{}': the sender must be "
                            "the worker's name",
                            body_name(message.envelope), peer, message.envelope.sender()),
                now);
    return;
  }
  // A running worker's name belongs to the key it joined with (CURVE): a
  // message under that name from another key is not its.
  if (const Member* m = membership_.live_member(peer); m != nullptr && m->key != received.key) {
    log_->warn(
        "refused a {} from peer '{}' with CURVE key {}: that name belongs to the running worker "
        "with key {}; give each worker its own name",
        body_name(message.envelope), peer, received.key.empty() ? "(none)" : received.key,
        m->key.empty() ? "(none)" : m->key);
    if (message.envelope.body_case() == v1::Envelope::kHello) {
      refuse(peer, fmt::format("the name '{}' belongs to a running worker with another key", peer));
    }
    return;
  }
  switch (message.envelope.body_case()) {
    case v1::Envelope::kHello:
      on_hello(received, message, now);
      return;
    case v1::Envelope::kHeartbeat:
      if (Member* m = membership_.live_member(peer)) {
        m->last_heard = now;
      } else {
        ask_to_rejoin(peer, "heartbeat from a worker that is not in the run");
      }
      return;
    case v1::Envelope::kContribution:
      on_contribution(peer, std::move(message), now);
      return;
    case v1::Envelope::kBye:
      on_bye(peer, message, now);
      return;
    case v1::Envelope::kReady:
      on_ready(peer, now);
      return;
    case v1::Envelope::kExchangeSum:
      on_exchange_sum(peer, std::move(message), now);
      return;
    case v1::Envelope::kContributionSketch:
      on_contribution_sketch(peer, message, now);
      return;
    case v1::Envelope::kError:
      peer_log_.peer_says(
          peer,
          fmt::format("worker '{}' reports: {}", peer, peer_text(message.envelope.error().message())),
          now);
      if (Member* m = membership_.live_member(peer)) m->last_heard = now;
      return;
    default:
      bad_message(peer,
                  fmt::format("dropped a {} from peer '{}': workers do not send that",
                              body_name(message.envelope), peer),
                  now);
      return;
  }
}

void Coordinator::on_hello(const Received& from, const Message& message, double now) {
  const v1::Hello& hello = message.envelope.hello();
  if (phase_ == Phase::kFinished) {
    refuse(from.peer, "the run has finished");
    return;
  }
  if (hello.worker_name() != from.peer) {
    bad_message(from.peer,
                fmt::format("dropped a hello from peer '{}' naming itself '{}'", from.peer,
                            hello.worker_name()),
                now);
    return;
  }
  if (needs_data_root_ && !hello.has_data_dir()) {
    const std::string reason = fmt::format(
        "this run trains on '{}' data: start the worker with --data-dir pointing at a data root "
        "that holds it",
        word(config_.dataset().kind()));
    refuse_hello(from.peer, fmt::format("refused worker '{}': {}", from.peer, reason), reason, now);
    return;
  }
  if (const auto problem = exchange_hello_problem(hello)) {
    log_->warn("refused worker '{}': {}", from.peer, *problem);
    refuse(from.peer, *problem);
    return;
  }
  if (Member* existing = membership_.live_member(from.peer)) {
    // The worker restarted (or lost its state) before we noticed.
    log_->warn("worker '{}' (rank {}) said hello again: it restarted; welcoming it afresh",
               existing->name, existing->rank);
    if (phase_ == Phase::kStepping) abandon(existing->rank, "it restarted during the step");
    membership_.mark_dead(existing->rank);
  }
  const std::optional<uint32_t> rank = membership_.admit(from.peer, hello.threads(), now);
  if (rank) speed_planner_.forget(*rank);  // a new worker: the old one's speed is not its own
  if (!rank) {
    const std::string reason =
        fmt::format("the run already has its {} workers, all alive; raise 'workers' to add more",
                    config_.workers());
    refuse_hello(from.peer, fmt::format("refused worker '{}': {}", from.peer, reason), reason, now);
    return;
  }
  membership_.identify(*rank, worker_identity(from.key, hello.exchange_endpoint()));
  if (missed_too_many(membership_.at(*rank))) {
    // Taken out of its steps (a slow or failing link on the exchange) until
    // the limit, presumed dead each time: the churn of welcomes ends here.
    const Member& m = membership_.at(*rank);
    release(*rank, fmt::format("at its return: it missed its last {} steps in a row (its "
                               "deadline, or its part of the exchange) and failed its last {} "
                               "exchange rounds, and has not contributed since",
                               m.missed_in_a_row, m.failed_rounds_in_a_row));
    return;
  }
  log_->info(
      "worker '{}' joined as rank {} ({} threads, dctrain {}, BLAS core {}); {} of {} "
      "workers live",
      from.peer, *rank, hello.threads(), hello.software_version(),
      hello.has_blas() ? fmt::format("{} ({}), sgemm {:.1f} GFLOP/s", hello.blas().core(),
                                     hello.blas().how(), hello.blas().sgemm_gflops())
                       : std::string("not reported"),
      membership_.live_count(), config_.workers());
  if (hello.has_blas() && !hello.blas().warning().empty()) {
    log_->warn("worker '{}': BLAS: {}", from.peer, hello.blas().warning());
  }
  membership_.at(*rank).key = from.key;
  worker_summary_.joined(from.peer, *rank, hello);
  exchange_endpoints_[*rank] = hello.exchange_endpoint();
  exchange_tokens_[*rank] = hello.exchange_token();
  welcome(*rank);
}

void Coordinator::welcome(uint32_t rank) {
  apply_pending();  // the welcome carries the replica's state
  Message m;
  m.envelope = make_envelope(step_, kCoordinatorName);
  v1::Welcome& w = *m.envelope.mutable_welcome();
  w.set_rank(rank);
  *w.mutable_config() = config_;
  w.set_optimizer_steps(static_cast<uint64_t>(replica_.optimizer_steps()));
  w.set_parameter_checksum(start_checksum_);
  replica_.add_state(m);
  send(membership_.at(rank).name, std::move(m));
}

void Coordinator::refuse(const std::string& peer, const std::string& reason) {
  Message m;
  m.envelope = make_envelope(step_, kCoordinatorName);
  m.envelope.mutable_refusal()->set_reason(reason);
  m.envelope.mutable_refusal()->set_expected_protocol_version(m.envelope.protocol_version());
  send(peer, std::move(m));
}

void Coordinator::ask_to_rejoin(const std::string& peer, const std::string& why) {
  log_->info("asked peer '{}' to say hello again ({})", peer, why);
  Message m;
  m.envelope = make_envelope(step_, kCoordinatorName);
  m.envelope.mutable_error()->set_message(
      fmt::format("{}: you are not a member of the run; say hello to rejoin", why));
  m.envelope.mutable_error()->set_rejoin(true);
  send(peer, std::move(m));
}

void Coordinator::on_bye(const std::string& peer, const Message& message, double now) {
  Member* m = membership_.live_member(peer);
  if (m == nullptr) return;
  const uint32_t rank = m->rank;
  peer_log_.peer_says(peer,
                      fmt::format("worker '{}' (rank {}) left: {}", peer, rank,
                                  peer_text(message.envelope.bye().reason())),
                      now);
  if (phase_ == Phase::kStepping) abandon(rank, "it left during the step");
  membership_.mark_dead(rank);
}

void Coordinator::on_ready(const std::string& peer, double now) {
  Member* m = membership_.live_member(peer);
  if (m == nullptr) {
    ask_to_rejoin(peer, "ready from a worker that is not in the run");
    return;
  }
  m->last_heard = now;
  if (!m->ready) log_->debug("worker '{}' (rank {}) is ready", peer, m->rank);
  m->ready = true;
}

void Coordinator::on_contribution(const std::string& peer, Message message, double now) {
  const uint64_t step = message.envelope.step();
  Member* member = membership_.live_member(peer);
  if (member == nullptr) {
    ask_to_rejoin(peer, fmt::format("contribution for step {}", step));
    return;
  }
  member->last_heard = now;
  const uint32_t rank = member->rank;
  timeline_.contribution(rank, peer, message.envelope, now);
  // A redone exchange round reports the same compute again: counted once.
  const bool redo_report = message.envelope.contribution().exchange().attempt() > 0;
  if (message.envelope.has_contribution() && !redo_report) {
    if (!worker_summary_.contribution_arrived(peer, step, message.envelope.contribution(), now)) {
      log_->warn(
          "worker '{}' (rank {})'s contribution for step {} has negative or non-finite "
          "times: left out of the per-worker summary",
          peer, rank, step);
    }
  }
  if (phase_ != Phase::kStepping || step < step_) {
    log_->info("discarded worker '{}' (rank {})'s contribution for past step {} (now at step {})",
               peer, rank, step, step_);
    return;
  }
  if (step > step_) {
    log_->warn("dropped worker '{}' (rank {})'s contribution for future step {} (now at step {})",
               peer, rank, step, step_);
    return;
  }
  auto planned = planned_.find(rank);
  if (planned == planned_.end() || !reducer_.expects(rank)) {
    log_->warn("dropped worker '{}' (rank {})'s contribution for step {}: {}", peer, rank, step,
               planned == planned_.end() ? "it has no plan in this step"
                                         : "the step no longer waits for it");
    return;
  }
  Planned& p = planned->second;
  const v1::Contribution& c = message.envelope.contribution();
  if (exchange_mode() && c.exchange().attempt() != exchange_attempt_) {
    log_->warn(
        "dropped worker '{}' (rank {})'s report of exchange attempt {} for step {}: the step "
        "runs attempt {}",
        peer, rank, c.exchange().attempt(), step, exchange_attempt_);
    return;
  }

  // Everything is checked before anything is used.
  std::vector<TensorSpec> expected = {{"gradient", replica_.parameter_count()}};
  if (replica_.buffer_count() > 0) expected.push_back({"statistics", replica_.buffer_count()});
  std::optional<std::string> problem =
      exchange_mode() ? exchange_report_problem(message) : check_tensors(message, expected);
  if (!problem) {
    std::set<uint64_t> seen;
    uint64_t samples = 0;
    for (const v1::MicroBatchTime& t : c.completed()) {
      if (!p.micro_batches.contains(t.id()) || !seen.insert(t.id()).second) {
        problem =
            fmt::format("completed micro-batch {} was not planned or is listed twice", t.id());
        break;
      }
      if (!std::isfinite(t.compute_seconds()) || t.compute_seconds() < 0.0) {
        problem = fmt::format("micro-batch {} has compute time {}", t.id(), t.compute_seconds());
        break;
      }
      samples += p.sizes[t.id()];
    }
    for (uint64_t id : c.dropped()) {
      if (problem) break;
      if (!p.micro_batches.contains(id) || !seen.insert(id).second) {
        problem = fmt::format("dropped micro-batch {} was not planned or is listed twice", id);
      }
    }
    if (!problem && seen.size() != p.micro_batches.size()) {
      problem = fmt::format("it accounts for {} of its {} planned micro-batches", seen.size(),
                            p.micro_batches.size());
    }
    if (!problem) {
      problem = contribution_totals_problem(c, samples, max_loss_terms_per_sample(config_.model()));
    }
  }
  if (problem) {
    if (!tensors_finite(message)) guard_.nonfinite_contribution();
    log_->error("rejected worker '{}' (rank {})'s contribution for step {}: {}", peer, rank, step,
                *problem);
    abandon(rank, "its contribution was rejected");
    return;
  }
  if (c.parameter_checksum() != start_checksum_) {
    // Its gradient was computed on other parameters: using it would move
    // every replica by a wrong update. Drop it, and resend the state.
    v1::RunTotals& t = metrics_.totals();
    t.set_checksum_mismatches(t.checksum_mismatches() + 1);
    p.resync = true;
    abandon(rank, fmt::format("its replica differs from the coordinator's (checksum {:016x}, "
                              "expected {:016x}); it gets the coordinator's state after the update",
                              c.parameter_checksum(), start_checksum_));
    return;
  }
  if (exchange_mode()) {
    accept_exchange_report(rank, std::move(message), now);
    return;
  }
  p.contribution = c;
  reducer_.add(rank, std::move(message));
  if (config_.step().policy() == v1::POLICY_BACKUP) cut_backup_workers();
}

void Coordinator::cut_backup_workers() {
  size_t arrived = 0;
  for (const auto& [rank, p] : planned_) arrived += p.contribution ? 1 : 0;
  const size_t workers = planned_.size();
  const size_t backups = config_.step().backup_workers();
  if (workers <= backups || arrived < workers - backups) return;
  for (auto& [rank, p] : planned_) {
    if (!reducer_.expects(rank) || reducer_.has(rank)) continue;
    p.missed = true;
    p.cut = true;
    reducer_.forget(rank);
    ledger_.orphan_worker(rank);
    log_->debug(
        "worker '{}' (rank {}) cut from step {} as a backup: {} of {} contributed; its {} "
        "micro-batches are {}",
        membership_.at(rank).name, rank, step_, arrived, workers, p.micro_batches.size(),
        config_.step().requeue() ? "requeued" : "lost");
  }
}

void Coordinator::log_standby(const StepShares& shares) {
  for (uint32_t rank : shares.entered_standby) {
    const Member& m = membership_.at(rank);
    const std::optional<double> own = speed_planner_.estimate(rank);
    log_->warn(
        "worker '{}' (rank {}) kept as a standby from step {}: its share would be below one "
        "micro-batch ({} per micro-batch); it gets an empty plan, and one micro-batch every "
        "{} steps to measure it again",
        m.name, rank, step_, own ? fmt::format("{:.4g} s", *own) : std::string("no estimate"),
        config_.step().rebalance().probe_every_steps());
  }
  for (uint32_t rank : shares.left_standby) {
    log_->info("worker '{}' (rank {}) is no longer a standby from step {}: it has a share again",
               membership_.at(rank).name, rank, step_);
  }
  if (shares.changed) {
    std::string text;
    for (const WorkerShare& s : shares.workers) {
      text += fmt::format("{}rank {}: {}", text.empty() ? "" : ", ", s.rank, s.micro_batches);
    }
    log_->info("step {}: micro-batch shares by measured speed: {}", step_, text);
  }
}

// ------------------------------------------------------------------- steps

void Coordinator::abandon(uint32_t rank, const std::string& why) {
  auto it = planned_.find(rank);
  if (it == planned_.end() || !reducer_.expects(rank)) return;
  take_out(it->second, why);
}

void Coordinator::take_out(Planned& p, const std::string& why) {
  const uint32_t rank = p.rank;
  p.missed = true;
  p.contribution.reset();
  reducer_.forget(rank);  // nothing to forget once it has reported
  ledger_.orphan_worker(rank);
  log_->warn(
      "worker '{}' (rank {}) is out of step {} because {}; its {} micro-batches ({} samples) "
      "are {}",
      membership_.at(rank).name, rank, step_, why, p.micro_batches.size(), p.samples,
      config_.step().requeue() ? "requeued" : "lost");
}

void Coordinator::start_step(double now) {
  std::vector<uint32_t> ranks = membership_.ready_ranks();
  if (ranks.empty()) {
    if (phase_ != Phase::kWaiting && membership_.live_count() == 0) {
      log_->warn("no live worker left; waiting up to {:.0f} s for one to join",
                 config_.liveness().join_timeout_seconds());
      waiting_since_ = now;
    }
    phase_ = Phase::kWaiting;
    return;
  }
  std::vector<WorkerPlan> plans;
  for (int attempt = 0; attempt < 2; ++attempt) {
    PolicyPlans planned =
        plan_for_policy(config_.step().policy(), speed_planner_, ledger_, ranks, step_,
                        config_.step().global_batch(), config_.step().micro_batch());
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
  exchange_attempt_ = 0;
  exchange_members_ = planned;
  committed_ahead_.reset();
  refused_sums_.clear();
  sketch_check_.reset();
  sketch_check_passed_ = false;
  refused_norm_in_step_ = 0;
  silent_after_.reset();
  overdue_at_.reset();
  const double tau = threshold_.tau();
  for (WorkerPlan& plan : plans) {
    Planned& p = planned_[plan.rank];
    p.rank = plan.rank;
    Message m;
    m.envelope = make_envelope(step_, kCoordinatorName);
    v1::Plan& body = *m.envelope.mutable_plan();
    body.set_tau(tau);
    body.set_parameter_checksum(start_checksum_);
    for (PlannedMicroBatch& mb : plan.micro_batches) {
      p.micro_batches.insert(mb.id);
      p.sizes[mb.id] = mb.samples.size();
      p.samples += mb.samples.size();
      v1::MicroBatch& out = *body.add_micro_batches();
      out.set_id(mb.id);
      out.set_epoch(mb.epoch);
      out.mutable_samples()->Assign(mb.samples.begin(), mb.samples.end());
    }
    if (exchange_mode()) plan_exchange(body, planned, 0);
    timeline_.plan(step_, body, clock_());
    send(membership_.at(plan.rank).name, std::move(m));
  }
  reducer_.begin(planned, !exchange_mode());  // exchange: the sum waits for apply_pending()
  timeline_.span("plan", now, clock_());
  if (phase_ != Phase::kStepping && step_ == (setup_.resume ? setup_.resume->next_step() : 0)) {
    run_started_ = now;
    last_progress_ = now;
  }
  phase_ = Phase::kStepping;
  step_started_ = now;
  worker_summary_.step_started(step_, now);
  deadline_ = std::isinf(tau) ? std::numeric_limits<double>::infinity()
                              : now + tau + config_.liveness().grace_seconds();
  if (exchange_mode()) deadline_ = exchange_deadline(now, tau);
}

void Coordinator::close_step(double now) {
  if (exchange_mode()) {
    if (refuse_disagreeing_sums(now)) return;   // redone without the shard's owner
    if (check_contribution_norms(now)) return;  // waits for the sketches, or redone
    if (commit_ahead_of_sum(now)) return;       // the step closes once its sum is in
    judge_exchange_round();
    if (redo_exchange(now)) return;
  }
  timeline_.span("step", step_started_, now);
  const double round_deadline = round_deadline_.seconds();  // this step's, before it is observed
  // Exchange: the members summed among themselves and each checked the sum
  // it holds (worker/data_plane.cc); the coordinator has no sum to judge yet.
  const GuardedStep guarded = exchange_mode() ? settle_exchange() : guard_step();
  ClosedStep closed = settle_step();
  v1::StepRecord& record = closed.record;
  record.set_discarded(guarded.discarded);
  record.set_refused_norm(guarded.refused_norm);
  record.set_step_seconds(now - step_started_);
  if (exchange_mode()) {
    record.set_exchange_rounds(exchange_attempt_ + 1);
    record.set_round_deadline_seconds(round_deadline);
  }
  record_shares(shares_, record, closed.planned);
  record.set_policy(word(config_.step().policy()));
  observe_step(speed_planner_, record);
  uint64_t planned_samples = 0;
  for (const auto& [rank, p] : planned_) planned_samples += p.samples;
  reduce_and_apply(closed, planned_samples);
  count_step(record);
  record.set_epoch(static_cast<uint32_t>(ledger_.epoch()));
  record.set_epochs(epochs());
  record.set_wall_seconds(wall(now));
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
  const bool eval_due = evaluator_ != nullptr &&
                        ((every > 0 && t.steps() % every == 0) || (every == 0 && epoch_ended));
  const bool in_background = setup_.evaluation_thread != nullptr;
  if (in_background) collect_evaluation(false, now);  // may reach the target
  if (eval_due && !in_background) record.set_eval_seconds(evaluate(now));
  const uint64_t checkpoint_every = config_.checkpoint().every_steps();
  const std::optional<std::string> stop = stop_reached(now);
  const bool checkpoint_due = checkpoint_every > 0 && t.steps() % checkpoint_every == 0 && !stop;
  const double checkpoint_begin = clock_();
  std::optional<PendingFile> checkpoint =
      checkpoint_due ? write_checkpoint(now) : std::optional<PendingFile>();
  if (checkpoint_due) record.set_checkpoint_seconds(clock_() - checkpoint_begin);
  // After the checkpoint is written, so that it never waits for this
  // evaluation.
  if (eval_due && in_background) record.set_eval_seconds(request_evaluation(now));
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
  apply_pending();  // exchange: after the next plans are out
}

ClosedStep Coordinator::settle_step() {
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
    w.set_missed(p.missed);
    w.set_cut(p.cut);
    closed.planned[rank] = p.micro_batches.size();
    w.set_checksum_ok(!p.resync);
    w.set_refused(p.refused);
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

double Coordinator::step_learning_rate() const {
  const v1::RunTotals& t = metrics_.totals();
  return learning_rate(schedule_, schedule_position(config_, replica_.optimizer_steps(),
                                                    t.samples_completed() + t.samples_lost()));
}

double Coordinator::step_divisor(const ClosedStep& closed, uint64_t planned_samples) const {
  // The gradient of the mean loss over what was completed (or, with
  // normalize "nominal", over what was planned): loss terms are samples for
  // the classifiers and masked tokens for MLM, so the divisor is in the
  // loss's own units. A short step at the end of an epoch (fewer samples
  // planned than the global batch) is weighted by its size, so the epoch's
  // last few samples do not move the model as much as a full step.
  const v1::StepRecord& record = closed.record;
  const auto terms = static_cast<double>(closed.loss_terms);
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

void Coordinator::reduce_and_apply(ClosedStep& closed, uint64_t planned_samples) {
  v1::StepRecord& record = closed.record;
  const double reduce_begin = clock_();
  record.set_lr(step_learning_rate());
  if (exchange_mode()) {
    commit_exchange(closed);
    record.set_reduce_seconds(clock_() - reduce_begin);
    return;
  }
  reducer_.finish(step_divisor(closed, planned_samples), static_cast<double>(record.samples()));
  record.set_reduce_seconds(clock_() - reduce_begin);
  timeline_.span("reduce", reduce_begin, reduce_begin + record.reduce_seconds());

  Message update;
  update.envelope = make_envelope(step_, kCoordinatorName);
  v1::Update& body = *update.envelope.mutable_update();
  body.set_applied(record.applied());
  body.set_samples(record.samples());
  body.set_optimizer_steps(static_cast<uint64_t>(replica_.optimizer_steps()) +
                           (record.applied() ? 1 : 0));
  body.set_learning_rate(record.lr());
  add_tensor(update, "gradient", reducer_.gradient());
  if (replica_.buffer_count() > 0) add_tensor(update, "statistics", reducer_.statistics());
  for (uint32_t rank : membership_.live_ranks()) send(membership_.at(rank).name, share(update));

  const double apply_begin = clock_();
  timeline_.span("send update", reduce_begin + record.reduce_seconds(), apply_begin);
  // The update hashes the parameters as it writes them.
  start_checksum_ =
      record.applied()
          ? replica_.apply_update(reducer_.gradient(), reducer_.statistics(), record.lr())
          : replica_.parameter_checksum();
  record.set_apply_seconds(clock_() - apply_begin);
  timeline_.span("apply", apply_begin, apply_begin + record.apply_seconds());
}

void Coordinator::count_step(const v1::StepRecord& record) {
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

bool Coordinator::missed_too_many(const Member& m) const {
  const uint32_t limit = config_.liveness().release_after_missed_steps();
  const uint32_t rounds = config_.liveness().release_after_failed_rounds();
  return (limit > 0 && m.missed_in_a_row >= limit) ||
         (rounds > 0 && m.failed_rounds_in_a_row >= rounds);
}

void Coordinator::track_misses(const v1::StepRecord& record) {
  for (const v1::WorkerStep& w : record.workers()) {
    Member& m = membership_.at(w.rank());
    // A member taken out of the exchange's round is presumed dead before
    // the step closes, and comes back under its name: it counts too (it is
    // released when it says hello again, not welcomed).
    if (m.name != w.name()) continue;
    // A backup worker cut from the step did not miss a deadline.
    const bool missed_deadline = w.missed() && w.checksum_ok() && !w.cut();
    m.missed_in_a_row = missed_deadline ? m.missed_in_a_row + 1 : 0;
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

void Coordinator::release(uint32_t rank, const std::string& why) {
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

void Coordinator::observe_threshold(const ClosedStep& closed, double now) {
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
  const std::optional<ThresholdDecision> d = threshold_.observe(std::move(observation));
  if (!d) return;

  const ThresholdEstimate& e = d->estimate;
  v1::RunTotals& t = metrics_.totals();
  v1::TauEstimate& last = *t.mutable_last_tau_estimate();
  last.set_step(d->step);
  last.set_tau(e.tau);
  last.set_drop_rate(e.drop_rate);
  last.set_speedup(e.speedup);
  last.set_step_seconds(e.step_seconds);
  last.set_baseline_step_seconds(e.baseline_step_seconds);
  last.set_overhead_seconds(e.overhead_seconds);
  last.set_steps(static_cast<uint32_t>(e.steps));
  v1::TauRecord r;
  r.set_step(static_cast<uint32_t>(d->step));
  r.set_wall_seconds(wall(now));
  r.set_why(d->why);
  r.set_changed(d->changed);
  *r.mutable_old_tau() = tau_value(d->old_tau);
  *r.mutable_new_tau() = tau_value(d->new_tau);
  *r.mutable_best_tau() = tau_value(e.tau);
  r.set_predicted_drop_rate(e.drop_rate);
  r.set_predicted_speedup(1.0 + e.speedup);  // records give ratios; the model, gains
  r.set_predicted_step_seconds(e.step_seconds);
  r.set_predicted_baseline_step_seconds(e.baseline_step_seconds);
  r.set_overhead_seconds(e.overhead_seconds);
  r.set_steps(static_cast<uint32_t>(e.steps));
  r.set_old_tau_drop_rate(d->in_force.drop_rate);
  r.set_old_tau_speedup(1.0 + d->in_force.speedup);
  metrics_.record_tau(r);
  if (d->changed) {
    t.set_tau_changes(t.tau_changes() + 1);
    t.set_tau(d->new_tau);
    t.set_steps_at_tau(0);
    t.set_step_seconds_at_tau(0.0);
    t.set_microbatches_planned_at_tau(0);
    t.set_microbatches_dropped_at_tau(0);
    log_->info(
        "tau {} -> {} after step {} ({} over {} steps): predicted drop rate {:.1f}%, "
        "step {:.4g} s against {:.4g} s at inf, speedup {:.3f}x (tau in force: {:.3f}x{})",
        describe_tau(d->old_tau), describe_tau(d->new_tau), d->step, d->why, e.steps,
        100.0 * e.drop_rate, e.step_seconds, e.baseline_step_seconds, 1.0 + e.speedup,
        1.0 + d->in_force.speedup,
        d->in_force_over_bound
            ? fmt::format(", dropping {:.1f}%, above max_drop_rate", 100.0 * d->in_force.drop_rate)
            : std::string());
  } else {
    log_->debug(
        "tau stays {} after step {} ({} over {} steps): best {} would give {:.3f}x "
        "against {:.3f}x in force",
        describe_tau(d->old_tau), d->step, d->why, e.steps, describe_tau(e.tau), 1.0 + e.speedup,
        1.0 + d->in_force.speedup);
  }
}

double Coordinator::evaluate(double now) {
  // In the step loop, on the replica itself: the steps wait for it.
  apply_pending();
  const double begin = clock_();
  EvaluationResult result;
  result.request = {metrics_.totals().steps(), wall(now), epochs()};
  result.evaluation = evaluator_->evaluate(replica_.model());
  result.seconds = clock_() - begin;
  timeline_.span("evaluation", begin, begin + result.seconds);
  record_evaluation(result, now + result.seconds);
  return result.seconds;
}

std::optional<PendingFile> Coordinator::write_checkpoint(double now) {
  apply_pending();
  if (setup_.run_dir.empty()) return std::nullopt;
  const double begin = clock_();
  // An evaluation of an earlier step still running: its result goes into
  // the totals the checkpoint saves (a resumed run could not redo it).
  if (setup_.evaluation_thread != nullptr) collect_evaluation(true, now);
  v1::CheckpointHeader header;
  *header.mutable_config() = config_;
  header.set_next_step(step_);
  header.set_optimizer_steps(replica_.optimizer_steps());
  *header.mutable_ledger() = ledger_.state();
  *header.mutable_totals() = metrics_.totals();
  header.mutable_totals()->set_wall_seconds(wall(now));
  PendingFile written =
      dctrain::write_checkpoint(checkpoint_path(setup_.run_dir), std::move(header), replica_);
  timeline_.span("checkpoint", begin, clock_());
  return written;
}

void Coordinator::put_checkpoint_in_place(PendingFile& checkpoint) {
  metrics_.sync();
  checkpoint.put_in_place();
  log_->info("checkpoint written at step {}", step_);
}

void Coordinator::run_folder_failed(const std::string& what, double now) {
  if (phase_ == Phase::kFinished) return;
  log_->error("{}", what);
  const std::string dir = setup_.run_dir.string();
  const std::string next =
      std::filesystem::exists(checkpoint_path(setup_.run_dir))
          ? fmt::format(
                "nothing after the last checkpoint is kept: free space, then continue "
                "with dctrain-coordinator --resume {}",
                dir)
          : fmt::format(
                "there is no checkpoint to resume from yet: free space, then start the "
                "run again (--out {} --overwrite)",
                dir);
  finish(fmt::format("the run folder cannot be written ({}); {}", what, next),
         kCoordinatorRunFolderFailed, now);
}

std::optional<std::string> Coordinator::stop_reached(double now) const {
  const v1::StopConfig& s = config_.stop();
  const v1::RunTotals& t = metrics_.totals();
  if (s.target_accuracy() > 0.0 && t.reached_target()) {
    return fmt::format("target accuracy {:.2f}% reached", 100.0 * s.target_accuracy());
  }
  if (s.max_steps() > 0 && t.steps() >= s.max_steps())
    return fmt::format("max steps {} reached", s.max_steps());
  if (s.max_epochs() > 0.0 && epochs() >= s.max_epochs() - 1e-9) {
    return fmt::format("max epochs {} reached", s.max_epochs());
  }
  if (s.max_wall_seconds() > 0.0 && wall(now) >= s.max_wall_seconds()) {
    return fmt::format("max wall time {} s reached", s.max_wall_seconds());
  }
  return std::nullopt;
}

void Coordinator::finish(std::string reason, int exit_code, double now) {
  apply_pending();
  v1::RunTotals& t = metrics_.totals();
  try {
    // The evaluation still running completes, and is recorded, before the
    // summary.
    if (setup_.evaluation_thread != nullptr) collect_evaluation(true, now);
    if (exit_code == kCoordinatorDone && evaluator_ != nullptr &&
        (!t.has_eval() || t.last_eval_step() != t.steps())) {
      evaluate(now);
    }
    if (exit_code == kCoordinatorDone && config_.checkpoint().every_steps() > 0) {
      if (std::optional<PendingFile> checkpoint = write_checkpoint(now)) {
        put_checkpoint_in_place(*checkpoint);
      }
    }
  } catch (const FileWriteError& e) {
    log_->error("{}", e.what());
    reason = fmt::format("{}, but the run folder cannot be written ({})", reason, e.what());
    exit_code = kCoordinatorRunFolderFailed;
  }
  phase_ = Phase::kFinished;
  exit_code_ = exit_code;
  stop_reason_ = reason;
  // Stopped between a commit that went out ahead of its sum and the sum:
  // the members applied an update this replica does not have.
  const bool same_replicas = exit_code == 0 && !committed_ahead_;
  if (committed_ahead_) {
    log_->warn(
        "step {} was committed but its sum had not arrived when the run stopped: the workers' "
        "replicas are one update past the coordinator's, whose checkpoint is the run's",
        step_);
  }
  for (uint32_t rank : membership_.live_ranks()) {
    Message bye;
    bye.envelope = make_envelope(step_, kCoordinatorName);
    bye.envelope.mutable_bye()->set_reason(reason);
    bye.envelope.mutable_bye()->set_parameter_checksum(start_checksum_);
    bye.envelope.mutable_bye()->set_has_checksum(same_replicas);
    send(membership_.at(rank).name, std::move(bye));
  }
  t.set_wall_seconds(wall(now));
  if (!setup_.run_dir.empty()) {
    try {
      v1::RunSummary summary = metrics_.summary(config_, wall(now), epochs(), reason);
      if (setup_.blas) *summary.mutable_blas() = *setup_.blas;
      if (!setup_.resume) summary.set_startup_seconds(run_started_ - created_);
      worker_summary_.add_to(summary);
      summary.set_completed(exit_code_ == kCoordinatorDone);
      summary.set_exit_status(exit_code_);
      write_summary(setup_.run_dir / "summary.json", summary);
    } catch (const std::exception& e) {
      // A run without its summary did not end well, whatever its reason.
      log_->error("summary.json not written: {}", e.what());
      if (exit_code == kCoordinatorDone) exit_code_ = kCoordinatorRunFolderFailed;
    }
  }
  if (exit_code_ == kCoordinatorDone) {
    log_->info("run finished after {} steps ({:.2f} epochs, {:.1f} s): {}", t.steps(), epochs(),
               wall(now), reason);
  } else {
    log_->error("run failed after {} steps (exit status {}): {}", t.steps(), exit_code_, reason);
  }
  publish_live(now);
  try {
    timeline_.close();
  } catch (const FileWriteError& e) {
    log_->error("trace.json not finished: {}", e.what());
    if (exit_code_ == kCoordinatorDone) exit_code_ = kCoordinatorRunFolderFailed;
  }
}

void Coordinator::stop(const std::string& reason, int exit_code, double now) {
  if (phase_ != Phase::kFinished) finish(reason, exit_code, now);
}

// -------------------------------------------------------------------- time

void Coordinator::tick(double now) {
  try {
    advance(now);
  } catch (const FileWriteError& e) {
    run_folder_failed(e.what(), now);
  }
}

void Coordinator::advance(double now) {
  if (phase_ == Phase::kFinished) return;
  const v1::LivenessConfig& live = config_.liveness();
  if (setup_.evaluation_thread != nullptr && collect_evaluation(false, now)) {
    publish_live(now);
    // A step in flight closes first; with none (all workers gone), a
    // target reached ends the run now.
    if (phase_ == Phase::kWaiting && metrics_.totals().reached_target()) {
      if (const auto stop = stop_reached(now)) {
        finish(*stop, 0, now);
        return;
      }
    }
  }

  if (now - last_heartbeat_ >= live.heartbeat_seconds()) {
    last_heartbeat_ = now;
    for (uint32_t rank : membership_.live_ranks()) {
      Message hb;
      hb.envelope = make_envelope(step_, kCoordinatorName);
      hb.envelope.mutable_heartbeat()->set_sent_unix_micros(
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count()));
      send(membership_.at(rank).name, std::move(hb));
    }
  }

  for (uint32_t rank : membership_.silent(now, live.silence_seconds())) {
    const Member& m = membership_.at(rank);
    log_->warn("worker '{}' (rank {}) silent for {:.1f} s: presumed dead", m.name, rank,
               now - m.last_heard);
    if (phase_ == Phase::kStepping) abandon(rank, "it died");
    membership_.mark_dead(rank);
  }

  switch (phase_) {
    case Phase::kJoining:
      if (start_when_ready(now)) {
        return;
      } else if (now - created_ > live.join_timeout_seconds()) {
        finish(
            fmt::format("only {} of {} workers joined within {:.0f} s: start more dctrain-worker "
                        "processes, lower --workers, or raise liveness.join_timeout_seconds",
                        membership_.live_count(), config_.workers(), live.join_timeout_seconds()),
            1, now);
      }
      return;
    case Phase::kWaiting:
      if (start_when_ready(now)) {
        return;
      } else if (membership_.live_count() > 0) {
        waiting_since_ = now;  // a worker joined and is loading its data
      } else if (now - waiting_since_ > live.join_timeout_seconds()) {
        finish(fmt::format("every worker is gone and none joined within {:.0f} s",
                           live.join_timeout_seconds()),
               1, now);
      }
      return;
    case Phase::kStepping:
      if (exchange_mode()) {
        take_out_stopped_members(now);
        cancel_overdue_members(now);
        take_out_silent_members(now);
        end_round_without_lost_members(now);
        chase_committed_sum(now);
      }
      if (now > deadline_) {
        for (const auto& [rank, p] : planned_) {
          if (reducer_.expects(rank)) {
            abandon(rank, fmt::format("it missed the deadline (tau {} + grace {:.3g} s)",
                                      describe_tau(threshold_.tau()), live.grace_seconds()));
          }
        }
      }
      if (reducer_.complete()) close_step(now);
      if (phase_ == Phase::kStepping && now - last_progress_ >= config_.progress_seconds())
        progress(now);
      return;
    case Phase::kFinished:
      return;
  }
}

void Coordinator::progress(double now) {
  const double period = now - last_progress_;
  const v1::RunTotals& t = metrics_.totals();
  const uint64_t planned =
      t.microbatches_completed() + t.microbatches_dropped() + t.microbatches_orphaned();
  const double drop =
      planned == 0
          ? 0.0
          : 100.0 * static_cast<double>(t.microbatches_dropped() + t.microbatches_orphaned()) /
                static_cast<double>(planned);
  double remaining = std::numeric_limits<double>::infinity();
  const v1::StopConfig& s = config_.stop();
  const double steps_per_epoch =
      std::ceil(static_cast<double>(setup_.train_size) / config_.step().global_batch());
  if (s.max_steps() > 0)
    remaining = static_cast<double>(s.max_steps() - std::min(s.max_steps(), t.steps()));
  if (s.max_epochs() > 0.0) {
    remaining = std::min(remaining, std::max(0.0, (s.max_epochs() - epochs()) * steps_per_epoch));
  }
  double eta = remaining * recent_step_seconds_;
  if (s.max_wall_seconds() > 0.0) eta = std::min(eta, s.max_wall_seconds() - wall(now));
  const std::string eval =
      t.has_eval() ? fmt::format("{:.2f}% (loss {:.4f}) @ step {}", 100.0 * t.last_eval_accuracy(),
                                 t.last_eval_loss(), t.last_eval_step())
                   : std::string("-");
  log_->info(
      "step {} | epoch {:.2f} | {:.0f} samples/s | loss {:.4f} | eval {} | drop {:.1f}% | "
      "tau {} | {} workers | ETA {}",
      t.steps(), epochs(), period > 0 ? static_cast<double>(progress_samples_) / period : 0.0,
      last_loss_, eval, drop, describe_tau(threshold_.tau()), membership_.live_count(),
      describe_seconds(eta));
  last_progress_ = now;
  progress_samples_ = 0;
}

}  // namespace dctrain
