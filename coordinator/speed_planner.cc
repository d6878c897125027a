#include "coordinator/speed_planner.h"

#include <algorithm>
#include <limits>

#include "common/median.h"
#include "coordinator/step/step_book.h"
#include "runtime/step_policy.h"

namespace dctrain {

namespace {

// The predicted slowest compute of `shares` under `times` (same order).
double makespan(const std::vector<uint32_t>& shares, const std::vector<double>& times) {
  double worst = 0.0;
  for (size_t i = 0; i < shares.size(); ++i)
    worst = std::max(worst, static_cast<double>(shares[i]) * times[i]);
  return worst;
}

// Even shares of `count` over n workers (the first ones take the
// remainder).
std::vector<uint32_t> even_shares(size_t n, uint32_t count) {
  std::vector<uint32_t> even(n, static_cast<uint32_t>(count / n));
  for (size_t i = 0; i < count % n; ++i) ++even[i];
  return even;
}

// Each micro-batch to the worker that would finish it earliest; ties to the
// one with fewer, then the lower index.
std::vector<uint32_t> earliest_finish_shares(const std::vector<double>& times, uint32_t count) {
  const size_t n = times.size();
  std::vector<uint32_t> best(n, 0);
  for (uint32_t k = 0; k < count; ++k) {
    size_t pick = 0;
    double pick_finish = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < n; ++i) {
      const double finish = static_cast<double>(best[i] + 1) * times[i];
      if (finish < pick_finish || (finish == pick_finish && best[i] < best[pick])) {
        pick = i;
        pick_finish = finish;
      }
    }
    ++best[pick];
  }
  return best;
}

// The dealing order: predicted finish, earliest first; ties rotate with the
// step so that no worker always gets the head of the ledger.
std::vector<size_t> dealing_order(const std::vector<uint32_t>& chosen,
                                  const std::vector<double>& times, uint64_t step) {
  const size_t n = chosen.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  const auto rotated = [&](size_t i) { return (i + n - static_cast<size_t>(step % n)) % n; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double fa = static_cast<double>(chosen[a]) * times[a];
    const double fb = static_cast<double>(chosen[b]) * times[b];
    if (fa != fb) return fa < fb;
    return rotated(a) < rotated(b);
  });
  return order;
}

}  // namespace

SpeedPlanner::SpeedPlanner(const v1::RebalanceConfig& config) : config_(config) {}

void SpeedPlanner::observe(uint32_t rank, std::span<const double> micro_batch_seconds) {
  if (micro_batch_seconds.empty()) return;
  auto& window = history_[rank];
  window.emplace_back(micro_batch_seconds.begin(), micro_batch_seconds.end());
  while (window.size() > config_.window_steps()) window.pop_front();
}

void SpeedPlanner::observe_missed(uint32_t rank, uint32_t planned, double waited_seconds) {
  if (planned == 0 || !(waited_seconds > 0.0)) return;
  const double at_least = waited_seconds / static_cast<double>(planned);
  // Never below what it showed before: missing says it was not faster.
  const double floor = std::max(at_least, estimate(rank).value_or(0.0));
  const std::vector<double> times(planned, floor);
  observe(rank, times);
}

void SpeedPlanner::forget(uint32_t rank) {
  history_.erase(rank);
  in_force_.erase(rank);
  standby_.erase(rank);
}

std::optional<double> SpeedPlanner::estimate(uint32_t rank) const {
  const auto it = history_.find(rank);
  if (it == history_.end()) return std::nullopt;
  // Per step, the mean: a CPU quota or a co-located job lands as a wait on
  // a few micro-batches of every step (the others run at full speed), which
  // a median over micro-batches would not see. The median over steps still
  // leaves out the odd stalled step.
  std::vector<double> per_step;
  for (const std::vector<double>& step : it->second) {
    if (step.empty()) continue;
    double sum = 0.0;
    for (double t : step) sum += t;
    per_step.push_back(sum / static_cast<double>(step.size()));
  }
  if (per_step.empty()) return std::nullopt;
  return median(std::move(per_step));
}

size_t SpeedPlanner::steps_recorded(uint32_t rank) const {
  const auto it = history_.find(rank);
  return it == history_.end() ? 0 : it->second.size();
}

std::vector<double> SpeedPlanner::planning_times(std::span<const uint32_t> ranks,
                                                 std::vector<std::optional<double>>& measured) const {
  // A worker with no estimate yet is taken as the median known one (as fast
  // as a typical worker), and with none known every worker is equal.
  const size_t n = ranks.size();
  std::vector<double> known;
  measured.assign(n, std::nullopt);
  for (size_t i = 0; i < n; ++i) {
    measured[i] = estimate(ranks[i]);
    if (measured[i]) known.push_back(*measured[i]);
  }
  const double typical = known.empty() ? 1.0 : median(known);
  std::vector<double> times(n);
  for (size_t i = 0; i < n; ++i) times[i] = std::max(measured[i].value_or(typical), 1e-12);
  return times;
}

std::vector<uint32_t> SpeedPlanner::shares_in_force(std::span<const uint32_t> ranks,
                                                    uint32_t count) const {
  const size_t n = ranks.size();
  std::vector<uint32_t> current(n);
  uint64_t total = 0;
  if (in_force_.size() != n) return even_shares(n, count);
  for (size_t i = 0; i < n; ++i) {
    const auto it = in_force_.find(ranks[i]);
    if (it == in_force_.end()) return even_shares(n, count);
    current[i] = it->second;
    total += it->second;
  }
  return total == count ? current : even_shares(n, count);
}

