// The norm guard's judgment (guard.norm_multiple, 3 unless set): what each
// member's contributions looked like over its last steps, and which of a
// step's contributions are refused.
//
// One step says little. With 16 samples a member, a gradient's norm is
// carried by the few samples the model still gets wrong: an honest member's
// norm per sample is 9 times the median of the others' in the same step at
// the 95th percentile and 189 times at worst, and its cosine with the
// others' sum goes below -0.3 (mnist-cnn, 4 workers, 2,000 contributions;
// tests/fixtures/honest_contributions_*.txt). A member that scales or flips
// its gradient does so step after step, and over 32 steps that shows. A
// contribution is refused when
//
// - spike: its norm per sample is more than kSpikeFactor x norm_multiple
//   times the median of every contribution of the last kWindow steps
//   (honest, at most 7.3 times on mnist-cnn and 1.9 on resnet20);
// - scaled: over its last kWindow contributions, the median of its norm per
//   sample over the median of the others' in the same step is more than
//   norm_multiple (honest, at most 1.82 and 1.12);
// - flipped: over its last kWindow contributions, its mean cosine with the
//   others' sum is below kFlippedCosine (honest, at least 0.001 and -0.021);
//
// the gradient's norm and the batch statistics' apart (no cosine for those).
// The last two need kLeastSteps contributions of the member on record: till
// then a member is judged by the spike alone. A refused contribution stays
// on its member's record, so a member that keeps scaling or flipping is
// refused at every step it keeps doing so.
//
// What that bounds: at any step, a member moves the sum by at most
// kSpikeFactor x norm_multiple typical contributions; over its last 32 steps
// the median of its steps by norm_multiple times the others'. A member that
// flips a gradient of its own size is caught while the honest members'
// gradients agree (a mean cosine of 0.25 to 0.07 over the first 500 steps of
// mnist-cnn and resnet20); once they agree less than |kFlippedCosine|, it
// is not, and it takes its share away from the sum's progress.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dctrain {

// A contribution left out of a step by the guard.
struct Refused {
  uint32_t rank = 0;
  std::string why;
};

// One member's contribution to a step, as the guard measured it.
struct Measured {
  double gradient = 0.0;    // the gradient's L2 norm
  double statistics = 0.0;  // the batch statistics' L2 norm (0: none)
  uint64_t samples = 0;     // completed samples, as the coordinator counted them
  double cosine = 0.0;      // with the step's other contributions' gradient sum
  bool has_cosine = false;
};

class ContributionRecord {
 public:
  static constexpr size_t kWindow = 32;
  static constexpr size_t kLeastSteps = 16;
  static constexpr double kSpikeFactor = 10.0;
  static constexpr double kFlippedCosine = -0.08;

  explicit ContributionRecord(double multiple) : multiple_(multiple) {}

  // The contributions of `step` that are refused, ascending by rank, with
  // why. Judged as if `measured` joined the record; with `remember`, it does
  // (a step judged again, a redone round, replaces its earlier entries). A
  // member that computed no samples is judged only by this: its gradient may
  // hold nothing.
  std::vector<Refused> judge(uint64_t step, const std::map<uint32_t, Measured>& measured,
                             bool remember = true);

 private:
  struct Entry {
    uint64_t step = 0;
    double gradient_ratio = 0.0;    // per sample, over the others' median in the step; NaN: none
    double statistics_ratio = 0.0;  // the same for the batch statistics
    double cosine = 0.0;            // NaN: not measured
  };
  struct Pooled {
    uint64_t step = 0;
    std::vector<double> gradient, statistics;  // every member's norm per sample
  };

  // The lower median norm per sample of the window's contributions (NaN
  // with fewer than three).
  struct Typical {
    double gradient = 0.0;
    double statistics = 0.0;
  };

  // Why `m`, whose entry is `now` after `history`, is refused, if it is.
  std::optional<std::string> why_refused(const Measured& m, const Entry& now,
                                         const std::deque<Entry>& history,
                                         const Typical& typical) const;

  double multiple_;
  std::map<uint32_t, std::deque<Entry>> entries_;  // rank -> its last kWindow contributions
  std::deque<Pooled> pooled_;                      // the last kWindow steps
};

}  // namespace dctrain
