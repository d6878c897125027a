// The check of a round of the data plane "exchange" between the members'
// reports and the commit (coordinator/planes/exchange_steps.cc): one request
// to every member, drawn once they all reported the round ok, and their
// answers. It asks for either or both of:
//
// - The tags of the sum each holds under a key drawn now, after the
//   forwarded sum arrived too (a keyed sum check, exchange/sum_digest.h):
//   since every sum compared was fixed before the key existed, members
//   whose tags agree hold the same sum, and the forwarded sum is theirs
//   when the tags the coordinator takes of it agree too.
// - Sketches of each member's own contribution: the norm guard
//   (guard.norm_multiple), below.
//
// In the star the coordinator sees every contribution and refuses one whose
// gradient norm is far beyond the others'. In the exchange it sees only the
// sum, which the digests show every member holds; a member can still have
// put anything into it: a poisoned contribution, or, as the owner of a
// shard, a shard of its choosing in place of the members' sum of it (the
// same for every member, so the digests agree). Both are, to everyone else,
// a contribution from that member. So, once the digests agree, the
// coordinator draws a seed and asks every member for a sketch of its own
// contribution under it (exchange/sum_sketch.h); from the sketches and the
// round's sum it estimates each member's contribution norm, the owner's
// part of its own shard being what the sum implies (the sum's sketch minus
// the other members' parts), never what the owner says. A member whose
// estimate is more than guard.norm_multiple times the median of the others'
// (the gradient's, or the batch statistics'), or that computed no samples
// and yet holds more than the sum's rounding, is out of the step, its
// micro-batches requeued, and the round is redone without it.
//
// What that bounds: a member, owner or not, moves the sum by at most about
// norm_multiple times a typical contribution, as in the star. What a member
// reports about its own contribution cannot hide a forged shard (the owner's
// part is implied) nor frame an owner without itself being out: inflating
// its own part of a shard by X makes the owner's implied part -X, and its
// own estimate carries X too.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "coordinator/step/update_guard.h"
#include "exchange/sum_sketch.h"
#include "proto/wire.pb.h"

namespace dctrain {

class RoundCheck {
 public:
  // Beyond this a sketch value is refused (an answer, not a contribution:
  // a bucket of float parts never gets there, and its square stays finite).
  static constexpr double kMostSketchValue = 1e100;

  // What a check asks, drawn when it is asked: the sketches' seed and
  // buckets (0: no sketches), and the sum key (kSumKeyBytes; empty: no
  // tags).
  struct Asked {
    uint64_t seed = 0;
    uint32_t buckets = kSketchBuckets;
    std::string sum_key;
  };

  // The check of the round of `members` (ascending ranks, shard i owned by
  // members[i]) under `attempt`, over [gradient | statistics] of
  // `parameters` + `buffers` floats.
  RoundCheck(uint32_t attempt, std::vector<uint32_t> members, uint64_t parameters, uint64_t buffers,
             Asked asked, double asked_at);

  uint32_t attempt() const { return attempt_; }
  bool sketched() const { return shape_.buckets > 0; }
  bool tagged() const { return !sum_key_.empty(); }
  const std::string& sum_key() const { return sum_key_; }
  double asked_at() const { return asked_at_; }
  v1::RoundCheckRequest request() const;

  // A member's answer. Returns why it is not taken: not for this check (a
  // rank outside the round, another attempt or seed, a second answer), or
  // failed (an error of its own, a sketch or tags of the wrong size, values
  // that are not finite: the member counts as answered, and failed()).
  std::optional<std::string> take(uint32_t rank, const v1::RoundCheckAnswer& answer);
  // Every member answered (some may have failed).
  bool complete() const { return answered_.size() + failed_.size() == members_.size(); }
  // When tagged(): each member's tags of the sum it holds, by shard (every
  // member answered, none failed).
  const std::map<uint32_t, std::vector<std::string>>& tags() const { return tags_; }
  // The members that have not answered, ascending.
  std::vector<uint32_t> unanswered() const;
  // The members whose answer failed, with why.
  const std::map<uint32_t, std::string>& failed() const { return failed_; }

  // The estimated L2 norms of each member's contribution, given the round's
  // sum ([gradient | statistics]); sketched(), every member must have
  // answered, none failed.
  struct Estimate {
    double gradient = 0.0;
    double statistics = 0.0;
    // Its gradient's cosine with the other members' sum (NaN: not known).
    double cosine = std::numeric_limits<double>::quiet_NaN();
    // Of its own shard: the norm of the part the sum implies, and of the
    // part it reported (they differ, beyond rounding, when the sum it made
    // of its shard is not the sum of the parts the members report).
    double implied_own = 0.0;
    double reported_own = 0.0;
  };
  std::map<uint32_t, Estimate> estimate(std::span<const float> sum) const;

  // Each member's norms from its own answer alone (all its shards as it
  // sketched them).
  std::map<uint32_t, Estimate> as_reported() const;

  // The members the guard refuses at `step`, ascending, with why: the
  // members that computed samples (`samples`: every member's completed
  // samples) by the guard's record (coordinator/step/contribution_record.h), and
  // a member that computed nothing whose part is more than the sum's
  // rounding, whatever the others computed. First on the answers as given
  // (as_reported(): an inflated answer is refused before it can inflate the
  // owners' implied parts), then, if none is refused there, on the
  // estimates with the owners' parts implied, which join the record.
  std::vector<Refused> judge(std::span<const float> sum, UpdateGuard& guard, uint64_t step,
                             const std::map<uint32_t, uint64_t>& samples) const;

 private:
  // judge() on `estimates`; `reported` names answers taken as given ("":
  // estimates with the owners' parts implied, remembered by the guard).
  std::vector<Refused> judge_norms(const std::map<uint32_t, Estimate>& estimates,
                                   UpdateGuard& guard, uint64_t step,
                                   const std::map<uint32_t, uint64_t>& samples,
                                   const std::string& reported) const;

  uint32_t attempt_;
  std::vector<uint32_t> members_;
  SketchShape shape_;
  double asked_at_;
  std::string sum_key_;
  std::set<uint32_t> answered_;                        // and not failed
  std::map<uint32_t, std::vector<double>> sketches_;   // rank -> its answer's values
  std::map<uint32_t, std::vector<std::string>> tags_;  // rank -> its tags, by shard
  std::map<uint32_t, std::string> failed_;
};

}  // namespace dctrain
