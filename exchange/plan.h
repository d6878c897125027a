// How one round cuts the buffer: shard i (owned by the i-th member in rank
// order) is a contiguous range, the first length % members shards one float
// longer than the rest; each shard goes on the wire as pieces of at most
// piece_floats floats. A shard may be empty (a buffer shorter than the
// member count); it still has one piece, of no floats, so every member
// hears from every other member in both phases of every round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace dctrain {

struct PieceRange {
  uint64_t offset = 0;  // first float in the buffer
  uint64_t count = 0;   // floats
};

class ExchangePlan {
 public:
  // `members` >= 1, `piece_floats` >= 1.
  ExchangePlan(uint64_t length, size_t members, uint64_t piece_floats);

  uint64_t length() const { return length_; }
  size_t members() const { return members_; }
  uint64_t piece_floats() const { return piece_floats_; }

  uint64_t shard_begin(size_t shard) const;
  uint64_t shard_end(size_t shard) const { return shard_begin(shard + 1); }
  // Pieces of `shard` (at least one).
  size_t pieces(size_t shard) const;
  PieceRange piece(size_t shard, size_t index) const;
  // The index of the piece of `shard` that is exactly [offset, offset + count),
  // or nothing when no piece of the shard is.
  std::optional<size_t> piece_at(size_t shard, uint64_t offset, uint64_t count) const;

 private:
  uint64_t length_;
  size_t members_;
  uint64_t piece_floats_;
};

}  // namespace dctrain
