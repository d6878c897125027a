// The warm-up steps of a run: its first step allocates and first touches
// everything (arenas, the data's pages), so its compute is not a step's.
// Statistics of compute times (the report's, a simulation's trace) leave
// them out, all by this one rule.
#pragma once

#include <cstddef>

namespace dctrain {

// Warm-up steps to leave out of `step_count`: 1, none in runs of fewer than
// 5 steps (too short to spare one).
inline size_t warmup_steps(size_t step_count) {
  return step_count < 5 ? 0 : 1;
}

}  // namespace dctrain
