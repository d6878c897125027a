// The state of one round on an ExchangePeer (exchange/peer.h), shared by
// the peer's transport side (peer.cc: pieces queued, accepted, summed) and
// its round driver (peer_round.cc: exchange()). Private to exchange/.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "exchange/peer.h"
#include "exchange/sum_digest.h"

namespace dctrain {

using Clock = std::chrono::steady_clock;

inline std::string describe_round(const ExchangeRound& round) {
  return fmt::format("step {}, attempt {}, run {}", round.step, round.attempt, round.run);
}

// The state of one round on this peer.
struct ExchangePeer::Round {
  Round(const ExchangeRound& id_, std::span<const uint32_t> members_, uint64_t length,
        uint64_t piece_floats, uint32_t rank)
      : id(id_),
        members(members_),
        digest(members_digest(members_)),
        plan(length, members_.size(), piece_floats) {
    const size_t n = members.size();
    me = position_of(rank);
    inputs.resize(plan.pieces(me));
    for (auto& piece : inputs) piece.resize(n);
    input_in.assign(plan.pieces(me), std::vector<bool>(n, false));
    inputs_in.assign(plan.pieces(me), 0);
    result_in.resize(n);
    results_missing.assign(n, 0);
    for (size_t p = 0; p < n; ++p) {
      if (p == me) continue;
      result_in[p].assign(plan.pieces(p), false);
      results_missing[p] = plan.pieces(p);
      results_missing_total += plan.pieces(p);
    }
    member_samples.assign(n, std::nullopt);
    unheard = n - 1;
    result_samples.assign(n, std::nullopt);
    conflict.assign(n, false);
  }

  // Position of `rank` among the members, or members.size() if it is none.
  size_t position_of(uint32_t rank) const {
    auto it = std::lower_bound(members.begin(), members.end(), rank);
    return (it != members.end() && *it == rank) ? static_cast<size_t>(it - members.begin())
                                                : members.size();
  }
  bool reduced_all() const { return pieces_reduced == inputs.size(); }
  // The header of a piece `p` of this round from `from` (`samples`: its
  // contribution's, or the summed total of a result piece).
  ChunkHeader header(PieceKind kind, uint32_t from, const PieceRange& p, uint64_t samples) const {
    return ChunkHeader{kind,
                       from,
                       static_cast<uint32_t>(members.size()),
                       digest,
                       id,
                       plan.length(),
                       static_cast<uint32_t>(plan.piece_floats()),
                       p.offset,
                       p.count,
                       samples};
  }
  bool complete() const { return reduced_all() && results_missing_total == 0; }

  ExchangeRound id;
  std::span<const uint32_t> members;
  uint64_t digest;
  ExchangePlan plan;
  size_t me = 0;
  std::span<const float> contribution;
  std::span<float> result;
  uint64_t own_samples = 0;
  ExchangeStats* stats = nullptr;
  Clock::time_point start;

  // This peer's shard: per piece, each member's copy (this peer's own slot
  // unused: it reads its contribution in place) and how many are in.
  std::vector<std::vector<zmq::message_t>> inputs;
  std::vector<std::vector<bool>> input_in;
  std::vector<size_t> inputs_in;
  size_t pieces_reduced = 0;
  // The other shards: which summed pieces have arrived from their owners.
  std::vector<std::vector<bool>> result_in;
  std::vector<size_t> results_missing;
  size_t results_missing_total = 0;

  std::vector<std::optional<uint64_t>> member_samples;  // from their contribution pieces
  size_t unheard = 0;  // other members none of whose contribution pieces is in yet
  std::optional<Clock::time_point> all_heard;  // when the last of them was heard from
  std::vector<std::optional<uint64_t>> result_samples;  // the totals the owners reported
  std::vector<bool> conflict;
  std::string first_conflict;
  // The sum's digests, taken as its pieces land (ExchangeOptions::digest_sum).
  std::optional<ShardDigester> digester;
  // A piece of the result (summed here or received) held a value that is not
  // usable().
  bool unusable = false;
};

}  // namespace dctrain
