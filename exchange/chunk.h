// The header that travels in front of every piece of the data plane: which
// round (run, step and attempt) it belongs to, who sent it, which part of the
// buffer it holds and among which members the round runs. A fixed layout of
// little-endian integers, so a receiver checks a piece without parsing
// anything else, and a piece of another round is never summed.
#pragma once

#include <array>
#include <bit>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace dctrain {

static_assert(std::endian::native == std::endian::little,
              "the data plane sends floats and headers as little-endian bytes");

// One allreduce: the step it serves, the attempt (a step whose exchange
// failed is redone under the next attempt) and the run: the coordinator
// process that planned it (its start time), so that after a coordinator is
// restarted from a checkpoint, and its steps count again from there, no
// piece of the earlier process's rounds is taken for one of the new
// process's. Rounds are ordered by run, then step, then attempt, so a piece
// of an earlier round is recognised as stale and one of a later round is
// kept until that round begins.
struct ExchangeRound {
  uint64_t step = 0;
  uint32_t attempt = 0;
  uint64_t run = 0;
  std::strong_ordering operator<=>(const ExchangeRound& other) const {
    if (const auto by_run = run <=> other.run; by_run != 0) return by_run;
    if (const auto by_step = step <=> other.step; by_step != 0) return by_step;
    return attempt <=> other.attempt;
  }
  bool operator==(const ExchangeRound&) const = default;
};

enum class PieceKind : uint8_t {
  // The direct schedule (exchange/mesh_round.h):
  kContribution = 1,  // a member's own values, sent to the owner of the shard
  kResult = 2,        // the owner's sum over every member, sent to every member
  // The halving schedule (exchange/halving_round.h), with a stage:
  kHalvingReduce = 3,  // a contribution or partial sum, on its way to the block's owner
  kHalvingGather = 4,  // a piece of the whole sum, on its way to every member
};

inline bool halving_piece(PieceKind kind) {
  return kind == PieceKind::kHalvingReduce || kind == PieceKind::kHalvingGather;
}

struct ChunkHeader {
  PieceKind kind = PieceKind::kContribution;
  uint32_t from = 0;            // sender's rank
  uint32_t members = 0;         // members in the round
  uint64_t members_digest = 0;  // members_digest() of the round's member list
  ExchangeRound round;
  uint64_t length = 0;        // floats in the whole buffer
  uint32_t piece_floats = 0;  // the largest piece, in floats
  uint64_t offset = 0;        // first float of this piece in the buffer
  uint64_t count = 0;         // floats in this piece (the payload frame's bytes / 4)
  // Contribution: the sender's sample count. Result: the round's total.
  // Halving: the sender's subtree's count on the way in, the total on the
  // way out.
  uint64_t samples = 0;
  uint8_t stage = 0;  // halving: 0 the fold, 1 + j level j; direct: 0
};

inline constexpr uint32_t kChunkMagic = 0x58454344;  // "DCEX"
inline constexpr uint16_t kChunkVersion = 3;
inline constexpr size_t kChunkHeaderBytes = 80;
// A member's connection token (ExchangePeer::token()): the digest of the
// secret its connections carry, as its hello and the plans name it.
inline constexpr size_t kExchangeTokenBytes = 16;

std::array<std::byte, kChunkHeaderBytes> encode_header(const ChunkHeader& header);

// The header in `bytes`, or why it is not one (`why` is set then).
std::optional<ChunkHeader> parse_header(std::span<const std::byte> bytes, std::string& why);

// A 64-bit digest of an ordered member list: peers that disagree on the
// members of a round would cut the buffer differently.
uint64_t members_digest(std::span<const uint32_t> members);

}  // namespace dctrain
