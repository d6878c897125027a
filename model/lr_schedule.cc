#include "model/lr_schedule.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace dctrain {

void validate(const LrScheduleSpec& spec) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("learning-rate schedule '" + spec.name + "': " + what);
  };
  if (spec.name != "constant" && spec.name != "step" && spec.name != "cosine") {
    fail("unknown schedule; known: constant, step, cosine");
  }
  if (!std::isfinite(spec.base_lr) || spec.base_lr < 0.0) fail("base_lr must be finite and >= 0");
  if (spec.warmup_steps < 0) fail("warmup_steps must be >= 0");
  if (spec.name == "step" && (spec.step_size < 1 || !(spec.gamma > 0.0))) {
    fail("needs step_size >= 1 and gamma > 0");
  }
  if (spec.name == "cosine" && spec.total_steps <= spec.warmup_steps) {
    fail("needs total_steps (" + std::to_string(spec.total_steps) + ") > warmup_steps (" +
         std::to_string(spec.warmup_steps) + ")");
  }
}

double learning_rate(const LrScheduleSpec& spec, double step) {
  const auto warmup = static_cast<double>(spec.warmup_steps);
  const auto total = static_cast<double>(spec.total_steps);
  if (step < warmup) return spec.base_lr * step / warmup;
  if (spec.name == "step") {
    return spec.base_lr *
           std::pow(spec.gamma, std::floor(step / static_cast<double>(spec.step_size)));
  }
  if (spec.name == "cosine") {
    if (step >= total) return 0.0;
    const double progress = (step - warmup) / (total - warmup);
    return spec.base_lr * (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
  }
  return spec.base_lr;
}

}  // namespace dctrain
