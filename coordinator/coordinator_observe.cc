// The coordinator's evaluations and its live metrics: the members of
// CoordinatorImpl (coordinator/coordinator_impl.h) that concern them, kept
// apart from the step logic in coordinator_steps.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "common/files.h"
#include "common/run_files.h"
#include "coordinator/coordinator_impl.h"
#include "metrics/metrics_json.h"

namespace dctrain {

double CoordinatorImpl::request_evaluation(double now) {
  apply_pending();  // the state evaluated is the replica after this step
  Evaluations& evaluations = *evaluations_;
  const double begin = clock_();
  const uint64_t step = metrics_.totals().steps();
  collect_evaluation(false, now);  // one that finished since the step closed
  if (evaluations.busy()) {
    // Waiting, not skipping: every evaluation the config asks for happens,
    // so runs stay comparable record for record (and a resumed run with
    // the unbroken one); the steps wait only when evaluations take longer
    // than eval.every_steps steps.
    const std::optional<uint64_t> previous = evaluations.pending_step();
    log_->info(
        "evaluation of step {} waits for the one of step {}, still running: evaluations take "
        "longer than eval.every_steps ({}) steps; raise it to keep the steps going",
        step, previous.value_or(0), config_.eval().every_steps());
    v1::RunTotals& t = metrics_.totals();
    t.set_evaluations_waited(t.evaluations_waited() + 1);
    collect_evaluation(true, now);
  }
  evaluations.start(replica_.model(), {step, wall(now), epochs()});
  if (evaluations.in_step_loop()) collect_evaluation(true, now);
  // On the timeline: what the step loop spent on it (off the step loop: the
  // snapshot and any wait; the evaluation itself runs beside the next steps).
  const double end = clock_();
  timeline_.span("evaluation", begin, end);
  return end - begin;
}

bool CoordinatorImpl::collect_evaluation(bool wait, double now) {
  if (evaluations_ == nullptr) return false;
  const std::optional<EvaluationResult> result = wait ? evaluations_->wait() : evaluations_->take();
  if (result) record_evaluation(*result, wait ? clock_() : now);
  return result.has_value();
}

void CoordinatorImpl::record_evaluation(const EvaluationResult& result, double now) {
  const EvaluationRequest& at = result.request;
  if (!result.error.empty()) {
    log_->error("evaluation of step {} failed: {}", at.step, result.error);
    return;
  }
  const Evaluation& e = result.evaluation;
  v1::RunTotals& t = metrics_.totals();
  t.set_has_eval(true);
  t.set_last_eval_loss(e.loss);
  t.set_last_eval_accuracy(e.accuracy);
  t.set_last_eval_step(at.step);
  v1::EvalRecord r;
  r.set_step(static_cast<uint32_t>(at.step));
  r.set_epochs(at.epochs);
  r.set_wall_seconds(at.wall_seconds);
  r.set_finished_wall_seconds(wall(now));
  r.set_eval_loss(e.loss);
  r.set_eval_accuracy(e.accuracy);
  r.set_samples(static_cast<uint32_t>(e.samples));
  r.set_seconds(result.seconds);
  metrics_.record_eval(r);
  ++evaluations_finished_;
  const uint64_t went_on = t.steps() - std::min(t.steps(), at.step);
  log_->info(
      "eval after step {}: loss {:.4f}, accuracy {:.2f}% on {} held-out samples ({:.1f} s{})",
      at.step, e.loss, 100.0 * e.accuracy, e.samples, result.seconds,
      went_on > 0 ? fmt::format(", {} more steps done meanwhile", went_on) : std::string());
  const double target = config_.stop().target_accuracy();
  if (target > 0.0 && e.accuracy >= target && !t.reached_target()) {
    // The clock of the state that reached it, not of the result's arrival.
    t.set_reached_target(true);
    t.set_time_to_target_seconds(at.wall_seconds);
    t.set_target_step(at.step);
    log_->info("target accuracy {:.2f}% reached by the model after step {} (wall {:.1f} s)",
               100.0 * target, at.step, at.wall_seconds);
  }
}

void CoordinatorImpl::resume_evaluations(double now) {
  if (evaluations_ == nullptr || setup_.run_dir.empty()) return;
  const uint64_t at = setup_.resume->next_step();  // steps done at the checkpoint
  const MetricsRecords kept = parse_metrics(
      read_file_if_present(setup_.run_dir / run_files::kMetrics).value_or(""), run_files::kMetrics);
  v1::RunTotals& t = metrics_.totals();
  // An evaluation off the step loop finishes after the checkpoint of its
  // step was written: its record survived, its result is not in the totals.
  for (const v1::EvalRecord& r : kept.evals) {
    if (r.step() != at || (t.has_eval() && t.last_eval_step() >= at)) continue;
    EvaluationResult adopted;
    adopted.request = {r.step(), r.wall_seconds(), r.epochs()};
    adopted.evaluation = {r.eval_loss(), r.eval_accuracy(), r.samples()};
    t.set_has_eval(true);
    t.set_last_eval_loss(r.eval_loss());
    t.set_last_eval_accuracy(r.eval_accuracy());
    t.set_last_eval_step(r.step());
    const double target = config_.stop().target_accuracy();
    if (target > 0.0 && r.eval_accuracy() >= target && !t.reached_target()) {
      t.set_reached_target(true);
      t.set_time_to_target_seconds(r.wall_seconds());
      t.set_target_step(r.step());
    }
    ++evaluations_finished_;
    log_->info("resuming: took the evaluation of step {} recorded after the checkpoint", at);
    return;
  }
  if (t.has_eval() && t.last_eval_step() >= at) return;
  // Due at the checkpoint's step but never recorded (the process died while
  // it ran): the restored replica is exactly that step's state.
  const uint64_t every = config_.eval().every_steps();
  bool due = at > 0 && every > 0 && at % every == 0;
  for (const v1::EpochRecord& r : kept.epochs) due = due || (every == 0 && r.step() == at);
  if (!due) return;
  double step_wall = t.wall_seconds();
  for (const v1::StepRecord& r : kept.steps) {
    if (r.step() + 1 == at) step_wall = r.wall_seconds();
  }
  log_->info("resuming: evaluating the restored model of step {}, due before the interruption", at);
  evaluations_->start(replica_.model(), {at, step_wall, epochs()});
  if (evaluations_->in_step_loop()) collect_evaluation(true, now);
}

void CoordinatorImpl::publish_live(double now) {
  if (!setup_.publish_metrics) return;
  auto s = std::make_shared<LiveSnapshot>();
  const v1::RunTotals& t = metrics_.totals();
  s->steps = t.steps();
  s->epoch = ledger_.epoch();
  s->epochs = epochs();
  s->wall_seconds = phase_ == Phase::kJoining ? wall_offset_ : wall(now);
  s->samples = t.samples_completed();
  s->samples_per_second = live_metrics_.samples_per_second();
  s->microbatches_completed = t.microbatches_completed();
  s->microbatches_dropped = t.microbatches_dropped();
  s->microbatches_orphaned = t.microbatches_orphaned();
  const uint64_t planned =
      s->microbatches_completed + s->microbatches_dropped + s->microbatches_orphaned;
  s->drop_rate = planned == 0
                     ? 0.0
                     : static_cast<double>(s->microbatches_dropped + s->microbatches_orphaned) /
                           static_cast<double>(planned);
  s->tau = threshold_.tau();
  s->last_step_seconds = live_metrics_.last_step_seconds();
  s->workers_expected = config_.workers();
  s->workers_alive = static_cast<uint32_t>(membership_.live_count());
  s->has_loss = live_metrics_.has_loss();
  s->loss = live_metrics_.loss();
  s->has_eval = t.has_eval();
  s->eval_step = t.last_eval_step();
  s->eval_accuracy = t.last_eval_accuracy();
  s->eval_loss = t.last_eval_loss();
  s->evaluations = evaluations_finished_;
  s->evaluations_waited = t.evaluations_waited();
  s->reached_target = t.reached_target();
  s->target_step = t.target_step();
  s->finished = phase_ == Phase::kFinished;
  std::map<std::string, std::string> slow;
  for (const auto& [w, cause] : worker_summary_.slow_workers()) slow[w.name] = cause;
  std::map<std::string, WorkerLiveMetrics> workers = live_metrics_.workers();
  for (uint32_t rank : membership_.live_ranks()) {
    const Member& m = membership_.at(rank);
    WorkerLiveMetrics& w = workers[m.name];  // a worker that joined since its last step
    w.name = m.name;
    w.rank = rank;
    w.alive = true;
  }
  for (auto& [name, w] : workers) {
    if (const auto it = slow.find(name); it != slow.end()) w.slow_cause = it->second;
    s->workers.push_back(std::move(w));
  }
  setup_.publish_metrics(std::move(s));
}

}  // namespace dctrain
