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
// themselves, else the one whose addition made the running sum overflow.
// Steps that fail in a row stop the run with an error, so a run never ends
// "successfully" at chance accuracy.
//
// The norm guard (guard.norm_multiple, off by default) is for a contribution
// that is valid but poisoned: its gradient's L2 norm is more than the
// multiple times the median of the step's other contributions' norms.
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
#include "proto/config.pb.h"

namespace dctrain {

// What adding one contribution into the running sums showed.
struct AddedContribution {
  bool overflows = false;       // it holds a value at or beyond kOverflowMagnitude
  bool sum_overflowed = false;  // the running sum reached it (or NaN) with this addition
  double norm = 0.0;            // its gradient's L2 norm; only measured for the norm guard
};

// sum += tensor `index` of `message` (sized to its count), and what it showed.
AddedContribution add_and_measure(const Message& message, size_t index, std::span<float> sum);
// The L2 norm (accumulated in double) of tensor `index` of `message`.
double tensor_norm(const Message& message, size_t index);
// Every tensor of `message` finite (it was refused for NaN or infinity).
bool tensors_finite(const Message& message);

// A contribution left out of a step by the guard.
struct Refused {
  uint32_t rank = 0;
  std::string why;
};

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

  bool norm_guard() const { return config_.norm_multiple() > 0.0; }

  // Norms per sample, as the guard compares them: a contribution's norm
  // grows with the samples it sums (rebalancing gives a fast worker more than
  // the others), its norm per sample does not. One that computed no sample
  // may hold nothing: 0 when its norm is 0, else infinite. `samples`: each
  // rank's completed samples, as the coordinator counted them from its plan.
  static std::map<uint32_t, double> per_sample(const std::map<uint32_t, double>& norms,
                                               const std::map<uint32_t, uint64_t>& samples);

  // Contributions whose norm per sample (per_sample) is more than
  // norm_multiple times the median of the other contributions' that hold
  // samples (needs at least two of those), ascending; `what` names the norm
  // in the reason ("gradient": "its per-sample gradient norm ...").
  std::vector<Refused> refuse_by_norm(const std::map<uint32_t, double>& norms,
                                      const std::map<uint32_t, uint64_t>& samples,
                                      std::string_view what = "gradient") const;

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
  uint32_t bad_in_a_row_ = 0;
  uint32_t nonfinite_this_step_ = 0;
};

}  // namespace dctrain
