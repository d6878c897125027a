// The trainer's steps over the data plane "exchange" (worker/data_plane.h):
// the plan's micro-batches are computed as on the star path, the partial sum
// is summed with the round's other members, and the worker reports its
// contribution without the gradient (the lowest member sends the round's
// sum right after, for the coordinator's replica: the coordinator commits
// on the reports alone, and the sum follows). The sum waits for the
// coordinator's commit, which every member gets alike: divide by its
// divisors and apply, or drop it. It stays as summed after the commit until
// the next round, so that another member can send it when the coordinator
// asks (the lowest died before its sum arrived). The contribution as
// computed is kept until the commit: when a round fails, the coordinator may
// redo it among the members left (a plan for the same step under the next
// attempt), and they sum what they computed again, without the member that
// failed. Before it commits, the coordinator may check the round
// (on_round_check_request): the tags of the sum held, under a key drawn
// after the round (a keyed sum check), and with the exchange's norm guard a
// sketch of the contribution.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "exchange/sum_digest.h"
#include "exchange/sum_sketch.h"
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
  data_plane_->admit(step, x);  // before the compute: see WorkerDataPlane::admit
  std::vector<ComputeOutput> out;
  if (x.attempt() > 0) {
    // A redo: the step's first round failed, and the coordinator runs it
    // again among the members left, on what each computed.
    exchange_round(job, out);
    return out;
  }
  held_.reset();
  Message contribution = loop_->run(plan, step, options_.name, job.received, false);

  // [gradient | statistics] as one buffer out of the arenas, which are
  // then zeroed for the next step beside the round and the commit's update
  // (start_zeroing): the gradient's own buffer when the model has no
  // statistics (traded for the arena's, without a copy), else a copy.
  Model& model = replica_->model();
  const size_t parameters = replica_->parameter_count();
  const size_t buffers = replica_->buffer_count();
  std::span<const float> values;
  if (buffers > 0) {
    exchange_values_.resize(parameters + buffers);
    std::copy_n(model.gradients().flat().data(), parameters, exchange_values_.data());
    std::copy_n(model.statistics().flat().data(), buffers, exchange_values_.data() + parameters);
    values = exchange_values_;
  } else {
    held_gradient_.resize(parameters);
    model.gradients().swap_storage(held_gradient_);
    values = held_gradient_;
  }
  start_zeroing();
  held_ = HeldContribution{step, std::move(contribution.envelope), values};
  exchange_round(job, out);
  return out;
}

void Trainer::start_zeroing() {
  finish_zeroing();
  const double asked = clock_.now();
  zeroing_ = std::async(std::launch::async, [this, asked] {
    const double begin = clock_.now();
    loop_->zero_for_next_step();
    return ZeroingSpan{asked, begin, clock_.now()};
  });
}

void Trainer::finish_zeroing() {
  if (!zeroing_.valid()) return;
  const ZeroingSpan z = zeroing_.get();
  // On the timeline of the step whose gradient it cleared (the compute
  // thread's trace, which the next compute moves on). The thread may start
  // a while after it was asked for when the cores are busy: the span is
  // its work, and `asked_us_before` says how long it waited to begin.
  if (loop_) {
    loop_->trace().span("zero gradients", z.begin, z.end,
                        {{"asked_us_before", std::llround((z.begin - z.asked) * 1e6)}});
  }
}

std::vector<float>& Trainer::writable_sum(size_t floats) {
  if (!exchange_sum_) {
    exchange_sum_ = std::make_shared<std::vector<float>>(floats);
  } else if (exchange_sum_.use_count() > 1) {
    // Rare: the commit (or a redo's plan) came before ZeroMQ let go of the
    // forwarded frames. They keep the old buffer; this one holds its values.
    exchange_sum_ = std::make_shared<std::vector<float>>(*exchange_sum_);
  }
  // Pairs with the release of the frames' references: ZeroMQ's reads of the
  // buffer happen before these writes.
  std::atomic_thread_fence(std::memory_order_acquire);
  exchange_sum_->resize(floats);
  return *exchange_sum_;
}

