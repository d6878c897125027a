// The trainer's steps over the data plane "exchange" (worker/data_plane.h):
// the plan's micro-batches are computed as on the star path, the partial sum
// is summed with the round's other members, and the worker reports its
// contribution without the gradient (the lowest member adds the round's
// sum, for the coordinator's replica). The sum waits for the coordinator's
// commit, which every member gets alike: divide by its divisors and apply,
// or drop it.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "comm/framing.h"
#include "worker/trainer.h"

namespace dctrain {

std::vector<ComputeOutput> Trainer::on_exchange_plan(const ComputeJob& job) {
  const v1::Plan& plan = job.message.envelope.plan();
  const v1::ExchangePlan& x = plan.exchange();
  const uint64_t step = job.message.envelope.step();
  if (data_plane_ == nullptr) {
    throw std::runtime_error(
        fmt::format("step {}: the plan names an exchange round but this worker has no exchange "
                    "endpoint",
                    step));
  }
  sum_step_.reset();
  data_plane_->admit(step, x);  // before the compute: see WorkerDataPlane::admit
  Message contribution = loop_->run(plan, step, options_.name, job.received, false);
  v1::Contribution& c = *contribution.envelope.mutable_contribution();

  // [gradient | statistics] as one buffer: in place in the gradient arena
  // when the model has no statistics (the arena is free until the commit).
  Model& model = replica_->model();
  const size_t parameters = replica_->parameter_count();
  const size_t buffers = replica_->buffer_count();
  std::span<float> buffer = model.gradients().flat();
  if (buffers > 0) {
    exchange_buffer_.resize(parameters + buffers);
    std::copy_n(model.gradients().flat().data(), parameters, exchange_buffer_.data());
    std::copy_n(model.statistics().flat().data(), buffers, exchange_buffer_.data() + parameters);
    buffer = exchange_buffer_;
  }

  // A member waits for the others until each had its compute time (tau +
  // grace, from the plan's arrival) and then the run's timeout; with tau =
  // inf, the timeout from the end of its own compute.
  double wait_from = clock_.now();
  if (x.deadline_seconds() > 0.0) {
    wait_from = std::max(wait_from, job.received + x.deadline_seconds());
  }
  const double remaining = wait_from + config_.data_plane().timeout_seconds() - clock_.now();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(std::max(0.0, remaining)));
  const double exchange_begin = clock_.now();
  v1::ExchangeReport report = data_plane_->exchange(step, rank_, x, buffer, c.samples(), deadline);
  // The round as its own span of the step's timeline: the compute's events
  // were packed before it, so they are packed again with it.
  TraceRecorder& trace = loop_->trace();
  trace.span(
      "exchange", exchange_begin, clock_.now(),
      {{"ok", report.ok() ? 1 : 0}, {"members", x.member_ranks_size()}, {"floats", buffer.size()}});
  trace.report_into(c, clock_.now());

  if (report.ok()) {
    sum_step_ = step;
    if (x.member_ranks_size() > 0 && x.member_ranks(0) == rank_) {
      // One member forwards the sum: the coordinator's traffic per step
      // stays one gradient whatever the number of workers.
      report.set_carries_sum(true);
      add_tensor(contribution, "gradient", buffer.first(parameters));
      if (buffers > 0) add_tensor(contribution, "statistics", buffer.subspan(parameters));
    }
  }
  *c.mutable_exchange() = std::move(report);
  c.set_overhead_seconds(std::max(0.0, clock_.now() - job.received - c.compute_seconds()));
  log_->debug(
      "step {}: {} micro-batches done, {} dropped, {:.3f} s compute, exchange {} in "
      "{:.3f} s",
      step, c.completed_size(), c.dropped_size(), c.compute_seconds(),
      c.exchange().ok() ? "ok" : "failed", c.exchange().exchange_seconds());
  std::vector<ComputeOutput> out;
  out.emplace_back(std::move(contribution));
  return out;
}

void Trainer::on_commit(const Message& commit) {
  const v1::Update& u = commit.envelope.update();
  const uint64_t step = commit.envelope.step();
  const bool held = sum_step_ == step;
  sum_step_.reset();
  if (!u.applied()) return;  // dropped by the coordinator: the sum goes
  if (!held) {
    throw std::runtime_error(fmt::format(
        "step {}: the coordinator commits an exchange round whose sum this worker does not hold; "
        "its replica can no longer follow the run (restart the worker to rejoin)",
        step));
  }
  const size_t parameters = replica_->parameter_count();
  const size_t buffers = replica_->buffer_count();
  std::span<float> gradient = replica_->model().gradients().flat();
  std::span<float> statistics;
  if (buffers > 0) {
    gradient = std::span<float>(exchange_buffer_).first(parameters);
    statistics = std::span<float>(exchange_buffer_).subspan(parameters, buffers);
  }
  // The same float operations as the coordinator's Reducer::finish, so every
  // replica, the coordinator's included, gets the same bits.
  if (u.gradient_divisor() > 0.0) {
    const auto d = static_cast<float>(u.gradient_divisor());
    for (float& g : gradient) g /= d;
  }
  if (u.statistics_divisor() > 0.0) {
    const auto d = static_cast<float>(u.statistics_divisor());
    for (float& s : statistics) s /= d;
  }
  replica_->apply_update(gradient, statistics, u.learning_rate());
}

}  // namespace dctrain
