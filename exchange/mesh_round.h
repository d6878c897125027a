// The direct schedule's round on one member (exchange/round_schedule.h):
// direct reduce-scatter, then direct all-gather, each shard summed at its
// owner in the tree of comm/rank_order_sum.h (exchange/README.md says the
// algorithm). Private to exchange/.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "exchange/chunk.h"
#include "exchange/peer.h"
#include "exchange/plan.h"
#include "exchange/round_schedule.h"
#include "exchange/sum_digest.h"

namespace dctrain {

class MeshRound final : public RoundSchedule {
 public:
  // `in.digest`: the sum's shard digests are taken as its pieces land.
  // `stats` counts what it receives and sums.
  MeshRound(const RoundInputs& in, PieceSink& sink, ExchangeStats& stats, Clock::time_point start);
  MeshRound(const MeshRound&) = delete;
  MeshRound& operator=(const MeshRound&) = delete;

  // This member's contribution, each piece to the owner of its shard
  // (alone: the sum is its contribution, at once).
  void send_contribution() override;
  // Whether `rank` is another member of the round.
  bool is_other_member(uint32_t rank) const override;
  // A piece of this round from another member (h.from): a piece of this
  // member's shard is kept until every member's copy of it is in, then
  // summed and sent to every other member; a summed piece goes into the
  // result. What does not fit the round is a conflict (conflict()); why a
  // duplicate is refused comes back.
  std::optional<std::string> take(const ChunkHeader& h, zmq::message_t&& payload) override;

  // The whole sum is here: every piece of this shard summed, every other
  // shard's sum in.
  bool complete() const override { return reduced_all() && results_missing_total_ == 0; }
  // The first piece that did not fit the round ("rank R: why"), if any.
  const std::string& conflict() const override { return first_conflict_; }
  // Every value of the sum summed here or received passed usable().
  bool usable() const override { return !unusable_; }
  // When every other member had been heard from (its first contribution piece).
  std::optional<Clock::time_point> all_heard() const override { return all_heard_; }
  // Once the round is complete, and once: the sum's shard digests (none
  // without a digest).
  std::vector<std::string> digests() override;

  const ExchangeRound& id() const override { return id_; }
  std::span<const uint32_t> members() const override { return members_; }
  Clock::time_point start() const override { return start_; }
  // The round's length in floats, and the pieces one member receives in it
  // at most (its shard's copies and the others' sums): the bounds on what a
  // later round may park here.
  uint64_t length() const override { return plan_.length(); }
  size_t pieces_received_at_most() const override;
  // For a failure's text: `rank`'s pieces of this member's shard not in,
  // of how many; its shard's summed pieces not in, of how many.
  std::pair<size_t, size_t> contribution_pieces_missing(uint32_t rank) const override;
  std::pair<size_t, size_t> result_pieces_missing(uint32_t rank) const override;

  // The kept copies of the other members' pieces let go.
  void release_inputs() override;
  // The members' sample counts and the owners' totals against them into
  // `out` (samples, member_samples), with who is missing or in conflict
  // (missing_contributions, missing_results, conflicting); a total that
  // differs makes the round incomplete (out.complete false).
  void settle(ExchangeOutcome& out) override;

 private:
  // Position of `rank` among the members, or members_.size() if it is none.
  size_t position_of(uint32_t rank) const;
  bool reduced_all() const { return pieces_reduced_ == inputs_.size(); }
  ChunkHeader header(PieceKind kind, const PieceRange& p, uint64_t samples) const;
  void record_conflict(size_t from, uint32_t rank, const std::string& why);
  void reduce_piece(size_t k);

  ExchangeRound id_;
  std::span<const uint32_t> members_;
  uint32_t rank_;
  uint64_t digest_;
  ExchangePlan plan_;
  size_t me_ = 0;
  std::span<const float> contribution_;
  uint64_t own_samples_;
  std::span<float> result_;
  PieceSink& sink_;
  ExchangeStats& stats_;
  Clock::time_point start_;

  // This member's shard: per piece, each member's copy (this member's own
  // slot unused: its contribution is read in place) and how many are in.
  std::vector<std::vector<zmq::message_t>> inputs_;
  std::vector<std::vector<bool>> input_in_;
  std::vector<size_t> inputs_in_;
  size_t pieces_reduced_ = 0;
  // The other shards: which summed pieces have arrived from their owners.
  std::vector<std::vector<bool>> result_in_;
  std::vector<size_t> results_missing_;
  size_t results_missing_total_ = 0;

  std::vector<std::optional<uint64_t>> member_samples_;  // from their contribution pieces
  size_t unheard_ = 0;  // other members none of whose contribution pieces is in yet
  std::optional<Clock::time_point> all_heard_;
  std::vector<std::optional<uint64_t>> result_samples_;  // the totals the owners reported
  std::vector<bool> conflict_;
  std::string first_conflict_;
  std::optional<ShardDigester> digester_;
  bool unusable_ = false;
};

}  // namespace dctrain