std::vector<bool> SpeedPlanner::take_standbys(std::span<const uint32_t> ranks,
                                              std::vector<uint32_t>& chosen,
                                              const std::vector<double>& times, uint64_t step,
                                              StepShares& out) {
  const size_t n = ranks.size();
  std::vector<bool> standby(n, false);
  std::set<uint32_t> now_standby;
  const uint32_t probe_every = std::max<uint32_t>(config_.probe_every_steps(), 1);
  for (size_t i = 0; i < n; ++i) {
    if (chosen[i] > 0) continue;
    standby[i] = true;
    now_standby.insert(ranks[i]);
    if (step % probe_every != 0) continue;
    size_t donor = n;
    for (size_t j = 0; j < n; ++j) {
      if (chosen[j] < 2) continue;
      const double finish = static_cast<double>(chosen[j]) * times[j];
      if (donor == n || finish >= static_cast<double>(chosen[donor]) * times[donor]) donor = j;
    }
    if (donor == n) continue;
    --chosen[donor];
    ++chosen[i];
  }
  for (uint32_t r : now_standby)
    if (!standby_.contains(r)) out.entered_standby.push_back(r);
  for (uint32_t r : standby_)
    if (!now_standby.contains(r) && std::find(ranks.begin(), ranks.end(), r) != ranks.end())
      out.left_standby.push_back(r);
  standby_ = std::move(now_standby);
  return standby;
}

StepShares SpeedPlanner::shares(std::span<const uint32_t> ranks, uint64_t step, uint32_t count) {
  StepShares out;
  const size_t n = ranks.size();
  if (n == 0) return out;
  // The shares first move once every worker has a few steps on record: the
  // first steps' times are the noisiest (start-up, cold caches), and one
  // step's median is a handful of micro-batches.
  const size_t enough = std::min<size_t>(kMinHistorySteps, config_.window_steps());
  bool measured_enough = true;
  for (uint32_t r : ranks) measured_enough = measured_enough && steps_recorded(r) >= enough;

  std::vector<std::optional<double>> measured;
  const std::vector<double> times = planning_times(ranks, measured);
  const std::vector<uint32_t> current = shares_in_force(ranks, count);
  const std::vector<uint32_t> best = earliest_finish_shares(times, count);
  std::vector<uint32_t> chosen = current;
  if (measured_enough &&
      makespan(best, times) < (1.0 - config_.min_gain()) * makespan(current, times)) {
    chosen = best;
  }
  out.changed = chosen != current || in_force_.size() != n;
  in_force_.clear();
  for (size_t i = 0; i < n; ++i) in_force_[ranks[i]] = chosen[i];

  // Standbys: who has no share; a probe of one micro-batch every
  // probe_every_steps, taken from the worker predicted to finish last.
  const std::vector<bool> standby = take_standbys(ranks, chosen, times, step, out);
  for (size_t i : dealing_order(chosen, times, step)) {
    out.workers.push_back(WorkerShare{ranks[i], chosen[i], measured[i].value_or(0.0), standby[i]});
  }
  return out;
}

std::vector<WorkerPlan> plan_shares(Ledger& ledger, const StepShares& shares, uint64_t step,
                                    uint32_t micro_batch) {
  std::vector<WorkerPlan> plans;
  uint32_t longest = 0;
  for (const WorkerShare& s : shares.workers) {
    plans.push_back(WorkerPlan{s.rank, {}});
    longest = std::max(longest, s.micro_batches);
  }
  for (uint32_t position = 0; position < longest; ++position) {
    for (size_t i = 0; i < plans.size(); ++i) {
      if (position >= shares.workers[i].micro_batches) continue;
      PlannedMicroBatch mb = ledger.take(micro_batch, step, plans[i].rank);
      if (mb.samples.empty()) return plans;
      plans[i].micro_batches.push_back(std::move(mb));
    }
  }
  return plans;
}

PolicyPlans plan_for_policy(v1::Policy policy, SpeedPlanner& planner, Ledger& ledger,
                            std::span<const uint32_t> ranks, uint64_t step, uint32_t global_batch,
                            uint32_t micro_batch) {
  PolicyPlans out;
  if (!speed_aware(policy)) {
    out.plans = plan_step(ledger, ranks, step, global_batch, micro_batch);
    return out;
  }
  out.shares = planner.shares(ranks, step, global_batch / micro_batch);
  out.plans = plan_shares(ledger, *out.shares, step, micro_batch);
  return out;
}

void record_shares(const std::optional<StepShares>& shares, v1::StepRecord& record,
                   const std::map<uint32_t, uint64_t>& planned) {
  for (v1::WorkerStep& w : *record.mutable_workers()) {
    const auto it = planned.find(w.rank());
    if (it != planned.end()) w.set_planned(static_cast<uint32_t>(it->second));
    if (!shares) continue;
    for (const WorkerShare& s : shares->workers) {
      if (s.rank != w.rank()) continue;
      w.set_estimated_micro_batch_seconds(s.estimate_seconds);
      w.set_standby(s.standby);
    }
  }
}

void observe_step(SpeedPlanner& planner, const v1::StepRecord& record) {
  for (const v1::WorkerStep& w : record.workers()) {
    if (w.contributed()) {
      const std::vector<double> times(w.micro_batch_seconds().begin(),
                                      w.micro_batch_seconds().end());
      planner.observe(w.rank(), times);
    } else if (lost_from_step(w)) {
      planner.observe_missed(w.rank(), w.planned(), record.step_seconds());
    }
  }
}

}  // namespace dctrain
