#include "coordinator/worker_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/median.h"
#include "metrics/metrics_json.h"

namespace dctrain {

namespace {

// Steps whose start time is kept, so that a contribution arriving this many
// steps late still gets its lag measured.
constexpr size_t kRecentSteps = 256;

}  // namespace

double WorkerTotals::mean_micro_batch_seconds() const {
  return timed == 0 ? 0.0 : micro_batch_seconds / static_cast<double>(timed);
}

double WorkerTotals::mean_communication_seconds() const {
  return arrivals == 0 ? 0.0 : communication_seconds / static_cast<double>(arrivals);
}

double WorkerTotals::achieved_flops_per_second(double training_flops_per_sample) const {
  const double model_seconds = micro_batch_seconds - delay_seconds;
  if (timed_samples == 0 || model_seconds <= 0.0) return 0.0;
  return training_flops_per_sample * static_cast<double>(timed_samples) / model_seconds;
}

double WorkerTotals::mfu(double training_flops_per_sample) const {
  if (!blas || blas->sgemm_gflops() <= 0.0) return 0.0;
  return achieved_flops_per_second(training_flops_per_sample) /
         (blas->sgemm_gflops() * 1e9 * threads);
}

void WorkerSummary::joined(const std::string& name, uint32_t rank, const v1::Hello& hello) {
  WorkerTotals& w = workers_[name];
  w.name = name;
  w.rank = rank;
  if (hello.has_blas()) w.blas = hello.blas();
  w.threads = std::max<uint32_t>(hello.threads(), 1);
}

void WorkerSummary::step_started(uint64_t step, double now) {
  started_[step] = now;
  while (started_.size() > kRecentSteps) started_.erase(started_.begin());
  open_step_ = step;
  step_open_ = true;
  arrival_in_open_step_.clear();
}

bool WorkerSummary::contribution_arrived(const std::string& name, uint64_t step,
                                         const v1::Contribution& c, double now) {
  const auto started = started_.find(step);
  if (started == started_.end()) return true;  // a step this process never planned
  const double arrival = now - started->second;
  const auto usable = [](double seconds) { return std::isfinite(seconds) && seconds >= 0.0; };
  if (!usable(arrival) || !usable(c.compute_seconds()) || !usable(c.overhead_seconds())) {
    return false;
  }
  if (c.samples() > static_cast<uint64_t>(c.completed_size()) * largest_micro_batch_) return false;
  // Summed before anything is counted: every time, and the totals they
  // would give, must be usable.
  double micro_batch_seconds = 0.0;
  double delay_seconds = 0.0;
  for (const v1::MicroBatchTime& t : c.completed()) {
    if (!usable(t.compute_seconds()) || !usable(t.delay_seconds())) return false;
    micro_batch_seconds += t.compute_seconds();
    delay_seconds += std::min(t.delay_seconds(), t.compute_seconds());
  }
  // Looked up without adding it: a refused contribution leaves no trace.
  const auto found = workers_.find(name);
  const WorkerTotals none;
  const WorkerTotals& before = found == workers_.end() ? none : found->second;
  // What the worker did not spend computing or waiting in its own queue was
  // spent between the hosts: the plan on its way out, the contribution on
  // its way back.
  const double communication = std::max(0.0, arrival - c.compute_seconds() - c.overhead_seconds());
  const bool late = !(step_open_ && step == open_step_);
  if (!usable(before.micro_batch_seconds + micro_batch_seconds) ||
      !usable(before.delay_seconds + delay_seconds) || !usable(before.arrival_seconds + arrival) ||
      !usable(before.communication_seconds + communication) ||
      (late && !usable(before.late_arrival_seconds + arrival))) {
    return false;
  }
  WorkerTotals& w = workers_[name];
  w.name = name;
  ++w.arrivals;
  w.arrival_seconds += arrival;
  w.communication_seconds += communication;
  // A late contribution was computed all the same: its times count.
  w.micro_batch_seconds += micro_batch_seconds;
  w.delay_seconds += delay_seconds;
  w.timed += static_cast<uint64_t>(c.completed_size());
  w.timed_samples += c.samples();
  if (!late) {
    arrival_in_open_step_[name] = arrival;
  } else {
    ++w.late;
    w.late_arrival_seconds += arrival;
  }
  return true;
}

void WorkerSummary::step_closed(v1::StepRecord& record,
                                const std::map<uint32_t, uint64_t>& planned) {
  for (v1::WorkerStep& r : *record.mutable_workers()) {
    WorkerTotals& w = workers_[r.name()];
    w.name = r.name();
    w.rank = r.rank();
    ++w.steps_planned;
    std::optional<double> arrival_seconds;
    if (r.contributed()) {
      ++w.steps_contributed;
      const auto arrival = arrival_in_open_step_.find(r.name());
      if (arrival != arrival_in_open_step_.end()) arrival_seconds = arrival->second;
      w.completed += r.completed();
      w.dropped += r.dropped();
    } else {
      // Its whole plan went back to the ledger (missed the deadline, died).
      ++w.steps_missed;
      const auto plan = planned.find(r.rank());
      if (plan != planned.end()) w.orphaned += plan->second;
    }
    *r.mutable_arrival_seconds() = number_or_null(arrival_seconds);
  }
  step_open_ = false;
  arrival_in_open_step_.clear();
}

std::vector<WorkerTotals> WorkerSummary::totals() const {
  std::vector<WorkerTotals> out;
  for (const auto& [name, w] : workers_) out.push_back(w);
  std::sort(out.begin(), out.end(), [](const WorkerTotals& a, const WorkerTotals& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.name < b.name;
  });
  return out;
}

std::vector<std::pair<WorkerTotals, std::string>> WorkerSummary::slow_workers(double factor) const {
  // Floors below which a difference is noise, not a slow worker.
  constexpr double kComputeFloor = 0.001, kCommunicationFloor = 0.01;
  const std::vector<WorkerTotals> all = totals();
  std::vector<std::pair<WorkerTotals, std::string>> out;
  if (all.size() < 2) return out;
  for (size_t i = 0; i < all.size(); ++i) {
    std::vector<double> compute, communication;
    for (size_t j = 0; j < all.size(); ++j) {
      if (j == i) continue;
      if (all[j].timed > 0) compute.push_back(all[j].mean_micro_batch_seconds());
      if (all[j].arrivals > 0) communication.push_back(all[j].mean_communication_seconds());
    }
    const WorkerTotals& w = all[i];
    std::vector<std::string> causes;
    const double c = w.mean_micro_batch_seconds(), m = median(compute);
    if (w.timed > 0 && !compute.empty() && c > factor * m && c - m > kComputeFloor) {
      causes.push_back("compute");
    }
    const double k = w.mean_communication_seconds(), n = median(communication);
    if (w.arrivals > 0 && !communication.empty() && k > factor * n && k - n > kCommunicationFloor) {
      causes.push_back("communication");
    }
    if (!causes.empty()) out.emplace_back(w, fmt::format("{}", fmt::join(causes, "+")));
  }
  return out;
}

void WorkerSummary::worker_released(const std::string& name, uint32_t rank, uint64_t step,
                                    uint32_t missed) {
  released_.push_back({name, rank, step, missed});
}

void WorkerSummary::add_to(v1::RunSummary& summary, double training_flops_per_sample) const {
  auto entry = [training_flops_per_sample](const WorkerTotals& w) {
    const auto mean = [](double sum, uint64_t n) {
      return n == 0 ? 0.0 : sum / static_cast<double>(n);
    };
    v1::PerWorkerTotals e;
    e.set_name(w.name);
    e.set_rank(w.rank);
    e.set_steps_planned(static_cast<uint32_t>(w.steps_planned));
    e.set_steps_contributed(static_cast<uint32_t>(w.steps_contributed));
    e.set_steps_missed(static_cast<uint32_t>(w.steps_missed));
    e.set_microbatches_completed(static_cast<uint32_t>(w.completed));
    e.set_microbatches_dropped(static_cast<uint32_t>(w.dropped));
    e.set_microbatches_orphaned(static_cast<uint32_t>(w.orphaned));
    e.set_mean_micro_batch_seconds(w.mean_micro_batch_seconds());
    e.set_mean_arrival_seconds(mean(w.arrival_seconds, w.arrivals));
    e.set_mean_communication_seconds(w.mean_communication_seconds());
    e.set_late_contributions(static_cast<uint32_t>(w.late));
    e.set_mean_late_arrival_seconds(mean(w.late_arrival_seconds, w.late));
    if (w.blas) *e.mutable_blas() = *w.blas;
    e.set_threads(w.threads);
    e.set_achieved_flops_per_second(w.achieved_flops_per_second(training_flops_per_sample));
    e.set_mfu(w.mfu(training_flops_per_sample));
    return e;
  };
  double achieved = 0.0, mfu = 0.0;
  uint32_t known = 0;
  for (const WorkerTotals& w : totals()) {
    const v1::PerWorkerTotals& e = *summary.add_per_worker() = entry(w);
    if (e.mfu() > 0.0) {
      ++known;
      achieved += e.achieved_flops_per_second();
      mfu += e.mfu();
    }
  }
  if (known > 0) {
    summary.set_mean_achieved_flops_per_second(achieved / known);
    summary.set_mean_mfu(mfu / known);
  }
  for (const auto& [w, cause] : slow_workers()) {
    v1::PerWorkerTotals& e = *summary.add_slow_workers();
    e = entry(w);
    e.set_cause(cause);
  }
  for (const Release& r : released_) {
    v1::ReleasedWorker& e = *summary.add_released_workers();
    e.set_name(r.name);
    e.set_rank(r.rank);
    e.set_step(static_cast<uint32_t>(r.step));
    e.set_missed_in_a_row(r.missed);
  }
}

}  // namespace dctrain
