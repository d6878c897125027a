// The reduce of one step: the contributions summed in the tree that every
// data plane makes (comm/rank_order_sum.h: fixed by their rank order, so the
// same contributions give the same bits whatever order they arrive in), then
// divided. The tree depends on how many contribute, so the contributions are
// kept as they arrive and summed once every expected rank has contributed or
// been forgotten.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "comm/message.h"
#include "coordinator/step/update_guard.h"

namespace dctrain {

class Reducer {
 public:
  Reducer(size_t parameter_count, size_t buffer_count);

  // Starts a step expecting contributions from `ranks`. `clear`: zero the
  // sums; without it (data plane "exchange", where set_sum() fills them)
  // the previous step's sum stays until it is applied.
  void begin(std::vector<uint32_t> ranks, bool clear = true);
  bool expects(uint32_t rank) const;
  bool has(uint32_t rank) const;
  // A validated contribution (tensor 0: gradient, tensor 1: statistics if any).
  void add(uint32_t rank, Message contribution);
  // Data plane "exchange": `rank` contributed, but its gradient was summed
  // among the workers; the sum comes in through set_sum().
  void settle(uint32_t rank);
  // The round's (undivided) sum, summed in the same tree by the workers
  // (exchange/peer.h): tensor 0 gradient, tensor 1 statistics if any.
  void set_sum(const Message& sum);
  // `rank` will not contribute (missed the deadline or died).
  void forget(uint32_t rank);
  // Every expected rank has contributed or been forgotten.
  bool complete() const;

  // Gradient sum / gradient_divisor and statistics sum / statistics_divisor.
  void finish(double gradient_divisor, double statistics_divisor);
  std::span<float> gradient() { return gradient_; }
  std::span<float> statistics() { return statistics_; }

  // What each contribution of the step showed, by rank
  // (coordinator/step/update_guard.h): with holding on, each norm on arrival;
  // when the sum is unusable, which contribution made it so.
  const std::map<uint32_t, AddedContribution>& added() const { return added_; }
  // Holding (for the norm guard, from now on): contributions wait unsummed
  // until release(), which sums them but `refused`.
  void set_holding(bool holding) { holding_ = holding; }
  void release(const std::set<uint32_t>& refused);
  // Holding, before release(): each held contribution's cosine with the sum
  // of the other held ones' gradients (NaN where either is 0).
  std::map<uint32_t, double> cosines_with_the_others();
  // Zeroes both sums (a step whose update is discarded).
  void clear();

 private:
  // Sums the contributions once every expected rank is settled (and, when
  // holding, released).
  void advance();
  // Tensor `index` of every contribution, summed into `sum`; what made the
  // sum unusable into added_ if it is.
  void sum_tensor(size_t index, std::span<float> sum);

  std::vector<float> gradient_, statistics_;
  std::vector<uint32_t> ranks_;  // expected, ascending
  bool summed_ = false;          // this step's contributions are in the sums
  std::map<uint32_t, Message> waiting_;  // contributions not summed yet, by rank
  std::map<uint32_t, bool> settled_;  // rank -> contributed (true) or forgotten (false)
  std::map<uint32_t, AddedContribution> added_;
  bool holding_ = false;
  bool released_ = false;  // holding: this step's contributions were released
};

}  // namespace dctrain
