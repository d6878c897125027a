#include "exchange/schedule.h"

#include <bit>

namespace dctrain {

HalvingLayout::HalvingLayout(size_t n)
    : members(n),
      halvers(std::bit_floor(n)),
      extra(n - std::bit_floor(n)),
      levels(static_cast<size_t>(std::countr_zero(std::bit_floor(n)))) {}

std::optional<size_t> HalvingLayout::halver(size_t position) const {
  if (position < 2 * extra) {
    if (position % 2 == 1) return std::nullopt;
    return position / 2;
  }
  return position - extra;
}

size_t HalvingLayout::range_first(size_t h, size_t level) const {
  size_t first = 0;
  for (size_t i = 0; i < level; ++i) {
    if ((h >> i) & 1) first += halvers >> (i + 1);
  }
  return first;
}

std::vector<std::optional<size_t>> HalvingLayout::partners(size_t position) const {
  std::vector<std::optional<size_t>> out(levels + 1);
  const std::optional<size_t> h = halver(position);
  if (!h) {
    out[0] = position - 1;  // a folded member knows only its halver
    return out;
  }
  if (*h < extra) out[0] = position + 1;
  for (size_t j = 0; j < levels; ++j) out[1 + j] = this->position(*h ^ (size_t{1} << j));
  return out;
}

std::optional<size_t> HalvingLayout::stage_between(size_t a, size_t b) const {
  const auto ha = halver(a), hb = halver(b);
  if (!ha || !hb) {
    // A folded member exchanges with its halver only.
    const size_t low = a < b ? a : b;
    if (b == a + 1 || a == b + 1) {
      if (low % 2 == 0 && low + 1 < 2 * extra) return 0;
    }
    return std::nullopt;
  }
  const size_t x = *ha ^ *hb;
  if (!std::has_single_bit(x)) return std::nullopt;
  return 1 + static_cast<size_t>(std::countr_zero(x));
}

size_t HalvingLayout::wait_order(size_t stage, bool gathering) const {
  if (!gathering) return stage;
  if (stage == 0) return 2 * levels + 1;
  return 2 * levels + 1 - stage;  // level j (stage 1 + j) gathers at 2 levels - j
}

}  // namespace dctrain
