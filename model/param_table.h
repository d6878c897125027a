// The one layout of a model's trainable state.
//
// Parameters, gradients and each optimizer state are one contiguous float
// buffer apiece (an Arena), all laid out by the same ParamTable: entry i lives
// at [offset, offset + count) in every one of them. Layers keep entry indices
// and ask an arena for views; nobody does pointer arithmetic by hand. Zeroing,
// the optimizer, checksums, checkpoints and the network work on the flat span.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dctrain {

struct ParamEntry {
  std::string name;   // e.g. "stage1.block0.conv1.weight"
  size_t offset = 0;  // in floats, from the start of the arena
  size_t count = 0;   // product of shape
  std::vector<int64_t> shape;
};

class ParamTable {
 public:
  // Appends a tensor right after the previous one (no padding, so the arena's
  // size is exactly the parameter count). Names must be unique.
  size_t add(std::string name, std::vector<int64_t> shape);

  const ParamEntry& operator[](size_t index) const { return entries_[index]; }
  // The entry with this name, or nullptr.
  const ParamEntry* find(std::string_view name) const;
  std::span<const ParamEntry> entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  // Floats in an arena laid out by this table.
  size_t total() const { return total_; }

 private:
  std::vector<ParamEntry> entries_;
  size_t total_ = 0;
};

// One contiguous float buffer laid out by a ParamTable. The table must
// outlive the arena.
class Arena {
 public:
  explicit Arena(const ParamTable& table) : table_(&table), data_(table.total(), 0.0f) {}

  std::span<float> flat() { return data_; }
  std::span<const float> flat() const { return data_; }
  std::span<float> view(size_t index) {
    const ParamEntry& e = (*table_)[index];
    return std::span<float>(data_).subspan(e.offset, e.count);
  }
  std::span<const float> view(size_t index) const {
    const ParamEntry& e = (*table_)[index];
    return std::span<const float>(data_).subspan(e.offset, e.count);
  }
  const ParamTable& table() const { return *table_; }
  void zero();
  // Trades this arena's buffer for `other`, which must hold as many floats:
  // views taken afterwards see the other buffer (nobody keeps a view across
  // calls). The worker holds a computed gradient this way while the next
  // step's is zeroed beside it.
  void swap_storage(std::vector<float>& other);

 private:
  const ParamTable* table_;
  std::vector<float> data_;
};

// A fast 64-bit hash of the raw bytes: equal checksums mean bit-identical arenas
// (with overwhelming probability).
uint64_t checksum(std::span<const float> values);

// The replicas' checksum of their parameters: checksum() of each block of
// kChecksumBlockFloats, combined in order (combine_block_checksums), so that
// a pass that writes the arena block by block (the optimizer's) hashes each
// block while it is in cache, on whichever thread wrote it, and gets the
// same value as this function over the finished arena.
inline constexpr size_t kChecksumBlockFloats = 16384;
inline size_t checksum_blocks(size_t floats) {
  return (floats + kChecksumBlockFloats - 1) / kChecksumBlockFloats;
}
uint64_t block_checksum(std::span<const float> values);
// `blocks[b]`: checksum() of block b of an arena of `floats` floats.
uint64_t combine_block_checksums(std::span<const uint64_t> blocks, size_t floats);

}  // namespace dctrain
