#include "tools/report/prediction.h"

#include <algorithm>
#include <limits>

#include "coordinator/threshold.h"

namespace dctrain {

std::optional<Prediction> predict_speedup(const RunFolder& baseline, double tau) {
  std::vector<RecordedStep> steps;
  double outside = 0.0;
  for (size_t s = warmup_steps(baseline.steps.size()); s < baseline.steps.size(); ++s) {
    const StepPoint& step = baseline.steps[s];
    RecordedStep recorded;
    double slowest = 0.0;
    for (const WorkerStepPoint& w : step.workers) {
      if (!w.contributed || w.micro_batch_seconds.empty()) continue;
      recorded.workers.push_back(w.micro_batch_seconds);
      slowest = std::max(slowest, w.compute_seconds);
    }
    if (recorded.workers.empty()) continue;
    steps.push_back(std::move(recorded));
    outside += std::max(0.0, step.step_seconds - slowest);
  }
  if (steps.empty()) return std::nullopt;
  const double overhead = outside / static_cast<double>(steps.size());
  const ThresholdCandidate none =
      evaluate_threshold(steps, overhead, std::numeric_limits<double>::infinity());
  const ThresholdCandidate at = evaluate_threshold(steps, overhead, tau);
  Prediction p;
  p.steps = steps.size();
  p.step_seconds_inf = none.compute_seconds + overhead;
  p.step_seconds_tau = at.compute_seconds + overhead;
  p.completed_fraction = 1.0 - at.drop_rate;
  p.speedup = 1.0 + at.speedup;  // threshold.h's speedup is the gain over tau = inf
  return p;
}

}  // namespace dctrain
