// Which schedule a round of the exchange runs, and where a member stands in
// the halving schedule: what the members and the coordinator (which plans
// the rounds and weighs their failures) must agree on.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace dctrain {

// How a round moves its pieces (exchange/round_schedule.h).
enum class ExchangeSchedule { kDirect, kHalving };

// Below this many members a round runs direct, from it on halving
// (exchange/README.md: the measured crossover).
inline constexpr size_t kHalvingFromMembers = 16;

// The schedule of a round of `members` members (`halving_from` 0: direct always).
inline ExchangeSchedule schedule_for(size_t members, size_t halving_from) {
  return halving_from > 0 && members >= halving_from ? ExchangeSchedule::kHalving
                                                     : ExchangeSchedule::kDirect;
}

// Where the members of a halving round of `members` stand
// (exchange/halving_round.h): positions 0..N-1 in rank order; the first
// 2 * extra fold in pairs (the odd one into the even one), the others are
// halvers 0..P-1.
struct HalvingLayout {
  size_t members = 0;
  size_t halvers = 0;  // P, the largest power of two <= N
  size_t extra = 0;    // N - P: the folded pairs
  size_t levels = 0;   // log2(P)

  explicit HalvingLayout(size_t n);
  // The position of halver h.
  size_t position(size_t h) const { return h < extra ? 2 * h : h + extra; }
  // The halver at `position`, or nothing for a folded member.
  std::optional<size_t> halver(size_t position) const;
  // The blocks [first, first + count) halver h holds before level j (j =
  // levels: its own block).
  size_t range_first(size_t h, size_t level) const;
  size_t range_count(size_t level) const { return halvers >> level; }
  // The positions a member at `position` exchanges pieces with, by stage
  // (0: its fold partner, if any; 1 + j: its partner at level j): what it
  // connects to.
  std::vector<std::optional<size_t>> partners(size_t position) const;
  // The stage at which the members at positions a and b exchange pieces,
  // if they do.
  std::optional<size_t> stage_between(size_t a, size_t b) const;
  // When, in a round's order of waits, a member waits at `stage` for
  // pieces on their way in (`gathering` false: contributions, partial
  // sums) or out (true: the sum): the fold, levels 0 up, then levels down
  // to 0 and the fold back.
  size_t wait_order(size_t stage, bool gathering) const;
};

}  // namespace dctrain
