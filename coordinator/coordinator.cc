#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "coordinator/coordinator_impl.h"
#include "coordinator/planes/exchange_plane.h"
#include "coordinator/planes/star_plane.h"
#include "runtime/checkpoint.h"
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

}  // namespace

CoordinatorImpl::CoordinatorImpl(CoordinatorSetup setup, Replica& replica, Evaluator* evaluator,
                                 Outbox& outbox, std::shared_ptr<spdlog::logger> log,
                                 CoordinatorClock clock)
    : setup_(std::move(setup)),
      config_(setup_.config),
      replica_(replica),
      outbox_(outbox),
      log_(std::move(log)),
      clock_(std::move(clock)),
      schedule_(run_schedule_spec(config_)),
      membership_(config_.workers()),
      ledger_(initial_ledger(setup_)),
      metrics_(setup_.run_dir, config_.run_id(),
               setup_.resume ? std::optional<uint64_t>(setup_.resume->next_step()) : std::nullopt),
      threshold_(config_.step(), config_.seed()),
      worker_summary_(config_.step().micro_batch()),
      timeline_(setup_.run_dir, config_.trace(), clock_(), log_),
      guard_(config_.guard()),
      peer_log_(config_.guard(), log_),
      speed_planner_(config_.step().rebalance()),
      needs_data_root_(needs_data_root(config_)) {
  if (!setup_.wall_clock) setup_.wall_clock = system_unix_micros;
  PlaneHost& host = *this;  // all the plane sees of this class
  if (config_.data_plane().kind() == v1::DATA_PLANE_EXCHANGE) {
    plane_ = std::make_unique<ExchangePlane>(host, plane_rooms(), setup_.wall_clock(),
                                             setup_.draw_round_check);
  } else {
    plane_ = std::make_unique<StarPlane>(host, plane_rooms());
  }
  if (config_.step().policy() == v1::POLICY_ASYNC) {
    flights_.emplace(config_.step().max_staleness());
    log_->info(
        "policy async: each contribution is applied as it lands; no plan computes on parameters "
        "more than {} updates old",
        config_.step().max_staleness());
  }
  if (setup_.evaluation_thread != nullptr) {
    evaluations_ = setup_.evaluation_thread;
  } else if (evaluator != nullptr) {
    evaluations_ = &inline_evaluations_.emplace(*evaluator, clock_);
  }
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
  log_->info("data plane: {}", plane_->description());
  log_norm_guard();
  // A resumed run starts its automatic threshold afresh, with a warm-up.
  metrics_.totals().set_tau(threshold_.tau());
  metrics_.totals().set_steps_at_tau(0);
  metrics_.totals().set_step_seconds_at_tau(0.0);
  metrics_.totals().set_microbatches_planned_at_tau(0);
  metrics_.totals().set_microbatches_dropped_at_tau(0);
  if (setup_.resume) resume_evaluations(now);
  publish_live(now);
}

PlaneRooms CoordinatorImpl::plane_rooms() {
  return PlaneRooms{config_,  log_,   clock_,    membership_,       replica_,
                    planned_, guard_, timeline_, metrics_.totals(), peer_log_};
}

void CoordinatorImpl::apply_pending() {
  if (auto checksum = plane_->apply_pending()) start_checksum_ = *checksum;
}

double CoordinatorImpl::epochs() const {
  const double size = static_cast<double>(std::max<uint64_t>(setup_.train_size, 1));
  return static_cast<double>(metrics_.totals().epochs_completed()) +
         static_cast<double>(epoch_samples_) / size;
}

void CoordinatorImpl::send(const std::string& peer, Message message) {
  message.envelope.set_protocol_version(make_envelope(0, "").protocol_version());
  outbox_.send(peer, std::move(message));
}

// ---------------------------------------------------------------- contract

Coordinator::Coordinator(CoordinatorSetup setup, Replica& replica, Evaluator* evaluator,
                         Outbox& outbox, std::shared_ptr<spdlog::logger> log,
                         CoordinatorClock clock)
    : impl_(std::make_unique<CoordinatorImpl>(std::move(setup), replica, evaluator, outbox,
                                              std::move(log), std::move(clock))) {}

Coordinator::~Coordinator() = default;

void Coordinator::handle(Received message, double now) {
  impl_->handle(std::move(message), now);
}
void Coordinator::tick(double now) {
  impl_->tick(now);
}
void Coordinator::on_disconnected(const std::string& peer, double now) {
  impl_->on_disconnected(peer, now);
}
void Coordinator::stop(const std::string& reason, int exit_code, double now) {
  impl_->stop(reason, exit_code, now);
}
bool Coordinator::finished() const {
  return impl_->finished();
}
int Coordinator::exit_code() const {
  return impl_->exit_code();
}
const std::string& Coordinator::stop_reason() const {
  return impl_->stop_reason();
}
uint64_t Coordinator::step() const {
  return impl_->step();
}
const Ledger& Coordinator::ledger() const {
  return impl_->ledger();
}
const v1::RunTotals& Coordinator::totals() const {
  return impl_->totals();
}
double Coordinator::tau() const {
  return impl_->tau();
}
double Coordinator::epochs() const {
  return impl_->epochs();
}

}  // namespace dctrain
