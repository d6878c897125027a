// Recursive halving, then recursive doubling, on one member
// (exchange/round_schedule.h): a round whose peers and messages per member
// grow as log2(N), for rounds too large for the direct schedule's N - 1
// peers.
//
// Members are taken in rank order, positions 0..N-1. With P the largest
// power of two <= N and extra = N - P, the first 2 * extra positions fold in
// pairs: the odd one sends its whole contribution to the even one (stage 0)
// and takes no further part until it receives the whole sum back; the P
// others are "halvers" h = 0..P-1 (position 2h for h < extra, else h + extra).
// The buffer is cut into P blocks (ExchangePlan with P shards), each sent as
// pieces of at most piece_floats floats.
//
// Reduce-scatter, level j = 0..log2(P)-1: halver h holds a range of blocks;
// it keeps the half on the side of bit j of h (lower for 0) and sends the
// other half of its partial sums to h ^ 2^j, which sends its own partials of
// h's half; h adds them. After the last level h holds the sum of one block
// (its own), every node of the tree of comm/rank_order_sum.h added on the
// way: level j adds subtrees of 2^j leaves, the pair folds are the leaves.
// All-gather, level j = log2(P)-1..0: the reverse; h sends its range after
// reduce level j to h ^ 2^j once all of it is final, and the whole sum to its
// folded member once it has it.
//
// A partial piece is sent as soon as the level before summed it, so the
// reduce-scatter's levels overlap. Pieces of one partner
// and stage that become ready together (a level's half of a small buffer:
// many blocks of a few floats) leave as one message of at most
// piece_floats floats, so a member sends about 2 log2(P) messages a round
// when the buffer fits a piece, not 2(P - 1). Every piece carries
// its stage (ChunkHeader::stage): 0 the fold, 1 + j level j, in both
// directions (kind kHalvingReduce or kHalvingGather). Partial pieces carry
// their subtree's sample count, final pieces the round's total.
// Private to exchange/.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "exchange/plan.h"
#include "exchange/round_schedule.h"
#include "exchange/schedule.h"

namespace dctrain {

class HalvingRound final : public RoundSchedule {
 public:
  HalvingRound(const RoundInputs& in, PieceSink& sink, ExchangeStats& stats,
               Clock::time_point start);
  HalvingRound(const HalvingRound&) = delete;
  HalvingRound& operator=(const HalvingRound&) = delete;

  void send_contribution() override;
  bool is_other_member(uint32_t rank) const override;
  std::optional<std::string> take(const ChunkHeader& h, zmq::message_t&& payload) override;
  bool complete() const override { return finals_missing_ == 0; }
  const std::string& conflict() const override { return first_conflict_; }
  bool usable() const override { return !unusable_; }
  std::optional<Clock::time_point> all_heard() const override { return all_heard_; }
  std::vector<std::string> digests() override;
  const ExchangeRound& id() const override { return id_; }
  std::span<const uint32_t> members() const override { return members_; }
  Clock::time_point start() const override { return start_; }
  uint64_t length() const override { return blocks_.length(); }
  size_t pieces_received_at_most() const override;
  std::pair<size_t, size_t> contribution_pieces_missing(uint32_t rank) const override;
  std::pair<size_t, size_t> result_pieces_missing(uint32_t rank) const override;
  void release_inputs() override;
  void settle(ExchangeOutcome& out) override;

 private:
  // What one partner (by stage) owes this member, and what came.
  struct Link {
    size_t position = 0;
    std::vector<size_t>
        reduce_pieces;  // global piece ids it sends partials (or its contribution) of
    std::vector<size_t> gather_pieces;       // ... final pieces of
    std::optional<uint64_t> reduce_samples;  // its subtree's count (or its own, folded)
    bool heard = false;
  };
  struct Received {
    std::vector<bool> reduce, gather;  // by index into the link's lists
  };

  size_t position_of(uint32_t rank) const;
  size_t piece_count() const { return piece_first_.back(); }
  PieceRange piece_range(size_t g) const;
  size_t block_of(size_t g) const;
  // The global id of the piece of `block` at offset/count, if it is one.
  std::optional<size_t> piece_at(size_t block, uint64_t offset, uint64_t count) const;
  ChunkHeader header(PieceKind kind, size_t stage, size_t g, uint64_t samples) const;
  // The pieces of `expected` (a link's list) a message at offset/count
  // holds: the index of the first and how many, if it tiles them.
  std::optional<std::pair<size_t, size_t>> find_pieces(const std::vector<size_t>& expected,
                                                       const std::vector<bool>& in, uint64_t offset,
                                                       uint64_t count) const;
  // The pieces held by send_piece() out as messages.
  void flush_sends();
  // Where this halver's partial sums through `level` are.
  const float* partial(size_t level) const;
  void send_piece(size_t to_position, PieceKind kind, size_t stage, size_t g, const float* data,
                  uint64_t samples);
  void record_conflict(size_t from, uint32_t rank, const std::string& why);
  // Piece g's partial sum through level `level` is ready here: send it on or
  // sum it with the partner's.
  void partial_ready(size_t g, size_t level);
  void try_sum(size_t g, size_t level);
  // A piece of the sum is final here, known since gather level `level`
  // (levels: summed here): each range below it that is now whole goes to its
  // partner, the whole sum to the folded member.
  void final_ready(size_t level);
  uint64_t subtree_samples(size_t level) const;

  ExchangeRound id_;
  std::span<const uint32_t> members_;
  uint32_t rank_;
  uint64_t digest_;
  HalvingLayout layout_;
  ExchangePlan blocks_;
  std::vector<size_t> piece_first_;  // per block, its first global piece id; then the total
  size_t me_ = 0;
  std::optional<size_t> halver_;  // this member's halver number (none if folded)
  std::optional<size_t> folded_;  // the position of this halver's folded member, if any
  std::span<const float> contribution_;
  uint64_t own_samples_;
  std::span<float> result_;
  std::optional<SumDigestKind> sum_digest_;
  PieceSink& sink_;
  ExchangeStats& stats_;
  Clock::time_point start_;

  std::vector<Link> links_;         // by stage
  std::vector<bool> has_link_;      // a partner at that stage
  std::vector<Received> received_;  // by stage
  // Per piece: the level whose partial is ready here (-1: none yet), the
  // partners' partials that came before ours was ready (by level).
  std::vector<int> ready_level_;
  struct Kept {
    size_t level = 0;
    std::shared_ptr<zmq::message_t> message;  // shared by the pieces it holds
    size_t at = 0;                            // the piece's first byte in it
    const std::byte* bytes() const { return static_cast<const std::byte*>(message->data()) + at; }
  };
  std::vector<std::vector<Kept>> kept_;
  // Pieces ready to go, in the order they became ready.
  struct Outgoing {
    size_t to = 0;  // position
    PieceKind kind = PieceKind::kHalvingReduce;
    size_t stage = 0;
    size_t piece = 0;
    const float* base = nullptr;
    uint64_t samples = 0;
  };
  std::vector<Outgoing> outgoing_;
  size_t own_summed_ = 0;  // pieces of this halver's block summed to the root
  // Per level j: the pieces of the range gather level j sends not final yet.
  std::vector<size_t> gather_missing_;
  size_t finals_missing_ = 0;
  size_t heard_ = 0;  // links heard from
  std::optional<Clock::time_point> all_heard_;
  std::optional<uint64_t> total_samples_;  // the round's, from the root or a final piece
  std::vector<bool> conflict_;
  std::string first_conflict_;
  bool unusable_ = false;
  bool digested_ = false;
};

}  // namespace dctrain
