#include "worker/local_steps.h"

#include <algorithm>
#include <stdexcept>

#include "model/grad_clip.h"
#include "runtime/setup.h"

namespace dctrain {

std::vector<size_t> local_step_ends(size_t micro_batches, uint32_t steps) {
  std::vector<size_t> ends;
  if (micro_batches == 0 || steps == 0) return ends;
  const size_t groups = std::min<size_t>(micro_batches, steps);
  const size_t size = micro_batches / groups, longer = micro_batches % groups;
  size_t end = 0;
  for (size_t g = 0; g < groups; ++g) {
    end += size + (g < longer ? 1 : 0);
    ends.push_back(end - 1);
  }
  return ends;
}

LocalSteps::LocalSteps(const v1::OptimizerConfig& inner, const ParamTable& table, ThreadPool* pool)
    : inner_(make_optimizer(optimizer_spec(inner), table)), clip_norm_(inner.clip_norm()) {
  inner_->set_thread_pool(pool);
}

void LocalSteps::begin(std::span<const float> parameters) {
  start_.assign(parameters.begin(), parameters.end());
  moved_ = false;
}

void LocalSteps::step(std::span<float> parameters, std::span<float> gradient, uint64_t loss_terms,
                      double lr) {
  if (loss_terms == 0) return;
  auto divisor = static_cast<float>(loss_terms);
  if (clip_norm_ > 0.0) {  // as Replica::apply_summed_update
    for (float& g : gradient) g /= divisor;
    divisor = 1.0f;
    clip_grad_norm(gradient, clip_norm_);
  }
  inner_->step(parameters, gradient, lr, divisor);
  std::fill(gradient.begin(), gradient.end(), 0.0f);
  moved_ = true;
}

void LocalSteps::delta(std::span<const float> parameters, std::span<float> gradient,
                       uint64_t loss_terms) const {
  if (parameters.size() != start_.size() || gradient.size() != start_.size()) {
    throw std::logic_error("LocalSteps::delta before begin, or over another model");
  }
  const auto weight = static_cast<float>(loss_terms);
  for (size_t i = 0; i < start_.size(); ++i) gradient[i] = (start_[i] - parameters[i]) * weight;
}

void LocalSteps::restore(std::span<float> parameters) {
  if (!moved_) return;
  std::copy(start_.begin(), start_.end(), parameters.begin());
  moved_ = false;
}

}  // namespace dctrain
