#include "exchange/plan.h"

#include <algorithm>
#include <stdexcept>

namespace dctrain {

ExchangePlan::ExchangePlan(uint64_t length, size_t members, uint64_t piece_floats)
    : length_(length), members_(members), piece_floats_(piece_floats) {
  if (members == 0) throw std::invalid_argument("exchange plan: a round needs at least one member");
  if (piece_floats == 0) throw std::invalid_argument("exchange plan: pieces must hold a float");
}

uint64_t ExchangePlan::shard_begin(size_t shard) const {
  const uint64_t base = length_ / members_;
  const uint64_t longer = length_ % members_;  // the first `longer` shards get one more float
  return shard * base + std::min<uint64_t>(shard, longer);
}

size_t ExchangePlan::pieces(size_t shard) const {
  const uint64_t n = shard_end(shard) - shard_begin(shard);
  return n == 0 ? 1 : static_cast<size_t>((n + piece_floats_ - 1) / piece_floats_);
}

PieceRange ExchangePlan::piece(size_t shard, size_t index) const {
  const uint64_t begin = shard_begin(shard) + index * piece_floats_;
  const uint64_t end = std::min(shard_end(shard), begin + piece_floats_);
  return {begin, end - begin};
}

std::optional<size_t> ExchangePlan::piece_at(size_t shard, uint64_t offset, uint64_t count) const {
  const uint64_t begin = shard_begin(shard);
  if (offset < begin || offset > shard_end(shard)) return std::nullopt;
  if ((offset - begin) % piece_floats_ != 0) return std::nullopt;
  const auto index = static_cast<size_t>((offset - begin) / piece_floats_);
  if (index >= pieces(shard)) return std::nullopt;
  const PieceRange p = piece(shard, index);
  if (p.offset != offset || p.count != count) return std::nullopt;
  return index;
}

}  // namespace dctrain
