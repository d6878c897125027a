// The rule every replica's update must pass before it is applied, on both
// data planes: the star's coordinator checks the reduced update
// (coordinator/step/update_guard.h), and each member of an exchange round checks
// the sum it holds (worker/data_plane.cc). A finite value can still ruin a
// run: 1e30 squared overflows float32 (AdamW's second moment, the clipping
// norm and, a step later, every activation become infinite), so the bound is
// 2^64, the largest magnitude whose square fits in a float.
#pragma once

#include <span>

namespace dctrain {

// 2^64: a float at or beyond it has a square that overflows float32.
inline constexpr float kOverflowMagnitude = 18446744073709551616.0f;

// Every value finite and below kOverflowMagnitude in magnitude.
bool usable(std::span<const float> values);

}  // namespace dctrain
