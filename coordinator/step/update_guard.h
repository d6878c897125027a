// What the coordinator checks before any replica applies a step's update,
// and what it refuses from a contribution that passed validation.
//
// Validation (comm/validation.h) refuses a contribution holding NaN or
// infinity, but a finite one can still ruin the run: a gradient holding 1e30
// sums to a finite update whose square overflows float32 (AdamW's second
// moment, the clipping norm and, one step later, every activation become
// infinite). So the reduced update itself is checked: every value finite and
// below 2^64 in magnitude (its square fits in a float). A step that fails is
// discarded: nothing is applied, every micro-batch is requeued, and the
// contributions that caused it are named: those holding such values
// themselves, else the one whose addition made a node of the sum's tree
// overflow (comm/rank_order_sum.h).
// Steps that fail in a row stop the run with an error, so a run never ends
// "successfully" at chance accuracy.
//
// The norm guard (guard.norm_multiple, 3 unless set, 0: off) is for a
// contribution that is valid but poisoned: scaled far beyond the others',
// or scaled or flipped step after step (coordinator/step/contribution_record.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/message.h"
#include "common/usable_values.h"  // usable(), kOverflowMagnitude: shared with the exchange
#include "coordinator/step/contribution_record.h"
#include "proto/config.pb.h"

namespace dctrain {

// What one contribution showed: adding it into a running sum, or (the
// reducer, when the step's sum is unusable) within the sum's tree.
struct AddedContribution {
  bool overflows = false;        // it holds a value at or beyond kOverflowMagnitude
  bool sum_overflowed = false;   // the sum reached it (or NaN) with this addition
  double norm = 0.0;             // its gradient's L2 norm; only measured for the norm guard
  double statistics_norm = 0.0;  // its batch statistics' L2 norm, the same
};

// sum += tensor `index` of `message` (sized to its count), and what it showed.
AddedContribution add_and_measure(const Message& message, size_t index, std::span<float> sum);
// The L2 norm (accumulated in double) of tensor `index` of `message`.
double tensor_norm(const Message& message, size_t index);
// The dot product (accumulated in double) of tensor `index` of `message`
// with `with`, of its size.
double tensor_dot(const Message& message, size_t index, std::span<const float> with);
// Every tensor of `message` finite (it was refused for NaN or infinity).
bool tensors_finite(const Message& message);

// A step's update that must not be applied.
struct Discard {
  std::vector<uint32_t> culprits;  // ranks named as its cause, ascending
  std::string why;                 // for the log: what was wrong with the update
};

// What the guard did to a closing step.
struct GuardedStep {
  bool discarded = false;     // the update was not usable: nothing applied
  uint32_t refused_norm = 0;  // contributions refused by the norm guard
};

class UpdateGuard {
 public:
  explicit UpdateGuard(const v1::GuardConfig& config);

  double norm_multiple() const { return norm_multiple_; }
  bool norm_guard() const { return norm_multiple_ > 0.0; }

  // The contributions of `step` the norm guard refuses, ascending by rank,
  // with why (ContributionRecord::judge); none when it is off.
  std::vector<Refused> refuse_by_norm(uint64_t step, const std::map<uint32_t, Measured>& measured,
                                      bool remember = true);

  // The step's summed gradient and statistics, and what each addition showed
  // (by rank): nothing when the update may be applied.
  std::optional<Discard> judge(std::span<const float> gradient, std::span<const float> statistics,
                               const std::map<uint32_t, AddedContribution>& added) const;

  // A contribution of the open step was refused for NaN or infinite values.
  void nonfinite_contribution() { ++nonfinite_this_step_; }

  // Closes a step: whether its update was discarded and whether an update
  // was applied. Returns why the run must stop once guard.max_bad_steps_in_a_row
  // bad steps came in a row (a step is bad when its update was discarded, or
  // when nothing was applied and a contribution held NaN or infinity).
  std::optional<std::string> step_closed(bool discarded, bool applied);

  uint32_t bad_in_a_row() const { return bad_in_a_row_; }

 private:
  v1::GuardConfig config_;
  double norm_multiple_;
  ContributionRecord record_;
  uint32_t bad_in_a_row_ = 0;
  uint32_t nonfinite_this_step_ = 0;
};

}  // namespace dctrain
