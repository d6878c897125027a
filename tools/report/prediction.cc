#include "tools/report/prediction.h"

#include <algorithm>

namespace dctrain {

std::optional<Prediction> predict_speedup(const RunFolder& baseline, double tau) {
  const size_t skip = warmup_steps(baseline.steps.size());
  double sum_inf = 0.0, sum_tau = 0.0, outside = 0.0;
  uint64_t planned = 0, completed = 0;
  size_t steps = 0;
  for (size_t s = skip; s < baseline.steps.size(); ++s) {
    const StepPoint& step = baseline.steps[s];
    double max_inf = 0.0, max_tau = 0.0, max_measured = 0.0;
    bool any = false;
    for (const WorkerStepPoint& w : step.workers) {
      if (!w.contributed || w.micro_batch_seconds.empty()) continue;
      any = true;
      double all = 0.0, clock = 0.0;
      for (double t : w.micro_batch_seconds) {
        all += t;
        ++planned;
        if (clock < tau) {  // the worker checks its clock before each micro-batch
          clock += t;
          ++completed;
        }
      }
      max_inf = std::max(max_inf, all);
      max_tau = std::max(max_tau, clock);
      max_measured = std::max(max_measured, w.compute_seconds);
    }
    if (!any) continue;
    ++steps;
    sum_inf += max_inf;
    sum_tau += max_tau;
    outside += std::max(0.0, step.step_seconds - max_measured);
  }
  if (steps == 0 || planned == 0) return std::nullopt;
  Prediction p;
  p.steps = steps;
  const double n = static_cast<double>(steps);
  p.step_seconds_inf = (sum_inf + outside) / n;
  p.step_seconds_tau = (sum_tau + outside) / n;
  p.completed_fraction = static_cast<double>(completed) / static_cast<double>(planned);
  p.speedup = p.step_seconds_tau > 0 ? p.completed_fraction * p.step_seconds_inf / p.step_seconds_tau : 1.0;
  return p;
}

}  // namespace dctrain