void Trainer::exchange_round(const ComputeJob& job, std::vector<ComputeOutput>& out) {
  const v1::ExchangePlan& x = job.message.envelope.plan().exchange();
  const uint64_t step = job.message.envelope.step();
  if (!held_ || held_->step != step) {
    // Nothing to redo the round with (this worker did not compute the step,
    // or has moved on): the round fails here, and the coordinator drops it.
    Message failed;
    failed.envelope = make_envelope(step, options_.name);
    v1::Contribution& c = *failed.envelope.mutable_contribution();
    c.set_parameter_checksum(replica_->parameter_checksum());
    v1::ExchangeReport& r = *c.mutable_exchange();
    r.set_attempt(x.attempt());
    r.set_error(fmt::format(
        "step {} attempt {}: this worker holds no contribution of the step to redo the round with",
        step, x.attempt()));
    log_->warn("{}", r.error());
    out.emplace_back(std::move(failed));
    return;
  }
  Message contribution;
  contribution.envelope = held_->envelope;
  v1::Contribution& c = *contribution.envelope.mutable_contribution();
  // A redo reports only its own span: the compute's events went with the
  // first round's report.
  if (x.attempt() > 0) c.clear_trace();
  const size_t parameters = replica_->parameter_count();
  const size_t buffers = replica_->buffer_count();
  summed_.reset();  // this round writes over the last one's sum
  std::vector<float>& sum = writable_sum(parameters + buffers);

  // A member waits for the others until each had its compute time (tau +
  // grace, from the plan's arrival) and then the run's timeout; with tau =
  // inf, or in a redo (deadline 0), the timeout from now.
  double wait_from = clock_.now();
  if (x.deadline_seconds() > 0.0) {
    wait_from = std::max(wait_from, job.received + x.deadline_seconds());
  }
  const double remaining = wait_from + config_.data_plane().timeout_seconds() - clock_.now();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(std::max(0.0, remaining)));
  const double exchange_begin = clock_.now();
  data_plane_->set_check_sums(config_.data_plane().check_sums());
  v1::ExchangeReport report =
      data_plane_->exchange(step, rank_, x, held_->values, sum, c.samples(), deadline);
  // The round as its own span of the step's timeline: the compute's events
  // were packed before it, so they are packed again with it.
  TraceRecorder& trace = loop_->trace();
  trace.span("exchange", exchange_begin, clock_.now(),
             {{"ok", report.ok() ? 1 : 0},
              {"members", x.member_ranks_size()},
              {"attempt", x.attempt()},
              {"floats", sum.size()}});
  trace.report_into(c, clock_.now());

  // One member forwards the sum: the coordinator's traffic per step stays
  // one gradient whatever the number of workers.
  const bool forwards = report.ok() && x.member_ranks_size() > 0 && x.member_ranks(0) == rank_;
  if (report.ok()) {
    summed_ = SummedRound{step, x.attempt()};
    report.set_sends_sum(forwards);
  }
  *c.mutable_exchange() = std::move(report);
  c.set_overhead_seconds(std::max(0.0, clock_.now() - job.received - c.compute_seconds()));
  log_->debug(
      "step {}: {} micro-batches done, {} dropped, {:.3f} s compute, exchange (attempt {}) {} in "
      "{:.3f} s",
      step, c.completed_size(), c.dropped_size(), c.compute_seconds(), x.attempt(),
      c.exchange().ok() ? "ok" : "failed", c.exchange().exchange_seconds());
  out.emplace_back(std::move(contribution));
  // After the report, which the coordinator commits on without waiting for
  // the 4 bytes per parameter behind it.
  if (forwards) out.emplace_back(sum_message(step, x.attempt()));
}

Message Trainer::sum_message(uint64_t step, uint32_t attempt) {
  Message m;
  m.envelope = make_envelope(step, options_.name);
  m.envelope.mutable_exchange_sum()->set_attempt(attempt);
  // Without a copy: the frames keep the buffer until ZeroMQ has sent them.
  const size_t parameters = replica_->parameter_count();
  const std::span<const float> values = *exchange_sum_;
  add_tensor_view(m, "gradient", values.first(parameters), exchange_sum_);
  if (replica_->buffer_count() > 0) {
    add_tensor_view(m, "statistics", values.subspan(parameters), exchange_sum_);
  }
  return m;
}

Message Trainer::on_sum_request(const Message& request) {
  const uint64_t step = request.envelope.step();
  const uint32_t attempt = request.envelope.sum_request().attempt();
  if (summed_ && summed_->step == step && summed_->attempt == attempt && summed_->as_summed) {
    log_->warn("step {}: the coordinator asks this worker for the round's sum; sending it", step);
    return sum_message(step, attempt);
  }
  Message refused;
  refused.envelope = make_envelope(step, options_.name);
  v1::ExchangeSum& body = *refused.envelope.mutable_exchange_sum();
  body.set_attempt(attempt);
  body.set_error(
      summed_ && summed_->step == step && summed_->attempt == attempt
          ? std::string("its sum was averaged and clipped in place when the commit was applied "
                        "(the run clips the gradient's norm)")
          : fmt::format("it holds no sum of step {} attempt {}", step, attempt));
  log_->warn("step {}: the coordinator asks for the round's sum, but {}", step, body.error());
  return refused;
}

