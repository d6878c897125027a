#include "model/param_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <stdexcept>

#include "common/random.h"

namespace dctrain {

size_t ParamTable::add(std::string name, std::vector<int64_t> shape) {
  if (find(name) != nullptr) {
    throw std::invalid_argument("parameter table: duplicate tensor name '" + name + "'");
  }
  if (shape.empty() || std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d <= 0; })) {
    throw std::invalid_argument("parameter table: tensor '" + name +
                                "' needs a non-empty shape of positive sizes");
  }
  const auto count = static_cast<size_t>(
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>()));
  entries_.push_back(ParamEntry{std::move(name), total_, count, std::move(shape)});
  total_ += count;
  return entries_.size() - 1;
}

const ParamEntry* ParamTable::find(std::string_view name) const {
  for (const ParamEntry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

void Arena::zero() {
  std::fill(data_.begin(), data_.end(), 0.0f);
}

void Arena::swap_storage(std::vector<float>& other) {
  if (other.size() != data_.size()) {
    throw std::invalid_argument(fmt::format(
        "Arena::swap_storage: a buffer of {} floats for an arena of {}", other.size(),
        data_.size()));
  }
  data_.swap(other);
}

uint64_t checksum(std::span<const float> values) {
  // Four independent multiply-xor lanes over 64-bit words, so the checksum of
  // a 17 MB arena costs about a millisecond; then the lanes and tail are mixed.
  const size_t bytes = values.size_bytes();
  const auto* base = reinterpret_cast<const unsigned char*>(values.data());
  uint64_t lane[4] = {0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL, 0xa4093822299f31d0ULL,
                      0x082efa98ec4e6c89ULL};
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t word;
      std::memcpy(&word, base + i + 8 * k, 8);
      lane[k] = (lane[k] ^ word) * kPrime;
    }
  }
  uint64_t h = bytes;
  for (uint64_t l : lane) h = mix64(h ^ mix64(l));
  for (; i < bytes; ++i) h = (h ^ base[i]) * kPrime;
  return mix64(h);
}

uint64_t block_checksum(std::span<const float> values) {
  std::vector<uint64_t> blocks(checksum_blocks(values.size()));
  for (size_t b = 0; b < blocks.size(); ++b) {
    const size_t begin = b * kChecksumBlockFloats;
    blocks[b] = checksum(values.subspan(begin, std::min(kChecksumBlockFloats, values.size() - begin)));
  }
  return combine_block_checksums(blocks, values.size());
}

uint64_t combine_block_checksums(std::span<const uint64_t> blocks, size_t floats) {
  uint64_t h = mix64(floats ^ 0x9e3779b97f4a7c15ULL);
  for (uint64_t b : blocks) h = mix64(h ^ b);  // in order: mix64 does not commute with ^
  return h;
}

}  // namespace dctrain
