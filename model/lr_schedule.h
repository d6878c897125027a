// Learning-rate schedules as a pure function of a position, so every replica
// (and a restarted run) computes the same rate for the same step. The
// position counts updates, or samples (a run whose schedule clock is
// "samples" expresses every field below in samples: warm-up, step size and
// total scaled by the global batch).
#pragma once

#include <cstdint>
#include <string>

namespace dctrain {

struct LrScheduleSpec {
  std::string name = "constant";  // "constant", "step" or "cosine"
  double base_lr = 0.1;
  // Linear warm-up from 0 over the first warmup_steps updates:
  // lr(step) = base_lr * step / warmup_steps while step < warmup_steps (as
  // transformers' get_*_schedule_with_warmup: the first update runs at 0).
  int64_t warmup_steps = 0;
  // step (torch.optim.lr_scheduler.StepLR): base_lr * gamma^floor(step / step_size).
  int64_t step_size = 1;
  double gamma = 0.1;
  // cosine (CosineAnnealingLR's closed form, eta_min 0, after the warm-up):
  // base_lr * (1 + cos(pi * progress)) / 2 with progress =
  // (step - warmup_steps) / (total_steps - warmup_steps), 0 from total_steps on.
  int64_t total_steps = 0;
};

// Throws std::invalid_argument for an unknown name or inconsistent fields.
void validate(const LrScheduleSpec& spec);

// The rate at `position` (0-based update index, or samples settled before
// the update). Integer positions give the same value as an integer index.
double learning_rate(const LrScheduleSpec& spec, double position);

}  // namespace dctrain
