// Policy "async": the coordinator as the parameter server
// (coordinator/step/async_flights.h). Each ready worker without a plan gets
// one, its share of the global batch and the replica's parameters, as soon
// as the staleness bound admits it; each contribution that lands is a step
// of its own, settled, guarded, applied and recorded by the same
// close_step() as a synchronous step, with its staleness.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "comm/framing.h"
#include "coordinator/coordinator_impl.h"
#include "runtime/text_format.h"

namespace dctrain {

namespace {

// A worker's share of the global batch in whole micro-batches (at least one).
uint32_t async_share(const v1::RunConfig& config) {
  const uint32_t micro_batch = config.step().micro_batch();
  const uint32_t per_worker = config.step().global_batch() / std::max(1u, config.workers());
  return std::max(micro_batch, per_worker / micro_batch * micro_batch);
}

}  // namespace

void CoordinatorImpl::send_async_plans(double now) {
  const double tau = threshold_.tau();
  const double grace = config_.liveness().grace_seconds();
  for (uint32_t rank : membership_.ready_ranks()) {
    if (flights_->find(rank) != nullptr) continue;
    if (!flights_->admits(step_)) return;
    const uint32_t ranks[] = {rank};
    std::vector<WorkerPlan> plans =
        plan_step(ledger_, ranks, step_, async_share(config_), config_.step().micro_batch());
    if (plans.empty() || plans.front().micro_batches.empty()) {
      // What is left of the epoch is in flight: the next epoch starts once
      // it has landed, so that the epoch's audit stays exact.
      if (!flights_->empty() || !ledger_.epoch_complete()) return;
      ledger_.start_next_epoch();
      epoch_samples_ = 0;
      plans = plan_step(ledger_, ranks, step_, async_share(config_), config_.step().micro_batch());
      if (plans.empty() || plans.front().micro_batches.empty()) return;
    }
    Flight flight;
    flight.planned.rank = rank;
    Message m = plan_message(plans.front(), flight.planned, tau);
    m.envelope.mutable_plan()->set_carries_parameters(true);
    add_tensor(m, "parameters", replica_.model().parameters().flat());
    if (replica_.buffer_count() > 0) add_tensor(m, "buffers", replica_.buffers());
    flight.version = step_;
    flight.checksum = start_checksum_;
    flight.sent = now;
    flight.deadline = std::isinf(tau) ? std::numeric_limits<double>::infinity() : now + tau + grace;
    timeline_.plan(step_, *m.envelope.mutable_plan(), clock_());
    send(membership_.at(rank).name, std::move(m));
    flights_->send(rank, std::move(flight));
  }
}

void CoordinatorImpl::on_async_contribution(uint32_t rank, Message message, double now) {
  const std::string& peer = membership_.at(rank).name;
  const uint64_t version = message.envelope.step();
  Flight* flight = flights_->find(rank);
  if (phase_ != Phase::kStepping || flight == nullptr || flight->version != version) {
    log_->warn("dropped worker '{}' (rank {})'s contribution computed at update {}: {}", peer, rank,
               version,
               flight == nullptr
                   ? "it has no plan in flight"
                   : fmt::format("its plan in flight is of update {}", flight->version));
    return;
  }
  if (const std::optional<std::string> problem = contribution_problem(flight->planned, message)) {
    if (!tensors_finite(message)) guard_.nonfinite_contribution();
    log_->error("rejected worker '{}' (rank {})'s contribution computed at update {}: {}", peer,
                rank, version, *problem);
    lose_flight(rank, "its contribution was rejected");
    return;
  }
  const v1::Contribution& c = message.envelope.contribution();
  if (c.parameter_checksum() != flight->checksum) {
    v1::RunTotals& t = metrics_.totals();
    t.set_checksum_mismatches(t.checksum_mismatches() + 1);
    lose_flight(rank, fmt::format("it computed on other parameters than its plan carried "
                                  "(checksum {:016x}, sent {:016x})",
                                  c.parameter_checksum(), flight->checksum));
    return;
  }
  // The contribution is the open step: its one member, planned when its
  // plan went out.
  Flight landed = *flights_->end(rank);
  staleness_ = step_ - landed.version;
  planned_.clear();
  planned_.plan(rank) = std::move(landed.planned);
  step_started_ = landed.sent;
  worker_summary_.step_started(step_, landed.sent);
  worker_summary_.contribution_arrived(peer, step_, c, now);
  const uint32_t members[] = {rank};
  plane_->open_step({members, members + 1}, now, threshold_.tau());
  plane_->accept(rank, std::move(message), now);
  close_step(now);
}

void CoordinatorImpl::lose_flight(uint32_t rank, const std::string& why) {
  const std::optional<Flight> lost = flights_->end(rank);
  if (!lost) return;
  ledger_.orphan_worker(rank);
  v1::RunTotals& t = metrics_.totals();
  t.set_microbatches_orphaned(t.microbatches_orphaned() + lost->planned.micro_batches.size());
  if (!config_.step().requeue()) {
    t.set_samples_lost(t.samples_lost() + lost->planned.samples);
    epoch_samples_ += lost->planned.samples;
  }
  log_->warn(
      "worker '{}' (rank {})'s plan of update {} is lost because {}; its {} micro-batches "
      "({} samples) are {}",
      membership_.at(rank).name, rank, lost->version, why, lost->planned.micro_batches.size(),
      lost->planned.samples, config_.step().requeue() ? "requeued" : "lost");
}

void CoordinatorImpl::tick_flights(double now) {
  for (uint32_t rank : flights_->past_deadline(now)) {
    lose_flight(rank,
                fmt::format("it missed the deadline (tau {} + grace {:.3g} s)",
                            describe_tau(threshold_.tau()), config_.liveness().grace_seconds()));
    Member& m = membership_.at(rank);
    ++m.missed_in_a_row;
    if (m.live && missed_too_many(m)) {
      release(rank, fmt::format("after missing {} deadlines in a row", m.missed_in_a_row));
    }
  }
  send_async_plans(now);
}

}  // namespace dctrain