Message Trainer::on_round_check_request(const Message& request) {
  const uint64_t step = request.envelope.step();
  const v1::RoundCheckRequest& r = request.envelope.round_check_request();
  Message answer;
  answer.envelope = make_envelope(step, options_.name);
  v1::RoundCheckAnswer& body = *answer.envelope.mutable_round_check_answer();
  body.set_attempt(r.attempt());
  body.set_seed(r.seed());
  const SketchShape shape{replica_->parameter_count(),
                          replica_->parameter_count() + replica_->buffer_count(), r.shards(),
                          r.buckets(), r.seed()};
  // The sum is held as summed until the commit (the check comes before it).
  const bool holds_sum = summed_ && summed_->step == step && summed_->attempt == r.attempt() &&
                         summed_->as_summed && !summed_->committed && exchange_sum_;
  if (!held_ || held_->step != step) {
    body.set_error(fmt::format("it holds no contribution of step {}", step));
  } else if (r.shards() == 0 || r.buckets() > kMaxSketchBuckets || r.shards() > kMaxSketchShards) {
    body.set_error(fmt::format("a check of {} shards and {} buckets is not one it computes",
                               r.shards(), r.buckets()));
  } else if (!r.sum_key().empty() && r.sum_key().size() != kSumKeyBytes) {
    body.set_error(fmt::format("a sum key of {} bytes is not one it takes (it takes {})",
                               r.sum_key().size(), kSumKeyBytes));
  } else if (!r.sum_key().empty() && !holds_sum) {
    body.set_error(
        fmt::format("it holds no sum of step {} attempt {} as summed", step, r.attempt()));
  } else {
    if (r.buckets() > 0) {
      const std::vector<double> sketch = sketch_shards(held_->values, shape);
      body.mutable_values()->Assign(sketch.begin(), sketch.end());
    }
    if (!r.sum_key().empty()) {
      const double begin = clock_.now();
      for (std::string& tag :
           shard_tags(*exchange_sum_, r.shards(), std::as_bytes(std::span(r.sum_key())))) {
        body.add_sum_tags(std::move(tag));
      }
      loop_->trace().span("sum tags", begin, clock_.now(), {{"shards", r.shards()}});
    }
    return answer;
  }
  log_->warn("step {}: the coordinator asks to check this worker's round, but {}", step,
             body.error());
  return answer;
}

void Trainer::on_commit(const Message& commit) {
  const v1::Update& u = commit.envelope.update();
  const uint64_t step = commit.envelope.step();
  const bool held = summed_ && summed_->step == step && !summed_->committed;
  if (held) summed_->committed = true;
  held_.reset();
  loop_->end_local_steps();
  // The apply as a span of the step's timeline (it travels with the next
  // step's report), as on the star path.
  TraceRecorder& trace = loop_->trace();
  const double begin = clock_.now();
  if (!u.applied()) {  // dropped by the coordinator: the sum goes
    if (step == trace.step()) trace.span("apply", begin, begin, {{"applied", 0}});
    return;
  }
  if (!held) {
    throw std::runtime_error(fmt::format(
        "step {}: the coordinator commits an exchange round whose sum this worker does not hold; "
        "its replica can no longer follow the run (restart the worker to rejoin)",
        step));
  }
  const size_t parameters = replica_->parameter_count();
  const size_t buffers = replica_->buffer_count();
  // The sum stays as summed (another member may be asked for it, and the
  // lowest member's frames may still be on their way), unless the run clips:
  // then the gradient is averaged and clipped in place, in a buffer of its
  // own while frames hold the sum.
  std::span<float> sum;
  if (replica_->clips()) {
    sum = writable_sum(parameters + buffers);
    if (summed_) summed_->as_summed = false;
  } else {
    // Only read from here on (Replica::apply_summed_update writes the
    // gradient only when the run clips).
    sum = *exchange_sum_;
  }
  const std::span<float> gradient = sum.first(parameters);
  // The same float operations as the coordinator's Reducer::finish, so every
  // replica, the coordinator's included, gets the same bits; the gradient's
  // division inside the optimizer's pass, which saves one over it before
  // the next compute.
  averaged_statistics_.assign(sum.begin() + static_cast<std::ptrdiff_t>(parameters),
                              sum.begin() + static_cast<std::ptrdiff_t>(parameters + buffers));
  if (u.statistics_divisor() > 0.0) {
    const auto d = static_cast<float>(u.statistics_divisor());
    for (float& s : averaged_statistics_) s /= d;
  }
  const std::span<const float> statistics = averaged_statistics_;
  const float divisor =
      u.gradient_divisor() > 0.0 ? static_cast<float>(u.gradient_divisor()) : 1.0f;
  loop_->applied(replica_->apply_summed_update(gradient, divisor, statistics, u.learning_rate()));
  if (step == trace.step()) trace.span("apply", begin, clock_.now(), {{"applied", 1}});
}

}  // namespace dctrain
