#include "worker/compute_loop.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "comm/envelope.h"
#include "comm/framing.h"

namespace dctrain {

ComputeLoop::ComputeLoop(Replica& replica, const Dataset& train, uint64_t data_seed,
                         DelayModel& delays, WorkerClock& clock, const LatestPlan* latest,
                         std::unique_ptr<LocalSteps> local)
    : replica_(replica),
      train_(train),
      data_seed_(data_seed),
      delays_(delays),
      clock_(clock),
      latest_(latest),
      local_(std::move(local)) {}

Message ComputeLoop::run(const v1::Plan& plan, uint64_t step, const std::string& sender,
                         double received, bool attach_tensors) {
  const auto since = [this](double t) { return clock_.now() - t; };
  Model& model = replica_.model();
  Message out;
  out.envelope = make_envelope(step, sender);
  v1::Contribution& c = *out.envelope.mutable_contribution();
  c.set_parameter_checksum(start_checksum());
  start_checksum_.reset();  // the compute's update will change the parameters

  trace_.begin_step(step, plan, received);
  if (!zeroed_) zero_for_next_step();
  zeroed_ = false;
  const double start = clock_.now();
  double loss_sum = 0.0;
  int64_t loss_terms = 0, samples = 0, correct = 0;
  bool closed = false;
  // Policy "local-sgd": the micro-batch that ends each local step, and the
  // loss terms of the step under way.
  std::vector<size_t> step_ends;
  if (plan.has_local()) {
    if (!local_) throw std::runtime_error("a plan with local steps, but the run is not local-sgd");
    step_ends =
        local_step_ends(static_cast<size_t>(plan.micro_batches_size()), plan.local().steps());
    local_->begin(model.parameters().flat());
  }
  auto step_end = step_ends.begin();
  int64_t step_terms = 0;
  for (int index = 0; index < plan.micro_batches_size(); ++index) {
    const v1::MicroBatch& mb = plan.micro_batches(index);
    closed = closed || (latest_ != nullptr && latest_->closes(step));
    if (closed || since(start) >= plan.tau()) {
      c.add_dropped(mb.id());
      trace_.instant(
          closed ? "micro-batch not started: the step was closed" : "dropped micro-batch",
          clock_.now(), {{"micro_batch", mb.id()}});
    } else {
      const MicroBatchResult r = run_micro_batch(mb, plan.tau(), start, c);
      loss_sum += r.loss_sum;
      loss_terms += r.loss_terms;
      step_terms += r.loss_terms;
      samples += r.samples;
      correct += r.correct;
    }
    if (step_end != step_ends.end() && static_cast<size_t>(index) == *step_end) {
      const double begin = clock_.now();
      local_->step(model.parameters().flat(), model.gradients().flat(),
                   static_cast<uint64_t>(step_terms), plan.local().learning_rate());
      trace_.span("local step", begin, clock_.now(), {{"loss_terms", step_terms}});
      step_terms = 0;
      ++step_end;
    }
  }
  if (plan.has_local()) {
    local_->delta(model.parameters().flat(), model.gradients().flat(),
                  static_cast<uint64_t>(loss_terms));
  }
  const double compute = since(start);
  c.set_compute_seconds(compute);
  c.set_loss_sum(loss_sum);
  c.set_loss_terms(static_cast<uint64_t>(loss_terms));
  c.set_samples(static_cast<uint64_t>(samples));
  c.set_correct(static_cast<uint64_t>(correct));
  if (attach_tensors) {
    add_tensor(out, "gradient", model.gradients().flat());
    if (replica_.buffer_count() > 0) add_tensor(out, "statistics", model.statistics().flat());
  }
  c.set_overhead_seconds(std::max(0.0, since(received) - compute));
  trace_.span("compute", start, start + compute,
              {{"completed", c.completed_size()}, {"dropped", c.dropped_size()}});
  if (std::isfinite(plan.tau())) trace_.instant("tau", start + plan.tau(), {{"tau", plan.tau()}});
  trace_.span("pack contribution", start + compute, clock_.now());
  trace_.report_into(c, clock_.now());
  return out;
}

MicroBatchResult ComputeLoop::run_micro_batch(const v1::MicroBatch& mb, double tau, double start,
                                              v1::Contribution& c) {
  const auto since = [this](double t) { return clock_.now() - t; };
  const double begin = clock_.now();
  ids_.assign(mb.samples().begin(), mb.samples().end());
  train_.fill(ids_, SampleContext{data_seed_, mb.epoch(), true}, batch_);
  const MicroBatchResult r = replica_.model().train_micro_batch(batch_);
  const double computed = since(begin);
  double delay = delays_.delay_after(computed);
  if (delays_.caps_at_tau()) delay = std::min(delay, std::max(0.0, tau - since(start)));
  const double delay_begin = clock_.now();
  if (delay > 0.0) clock_.sleep(delay);
  v1::MicroBatchTime& t = *c.add_completed();
  t.set_id(mb.id());
  t.set_compute_seconds(since(begin));
  t.set_delay_seconds(delay);
  trace_.span("micro-batch", begin, begin + t.compute_seconds(),
              {{"micro_batch", mb.id()}, {"samples", r.samples}, {"delay_seconds", delay}});
  if (delay > 0.0) trace_.span("injected delay", delay_begin, begin + t.compute_seconds());
  return r;
}

uint64_t ComputeLoop::start_checksum() {
  if (!start_checksum_) start_checksum_ = replica_.parameter_checksum();
  return *start_checksum_;
}

void ComputeLoop::zero_for_next_step() {
  Model& model = replica_.model();
  model.gradients().zero();
  if (replica_.buffer_count() > 0) model.statistics().zero();
  zeroed_ = true;
}

void ComputeLoop::end_local_steps() {
  if (local_) local_->restore(replica_.model().parameters().flat());
}

void ComputeLoop::apply(const Message& update) {
  end_local_steps();
  zeroed_ = false;  // the update lands in the gradient arena
  const double begin = clock_.now();
  start_checksum_.reset();
  if (!update.envelope.update().applied()) {
    if (update.envelope.step() == trace_.step())
      trace_.span("apply", begin, begin, {{"applied", 0}});
    return;
  }
  Model& model = replica_.model();
  // The gradient arena is free between steps: the update lands there.
  std::span<float> gradient = model.gradients().flat();
  copy_tensor(update, 0, gradient);
  statistics_.resize(replica_.buffer_count());
  if (!statistics_.empty()) copy_tensor(update, 1, statistics_);
  start_checksum_ =
      replica_.apply_update(gradient, statistics_, update.envelope.update().learning_rate());
  if (update.envelope.step() == trace_.step())
    trace_.span("apply", begin, clock_.now(), {{"applied", 1}});
}

}  // namespace dctrain
