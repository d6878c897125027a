// One round of an exchange schedule on one member, without a transport: the
// seam between the algorithm and ExchangePeer's sockets. The round hands the
// pieces it sends to a PieceSink and takes the pieces the transport
// received; the transport has checked that a piece comes from the member it
// names (its connection's secret, its key). Two schedules implement it:
//   - direct (exchange/mesh_round.h): every member sends every other its
//     shard, owners sum and send back; 2 hops, N - 1 peers per member;
//   - halving (exchange/halving_round.h): recursive halving, then doubling;
//     2 log2(N) hops, log2(N) peers per member (one more where N is not a
//     power of two).
// Both end with the same bits (comm/rank_order_sum.h). Tests run several
// rounds over a queue in memory (tests/exchange/*_round_test.cc). Private to
// exchange/.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "exchange/chunk.h"
#include "exchange/peer.h"

namespace dctrain {

inline std::string describe_round(const ExchangeRound& round) {
  return fmt::format("step {}, attempt {}, run {}", round.step, round.attempt, round.run);
}

// Where a round's pieces go.
class PieceSink {
 public:
  virtual ~PieceSink() = default;
  // A piece for member `to`: `header`, and `header.count` floats at `data`,
  // which stay valid until the round has ended.
  virtual void send(uint32_t to, const ChunkHeader& header, const float* data) = 0;
};

// What ExchangePeer asks of a round, whichever the schedule.
class RoundSchedule {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~RoundSchedule() = default;

  // This member's first pieces out (alone: the sum is its contribution, at once).
  virtual void send_contribution() = 0;
  // Whether `rank` may send this member pieces in this round.
  virtual bool is_other_member(uint32_t rank) const = 0;
  // A piece of this round from another member (h.from), summed or kept and
  // sent on as the schedule says. What does not fit the round is a conflict
  // (conflict()); why a duplicate is refused comes back.
  virtual std::optional<std::string> take(const ChunkHeader& h, zmq::message_t&& payload) = 0;

  // The whole sum is here.
  virtual bool complete() const = 0;
  // The first piece that did not fit the round ("rank R: why"), if any.
  virtual const std::string& conflict() const = 0;
  // Every value of the sum summed here or received passed usable().
  virtual bool usable() const = 0;
  // When every member this one hears from had been heard from: by then
  // every member of the round has finished computing.
  virtual std::optional<Clock::time_point> all_heard() const = 0;
  // Once the round is complete, and once: the sum's shard digests
  // (exchange/sum_digest.h: the direct schedule's shards, on every schedule).
  virtual std::vector<std::string> digests() = 0;

  virtual const ExchangeRound& id() const = 0;
  virtual std::span<const uint32_t> members() const = 0;
  virtual Clock::time_point start() const = 0;
  // The round's length in floats, and the pieces one member receives in it
  // at most: the bounds on what a later round may park here.
  virtual uint64_t length() const = 0;
  virtual size_t pieces_received_at_most() const = 0;
  // For a failure's text: the pieces `rank` owed this member on the way to
  // the sum (contributions, partial sums) not in, of how many; and of the
  // sum itself.
  virtual std::pair<size_t, size_t> contribution_pieces_missing(uint32_t rank) const = 0;
  virtual std::pair<size_t, size_t> result_pieces_missing(uint32_t rank) const = 0;

  // The kept copies of the other members' pieces let go.
  virtual void release_inputs() = 0;
  // The sample counts into `out` (samples, member_samples), with who is
  // missing or in conflict (missing_contributions, missing_results,
  // conflicting); a total that differs makes the round incomplete.
  virtual void settle(ExchangeOutcome& out) = 0;
};

// Why a piece of this round from another member does not fit the round as
// this member runs it (another schedule, member list, length, piece size, or
// a payload that is not its count of floats), or nothing: the checks both
// schedules make before they look at where the piece goes.
std::optional<std::string> round_mismatch(const ChunkHeader& h, size_t payload_bytes,
                                          std::span<const uint32_t> members, uint64_t digest,
                                          uint64_t length, uint64_t piece_floats, bool halving);

// Everything a round is made of.
struct RoundInputs {
  ExchangeRound id;
  std::span<const uint32_t> members;  // ascending, `rank` among them
  uint32_t rank = 0;
  std::span<const float> contribution;
  uint64_t samples = 0;
  std::span<float> result;  // as long as contribution; may be its memory
  size_t piece_floats = 0;
  std::optional<SumDigestKind> digest = SumDigestKind::kBlake2b;  // none: no digests
};

// The round of `schedule` over `in`.
std::unique_ptr<RoundSchedule> make_round(ExchangeSchedule schedule, const RoundInputs& in,
                                          PieceSink& sink, ExchangeStats& stats,
                                          std::chrono::steady_clock::time_point start);

}  // namespace dctrain
