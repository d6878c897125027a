#include "coordinator/worker_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

namespace dctrain {

namespace {

// Steps whose start time is kept, so that a contribution arriving this many
// steps late still gets its lag measured.
constexpr size_t kRecentSteps = 256;

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

double WorkerTotals::mean_micro_batch_seconds() const {
  return timed == 0 ? 0.0 : micro_batch_seconds / static_cast<double>(timed);
}

double WorkerTotals::mean_communication_seconds() const {
  return arrivals == 0 ? 0.0 : communication_seconds / static_cast<double>(arrivals);
}

void WorkerSummary::joined(const std::string& name, uint32_t rank, const v1::Hello& hello) {
  WorkerTotals& w = workers_[name];
  w.name = name;
  w.rank = rank;
  if (hello.has_blas()) w.blas = hello.blas();
}

void WorkerSummary::step_started(uint64_t step, double now) {
  started_[step] = now;
  while (started_.size() > kRecentSteps) started_.erase(started_.begin());
  open_step_ = step;
  step_open_ = true;
  arrival_in_open_step_.clear();
}

void WorkerSummary::contribution_arrived(const std::string& name, uint64_t step,
                                         const v1::Contribution& c, double now) {
  const auto started = started_.find(step);
  if (started == started_.end()) return;  // a step this process never planned
  const double arrival = now - started->second;
  WorkerTotals& w = workers_[name];
  w.name = name;
  ++w.arrivals;
  w.arrival_seconds += arrival;
  // What the worker did not spend computing or waiting in its own queue was
  // spent between the hosts: the plan on its way out, the contribution on
  // its way back.
  w.communication_seconds += std::max(0.0, arrival - c.compute_seconds() - c.overhead_seconds());
  // A late contribution was computed all the same: its times count.
  for (const v1::MicroBatchTime& t : c.completed()) {
    w.micro_batch_seconds += t.compute_seconds();
    ++w.timed;
  }
  if (step_open_ && step == open_step_) {
    arrival_in_open_step_[name] = arrival;
  } else {
    ++w.late;
    w.late_arrival_seconds += arrival;
  }
}

void WorkerSummary::step_closed(StepRecord& record) {
  for (WorkerStepRecord& r : record.workers) {
    WorkerTotals& w = workers_[r.name];
    w.name = r.name;
    w.rank = r.rank;
    ++w.steps_planned;
    if (r.contributed) {
      ++w.steps_contributed;
      const auto arrival = arrival_in_open_step_.find(r.name);
      if (arrival != arrival_in_open_step_.end()) r.arrival_seconds = arrival->second;
      w.completed += r.completed;
      w.dropped += r.dropped;
    } else {
      // Its whole plan went back to the ledger (missed the deadline, died).
      ++w.steps_missed;
      w.orphaned += r.planned;
    }
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

std::string WorkerSummary::json_members() const {
  auto entry = [](const WorkerTotals& w) {
    return fmt::format(
        "{{\"name\": {}, \"rank\": {}, \"steps_planned\": {}, \"steps_contributed\": {}, "
        "\"steps_missed\": {}, \"microbatches_completed\": {}, \"microbatches_dropped\": {}, "
        "\"microbatches_orphaned\": {}, \"mean_micro_batch_seconds\": {}, "
        "\"mean_arrival_seconds\": {}, \"mean_communication_seconds\": {}, "
        "\"late_contributions\": {}, \"mean_late_arrival_seconds\": {}, \"blas\": {}",
        json_string(w.name), w.rank, w.steps_planned, w.steps_contributed, w.steps_missed,
        w.completed, w.dropped, w.orphaned, json_number(w.mean_micro_batch_seconds()),
        json_number(w.arrivals == 0 ? 0.0 : w.arrival_seconds / static_cast<double>(w.arrivals)),
        json_number(w.mean_communication_seconds()), w.late,
        json_number(w.late == 0 ? 0.0 : w.late_arrival_seconds / static_cast<double>(w.late)),
        w.blas ? blas_json(*w.blas) : std::string("null"));
  };
  std::string per_worker, slow;
  for (const WorkerTotals& w : totals()) {
    per_worker += fmt::format("{}\n    {}}}", per_worker.empty() ? "" : ",", entry(w));
  }
  for (const auto& [w, cause] : slow_workers()) {
    slow += fmt::format("{}\n    {}, \"cause\": {}}}", slow.empty() ? "" : ",", entry(w),
                        json_string(cause));
  }
  std::string released;
  for (const Release& r : released_) {
    released += fmt::format("{}\n    {{\"name\": {}, \"rank\": {}, \"step\": {}, \"missed_in_a_row\": {}}}",
                            released.empty() ? "" : ",", json_string(r.name), r.rank, r.step, r.missed);
  }
  return fmt::format(
      "\"per_worker\": [{}\n  ],\n  \"slow_workers\": [{}{}],\n  \"released_workers\": [{}{}]",
      per_worker, slow, slow.empty() ? "" : "\n  ", released, released.empty() ? "" : "\n  ");
}

std::string blas_json(const v1::BlasInfo& b) {
  auto text_or_null = [](const std::string& s) {
    return s.empty() ? std::string("null") : json_string(s);
  };
  return fmt::format(
      "{{\"library\": {}, \"core\": {}, \"how\": {}, \"detected_core\": {}, "
      "\"coretype\": {}, \"cpu_model\": {}, \"cpu_features\": {}, \"threads\": {}, "
      "\"sgemm_size\": {}, \"sgemm_threads\": {}, \"sgemm_gflops\": {}, \"warning\": {}}}",
      json_string(b.library()), json_string(b.core()), json_string(b.how()),
      json_string(b.detected_core()), text_or_null(b.coretype()), json_string(b.cpu_model()),
      json_string(b.cpu_features()), b.threads(), b.sgemm_size(), b.sgemm_threads(),
      b.sgemm_size() == 0 ? std::string("null") : json_number(b.sgemm_gflops()),
      text_or_null(b.warning()));
}

}  // namespace dctrain
