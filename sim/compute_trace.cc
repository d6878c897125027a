#include "sim/compute_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "common/files.h"
#include "metrics/metrics_json.h"
#include "metrics/warmup.h"

namespace dctrain {

ComputeTrace ComputeTrace::load(const std::filesystem::path& metrics_jsonl) {
  const std::string origin = metrics_jsonl.string();
  const MetricsRecords records = parse_metrics(read_text_file(metrics_jsonl), origin);
  const size_t skip = warmup_steps(records.steps.size());
  std::vector<std::vector<double>> per_rank;
  std::vector<double> transit;  // plan out and contribution back, per worker step
  for (size_t s = skip; s < records.steps.size(); ++s) {
    for (const v1::WorkerStep& w : records.steps[s].workers()) {
      if (w.contributed() && w.arrival_seconds().has_number_value()) {
        transit.push_back(std::max(
            0.0, w.arrival_seconds().number_value() - w.compute_seconds() - w.overhead_seconds()));
      }
      if (!w.contributed() || w.completed() == 0 || w.micro_batch_seconds().empty()) continue;
      const double samples_each = static_cast<double>(w.samples()) / w.completed();
      if (samples_each <= 0.0) continue;
      if (per_rank.size() <= w.rank()) per_rank.resize(w.rank() + 1);
      for (double seconds : w.micro_batch_seconds()) {
        per_rank[w.rank()].push_back(seconds / samples_each);
      }
    }
  }
  // Ranks that never contributed (e.g. a worker that left) are not kept.
  std::erase_if(per_rank, [](const std::vector<double>& pool) { return pool.empty(); });
  if (per_rank.empty()) {
    throw std::runtime_error(fmt::format(
        "{}: no completed micro-batch with its time in {} step records: a trace is a run's "
        "metrics.jsonl (take one from a tau = inf run)",
        origin, records.steps.size()));
  }
  ComputeTrace trace(std::move(per_rank), origin);
  if (!transit.empty()) {
    std::nth_element(transit.begin(), transit.begin() + transit.size() / 2, transit.end());
    trace.message_seconds_ = transit[transit.size() / 2] / 2;
  }
  return trace;
}

ComputeTrace::ComputeTrace(std::vector<std::vector<double>> per_rank, std::string origin)
    : per_rank_(std::move(per_rank)), origin_(std::move(origin)) {
  if (per_rank_.empty()) throw std::invalid_argument("a compute trace needs at least one rank");
  for (const std::vector<double>& pool : per_rank_) {
    if (pool.empty()) throw std::invalid_argument("a compute trace's rank has no micro-batch");
  }
}

size_t ComputeTrace::micro_batches() const {
  size_t n = 0;
  for (const std::vector<double>& pool : per_rank_) n += pool.size();
  return n;
}

double ComputeTrace::draw(uint32_t worker, Rng& rng) const {
  const std::vector<double>& pool = per_rank_[worker % per_rank_.size()];
  return pool[rng.below(pool.size())];
}

double ComputeTrace::mean(uint32_t worker) const {
  const std::vector<double>& pool = per_rank_[worker % per_rank_.size()];
  return std::accumulate(pool.begin(), pool.end(), 0.0) / static_cast<double>(pool.size());
}

std::string ComputeTrace::describe() const {
  double lo = mean(0), hi = mean(0);
  for (uint32_t r = 1; r < per_rank_.size(); ++r) {
    lo = std::min(lo, mean(r));
    hi = std::max(hi, mean(r));
  }
  return fmt::format(
      "{}: {} ranks, {} micro-batches, mean {:.4g}-{:.4g} ms per sample by rank{}",
      origin_.empty() ? "trace" : origin_, per_rank_.size(), micro_batches(), 1e3 * lo, 1e3 * hi,
      message_seconds_ ? fmt::format(", {:.4g} ms per message", 1e3 * *message_seconds_)
                       : std::string());
}

}  // namespace dctrain
